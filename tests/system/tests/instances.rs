//! Context instances through the tenant node: `gpupm-driver`
//! (step clock, context churn that reuses ids across VMs) and `gpupmd` as
//! processes; every listed instance — live, or retired while its id now
//! names another VM's context — is read by (id, created cycle) and equals
//! the device's ledger or the final block persisted for it; a tenant reads
//! its own old instances and gets for someone else's exactly what it gets
//! for one that does not exist; malformed requests are EINVAL and change
//! nothing; `gpupm stat --ctx ID@CYCLE` shows the same numbers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpupm_client::Scope;
use gpupm_client::TenantClient;
use gpupm_test_support::cli::gpupm_as;
use gpupm_test_support::device::{expected, flush, step, wait_none_destroyed, Instances};
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::events::{self, MAX_EVENTS};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::tenant::{
    ctx_state, instance_flags, scope, CtxEntry, ReadInstance, ReadInstanceRates,
    TENANT_IOC_READ_INSTANCE, TENANT_IOC_READ_INSTANCE_RATES, TENANT_STRUCT_VERSION,
};
use gpupmd::store::retired::{RetiredFile, RetiredStore};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use zerocopy::{FromZeros, IntoBytes};

/// Tenant A's VM (churned contexts that count).
const VM_A: u32 = 3;
/// Tenant B's VM (churned contexts that reuse VM A's ids).
const VM_B: u32 = 1;
/// Tenant of [`VM_A`] (no passwd entry needed).
const UID_A: u32 = 61203;
/// Tenant of [`VM_B`].
const UID_B: u32 = 61201;
/// VMs of [`churn_scenario`].
const VMS: std::ops::RangeInclusive<u32> = 1..=10;

/// Every instance the node lists, with its VM.
fn all_instances(c: &TenantClient) -> Vec<(u32, CtxEntry)> {
    VMS.flat_map(|vm| {
        c.list_contexts(vm)
            .expect("list contexts")
            .into_iter()
            .map(move |e| (vm, e))
    })
    .collect()
}

/// A retired instance of [`VM_A`] that counted something, whose id was
/// reused by [`VM_B`] and whose id's newest instance is not VM A's: (id,
/// VM A's created cycle, VM B's).
fn shadowed(c: &TenantClient, all: &[(u32, CtxEntry)]) -> Option<(u32, u64, u64)> {
    let newest: BTreeMap<u32, (u64, u32)> = all.iter().fold(BTreeMap::new(), |mut m, (vm, e)| {
        let cur = m.entry(e.ctx).or_insert((e.created_cycle, *vm));
        if e.created_cycle > cur.0 {
            *cur = (e.created_cycle, *vm);
        }
        m
    });
    all.iter()
        .filter(|(vm, e)| *vm == VM_A && e.state == ctx_state::RETIRED)
        .filter(|(_, e)| {
            c.read_instance(e.ctx, e.created_cycle, &[])
                .is_ok_and(|r| r.values.iter().any(|&v| v > 0))
        })
        .find_map(|(_, mine)| {
            let theirs = all.iter().find(|(vm, e)| {
                *vm == VM_B && e.ctx == mine.ctx && e.created_cycle > mine.created_cycle
            })?;
            (newest[&mine.ctx].1 != VM_A).then_some((
                mine.ctx,
                mine.created_cycle,
                theirs.1.created_cycle,
            ))
        })
}

/// Waits until the daemon's context table has caught up with the device:
/// every context on the device is listed with its created cycle. The
/// daemon learns of contexts from interrupt records on its worker thread,
/// after the handshakes the test waits for, so a listing taken right after
/// a clock step can lag behind the device (an id reused on the device may
/// still show its previous instance as the newest).
fn wait_table_caught_up(dev: &gpupm_client::DevNode, c: &TenantClient) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let listed: BTreeSet<(u32, u64)> = all_instances(c)
            .iter()
            .filter(|(_, e)| e.state != ctx_state::RETIRED)
            .map(|(_, e)| (e.ctx, e.created_cycle))
            .collect();
        let on_device: BTreeSet<(u32, u64)> = gpupm_test_support::device::contexts(dev)
            .iter()
            .map(|&(ctx, _, _, created)| (ctx, created))
            .collect();
        if on_device.is_subset(&listed) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon's table lags the device: {:?}",
            on_device.difference(&listed).collect::<Vec<_>>()
        );
        // Each check reads every context through the driver that also
        // serves the daemon: apart, not back to back.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn add(a: &mut [u64; MAX_EVENTS], b: &[u64; MAX_EVENTS]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// Everything an admin can read about instances, for before/after checks.
fn snapshot(c: &TenantClient, state: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for (vm, e) in all_instances(c) {
        out.extend_from_slice(&vm.to_le_bytes());
        out.extend_from_slice(e.as_bytes());
        let r = c
            .read_instance(e.ctx, e.created_cycle, &[])
            .expect("read instance");
        out.extend_from_slice(r.as_bytes());
    }
    let mut names: Vec<String> = std::fs::read_dir(state.join("retired"))
        .expect("state dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    out.extend_from_slice(names.join("\n").as_bytes());
    out
}

/// A well-formed instance request.
fn request(ctx: u32, created_cycle: u64) -> ReadInstance {
    let mut r = ReadInstance::new_zeroed();
    r.version = TENANT_STRUCT_VERSION;
    r.scope = scope::CONTEXT;
    r.id = ctx;
    r.created_cycle = created_cycle;
    r
}

/// The errno of one raw instance request (0 for success).
fn errno_raw<T: IntoBytes + zerocopy::FromBytes + zerocopy::KnownLayout + zerocopy::Immutable>(
    c: &TenantClient,
    cmd: u32,
    mut arg: T,
) -> i32 {
    errno_of(&c.call("raw", cmd, &mut arg))
}

#[test]
fn every_listed_instance_reads_exactly_and_only_for_its_owner() {
    let tmp = Scratch::new("instances");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let mut seen = Instances::new(&dev);
    let extra = format!(
        "history_samples = 4096\n[[tenant]]\nvm = {VM_A}\nuid = {UID_A}\n[[tenant]]\nvm = {VM_B}\nuid = {UID_B}\n"
    );
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &extra), &[], &[]);
    daemon.wait_for("READY=1");
    let node = tmp.join("tenant").join("node");
    let admin = TenantClient::open(&node).expect("open the tenant node");

    // Churn until a context id of VM A was reused by VM B and no longer
    // names VM A's context: the old ABI cannot reach that instance.
    let mut steps = 0u32;
    let (sid, mine, theirs) = loop {
        for _ in 0..16 {
            step(&dev, STEP, &mut daemon);
            seen.update();
            steps += 1;
        }
        wait_table_caught_up(&dev, &admin);
        if let Some(found) = shadowed(&admin, &all_instances(&admin)) {
            break found;
        }
        assert!(
            steps < 1024,
            "no id of VM {VM_A} was reused by VM {VM_B} in {steps} steps"
        );
    };
    flush(&dev);
    wait_none_destroyed(&dev);
    seen.update();
    eprintln!("{steps} steps; context {sid}: VM {VM_A}'s instance @{mine}, VM {VM_B}'s @{theirs}");

    // Every listed instance equals its ledger (live) or its persisted
    // final block (retired); per VM they add up to the VM's ledger.
    let (files, bad) = RetiredStore::open(&tmp.join("state"))
        .expect("state dir")
        .load_all()
        .expect("load retired");
    assert!(bad.is_empty(), "{bad:?}");
    let files: BTreeMap<(u32, u64), RetiredFile> = files
        .into_iter()
        .map(|f| ((f.ctx, f.created_cycle), f))
        .collect();
    let all = all_instances(&admin);
    let listed_retired: BTreeSet<(u32, u64)> = all
        .iter()
        .filter(|(_, e)| e.state == ctx_state::RETIRED)
        .map(|(_, e)| (e.ctx, e.created_cycle))
        .collect();
    assert_eq!(listed_retired, seen.destroyed, "listed retired instances");
    assert_eq!(listed_retired, files.keys().copied().collect());
    let mut per_vm: BTreeMap<u32, [u64; MAX_EVENTS]> = BTreeMap::new();
    for (vm, e) in &all {
        let r = admin
            .read_instance(e.ctx, e.created_cycle, &[])
            .unwrap_or_else(|err| panic!("{}@{}: {err}", e.ctx, e.created_cycle));
        assert_eq!(
            (r.vm, r.state, r.created_cycle),
            (*vm, e.state, e.created_cycle)
        );
        let want = if e.state == ctx_state::RETIRED {
            files[&(e.ctx, e.created_cycle)]
                .block()
                .expect("plain block")
                .counters
        } else {
            expected(&dev.ledger(ledger_scope::CONTEXT, e.ctx).expect("ledger"))
        };
        assert_eq!(r.values, want, "instance {}@{}", e.ctx, e.created_cycle);
        add(per_vm.entry(*vm).or_insert([0; MAX_EVENTS]), &r.values);
    }
    for vm in VMS {
        assert_eq!(
            per_vm.get(&vm).copied().unwrap_or([0; MAX_EVENTS]),
            expected(&dev.ledger(ledger_scope::VM, vm).expect("ledger")),
            "VM {vm}: the sum of its instances"
        );
    }
    let ids = [
        events::by_name("sm_inst_executed").expect("event").id,
        events::by_name("l2_hit").expect("event").id,
    ];
    let some = admin.read_instance(sid, mine, &ids).expect("chosen events");
    let full = admin.read_instance(sid, mine, &[]).expect("all events");
    assert_eq!(
        &some.values[..2],
        &[
            full.values[usize::from(ids[0])],
            full.values[usize::from(ids[1])]
        ]
    );
    assert!(
        full.values.iter().any(|&v| v > 0),
        "the instance counted nothing"
    );

    // The newest instance of every id is what the old ABI reads.
    let ids: BTreeSet<u32> = all.iter().map(|(_, e)| e.ctx).collect();
    for &id in &ids {
        let newest = all
            .iter()
            .filter(|(_, e)| e.ctx == id)
            .map(|(_, e)| e.created_cycle)
            .max();
        let latest = admin.read_latest_instance(id, &[]).expect("latest");
        assert_eq!(Some(latest.created_cycle), newest, "context {id}");
        let old = admin.read_counters(Scope::Ctx(id), &[]).expect("old ABI");
        assert_eq!(latest.values, old.values, "context {id}");
    }

    // Rates: the live instance answers what the id's scope answers (read
    // until two scope reads agree: a drain may land in between); an old
    // instance answers only samples committed while its id named it.
    let (_, live) = all
        .iter()
        .find(|(vm, e)| *vm == VM_A && e.state == ctx_state::ACTIVE)
        .expect("VM A has a live context");
    let samples = |n: u32, s: &[gpupm_uapi::tenant::RateSample]| -> Vec<u8> {
        s[..n as usize].as_bytes().to_vec()
    };
    let agreed = (0..50).any(|_| {
        let a = admin.read_rates(Scope::Ctx(live.ctx), 16).expect("rates");
        let i = admin
            .read_instance_rates(live.ctx, live.created_cycle, 16)
            .expect("instance rates");
        let b = admin.read_rates(Scope::Ctx(live.ctx), 16).expect("rates");
        samples(a.count, &a.samples) == samples(b.count, &b.samples)
            && samples(i.count, &i.samples) == samples(a.count, &a.samples)
    });
    assert!(
        agreed,
        "instance rates of the live context differ from its scope's"
    );
    let old = admin
        .read_instance_rates(sid, mine, 16)
        .expect("old instance rates");
    assert!(old.count > 0, "no samples kept for {sid}@{mine}");
    for s in &old.samples[..old.count as usize] {
        assert_eq!(s.ctx, sid);
        assert!(
            (mine..theirs).contains(&s.end_cycle),
            "sample ending at {} is not {sid}@{mine}'s",
            s.end_cycle
        );
    }

    // Tenants: VM A's tenant reads its shadowed instance; VM B's instance
    // of the same id, a created cycle that never existed and an id that
    // does not exist all fail the same way.
    let own_values = full.values.to_vec();
    let path = node.clone();
    let a = run_as(&Cred::user(UID_A), move || {
        let c = TenantClient::open(&path).expect("open as tenant A");
        json!({
            "own": c.read_instance(sid, mine, &[]).map(|r| r.values.to_vec()).map_err(|e| e.to_string()),
            "own_state": c.read_instance(sid, mine, &[]).map(|r| r.state).unwrap_or(0),
            "own_rates": errno_of(&c.read_instance_rates(sid, mine, 16)),
            "foreign": errno_of(&c.read_instance(sid, theirs, &[])),
            "foreign_rates": errno_of(&c.read_instance_rates(sid, theirs, 16)),
            "missing_cycle": errno_of(&c.read_instance(sid, mine + 1, &[])),
            "missing_id": errno_of(&c.read_instance(4000, mine, &[])),
            "latest": errno_of(&c.read_latest_instance(sid, &[])),
            "old_abi": errno_of(&c.read_counters(Scope::Ctx(sid), &[])),
            "bad_flags": errno_raw(&c, TENANT_IOC_READ_INSTANCE, ReadInstance { flags: 1 << 9, ..request(sid, mine) }),
            "bad_reserved": errno_raw(&c, TENANT_IOC_READ_INSTANCE, ReadInstance { reserved2: 1, ..request(sid, mine) }),
        })
    });
    eprintln!(
        "tenant A: {}",
        json!({"foreign": a["foreign"], "old_abi": a["old_abi"]})
    );
    assert_eq!(a["own"]["Ok"], json!(own_values), "{a}");
    assert_eq!(a["own_state"], json!(ctx_state::RETIRED));
    let eacces = json!(libc::EACCES);
    for k in [
        "foreign",
        "foreign_rates",
        "missing_cycle",
        "missing_id",
        "latest",
        "old_abi",
    ] {
        assert_eq!(a[k], eacces, "tenant A, {k}: {a}");
    }
    assert_eq!(a["own_rates"], json!(0));
    assert_eq!(
        (&a["bad_flags"], &a["bad_reserved"]),
        (&json!(libc::EINVAL), &json!(libc::EINVAL))
    );
    let theirs_values = admin
        .read_instance(sid, theirs, &[])
        .expect("VM B's")
        .values
        .to_vec();
    let path = node.clone();
    let b = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&path).expect("open as tenant B");
        json!({
            "own": c.read_instance(sid, theirs, &[]).map(|r| r.values.to_vec()).map_err(|e| e.to_string()),
            "foreign": errno_of(&c.read_instance(sid, mine, &[])),
            "missing": errno_of(&c.read_instance(sid, theirs + 1, &[])),
        })
    });
    assert_eq!(b["own"]["Ok"], json!(theirs_values), "{b}");
    assert_eq!((&b["foreign"], &b["missing"]), (&eacces, &eacces), "{b}");

    // Malformed requests fail with EINVAL (the admin's missing instance
    // with ENOENT) and change nothing.
    let before = snapshot(&admin, &tmp.join("state"));
    let req = request(sid, mine);
    let mut rates = ReadInstanceRates::new_zeroed();
    rates.version = TENANT_STRUCT_VERSION;
    rates.scope = scope::CONTEXT;
    rates.id = sid;
    rates.created_cycle = mine;
    rates.max = 4;
    let einval = [
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE,
            ReadInstance {
                flags: !instance_flags::ALL,
                ..req
            },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE,
            ReadInstance { reserved: 7, ..req },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE,
            ReadInstance {
                reserved2: 7,
                ..req
            },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE,
            ReadInstance { version: 2, ..req },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE,
            ReadInstance {
                scope: scope::VM,
                id: 1,
                ..req
            },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE,
            ReadInstance { id: 0, ..req },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE,
            ReadInstance { id: 4096, ..req },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE,
            ReadInstance {
                n_events: 65,
                ..req
            },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE_RATES,
            ReadInstanceRates { max: 0, ..rates },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE_RATES,
            ReadInstanceRates { flags: 2, ..rates },
        ),
        errno_raw(
            &admin,
            TENANT_IOC_READ_INSTANCE_RATES,
            ReadInstanceRates {
                reserved2: 1,
                ..rates
            },
        ),
    ];
    assert_eq!(einval, [libc::EINVAL; 11]);
    assert_eq!(
        errno_of(&admin.read_instance(sid, mine + 1, &[])),
        libc::ENOENT
    );
    assert_eq!(
        errno_of(&admin.read_instance_rates(4000, 1, 4)),
        libc::ENOENT
    );
    assert_eq!(
        snapshot(&admin, &tmp.join("state")),
        before,
        "a refused request changed state"
    );

    // The command line: the tenant's `stat --ctx ID@CYCLE` shows the same
    // totals; someone else's instance reads like a missing one.
    let (code, out, err) = gpupm_as(
        UID_A,
        &node,
        &[
            "stat",
            "--ctx",
            &format!("{sid}@{mine}"),
            "--json",
            "-e",
            "sm_inst_executed,l2_hit",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let j: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        (
            j["scope"].as_str(),
            j["id"].as_u64(),
            j["created_cycle"].as_u64()
        ),
        (Some("ctx"), Some(u64::from(sid)), Some(mine))
    );
    for (name, id) in [
        ("sm_inst_executed", ids_of("sm_inst_executed")),
        ("l2_hit", ids_of("l2_hit")),
    ] {
        assert_eq!(j["events"][name].as_u64(), Some(full.values[id]), "{name}");
    }
    let foreign = gpupm_as(UID_A, &node, &["stat", "--ctx", &format!("{sid}@{theirs}")]);
    let missing = gpupm_as(
        UID_A,
        &node,
        &["stat", "--ctx", &format!("{sid}@{}", mine + 1)],
    );
    assert_eq!(foreign.0, 2, "{}", foreign.2);
    assert_eq!(
        (foreign.0, foreign.2.replace(&theirs.to_string(), "C")),
        (missing.0, missing.2.replace(&(mine + 1).to_string(), "C")),
    );
    let bad = gpupm_as(UID_A, &node, &["stat", "--ctx", "5@x"]);
    assert_eq!(bad.0, 2, "{}", bad.2);
    assert!(bad.2.contains("ID@CREATED_CYCLE"), "{}", bad.2);

    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    driver.stop();
}

fn ids_of(name: &str) -> usize {
    usize::from(events::by_name(name).expect("event").id)
}
