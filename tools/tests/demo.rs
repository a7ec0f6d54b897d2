//! `gpupm demo --headless --json` end to end: real driver and daemon on
//! private directories, final totals read through the tenant node equal the
//! device's ledger, and (checked here independently) every VM's totals are
//! the sum of its contexts' and the directories are gone afterwards.

mod common;

use std::process::Command;

use gpupm_uapi::events::CATALOGUE;

#[test]
fn demo_totals_equal_the_ledger_and_every_vm_is_the_sum_of_its_contexts() {
    common::require_root_and_fuse();
    common::build_helpers();
    let before: Vec<String> = tmp_demo_dirs();
    let out = Command::new(common::GPUPM)
        .args(["demo", "--headless", "--duration", "2s", "--json"])
        .output()
        .expect("run demo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["ledger_match"], true);
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["events", "ledger_match", "system", "vms"]);
    assert_eq!(doc["events"].as_object().unwrap().len(), CATALOGUE.len());
    assert_eq!(doc["events"]["nvlink_rx_flits"]["scope"], "device");
    assert_eq!(doc["events"]["fb_bytes"]["unit"], "32 bytes");
    let vms = doc["vms"].as_array().unwrap();
    assert_eq!(vms.len(), 6, "built-in scenario has six VMs");
    let mut churned = 0;
    for vm in vms {
        let totals = vm["totals"]
            .as_object()
            .expect("totals (sealed ones decrypted with the scenario key)");
        let ctxs = vm["contexts"].as_array().unwrap();
        churned = churned.max(ctxs.len());
        for e in CATALOGUE {
            let sum: u64 = ctxs
                .iter()
                .map(|c| c["totals"][e.name].as_u64().unwrap())
                .sum();
            assert_eq!(
                totals[e.name].as_u64().unwrap(),
                sum,
                "VM {} event {}",
                vm["vm"],
                e.name
            );
        }
    }
    assert!(
        vms.iter().any(|v| v["sealed"] == true),
        "the confidential VM is marked sealed"
    );
    assert!(churned > 10, "context churn reached the summary");
    assert!(
        doc["system"]["totals"]["sm_inst_executed"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(tmp_demo_dirs(), before, "the demo removed its directories");
}

fn tmp_demo_dirs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gpupm-demo-"))
        .collect();
    v.sort();
    v
}
