//! `gpupm demo --headless --json` end to end: real driver and daemon on
//! private directories, final totals read through the tenant node equal the
//! device's ledger, and (checked here independently) every VM's totals are
//! the sum of its contexts' and the directories are gone afterwards.

use std::process::Command;

use gpupm_uapi::events::CATALOGUE;

#[test]
fn demo_totals_equal_the_ledger_and_every_vm_is_the_sum_of_its_contexts() {
    gpupm_test_support::require_root_and_fuse("the gpupm CLI tests");
    gpupm_test_support::bins::build_once();
    let before: Vec<String> = tmp_demo_dirs();
    let doc = demo("2s", &mut Command::new(gpupm_test_support::bin!(Cli)));
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["events", "ledger_match", "system", "vms"]);
    assert_eq!(doc["events"].as_object().unwrap().len(), CATALOGUE.len());
    assert_eq!(doc["events"]["nvlink_rx_flits"]["scope"], "device");
    assert_eq!(doc["events"]["fb_bytes"]["unit"], "bytes");
    assert_eq!(doc["events"]["fb_bytes"]["scale"], 32);
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

/// Runs `gpupm demo --headless --json` for `duration` through `cmd`; it
/// must succeed and say its totals match the ledger. Answers its document.
fn demo(duration: &str, cmd: &mut Command) -> serde_json::Value {
    let out = cmd
        .args(["demo", "--headless", "--duration", duration, "--json"])
        .output()
        .expect("run demo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["ledger_match"], true);
    doc
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

/// Entries someone planted in the temp dir under the demo's prefix — a
/// link to a directory of theirs and a directory of their own — are not
/// used: the demo runs in a fresh directory and leaves theirs untouched.
/// (The old name's pid and nanoseconds cannot be guessed by a test; that
/// a planted entry is refused even at the exact name is the unit test
/// `a_planted_directory_or_link_at_the_name_is_never_used`.)
#[test]
fn demo_ignores_directories_and_links_planted_in_the_temp_dir() {
    gpupm_test_support::require_root_and_fuse("the gpupm CLI tests");
    gpupm_test_support::bins::build_once();
    let scratch = gpupm_test_support::Scratch::world_writable("cli-demo-planted");
    let tmp = scratch.join("tmp");
    let victim = scratch.join("victim");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::create_dir_all(&victim).unwrap();
    let planted_link = tmp.join("gpupm-demo-planted-link");
    let planted_dir = tmp.join("gpupm-demo-planted-dir");
    std::os::unix::fs::symlink(&victim, &planted_link).unwrap();
    std::fs::create_dir(&planted_dir).unwrap();
    std::fs::write(planted_dir.join("dev"), "not a directory").unwrap();
    demo(
        "1s",
        Command::new(gpupm_test_support::bin!(Cli)).env("TMPDIR", &tmp),
    );
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "nothing written through the link"
    );
    assert_eq!(std::fs::read_link(&planted_link).unwrap(), victim);
    assert_eq!(
        std::fs::read_to_string(planted_dir.join("dev")).unwrap(),
        "not a directory"
    );
    let mut left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["gpupm-demo-planted-dir", "gpupm-demo-planted-link"],
        "the demo's own directory is gone, the planted entries stay"
    );
}
