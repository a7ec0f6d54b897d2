//! Every reading says what it covers: `stat` totals since the device's
//! reset, `stat --duration`, `stat -- CMD` (like `perf stat`), `stat -I`
//! rows that chain cycle to cycle with device and wall time and a
//! timestamp (human, CSV, JSON), and the note when device and wall time
//! differ; `dmon` like `nvidia-smi dmon`.

use std::time::Duration;

use gpupm_test_support::cli::{finish, spawn_as, Fixture, UID_A, VM_A};
use serde_json::Value;

use super::{clock_khz, Stream};

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A timestamp like `2025-06-01T12:00:01.123Z`.
fn is_rfc3339_utc(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 24 && b[4] == b'-' && b[10] == b'T' && b[19] == b'.' && s.ends_with('Z')
}

#[test]
fn intervals_and_spans_say_what_they_cover() {
    let mut f = Fixture::start("live-spans");
    f.advance_ms(10);
    let khz = clock_khz(&f);

    // Totals since the device's reset.
    let once = f.gpupm(&["stat", "--vm", "1", "--json"]).json();
    let cycle = once["cycle"].as_u64().unwrap();
    assert_eq!(once["start_cycle"], 0);
    assert_eq!(once["end_cycle"], cycle);
    assert!((f64_of(&once["device_ms"]) - cycle as f64 / khz as f64).abs() < 1e-6);
    assert!(once.get("wall_ms").is_none(), "{once}");
    assert!(
        is_rfc3339_utc(once["timestamp"].as_str().unwrap()),
        "{once}"
    );
    let text = f.gpupm(&["stat", "--vm", "1"]);
    assert!(
        text.out.contains("since the device's reset"),
        "{}",
        text.out
    );

    // Intervals chain: each starts where the one before ended.
    let mut s = Stream::spawn(
        &f,
        &["stat", "--vm", "1", "-I", "100", "--json", "--count", "4"],
    );
    s.until("first", |_| true);
    f.advance_ms(5);
    s.until("second", |_| true);
    f.advance_ms(5);
    assert_eq!(s.wait(), 0, "{}", s.stderr());
    let rows = s.rows();
    assert_eq!(rows.len(), 4, "{}", s.seen.join("\n"));
    for (a, b) in rows.iter().zip(&rows[1..]) {
        assert_eq!(a["end_cycle"], b["start_cycle"], "{a}\n{b}");
    }
    for r in &rows {
        let (start, end) = (
            r["start_cycle"].as_u64().unwrap(),
            r["end_cycle"].as_u64().unwrap(),
        );
        assert_eq!(r["cycle"].as_u64(), Some(end));
        assert!((f64_of(&r["device_ms"]) - (end - start) as f64 / khz as f64).abs() < 1e-6);
        assert!(f64_of(&r["wall_ms"]) >= 90.0, "{r}");
        assert!(is_rfc3339_utc(r["timestamp"].as_str().unwrap()), "{r}");
        assert_eq!(r["interval_ms"], 100);
        assert!(
            ["ok", "catch_up"].contains(&r["status"].as_str().unwrap()),
            "{r}"
        );
    }
    // The step clock moved 5 ms in a 100 ms interval: said in the text.
    let mut human = Stream::spawn(&f, &["stat", "--vm", "1", "-I", "1s", "--count", "1"]);
    f.advance_ms(5);
    assert_eq!(human.wait(), 0, "{}", human.stderr());
    let text = human.seen.join("\n");
    assert!(text.contains("device and wall time differ"), "{text}");
    assert!(
        text.contains("wall,") && text.contains("device time"),
        "{text}"
    );
    let csv = f.gpupm(&["stat", "--vm", "1", "-I", "50", "--count", "1", "--csv"]);
    let mut lines = csv.out.lines();
    assert_eq!(
        lines.next(),
        Some("scope,id,cycle,interval_ms,kind,name,value,timestamp,start_cycle,device_ms,wall_ms,status")
    );
    for l in lines {
        let cells: Vec<&str> = l.split(',').collect();
        assert_eq!(cells.len(), 12, "{l}");
        assert!(is_rfc3339_utc(cells[7]), "{l}");
    }

    // `--duration` and `-- CMD`: the counts of that span, like perf stat.
    let args: Vec<String> = [
        "stat",
        "--vm",
        "1",
        "-e",
        "sm_inst_executed",
        "--duration",
        "300ms",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(["--tenant-node".into(), f.node()])
    .collect();
    let mut child = spawn_as(None, &args);
    // The step clock must move after stat's first reading, which comes at
    // some point after the spawn: step it until stat is done (one step
    // advanced before that reading made the span empty).
    while child.try_wait().expect("poll gpupm stat").is_none() {
        f.advance_ms(1);
    }
    let d = finish(child).json();
    assert!(f64_of(&d["wall_ms"]) >= 300.0, "{d}");
    assert!(d["end_cycle"].as_u64() > d["start_cycle"].as_u64(), "{d}");
    assert!(d["events"]["sm_inst_executed"].as_u64().unwrap() > 0, "{d}");
    // The node options go before `--`: what follows is the command's.
    let args: Vec<String> = [
        "stat",
        "--vm",
        &VM_A.to_string(),
        "--json",
        "--tenant-node",
        &f.node(),
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(["--", "sh", "-c", "echo from-the-command; exit 3"].map(String::from))
    .collect();
    let cmd = finish(spawn_as(Some(UID_A), &args));
    assert_eq!(cmd.code, 3, "the command's exit status: {}", cmd.err);
    assert_eq!(cmd.out, "from-the-command\n", "stdout is the command's");
    let counts: Value = serde_json::from_str(cmd.err.trim()).expect("the counts on stderr");
    assert_eq!(counts["id"].as_u64(), Some(u64::from(VM_A)));
    assert!(counts["wall_ms"].is_number(), "{counts}");
    std::thread::sleep(Duration::from_millis(1));
    f.stop();
}

#[test]
fn dmon_is_scriptable_like_nvidia_smi_dmon() {
    let f = Fixture::start("live-dmon");
    let all = f.gpupm(&["dmon", "-I", "50", "-c", "2", "--header-every", "4"]);
    assert_eq!(all.code, 0, "{}", all.err);
    let lines: Vec<&str> = all.out.lines().collect();
    assert!(
        lines[0].starts_with("#") && lines[1].starts_with("#"),
        "{}",
        all.out
    );
    let head: Vec<&str> = lines[0]
        .trim_start_matches('#')
        .split_whitespace()
        .collect();
    assert_eq!(
        head,
        ["Time", "vm", "sm", "ipc", "inst", "l2hit", "dram", "pcie", "devms", "status"]
    );
    let units: Vec<&str> = lines[1]
        .trim_start_matches('#')
        .split_whitespace()
        .collect();
    assert_eq!(
        units,
        ["HH:MM:SS", "Idx", "%", "i/c", "Mi/s", "%", "MB/s", "MB/s", "ms", "-"]
    );
    let data: Vec<&str> = lines
        .iter()
        .filter(|l| !l.starts_with('#'))
        .copied()
        .collect();
    assert_eq!(data.len(), 12, "6 VMs × 2 intervals:\n{}", all.out);
    // The header repeats after 4 data lines or more, between intervals.
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("#Time")).count(),
        2,
        "{}",
        all.out
    );
    assert!(lines[8].starts_with("#Time"), "{}", all.out);
    for l in &data {
        let cells: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(cells.len(), head.len(), "fixed columns: {l:?}");
        let numbers = &cells[2..cells.len() - 1];
        assert!(
            numbers.iter().all(|c| !c.contains('e')),
            "no e-notation: {l:?}"
        );
        if cells[1] == "4" {
            // The confidential VM: `-` in every metric column.
            assert_eq!(
                &cells[2..],
                ["-", "-", "-", "-", "-", "-", "0.0", "sealed"],
                "{l:?}"
            );
        }
    }
    let some = f.gpupm(&[
        "dmon", "-c", "1", "-I", "50", "--vm", "1,5", "-s", "sm,dram", "-o", "DT",
    ]);
    assert_eq!(some.code, 0, "{}", some.err);
    let lines: Vec<&str> = some.out.lines().collect();
    let head: Vec<&str> = lines[0]
        .trim_start_matches('#')
        .split_whitespace()
        .collect();
    assert_eq!(
        head,
        ["Date", "Time", "vm", "sm", "dram", "devms", "status"]
    );
    let vms: Vec<&str> = lines[2..]
        .iter()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(vms, ["1", "5"]);
    let csv = f.gpupm(&[
        "dmon", "-c", "1", "-I", "50", "--csv", "-s", "ipc", "--vm", "1",
    ]);
    assert_eq!(
        csv.out.lines().next(),
        Some("timestamp,date,time,vm,ipc,start_cycle,end_cycle,device_ms,wall_ms,status")
    );
    assert_eq!(csv.out.lines().count(), 2, "{}", csv.out);
    let none = f.gpupm(&["dmon", "-c", "1", "--vm", "63"]);
    assert_eq!(
        (none.code, none.err.as_str()),
        (
            2,
            "gpupm: no VM 63 visible to you (it does not exist or is not yours)\n"
        )
    );
    f.stop();
}
