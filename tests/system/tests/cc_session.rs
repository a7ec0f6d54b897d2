//! A confidential VM's session, established by its tenant through the
//! real daemon and driver: the driver (step clock,
//! `--debug-ledger`, a device identity) and `gpupmd` as processes, the
//! tenants as real unprivileged uids running `gpupm`.
//!
//! * A driver restart after a rekey ends the session: the tenant's tools
//!   say so loudly (exit 1), every slot of the VM is withheld — none sealed
//!   under any key that existed before — and after the tenant establishes
//!   a new session its totals equal its ledger (nothing counted meanwhile
//!   is lost).
//! * Only the VM's own tenant can run the exchange through the daemon;
//!   malformed messages are refused; a tenant's exchanges are rate
//!   limited; a refused request changes nothing the host can read.
//! * A host that resets the device and establishes a session of its own
//!   is detected: the tenant's tools refuse it loudly, and the tenant
//!   cannot take it over without the operator's reset.

use std::collections::BTreeMap;
use std::path::Path;

use gpupm_cc::Requester;
use gpupm_client::{DevNode, TenantClient};
use gpupm_driver::model::cc::{open, open_ledger, Key};
use gpupm_test_support::cc::{
    admin_view, drive, flush_and_settle, session_of, session_scenario, tenant_state, tenants,
    window, RegisterMap, CC_VM, OTHER_VM, PLAIN_VM, UID_CC, UID_OTHER, UID_PLAIN,
};
use gpupm_test_support::cli::{gpupm_as_in, vm_events_as_stat_prints};
use gpupm_test_support::device::expected;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use gpupm_uapi::cc::{KeyExchange, CC_VENDOR_ROOT_KEY};
use gpupm_uapi::events::CATALOGUE;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::{
    self, envelope_flags, BlockSlot, StreamSlot, BLOCK_SLOT_SIZE, CTX_BLOCK_SLOTS,
    CTX_BLOCK_SLOT_BASE,
};
use gpupm_uapi::regs as r;
use serde_json::{json, Value};
use zerocopy::FromBytes;

fn alive(daemon: &mut Proc) -> impl FnMut() -> bool + '_ {
    move || !daemon.alive()
}

/// The VM's ledger, opened with `key`, by event name, as `gpupm stat`
/// prints it (in the events' units).
fn ledger_by_name(dev: &DevNode, key: &Key) -> BTreeMap<String, u64> {
    let mut q = dev.ledger(ledger_scope::VM, CC_VM).expect("ledger");
    open_ledger(&mut q, key).expect("the sealed ledger opens with the session's key");
    vm_events_as_stat_prints(&expected(&q))
}

/// `gpupm stat --vm 2 --json` with every event as the VM's tenant (its
/// session by default): the events, or (exit code, message).
fn stat(node: &Path, state: &Path) -> Result<BTreeMap<String, u64>, (i32, String)> {
    let events: Vec<&str> = CATALOGUE.iter().map(|e| e.name).collect();
    let events = events.join(",");
    let (code, out, err) = gpupm_as_in(
        UID_CC,
        node,
        Some(state),
        &["stat", "--vm", "2", "--json", "-e", &events],
    );
    if code != 0 {
        return Err((code, err));
    }
    let v: Value = serde_json::from_str(&out).expect("stat JSON");
    Ok(v["events"]
        .as_object()
        .expect("events")
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().expect("count")))
        .collect())
}

/// Every slot of the window that names `CC_VM`: (envelope flags, envelope
/// bytes after the flags, payload and tag all zero).
fn cc_slots(dev: &DevNode) -> Vec<(u32, bool, bool)> {
    let w = window(dev);
    let blocks =
        usize::try_from(u64::from(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) * BLOCK_SLOT_SIZE)
            .expect("fits");
    let (block_bytes, rings) = w.split_at(blocks);
    let mut out = Vec::new();
    let mut note = |bytes: &[u8]| {
        let flags = u32::from_le_bytes(bytes[4..8].try_into().expect("flags"));
        let vm = u32::from_le_bytes(bytes[..4].try_into().expect("vm"));
        if vm == CC_VM && flags & envelope_flags::VALID != 0 {
            out.push((
                flags,
                bytes[8..32].iter().all(|&b| b == 0),
                bytes[32..].iter().all(|&b| b == 0),
            ));
        }
    };
    for slot in block_bytes.chunks_exact(usize::try_from(BLOCK_SLOT_SIZE).expect("fits")) {
        note(slot);
    }
    for slot in rings.chunks_exact(usize::try_from(layout::STREAM_SLOT_SIZE).expect("fits")) {
        note(slot);
    }
    out
}

/// Whether any sealed slot of the window opens under one of `keys` (K_vm
/// of any epoch: the envelope names session and epoch).
fn any_opens(dev: &DevNode, keys: &[Key]) -> bool {
    let w = window(dev);
    let blocks =
        usize::try_from(u64::from(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) * BLOCK_SLOT_SIZE)
            .expect("fits");
    let (block_bytes, rings) = w.split_at(blocks);
    let block_opens = block_bytes
        .chunks_exact(usize::try_from(BLOCK_SLOT_SIZE).expect("fits"))
        .filter_map(|c| BlockSlot::read_from_bytes(c).ok())
        .any(|s| {
            keys.iter().any(|k| {
                let mut p = s.payload;
                open(k, &s.envelope, &mut p, &s.tag).is_ok()
            })
        });
    let ring_opens = rings
        .chunks_exact(usize::try_from(layout::STREAM_SLOT_SIZE).expect("fits"))
        .filter_map(|c| StreamSlot::read_from_bytes(c).ok())
        .any(|s| {
            keys.iter().any(|k| {
                let mut p = s.payload;
                open(k, &s.envelope, &mut p, &s.tag).is_ok()
            })
        });
    block_opens || ring_opens
}

#[test]
fn a_driver_restart_after_a_rekey_ends_the_session_loudly_and_reestablishing_loses_nothing() {
    let tmp = Scratch::new("cc-session-restart");
    let identity = tmp.join("device-identity");
    let opts = || DriverOptions::system(session_scenario(1.0)).with_identity(&identity);
    let driver = Driver::start_in(&tmp, opts());
    let dev = driver.node();
    let config = daemon_config(&tmp, &tenants());
    let mut daemon = spawn_daemon(&tmp, &config, &[], &[]);
    daemon.wait_for("READY=1");
    let node = tmp.join("tenant").join("node");
    let state = tenant_state(tmp.path(), UID_CC);
    let cc = |args: &[&str]| gpupm_as_in(UID_CC, &node, Some(&state), args);
    drive(&dev, 4, alive(&mut daemon));

    let (code, out, err) = cc(&["cc", "status", "--vm", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let st: Value = serde_json::from_str(&out).expect("status JSON");
    assert_eq!((&st["state"], &st["local"]), (&json!("none"), &Value::Null));
    let (code, out, err) = cc(&["cc", "establish", "--vm", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let est: Value = serde_json::from_str(&out).expect("establish JSON");
    let (s1, _, k1) = session_of(&state);
    assert_eq!(
        (&est["session"], &est["key_epoch"]),
        (&json!(s1), &json!(1))
    );
    assert_eq!(
        dev.read64(r::vm(CC_VM, r::VM_KEY_SESSION))
            .expect("session"),
        s1
    );
    drive(&dev, 4, alive(&mut daemon));
    let (code, _, err) = cc(&["cc", "rekey", "--vm", "2"]);
    assert_eq!(code, 0, "{err}");
    let (_, epoch, k2) = session_of(&state);
    assert_eq!(epoch, 2);
    drive(&dev, 4, alive(&mut daemon));
    flush_and_settle(&dev, alive(&mut daemon));
    assert_eq!(stat(&node, &state), Ok(ledger_by_name(&dev, &k2)));

    // The host restarts the driver (and the daemon that served it).
    daemon.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    driver.stop();
    let driver = Driver::start_in(&tmp, opts());
    let dev = driver.node();
    let mut daemon = spawn_daemon(&tmp, &config, &[], &[]);
    daemon.wait_for("READY=1");
    drive(&dev, 6, alive(&mut daemon));
    flush_and_settle(&dev, alive(&mut daemon));

    // The tenant's tools say the session is gone, and read nothing.
    let (code, err) = stat(&node, &state).expect_err("a session that is gone");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is gone"), "{err}");
    let (code, out, err) = cc(&["cc", "status", "--vm", "2", "--json"]);
    assert_eq!(code, 1, "{err}");
    let st: Value = serde_json::from_str(&out).expect("status JSON");
    assert_eq!(
        (&st["state"], &st["established"], &st["local"]["session"]),
        (&json!("gone"), &json!(false), &json!(s1))
    );
    let (code, _, err) = cc(&["cc", "rekey", "--vm", "2"]);
    assert_eq!(code, 1, "a rekey of a session that is gone: {err}");
    // Everything of the VM is withheld: nothing sealed under any key.
    let slots = cc_slots(&dev);
    assert!(!slots.is_empty());
    for &(flags, env_zero, body_zero) in &slots {
        assert_eq!(
            flags,
            envelope_flags::VALID | envelope_flags::ENCRYPTED | envelope_flags::WITHHELD
        );
        assert!(env_zero && body_zero, "a withheld slot carries bytes");
    }
    assert!(!any_opens(&dev, &[k1, k2]), "a slot opens under an old key");

    // A new session: every count of the new driver's life is there.
    let (code, _, err) = cc(&["cc", "establish", "--vm", "2"]);
    assert_eq!(code, 0, "{err}");
    let (s3, epoch, k3) = session_of(&state);
    assert_ne!(s3, s1);
    assert_eq!(epoch, 1);
    flush_and_settle(&dev, alive(&mut daemon));
    let seen = stat(&node, &state).expect("stat through the new session");
    let want = ledger_by_name(&dev, &k3);
    assert_eq!(seen, want, "totals after re-establishing != ledger");
    assert!(want.values().sum::<u64>() > 0);
    assert!(!any_opens(&dev, &[k1, k2]), "a slot opens under an old key");
    daemon.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    driver.stop();
}

/// A raw KEY_EXCHANGE for `vm` as `cred` after `change` to the request:
/// the errno (0 for success).
fn exchange_as(node: &Path, cred: &Cred, vm: u32, change: fn(&mut KeyExchange)) -> i64 {
    let node = node.to_path_buf();
    run_as(cred, move || {
        let c = TenantClient::open(&node).expect("open the tenant node");
        let mut msg = Requester::new(vm).expect("requester").request();
        change(&mut msg);
        json!(errno_of(&c.cc_key_exchange(&mut msg)))
    })
    .as_i64()
    .expect("errno")
}

#[test]
fn only_the_tenant_runs_the_exchange_and_a_host_takeover_is_refused_loudly() {
    let tmp = Scratch::new("cc-session-relay");
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
    drive(&dev, 3, alive(&mut daemon));
    flush_and_settle(&dev, alive(&mut daemon));

    let regs = RegisterMap::discover(&dev);
    let digest = || [regs.read(&dev), window(&dev), admin_view(&admin)].concat();
    let before = digest();
    let mut msg = Requester::new(CC_VM).expect("requester").request();
    assert_eq!(
        errno_of(&admin.cc_key_exchange(&mut msg)),
        libc::EACCES,
        "the admin may not run a tenant's exchange"
    );
    let eacces = i64::from(libc::EACCES);
    let einval = i64::from(libc::EINVAL);
    for (uid, vm) in [
        (UID_OTHER, CC_VM),
        (UID_PLAIN, CC_VM),
        (UID_PLAIN, PLAIN_VM),
        (UID_OTHER, OTHER_VM),
        (UID_CC, 9),
    ] {
        assert_eq!(
            exchange_as(&node, &Cred::user(uid), vm, |_| {}),
            eacces,
            "uid {uid}, VM {vm}"
        );
    }
    for change in [
        (|m: &mut KeyExchange| m.version = 0) as fn(&mut KeyExchange),
        |m| m.flags = 1,
        |m| m.reserved = 1,
        |m| m.session = 5,
        |m| m.signature[0] = 1,
        |m| m.requester_share = [0; 32],
    ] {
        assert_eq!(
            exchange_as(&node, &Cred::user(UID_CC), CC_VM, change),
            einval,
            "a malformed exchange"
        );
    }
    let mut fin = gpupm_uapi::cc::Finish {
        version: 1,
        vm: CC_VM,
        session: 1,
        ..Default::default()
    };
    assert_eq!(errno_of(&admin.cc_finish(&mut fin)), libc::EACCES);
    assert!(
        digest() == before,
        "a refused exchange changed the device or the daemon"
    );

    let (code, _, err) = gpupm_as_in(
        UID_CC,
        &node,
        Some(&state),
        &["cc", "establish", "--vm", "2"],
    );
    assert_eq!(code, 0, "{err}");
    let (mine, _, _) = session_of(&state);

    // The host resets the device and establishes a session of its own
    // through card0 (root): the tenant's tools refuse it loudly.
    dev.reset().expect("reset");
    let req = Requester::new(CC_VM).expect("requester");
    let mut msg = req.request();
    dev.cc_key_exchange(&mut msg)
        .expect("the host's own exchange");
    let agreed = req
        .check(&msg, &CC_VENDOR_ROOT_KEY)
        .expect("a genuine device");
    let mut fin = agreed.finish_request(None);
    dev.cc_finish(&mut fin).expect("the host's own FINISH");
    let theirs = agreed.session();
    drive(&dev, 2, alive(&mut daemon));
    let events = "sm_cycles_active";
    let (code, _, err) = gpupm_as_in(
        UID_CC,
        &node,
        Some(&state),
        &["stat", "--vm", "2", "-e", events],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("which you did not establish"), "{err}");
    let (code, out, err) = gpupm_as_in(
        UID_CC,
        &node,
        Some(&state),
        &["cc", "status", "--vm", "2", "--json"],
    );
    assert_eq!(code, 1, "{err}");
    let st: Value = serde_json::from_str(&out).expect("status JSON");
    assert_eq!(
        (&st["state"], &st["session"], &st["local"]["session"]),
        (&json!("not-yours"), &json!(theirs), &json!(mine))
    );
    let (code, _, err) = gpupm_as_in(
        UID_CC,
        &node,
        Some(&state),
        &["cc", "establish", "--vm", "2"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("that you do not hold"), "{err}");
    assert_eq!(
        dev.read64(r::vm(CC_VM, r::VM_KEY_SESSION))
            .expect("session"),
        theirs,
        "the tenant cannot take a session over without proof"
    );
    // After the operator's reset the tenant establishes again.
    dev.reset().expect("reset");
    let (code, _, err) = gpupm_as_in(
        UID_CC,
        &node,
        Some(&state),
        &["cc", "establish", "--vm", "2"],
    );
    assert_eq!(code, 0, "{err}");

    // The tenant's exchanges are rate limited (a burst of 8, then one per
    // 250 ms; it has used 6): it gets EAGAIN within 10 quick ones.
    let results: Vec<i64> = (0..10)
        .map(|_| exchange_as(&node, &Cred::user(UID_CC), CC_VM, |_| {}))
        .collect();
    assert!(
        results.contains(&i64::from(libc::EAGAIN)),
        "no limit: {results:?}"
    );
    drop(admin);
    daemon.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    driver.stop();
}
