//! `gpupm ri` end to end: the real driver (step clock, `--debug-ledger`,
//! the built-in scenario) and gpupmd, tenant A streaming report groups of
//! its own context as JSON. Once the clock stops, every group the device
//! stored (the RI ledger's `stored`) is printed once, numbered 1, 2, …,
//! begin/timestamp first and the sample last, SF context cycles apart,
//! the last at the ledger's last sample point. Another tenant's context is
//! refused with one line and no output.

use gpupm_test_support::cli::{Fixture, UID_A, UID_B, VM_A};
use serde_json::Value;

/// SF: few enough groups per 1 ms step that the default buffer never wraps.
const SF: u64 = 100_000;

#[test]
fn gpupm_ri_prints_every_group_the_ledger_counts_and_refuses_foreign_contexts() {
    let mut f = Fixture::start_with("ri", &["--debug-ledger"]);
    f.advance_ms(2);
    let ctx = f.program_context(VM_A);

    let denied = f.gpupm_as(
        UID_B,
        &["ri", "--ctx", &ctx.to_string(), "--duration", "1s"],
    );
    assert_ne!(denied.code, 0);
    assert!(denied.out.is_empty(), "{}", denied.out);
    assert_eq!(denied.err.lines().count(), 1, "{}", denied.err);

    // Run the clock until the session stored 20 groups, then let it rest.
    let sf = SF.to_string();
    let (run, truth) = f.ri_until_stored(
        UID_A,
        ctx,
        &[
            "--interval",
            &sf,
            "--rgs",
            "2",
            "--json",
            "--duration",
            "6s",
        ],
        20,
    );
    assert_eq!(run.code, 0, "{}", run.err);
    let entries: Vec<Value> = run
        .out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(entries.len() as u64, truth.stored, "{}", run.out);
    // The session's summary, as `-o FILE` prints it, also for stdout.
    assert_eq!(
        run.err,
        format!(
            "gpupm: printed {} report groups, 0 halts; 0 groups lost (0.0 %)\n",
            truth.stored
        )
    );
    let mut cycles = Vec::new();
    for (k, e) in entries.iter().enumerate() {
        assert_eq!(
            (e["kind"].as_str(), e["rgs"].as_u64()),
            (Some("group"), Some(2))
        );
        assert_eq!(e["group"].as_u64(), Some(k as u64 + 1));
        assert_eq!(e["lost_before"].as_u64(), Some(0));
        let records = e["records"].as_array().unwrap();
        let first = if k == 0 { "begin" } else { "timestamp" };
        assert_eq!(records[0]["kind"], first);
        let last = records.last().unwrap();
        assert_eq!(last["kind"], "instruction");
        cycles.push(last["ctx_cycle"].as_u64().unwrap());
    }
    assert!(cycles.windows(2).all(|w| w[1] - w[0] == SF), "{cycles:?}");
    assert_eq!(*cycles.last().unwrap(), truth.last_sample_ctx_cycle);
}
