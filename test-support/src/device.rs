//! Driving and checking the device through a [`DevNode`]: the step clock,
//! the handshake state of every partition, flushes, context instances, and
//! what the ledger says a block must hold.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gpupm_client::ops::reg32;
use gpupm_client::{stepclock, DevNode, IntrReader};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::LedgerQuery;
use gpupm_uapi::layout::{envelope_flags, Block};
use gpupm_uapi::regs::{self as r, ctx_state, MAX_CONTEXTS};

use crate::process::Proc;
use zerocopy::FromBytes;

/// Configured partition slots.
pub fn partitions(dev: &DevNode) -> Vec<u32> {
    stepclock::configured_partitions(dev).expect("read PART_STATUS")
}

/// Handshake state of every configured partition.
pub fn hs_states(dev: &DevNode) -> Vec<u32> {
    stepclock::handshake_states(dev, &partitions(dev)).expect("read PART_STATUS")
}

/// Sum of a 64-bit partition register over the configured partitions.
pub fn part_sum(dev: &DevNode, reg: u64) -> u64 {
    let offsets: Vec<u64> = partitions(dev).iter().map(|&p| r::part(p, reg)).collect();
    dev.read_many(&offsets)
        .expect("read partition registers")
        .iter()
        .sum()
}

/// Waits until every partition's handshake is idle, or `give_up()` says to
/// stop waiting (e.g. the daemon died); returns whether all went idle. The
/// test owns the step clock, so it lets the flush acks of a triggered
/// switch arrive ([`stepclock::settle_step`]).
pub fn wait_idle(dev: &DevNode, mut give_up: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    let parts = partitions(dev);
    let mut spins = 0u32;
    while !stepclock::settle_step(dev, &parts).expect("settle the step clock") {
        if give_up() {
            return false;
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
    true
}

/// Advances the step clock by `cycles` and waits until `daemon` has
/// finished every switch that raised; fails with its log if it died.
pub fn step(dev: &DevNode, cycles: u64, daemon: &mut Proc) {
    dev.advance(cycles).expect("advance");
    assert!(
        wait_idle(dev, || !daemon.alive()),
        "gpupmd died:\n{}",
        daemon.log()
    );
}

/// Migrates VM `vm` to partition slot `slot` through the device node
/// (`RI_MIGRATE_VM`, `RI_MIGRATE`), stepping the clock while the VM is
/// current or incoming on its partition (the device refuses then).
pub fn migrate(dev: &DevNode, vm: u32, slot: u32, daemon: &mut Proc) {
    use gpupm_uapi::ri;
    dev.write32(ri::RI_MIGRATE_VM, vm).expect("stage the VM");
    for _ in 0..500 {
        if dev.write32(ri::RI_MIGRATE, slot).is_ok() {
            assert_eq!(dev.read32(r::vm(vm, r::VM_PARTITION)).unwrap(), slot);
            return;
        }
        step(dev, crate::scenario::STEP, daemon);
    }
    panic!("VM {vm} never stopped running");
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
///
/// Each check reads every context's state through the driver, the process
/// that must also serve the daemon's retirements; checking back to back
/// on a loaded host took the driver from the daemon (a loaded run missed
/// a 30 s deadline), so checks are 2 ms apart.
pub fn wait_none_destroyed(dev: &DevNode) {
    crate::wait_until(
        "destroyed contexts released",
        Duration::from_secs(60),
        Duration::from_millis(2),
        || {
            let left: Vec<u32> = contexts(dev)
                .iter()
                .filter(|c| c.1 == ctx_state::DESTROYED)
                .map(|c| c.0)
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still destroyed: {left:?}"))
            }
        },
    );
}

/// Commits everything into the blocks (ULC partials, CCU banks, RCs) on
/// every partition, in one atomic batch (the daemon writes TRIG_TARGET too).
pub fn flush(dev: &DevNode) {
    stepclock::flush_all(dev, &partitions(dev)).expect("flush");
}

/// What a block must hold after a flush: `(generated − remainder)/scale − masked`.
pub fn expected(l: &LedgerQuery) -> [u64; MAX_EVENTS] {
    crate::rawnode::expected(l)
}

/// The plaintext block at window offset `offset`.
pub fn block_at(dev: &DevNode, offset: u64) -> Block {
    let slot = dev.block_slot(offset).expect("block slot");
    assert_eq!(
        slot.envelope.flags & envelope_flags::ENCRYPTED,
        0,
        "the block at {offset:#x} is sealed"
    );
    Block::read_from_bytes(&slot.payload).expect("a block")
}

/// (head, tail, produced, lost) of sample buffer `kind` of partition `p`.
pub fn sample_buffer(dev: &DevNode, p: u32, kind: u32) -> [u64; 4] {
    use gpupm_uapi::sampling::{self as s, samp};
    let reg = |x| samp(p, s::buf(kind, x));
    let v = dev
        .read_many(&[
            reg(s::BUF_HEAD),
            reg(s::BUF_TAIL),
            reg(s::BUF_PRODUCED),
            reg(s::BUF_LOST),
        ])
        .expect("buffer registers");
    [v[0], v[1], v[2], v[3]]
}

/// What the block ledger of `ctx` (`--debug-ledger`, not sealed) holds:
/// per (kernel, block), (instructions, cycles) so far.
pub fn block_truth(dev: &DevNode, ctx: u32) -> BTreeMap<(u32, u32), (u64, u64)> {
    let (pages, _) = dev
        .ledger_blocks(ctx)
        .expect("ledger blocks (--debug-ledger)");
    pages
        .iter()
        .flat_map(|p| p.rows[..p.count as usize].iter())
        .map(|row| {
            let key = (u32::from(row.kernel), u32::from(row.block));
            (key, (row.instructions, row.cycles))
        })
        .collect()
}

/// An active context (of `vm`, or of any VM) running the built-in
/// scenario's program `name`: (context, program number).
pub fn context_running(dev: &DevNode, vm: Option<u32>, name: &str) -> (u32, u32) {
    let table = gpupm_driver::scenario::builtin().program_table();
    (1..MAX_CONTEXTS)
        .find_map(|c| {
            let reg = |x| dev.read32(r::ctx(c, x)).ok();
            let program = reg(r::CTX_PROGRAM)?;
            let runs = program > 0 && table[program as usize - 1].name == name;
            let on_vm = vm.is_none_or(|vm| reg(r::CTX_VM) == Some(vm));
            (reg(r::CTX_STATE)? == ctx_state::ACTIVE && on_vm && runs).then_some((c, program))
        })
        .unwrap_or_else(|| panic!("no context of VM {vm:?} runs {name}"))
}

/// The reconstruction's shape of the built-in scenario's program number
/// `program`.
pub fn builtin_shape(program: u32) -> gpupm_client::sampling::reconstruct::ProgramShape {
    gpupm_driver::scenario::builtin().program_table()[program as usize - 1].shape()
}

/// What runtime-instrumentation block `block` did since its session began
/// (`GPUPM_IOC_LEDGER_RI`; the driver needs `--debug-ledger`).
pub fn ledger_ri(card: &std::fs::File, block: u32) -> gpupm_uapi::ioctl::RiLedgerQuery {
    use zerocopy::IntoBytes;
    let mut q = gpupm_uapi::ioctl::RiLedgerQuery {
        version: gpupm_uapi::ioctl::IOCTL_STRUCT_VERSION,
        block,
        ..Default::default()
    };
    crate::rawnode::ioctl(
        card,
        gpupm_uapi::ioctl::GPUPM_IOC_LEDGER_RI,
        q.as_mut_bytes(),
    )
    .expect("RI ledger");
    q
}
