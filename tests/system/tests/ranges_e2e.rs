//! Marked ranges and call graphs end to end: `gpupm-driver` (step clock,
//! debug ledger) and `gpupmd` as processes, two tenants (real uids) whose
//! VMs share one partition, three contexts running the built-in GEMM and
//! switching all the time. Each tenant's share of the range registers
//! equals the device's per-context range ledger; every crossing reaches
//! its tenant as a record or a loss; the call graphs equal what the
//! device's records say and every stack is a call path of the program
//! (call-site ledger); a tenant cannot touch the other's contexts or
//! ranges; malformed and fuzzed requests change no register; all eight
//! registers busy is ENOSPC; a restarted daemon disarms what it does not
//! know.

use std::collections::BTreeMap;
use std::fs::File;

use gpupm_client::ranges::CallGraphData;
use gpupm_client::{DevNode, TenantClient};
use gpupm_test_support::device::step;
use gpupm_test_support::rawnode::sys::ioctl;
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
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

const UID_A: u32 = 61501;
const UID_B: u32 = 61502;

/// Partition 1 shared by VM 1 (two GEMM contexts) and VM 2 (one),
/// switching contexts every 10,000 cycles and VMs every 30,000.
fn scenario() -> String {
    let builtin = gpupm_driver::scenario::BUILTIN_TOML;
    let program = &builtin[builtin.find("# Tiled GEMM").expect("gemm program")..];
    let program = &program[..program.find("# Strided reduction").expect("reduce follows")];
    format!(
        "seed = 5\n[topology]\nsms_per_gpc = [2]\nmemory_slices = 1\nnvlinks = 0\n\
         [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
         ctx_timeslice_cycles = 10000\nvm_timeslice_cycles = 30000\n\
         [[vm]]\nid = 1\npartition = 1\n[[vm]]\nid = 2\npartition = 1\n\
         [[profile]]\nname = \"g\"\nprogram = \"gemm\"\n[[profile.phase]]\nduration_cycles = 1000000\n\
         rates = {{ sm_cycles_elapsed = 1.0 }}\n\
         [[context]]\nvm = 1\nprofile = \"g\"\n[[context]]\nvm = 1\nprofile = \"g\"\n\
         [[context]]\nvm = 2\nprofile = \"g\"\n{program}"
    )
}

fn tenants() -> String {
    format!("[[tenant]]\nvm = 1\nuid = {UID_A}\n[[tenant]]\nvm = 2\nuid = {UID_B}\n")
}

/// A range of the GEMM: `store` (kernel 1) cycles with a count threshold.
fn store_range(ctx: u32, threshold: u32) -> AddRange {
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
fn loop_range(ctx: u32) -> AddRange {
    AddRange {
        event: range_event::INSTRUCTIONS,
        kernel: 0,
        first: 1,
        last: 3,
        threshold: 4_000,
        ..store_range(ctx, 1)
    }
}

fn ledger_ranges(card: &File, ctx: u32) -> RangeLedgerQuery {
    let mut q = RangeLedgerQuery::new_zeroed();
    (q.version, q.ctx, q.partition) = (IOCTL_STRUCT_VERSION, ctx, 1);
    ioctl(card, GPUPM_IOC_LEDGER_RANGES, q.as_mut_bytes()).expect("range ledger");
    q
}

fn ledger_calls(card: &File, ctx: u32) -> CallLedgerQuery {
    let mut q = CallLedgerQuery::new_zeroed();
    (q.version, q.ctx) = (IOCTL_STRUCT_VERSION, ctx);
    ioctl(card, GPUPM_IOC_LEDGER_CALLS, q.as_mut_bytes()).expect("call ledger");
    assert_eq!(q.count, q.total, "one page holds the GEMM's call sites");
    q
}

/// Every range register of partition 1 (programming and counts).
fn registers(dev: &DevNode) -> Vec<u64> {
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
fn contexts(dev: &DevNode) -> (u32, u32, u32) {
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
/// say (the ring did not wrap: fewer records than its slots).
fn graph_from_ring(dev: &DevNode, ctx: u32) -> (CallGraphData, u64) {
    let head = dev.read32(rring(1, rg::RRING_HEAD)).expect("head");
    assert!(head < 4096, "the ring wrapped: {head} records");
    let mut g = CallGraphData::default();
    let mut buf = vec![0u8; size_of::<RangeSlot>()];
    for k in 0..head {
        dev.window(
            range_span_offset(1) + u64::from(k) * buf.len() as u64,
            &mut buf,
        )
        .expect("window");
        let slot = RangeSlot::read_from_bytes(&buf).expect("slot");
        let rec = RangeRecord::read_from_bytes(&slot.payload).expect("record");
        if rec.ctx != ctx {
            continue;
        }
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
    (g, u64::from(head))
}

fn tenant_graph(node: &std::path::Path, uid: u32, ctx: u32) -> CallGraphData {
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
fn tenant_rows(node: &std::path::Path, uid: u32, ctx: u32) -> BTreeMap<u32, [u64; 5]> {
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

/// Drops the records of registers `regs` from a ring graph: the others
/// belong to ranges the context does not hold.
fn only_registers(dev: &DevNode, ctx: u32, regs: &[u8]) -> CallGraphData {
    let head = dev.read32(rring(1, rg::RRING_HEAD)).expect("head");
    let mut buf = vec![0u8; size_of::<RangeSlot>()];
    let mut keep = Vec::new();
    for k in 0..head {
        dev.window(
            range_span_offset(1) + u64::from(k) * buf.len() as u64,
            &mut buf,
        )
        .expect("window");
        let rec = RangeRecord::read_from_bytes(&RangeSlot::read_from_bytes(&buf).unwrap().payload)
            .unwrap();
        keep.push(rec.ctx == ctx && regs.contains(&rec.range));
    }
    let (full, _) = graph_from_ring(dev, ctx);
    if keep.iter().all(|&k| k) || full.crossings == keep.iter().filter(|&&k| k).count() as u64 {
        return full;
    }
    // Rebuild from the kept records only.
    let mut g = CallGraphData::default();
    for (k, kept) in keep.into_iter().enumerate() {
        if !kept {
            continue;
        }
        dev.window(range_span_offset(1) + k as u64 * buf.len() as u64, &mut buf)
            .expect("window");
        let rec = RangeRecord::read_from_bytes(&RangeSlot::read_from_bytes(&buf).unwrap().payload)
            .unwrap();
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
        for kk in distinct {
            g.kernels.entry(kk).or_default().1 += 1;
        }
        *g.stacks.entry(path).or_default() += 1;
    }
    g
}

/// Every edge is a call site of the program that was called, and every
/// stack starts at the entry kernel and chains through call sites.
fn assert_call_paths(g: &CallGraphData, calls: &CallLedgerQuery, who: &str) {
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

#[test]
fn each_tenant_gets_its_exact_share_and_the_call_graph_of_its_records() {
    let tmp = Scratch::new("ranges");
    let driver = Driver::start_in(&tmp, DriverOptions::system(scenario()));
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
    let (store_reg, loop_reg) = (reg(0), reg(2));
    let (a1_store, a2_store, a1_loop) = (h(0), h(1), h(2));

    // Tenant B joins the store register; A's contexts and handles are as
    // invisible to it as missing ones.
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
            errno_of(&c.remove_range(b1, a1_store)),
            errno_of(&c.call_graph(a1)),
            errno_of(&c.read_ranges(4000)),
            errno_of(&c.remove_range(b1, 999_999))
        ])
    });
    assert_eq!(got[1], json!(store_reg));
    assert_eq!(got[2], json!(1));
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
        (UID_B, b1, vec![(b1_store, store_reg)]),
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
        store_reg,
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

/// Removing a shared range keeps the register for the others; the last
/// removal disarms it.
fn removal_disarms_only_the_last_user(
    node: &std::path::Path,
    dev: &DevNode,
    (a1, a2, b1): (u32, u32, u32),
    (h1, h2, hb): (u32, u32, u32),
    reg: u8,
) {
    let ctrl = || {
        dev.read32(range_reg(1, u32::from(reg), rg::RANGE_CTRL))
            .unwrap()
    };
    let n = node.to_owned();
    let got = run_as(&Cred::user(UID_A), move || {
        let c = TenantClient::open(&n).expect("open");
        json!([
            errno_of(&c.remove_range(a1, h1)),
            errno_of(&c.remove_range(a2, h2)),
            errno_of(&c.remove_range(a2, h2))
        ])
    });
    assert_eq!(got, json!([0, 0, libc::EACCES]));
    assert_ne!(ctrl(), 0, "b1 still uses the register");
    let n = node.to_owned();
    let got = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        json!(errno_of(&c.remove_range(b1, hb)))
    });
    assert_eq!(got, json!(0));
    assert_eq!(ctrl(), 0, "the last removal disarms the register");
}

/// Issues `cmd` with `bytes` in a buffer of at least the page the client
/// insists on (so that the request reaches the daemon); the errno or 0.
fn raw(c: &TenantClient, cmd: u32, bytes: &mut [u8]) -> Result<i32, nix::errno::Errno> {
    let mut buf = bytes.to_vec();
    buf.resize(bytes.len().max(gpupm_client::sys::RAW_MIN_BUF), 0);
    c.raw_ioctl(cmd, &mut buf)
}

/// What the tenants can see of partition 1's ranges: the registers and
/// both tenants' rows.
fn visible(node: &std::path::Path, dev: &DevNode, a1: u32, b1: u32) -> Value {
    json!({
        "registers": registers(dev),
        "a1": format!("{:?}", tenant_rows(node, UID_A, a1)),
        "b1": format!("{:?}", tenant_rows(node, UID_B, b1)),
    })
}

/// Every malformed request is EINVAL (ENOTTY for an unknown number) and
/// 50,000 fuzzed calls by tenant B — random numbers, sizes and bytes, and
/// valid requests for A's context with one field spoiled — all fail;
/// nothing visible changes.
fn malformed_and_fuzzed_requests_change_nothing(
    node: &std::path::Path,
    dev: &DevNode,
    daemon: &gpupm_test_support::Proc,
    (a1, b1): (u32, u32),
    a1_store: u32,
) {
    let metrics = || {
        [
            "gpupm_range_ranges",
            "gpupm_range_registers",
            "gpupm_callgraph_graphs",
        ]
        .map(|m| daemon.metric(m))
    };
    let (metrics0, errors0) = (
        metrics(),
        daemon.metric("gpupm_tenant_request_errors_total"),
    );
    use gpupm_uapi::ioc;
    use gpupm_uapi::tenant::ranges::{GraphHeader, ReadCallEdges, ReadRanges, RemoveRange};
    use gpupm_uapi::tenant::{
        TENANT_IOC_ADD_RANGE, TENANT_IOC_READ_CALL_EDGES, TENANT_IOC_READ_RANGES,
        TENANT_IOC_REMOVE_RANGE,
    };
    let before = visible(node, dev, a1, b1);
    let n = node.to_owned();
    let got = run_as(&Cred::user(UID_A), move || {
        let c = TenantClient::open(&n).expect("open");
        let spoiled: Vec<(&str, AddRange)> = vec![
            (
                "version",
                AddRange {
                    version: 2,
                    ..store_range(a1, 500)
                },
            ),
            (
                "flags",
                AddRange {
                    flags: 1,
                    ..store_range(a1, 500)
                },
            ),
            (
                "reserved",
                AddRange {
                    reserved: 1,
                    ..store_range(a1, 500)
                },
            ),
            (
                "kind",
                AddRange {
                    kind: 3,
                    ..store_range(a1, 500)
                },
            ),
            (
                "event",
                AddRange {
                    event: 3,
                    ..store_range(a1, 500)
                },
            ),
            (
                "trigger",
                AddRange {
                    trigger: 3,
                    ..store_range(a1, 500)
                },
            ),
            (
                "threshold 0",
                AddRange {
                    threshold: 0,
                    ..store_range(a1, 500)
                },
            ),
            (
                "threshold without trigger",
                AddRange {
                    trigger: 0,
                    ..store_range(a1, 500)
                },
            ),
            (
                "first > last",
                AddRange {
                    first: 2,
                    last: 1,
                    ..store_range(a1, 500)
                },
            ),
            (
                "kernel > u16",
                AddRange {
                    kernel: 70_000,
                    ..store_range(a1, 500)
                },
            ),
            (
                "block > u16",
                AddRange {
                    last: 70_000,
                    ..store_range(a1, 500)
                },
            ),
            (
                "data with kernel",
                AddRange {
                    kind: range_kind::DATA,
                    ..store_range(a1, 500)
                },
            ),
            (
                "no such kernel",
                AddRange {
                    kernel: 5,
                    ..store_range(a1, 500)
                },
            ),
            (
                "no such block",
                AddRange {
                    first: 0,
                    last: 9,
                    ..store_range(a1, 500)
                },
            ),
            (
                "ctx 0",
                AddRange {
                    ctx: 0,
                    ..store_range(a1, 500)
                },
            ),
        ];
        let mut out = serde_json::Map::new();
        for (name, mut arg) in spoiled {
            let r = raw(&c, TENANT_IOC_ADD_RANGE, arg.as_mut_bytes());
            out.insert(name.into(), json!(r.err().map(|e| e as i32)));
        }
        let mut rr = ReadRanges::new_zeroed();
        (rr.version, rr.ctx, rr.flags) = (TENANT_STRUCT_VERSION, a1, 1);
        let r = raw(&c, TENANT_IOC_READ_RANGES, rr.as_mut_bytes());
        out.insert("read flags".into(), json!(r.err().map(|e| e as i32)));
        let mut rm = RemoveRange {
            version: TENANT_STRUCT_VERSION,
            ctx: a1,
            handle: a1_store,
            reserved: 1,
        };
        let r = raw(&c, TENANT_IOC_REMOVE_RANGE, rm.as_mut_bytes());
        out.insert("remove reserved".into(), json!(r.err().map(|e| e as i32)));
        let mut ge = ReadCallEdges::new_zeroed();
        ge.head = GraphHeader {
            version: TENANT_STRUCT_VERSION,
            ctx: a1,
            first: 1000,
            ..GraphHeader::default()
        };
        let r = raw(&c, TENANT_IOC_READ_CALL_EDGES, ge.as_mut_bytes());
        out.insert(
            "first past the end".into(),
            json!(r.err().map(|e| e as i32)),
        );
        let mut short = vec![0u8; 60];
        let r = raw(&c, ioc::read_write(b'T', 0x18, 60), &mut short);
        out.insert("short".into(), json!(r.err().map(|e| e as i32)));
        let r = raw(&c, ioc::read_write(b'T', 0x1E, 64), &mut [0u8; 64]);
        out.insert("unknown nr".into(), json!(r.err().map(|e| e as i32)));
        json!(out)
    });
    for (name, errno) in got.as_object().unwrap() {
        let want = if name == "unknown nr" {
            libc::ENOTTY
        } else {
            libc::EINVAL
        };
        assert_eq!(errno, &json!(want), "{name}: {got}");
    }

    let n = node.to_owned();
    let fuzz = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        let mut rng = gpupm_test_support::rng::Rng(0x5eed_0013);
        let (mut ok, mut calls) = (0u64, 0u64);
        let valid: [(u32, Vec<u8>); 4] = [
            (
                TENANT_IOC_ADD_RANGE,
                store_range(a1, 500).as_bytes().to_vec(),
            ),
            (TENANT_IOC_READ_RANGES, {
                let mut rr = ReadRanges::new_zeroed();
                (rr.version, rr.ctx) = (TENANT_STRUCT_VERSION, a1);
                rr.as_bytes().to_vec()
            }),
            (
                TENANT_IOC_REMOVE_RANGE,
                RemoveRange {
                    version: TENANT_STRUCT_VERSION,
                    ctx: a1,
                    handle: a1_store,
                    reserved: 0,
                }
                .as_bytes()
                .to_vec(),
            ),
            (TENANT_IOC_READ_CALL_EDGES, {
                let mut ge = ReadCallEdges::new_zeroed();
                ge.head = GraphHeader {
                    version: TENANT_STRUCT_VERSION,
                    ctx: a1,
                    ..GraphHeader::default()
                };
                ge.as_bytes().to_vec()
            }),
        ];
        while calls < 50_000 {
            let (cmd, mut buf) = if rng.below(2) == 0 {
                // A's valid request with one 32-bit word spoiled.
                let (cmd, bytes) = &valid[usize::try_from(rng.below(4)).unwrap()];
                let mut b = bytes.clone();
                let w = usize::try_from(rng.below((b.len() / 4) as u64)).unwrap() * 4;
                let v = u32::try_from(rng.below(1 << 32)).unwrap();
                b[w..w + 4].copy_from_slice(&v.to_le_bytes());
                (*cmd, b)
            } else {
                let nr = 0x18 + u8::try_from(rng.below(8)).unwrap();
                let size = [16usize, 24, 48, 56, 64, 536, 1072, 1584, 1840]
                    [usize::try_from(rng.below(9)).unwrap()];
                let cmd = match rng.below(3) {
                    0 => ioc::read_write(b'T', nr, size),
                    1 => ioc::write(b'T', nr, size),
                    _ => ioc::read(b'T', nr, size),
                };
                let b: Vec<u8> = (0..size)
                    .map(|_| u8::try_from(rng.below(256)).unwrap())
                    .collect();
                (cmd, b)
            };
            calls += 1;
            if raw(&c, cmd, &mut buf).is_ok() {
                ok += 1;
            }
        }
        json!([calls, ok])
    });
    assert_eq!(fuzz, json!([50_000, 0]), "a fuzzed call of B succeeded");
    let refused = daemon.metric("gpupm_tenant_request_errors_total") - errors0;
    assert!(
        refused >= 50_000,
        "only {refused} requests reached the daemon"
    );
    assert_eq!(metrics(), metrics0, "the range metrics changed");
    assert_eq!(
        visible(node, dev, a1, b1),
        before,
        "a refused request changed something"
    );
}

/// Distinct programmings take the free registers; the ninth is ENOSPC
/// and changes nothing; removing them frees the registers.
fn registers_run_out_with_enospc(node: &std::path::Path, dev: &DevNode, b1: u32) {
    let before = registers(dev);
    let free = before.iter().step_by(4).filter(|&&ctrl| ctrl == 0).count();
    let n = node.to_owned();
    let got = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        let handles: Vec<u32> = (0..free)
            .map(|k| {
                c.add_range(&store_range(b1, 10_000 + u32::try_from(k).unwrap()))
                    .expect("free register")
                    .handle
            })
            .collect();
        let full = errno_of(&c.add_range(&store_range(b1, 99_999)));
        json!([handles, full])
    });
    assert_eq!(got[1], json!(libc::ENOSPC));
    assert!(registers(dev).iter().step_by(4).all(|&ctrl| ctrl != 0));
    let n = node.to_owned();
    let handles = got[0].clone();
    let removed = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        json!(handles
            .as_array()
            .unwrap()
            .iter()
            .map(|h| errno_of(&c.remove_range(b1, u32::try_from(h.as_u64().unwrap()).unwrap())))
            .collect::<Vec<_>>())
    });
    assert!(removed.as_array().unwrap().iter().all(|e| e == &json!(0)));
    // Disarming writes RANGE_CTRL only (the staging registers keep their
    // values): the same registers are armed as before.
    let ctrls = |v: &[u64]| v.iter().step_by(4).copied().collect::<Vec<_>>();
    assert_eq!(ctrls(&registers(dev)), ctrls(&before));
}

/// `gpupm callgraph --folded` parsed back equals `--json`, and `gpupm
/// ranges list --json` shows the ranges hottest first (as tenant A).
fn cli_folded_and_json_agree(node: &std::path::Path, ctx: u32) {
    let cli = gpupm_test_support::bin!(Cli);
    let run = |args: &[&str]| -> String {
        let out = Cred::user(UID_A)
            .command(&cli)
            .arg("--tenant-node")
            .arg(node)
            .args(args)
            .output()
            .expect("gpupm runs");
        assert!(
            out.status.success(),
            "gpupm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let ctx_s = ctx.to_string();
    let json: Value =
        serde_json::from_str(&run(&["callgraph", "--ctx", &ctx_s, "--json"])).expect("JSON");
    let folded = run(&["callgraph", "--ctx", &ctx_s, "--folded"]);
    let mut from_folded: BTreeMap<Vec<u64>, u64> = BTreeMap::new();
    for line in folded.lines() {
        let (path, count) = line.rsplit_once(' ').expect("`PATH COUNT`");
        let frames = path
            .split(';')
            .map(|k| {
                k.strip_prefix('k')
                    .expect("k<index>")
                    .parse()
                    .expect("index")
            })
            .collect();
        assert!(from_folded
            .insert(frames, count.parse().expect("count"))
            .is_none());
    }
    let from_json: BTreeMap<Vec<u64>, u64> = json["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .map(|s| {
            let frames = s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_u64().unwrap())
                .collect();
            (frames, s["count"].as_u64().unwrap())
        })
        .collect();
    assert!(!from_json.is_empty());
    assert_eq!(from_folded, from_json, "--folded and --json disagree");
    assert_eq!(
        from_json.values().sum::<u64>(),
        json["crossings"].as_u64().unwrap() - json["stacks_dropped"].as_u64().unwrap()
    );
    let list: Value =
        serde_json::from_str(&run(&["ranges", "--ctx", &ctx_s, "list", "--json"])).expect("JSON");
    let counts: Vec<u64> = list["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.len(), 2);
    assert!(
        counts.windows(2).all(|w| w[0] >= w[1]),
        "not hottest first: {counts:?}"
    );
}
