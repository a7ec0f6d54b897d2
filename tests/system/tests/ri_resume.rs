//! Re-enabling a halted RI session in place (`TENANT_IOC_RI_RESUME`, ABI
//! 1.8) end to end: `gpupm-driver` (step clock, debug ledger) and
//! `gpupmd` as processes, a tenant with a real uid. A running session and
//! malformed requests are refused and change no register; a session halted
//! by a migration to a partition of another version is refused
//! (EOPNOTSUPP) while the VM stays there, and resumes once the VM runs on
//! a partition of its version again: the groups after the resume start
//! with a begin group and equal the device's RI ledger; a halt for the RGS
//! limit is refused (EINVAL).

use std::fs::File;

use gpupm_client::ri::RiEntry;
use gpupm_client::{DevNode, TenantClient};
use gpupm_test_support::device::{ledger_ri, migrate, step};
use gpupm_test_support::model::ri::read_entries_until;
use gpupm_test_support::process::Proc;
use gpupm_test_support::scenario::{builtin_program, STEP};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, spawn_as, Child, Cred};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::layout::{ri_record, RiInstructionRecord};
use gpupm_uapi::regs as r;
use gpupm_uapi::ri::{self as ri, halt_reason, ri_status, RI_BLOCKS};
use gpupm_uapi::tenant::ri::{ri_entry, ri_session_mode, ri_state, OpenRi, RiResume};
use gpupm_uapi::tenant::{TENANT_IOC_RI_RESUME, TENANT_STRUCT_VERSION};
use serde_json::{json, Value};
use zerocopy::{FromBytes, IntoBytes};

const UID_A: u32 = 61701;
const SF: u32 = 1000;
const RGS: u32 = 4;

/// Slot 1 (version 1) runs VM 1 (the tenant's, one context) and VM 2;
/// slot 2 (maximum RGS 2) VM 3; slot 3 (version 2) VM 6; slot 4
/// (version 1) VM 5. Every slot has a VM with a context, so VM 1 is never
/// alone where it goes and can always be moved on.
fn scenario() -> String {
    let slot = |p: u32, extra: &str| {
        format!(
            "[[partition]]\nslot = {p}\ngpcs = [{}]\nmemory_slices = [{}]\n\
             vm_timeslice_cycles = 50000\n{extra}",
            p - 1,
            p - 1
        )
    };
    let vm = |id: u32, p: u32| format!("[[vm]]\nid = {id}\npartition = {p}\n");
    let ctx = |vm: u32| format!("[[context]]\nvm = {vm}\nprofile = \"p\"\n");
    format!(
        "seed = 11\nswitch_timeout_cycles = 3000\n\
         [topology]\nsms_per_gpc = [1, 1, 1, 1]\nmemory_slices = 4\nl2_per_slice = 1\n\
         fb_per_slice = 1\nce_per_slice = 1\nnvlinks = 0\n[trigger]\nperiod_cycles = 0\n\
         {}{}{}{}{}{}{}{}{}\
         [[profile]]\nname = \"p\"\nprogram = \"gemm\"\n[[profile.phase]]\n\
         duration_cycles = 1000000\nrates = {{ sm_cycles_elapsed = 1.0 }}\n\
         {}{}{}{}{}{}",
        slot(1, ""),
        slot(2, "ri_max_rgs = 2\n"),
        slot(3, "ri_version = 2\n"),
        slot(4, ""),
        vm(1, 1),
        vm(2, 1),
        vm(3, 2),
        vm(6, 3),
        vm(5, 4),
        ctx(1),
        ctx(2),
        ctx(3),
        ctx(6),
        ctx(5),
        builtin_program("gemm")
    )
}

fn session(ctx: u32) -> OpenRi {
    OpenRi {
        version: TENANT_STRUCT_VERSION,
        ctx,
        mode: ri_session_mode::CYCLE,
        sf: SF,
        rgs: RGS,
        buffer_groups: 1024,
        ..OpenRi::default()
    }
}

fn groups(entries: &[RiEntry]) -> Vec<Value> {
    entries
        .iter()
        .filter(|e| e.header.kind == ri_entry::GROUP)
        .map(|e| {
            let last = RiInstructionRecord::read_from_bytes(e.records.last().unwrap()).unwrap();
            json!([
                e.header.group,
                e.header.lost_before,
                e.kinds()[0],
                last.ctx_cycle
            ])
        })
        .collect()
}

fn halts(entries: &[RiEntry]) -> Vec<u8> {
    entries
        .iter()
        .filter(|e| e.is_halt())
        .map(|e| e.header.halt_reason)
        .collect()
}

/// Every RI register of `block`.
fn block_regs(dev: &DevNode, block: u32) -> Vec<u64> {
    let offsets: Vec<u64> = (0..ri::RI_STRIDE)
        .step_by(4)
        .filter(|o| ![ri::RI_EMIT, 0x2C, 0x34].contains(o))
        .map(|o| ri::ri(block, o))
        .collect();
    dev.read_many(&offsets).expect("RI registers")
}

fn steps(dev: &DevNode, daemon: &mut Proc, n: u32) {
    for _ in 0..n {
        step(dev, STEP, daemon);
    }
}

/// The child: the tenant's session through every phase the parent
/// drives (each `ready`/`wait_go` pair is one phase).
fn tenant(node: std::path::PathBuf, ctx: u32) -> Child {
    spawn_as(&Cred::user(UID_A), move |ctl| {
        let c = TenantClient::open(&node).expect("open");
        let opened = c.open_ri(&session(ctx)).expect("own context");
        ctl.ready();
        ctl.wait_go();
        // Running: nothing to resume; malformed requests.
        let running = errno_of(&c.ri_resume());
        let malformed: Vec<Option<i32>> = [
            RiResume {
                version: 2,
                ..RiResume::default()
            },
            RiResume {
                version: 1,
                flags: 1,
                ..RiResume::default()
            },
            RiResume {
                version: 1,
                reserved: 1,
                ..RiResume::default()
            },
            RiResume {
                version: 1,
                partition: 1,
                ..RiResume::default()
            },
        ]
        .iter()
        .map(|arg| {
            let mut b = arg.as_bytes().to_vec();
            b.resize(gpupm_client::sys::RAW_MIN_BUF, 0);
            c.raw_ioctl(TENANT_IOC_RI_RESUME, &mut b)
                .err()
                .map(|e| e as i32)
        })
        .collect();
        ctl.ready();
        ctl.wait_go();
        // Halted on a partition of version 2.
        let first = read_entries_until(&c, |e| e.iter().any(RiEntry::is_halt));
        let wrong_version = errno_of(&c.ri_resume());
        let halted = c.ri_status().expect("status");
        ctl.ready();
        ctl.wait_go();
        // On a partition of version 1 again.
        let resumed = c.ri_resume().expect("resume");
        ctl.ready();
        ctl.wait_go();
        let st = c.ri_status().expect("status");
        let after = read_entries_until(&c, |e| groups(e).len() as u64 == st.groups);
        ctl.ready();
        ctl.wait_go();
        // Halted on a partition whose maximum RGS is 2.
        let second = read_entries_until(&c, |e| e.iter().any(RiEntry::is_halt));
        let rgs_limit = errno_of(&c.ri_resume());
        json!({
            "block": opened.block, "running": running, "malformed": malformed,
            "first_halts": halts(&first), "wrong_version": wrong_version,
            "halted": [halted.state, halted.halt_reason],
            "resumed": [resumed.partition, resumed.partition_version, resumed.partition_max_rgs],
            "after": groups(&after), "after_halts": halts(&after), "status_groups": st.groups,
            "second_halts": halts(&second), "rgs_limit": rgs_limit,
        })
    })
}

/// The block watching `ctx`.
fn block_of(card: &File, ctx: u32) -> u32 {
    (0..RI_BLOCKS)
        .find(|&b| ledger_ri(card, b).ctx == ctx)
        .expect("a block watches the context")
}

#[test]
fn a_halted_session_resumes_in_place_only_on_a_compatible_partition() {
    let tmp = Scratch::new("ri-resume");
    let driver = Driver::start_in(&tmp, DriverOptions::system(scenario()));
    let (dev, card) = (driver.node(), driver.card());
    let mut daemon = spawn_daemon(
        &tmp,
        &daemon_config(&tmp, &format!("[[tenant]]\nvm = 1\nuid = {UID_A}\n")),
        &[],
        &[],
    );
    daemon.wait_for("READY=1");
    steps(&dev, &mut daemon, 4);
    let ctx = (1..r::MAX_CONTEXTS)
        .find(|&c| dev.read32(r::ctx(c, r::CTX_VM)).ok() == Some(1))
        .expect("VM 1's context");
    let mut child = tenant(tmp.join("tenant").join("node"), ctx);
    child.wait_ready();
    let block = block_of(&card, ctx);
    while ledger_ri(&card, block).stored < 5 {
        step(&dev, STEP, &mut daemon);
    }
    let regs = block_regs(&dev, block);
    child.go();
    child.wait_ready();
    assert_eq!(
        block_regs(&dev, block),
        regs,
        "refused resumes changed nothing"
    );
    migrate(&dev, 1, 3, &mut daemon);
    steps(&dev, &mut daemon, 4);
    child.go();
    child.wait_ready();
    let status = dev.read32(ri::ri(block, ri::RI_STATUS)).unwrap();
    assert_ne!(status & ri_status::HALTED, 0, "EOPNOTSUPP left it halted");
    migrate(&dev, 1, 4, &mut daemon);
    child.go();
    child.wait_ready();
    let status = dev.read32(ri::ri(block, ri::RI_STATUS)).unwrap();
    assert_eq!(status & ri_status::HALTED, 0, "resumed");
    steps(&dev, &mut daemon, 6);
    let truth = ledger_ri(&card, block);
    child.go();
    child.wait_ready();
    migrate(&dev, 1, 2, &mut daemon);
    steps(&dev, &mut daemon, 4);
    child.go();
    let got = child.finish();

    // The session's place among its VM's blocks (ABI 1.11).
    assert_eq!(got["block"], json!(0));
    assert_eq!(got["running"], json!(libc::EINVAL), "not halted");
    assert_eq!(got["malformed"], json!(vec![libc::EINVAL; 4]));
    assert_eq!(got["first_halts"], json!([halt_reason::VERSION]));
    assert_eq!(got["wrong_version"], json!(libc::EOPNOTSUPP));
    assert_eq!(
        got["halted"],
        json!([ri_state::ENABLED | ri_state::HALTED, halt_reason::VERSION])
    );
    assert_eq!(got["resumed"], json!([4, 1, 7]));
    // After the resume: a new device session in the same block, numbered
    // from 1 with a begin group, SF context cycles apart, every group the
    // ledger (reset by the re-enable) says was stored.
    let after = got["after"].as_array().unwrap();
    assert!(got["after_halts"].as_array().unwrap().is_empty());
    assert!(
        truth.stored > 3,
        "only {} groups after the resume",
        truth.stored
    );
    assert_eq!(after.len() as u64, truth.stored, "{after:?}");
    assert_eq!(got["status_groups"], json!(truth.stored));
    for (k, g) in after.iter().enumerate() {
        let first = if k == 0 {
            ri_record::BEGIN
        } else {
            ri_record::TIMESTAMP
        };
        assert_eq!(g[0], json!(k + 1), "{after:?}");
        assert_eq!(
            (g[1].as_u64(), g[2].as_u64()),
            (Some(0), Some(u64::from(first)))
        );
    }
    let cycles: Vec<u64> = after.iter().map(|g| g[3].as_u64().unwrap()).collect();
    assert!(
        cycles.windows(2).all(|w| w[1] - w[0] == u64::from(SF)),
        "{cycles:?}"
    );
    assert_eq!(*cycles.last().unwrap(), truth.last_sample_ctx_cycle);
    assert_eq!(got["second_halts"], json!([halt_reason::RGS_LIMIT]));
    assert_eq!(got["rgs_limit"], json!(libc::EINVAL));
    assert_eq!(daemon.metric("gpupm_ri_halts_total"), 2);
    daemon.stop();
    driver.stop();
}
