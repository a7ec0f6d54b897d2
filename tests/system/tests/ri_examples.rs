//! The runtime-instrumentation example programs (`examples/c/tenant_ri.c`,
//! `examples/python/tenant_ri.py`) as an outside tenant runs them: built
//! from the generated header (or staged with the generated constants), run
//! as a real unprivileged uid against `gpupm-driver` (step clock, the RI
//! scenario, debug ledger) and `gpupmd`. What each prints is checked
//! against the device's RI ledger: a session read to its N groups, and a
//! session read until a migration through the device node halts it (then
//! the groups equal the ledger's exactly); another tenant's context fails
//! with EACCES in both languages.

use std::collections::BTreeMap;
use std::fs::File;
use std::time::{Duration, Instant};

use gpupm_client::DevNode;
use gpupm_test_support::device::{ledger_ri, migrate, step};
use gpupm_test_support::examples::{fields, run_all_while, Example};
use gpupm_test_support::model::ri::scenario_toml;
use gpupm_test_support::process::Proc;
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{wait_until, Driver, DriverOptions, Scratch};
use gpupm_uapi::regs as r;
use gpupm_uapi::ri::{self as ri, halt_reason, ri_ctrl, RI_BLOCKS};

const UID_A: u32 = 61601;
const UID_B: u32 = 61602;
/// Context 1 (VM 1, partition 1 at first) of the RI scenario.
const CTX: u32 = 1;
const SF: u64 = 1000;
const RGS: u64 = 4;
/// Groups the first session reads.
const GROUPS: u64 = 30;
/// Markers each example emits (RI_EMIT).
const EMITS: u64 = 3;
/// Steps a run may take before the test gives up.
const MAX_STEPS: u32 = 5_000;

fn tenants() -> String {
    format!("[[tenant]]\nvm = 1\nuid = {UID_A}\n[[tenant]]\nvm = 2\nuid = {UID_B}\n")
}

/// The block whose session watches `ctx`, if any.
fn block_of(card: &File, ctx: u32) -> Option<u32> {
    (0..RI_BLOCKS).find(|&b| ledger_ri(card, b).ctx == ctx)
}

/// Whether the sessions on `ctxs` are open and their markers are in
/// the collection buffers: until then the clock stands still, so the
/// markers land in the sessions' first groups (the device does not wait
/// for an example; the test does). Fails after 30 s.
fn emitted(card: &File, ctxs: &[u32], since: Instant) -> bool {
    let done = ctxs.iter().all(|&ctx| {
        block_of(card, ctx).is_some_and(|b| ledger_ri(card, b).emits_register >= EMITS)
    });
    assert!(
        done || since.elapsed() < Duration::from_secs(30),
        "the examples never opened their sessions and emitted"
    );
    if !done {
        std::thread::yield_now();
    }
    done
}

/// The command line of a cycle-mode session on `ctx` reading `groups`.
fn args(ctx: u32, groups: u64, node: &str) -> Vec<String> {
    [
        ctx.to_string(),
        "cycle".into(),
        SF.to_string(),
        RGS.to_string(),
        groups.to_string(),
        node.into(),
    ]
    .into()
}

/// The example's one summary line as fields.
fn summary(example: &Example, out: &str) -> BTreeMap<String, u64> {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{}: one line, got {out:?}",
        example.language
    );
    let f = fields(lines[0]);
    for key in [
        "block",
        "groups",
        "records",
        "emits",
        "markers",
        "lost",
        "first_cycle",
        "last_cycle",
    ] {
        assert!(
            f.contains_key(key),
            "{}: no {key} in {out:?}",
            example.language
        );
    }
    f
}

/// The session's block is disabled and unbound once gpupmd handled the
/// example's exit (the node's release arrives after the exit).
fn assert_block_freed(dev: &DevNode, block: u32) {
    wait_until(
        "the block freed",
        Duration::from_secs(10),
        Duration::from_millis(1),
        || {
            let ctx = dev.read32(ri::ri(block, ri::RI_CTX)).expect("RI_CTX");
            let ctrl = dev.read32(ri::ri(block, ri::RI_CTRL)).expect("RI_CTRL");
            (ctx == 0 && ctrl & ri_ctrl::ENABLE == 0)
                .then_some(())
                .ok_or(format!("block {block}: ctx {ctx}, ctrl {ctrl:#x}"))
        },
    );
}

/// Reads [`GROUPS`] groups: every one delivered, SF cycles apart, the
/// markers once; the ledger stored at least as many and saw the emits.
fn read_n_groups(example: &Example, node: &str, dev: &DevNode, card: &File, daemon: &mut Proc) {
    let args = args(CTX, GROUPS, node);
    let (mut steps, start) = (0, Instant::now());
    let out = example.run_while(UID_A, &args, || {
        if steps == 0 && !emitted(card, &[CTX], start) {
            return true;
        }
        steps += 1;
        assert!(
            steps < MAX_STEPS,
            "{}: never read its groups",
            example.language
        );
        step(dev, STEP, daemon);
        true
    });
    let f = summary(example, &out);
    let who = example.language;
    eprintln!("{who}: {GROUPS} groups read in {steps} steps");
    assert_eq!(
        (f["groups"], f["records"], f["lost"], f["emits"]),
        (GROUPS, GROUPS * (2 << RGS), 0, EMITS),
        "{who}: {out}"
    );
    assert_eq!(
        f["last_cycle"] - f["first_cycle"],
        (GROUPS - 1) * SF,
        "{who}"
    );
    assert!(!f.contains_key("halt"), "{who}: {out}");
    let block = u32::try_from(f["block"]).unwrap();
    let truth = ledger_ri(card, block);
    assert!(
        truth.stored >= GROUPS,
        "{who}: the device stored {}",
        truth.stored
    );
    assert_eq!(
        truth.emits_register, EMITS,
        "{who}: emits the device collected"
    );
    assert!(f["markers"] <= truth.emits_marker, "{who}: {out}");
    assert_eq!(truth.overwritten, 0, "{who}");
    assert_block_freed(dev, block);
}

/// The C example on context 1 and the Python one on context 2 (both of
/// VM 1) read until a migration of VM 1 to slot 3 (another capability
/// version) halts both sessions: each read every group its block stored,
/// exactly, and the halt reason.
fn read_until_halted(
    examples: &[Example],
    node: &str,
    dev: &DevNode,
    card: &File,
    daemon: &mut Proc,
) {
    let ctxs = [CTX, CTX + 1];
    let argv: Vec<Vec<String>> = ctxs.iter().map(|&c| args(c, 1_000_000, node)).collect();
    let runs: Vec<(&Example, u32, &[String])> = examples
        .iter()
        .zip(&argv)
        .map(|(e, a)| (e, UID_A, a.as_slice()))
        .collect();
    let (mut steps, mut migrated, start) = (0, false, Instant::now());
    let outs = run_all_while(&runs, || {
        if steps == 0 && !emitted(card, &ctxs, start) {
            return true;
        }
        steps += 1;
        assert!(steps < MAX_STEPS, "the sessions never halted");
        let stored = |c| block_of(card, c).is_some_and(|b| ledger_ri(card, b).stored >= 10);
        if !migrated && ctxs.iter().all(|&c| stored(c)) {
            migrate(dev, 1, 3, daemon);
            migrated = true;
        }
        step(dev, STEP, daemon);
        true
    });
    for (example, out) in examples.iter().zip(&outs) {
        let f = summary(example, out);
        let who = example.language;
        eprintln!("{who}: halted after {steps} steps: {}", out.trim_end());
        let block = u32::try_from(f["block"]).unwrap();
        let truth = ledger_ri(card, block);
        assert_eq!(
            f.get("halt"),
            Some(&u64::from(halt_reason::VERSION)),
            "{who}: {out}"
        );
        assert_eq!(
            (f["groups"], f["lost"], f["emits"]),
            (truth.stored, 0, EMITS),
            "{who}: every group the device stored, once: {out}"
        );
        assert_eq!(
            f["last_cycle"] - f["first_cycle"],
            (truth.stored - 1) * SF,
            "{who}: samples SF context cycles apart"
        );
        assert_eq!(truth.emits_register, EMITS, "{who}");
        assert!(f["markers"] <= truth.emits_marker, "{who}: {out}");
        assert_block_freed(dev, block);
    }
}

#[test]
fn the_c_and_python_ri_examples_read_what_the_device_stored() {
    let tmp = Scratch::new("ri-examples");
    let driver = Driver::start_in(&tmp, DriverOptions::system(scenario_toml(7, "gemm")));
    let dev = driver.node();
    let card = driver.card();
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
    daemon.wait_for("READY=1");
    for _ in 0..64 {
        if dev.read32(r::ctx(CTX, r::CTX_STATE)).ok() == Some(r::ctx_state::ACTIVE) {
            break;
        }
        step(&dev, STEP, &mut daemon);
    }
    let node = tmp.join("tenant").join("node").display().to_string();
    let examples = [
        Example::c("tenant_ri", tmp.path()),
        Example::python("tenant_ri", tmp.path()),
    ];
    for example in &examples {
        read_n_groups(example, &node, &dev, &card, &mut daemon);
    }
    // VM 1 is alone on slot 3 then: it never moves again.
    read_until_halted(&examples, &node, &dev, &card, &mut daemon);
    for example in &examples {
        let args = [
            CTX.to_string(),
            "cycle".into(),
            SF.to_string(),
            "2".into(),
            "1".into(),
            node.clone(),
        ];
        example.assert_denied_as(UID_B, &args);
    }
    assert_eq!(daemon.metric("gpupm_ri_sessions"), 0);
    daemon.stop();
    driver.stop();
}
