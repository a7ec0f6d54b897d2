//! The marked-range example programs (`examples/c/tenant_ranges.c`,
//! `examples/python/tenant_ranges.py`) as an outside tenant runs them,
//! built from the generated header (or staged with the generated
//! constants), as a real unprivileged uid against `gpupm-driver` (step
//! clock, debug ledger, one GEMM context alone on its partition, so the
//! clock standing still means nothing counts) and `gpupmd`. The counts
//! each prints equal the device's range ledger, its call graph equals the
//! one the device's records in the ring give, every edge is a call site
//! (call ledger); the range is removed (the register disarmed); another
//! tenant's context fails with EACCES in both languages.

use std::collections::BTreeMap;

use gpupm_client::ranges::CallGraphData;
use gpupm_test_support::device::step;
use gpupm_test_support::examples::{fields, Example};
use gpupm_test_support::scenario::{one_slice_running, STEP};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::ranges::{self as rg, range_ctrl, range_reg, rring, RangeLedgerQuery};
use gpupm_uapi::regs as r;

use crate::fixture::{
    assert_call_paths, graph_from_ring_since, ledger_calls, ledger_ranges, registers, tenants,
    UID_A, UID_B,
};

/// Crossings each example waits for.
const CROSSINGS: u64 = 40;
const MAX_STEPS: u32 = 5_000;

/// What an example printed: its range row and the call graph.
#[derive(Debug, Default)]
struct Printed {
    row: BTreeMap<String, u64>,
    graph: CallGraphData,
    removed: Option<u64>,
}

fn k16(s: &str) -> u16 {
    s.parse()
        .unwrap_or_else(|_| panic!("{s:?} is no kernel or block"))
}

fn parse(out: &str) -> Printed {
    let mut p = Printed::default();
    for line in out.lines() {
        let (word, rest) = line.split_once(' ').expect("a word and values");
        match word {
            "range" => p.row = fields(line),
            "graph" => {
                let f = fields(rest);
                (p.graph.crossings, p.graph.lost, p.graph.stacks_dropped) =
                    (f["crossings"], f["lost"], f["stacks_dropped"]);
            }
            "edge" => {
                let v: Vec<&str> = rest.split([' ', ':']).collect();
                let key = (k16(v[0]), k16(v[1]), k16(v[2]));
                p.graph.edges.insert(key, v[3].parse().expect("count"));
            }
            "kernel" => {
                let f = fields(line);
                let k = u16::try_from(f["kernel"]).expect("kernel");
                p.graph.kernels.insert(k, (f["self"], f["inclusive"]));
            }
            "removed" => p.removed = Some(rest.parse().expect("handle")),
            folded => {
                let path = folded
                    .split(';')
                    .map(|k| k16(k.strip_prefix('k').expect("k<kernel>")))
                    .collect();
                p.graph.stacks.insert(path, rest.parse().expect("count"));
            }
        }
    }
    p
}

/// The ledger row of the armed register once `ctx` crossed
/// [`CROSSINGS`] times there (none before a range is armed).
///
/// The registers are read before the ledger: arming zeroes a register's
/// ledger row in the same write, so a register seen armed has its new
/// row in the ledger read after. Read the other way round, an example
/// arming the register the previous one used, between the two reads,
/// paired the new arming with the previous example's crossings and
/// stopped the clock too early (a CI run).
fn crossed(
    dev: &gpupm_client::DevNode,
    card: &std::fs::File,
    ctx: u32,
) -> Option<(u32, RangeLedgerQuery)> {
    let armed: Vec<u32> = (0..rg::RANGES_PER_PARTITION)
        .filter(|&i| {
            dev.read32(range_reg(1, i, rg::RANGE_CTRL)).expect("ctrl") & range_ctrl::ENABLE != 0
        })
        .collect();
    if armed.is_empty() {
        return None;
    }
    let q = ledger_ranges(card, ctx);
    armed
        .into_iter()
        .find(|&i| q.rows[i as usize].crossings >= CROSSINGS)
        .map(|i| (i, q))
}

#[test]
fn the_c_and_python_ranges_examples_print_the_ledger_and_the_ring_call_graph() {
    let tmp = Scratch::new("ranges-examples");
    let driver = Driver::start_in(&tmp, DriverOptions::system(one_slice_running("gemm")));
    let (dev, card) = (driver.node(), driver.card());
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
    daemon.wait_for("READY=1");
    for _ in 0..8 {
        step(&dev, STEP, &mut daemon);
    }
    let ctx = (1..r::MAX_CONTEXTS)
        .find(|&c| dev.read32(r::ctx(c, r::CTX_STATE)).ok() == Some(r::ctx_state::ACTIVE))
        .expect("the GEMM context");
    let node = tmp.join("tenant").join("node");
    let args: Vec<String> = [
        &ctx.to_string(),
        "1:0-0",
        "cycles",
        "500",
        &CROSSINGS.to_string(),
        &node.display().to_string(),
    ]
    .map(str::to_owned)
    .into();
    for example in [
        Example::c("tenant_ranges", tmp.path()),
        Example::python("tenant_ranges", tmp.path()),
    ] {
        let who = example.language;
        let from = dev.read32(rring(1, rg::RRING_HEAD)).expect("head");
        let (mut steps, mut at_stop) = (0, None);
        let out = example.run_while(UID_A, &args, || {
            if let Some(stop) = crossed(&dev, &card, ctx) {
                at_stop = Some(stop);
                return false;
            }
            steps += 1;
            assert!(steps < MAX_STEPS, "{who}: never crossed {CROSSINGS} times");
            step(&dev, STEP, &mut daemon);
            true
        });
        eprintln!("{who}:\n{out}");
        let (register, truth) = at_stop.expect("the example ended before the device crossed");
        let truth = truth.rows[register as usize];
        let p = parse(&out);
        // Rows name the register by its place among the VM's own (ABI 1.11).
        assert_eq!(p.row["register"], 0, "{who}: {out}");
        assert_eq!(
            [
                p.row["entries"],
                p.row["count"],
                p.row["crossings"] + p.row["lost"],
                p.row["flags"]
            ],
            [truth.entries, truth.count, truth.crossings, 0],
            "{who}: the row against the ledger:\n{out}"
        );
        assert_eq!(p.removed, Some(p.row["range"]), "{who}: {out}");
        let (device, _) = graph_from_ring_since(&dev, ctx, from);
        assert_eq!(p.graph.crossings, p.row["crossings"], "{who}: {out}");
        assert_eq!(p.graph.crossings, device.crossings, "{who}: {out}");
        assert_eq!(p.graph.edges, device.edges, "{who}: edges");
        assert_eq!(p.graph.kernels, device.kernels, "{who}: self/inclusive");
        assert_eq!(p.graph.stacks, device.stacks, "{who}: folded stacks");
        assert!(
            !p.graph.edges.is_empty(),
            "{who}: the store range is inside a call"
        );
        assert_call_paths(&p.graph, &ledger_calls(&card, ctx), who);
        assert!(
            registers(&dev).iter().step_by(4).all(|&ctrl| ctrl == 0),
            "{who}: the removal disarmed the register"
        );
    }
    for example in [
        Example::c("tenant_ranges", tmp.path()),
        Example::python("tenant_ranges", tmp.path()),
    ] {
        example.assert_denied_as(UID_B, &args);
    }
    assert!(
        registers(&dev).iter().step_by(4).all(|&ctrl| ctrl == 0),
        "B armed nothing"
    );
    daemon.stop();
    driver.stop();
}
