//! Runtime-instrumentation sessions end to end: `gpupm-driver` (step
//! clock, the RI scenario of `test_support::model::ri`, `--debug-ledger`)
//! and `gpupmd` as processes, tenants with real uids on the tenant node.
//! Groups are well formed and their count and sample positions equal the
//! device's RI ledger at a quiescent point; RIEMIT values arrive exactly
//! once, in order; a migration through the device node halts the session
//! and the tenant reads the reason; another tenant's context fails like a
//! missing one and another tenant's session handle answers nothing;
//! malformed requests are EINVAL and change no RI register; a restarted
//! daemon reclaims the blocks a killed one left in use.

use std::fs::File;

use gpupm_client::ri::RiEntry;
use gpupm_client::{DevNode, TenantClient};
use gpupm_test_support::device::step;
use gpupm_test_support::model::ri::scenario_toml;
use gpupm_test_support::process::Proc;
use gpupm_test_support::rawnode::sys::ioctl;
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, spawn_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::ioctl::{RiLedgerQuery, GPUPM_IOC_LEDGER_RI, IOCTL_STRUCT_VERSION};
use gpupm_uapi::layout::{ri_record, RiInstructionRecord};
use gpupm_uapi::regs as r;
use gpupm_uapi::ri::{self as ri, halt_reason, ri_ctrl, RI_BLOCKS};
use gpupm_uapi::tenant::ri::{ri_controls, ri_entry, ri_session_mode, ri_state, OpenRi};
use gpupm_uapi::tenant::{TENANT_IOC_OPEN_RI, TENANT_STRUCT_VERSION};
use serde_json::{json, Value};
use zerocopy::{FromBytes, IntoBytes};

const UID_A: u32 = 61501;
const UID_B: u32 = 61502;
const UID_C: u32 = 61503;
/// SF of the cycle-mode session.
const SF: u32 = 1000;
/// Program-buffer groups: more than a run stores, so nothing can be lost.
const BUFFER_GROUPS: u32 = 1024;
const EMITS: u32 = 10;

fn tenants() -> String {
    format!(
        "[[tenant]]\nvm = 1\nuid = {UID_A}\n[[tenant]]\nvm = 2\nuid = {UID_B}\n\
         [[tenant]]\nvm = 5\nuid = {UID_C}\n"
    )
}

struct Rig {
    tmp: Scratch,
    driver: Driver,
    dev: DevNode,
    daemon: Proc,
    node: std::path::PathBuf,
}

impl Rig {
    fn start(name: &str) -> Rig {
        let tmp = Scratch::new(name);
        let driver = Driver::start_in(&tmp, DriverOptions::system(scenario_toml(7, "gemm")));
        let dev = driver.node();
        let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
        daemon.wait_for("READY=1");
        let node = tmp.join("tenant").join("node");
        let mut rig = Rig {
            tmp: tmp,
            driver,
            dev,
            daemon,
            node,
        };
        // Let the scenario's contexts come to life.
        for _ in 0..64 {
            if (1..=4).all(|c| rig.dev.read32(r::ctx(c, r::CTX_STATE)).ok() == Some(1)) {
                break;
            }
            rig.steps(1);
        }
        rig
    }

    fn steps(&mut self, n: u32) {
        for _ in 0..n {
            step(&self.dev, STEP, &mut self.daemon);
        }
    }

    /// Migrates `vm` to `slot`, stepping the clock while it runs.
    fn migrate(&mut self, vm: u32, slot: u32) {
        self.dev.write32(ri::RI_MIGRATE_VM, vm).expect("stage");
        for _ in 0..500 {
            if self.dev.write32(ri::RI_MIGRATE, slot).is_ok() {
                assert_eq!(self.dev.read32(r::vm(vm, r::VM_PARTITION)).unwrap(), slot);
                return;
            }
            self.steps(1);
        }
        panic!("VM {vm} never stopped running");
    }

    fn card(&self) -> File {
        self.driver.card()
    }

    /// Every RI register of every block, and the globals.
    fn ri_regs(&self) -> Vec<u64> {
        let offsets: Vec<u64> = (0..RI_BLOCKS)
            .flat_map(|i| (0..ri::RI_STRIDE).step_by(4).map(move |o| ri::ri(i, o)))
            // RI_EMIT is write-only; 0x2C and 0x34 are the high halves of
            // the 64-bit RI_GROUPS and RI_SUPPRESSED, read whole.
            .filter(|&o| ![ri::RI_EMIT, 0x2C, 0x34].contains(&((o - ri::RI_BASE) % ri::RI_STRIDE)))
            .chain([ri::RI_MIGRATE_VM, ri::RI_MIGRATIONS])
            .collect();
        self.dev.read_many(&offsets).expect("RI registers")
    }
}

fn ledger_ri(card: &File, block: u32) -> RiLedgerQuery {
    let mut q = RiLedgerQuery {
        version: IOCTL_STRUCT_VERSION,
        block,
        ..RiLedgerQuery::default()
    };
    ioctl(card, GPUPM_IOC_LEDGER_RI, q.as_mut_bytes()).expect("RI ledger");
    q
}

fn cycle_session(ctx: u32) -> OpenRi {
    OpenRi {
        version: TENANT_STRUCT_VERSION,
        ctx,
        mode: ri_session_mode::CYCLE,
        controls: ri_controls::EMIT,
        sf: SF,
        rgs: 1,
        buffer_groups: BUFFER_GROUPS,
        ..OpenRi::default()
    }
}

/// What a tenant saw of its entries, for the parent to check.
fn digest(entries: &[RiEntry]) -> Value {
    let groups: Vec<Value> = entries
        .iter()
        .filter(|e| e.header.kind == ri_entry::GROUP)
        .map(|e| {
            let last = RiInstructionRecord::read_from_bytes(e.records.last().unwrap()).unwrap();
            json!({
                "n": e.header.group, "rgs": e.header.rgs, "size": e.header.size,
                "lost": e.header.lost_before, "kinds": e.kinds(),
                "ctx_cycle": last.ctx_cycle, "emits": e.emitted(),
            })
        })
        .collect();
    let halts: Vec<Value> = entries
        .iter()
        .filter(|e| e.is_halt())
        .map(|e| json!([e.header.halt_reason, e.header.group]))
        .collect();
    json!({ "groups": groups, "halts": halts })
}

/// Reads entries until `done` says the session has all it needs.
fn read_until(c: &TenantClient, mut done: impl FnMut(&[RiEntry]) -> bool) -> Vec<RiEntry> {
    let mut all = Vec::new();
    while !done(&all) {
        let got = c.read_ri().expect("read");
        assert!(!got.is_empty(), "end of file before the session was done");
        all.extend(got);
    }
    all
}

fn groups_and_lost(entries: &[RiEntry]) -> u64 {
    entries
        .iter()
        .map(|e| e.header.lost_before + u64::from(e.header.kind == ri_entry::GROUP))
        .sum()
}

/// Checks every group's shape and numbering against a buffer of
/// [`BUFFER_GROUPS`] groups of RGS 1.
fn check_groups(groups: &[Value]) {
    for (k, g) in groups.iter().enumerate() {
        let n = g["n"].as_u64().unwrap();
        assert_eq!(n, k as u64 + 1, "groups numbered 1, 2, … without gaps");
        assert_eq!((g["rgs"].as_u64(), g["lost"].as_u64()), (Some(1), Some(0)));
        assert_eq!(g["size"], json!(32 + 4 * 16), "2^(RGS+1) records of 16 bytes");
        let kinds: Vec<u8> = serde_json::from_value(g["kinds"].clone()).unwrap();
        let first = if (n - 1) % u64::from(BUFFER_GROUPS) == 0 {
            ri_record::BEGIN
        } else {
            ri_record::TIMESTAMP
        };
        assert_eq!(kinds[0], first, "group {n}: {kinds:?}");
        assert_eq!(kinds[3], ri_record::INSTRUCTION, "group {n}: {kinds:?}");
        for &mid in &kinds[1..3] {
            assert!(
                [ri_record::EMIT, ri_record::ABORT, ri_record::FILL].contains(&mid),
                "group {n}: {kinds:?}"
            );
        }
    }
}

#[test]
fn groups_match_the_ledger_emits_arrive_once_and_a_migration_halts_the_session() {
    let mut rig = Rig::start("ri-e2e");
    let node = rig.node.clone();
    let mut child = spawn_as(&Cred::user(UID_A), move |ctl| {
        let c = TenantClient::open(&node).expect("open");
        let opened = c.open_ri(&cycle_session(1)).expect("own context");
        for v in 1..=EMITS {
            c.ri_emit(v).expect("emit");
        }
        ctl.ready();
        ctl.wait_go();
        // The clock stands still: the status drains everything stored.
        let st = c.ri_status().expect("status");
        let first = read_until(&c, |e| groups_and_lost(e) == st.groups);
        ctl.ready();
        ctl.wait_go();
        let rest = read_until(&c, |e| e.iter().any(RiEntry::is_halt));
        let halted = c.ri_status().expect("status");
        let all: Vec<RiEntry> = first.into_iter().chain(rest).collect();
        json!({
            "block": opened.block, "partition": opened.partition,
            "version": opened.partition_version, "session": opened.session,
            "status1": [st.groups, st.lost, st.state],
            "status2": [halted.state, halted.halt_reason, halted.groups, halted.lost,
                        halted.partition, halted.partition_version],
            "entries": digest(&all),
        })
    });
    child.wait_ready();
    rig.steps(20);
    let card = rig.card();
    let block = (0..RI_BLOCKS)
        .find(|&b| ledger_ri(&card, b).ctx == 1)
        .expect("a block watches context 1");
    let at_rest = ledger_ri(&card, block);
    assert!(at_rest.stored > 20, "only {} groups", at_rest.stored);
    child.go();
    child.wait_ready();
    rig.migrate(1, 3);
    rig.steps(10);
    let after = ledger_ri(&card, block);
    child.go();
    let got = child.finish();

    assert_eq!(got["block"], json!(block));
    assert_eq!((got["partition"].as_u64(), got["version"].as_u64()), (Some(1), Some(1)));
    assert_eq!(got["status1"], json!([at_rest.stored, 0, ri_state::ENABLED]));
    let groups = got["entries"]["groups"].as_array().unwrap();
    check_groups(groups);
    assert_eq!(groups.len() as u64, after.stored, "every group the device stored, once");
    // Sample positions: every SF context cycles, the last where the ledger says.
    let cycles: Vec<u64> = groups.iter().map(|g| g["ctx_cycle"].as_u64().unwrap()).collect();
    assert!(cycles.windows(2).all(|w| w[1] - w[0] == u64::from(SF)), "{cycles:?}");
    let rest = usize::try_from(at_rest.stored).unwrap();
    assert_eq!(cycles[rest - 1], at_rest.last_sample_ctx_cycle);
    let emits: Vec<u64> = groups
        .iter()
        .flat_map(|g| serde_json::from_value::<Vec<u64>>(g["emits"].clone()).unwrap())
        .collect();
    assert_eq!(emits, (1..=u64::from(EMITS)).collect::<Vec<_>>());
    assert_eq!(after.emits_register, u64::from(EMITS));
    // The halt: once, with its reason, after the last group.
    assert_eq!(
        got["entries"]["halts"],
        json!([[halt_reason::VERSION, after.stored]])
    );
    assert_eq!(
        got["status2"],
        json!([
            ri_state::ENABLED | ri_state::HALTED,
            halt_reason::VERSION,
            after.stored,
            0,
            3,
            2
        ])
    );
    assert_eq!(rig.daemon.metric("gpupm_ri_groups_total"), after.stored);
    assert_eq!(rig.daemon.metric("gpupm_ri_lost_groups_total"), 0);
    assert_eq!(rig.daemon.metric("gpupm_ri_halts_total"), 1);
    // The child's exit closed the session: the block is free again.
    let ctrl = rig.dev.read32(ri::ri(block, ri::RI_CTRL)).unwrap();
    assert_eq!(ctrl & ri_ctrl::ENABLE, 0);
    assert_eq!(rig.dev.read32(ri::ri(block, ri::RI_CTX)).unwrap(), 0);
    assert_eq!(rig.daemon.metric("gpupm_ri_sessions"), 0);
}

/// Makes a valid request malformed in one way.
type Spoil = fn(&mut OpenRi);

#[test]
fn foreign_missing_confidential_and_malformed_requests_fail_and_change_nothing() {
    let mut rig = Rig::start("ri-refusals");
    // VM 2 moves to slot 2, whose maximum RGS is 2.
    rig.migrate(2, 2);
    let before = rig.ri_regs();
    let node = rig.node.clone();
    let got = run_as(&Cred::user(UID_B), || {
        let c = TenantClient::open(&node).expect("open");
        let foreign = errno_of(&c.open_ri(&cycle_session(1)));
        let missing = errno_of(&c.open_ri(&cycle_session(900)));
        let bad: Vec<(&str, Spoil)> = vec![
            ("version", |a| a.version = 2),
            ("flags", |a| a.flags = 1),
            ("reserved", |a| a.reserved = 1),
            ("mode 0", |a| a.mode = 0),
            ("mode 4", |a| a.mode = 4),
            ("unknown control", |a| a.controls = 1 << 4),
            ("RGS 8", |a| a.rgs = 8),
            ("RGS above the partition's", |a| a.rgs = 3),
            ("SF too large", |a| a.sf = (1 << 30) + 1),
            ("RSIC too large", |a| a.rsic = (1 << 30) + 1),
            ("SF in directed mode", |a| a.mode = ri_session_mode::DIRECTED),
            ("buffer too large", |a| a.buffer_groups = 1 << 14 | 1),
            ("queue too large", |a| a.queue_groups = (1 << 16) + 1),
            ("ctx 0", |a| a.ctx = 0),
            ("ctx out of range", |a| a.ctx = u32::MAX),
        ];
        let mut out = serde_json::Map::new();
        for (name, spoil) in bad {
            let mut arg = cycle_session(3);
            spoil(&mut arg);
            let r = c.raw_ioctl(TENANT_IOC_OPEN_RI, arg.as_mut_bytes());
            out.insert(name.into(), json!(r.err().map(|e| e as i32)));
        }
        let short = gpupm_uapi::ioc::read_write(b'T', 0x10, 72);
        let r = c.raw_ioctl(short, &mut cycle_session(3).as_mut_bytes()[..72].to_vec());
        out.insert("short".into(), json!(r.err().map(|e| e as i32)));
        let no_session = [errno_of(&c.ri_emit(1)), errno_of(&c.ri_status())];
        json!({ "foreign": foreign, "missing": missing, "bad": out, "no_session": no_session })
    });
    assert_eq!(got["foreign"], json!(libc::EACCES));
    assert_eq!(got["missing"], json!(libc::EACCES), "same as another tenant's");
    for (name, errno) in got["bad"].as_object().unwrap() {
        assert_eq!(errno, &json!(libc::EINVAL), "{name}");
    }
    assert_eq!(got["no_session"], json!([libc::EINVAL, libc::EINVAL]));
    let node = rig.node.clone();
    let confidential = run_as(&Cred::user(UID_C), || {
        let c = TenantClient::open(&node).expect("open");
        json!(errno_of(&c.open_ri(&cycle_session(4))))
    });
    assert_eq!(confidential, json!(libc::EOPNOTSUPP));
    assert_eq!(rig.ri_regs(), before, "no RI register changed");
    assert_eq!(rig.daemon.metric("gpupm_ri_sessions"), 0);

    // Another tenant's session handle (inherited): no emit, status or read.
    let admin = TenantClient::open(&rig.node).expect("open as root");
    let opened = admin.open_ri(&cycle_session(3)).expect("the admin's session");
    assert_eq!(opened.partition_max_rgs, 2);
    let before = rig.ri_regs();
    // Borrowed, not moved: the parent keeps its descriptor, so the
    // child's exit does not close the session.
    let got = run_as(&Cred::user(UID_A), || {
        let mut buf = vec![0u8; 1 << 16];
        let read = std::io::Read::read(&mut admin_file(&admin), &mut buf)
            .err()
            .and_then(|e| e.raw_os_error());
        json!([errno_of(&admin.ri_emit(7)), errno_of(&admin.ri_status()), read])
    });
    assert_eq!(got, json!([libc::EACCES, libc::EACCES, libc::EACCES]));
    assert_eq!(rig.ri_regs(), before);
}

/// The file under a client, for a raw `read()`.
fn admin_file(c: &TenantClient) -> File {
    use std::os::fd::AsFd;
    File::from(c.as_fd().try_clone_to_owned().expect("dup"))
}

#[test]
fn a_restarted_daemon_reclaims_the_blocks_a_killed_one_left_in_use() {
    let mut rig = Rig::start("ri-reclaim");
    let admin = TenantClient::open(&rig.node).expect("open as root");
    let opened = admin.open_ri(&cycle_session(1)).expect("session");
    let block = opened.block;
    rig.steps(4);
    assert_ne!(rig.dev.read32(ri::ri(block, ri::RI_CTRL)).unwrap() & ri_ctrl::ENABLE, 0);
    let mut killed = rig.daemon;
    killed.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    // Its notify socket goes with it, before the next daemon binds one.
    drop(killed);
    drop(admin);
    assert_ne!(
        rig.dev.read32(ri::ri(block, ri::RI_CTRL)).unwrap() & ri_ctrl::ENABLE,
        0,
        "a killed daemon leaves its block enabled"
    );
    let config = std::fs::read_to_string(rig.tmp.join("gpupmd.toml")).unwrap();
    rig.daemon = spawn_daemon(&rig.tmp, &config, &[], &[]);
    rig.daemon.wait_for("READY=1");
    for b in 0..RI_BLOCKS {
        assert_eq!(rig.dev.read32(ri::ri(b, ri::RI_CTRL)).unwrap() & ri_ctrl::ENABLE, 0);
        assert_eq!(rig.dev.read32(ri::ri(b, ri::RI_CTX)).unwrap(), 0);
    }
    // And the context can have a session again.
    let admin = TenantClient::open(&rig.node).expect("open as root");
    admin.open_ri(&cycle_session(1)).expect("a new session");
}
