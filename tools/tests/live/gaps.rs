//! gpupmd restarted, then the driver restarted, then both gone for good,
//! under `stat -I` and `dmon`: `no_data` rows while nothing answers, a
//! `catch_up` row that covers the outage (the counts across it are
//! conserved), a `reset` row after the device's reset, and exit status 1
//! once the daemon is gone for longer than `--give-up-after`.

use std::process::Command;

use gpupm_client::DevNode;
use gpupm_test_support::cli::Fixture;
use gpupm_test_support::process::Proc;
use serde_json::Value;

use super::Stream;

fn total(f: &Fixture) -> (u64, u64) {
    let s = f
        .gpupm(&["stat", "--vm", "1", "-e", "sm_inst_executed", "--json"])
        .json();
    (
        s["events"]["sm_inst_executed"].as_u64().expect("total"),
        s["cycle"].as_u64().expect("cycle"),
    )
}

/// The total once the daemon has folded in every commit of the last
/// advance: the same in two readings 200 ms apart (the device does not
/// move between them).
fn settled(f: &Fixture) -> (u64, u64) {
    let mut last = total(f);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let now = total(f);
        if now == last {
            return now;
        }
        last = now;
    }
}

fn status(v: &Value) -> &str {
    v["status"].as_str().unwrap_or("")
}

fn start_daemon(f: &mut Fixture, name: &str) {
    let mut cmd = Command::new(gpupm_test_support::bin!(Daemon));
    cmd.arg("--config").arg(&f.config);
    f.daemon = Proc::start(name, cmd, f.tmp.path());
}

#[test]
fn outages_are_gaps_catch_ups_cover_them_and_a_daemon_gone_for_good_ends_the_view() {
    let mut f = Fixture::start("live-gaps");
    f.advance_ms(10);
    let (t0, _) = settled(&f);
    let args = ["-I", "100", "--json", "--give-up-after", "3s"];
    let mut stat = Stream::spawn(
        &f,
        &[&["stat", "--vm", "1", "-e", "sm_inst_executed"][..], &args].concat(),
    );
    let mut dmon = Stream::spawn(&f, &[&["dmon"][..], &args].concat());
    for s in [&mut stat, &mut dmon] {
        s.until("ok", |v| status(v) == "ok");
    }
    f.advance_ms(10);

    // gpupmd stops; the device counts on (its fallback finishes switches).
    f.daemon.stop();
    f.dev.advance(1_980_000 * 7).expect("advance");
    for s in [&mut stat, &mut dmon] {
        let gap = s.until("no_data", |v| status(v) == "no_data");
        assert!(gap["reason"].is_string() || gap["vms"].is_array(), "{gap}");
        if let Some(vms) = gap["vms"].as_array() {
            for vm in vms {
                assert!(
                    vm["sm_utilization"].is_null() && vm["inst_per_s"].is_null(),
                    "{gap}"
                );
            }
        } else {
            assert_eq!(
                gap["events"],
                serde_json::json!({}),
                "a gap has no values: {gap}"
            );
        }
    }
    start_daemon(&mut f, "gpupmd-2");
    for s in [&mut stat, &mut dmon] {
        let c = s.until("catch_up", |v| status(v) == "catch_up");
        assert!(c["start_cycle"].as_u64() < c["end_cycle"].as_u64(), "{c}");
    }
    f.advance_ms(10);
    let (t1, c1) = settled(&f);
    stat.until("reading of the last advance", |v| {
        v["end_cycle"].as_u64() == Some(c1)
    });
    // Conservation: the rows' deltas add up to the total's change.
    let sum: u64 = stat
        .rows()
        .iter()
        .filter_map(|r| r["events"]["sm_inst_executed"].as_u64())
        .sum();
    assert_eq!(sum, t1 - t0, "rows:\n{}", stat.seen.join("\n"));
    assert!(t1 > t0);

    // The driver restarts: the device's counts start again from zero.
    f.daemon.stop();
    f.driver.stop();
    let mut cmd = Command::new(gpupm_test_support::bin!(Driver));
    cmd.args(["--clock", "step", "--node-dir"])
        .arg(f.tmp.join("dev"));
    f.driver = Proc::start("driver-2", cmd, f.tmp.path());
    f.dev = DevNode::open(&f.tmp.join("dev")).expect("card0");
    start_daemon(&mut f, "gpupmd-3");
    for s in [&mut stat, &mut dmon] {
        s.until("reset", |v| status(v) == "reset");
    }

    // Both gone for good: the views give up with exit status 1.
    f.daemon.stop();
    f.driver.stop();
    for s in [&mut stat, &mut dmon] {
        assert_eq!(s.wait(), 1, "stderr:\n{}", s.stderr());
        let err = s.stderr();
        assert!(err.contains("no data from"), "{err}");
        assert!(err.contains("data again"), "{err}");
        assert!(err.contains("giving up"), "{err}");
    }
}
