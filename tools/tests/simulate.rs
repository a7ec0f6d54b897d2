//! `gpupm simulate` end to end: the built-in H100-class scenario, run as
//! the README's main job, reports block totals equal to the ledger, and the
//! hierarchy's views agree with each other.

use std::process::Command;

use gpupm_uapi::events::{Scope, CATALOGUE};

fn gpupm(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(gpupm_test_support::bin!(Cli))
        .args(args)
        .output()
        .expect("gpupm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn builtin_scenario_blocks_equal_ledger_and_vms_add_up_to_the_system() {
    let (code, stdout, stderr) = gpupm(&["simulate", "--duration-ms", "30", "--json"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(doc["ledger_match"], true);
    let vms = doc["vms"].as_array().unwrap();
    assert!(vms.len() >= 4);
    assert!(
        vms.iter().any(|v| v["confidential"] == true),
        "the built-in scenario has a confidential VM"
    );
    for e in CATALOGUE.iter().filter(|e| e.unit.scope() != Scope::Device) {
        // The system scope holds plaintext totals of non-confidential work
        // only: a confidential VM's counts never reach RC0.
        let system = doc["system"]["totals"][e.name].as_u64().unwrap();
        let by_vm: u64 = vms
            .iter()
            .filter(|v| v["confidential"] == false)
            .map(|v| v["totals"][e.name].as_u64().unwrap())
            .sum();
        assert_eq!(
            system, by_vm,
            "{}: system total is not the sum of the non-confidential VMs",
            e.name
        );
        for vm in vms {
            let by_ctx: u64 = vm["contexts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["totals"][e.name].as_u64().unwrap())
                .sum();
            assert_eq!(
                vm["totals"][e.name].as_u64().unwrap(),
                by_ctx,
                "{}: VM {} is not the sum of its contexts",
                e.name,
                vm["vm"]
            );
        }
    }
    let busy = doc["system"]["totals"]["sm_inst_executed"]
        .as_u64()
        .unwrap();
    assert!(
        busy > 1_000_000,
        "the built-in scenario should keep the SMs busy"
    );
    let nvlink = doc["system"]["totals"]["nvlink_tx_flits"].as_u64().unwrap();
    assert!(
        nvlink > 0 && vms.iter().all(|v| v["totals"]["nvlink_tx_flits"] == 0),
        "NVLink counts are device-level only"
    );
}

#[test]
fn bad_scenario_file_fails_with_file_line_and_reason() {
    let dir = std::env::temp_dir().join(format!("gpupm-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "name = \"x\"\n[trigger]\nperiod_cycles = 5\n").unwrap();
    let (code, _, stderr) = gpupm(&["simulate", "--scenario", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("bad.toml:3:"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one clear line: {stderr}");
    let (code, _, stderr) = gpupm(&["simulate", "--events", "sm_inst_exec"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown event"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
