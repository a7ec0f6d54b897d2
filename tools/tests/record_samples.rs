//! `gpupm record --samples` and `gpupm report --trace` end to end: the
//! real driver (step clock) and gpupmd, a tenant recording its VM's
//! counter deltas and samples through its stream and sampling sessions.
//! The merged trace is ordered by (cycle, sequence), holds every record of
//! every type exactly once, and per sample type as many records as the
//! device stored (`BUF_PRODUCED − BUF_LOST`); torn and corrupt files give a
//! one-line error, never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gpupm_test_support::cli::{finish, spawn_as, Fixture, UID_VM1};
use gpupm_test_support::device::sample_buffer;
use gpupm_uapi::sampling::{self as s, buf_kind, samp};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// VM 1 is alone on partition 1 in the built-in scenario.
const VM: u32 = 1;
const PARTITION: u32 = 1;

fn args(f: &Fixture, extra: &[&str]) -> Vec<String> {
    extra
        .iter()
        .map(|s| s.to_string())
        .chain(["--tenant-node".into(), f.node()])
        .collect()
}

/// (produced, lost) of partition 1's buffer `k`, once the daemon has
/// drained it (tail = head).
fn drained_counts(f: &Fixture, k: u32) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = sample_buffer(&f.dev, PARTITION, k);
        if v[0] == v[1] {
            return (v[2], v[3]);
        }
        assert!(Instant::now() < deadline, "gpupmd never drained buffer {k}");
        std::thread::yield_now();
    }
}

/// `type` → records in the report's per-type summary of `file`.
fn type_counts(f: &Fixture, file: &str) -> BTreeMap<String, (u64, u64)> {
    let doc = f.gpupm(&["report", file, "--json"]).json();
    doc["types"]
        .as_array()
        .expect("types")
        .iter()
        .map(|t| {
            (
                t["type"].as_str().expect("type").to_string(),
                (
                    t["records"].as_u64().expect("records"),
                    t["lost"].as_u64().expect("lost"),
                ),
            )
        })
        .collect()
}

/// Checks the trace of `file`: order, and every record once per type.
fn check_trace(f: &Fixture, file: &str) -> BTreeMap<String, u64> {
    let run = f.gpupm(&["report", file, "--trace", "--json"]);
    assert_eq!(run.code, 0, "report --trace: {}", run.err);
    let lines: Vec<Value> = run
        .out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let key = |v: &Value| {
        (
            v["cycle"].as_u64().unwrap(),
            v["sequence"].as_u64().unwrap(),
        )
    };
    for w in lines.windows(2) {
        assert!(
            key(&w[0]) <= key(&w[1]),
            "out of order: {} then {}",
            w[0],
            w[1]
        );
    }
    let sequences: BTreeSet<u64> = lines.iter().map(|v| key(v).1).collect();
    assert_eq!(sequences.len(), lines.len(), "a sequence number twice");
    assert_eq!(
        sequences.iter().copied().collect::<Vec<_>>(),
        (0..lines.len() as u64).collect::<Vec<_>>(),
        "sequences are the file's ordinals"
    );
    let mut per_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut device_seqs: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut session_seqs: BTreeMap<bool, BTreeSet<u64>> = BTreeMap::new();
    for v in &lines {
        let ty = v["type"].as_str().unwrap().to_string();
        assert_eq!(v["vm"], VM, "a record of another VM: {v}");
        assert_eq!(v["sealed"], false);
        *per_type.entry(ty.clone()).or_default() += 1;
        let dseq = v["device_seq"].as_u64().expect("device_seq");
        assert!(
            device_seqs.entry(ty.clone()).or_default().insert(dseq),
            "{ty} device seq {dseq} twice"
        );
        let sampled = ty != "counter_delta";
        let sseq = v["session_seq"].as_u64().unwrap();
        assert!(
            session_seqs.entry(sampled).or_default().insert(sseq),
            "{ty} session seq {sseq} twice"
        );
    }
    // Each session delivered 1, 2, …, n: none skipped, none repeated.
    for (sampled, seqs) in session_seqs {
        let n = seqs.len() as u64;
        assert_eq!(
            seqs.into_iter().collect::<Vec<_>>(),
            (1..=n).collect::<Vec<_>>(),
            "session seqs (sampled: {sampled})"
        );
    }
    per_type
}

#[test]
fn the_merged_trace_is_ordered_and_holds_every_record_of_every_type_once() {
    let mut f = Fixture::start_with_tenants("record-samples", &[], &[(VM, UID_VM1)]);
    f.advance_ms(10);
    let file = f.tmp.join("samples.gpupm").display().to_string();
    let rec_args = args(
        &f,
        &[
            "record",
            "--vm",
            "1",
            "--samples",
            "-o",
            &file,
            "--period",
            "4096",
            "--branch-every",
            "64",
        ],
    );
    let child = spawn_as(Some(UID_VM1), &rec_args);
    let deadline = Instant::now() + Duration::from_secs(30);
    while f
        .dev
        .read32(samp(PARTITION, s::SAMP_CTRL))
        .expect("SAMP_CTRL")
        == 0
    {
        assert!(
            Instant::now() < deadline,
            "the sampling session never armed the samplers"
        );
        std::thread::yield_now();
    }
    f.advance_ms(20);
    // The clock stands still: the device produces nothing more. Once the
    // daemon drained both buffers, the device's counts are final.
    let (branch_produced, branch_lost) = drained_counts(&f, buf_kind::BRANCH);
    let (pc_produced, pc_lost) = drained_counts(&f, buf_kind::PC);
    let stored = [
        ("branch_stack", branch_produced - branch_lost),
        ("pc_sample", pc_produced - pc_lost),
    ];
    assert!(stored.iter().all(|(_, n)| *n > 0), "no samples: {stored:?}");
    // The recorder flushes after every batch: wait until its (unfinished)
    // file holds every stored sample and some counter deltas.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = type_counts(&f, &file);
        let samples_in = stored
            .iter()
            .all(|(t, n)| got.get(*t).map(|g| g.0) == Some(*n));
        // Counter deltas arrive when gpupmd drains the stream ring.
        if samples_in && got.get("counter_delta").is_some_and(|g| g.0 > 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the recording has {got:?}, the device stored {stored:?}"
        );
    }
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGINT).expect("SIGINT the recorder");
    let rec = finish(child);
    assert_eq!(rec.code, 0, "record: {}", rec.err);

    let per_type = check_trace(&f, &file);
    let summary = type_counts(&f, &file);
    for (t, n) in stored {
        assert_eq!(per_type.get(t), Some(&n), "{t} in the trace");
        assert_eq!(summary[t].0, n, "{t} in the summary");
    }
    assert_eq!(summary["branch_stack"].1, branch_lost, "branch stacks lost");
    assert_eq!(summary["pc_sample"].1, pc_lost, "PC samples lost");
    assert!(
        per_type["counter_delta"] > 0,
        "counter deltas alongside the samples"
    );
    assert!(
        rec.err
            .contains(&format!("{} PC samples", per_type["pc_sample"])),
        "{}",
        rec.err
    );
    let text = f.gpupm(&["report", &file]);
    assert_eq!(text.code, 0, "{}", text.err);
    assert!(
        text.out.contains("pc_sample") && text.out.contains("samples per context"),
        "{}",
        text.out
    );

    // A recording without samples still reads. Counter deltas arrive
    // when gpupmd drains the stream ring (at its watermark or its drain
    // period, whichever comes first): the device runs until the
    // recording holds one, however long that takes in wall time.
    let plain = f.tmp.join("plain.gpupm").display().to_string();
    let child = spawn_as(
        Some(UID_VM1),
        &args(&f, &["record", "--vm", "1", "-o", &plain]),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        f.advance_ms(2);
        if std::path::Path::new(&plain).exists() {
            let report = f.gpupm(&["report", &plain, "--json"]);
            let deltas = (report.code == 0).then(|| report.json()).map_or(0, |doc| {
                doc["types"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|t| t["type"] == "counter_delta")
                    .filter_map(|t| t["records"].as_u64())
                    .sum::<u64>()
            });
            if deltas > 0 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the plain recording never held a counter delta"
        );
    }
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGINT).expect("SIGINT the recorder");
    let plain_run = finish(child);
    assert_eq!(plain_run.code, 0, "{}", plain_run.err);
    // It says what it covers, in wall and device time.
    assert!(
        plain_run.err.contains("the recording covers") && plain_run.err.contains("wall,"),
        "{}",
        plain_run.err
    );
    // A recording holds a tenant's counts: owner-only, whatever the umask.
    use std::os::unix::fs::PermissionsExt;
    for rec in [&plain, &file] {
        let mode = std::fs::metadata(rec)
            .expect("recording")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{rec}");
    }
    let plain_types = type_counts(&f, &plain);
    assert!(plain_types["counter_delta"].0 > 0, "{plain_types:?}");
    assert_eq!(plain_types["pc_sample"].0, 0);

    torn_and_corrupt_files_give_one_line_errors(&f, &file);
    f.stop();
}

fn torn_and_corrupt_files_give_one_line_errors(f: &Fixture, file: &str) {
    let bytes = std::fs::read(file).expect("recording");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("torn", bytes[..bytes.len() - 100].to_vec(), "truncated"),
        ("header only", bytes[..64].to_vec(), "header says"),
        ("short", bytes[..20].to_vec(), "too short"),
        (
            "frame size",
            {
                let mut b = bytes.clone();
                b[64 + 4..64 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
                b
            },
            "corrupt frame at byte 64",
        ),
        (
            "frame kind",
            {
                // The first frame is the sampling session's answer: as a PC
                // sample its header does not match.
                let mut b = bytes.clone();
                b[64..66].copy_from_slice(&3u16.to_le_bytes());
                b
            },
            "corrupt frame at byte 64",
        ),
    ];
    for (name, b, want) in cases {
        let path = f.tmp.join(format!("{}.gpupm", name.replace(' ', "-")));
        std::fs::write(&path, b).expect("write");
        for extra in [&[][..], &["--trace"][..]] {
            let mut a = vec!["report", path.to_str().unwrap()];
            a.extend(extra);
            let r = f.gpupm(&a);
            assert_eq!(r.code, 2, "{name}: {r:?}");
            assert!(
                r.err.starts_with("gpupm: ") && r.err.contains(want),
                "{name}: {}",
                r.err
            );
            assert_eq!(r.err.lines().count(), 1, "{name}: {}", r.err);
        }
    }
}
