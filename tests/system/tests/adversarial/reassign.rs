//! A VM reassigned to another user (the configuration maps VM 3 to a new
//! uid and the daemon restarts): the new tenant does not see the previous
//! tenant's retired contexts — not in the list, not by (id, created
//! cycle) — while the admin still does, and contexts that retire under
//! the new mapping are the new tenant's. (The VM's recent deltas are not
//! persisted: a restarted daemon has none from before.)

use std::collections::BTreeSet;
use std::path::Path;

use gpupm_client::TenantClient;
use gpupm_test_support::device::{flush, step, wait_none_destroyed};
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::users::{errno_of, run_as, Cred};
use gpupm_uapi::tenant::ctx_state;
use serde_json::{json, Value};

use crate::fixture::{System, ATTACKER as FIRST, NEIGHBOUR as SECOND};

/// The churning VM of [`churn`] that changes hands.
const VM: u32 = 3;

fn mapped_to(uid: u32) -> String {
    format!("[[tenant]]\nvm = {VM}\nuid = {uid}\n")
}

/// Steps until at least `n` more of VM 3's instances retired.
fn retire_some(sys: &mut System, n: usize) {
    let dev = sys.dev();
    let before = retired_seen(&sys.node(), 0);
    for _ in 0..200 {
        step(&dev, STEP, &mut sys.daemon);
        flush(&dev);
        wait_none_destroyed(&dev);
        if retired_seen(&sys.node(), 0).len() >= before.len() + n {
            return;
        }
    }
    panic!("VM {VM} retired no {n} contexts in 200 steps");
}

/// VM 3's retired instances as `uid` lists them (0: the admin).
fn retired_seen(node: &Path, uid: u32) -> BTreeSet<(u32, u64)> {
    let node = node.to_owned();
    let v = run_as(&Cred::user(uid), move || {
        let c = TenantClient::open(&node).expect("open");
        let list: Vec<Value> = c
            .list_contexts(VM)
            .expect("VM 3's contexts")
            .iter()
            .filter(|e| e.state == ctx_state::RETIRED)
            .map(|e| json!([e.ctx, e.created_cycle]))
            .collect();
        json!(list)
    });
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                u32::try_from(p[0].as_u64().unwrap()).unwrap(),
                p[1].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_reassigned_vms_new_tenant_sees_none_of_the_previous_tenants_retired_contexts() {
    let _machine = crate::fixture::sharing();
    let mut sys = System::start_mapped(churn(), "step", &mapped_to(FIRST), "");
    retire_some(&mut sys, 2);
    let firsts = retired_seen(&sys.node(), FIRST);
    assert!(firsts.len() >= 2, "the first tenant sees its history");

    sys.restart_daemon(&mapped_to(SECOND), "");
    let node = sys.node();
    let old: Vec<(u32, u64)> = firsts.iter().copied().collect();
    let second = run_as(&Cred::user(SECOND), move || {
        let c = TenantClient::open(&node).expect("open");
        let listed: Vec<Value> = c
            .list_contexts(VM)
            .expect("its VM")
            .iter()
            .filter(|e| e.state == ctx_state::RETIRED)
            .map(|e| json!([e.ctx, e.created_cycle]))
            .collect();
        let reads: Vec<i32> = old
            .iter()
            .map(|&(ctx, created)| errno_of(&c.read_instance(ctx, created, &[])))
            .collect();
        json!({ "listed": listed, "reads": reads })
    });
    let admin = retired_seen(&sys.node(), 0);
    eprintln!("first tenant saw {firsts:?}; after reassigning: {second}");
    assert_eq!(second["listed"], json!([]), "the previous tenant's list");
    assert!(
        second["reads"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e == &json!(libc::EACCES)),
        "the previous tenant's instances: {second}"
    );
    assert!(firsts.is_subset(&admin), "the admin still sees them all");
    // What retires from now on is the new tenant's.
    retire_some(&mut sys, 1);
    let seconds = retired_seen(&sys.node(), SECOND);
    assert!(
        !seconds.is_empty() && seconds.is_disjoint(&firsts),
        "{seconds:?}"
    );
    sys.daemon.stop();
}
