//! `gpupm health` against the real driver and daemon: a device that
//! finishes switches by its fallback is a WARN of the handshakes check
//! (the alert rule's 1 %), with the share, p50/p99 and what to do, and
//! exit status 1 — not "healthy"; and gpupmd logs a burst of fallbacks as
//! one warning, not two per fallback.

use gpupm_test_support::cli::Fixture;
use serde_json::Value;

fn check<'a>(h: &'a Value, subsystem: &str) -> &'a Value {
    h["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["subsystem"] == subsystem)
        .unwrap_or_else(|| panic!("no {subsystem} check: {h}"))
}

#[test]
fn fallbacks_are_a_warning_and_are_logged_once() {
    let mut f = Fixture::start("health");
    let cfg = f.config.display().to_string();
    f.advance_ms(10);
    let calm = f.gpupm(&["health", "--config", &cfg, "--json"]);

    // 30 ms of device time in one step: the device's switch timeout passes
    // before gpupmd sees the requests, so the device finishes them.
    f.dev.advance(1_980_000 * 30).expect("advance");
    f.wait_idle();
    let h = f.gpupm(&["health", "--config", &cfg, "--json"]);
    let doc: Value = serde_json::from_str(&h.out).expect("JSON");
    assert_eq!(h.code, 1, "not healthy: {}", h.out);
    // Before the step gpupmd answered every switch itself.
    let calm_doc: Value = serde_json::from_str(&calm.out).expect("JSON");
    assert_eq!(
        check(&calm_doc, "handshakes")["verdict"],
        "pass",
        "{}",
        calm.out
    );
    let fallbacks = doc["device"]["fallbacks"].as_u64().unwrap();
    let switches = doc["device"]["switches"].as_u64().unwrap();
    assert!(
        fallbacks * 100 > switches,
        "the step made {fallbacks} fallbacks in {switches} switches"
    );
    assert_eq!(doc["verdict"], "warn");
    assert_eq!(doc["healthy"], false);
    let hs = check(&doc, "handshakes");
    assert_eq!(hs["verdict"], "warn");
    assert_eq!(hs["alert"], "GpupmHandshakeFallbacksRising");
    assert!(
        hs["next"]
            .as_str()
            .is_some_and(|n| n.contains("device_cpus")),
        "{hs}"
    );
    let text = f.gpupm(&["health", "--config", &cfg]);
    assert_eq!(text.code, 1);
    assert!(text.out.contains("  WARN  handshakes  "), "{}", text.out);
    assert!(
        text.out
            .contains("switches since the device's reset finished"),
        "{}",
        text.out
    );
    assert!(
        text.out.contains("p50 ") && text.out.contains("p99 "),
        "{}",
        text.out
    );
    assert!(text.out.contains("verdict: WARN"), "{}", text.out);
    // No raw floats: percentages with two decimals, durations with units.
    assert!(!text.out.contains("999999"), "{}", text.out);

    // One warning for the burst (at most one a minute), not two per
    // fallback.
    let log = f.daemon.log();
    let warnings = log
        .lines()
        .filter(|l| l.contains("WARN") && (l.contains("by fallback") || l.contains("abandoned")))
        .count();
    assert!(fallbacks >= 2, "{fallbacks} fallbacks");
    assert_eq!(warnings, 1, "{fallbacks} fallbacks logged as:\n{log}");
    f.stop();
}
