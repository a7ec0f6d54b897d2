//! Two tenants whose VMs share partition 1 (step clock: nothing moves but
//! what the tenants do). Tenant A's requests — marked ranges, the range
//! rows, sampling and RI sessions, their ids — get byte-identical answers
//! whether tenant B is idle or holds everything it can: the range
//! registers, a faster sampler, RI control blocks. B gets no more than
//! its VM's share of the partition's registers and of the device's RI
//! blocks (ENOSPC past it), so A still gets its own.

use std::path::Path;

use gpupm_client::TenantClient;
use gpupm_test_support::scenario::shared_gemm_partition_with;
use gpupm_test_support::users::{errno_of, run_as, spawn_as, Cred};
use gpupm_uapi::ranges::range_event;
use gpupm_uapi::tenant::ranges::{range_kind, range_trigger, AddRange};
use gpupm_uapi::tenant::ri::{ri_session_mode, OpenRi};
use gpupm_uapi::tenant::sampling::{sample_kind, MIN_SAMPLE_PERIOD};
use gpupm_uapi::tenant::{scope, OpenSampling, TENANT_IOC_OPEN_SAMPLING, TENANT_STRUCT_VERSION};
use serde_json::{json, Value};
use zerocopy::IntoBytes;

use crate::fixture::{System, ATTACKER as A, NEIGHBOUR as B};

/// Contexts of VM 2: more than the device has RI blocks.
const B_CONTEXTS: u32 = 70;

/// VM 1 with two contexts, VM 2 with [`B_CONTEXTS`], on partition 1.
fn scenario() -> String {
    let mut contexts = String::from(
        "[[context]]\nvm = 1\nprofile = \"g\"\n[[context]]\nvm = 1\nprofile = \"g\"\n",
    );
    for _ in 0..B_CONTEXTS {
        contexts.push_str("[[context]]\nvm = 2\nprofile = \"g\"\n");
    }
    shared_gemm_partition_with(&contexts)
}

const LIMITS: &str = "[limits]\nri_sessions_per_uid = 64\n";

fn range(ctx: u32, threshold: u32) -> AddRange {
    AddRange {
        version: TENANT_STRUCT_VERSION,
        ctx,
        kind: range_kind::CODE,
        event: range_event::CYCLES,
        trigger: range_trigger::COUNT,
        threshold,
        kernel: 1,
        ..AddRange::default()
    }
}

fn ri(ctx: u32) -> OpenRi {
    OpenRi {
        version: TENANT_STRUCT_VERSION,
        ctx,
        mode: ri_session_mode::CYCLE,
        sf: 1000,
        buffer_groups: 64,
        ..OpenRi::default()
    }
}

fn sampling(ctx: u32, period: u32) -> OpenSampling {
    OpenSampling {
        version: TENANT_STRUCT_VERSION,
        scope: scope::CONTEXT,
        id: ctx,
        kinds: u32::from(sample_kind::ALL),
        period,
        branch_every: 64,
        ..OpenSampling::default()
    }
}

/// The contexts of `vm` the device runs, as its tenant lists them.
fn contexts_of(c: &TenantClient, vm: u32) -> Vec<u32> {
    c.list_contexts(vm)
        .expect("own VM")
        .iter()
        .map(|e| e.ctx)
        .collect()
}

/// Tenant A's requests and every byte of their answers.
fn a_answers(node: &Path) -> Value {
    let node = node.to_owned();
    run_as(&Cred::user(A), move || {
        let c = TenantClient::open(&node).expect("open");
        let ctx = contexts_of(&c, 1)[0];
        let mut out = Vec::new();
        for threshold in [100, 200, 100] {
            let added = c.add_range(&range(ctx, threshold)).expect("A's range");
            out.push(json!(["add_range", added.as_bytes()]));
        }
        let rows = c.read_ranges(ctx).expect("A's rows");
        out.push(json!(["read_ranges", rows.as_bytes()]));
        let mut held = Vec::new();
        for period in [4096, 8192] {
            let h = TenantClient::open(&node).expect("open");
            let mut arg = sampling(ctx, period);
            h.call("sampling", TENANT_IOC_OPEN_SAMPLING, &mut arg)
                .expect("A's sampling session");
            out.push(json!(["open_sampling", arg.as_bytes()]));
            held.push(h);
        }
        let h = TenantClient::open(&node).expect("open");
        let opened = h.open_ri(&ri(ctx)).expect("A's RI session");
        out.push(json!(["open_ri", opened.as_bytes()]));
        let status = h.ri_status().expect("status");
        out.push(json!(["ri_status", status.as_bytes()]));
        json!(out)
    })
}

#[test]
fn a_tenants_answers_are_byte_identical_whether_or_not_its_co_tenant_holds_everything() {
    let _machine = crate::fixture::sharing();
    let mut alone = System::start(scenario(), "step", LIMITS);
    let quiet = a_answers(&alone.node());
    alone.daemon.stop();

    let mut busy = System::start(scenario(), "step", LIMITS);
    let node = busy.node();
    let mut b = spawn_as(&Cred::user(B), move |ctl| {
        let c = TenantClient::open(&node).expect("open");
        let ctxs = contexts_of(&c, 2);
        // Every register it can take, each with another programming.
        let mut ranges = 0u32;
        let ranges_errno = loop {
            match c.add_range(&range(ctxs[ranges as usize % ctxs.len()], 100 + ranges)) {
                Ok(_) => ranges += 1,
                Err(e) => break errno_of::<()>(&Err(e)),
            }
        };
        // A's programming too (a register B's VM holds for itself).
        let same = c.add_range(&range(ctxs[0], 100));
        // A faster sampler than A's on the same partition.
        let fast = TenantClient::open(&node).expect("open");
        let mut arg = sampling(ctxs[0], MIN_SAMPLE_PERIOD);
        fast.call("sampling", TENANT_IOC_OPEN_SAMPLING, &mut arg)
            .expect("B's sampling session");
        // An RI session on every context it can.
        let mut ri_held = Vec::new();
        let mut ri_errno = 0;
        for &ctx in &ctxs {
            let h = TenantClient::open(&node).expect("open");
            match h.open_ri(&ri(ctx)) {
                Ok(_) => ri_held.push(h),
                Err(e) => {
                    ri_errno = errno_of::<()>(&Err(e));
                    break;
                }
            }
        }
        ctl.ready();
        ctl.wait_go();
        json!({ "ranges": ranges, "ranges_errno": ranges_errno, "same_ok": same.is_ok(),
                "ri": ri_held.len(), "ri_errno": ri_errno })
    });
    b.wait_ready();
    let loud = a_answers(&busy.node());
    b.go();
    let held = b.finish();
    eprintln!("B held {held}");
    assert_eq!(quiet, loud, "A's answers depend on what B does");
    // B got its VM's share: half the partition's 8 registers, half the
    // device's 64 RI blocks.
    assert_eq!(
        held,
        json!({ "ranges": 4, "ranges_errno": libc::ENOSPC, "same_ok": true,
                "ri": 32, "ri_errno": libc::ENOSPC })
    );
    busy.daemon.stop();
}
