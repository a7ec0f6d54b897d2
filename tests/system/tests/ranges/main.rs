//! Marked ranges and call graphs end to end: `gpupm-driver` (step clock,
//! debug ledger) and `gpupmd` as processes, two tenants (real uids) whose
//! VMs share one partition, three contexts running the built-in GEMM and
//! switching all the time. Each tenant's share of the range registers
//! equals the device's per-context range ledger; every crossing reaches
//! its tenant as a record or a loss; the call graphs equal what the
//! device's records say and every stack is a call path of the program
//! (call-site ledger); a tenant cannot touch the other's contexts or
//! ranges; malformed and fuzzed requests change no register; all eight
//! registers of its VM's share busy is ENOSPC; a restarted daemon disarms what it does not
//! know.
mod cleanup;
mod cli;
mod examples;
mod fixture;
mod refusals;

use std::collections::BTreeMap;

use gpupm_client::{DevNode, TenantClient};
use gpupm_test_support::device::step;
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::ranges::{self as rg, range_reg, rring, RangeLedgerQuery};
use gpupm_uapi::regs as r;
use serde_json::json;

use crate::cli::cli_folded_and_json_agree;
use crate::fixture::{
    assert_call_paths, contexts, ledger_calls, ledger_ranges, loop_range, only_registers,
    registers, store_range, tenant_graph, tenant_rows, tenants, UID_A, UID_B,
};
use crate::refusals::{
    malformed_and_fuzzed_requests_change_nothing, registers_run_out_with_enospc,
};

#[test]
fn each_tenant_gets_its_exact_share_and_the_call_graph_of_its_records() {
    let tmp = Scratch::new("ranges");
    let driver = Driver::start_in(
        &tmp,
        DriverOptions::system(gpupm_test_support::scenario::shared_gemm_partition()),
    );
    let dev = driver.node();
    let card = driver.card();
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
    daemon.wait_for("READY=1");
    let node = tmp.join("tenant").join("node");
    for _ in 0..8 {
        step(&dev, STEP, &mut daemon);
    }
    let (a1, a2, b1) = contexts(&dev);

    // Tenant A: the store range on both its contexts (one register), the
    // K loop on a1 (another).
    let n = node.clone();
    let got = run_as(&Cred::user(UID_A), move || {
        let c = TenantClient::open(&n).expect("open");
        let s1 = c.add_range(&store_range(a1, 500)).expect("a1 store");
        let s2 = c.add_range(&store_range(a2, 500)).expect("a2 store");
        let l1 = c.add_range(&loop_range(a1)).expect("a1 loop");
        let foreign = errno_of(&c.add_range(&store_range(b1, 500)));
        json!([
            [s1.handle, s1.register, s1.shared],
            [s2.handle, s2.register, s2.shared],
            [l1.handle, l1.register, l1.shared],
            foreign
        ])
    });
    let h = |i: usize| u32::try_from(got[i][0].as_u64().unwrap()).unwrap();
    let reg = |i: usize| u8::try_from(got[i][1].as_u64().unwrap()).unwrap();
    assert_eq!(got[0][2], json!(0));
    assert_eq!(got[1][2], json!(1), "same programming shares a register");
    assert_eq!(got[1][1], got[0][1]);
    assert_eq!(got[2][2], json!(0));
    assert_eq!(got[3], json!(libc::EACCES));
    assert_eq!((reg(0), reg(2)), (0, 1), "A's first two registers");
    // The device registers behind them, told apart by their thresholds.
    let (store_reg, loop_reg) = (armed_with(&dev, 500), armed_with(&dev, 4_000));
    let (a1_store, a2_store, a1_loop) = (h(0), h(1), h(2));

    // Tenant B's store range, the same programming, takes a register of
    // its own VM's (ranges of two VMs never share one); A's contexts and
    // handles are as invisible to it as missing ones.
    let n = node.clone();
    let got = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        let s = c.add_range(&store_range(b1, 500)).expect("b1 store");
        json!([
            s.handle,
            s.register,
            s.shared,
            errno_of(&c.add_range(&store_range(a1, 500))),
            errno_of(&c.read_ranges(a1)),
            errno_of(&c.remove_range(a1, a1_store)),
            // Handles count per VM: A's third is no handle of B's.
            errno_of(&c.remove_range(b1, a1_loop)),
            errno_of(&c.call_graph(a1)),
            errno_of(&c.read_ranges(4000)),
            errno_of(&c.remove_range(b1, 999_999))
        ])
    });
    assert_eq!(
        (&got[1], &got[2]),
        (&json!(0), &json!(0)),
        "B's own first register"
    );
    let b_reg = (0..8u8)
        .find(|&i| ![store_reg, loop_reg].contains(&i) && registers(&dev)[usize::from(i) * 4] != 0)
        .expect("B's register");
    assert_eq!(
        got.as_array().unwrap()[3..],
        vec![json!(libc::EACCES); 7][..]
    );
    let b1_store = u32::try_from(got[0].as_u64().unwrap()).unwrap();

    // Baselines: the ledger rows when each range was added (no cycle ran
    // since).
    let base: BTreeMap<u32, RangeLedgerQuery> =
        [a1, a2, b1].map(|c| (c, ledger_ranges(&card, c))).into();
    let switches0 = dev.read64(r::part(1, r::PART_SWITCHES)).unwrap();
    malformed_and_fuzzed_requests_change_nothing(&node, &dev, &daemon, (a1, b1), a1_store);
    registers_run_out_with_enospc(&node, &dev, b1);
    for _ in 0..300 {
        step(&dev, STEP, &mut daemon);
    }
    let switches = dev.read64(r::part(1, r::PART_SWITCHES)).unwrap() - switches0;
    assert!(switches >= 100, "only {switches} context switches");

    let cases = [
        (UID_A, a1, vec![(a1_store, store_reg), (a1_loop, loop_reg)]),
        (UID_A, a2, vec![(a2_store, store_reg)]),
        (UID_B, b1, vec![(b1_store, b_reg)]),
    ];
    let (mut total_crossings, mut called) = (0, 0);
    for (uid, ctx, handles) in &cases {
        let rows = tenant_rows(&node, *uid, *ctx);
        let now = ledger_ranges(&card, *ctx);
        assert_eq!(rows.len(), handles.len());
        let mut crossings = 0;
        for &(handle, i) in handles {
            let (t, b) = (now.rows[i as usize], base[ctx].rows[i as usize]);
            let row = rows[&handle];
            assert_eq!(
                [row[0], row[1]],
                [t.entries - b.entries, t.count - b.count],
                "ctx {ctx} range {handle}: entries and count against the ledger"
            );
            assert!(row[1] > 0, "ctx {ctx} range {handle} counted nothing");
            assert_eq!(
                row[2] + row[3],
                t.crossings - b.crossings,
                "ctx {ctx} range {handle}: records + lost = crossings"
            );
            assert_eq!(row[4], 0, "ctx {ctx} range {handle}: inexact");
            crossings += row[2];
        }
        total_crossings += crossings;
        let regs: Vec<u8> = handles.iter().map(|&(_, i)| i).collect();
        let device = only_registers(&dev, *ctx, &regs);
        let g = tenant_graph(&node, *uid, *ctx);
        assert_eq!(g.crossings, crossings, "ctx {ctx}: graph crossings");
        called += g
            .stacks
            .iter()
            .filter(|(path, _)| path.len() > 1)
            .map(|(_, n)| n)
            .sum::<u64>();
        assert_eq!(g.edges, device.edges, "ctx {ctx}: edges");
        assert_eq!(g.kernels, device.kernels, "ctx {ctx}: self/inclusive");
        assert_eq!(g.stacks, device.stacks, "ctx {ctx}: stacks");
        assert_call_paths(&g, &ledger_calls(&card, *ctx), &format!("ctx {ctx}"));
    }
    eprintln!("{switches} switches, {total_crossings} crossings, {called} in called kernels");
    assert!(total_crossings > 100, "only {total_crossings} crossings");
    assert!(called > 0, "no crossing inside a called kernel");
    cli_folded_and_json_agree(&node, a1);
    assert_eq!(dev.read32(rring(1, rg::RRING_LOST)).unwrap(), 0);

    removal_disarms_only_the_last_user(
        &node,
        &dev,
        (a1, a2, b1),
        (a1_store, a2_store, b1_store),
        (store_reg, b_reg),
    );

    // A restarted daemon disarms the ranges it does not know (a1's loop).
    assert_ne!(
        dev.read32(range_reg(1, u32::from(loop_reg), rg::RANGE_CTRL))
            .unwrap(),
        0
    );
    daemon.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
    daemon.wait_for("READY=1");
    assert!(registers(&dev).iter().step_by(4).all(|&ctrl| ctrl == 0));
    assert!(tenant_rows(&node, UID_A, a1).is_empty());
    daemon.stop();
    driver.stop();
}

/// Removing a shared range keeps the register for the VM's others; the
/// last removal disarms it; another VM's register with the same
/// programming is its own and stays.
fn removal_disarms_only_the_last_user(
    node: &std::path::Path,
    dev: &DevNode,
    (a1, a2, b1): (u32, u32, u32),
    (h1, h2, hb): (u32, u32, u32),
    (a_reg, b_reg): (u8, u8),
) {
    let ctrl = |reg: u8| {
        dev.read32(range_reg(1, u32::from(reg), rg::RANGE_CTRL))
            .unwrap()
    };
    let remove = |uid: u32, ctx: u32, handle: u32| {
        let n = node.to_owned();
        run_as(&Cred::user(uid), move || {
            let c = TenantClient::open(&n).expect("open");
            json!(errno_of(&c.remove_range(ctx, handle)))
        })
    };
    assert_eq!(remove(UID_A, a1, h1), json!(0));
    assert_ne!(ctrl(a_reg), 0, "a2 still uses the register");
    assert_eq!(remove(UID_A, a2, h2), json!(0));
    assert_eq!(remove(UID_A, a2, h2), json!(libc::EACCES));
    assert_eq!(ctrl(a_reg), 0, "the last removal disarms the register");
    assert_ne!(ctrl(b_reg), 0, "B's register is its own");
    assert_eq!(remove(UID_B, b1, hb), json!(0));
    assert_eq!(ctrl(b_reg), 0);
}

/// The one armed register of partition 1 whose threshold is `threshold`.
fn armed_with(dev: &DevNode, threshold: u32) -> u8 {
    let regs = registers(dev);
    let found: Vec<u8> = (0..8u8)
        .filter(|&i| {
            let r = &regs[usize::from(i) * 4..usize::from(i) * 4 + 4];
            r[0] != 0 && r[3] == u64::from(threshold)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "registers with threshold {threshold}: {found:?}"
    );
    found[0]
}
