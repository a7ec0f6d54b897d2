//! Lost sample records are attributed exactly: several sampling sessions
//! on one partition (the built-in scenario's partition 2, time-sliced
//! between VMs 2 and 3) whose scopes do not overlap and cover every
//! context there — a session per context of VM 2, one for VM 3 — each
//! recorded by `gpupm record --samples --no-counters` as its tenant. The
//! clock advances in chunks far longer than the drain interval the buffers
//! are sized for, so the buffers overflow; per record type the sessions'
//! lost records sum to the device's `BUF_LOST`, and their records to
//! `BUF_PRODUCED − BUF_LOST`.

use std::time::{Duration, Instant};

use gpupm_test_support::cli::{finish, spawn_as, Fixture, UID_A, UID_VM3};
use gpupm_test_support::device::sample_buffer;
use gpupm_uapi::regs as r;
use gpupm_uapi::sampling::buf_kind;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const PARTITION: u32 = 2;
const VM_SLICED: u32 = 3;
/// Device cycles per ms (1980 MHz).
const CYCLES_PER_MS: u64 = 1_980_000;

/// (head, tail, produced, lost) of partition 2's buffer `k`.
fn buffer(f: &Fixture, k: u32) -> [u64; 4] {
    sample_buffer(&f.dev, PARTITION, k)
}

/// Waits until gpupmd drained both buffers.
fn wait_drained(f: &Fixture) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while [buf_kind::BRANCH, buf_kind::PC]
        .iter()
        .any(|&k| buffer(f, k)[0] != buffer(f, k)[1])
    {
        assert!(
            Instant::now() < deadline,
            "gpupmd never drained partition 2"
        );
        std::thread::yield_now();
    }
}

/// Per type (branch_stack, pc_sample): (records, lost) of a recording.
fn counts(f: &Fixture, file: &str) -> [(u64, u64); 2] {
    let doc = f.gpupm(&["report", file, "--json"]).json();
    let of = |name: &str| {
        let t = doc["types"]
            .as_array()
            .expect("types")
            .iter()
            .find(|t| t["type"] == name)
            .expect("type listed");
        (t["records"].as_u64().unwrap(), t["lost"].as_u64().unwrap())
    };
    [of("branch_stack"), of("pc_sample")]
}

fn sum(all: &[[(u64, u64); 2]], k: usize) -> (u64, u64) {
    all.iter()
        .fold((0, 0), |(n, l), c| (n + c[k].0, l + c[k].1))
}

#[test]
fn the_lost_records_of_disjoint_sessions_on_one_partition_sum_to_buf_lost() {
    let mut f = Fixture::start_with_tenants("lost-attribution", &[], &[(VM_SLICED, UID_VM3)]);
    f.advance_ms(5);
    let vm2_ctxs: Vec<u32> = (1..r::MAX_CONTEXTS)
        .filter(|&c| {
            let reg = |x| f.dev.read32(r::ctx(c, x)).unwrap_or(0);
            reg(r::CTX_VM) == gpupm_test_support::cli::VM_A
                && reg(r::CTX_STATE) == r::ctx_state::ACTIVE
        })
        .collect();
    assert!(vm2_ctxs.len() >= 2, "VM 2's contexts: {vm2_ctxs:?}");
    // Rates low enough that no session's queue (65,536 records) can fill
    // between two reads: every loss is the device's.
    let rates = [
        "--period",
        "4096",
        "--dither",
        "255",
        "--branch-every",
        "64",
    ];
    let mut sessions: Vec<(String, u32, Vec<String>)> = vm2_ctxs
        .iter()
        .map(|c| {
            (
                c.to_string(),
                UID_A,
                vec!["--ctx".to_string(), c.to_string()],
            )
        })
        .collect();
    sessions.push((
        "vm3".into(),
        UID_VM3,
        vec!["--vm".into(), VM_SLICED.to_string()],
    ));
    let mut children = Vec::new();
    let mut files = Vec::new();
    for (name, uid, scope) in &sessions {
        let file = f
            .tmp
            .join(format!("lost-{name}.gpupm"))
            .display()
            .to_string();
        let mut a: Vec<String> = ["record", "--samples", "--no-counters", "-o", &file]
            .iter()
            .chain(&rates)
            .map(|s| s.to_string())
            .collect();
        a.extend(scope.iter().cloned());
        a.extend(["--tenant-node".into(), f.node()]);
        children.push(spawn_as(Some(*uid), &a));
        files.push(file);
    }
    // Each recorder writes its session's answer as soon as it is open.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !files
        .iter()
        .all(|p| std::fs::metadata(p).is_ok_and(|m| m.len() >= 64 + 8 + 80))
    {
        for c in &mut children {
            if let Some(st) = c.try_wait().expect("try_wait") {
                panic!("a recorder exited early ({st})");
            }
        }
        assert!(Instant::now() < deadline, "the sessions did not all open");
        std::thread::yield_now();
    }
    // Overflow: 20 ms of device time at once, far past the 5 ms the
    // buffers are sized for.
    for _ in 0..3 {
        f.dev.advance(20 * CYCLES_PER_MS).expect("advance");
        f.wait_idle();
        wait_drained(&f);
    }
    let lost_then = buffer(&f, buf_kind::PC)[3];
    assert!(lost_then > 0, "the PC buffer never overflowed");
    // Settle: short steps, drained between, so every session receives a
    // record after its last loss (a loss is reported with the next record
    // of its type).
    for _ in 0..24 {
        f.advance_ms(1);
        wait_drained(&f);
    }
    let [_, _, branch_produced, branch_lost] = buffer(&f, buf_kind::BRANCH);
    let [_, _, pc_produced, pc_lost] = buffer(&f, buf_kind::PC);
    let stored = [branch_produced - branch_lost, pc_produced - pc_lost];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let all: Vec<[(u64, u64); 2]> = files.iter().map(|p| counts(&f, p)).collect();
        if sum(&all, 0).0 == stored[0] && sum(&all, 1).0 == stored[1] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "recorded {all:?}, the device stored {stored:?}"
        );
    }
    for c in children {
        kill(
            Pid::from_raw(i32::try_from(c.id()).unwrap()),
            Signal::SIGINT,
        )
        .expect("SIGINT");
        let run = finish(c);
        assert_eq!(run.code, 0, "record: {}", run.err);
    }
    let all: Vec<[(u64, u64); 2]> = files.iter().map(|p| counts(&f, p)).collect();
    eprintln!("per session (branch, pc) (records, lost): {all:?}");
    eprintln!("device: branch produced {branch_produced} lost {branch_lost}, pc produced {pc_produced} lost {pc_lost}");
    assert_eq!(sum(&all, 0), (stored[0], branch_lost), "branch stacks");
    assert_eq!(sum(&all, 1), (stored[1], pc_lost), "PC samples");
    assert!(
        all.iter().filter(|c| c[1].1 > 0).count() >= 2,
        "losses fell on one session only: {all:?}"
    );
    f.stop();
}
