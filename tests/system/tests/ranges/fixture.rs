//! The scenario, the requests and the readers the range tests share:
//! the device's ledgers, its ring of records, and what tenants read.

use std::collections::BTreeMap;
use std::fs::File;

use gpupm_client::ranges::CallGraphData;
use gpupm_client::{DevNode, TenantClient};
use gpupm_test_support::rawnode::ioctl;
use gpupm_test_support::users::{run_as, Cred};
use gpupm_uapi::ioctl::{GPUPM_IOC_LEDGER_CALLS, GPUPM_IOC_LEDGER_RANGES, IOCTL_STRUCT_VERSION};
use gpupm_uapi::ranges::{
    self as rg, range_event, range_reg, range_span_offset, rring, CallLedgerQuery,
    RangeLedgerQuery, RangeRecord, RangeSlot, RANGES_PER_PARTITION,
};
use gpupm_uapi::regs as r;
use gpupm_uapi::tenant::ranges::{range_kind, range_trigger, AddRange};
use gpupm_uapi::tenant::TENANT_STRUCT_VERSION;
use serde_json::{json, Value};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

pub(crate) const UID_A: u32 = 61501;
pub(crate) const UID_B: u32 = 61502;

pub(crate) fn tenants() -> String {
    format!("[[tenant]]\nvm = 1\nuid = {UID_A}\n[[tenant]]\nvm = 2\nuid = {UID_B}\n")
}

/// A range of the GEMM: `store` (kernel 1) cycles with a count threshold.
pub(crate) fn store_range(ctx: u32, threshold: u32) -> AddRange {
    AddRange {
        version: TENANT_STRUCT_VERSION,
        ctx,
        kind: range_kind::CODE,
        event: range_event::CYCLES,
        trigger: range_trigger::COUNT,
        threshold,
        kernel: 1,
        ..AddRange::default()
    }
}

/// The K loop of `main` (blocks 1..=3), instructions, a record every
/// 4,000.
pub(crate) fn loop_range(ctx: u32) -> AddRange {
    AddRange {
        event: range_event::INSTRUCTIONS,
        kernel: 0,
        first: 1,
        last: 3,
        threshold: 4_000,
        ..store_range(ctx, 1)
    }
}

pub(crate) fn ledger_ranges(card: &File, ctx: u32) -> RangeLedgerQuery {
    let mut q = RangeLedgerQuery::new_zeroed();
    (q.version, q.ctx, q.partition) = (IOCTL_STRUCT_VERSION, ctx, 1);
    ioctl(card, GPUPM_IOC_LEDGER_RANGES, q.as_mut_bytes()).expect("range ledger");
    q
}

pub(crate) fn ledger_calls(card: &File, ctx: u32) -> CallLedgerQuery {
    let mut q = CallLedgerQuery::new_zeroed();
    (q.version, q.ctx) = (IOCTL_STRUCT_VERSION, ctx);
    ioctl(card, GPUPM_IOC_LEDGER_CALLS, q.as_mut_bytes()).expect("call ledger");
    assert_eq!(q.count, q.total, "one page holds the GEMM's call sites");
    q
}

/// Every range register of partition 1 (programming and counts).
pub(crate) fn registers(dev: &DevNode) -> Vec<u64> {
    (0..RANGES_PER_PARTITION)
        .flat_map(|i| {
            [
                rg::RANGE_CTRL,
                rg::RANGE_START,
                rg::RANGE_END,
                rg::RANGE_THRESHOLD,
            ]
            .map(|reg| u64::from(dev.read32(range_reg(1, i, reg)).expect("read")))
        })
        .collect()
}

/// The GEMM contexts: (VM 1's two, VM 2's one).
pub(crate) fn contexts(dev: &DevNode) -> (u32, u32, u32) {
    let mut by_vm: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for c in 1..64 {
        if dev.read32(r::ctx(c, r::CTX_STATE)).expect("state") == r::ctx_state::ACTIVE {
            let vm = dev.read32(r::ctx(c, r::CTX_VM)).expect("vm");
            by_vm.entry(vm).or_default().push(c);
        }
    }
    (by_vm[&1][0], by_vm[&1][1], by_vm[&2][0])
}

/// The call graph of `ctx` as the device's records in partition 1's ring
/// from index `from` on say (the ring did not wrap: fewer records than its
/// slots), and the ring's head.
pub(crate) fn graph_from_ring_since(dev: &DevNode, ctx: u32, from: u32) -> (CallGraphData, u64) {
    let head = ring_head(dev);
    let mut g = CallGraphData::default();
    for rec in (from..head).map(|k| ring_record(dev, k)) {
        if rec.ctx == ctx {
            add_crossing(&mut g, &rec);
        }
    }
    (g, u64::from(head))
}

/// Records in partition 1's ring; it must not have wrapped.
fn ring_head(dev: &DevNode) -> u32 {
    let head = dev.read32(rring(1, rg::RRING_HEAD)).expect("head");
    assert!(head < 4096, "the ring wrapped: {head} records");
    head
}

/// Record `k` of partition 1's ring.
fn ring_record(dev: &DevNode, k: u32) -> RangeRecord {
    let mut buf = vec![0u8; size_of::<RangeSlot>()];
    dev.window(
        range_span_offset(1) + u64::from(k) * buf.len() as u64,
        &mut buf,
    )
    .expect("window");
    let slot = RangeSlot::read_from_bytes(&buf).expect("slot");
    RangeRecord::read_from_bytes(&slot.payload).expect("record")
}

/// Adds one crossing record to the graph: its call edges, the self sample
/// of its innermost kernel, an inclusive sample of every kernel on its
/// stack (once each) and its stack.
fn add_crossing(g: &mut CallGraphData, rec: &RangeRecord) {
    g.crossings += 1;
    let calls = &rec.stack[..rec.depth as usize];
    let mut path: Vec<u16> = calls.iter().map(|c| c.kernel).collect();
    path.push(rec.kernel);
    for c in calls {
        *g.edges
            .entry((c.kernel, c.call_block, c.callee))
            .or_default() += 1;
    }
    g.kernels.entry(rec.kernel).or_default().0 += 1;
    let mut distinct = path.clone();
    distinct.sort_unstable();
    distinct.dedup();
    for k in distinct {
        g.kernels.entry(k).or_default().1 += 1;
    }
    *g.stacks.entry(path).or_default() += 1;
}

pub(crate) fn tenant_graph(node: &std::path::Path, uid: u32, ctx: u32) -> CallGraphData {
    let node = node.to_owned();
    let v = run_as(&Cred::user(uid), move || {
        let c = TenantClient::open(&node).expect("open");
        let g = c.call_graph(ctx).expect("graph");
        let edges: Vec<Value> = g
            .edges
            .iter()
            .map(|(k, v)| json!([k.0, k.1, k.2, v]))
            .collect();
        let kernels: Vec<Value> = g
            .kernels
            .iter()
            .map(|(k, v)| json!([k, v.0, v.1]))
            .collect();
        let stacks: Vec<Value> = g.stacks.iter().map(|(k, v)| json!([k, v])).collect();
        json!({"crossings": g.crossings, "lost": g.lost, "dropped": g.stacks_dropped,
               "edges": edges, "kernels": kernels, "stacks": stacks})
    });
    let n = |x: &Value| x.as_u64().expect("number");
    let k16 = |x: &Value| u16::try_from(n(x)).expect("u16");
    let mut g = CallGraphData {
        crossings: n(&v["crossings"]),
        lost: n(&v["lost"]),
        stacks_dropped: n(&v["dropped"]),
        ..CallGraphData::default()
    };
    for e in v["edges"].as_array().expect("edges") {
        g.edges
            .insert((k16(&e[0]), k16(&e[1]), k16(&e[2])), n(&e[3]));
    }
    for k in v["kernels"].as_array().expect("kernels") {
        g.kernels.insert(k16(&k[0]), (n(&k[1]), n(&k[2])));
    }
    for s in v["stacks"].as_array().expect("stacks") {
        let path = s[0].as_array().expect("path").iter().map(k16).collect();
        g.stacks.insert(path, n(&s[1]));
    }
    g
}

/// `ctx`'s ranges as its tenant reads them: handle → (entries, count,
/// crossings, lost, flags).
pub(crate) fn tenant_rows(node: &std::path::Path, uid: u32, ctx: u32) -> BTreeMap<u32, [u64; 5]> {
    let node = node.to_owned();
    let v = run_as(&Cred::user(uid), move || {
        let c = TenantClient::open(&node).expect("open");
        let rows = c.read_ranges(ctx).expect("read ranges");
        json!(rows
            .iter()
            .map(|r| json!([r.handle, r.entries, r.count, r.crossings, r.lost, r.flags]))
            .collect::<Vec<_>>())
    });
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let n = |i: usize| r[i].as_u64().expect("number");
            (u32::try_from(n(0)).unwrap(), [n(1), n(2), n(3), n(4), n(5)])
        })
        .collect()
}

/// The ring graph of `ctx` from the records of registers `regs` only: the
/// others belong to ranges the context does not hold.
pub(crate) fn only_registers(dev: &DevNode, ctx: u32, regs: &[u8]) -> CallGraphData {
    let mut g = CallGraphData::default();
    for rec in (0..ring_head(dev)).map(|k| ring_record(dev, k)) {
        if rec.ctx == ctx && regs.contains(&rec.range) {
            add_crossing(&mut g, &rec);
        }
    }
    g
}

/// Every edge is a call site of the program that was called, and every
/// stack starts at the entry kernel and chains through call sites.
pub(crate) fn assert_call_paths(g: &CallGraphData, calls: &CallLedgerQuery, who: &str) {
    let sites: Vec<(u16, u16, u16)> = calls.rows[..calls.count as usize]
        .iter()
        .filter(|e| e.calls > 0)
        .map(|e| (e.kernel, e.call_block, e.callee))
        .collect();
    for edge in g.edges.keys() {
        assert!(sites.contains(edge), "{who}: edge {edge:?} is no call site");
    }
    for path in g.stacks.keys() {
        assert_eq!(path[0], 0, "{who}: stack {path:?} does not start at main");
        for w in path.windows(2) {
            assert!(
                sites
                    .iter()
                    .any(|&(k, _, callee)| k == w[0] && callee == w[1]),
                "{who}: stack {path:?} is no call path"
            );
        }
    }
}
