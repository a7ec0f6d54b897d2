//! Clients written from `docs/abi.md` and `include/gpupm/gpupm_uapi.h`
//! alone, in another language (`tests/clients/outside/`, Python, stdlib
//! only, every number and struct layout parsed from the header), against
//! the real `gpupm-driver` and `gpupmd`:
//!
//! * the host client is the only host of a step-clock driver: it answers
//!   every switch request with the full handshake, keeps the context
//!   table, drains the rings, and at a quiescent point its per-system, VM
//!   and context totals must equal the driver's ledger — checked again
//!   here, from Rust, against what it printed;
//! * the tenant client, run as a tenant's uid, reads its VM through a live
//!   `gpupmd` and gets exactly the ledger's totals, and EACCES for another
//!   VM; run as an unmapped uid it cannot even open the node.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use gpupm_test_support::device::{self, expected, flush, step, wait_none_destroyed};
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::services::{daemon_config, start_daemon};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::regs::{self as r, ctx_state, hs_state};
use serde_json::Value;

const HEADER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../include/gpupm/gpupm_uapi.h"
);
const CLIENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/clients/outside");
/// A uid no account uses: the tenant of VM 1.
const TENANT_UID: u32 = 64_601;
/// A uid no `[[tenant]]` entry names.
const UNMAPPED_UID: u32 = 64_602;

/// Runs `script` with `args` (as `uid` when given) and returns its output.
fn python(script: &str, args: &[String], uid: Option<u32>) -> Output {
    let mut cmd = Command::new("python3");
    cmd.arg("-B").arg(format!("{CLIENTS}/{script}")).args(args);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run python3 (the outside clients need it): {e}"))
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON from the client ({e}): status {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn counters(v: &Value) -> Vec<u64> {
    let values: Vec<u64> = v
        .as_array()
        .unwrap_or_else(|| panic!("not a counter array: {v}"))
        .iter()
        .map(|x| x.as_u64().expect("a count"))
        .collect();
    assert_eq!(values.len(), MAX_EVENTS, "{v}");
    values
}

#[test]
fn an_outside_host_client_answers_every_switch_and_its_totals_equal_the_ledger() {
    let tmp = Scratch::new("outside-host");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let steps = 300;
    let out = python(
        "host_client.py",
        &[
            HEADER.into(),
            driver.dir.display().to_string(),
            steps.to_string(),
            STEP.to_string(),
        ],
        None,
    );
    let got = json_of(&out);
    assert!(
        out.status.success() && got["ok"] == true,
        "the client's checks failed: {}\n{}",
        got["mismatches"],
        String::from_utf8_lossy(&out.stderr)
    );

    // The client did every switch: the device counted no fallback, and as
    // many switches as the client's handshakes.
    let handshakes = got["handshakes"].as_u64().expect("handshakes");
    assert_eq!(device::part_sum(&dev, r::PART_FALLBACKS), 0);
    assert_eq!(device::part_sum(&dev, r::PART_SWITCHES), handshakes);
    assert!(handshakes > 1000, "only {handshakes} switches");
    assert!(
        got["retired"].as_u64() > Some(50),
        "too little churn: {}",
        got["retired"]
    );
    assert_eq!(got["lost"], 0);
    assert!(device::hs_states(&dev).iter().all(|&s| s == hs_state::IDLE));

    // Its totals, checked here against the ledger the client also used.
    assert_eq!(
        counters(&got["system"]),
        expected(&dev.ledger(ledger_scope::SYSTEM, 0).expect("ledger")).to_vec()
    );
    let vms = got["vms"].as_object().expect("vms");
    assert_eq!(vms.len(), 10);
    for (vm, totals) in vms {
        let vm: u32 = vm.parse().expect("VM id");
        let want = expected(&dev.ledger(ledger_scope::VM, vm).expect("ledger"));
        assert_eq!(counters(totals), want.to_vec(), "VM {vm}");
    }
    let contexts = got["contexts"].as_object().expect("contexts");
    assert!(contexts.len() >= 20, "{} live contexts", contexts.len());
    for (name, c) in contexts {
        let (ctx, created) = name.split_once('@').expect("ctx@created");
        let ctx: u32 = ctx.parse().expect("context id");
        assert_eq!(
            dev.read64(r::ctx(ctx, r::CTX_CREATED_CYCLE)).unwrap(),
            created.parse::<u64>().unwrap()
        );
        let want = expected(&dev.ledger(ledger_scope::CONTEXT, ctx).expect("ledger"));
        assert_eq!(counters(&c["totals"]), want.to_vec(), "context {name}");
    }

    // Every switch waited for its acks and resumed on FLUSH_ACKED (ABI 1.3).
    assert_eq!(got["flush_acked"].as_u64(), Some(handshakes));
    assert_eq!(
        got["ack_waits"].as_u64(),
        Some(handshakes - 1),
        "all but the traced one"
    );
    assert_eq!(got["fallback_won"], 0);
    let acked_record = got["trace"]
        .as_array()
        .expect("trace")
        .iter()
        .find_map(|t| t["record"].as_object())
        .expect("the traced switch's FLUSH_ACKED record");
    assert_eq!(
        acked_record["source"].as_u64(),
        Some(u64::from(gpupm_uapi::intr::source::FLUSH_ACKED))
    );

    // The documented state machine, write by write.
    let states: Vec<u64> = got["trace"]
        .as_array()
        .expect("trace")
        .iter()
        .filter_map(|t| t["state_after"].as_u64())
        .collect();
    let s = |x: u32| u64::from(x);
    assert_eq!(
        states,
        [
            s(hs_state::CTX_PAUSED),
            s(hs_state::XFER_PAUSED),
            s(hs_state::XFER_PAUSED),
            s(hs_state::TRIGGERED),
            // FLUSH_REQ: the acks travel in device time ...
            s(hs_state::TRIGGERED),
            // ... and are in after the client advanced FLUSH_ACK_MAX_CYCLES.
            s(hs_state::ACKED),
            s(hs_state::COMMITTED),
            s(hs_state::COMMITTED),
            s(hs_state::COMMITTED),
            s(hs_state::REPOINTED),
            s(hs_state::IDLE)
        ]
    );
    driver.stop();
}

#[test]
fn an_outside_tenant_client_reads_exactly_its_vm_and_is_refused_another() {
    let tmp = Scratch::new("outside-tenant");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let config = daemon_config(&tmp, &format!("[[tenant]]\nvm = 1\nuid = {TENANT_UID}\n"));
    let mut daemon = start_daemon(&tmp, &config);
    for _ in 0..200 {
        step(&dev, STEP, &mut daemon);
    }
    flush(&dev);
    wait_none_destroyed(&dev);

    let node = tmp.join("tenant").join("node").display().to_string();
    let args = [HEADER.into(), node, "1".into(), "2".into()];
    let out = python("tenant_client.py", &args, Some(TENANT_UID));
    let got = json_of(&out);
    assert!(
        out.status.success() && got["ok"] == true,
        "{got}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(got["whoami"]["vms"], serde_json::json!([1]));
    assert_eq!(got["whoami"]["uid"], TENANT_UID);
    assert_eq!(
        counters(&got["vm_totals"]["values"]),
        expected(&dev.ledger(ledger_scope::VM, 1).expect("ledger")).to_vec()
    );
    for (name, errno) in got["refused"].as_object().expect("refused") {
        assert_eq!(errno, libc::EACCES, "{name}");
    }
    // Every context instance it listed: live ones equal the ledger, and
    // live plus retired add up to the VM (partition-scoped events).
    let contexts: BTreeMap<String, Value> = got["contexts"]
        .as_object()
        .expect("contexts")
        .clone()
        .into_iter()
        .collect();
    let mut sum = [0u64; MAX_EVENTS];
    let mut live = 0;
    for (name, c) in &contexts {
        let values = counters(&c["values"]);
        for (s, v) in sum.iter_mut().zip(&values) {
            *s += v;
        }
        let ctx: u32 = name
            .split_once('@')
            .expect("ctx@created")
            .0
            .parse()
            .expect("id");
        if c["state"] == gpupm_uapi::tenant::ctx_state::ACTIVE
            && dev.read32(r::ctx(ctx, r::CTX_STATE)).unwrap() == ctx_state::ACTIVE
        {
            live += 1;
            let want = expected(&dev.ledger(ledger_scope::CONTEXT, ctx).expect("ledger"));
            assert_eq!(values, want.to_vec(), "context {name}");
        }
    }
    assert!(live >= 2 && contexts.len() > live, "{contexts:?}");
    let vm = counters(&got["vm_totals"]["values"]);
    for e in gpupm_uapi::events::CATALOGUE {
        if e.unit.scope() != gpupm_uapi::events::Scope::Device {
            let i = usize::from(e.id);
            assert_eq!(sum[i], vm[i], "{}: contexts vs VM", e.name);
        }
    }

    // A uid no [[tenant]] entry names cannot open the node.
    let out = python("tenant_client.py", &args, Some(UNMAPPED_UID));
    let refused = json_of(&out);
    assert_eq!(refused["open_errno"], libc::EACCES, "{refused}");
    assert!(!out.status.success());

    let status = daemon.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    driver.stop();
}
