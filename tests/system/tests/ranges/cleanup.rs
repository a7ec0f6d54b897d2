//! Clean-up of marked ranges (docs/ranges.md, "Clean-up"): a context
//! destroyed while it holds ranges, and a device reset, each leave every
//! range register of the partition disarmed (read through the device
//! node), the old ranges gone for their tenant with the documented error,
//! and every register free again. Each VM on the partition arms at most its
//! share of the eight (four each here): the other tenant gets its own share
//! while the first holds all of its.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpupm_client::{DevNode, TenantClient};
use gpupm_test_support::device::step;
use gpupm_test_support::process::Proc;
use gpupm_test_support::scenario::{shared_gemm_partition_with, STEP};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, Cred};
use gpupm_test_support::{wait_until, Driver, DriverOptions, Scratch};
use gpupm_uapi::ranges::RANGES_PER_PARTITION;
use gpupm_uapi::regs as r;
use serde_json::{json, Value};

use crate::fixture::{registers, store_range, tenants, UID_A, UID_B};

/// Partition 1 shared by VM 1 (tenant A) and VM 2 (tenant B), one GEMM
/// context each; A's is destroyed at `destroy_at` cycles, if given.
fn scenario(destroy_at: Option<u64>) -> String {
    let destroy = destroy_at.map_or(String::new(), |c| format!("destroy_at_cycles = {c}\n"));
    shared_gemm_partition_with(&format!(
        "[[context]]\nvm = 1\nprofile = \"g\"\n{destroy}\
         [[context]]\nvm = 2\nprofile = \"g\"\n"
    ))
}

struct Rig {
    _tmp: Scratch,
    driver: Driver,
    dev: DevNode,
    daemon: Proc,
    node: PathBuf,
    /// A's context, B's context.
    a: u32,
    b: u32,
}

impl Rig {
    fn start(name: &str, destroy_at: Option<u64>) -> Rig {
        let tmp = Scratch::new(name);
        let driver = Driver::start_in(&tmp, DriverOptions::system(scenario(destroy_at)));
        let dev = driver.node();
        let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
        daemon.wait_for("READY=1");
        for _ in 0..4 {
            step(&dev, STEP, &mut daemon);
        }
        let ctx_of = |vm| {
            (1..r::MAX_CONTEXTS)
                .find(|&c| {
                    dev.read32(r::ctx(c, r::CTX_STATE)).ok() == Some(r::ctx_state::ACTIVE)
                        && dev.read32(r::ctx(c, r::CTX_VM)).ok() == Some(vm)
                })
                .unwrap_or_else(|| panic!("no context of VM {vm}"))
        };
        let (a, b) = (ctx_of(1), ctx_of(2));
        let node = tmp.join("tenant").join("node");
        Rig {
            _tmp: tmp,
            driver,
            dev,
            daemon,
            node,
            a,
            b,
        }
    }

    /// `RANGE_CTRL` of every range register of partition 1.
    fn ctrls(&self) -> Vec<u64> {
        registers(&self.dev).into_iter().step_by(4).collect()
    }

    fn stop(mut self) {
        self.daemon.stop();
        self.driver.stop();
    }
}

/// Each VM's share of the partition's registers: two VMs, four each.
const SHARE: u32 = RANGES_PER_PARTITION / 2;

/// `uid` takes its VM's whole share of the registers with as many
/// programmings on `ctx`, and is refused the next (ENOSPC); answers the
/// handles. Each must be a fresh register, numbered among the VM's own.
fn take_share(node: &Path, uid: u32, ctx: u32) -> Vec<u32> {
    let n = node.to_owned();
    let got = run_as(&Cred::user(uid), move || {
        let c = TenantClient::open(&n).expect("open");
        let added: Vec<Value> = (0..SHARE)
            .map(|i| {
                let a = c
                    .add_range(&store_range(ctx, 1000 + i))
                    .expect("a register of its share");
                json!([a.handle, a.register, a.shared])
            })
            .collect();
        let past = errno_of(&c.add_range(&store_range(ctx, 1000 + SHARE)));
        json!([added, past])
    });
    assert_eq!(got[1], json!(libc::ENOSPC), "past its share: {got}");
    let rows = got[0].as_array().expect("rows");
    let mut regs: Vec<u64> = rows.iter().map(|x| x[1].as_u64().unwrap()).collect();
    regs.sort_unstable();
    assert_eq!(
        regs,
        (0..u64::from(SHARE)).collect::<Vec<u64>>(),
        "its share's registers: {got}"
    );
    assert!(rows.iter().all(|x| x[2] == json!(0)), "none shared: {got}");
    rows.iter()
        .map(|x| u32::try_from(x[0].as_u64().unwrap()).unwrap())
        .collect()
}

/// Registers armed on partition 1.
fn armed(rig: &Rig) -> usize {
    rig.ctrls().iter().filter(|&&c| c != 0).count()
}

/// What `uid` gets for `ctx`'s ranges, graph and each of `handles`.
fn errnos(node: &Path, uid: u32, ctx: u32, handles: &[u32]) -> Value {
    let (n, handles) = (node.to_owned(), handles.to_vec());
    run_as(&Cred::user(uid), move || {
        let c = TenantClient::open(&n).expect("open");
        let rows = c.read_ranges(ctx).map(|r| r.len());
        let removals: Vec<i32> = handles
            .iter()
            .map(|&h| errno_of(&c.remove_range(ctx, h)))
            .collect();
        json!({
            "read": errno_of(&rows), "rows": rows.unwrap_or(0),
            "graph": errno_of(&c.call_graph(ctx)), "remove": removals,
        })
    })
}

fn wait_for_metric(daemon: &Proc, name: &str, want: u64) {
    wait_until(
        name,
        Duration::from_secs(10),
        Duration::from_millis(1),
        || {
            let got = daemon.metric(name);
            (got == want).then_some(()).ok_or(format!("{got}"))
        },
    );
}

#[test]
fn a_destroyed_context_releases_its_range_registers() {
    let destroy_at = 400_000;
    let mut rig = Rig::start("ranges-destroyed", Some(destroy_at));
    let handles = take_share(&rig.node, UID_A, rig.a);
    assert_eq!(armed(&rig), SHARE as usize);
    // A holding all of its share leaves B its own.
    let n = rig.node.clone();
    let b = rig.b;
    let own = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        let added = c.add_range(&store_range(b, 999)).expect("B's own share");
        json!([
            added.register,
            added.shared,
            errno_of(&c.remove_range(b, added.handle))
        ])
    });
    assert_eq!(own, json!([0, 0, 0]), "B's first register, removed again");
    assert_eq!(armed(&rig), SHARE as usize);

    // Run past the destruction until gpupmd disarmed A's registers.
    for _ in 0..200 {
        if rig.ctrls().iter().all(|&c| c == 0) {
            break;
        }
        step(&rig.dev, STEP, &mut rig.daemon);
    }
    let cycle = rig.dev.read64(r::CYCLE).expect("cycle");
    assert!(cycle > destroy_at, "the clock ran to {cycle}");
    assert_ne!(
        rig.dev.read32(r::ctx(rig.a, r::CTX_STATE)).unwrap(),
        r::ctx_state::ACTIVE,
        "A's context was destroyed"
    );
    assert_eq!(rig.ctrls(), vec![0; 8], "every range register disarmed");
    wait_for_metric(&rig.daemon, "gpupm_range_ranges", 0);
    assert_eq!(rig.daemon.metric("gpupm_range_registers"), 0);
    // The retired context reads as one holding no range; its handles are
    // gone (EACCES, as missing ones); it takes no new range (no program).
    let eacces = libc::EACCES;
    assert_eq!(
        errnos(&rig.node, UID_A, rig.a, &handles),
        json!({"read": 0, "rows": 0, "graph": 0, "remove": vec![eacces; SHARE as usize]}),
        "A's ranges are gone with its context"
    );
    let (n, a) = (rig.node.clone(), rig.a);
    let add = run_as(&Cred::user(UID_A), move || {
        let c = TenantClient::open(&n).expect("open");
        json!(errno_of(&c.add_range(&store_range(a, 5))))
    });
    assert_eq!(
        add,
        json!(libc::EINVAL),
        "a released context has no program"
    );
    assert_eq!(rig.ctrls(), vec![0; 8], "the refusal armed nothing");
    take_share(&rig.node, UID_B, rig.b);
    assert_eq!(armed(&rig), SHARE as usize, "B armed its share");
    rig.stop();
}

#[test]
fn a_device_reset_releases_every_range_register() {
    let rig = Rig::start("ranges-reset", None);
    let handles = take_share(&rig.node, UID_A, rig.a);
    assert_eq!(armed(&rig), SHARE as usize);
    rig.dev
        .write32(r::RESET, r::RESET_MAGIC)
        .expect("device reset");
    assert_eq!(rig.ctrls(), vec![0; 8], "the reset disarmed every register");
    wait_for_metric(&rig.daemon, "gpupm_range_ranges", 0);
    assert_eq!(rig.daemon.metric("gpupm_range_registers"), 0);
    assert_eq!(
        rig.dev.read32(r::ctx(rig.a, r::CTX_STATE)).unwrap(),
        r::ctx_state::ACTIVE,
        "contexts outlive a reset"
    );
    let eacces = libc::EACCES;
    assert_eq!(
        errnos(&rig.node, UID_A, rig.a, &handles),
        json!({"read": 0, "rows": 0, "graph": 0, "remove": vec![eacces; SHARE as usize]}),
        "A's context holds no range; the old handles are gone"
    );
    take_share(&rig.node, UID_B, rig.b);
    assert_eq!(armed(&rig), SHARE as usize, "B armed its share");
    assert_eq!(rig.daemon.metric("gpupm_range_ranges"), u64::from(SHARE));
    rig.stop();
}
