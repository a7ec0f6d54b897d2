//! Two real unprivileged tenants (numeric uids through `setpriv`, each
//! mapped to one VM in the daemon's config) and the admin, against the real
//! driver and daemon: `list`, `stat`, `record`/`report` show a tenant only
//! its own VM; the admin sees everything; someone else's VM and a VM that
//! does not exist give the same message and exit code.

use gpupm_test_support::cli::{finish, spawn_as, Fixture, UID_A, UID_B, UID_NOBODY, VM_A, VM_B};

fn vms_of(list: &serde_json::Value) -> Vec<u64> {
    list["vms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["vm"].as_u64().unwrap())
        .collect()
}

#[test]
fn tenants_see_only_their_own_vm_and_foreign_equals_nonexistent() {
    let mut f = Fixture::start("tenants");
    f.advance_ms(20);

    // list
    let admin = f.gpupm(&["list", "--json"]).json();
    assert_eq!(admin["admin"], true);
    assert_eq!(vms_of(&admin), [1, 2, 3, 4, 5, 6]);
    assert_eq!(admin["partitions"].as_array().unwrap().len(), 4);
    for (uid, vm) in [(UID_A, VM_A), (UID_B, VM_B)] {
        let l = f.gpupm_as(uid, &["list", "--json"]).json();
        assert_eq!(l["admin"], false);
        assert_eq!(vms_of(&l), [u64::from(vm)], "uid {uid}");
        assert!(l.get("partitions").is_none());
        assert!(!l["vms"][0]["contexts"].as_array().unwrap().is_empty());
    }

    // stat
    let s = f
        .gpupm_as(
            UID_A,
            &[
                "stat",
                "--vm",
                &VM_A.to_string(),
                "--json",
                "-e",
                "sm_inst_executed,sm_cycles_active",
            ],
        )
        .json();
    assert_eq!(
        (s["scope"].as_str(), s["id"].as_u64()),
        (Some("vm"), Some(u64::from(VM_A)))
    );
    assert!(s["events"]["sm_inst_executed"].as_u64().unwrap() > 0);
    assert!(s["derived"]["ipc"].as_f64().unwrap() > 0.0);
    let own_default = f.gpupm_as(UID_B, &["stat", "--json"]).json();
    assert_eq!(
        own_default["id"].as_u64(),
        Some(u64::from(VM_B)),
        "a tenant's only VM is the default scope"
    );
    let foreign = f.gpupm_as(UID_A, &["stat", "--vm", &VM_B.to_string()]);
    let missing = f.gpupm_as(UID_A, &["stat", "--vm", "63"]);
    assert_eq!(foreign.code, 2);
    assert_eq!(
        foreign.err,
        format!("gpupm: no VM {VM_B} visible to you (it does not exist or is not yours)\n")
    );
    assert_eq!(
        (
            missing.code,
            missing.err.replace("VM 63", &format!("VM {VM_B}"))
        ),
        (foreign.code, foreign.err.clone())
    );
    let admin_missing = f.gpupm(&["stat", "--vm", "63"]);
    assert_eq!(
        (admin_missing.code, admin_missing.err.as_str()),
        (
            2,
            "gpupm: no VM 63 visible to you (it does not exist or is not yours)\n"
        )
    );
    let foreign_ctx_owner = admin["vms"][4]["contexts"][0]["ctx"]
        .as_u64()
        .unwrap()
        .to_string();
    let fc = f.gpupm_as(UID_A, &["stat", "--ctx", &foreign_ctx_owner]);
    let mc = f.gpupm_as(UID_A, &["stat", "--ctx", "4000"]);
    assert_eq!((fc.code, mc.code), (2, 2));
    assert_eq!(
        fc.err.replace(&foreign_ctx_owner, "N"),
        mc.err.replace("4000", "N")
    );
    let sys = f.gpupm_as(UID_A, &["stat", "--system"]);
    assert_eq!(
        (sys.code, sys.err.as_str()),
        (
            2,
            "gpupm: the system scope is for the admin only (root or the gpupm-admin group)\n"
        )
    );
    let sys = f.gpupm(&["stat", "--system", "--json"]).json();
    assert_eq!(sys["scope"], "system");
    let csv = f.gpupm_as(UID_A, &["stat", "--csv", "-e", "l2_hit"]);
    assert_eq!(csv.code, 0, "{}", csv.err);
    assert!(
        csv.out
            .starts_with("scope,id,cycle,interval_ms,kind,name,value,timestamp,start_cycle,device_ms,wall_ms,status\nvm,2,"),
        "{}",
        csv.out
    );

    // an unmapped user
    let nobody = f.gpupm_as(UID_NOBODY, &["list"]);
    assert_eq!(nobody.code, 2);
    assert_eq!(
        nobody.err,
        format!(
            "gpupm: permission denied on {} (are you mapped to a VM in gpupmd.toml?)\n",
            f.node()
        )
    );

    // record / report: both tenants record at once while the device runs
    let tenants = [(UID_A, VM_A, VM_B), (UID_B, VM_B, VM_A)];
    let mut children = Vec::new();
    for (uid, _, _) in tenants {
        let file = f.tmp.join(format!("rec-{uid}.gpupm")).display().to_string();
        let mut args: Vec<String> = ["record", "-o", &file, "--duration", "1500ms"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(["--tenant-node".into(), f.node()]);
        children.push(spawn_as(Some(uid), &args));
    }
    while children
        .iter_mut()
        .any(|c| c.try_wait().expect("try_wait").is_none())
    {
        f.advance_ms(5);
    }
    for ((uid, vm, other), child) in tenants.into_iter().zip(children) {
        let file = f.tmp.join(format!("rec-{uid}.gpupm")).display().to_string();
        let rec = finish(child);
        assert_eq!(rec.code, 0, "record: {}", rec.err);
        let rep = f
            .gpupm_as(uid, &["report", &file, "--json", "--top", "100"])
            .json();
        assert_eq!(
            (rep["scope"].as_str(), rep["id"].as_u64()),
            (Some("vm"), Some(u64::from(vm)))
        );
        assert!(
            rep["records"].as_u64().unwrap() > 0,
            "records captured: {}",
            rec.err
        );
        let ctxs = rep["contexts"].as_array().unwrap();
        assert!(!ctxs.is_empty());
        assert!(
            ctxs.iter().all(|c| c["vm"].as_u64() == Some(u64::from(vm))),
            "only its own VM's contexts"
        );
        let human = f.gpupm_as(uid, &["report", &file]);
        assert_eq!(human.code, 0, "{}", human.err);
        let bad = f.gpupm_as(
            uid,
            &[
                "record",
                "-o",
                &file,
                "--vm",
                &other.to_string(),
                "--duration",
                "100ms",
            ],
        );
        let none = f.gpupm_as(
            uid,
            &["record", "-o", &file, "--vm", "62", "--duration", "100ms"],
        );
        assert_eq!(bad.code, 2);
        assert_eq!(
            bad.err.replace(&format!("VM {other}"), "VM X"),
            none.err.replace("VM 62", "VM X")
        );
    }

    // live views through the same path
    let top = f.gpupm_as(UID_A, &["top", "--headless-frames", "2", "-I", "100"]);
    assert_eq!(top.code, 0, "{}", top.err);
    let dmon = f.gpupm_as(UID_A, &["dmon", "-I", "100", "--count", "2"]);
    assert_eq!(dmon.code, 0, "{}", dmon.err);
    assert_eq!(
        dmon.out.lines().count(),
        4,
        "header, units + one line per interval for the one VM: {}",
        dmon.out
    );

    // admin tools
    let port = f.metrics_port.to_string();
    let cfg = f.config.display().to_string();
    // The exit status follows the verdict (the fixture's 20 ms steps may
    // fill rings past the drain-lag threshold: a WARN).
    let health = f.gpupm(&["health", "--config", &cfg, "--json"]);
    let h: serde_json::Value = serde_json::from_str(&health.out).expect("health JSON");
    let status = |v: &serde_json::Value| if v["verdict"] == "pass" { 0 } else { 1 };
    assert_eq!(health.code, status(&h), "{h:#}");
    assert_eq!(h["daemon"]["reachable"], true, "{h}");
    assert!(h["daemon"]["handshakes"].as_f64().unwrap() > 0.0);
    assert_eq!(h["device"]["ccu_wraps"], 0);
    assert_eq!(h["daemon"]["endpoint"], format!("127.0.0.1:{port}"));
    let tenant_health = f.gpupm_as(UID_A, &["health", "--config", &cfg]);
    assert!(
        [0, 1].contains(&tenant_health.code) && tenant_health.out.contains("verdict: "),
        "a tenant sees daemon health but not the device: {}",
        tenant_health.err
    );
    assert!(
        tenant_health.out.contains("device not readable"),
        "{}",
        tenant_health.out
    );
    let bmc = f.gpupm(&["bmc", "--json"]).json();
    let sys = f
        .gpupm(&[
            "stat",
            "--system",
            "--json",
            "-e",
            "sm_inst_executed,l2_hit",
        ])
        .json();
    assert_eq!(
        bmc["counters"]["sm_inst_executed"], sys["events"]["sm_inst_executed"],
        "mailbox and tenant node agree"
    );
    assert_eq!(bmc["counters"]["l2_hit"], sys["events"]["l2_hit"]);
    let tenant_bmc = f.gpupm_as(UID_A, &["bmc"]);
    assert_eq!(tenant_bmc.code, 2);
    assert_eq!(
        tenant_bmc.err,
        format!(
            "gpupm: permission denied on {}/card0-oob (root or the gpupm-admin group only)\n",
            f.node_dir()
        )
    );
    f.stop();
}
