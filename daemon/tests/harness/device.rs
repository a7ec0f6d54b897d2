//! Driving and checking the device through the node: the step clock, the
//! handshake state of every partition, flushes, the ledger, and the exact
//! comparison of blocks and persisted retired contexts with the ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use gpupm_client::ops::{reg32, write32};
use gpupm_client::{DevNode, IntrReader};
use gpupm_uapi::events::{self, MAX_EVENTS, MULTIBIT_SCALE};
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::{ledger_scope, LedgerQuery};
use gpupm_uapi::layout::{block_slot_offset, Block, SYSTEM_BLOCK_SLOT};
use gpupm_uapi::regs::{
    self as r, ctx_state, hs_state, part_status, trig_cmd, MAX_CONTEXTS, MAX_VMS,
};
use gpupmd::store::retired::{plain_block, RetiredStore};

/// The scenario of the end-to-end tests: 8 one-GPC partitions on a small
/// GPU, 10 VMs (partitions 1 and 2 time-slice two VMs each), 2 fixed
/// contexts per VM plus churn on three VMs, short timeslices so that every
/// partition asks for a switch in every step of [`STEP`] cycles.
pub fn churn_scenario() -> String {
    let mut s = String::from(
        r#"name = "daemon-e2e"
seed = 11
switch_timeout_cycles = 200000
device_profile = "links"
[clock]
mhz = 1000
[topology]
sms_per_gpc = [2, 2, 2, 2, 2, 2, 2, 2]
memory_slices = 8
l2_per_slice = 1
fb_per_slice = 1
ce_per_slice = 1
nvlinks = 2
pcie = true
[trigger]
period_cycles = 20000
[stream]
ring_records = 64
watermark = 32
[[profile]]
name = "busy"
[[profile.phase]]
duration_cycles = 30000
rates = { sm_cycles_active = 0.9, sm_inst_executed = 0.6, sm_threads_active = 20.5, l2_read_req = 0.3, l2_hit = 0.2, fb_bytes = 0.4, pcie_rx_bytes = 0.1, ce_bytes = 0.05 }
[[profile.phase]]
duration_cycles = 10000
rates = { sm_cycles_active = 0.2, sm_warps_active = 7.25, l2_write_req = 0.1 }
[[profile]]
name = "links"
[[profile.phase]]
duration_cycles = 50000
rates = { nvlink_rx_flits = 0.25, nvlink_tx_flits = 0.5 }
"#,
    );
    for p in 1..=8 {
        s += &format!(
            "[[partition]]\nslot = {p}\ngpcs = [{}]\nmemory_slices = [{}]\nctx_timeslice_cycles = 6000\nvm_timeslice_cycles = 15000\n",
            p - 1,
            p - 1
        );
    }
    let vm_part = [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 5),
        (6, 6),
        (7, 7),
        (8, 8),
        (9, 1),
        (10, 2),
    ];
    for (vm, p) in vm_part {
        s += &format!("[[vm]]\nid = {vm}\npartition = {p}\n");
        for _ in 0..2 {
            s += &format!("[[context]]\nvm = {vm}\nprofile = \"busy\"\n");
        }
    }
    for vm in [1, 3, 9] {
        s += &format!(
            "[[churn]]\nvm = {vm}\nprofiles = [\"busy\"]\nevery_cycles = 45000\nlifetime_cycles = 120000\n"
        );
    }
    s
}

/// Cycles per clock step: below the switch timeout, above the timeslices.
pub const STEP: u64 = 8192;
/// Partition slots of [`churn_scenario`].
pub const PARTS: std::ops::RangeInclusive<u32> = 1..=8;

/// Handshake state of every partition of [`PARTS`].
pub fn hs_states(dev: &DevNode) -> Vec<u32> {
    let offsets: Vec<u64> = PARTS.map(|p| r::part(p, r::PART_STATUS)).collect();
    dev.read_many(&offsets)
        .expect("read PART_STATUS")
        .iter()
        .map(|&s| reg32(s) & part_status::STATE_MASK)
        .collect()
}

/// Sum of a 64-bit partition register over [`PARTS`].
pub fn part_sum(dev: &DevNode, reg: u64) -> u64 {
    let offsets: Vec<u64> = PARTS.map(|p| r::part(p, reg)).collect();
    dev.read_many(&offsets)
        .expect("read partition registers")
        .iter()
        .sum()
}

/// Waits until every partition's handshake is idle, or `give_up()` says to
/// stop waiting (e.g. the daemon died); returns whether all went idle.
pub fn wait_idle(dev: &DevNode, mut give_up: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut spins = 0u32;
    loop {
        let states = hs_states(dev);
        if states.iter().all(|&s| s == hs_state::IDLE) {
            return true;
        }
        if give_up() {
            return false;
        }
        // A switch whose flush acks are still travelling: only the owner of
        // the step clock (this test) makes them arrive.
        if states.contains(&hs_state::TRIGGERED) {
            dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))
                .expect("advance");
        }
        assert!(
            Instant::now() < deadline,
            "partitions not idle within 30 s: {:?}",
            hs_states(dev)
        );
        spins += 1;
        if spins > 20 {
            std::thread::yield_now();
        }
    }
}

/// Tracks context instances from the test's own interrupt handle.
#[derive(Debug)]
pub struct Instances {
    reader: IntrReader,
    created: BTreeMap<u32, u64>,
    /// Every (ctx, created cycle) destroyed so far.
    pub destroyed: BTreeSet<(u32, u64)>,
    recs: Vec<InterruptRecord>,
}

impl Instances {
    /// Starts tracking; `dev` must be opened before any context exists
    /// that the test wants to see destroyed, or `seed` it from the table.
    pub fn new(dev: &DevNode) -> Instances {
        let reader = dev.interrupts().expect("interrupt handle");
        let mut created = BTreeMap::new();
        for (ctx, _, _, cycle) in contexts(dev) {
            created.insert(ctx, cycle);
        }
        Instances {
            reader,
            created,
            destroyed: BTreeSet::new(),
            recs: Vec::new(),
        }
    }

    /// Reads every pending record.
    pub fn update(&mut self) {
        self.recs.clear();
        let batch = self
            .reader
            .wait(Duration::ZERO, &mut self.recs)
            .expect("read interrupts");
        assert_eq!(batch.missed, 0, "the test missed interrupt records");
        for rec in &self.recs {
            match rec.source {
                source::CTX_CREATED => {
                    self.created.insert(rec.arg, rec.cycle);
                }
                source::CTX_DESTROYED => {
                    let cycle = *self
                        .created
                        .get(&rec.arg)
                        .expect("destroyed context was created");
                    self.destroyed.insert((rec.arg, cycle));
                }
                _ => {}
            }
        }
    }
}

/// Every context entry in use: (id, state, vm, created cycle).
pub fn contexts(dev: &DevNode) -> Vec<(u32, u32, u32, u64)> {
    let states = dev
        .read_many(
            &(1..MAX_CONTEXTS)
                .map(|c| r::ctx(c, r::CTX_STATE))
                .collect::<Vec<_>>(),
        )
        .expect("states");
    let used: Vec<u32> = (1..MAX_CONTEXTS)
        .zip(states)
        .filter(|&(_, s)| s != 0)
        .map(|(c, _)| c)
        .collect();
    let offs: Vec<u64> = used
        .iter()
        .flat_map(|&c| {
            [
                r::ctx(c, r::CTX_STATE),
                r::ctx(c, r::CTX_VM),
                r::ctx(c, r::CTX_CREATED_CYCLE),
            ]
        })
        .collect();
    let v = dev.read_many(&offs).expect("context entries");
    used.iter()
        .zip(v.chunks_exact(3))
        .map(|(&c, d)| (c, reg32(d[0]), reg32(d[1]), d[2]))
        .collect()
}

/// Waits until the daemon has retired every destroyed context.
pub fn wait_none_destroyed(dev: &DevNode) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while contexts(dev).iter().any(|c| c.1 == ctx_state::DESTROYED) {
        assert!(
            Instant::now() < deadline,
            "destroyed contexts not released within 30 s"
        );
        std::thread::yield_now();
    }
}

/// Commits everything into the blocks (ULC partials, CCU banks, RCs) on
/// every partition, in one atomic batch (the daemon writes TRIG_TARGET too).
pub fn flush(dev: &DevNode) {
    let mask = PARTS.fold(1u32, |m, p| m | 1 << p);
    dev.batch(&mut [
        write32(r::TRIG_TARGET, mask),
        write32(r::TRIG_CMD, trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER),
    ])
    .expect("flush");
}

/// What a block must hold after a flush: `(generated − remainder)/scale − masked`.
pub fn expected(l: &LedgerQuery) -> [u64; MAX_EVENTS] {
    let mut out = [0; MAX_EVENTS];
    for (e, o) in out.iter_mut().enumerate() {
        let scale = match events::by_id(u16::try_from(e).expect("event id")) {
            Some(info) if info.multibit => MULTIBIT_SCALE,
            _ => 1,
        };
        *o = (l.generated[e] - l.remainder[e]) / scale - l.masked[e];
    }
    out
}

fn block_at(dev: &DevNode, offset: u64) -> Block {
    plain_block(&dev.block_slot(offset).expect("block slot")).expect("plaintext block")
}

fn add(a: &mut [u64; MAX_EVENTS], b: &[u64; MAX_EVENTS]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// What [`check_exact`] compared.
#[derive(Debug, Default)]
pub struct Checked {
    /// VMs.
    pub vms: usize,
    /// Live contexts.
    pub live: usize,
    /// Retired (persisted) contexts.
    pub retired: usize,
}

/// With the device flushed and quiescent: the system block, every VM block
/// and every live context block equal the ledger; the persisted retired set
/// is exactly the set of destroyed instances, each persisted once; and per
/// VM, persisted retired totals plus live context totals equal the VM's
/// ledger (so no retired context is lost or counted twice).
pub fn check_exact(dev: &DevNode, state_dir: &Path, destroyed: &BTreeSet<(u32, u64)>) -> Checked {
    let mut checked = Checked::default();
    let sys = block_at(dev, block_slot_offset(SYSTEM_BLOCK_SLOT));
    assert_eq!(
        sys.counters,
        expected(&dev.ledger(ledger_scope::SYSTEM, 0).expect("ledger")),
        "system block"
    );

    let (retired, bad) = RetiredStore::open(state_dir)
        .expect("state dir")
        .load_all()
        .expect("load retired");
    assert!(bad.is_empty(), "unreadable retired files: {bad:?}");
    let persisted: BTreeSet<(u32, u64)> =
        retired.iter().map(|r| (r.ctx, r.created_cycle)).collect();
    assert_eq!(persisted.len(), retired.len());
    let missing: Vec<_> = destroyed.difference(&persisted).collect();
    let extra: Vec<_> = persisted.difference(destroyed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "retired set differs: missing {missing:?}, extra {extra:?}"
    );

    let mut per_vm: BTreeMap<u32, [u64; MAX_EVENTS]> = BTreeMap::new();
    for rec in &retired {
        let b = rec.block().expect("plaintext retired block");
        assert_eq!(
            (b.id, b.vm),
            (rec.ctx, rec.vm),
            "retired block names its context"
        );
        add(per_vm.entry(rec.vm).or_insert([0; MAX_EVENTS]), &b.counters);
        checked.retired += 1;
    }
    for (ctx, state, vm, _) in contexts(dev) {
        assert_eq!(state, ctx_state::ACTIVE, "context {ctx} still destroyed");
        let off = dev.read64(r::ctx(ctx, r::CTX_BLOCK)).expect("CTX_BLOCK");
        let b = block_at(dev, off);
        assert_eq!(
            b.counters,
            expected(&dev.ledger(ledger_scope::CONTEXT, ctx).expect("ledger")),
            "context {ctx}"
        );
        add(per_vm.entry(vm).or_insert([0; MAX_EVENTS]), &b.counters);
        checked.live += 1;
    }
    for vm in 1..MAX_VMS {
        if dev
            .read32(r::vm(vm, r::VM_PARTITION))
            .expect("VM_PARTITION")
            == 0
        {
            continue;
        }
        let want = expected(&dev.ledger(ledger_scope::VM, vm).expect("ledger"));
        let off = dev.read64(r::vm(vm, r::VM_BLOCK)).expect("VM_BLOCK");
        assert_eq!(block_at(dev, off).counters, want, "VM {vm} block");
        assert_eq!(
            per_vm.get(&vm).copied().unwrap_or([0; MAX_EVENTS]),
            want,
            "VM {vm}: retired + live contexts"
        );
        checked.vms += 1;
    }
    checked
}
