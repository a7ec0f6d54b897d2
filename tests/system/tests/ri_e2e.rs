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
use gpupm_test_support::device::{ledger_ri, step};
use gpupm_test_support::model::ri::{read_entries_until, scenario_toml};
use gpupm_test_support::process::Proc;
use gpupm_test_support::rng::Rng;
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, spawn_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
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
/// RGS of the session: 32 records, room for 30 extras (the 32-entry
/// collection buffer keeps the newest 32).
const RGS: u32 = 4;
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
            tmp,
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
        gpupm_test_support::device::migrate(&self.dev, vm, slot, &mut self.daemon);
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

fn cycle_session(ctx: u32) -> OpenRi {
    OpenRi {
        version: TENANT_STRUCT_VERSION,
        ctx,
        mode: ri_session_mode::CYCLE,
        controls: ri_controls::EMIT,
        sf: SF,
        rgs: RGS,
        buffer_groups: BUFFER_GROUPS,
        ..OpenRi::default()
    }
}

/// Tenant B's session: VM 2 runs on slot 2 (maximum RGS 2) in the
/// refusal test.
fn b_session() -> OpenRi {
    OpenRi {
        rgs: 2,
        ..cycle_session(3)
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

fn groups_and_lost(entries: &[RiEntry]) -> u64 {
    entries
        .iter()
        .map(|e| e.header.lost_before + u64::from(e.header.kind == ri_entry::GROUP))
        .sum()
}

/// Checks every group's shape and numbering against a buffer of
/// [`BUFFER_GROUPS`] groups of [`RGS`].
fn check_groups(groups: &[Value]) {
    for (k, g) in groups.iter().enumerate() {
        let n = g["n"].as_u64().unwrap();
        assert_eq!(n, k as u64 + 1, "groups numbered 1, 2, … without gaps");
        assert_eq!(
            (g["rgs"].as_u64(), g["lost"].as_u64()),
            (Some(u64::from(RGS)), Some(0))
        );
        let records = 2usize << RGS;
        assert_eq!(
            g["size"],
            json!(32 + records * 16),
            "2^(RGS+1) records of 16 bytes"
        );
        let kinds: Vec<u8> = serde_json::from_value(g["kinds"].clone()).unwrap();
        let first = if (n - 1) % u64::from(BUFFER_GROUPS) == 0 {
            ri_record::BEGIN
        } else {
            ri_record::TIMESTAMP
        };
        assert_eq!(kinds[0], first, "group {n}: {kinds:?}");
        assert_eq!(kinds.len(), records);
        assert_eq!(
            kinds[records - 1],
            ri_record::INSTRUCTION,
            "group {n}: {kinds:?}"
        );
        for &mid in &kinds[1..records - 1] {
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
        let first = read_entries_until(&c, |e| groups_and_lost(e) == st.groups);
        ctl.ready();
        ctl.wait_go();
        let rest = read_entries_until(&c, |e| e.iter().any(RiEntry::is_halt));
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

    // The answer names the session's place among its VM's blocks (ABI
    // 1.11), not the device's block.
    assert_eq!(got["block"], json!(0));
    assert_eq!(
        (got["partition"].as_u64(), got["version"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        got["status1"],
        json!([at_rest.stored, 0, ri_state::ENABLED])
    );
    let groups = got["entries"]["groups"].as_array().unwrap();
    check_groups(groups);
    assert_eq!(
        groups.len() as u64,
        after.stored,
        "every group the device stored, once"
    );
    // Sample positions: every SF context cycles, the last where the ledger says.
    let cycles: Vec<u64> = groups
        .iter()
        .map(|g| g["ctx_cycle"].as_u64().unwrap())
        .collect();
    assert!(
        cycles.windows(2).all(|w| w[1] - w[0] == u64::from(SF)),
        "{cycles:?}"
    );
    let rest = usize::try_from(at_rest.stored).unwrap();
    assert_eq!(cycles[rest - 1], at_rest.last_sample_ctx_cycle);
    let emits: Vec<u64> = groups
        .iter()
        .flat_map(|g| serde_json::from_value::<Vec<u64>>(g["emits"].clone()).unwrap())
        .collect();
    assert_eq!(emits, (1..=u64::from(EMITS)).collect::<Vec<_>>());
    assert_eq!(after.emits_register, u64::from(EMITS));
    assert_eq!(after.overwritten, 0, "no collection record was overwritten");
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

/// `bytes` in a buffer of the size `raw_ioctl` takes (one page, zeros
/// after them): the command's size says how many the node sees.
fn padded(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b.resize(gpupm_client::sys::RAW_MIN_BUF.max(bytes.len()), 0);
    b
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
            ("SF in directed mode", |a| {
                a.mode = ri_session_mode::DIRECTED
            }),
            ("buffer too large", |a| a.buffer_groups = 1 << 14 | 1),
            ("queue too large", |a| a.queue_groups = (1 << 16) + 1),
            ("ctx 0", |a| a.ctx = 0),
            ("ctx out of range", |a| a.ctx = u32::MAX),
        ];
        let mut out = serde_json::Map::new();
        for (name, spoil) in bad {
            let mut arg = b_session();
            spoil(&mut arg);
            let r = c.raw_ioctl(TENANT_IOC_OPEN_RI, &mut padded(arg.as_bytes()));
            out.insert(name.into(), json!(r.err().map(|e| e as i32)));
        }
        let short = gpupm_uapi::ioc::read_write(b'T', 0x10, 72);
        let r = c.raw_ioctl(short, &mut padded(&b_session().as_bytes()[..72]));
        out.insert("short".into(), json!(r.err().map(|e| e as i32)));
        let no_session = [errno_of(&c.ri_emit(1)), errno_of(&c.ri_status())];
        json!({ "foreign": foreign, "missing": missing, "bad": out, "no_session": no_session })
    });
    assert_eq!(got["foreign"], json!(libc::EACCES));
    assert_eq!(
        got["missing"],
        json!(libc::EACCES),
        "same as another tenant's"
    );
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
    let opened = admin.open_ri(&b_session()).expect("the admin's session");
    assert_eq!(opened.partition_max_rgs, 2);
    let before = rig.ri_regs();
    // Borrowed, not moved: the parent keeps its descriptor, so the
    // child's exit does not close the session.
    let got = run_as(&Cred::user(UID_A), || {
        let mut buf = vec![0u8; 1 << 16];
        let read = std::io::Read::read(&mut admin_file(&admin), &mut buf)
            .err()
            .and_then(|e| e.raw_os_error());
        json!([
            errno_of(&admin.ri_emit(7)),
            errno_of(&admin.ri_status()),
            read
        ])
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
    admin.open_ri(&cycle_session(1)).expect("session");
    let block = (0..RI_BLOCKS)
        .find(|&b| rig.dev.read32(ri::ri(b, ri::RI_CTX)).unwrap() == 1)
        .expect("a block watches context 1");
    rig.steps(4);
    assert_ne!(
        rig.dev.read32(ri::ri(block, ri::RI_CTRL)).unwrap() & ri_ctrl::ENABLE,
        0
    );
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
        assert_eq!(
            rig.dev.read32(ri::ri(b, ri::RI_CTRL)).unwrap() & ri_ctrl::ENABLE,
            0
        );
        assert_eq!(rig.dev.read32(ri::ri(b, ri::RI_CTX)).unwrap(), 0);
    }
    // And the context can have a session again.
    let admin = TenantClient::open(&rig.node).expect("open as root");
    admin.open_ri(&cycle_session(1)).expect("a new session");
}

/// Calls of the fuzz test.
const FUZZ_CALLS: u64 = 50_000;

/// A random index below `n`.
fn pick(rng: &mut Rng, n: u64) -> usize {
    usize::try_from(rng.below(n)).unwrap()
}

/// One random malformed RI request: its command and argument bytes.
fn fuzz_call(rng: &mut Rng) -> (u32, Vec<u8>) {
    use gpupm_uapi::ioc;
    use gpupm_uapi::tenant::ri::{RiEmit, RiStatus};
    use gpupm_uapi::tenant::{TENANT_IOC_RI_EMIT, TENANT_IOC_RI_STATUS};
    let nonzero = |rng: &mut Rng| u32::try_from(rng.below(u64::from(u32::MAX)) + 1).unwrap();
    match rng.below(4) {
        // Any command of the RI range, any size and direction, random bytes.
        0 => {
            let nr = 0x10 + u8::try_from(rng.below(8)).unwrap();
            let size = usize::try_from(rng.below(161)).unwrap();
            let cmd = match rng.below(3) {
                0 => ioc::read_write(b'T', nr, size),
                1 => ioc::write(b'T', nr, size),
                _ => ioc::read(b'T', nr, size),
            };
            let bytes = (0..size.max(8))
                .map(|_| rng.next_u64().to_le_bytes()[0])
                .collect();
            (cmd, bytes)
        }
        // A valid open spoiled in one field.
        1 => {
            let mut a = cycle_session(1);
            match rng.below(9) {
                0 => a.version = nonzero(rng).max(2),
                1 => a.flags = nonzero(rng),
                2 => a.reserved = u64::from(nonzero(rng)),
                3 => a.mode = [0, 4, nonzero(rng).max(4)][pick(rng, 3)],
                4 => a.controls |= nonzero(rng) << 4,
                5 => a.rgs = 8 + nonzero(rng) % 1000,
                6 => a.sf = (1 << 30) + nonzero(rng) % (1 << 30),
                7 => {
                    a.ctx =
                        [3, 4, 4 + nonzero(rng) % 4091, 4096 + nonzero(rng) % 10_000][pick(rng, 4)]
                }
                _ => a.queue_groups = (1 << 16) + nonzero(rng) % (1 << 20),
            }
            (TENANT_IOC_OPEN_RI, a.as_bytes().to_vec())
        }
        // Emit or status on a handle without a session, random fields.
        2 => {
            let e = RiEmit {
                version: u32::try_from(rng.below(3)).unwrap(),
                value: nonzero(rng),
                reserved: rng.below(2),
            };
            (TENANT_IOC_RI_EMIT, e.as_bytes().to_vec())
        }
        _ => {
            let mut s = RiStatus {
                version: u32::try_from(rng.below(3)).unwrap(),
                ..RiStatus::default()
            };
            s.groups = rng.below(2);
            (TENANT_IOC_RI_STATUS, s.as_bytes().to_vec())
        }
    }
}

#[test]
fn fifty_thousand_malformed_ri_calls_fail_and_change_nothing() {
    let rig = Rig::start("ri-fuzz");
    let before = (rig.ri_regs(), rig.daemon.metric("gpupm_ri_sessions"));
    let errors_before = rig.daemon.metric("gpupm_tenant_request_errors_total");
    let node = rig.node.clone();
    let got = run_as(&Cred::user(UID_A), || {
        let c = TenantClient::open(&node).expect("open");
        let mut rng = Rng(0x5eed_0013);
        let mut by_errno = std::collections::BTreeMap::<String, u64>::new();
        for _ in 0..FUZZ_CALLS {
            let (cmd, bytes) = fuzz_call(&mut rng);
            let key = match c.raw_ioctl(cmd, &mut padded(&bytes)) {
                Ok(_) => format!("accepted {cmd:#x} {bytes:?}"),
                Err(e) => (e as i32).to_string(),
            };
            *by_errno.entry(key).or_default() += 1;
        }
        json!(by_errno)
    });
    let got = got.as_object().unwrap();
    let allowed = [libc::EINVAL, libc::ENOTTY, libc::EACCES].map(|e| e.to_string());
    for (errno, n) in got {
        assert!(allowed.contains(errno), "{errno}: {n} calls");
    }
    assert_eq!(
        got.values().map(|n| n.as_u64().unwrap()).sum::<u64>(),
        FUZZ_CALLS
    );
    assert!(
        got.len() == 3,
        "every kind of refusal was exercised: {got:?}"
    );
    assert_eq!(
        (rig.ri_regs(), rig.daemon.metric("gpupm_ri_sessions")),
        before,
        "no RI register or session changed"
    );
    assert!(rig.daemon.metric("gpupm_tenant_request_errors_total") >= errors_before + FUZZ_CALLS);
}
