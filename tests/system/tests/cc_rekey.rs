//! Rekeying a confidential VM from its tenant's tool, through `gpupmd`:
//! the real driver (step clock, `--debug-ledger`, a device identity) and
//! daemon as processes, tenants as real unprivileged
//! uids (`setpriv` for `gpupm`, forked children for raw requests). The
//! tenant establishes the VM's session (`gpupm cc establish`), replaces
//! its key with `gpupm cc rekey` and then reads its totals through the
//! session, equal to the (sealed) ledger; the old keys open nothing new.
//! Another tenant, the admin, a plain or missing VM, a blob sealed under a
//! wrong key, a replayed blob, malformed requests and a key file others
//! may read are refused with the documented errors, and nothing changed:
//! every register, the memory window and the admin's view of the daemon
//! are byte-identical before and after.

use std::collections::BTreeMap;
use std::path::Path;

use gpupm_client::{DevNode, Scope, TenantClient};
use gpupm_driver::model::cc::{open_ledger, Key, RekeyBlob};
use gpupm_test_support::cc::{
    admin_view, drive, flush_and_settle, install_session_key, key_file, session_of,
    session_scenario, tenant_state, tenants, total, window, RegisterMap, CC_VM, OTHER_VM, PLAIN_VM,
    UID_CC, UID_OTHER, UID_PLAIN,
};
use gpupm_test_support::cli::{gpupm_as_in, vm_events_as_stat_prints};
use gpupm_test_support::device::expected;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use gpupm_uapi::events::CATALOGUE;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::regs as r;
use gpupm_uapi::tenant::{Rekey, TENANT_IOC_REKEY, TENANT_STRUCT_VERSION};
use serde_json::{json, Value};

const NEW_KEY: Key = [0x4e; 32];
const WRONG_KEY: Key = [0x77; 32];

/// Everything the host and the admin can read that a request could change.
fn digest(regs: &RegisterMap, dev: &DevNode, admin: &TenantClient) -> Vec<u8> {
    [regs.read(dev), window(dev), admin_view(admin)].concat()
}

fn epoch_and_session(dev: &DevNode) -> (u32, u64) {
    (
        dev.read32(r::vm(CC_VM, r::VM_KEY_EPOCH)).expect("epoch"),
        dev.read64(r::vm(CC_VM, r::VM_KEY_SESSION))
            .expect("session"),
    )
}

/// A raw `TENANT_IOC_REKEY` as `cred`: the errno (0 for success).
fn rekey_as(node: &Path, cred: &Cred, vm: u32, blob: RekeyBlob) -> i64 {
    let node = node.to_path_buf();
    let words = blob.to_words();
    let v = run_as(cred, move || {
        let c = TenantClient::open(&node).expect("open the tenant node");
        json!(errno_of(&c.rekey(vm, &words)))
    });
    v.as_i64().expect("errno")
}

/// Malformed requests of the VM's own tenant: each errno.
fn malformed_as(node: &Path, blob: RekeyBlob) -> Value {
    let node = node.to_path_buf();
    let words = blob.to_words();
    run_as(&Cred::user(UID_CC), move || {
        let c = TenantClient::open(&node).expect("open the tenant node");
        let good = || {
            let mut a = Rekey {
                version: TENANT_STRUCT_VERSION,
                vm: CC_VM,
                ..Rekey::default()
            };
            a.nonce.copy_from_slice(&words[..2]);
            a.sealed_key.copy_from_slice(&words[2..10]);
            a.tag.copy_from_slice(&words[10..]);
            a
        };
        let mut out = Vec::new();
        for change in [
            (|a: &mut Rekey| a.version = 0) as fn(&mut Rekey),
            |a| a.flags = 1,
            |a| a.reserved = 1,
            |a| a.vm = 0,
            |a| a.vm = r::MAX_VMS,
        ] {
            let mut a = good();
            change(&mut a);
            out.push(errno_of(&c.call("rekey", TENANT_IOC_REKEY, &mut a)));
        }
        json!(out)
    })
}

/// `gpupm stat --vm CC_VM --json` with every event, as the VM's tenant
/// (state directory `state`), with `--key-file KEY` if given (else through
/// its session): the events, or the exit code and message.
fn stat_with_key(
    node: &Path,
    state: &Path,
    key: Option<&Path>,
) -> Result<BTreeMap<String, u64>, (i32, String)> {
    let events: Vec<&str> = CATALOGUE.iter().map(|e| e.name).collect();
    let vm = CC_VM.to_string();
    let events = events.join(",");
    let mut args = vec!["stat", "--vm", &vm, "--json", "-e", &events];
    if let Some(key) = key {
        args.extend(["--key-file", key.to_str().expect("utf-8 path")]);
    }
    let (code, out, err) = gpupm_as_in(UID_CC, node, Some(state), &args);
    if code != 0 {
        return Err((code, err));
    }
    let v: Value = serde_json::from_str(&out).expect("stat JSON");
    assert_eq!(v.get("sealed"), None, "opened totals are not sealed: {out}");
    Ok(v["events"]
        .as_object()
        .expect("events")
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().expect("count")))
        .collect())
}

/// The VM's ledger, opened with `key`, by event name, as `gpupm stat`
/// prints it (in the events' units).
fn ledger_by_name(dev: &DevNode, key: &Key) -> BTreeMap<String, u64> {
    let mut q = dev.ledger(ledger_scope::VM, CC_VM).expect("ledger");
    open_ledger(&mut q, key).expect("the sealed ledger opens with the current key");
    vm_events_as_stat_prints(&expected(&q))
}

fn alive(daemon: &mut Proc) -> impl FnMut() -> bool + '_ {
    move || !daemon.alive()
}

#[test]
fn the_tenant_rekeys_its_own_vm_and_nobody_else_can() {
    let tmp = Scratch::new("cc-rekey");
    let identity = tmp.join("device-identity");
    let driver = Driver::start_in(
        &tmp,
        DriverOptions::system(session_scenario(1.0)).with_identity(&identity),
    );
    let dev = driver.node();
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
    daemon.wait_for("READY=1");
    let node = tmp.join("tenant").join("node");
    let admin = TenantClient::open(&node).expect("open the tenant node as root");
    let state = tenant_state(tmp.path(), UID_CC);
    let other_state = tenant_state(tmp.path(), UID_OTHER);
    let gpupm_as = |uid: u32, node: &Path, args: &[&str]| {
        let dir = if uid == UID_CC { &state } else { &other_state };
        gpupm_as_in(uid, node, Some(dir), args)
    };
    drive(&dev, 6, alive(&mut daemon));
    flush_and_settle(&dev, alive(&mut daemon));

    let (code, _, err) = gpupm_as(UID_CC, &node, &["cc", "establish", "--vm", "2"]);
    assert_eq!(code, 0, "{err}");
    let (session, epoch, cc_key) = session_of(&state);
    assert_eq!(epoch_and_session(&dev), (1, session));

    let keys = tmp.join("keys");
    std::fs::create_dir(&keys).expect("key dir");
    let old = key_file(&keys.join("old"), &cc_key, UID_CC, 0o600);
    let new = key_file(&keys.join("new"), &NEW_KEY, UID_CC, 0o600);
    let wrong = key_file(&keys.join("wrong"), &WRONG_KEY, UID_CC, 0o600);
    let loose = key_file(&keys.join("loose"), &cc_key, UID_CC, 0o640);

    let (code, out, err) = gpupm_as(UID_CC, &node, &["cc", "status", "--vm", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let st: Value = serde_json::from_str(&out).expect("status JSON");
    assert_eq!(
        (
            &st["confidential"],
            &st["established"],
            &st["key_epoch"],
            &st["session"],
            &st["state"],
            &st["local"]["session"],
            &st["local"]["key_epoch"]
        ),
        (
            &json!(true),
            &json!(true),
            &json!(1),
            &json!(session),
            &json!("ok"),
            &json!(session),
            &json!(1)
        ),
        "{out}"
    );

    // Refused, and nothing changes.
    let regs = RegisterMap::discover(&dev);
    let before = digest(&regs, &dev, &admin);
    let valid = RekeyBlob::seal(&cc_key, CC_VM, epoch, session, &NEW_KEY, [1; 8]);
    let words = valid.to_words();
    assert_eq!(
        errno_of(&admin.rekey(CC_VM, &words)),
        libc::EACCES,
        "the admin may not rekey, even with a valid blob"
    );
    for (uid, vm) in [
        (UID_OTHER, CC_VM),
        (UID_PLAIN, CC_VM),
        (UID_OTHER, OTHER_VM),
        (UID_PLAIN, PLAIN_VM),
        (UID_CC, 9),
    ] {
        let blob = RekeyBlob::seal(&cc_key, vm, epoch, session, &NEW_KEY, [2; 8]);
        let got = rekey_as(&node, &Cred::user(uid), vm, blob);
        assert_eq!(got, i64::from(libc::EACCES), "uid {uid} rekeying VM {vm}");
    }
    let forged = RekeyBlob::seal(&WRONG_KEY, CC_VM, epoch, session, &NEW_KEY, [3; 8]);
    assert_eq!(
        rekey_as(&node, &Cred::user(UID_CC), CC_VM, forged),
        i64::from(libc::EINVAL),
        "a blob sealed under a wrong key"
    );
    let stale = RekeyBlob::seal(&cc_key, CC_VM, epoch, session ^ 1, &NEW_KEY, [4; 8]);
    assert_eq!(
        rekey_as(&node, &Cred::user(UID_CC), CC_VM, stale),
        i64::from(libc::EINVAL),
        "a blob for another session"
    );
    let einval = i64::from(libc::EINVAL);
    assert_eq!(
        malformed_as(&node, valid),
        json!([einval, einval, einval, einval, einval]),
        "malformed requests"
    );
    // `gpupm stat` with a key file others may read, or a wrong key: refused.
    let (code, err) = stat_with_key(&node, &state, Some(&loose)).expect_err("a loose key file");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("accessible by others"), "{err}");
    let (code, err) = stat_with_key(&node, &state, Some(&wrong)).expect_err("a wrong key");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not open"), "{err}");
    // Another tenant's `gpupm cc` cannot touch VM 2.
    for cmd in ["establish", "rekey"] {
        let (code, _, err) = gpupm_as(UID_OTHER, &node, &["cc", cmd, "--vm", "2"]);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(err.contains("no VM 2 visible to you"), "{cmd}: {err}");
    }
    assert!(
        digest(&regs, &dev, &admin) == before,
        "a refused rekey changed the device or the daemon"
    );
    assert_eq!(epoch_and_session(&dev), (1, session));

    // The tenant's own blob commits; the same blob again is a replay.
    assert_eq!(rekey_as(&node, &Cred::user(UID_CC), CC_VM, valid), 0);
    assert_eq!(epoch_and_session(&dev), (2, session));
    let after_first = digest(&regs, &dev, &admin);
    assert_eq!(
        rekey_as(&node, &Cred::user(UID_CC), CC_VM, valid),
        i64::from(libc::EINVAL),
        "a replayed blob"
    );
    assert!(
        digest(&regs, &dev, &admin) == after_first,
        "a replay changed something"
    );

    // The tenant made that commit (its tool would have kept the key): the
    // session file learns it, or the tools would refuse the epoch.
    let (code, _, err) = gpupm_as(UID_CC, &node, &["cc", "status", "--vm", "2"]);
    assert_eq!(
        code, 1,
        "an epoch that moved without the session file: {err}"
    );
    assert!(err.contains("moved ahead without you"), "{err}");
    install_session_key(&state, 2, &NEW_KEY);

    // `gpupm cc rekey`, then the tenant reads through its session.
    let (code, out, err) = gpupm_as(UID_CC, &node, &["cc", "rekey", "--vm", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let done: Value = serde_json::from_str(&out).expect("rekey JSON");
    assert_eq!(
        done,
        json!({"vm": CC_VM, "old_epoch": 2, "new_epoch": 3, "session": session})
    );
    let (_, epoch, newest) = session_of(&state);
    assert_eq!(epoch, 3);
    assert!(newest != NEW_KEY && newest != cc_key, "a fresh key");
    drive(&dev, 6, alive(&mut daemon));
    flush_and_settle(&dev, alive(&mut daemon));
    let seen = stat_with_key(&node, &state, None).expect("stat through the session");
    let want = ledger_by_name(&dev, &newest);
    assert_eq!(
        seen, want,
        "the tenant's totals through its session != ledger"
    );
    assert!(want.values().sum::<u64>() > 0, "the VM counted nothing");
    for stale_key in [&new, &old] {
        let (code, err) = stat_with_key(&node, &state, Some(stale_key))
            .expect_err("an old key opens nothing new");
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("does not open"), "{err}");
    }

    // The daemon kept working: the plain VMs still equal their ledgers.
    assert!(daemon.alive(), "gpupmd died:\n{}", daemon.log());
    for vm in [PLAIN_VM, OTHER_VM] {
        let rc = admin.read_counters(Scope::Vm(vm), &[]).expect("read VM");
        let want = expected(&dev.ledger(ledger_scope::VM, vm).expect("ledger"));
        assert_eq!(rc.values, want, "VM {vm} after the rekeys");
        assert!(total(&rc.values) > 0);
    }
    drop(admin);
    daemon.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    driver.stop();
}
