//! The context-switch handshake driven purely through `/dev/gpupm0`, as
//! the daemon drives it (`gpupm-client`'s sequence over `DevNode`, whose
//! register access on a character device is by ioctl), with interrupt
//! records taken by `poll()` + `read()` on the device; then exact
//! conservation: every context, VM and system block read through
//! `GPUPM_IOC_WINDOW_READ` equals what `GPUPM_IOC_LEDGER` says it must
//! hold. The step clock advances by less than the switch timeout between
//! services (plus the flush-ack latency inside a handshake), so no switch
//! may fall back from the start of the check on.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use gpupm_client::handshake::{self, Outcome};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::events::{self, MAX_EVENTS, MULTIBIT_SCALE};
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::{ledger_scope, LedgerQuery};
use gpupm_uapi::layout::{self, block_kind, envelope_flags, Block};
use gpupm_uapi::regs::{self as r, ctx_state, hs_state, part_status, trig_cmd};
use zerocopy::FromBytes;

/// Context ids scanned for the conservation check.
const MAX_CTX: u32 = 128;

/// A device-node error with its sources, on one line.
pub fn dev_err(e: DevError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(c) = src {
        s += &format!(": {c}");
        src = c.source();
    }
    s
}

fn partitions(dev: &DevNode) -> Result<Vec<u32>, String> {
    let slots: Vec<u32> = (1..r::MAX_PARTITION_SLOTS).collect();
    let offsets: Vec<u64> = slots.iter().map(|&p| r::part(p, r::PART_STATUS)).collect();
    let status = dev.read_many(&offsets).map_err(dev_err)?;
    Ok(slots
        .into_iter()
        .zip(status)
        .filter(|(_, s)| s & u64::from(part_status::CONFIGURED) != 0)
        .map(|(p, _)| p)
        .collect())
}

fn sum_part(dev: &DevNode, parts: &[u32], reg: u64) -> Result<u64, String> {
    let offsets: Vec<u64> = parts.iter().map(|&p| r::part(p, reg)).collect();
    Ok(dev.read_many(&offsets).map_err(dev_err)?.iter().sum())
}

/// Runs the handshake on `p`; it must complete host-driven. The flush
/// acks arrive only with device time, which this check owns (a step
/// clock): as `gpupmd` does, it does not poll for them but resumes the
/// switch once they are in, after advancing the clock by the largest ack
/// latency.
fn handshake(dev: &DevNode, p: u32) -> Result<bool, String> {
    let mut outcome = handshake::run_polling(&mut &*dev, p, &mut 0, 0).map_err(dev_err)?;
    if let Outcome::AwaitingAcks(pending) = outcome {
        dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))
            .map_err(dev_err)?;
        outcome = handshake::resume(&mut &*dev, &pending, &mut 0).map_err(dev_err)?;
    }
    match outcome {
        Outcome::Done { .. } => Ok(true),
        Outcome::NotRequested => Ok(false),
        Outcome::AwaitingAcks(_) => Err(format!(
            "partition {p}: flush acks missing {} cycles after the request",
            r::FLUSH_ACK_MAX_CYCLES
        )),
        Outcome::Abandoned => Err(format!("the handshake on partition {p} was abandoned")),
    }
}

#[derive(Debug, Default)]
struct Tally {
    handshakes: u64,
    fallbacks: u64,
    created: BTreeSet<u32>,
    destroyed: BTreeSet<u32>,
}

/// Services every record available now, like the daemon: handshakes
/// requested switches, drains stream rings, acknowledges what it handled.
fn service(dev: &DevNode, irq: &mut gpupm_client::IntrReader, t: &mut Tally) -> Result<(), String> {
    loop {
        let mut recs: Vec<InterruptRecord> = Vec::new();
        let got = irq.wait(Duration::ZERO, &mut recs).map_err(dev_err)?;
        if got.missed != 0 {
            return Err(format!("{} interrupt records were lost", got.missed));
        }
        if recs.is_empty() {
            return Ok(());
        }
        let mut handled = 0;
        for rec in &recs {
            handled |= rec.source;
            match rec.source {
                source::SWITCH_REQUESTED if handshake(dev, rec.partition)? => t.handshakes += 1,
                source::SWITCH_FALLBACK => t.fallbacks += 1,
                source::CTX_CREATED => {
                    t.created.insert(rec.arg);
                }
                source::CTX_DESTROYED => {
                    t.destroyed.insert(rec.arg);
                }
                source::STREAM_WATERMARK | source::STREAM_OVERFLOW => {
                    let head = dev
                        .read32(r::part(rec.partition, r::PART_STREAM_HEAD))
                        .map_err(dev_err)?;
                    dev.write32(r::part(rec.partition, r::PART_STREAM_TAIL), head)
                        .map_err(dev_err)?;
                }
                _ => {}
            }
        }
        dev.write32(r::INTR_ACK, handled).map_err(dev_err)?;
    }
}

/// What a block must hold after a full flush: `(generated − remainder) /
/// scale − masked`, scale 32 for multi-bit events.
fn expected(q: &LedgerQuery) -> [u64; MAX_EVENTS] {
    std::array::from_fn(|e| {
        let id = u16::try_from(e).unwrap_or(u16::MAX);
        let scale = match events::by_id(id) {
            Some(info) if info.multibit => MULTIBIT_SCALE,
            _ => 1,
        };
        (q.generated[e] - q.remainder[e]) / scale - q.masked[e]
    })
}

fn block(dev: &DevNode, offset: u64) -> Result<Block, String> {
    let slot = dev.block_slot(offset).map_err(dev_err)?;
    if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
        return Err(format!("the block at {offset:#x} is encrypted"));
    }
    Block::read_from_bytes(&slot.payload).map_err(|_| "block payload".to_string())
}

fn conserved(dev: &DevNode, scope: u32, id: u32, offset: u64, kind: u16) -> Result<u64, String> {
    let want = expected(&dev.ledger(scope, id).map_err(dev_err)?);
    let b = block(dev, offset)?;
    if (b.magic, b.kind, b.id) != (layout::BLOCK_MAGIC, kind, id) {
        return Err(format!(
            "block at {offset:#x}: magic {:#x} kind {} id {}",
            b.magic, b.kind, b.id
        ));
    }
    if b.counters != want {
        return Err(format!(
            "scope {scope} id {id}: block {:?} != ledger {want:?}",
            b.counters
        ));
    }
    Ok(b.counters.iter().sum())
}

/// Every context, VM and system block against the ledger; returns the
/// number of context blocks and the system total.
fn assert_conserved(dev: &DevNode) -> Result<(usize, u64), String> {
    let ids: Vec<u32> = (1..=MAX_CTX).collect();
    let states = dev
        .read_many(
            &ids.iter()
                .map(|&c| r::ctx(c, r::CTX_STATE))
                .collect::<Vec<_>>(),
        )
        .map_err(dev_err)?;
    let mut contexts = 0;
    for (&c, state) in ids.iter().zip(states) {
        if state == u64::from(ctx_state::FREE) {
            continue;
        }
        let at = dev.read64(r::ctx(c, r::CTX_BLOCK)).map_err(dev_err)?;
        conserved(dev, ledger_scope::CONTEXT, c, at, block_kind::CONTEXT)?;
        contexts += 1;
    }
    for vm in 1..r::MAX_VMS {
        if dev.read32(r::vm(vm, r::VM_PARTITION)).map_err(dev_err)? == 0 {
            continue;
        }
        let at = dev.read64(r::vm(vm, r::VM_BLOCK)).map_err(dev_err)?;
        if conserved(dev, ledger_scope::VM, vm, at, block_kind::VM)? == 0 {
            return Err(format!("VM {vm} counted nothing"));
        }
    }
    let system = layout::block_slot_offset(layout::SYSTEM_BLOCK_SLOT);
    let total = conserved(dev, ledger_scope::SYSTEM, 0, system, block_kind::SYSTEM)?;
    Ok((contexts, total))
}

/// `cuse-handshake NODE N`: at least `N` host-driven switches, then
/// exact conservation. `NODE` may be of either kind (the lane passes
/// `/dev/gpupm0`; a FUSE node directory runs the same sequence).
pub fn run(node: &Path, want: u64) -> Result<(), String> {
    let dev = DevNode::open(node).map_err(dev_err)?;
    println!("@@gpupm metric cuse_handshake_node_kind={:?}", dev.kind());
    let mut irq = dev.interrupts().map_err(dev_err)?;
    let parts = partitions(&dev)?;
    let timeouts: Vec<u64> = parts
        .iter()
        .map(|&p| r::part(p, r::PART_SWITCH_TIMEOUT))
        .collect();
    let step = dev
        .read_many(&timeouts)
        .map_err(dev_err)?
        .into_iter()
        .min()
        .unwrap_or(0)
        / 5;
    if parts.is_empty() || step == 0 {
        return Err(format!("partitions {parts:?}, step {step}"));
    }
    // Earlier use of the device may have let switches fall back: count
    // from here.
    let switches_before = sum_part(&dev, &parts, r::PART_SWITCHES)?;
    let fallbacks_before = sum_part(&dev, &parts, r::PART_FALLBACKS)?;
    let mut t = Tally::default();
    for &p in &parts {
        let status = dev.read32(r::part(p, r::PART_STATUS)).map_err(dev_err)?;
        if status & part_status::STATE_MASK == hs_state::REQUESTED && handshake(&dev, p)? {
            t.handshakes += 1;
        }
    }
    while t.handshakes < want {
        let now = dev.advance(step).map_err(dev_err)?;
        if now > 2_000 * step * want.max(1) {
            return Err(format!("too few switches by cycle {now}: {t:?}"));
        }
        service(&dev, &mut irq, &mut t)?;
    }
    let (switches, fallbacks) = (
        sum_part(&dev, &parts, r::PART_SWITCHES)? - switches_before,
        sum_part(&dev, &parts, r::PART_FALLBACKS)? - fallbacks_before,
    );
    if fallbacks != 0 || t.fallbacks != 0 || switches != t.handshakes {
        return Err(format!("{switches} switches, {fallbacks} fallbacks, {t:?}"));
    }
    let mask = parts.iter().fold(1u32, |m, p| m | 1 << p);
    dev.write32(r::TRIG_TARGET, mask).map_err(dev_err)?;
    dev.write32(r::TRIG_CMD, trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER)
        .map_err(dev_err)?;
    let (contexts, system_total) = assert_conserved(&dev)?;
    if contexts == 0 || system_total == 0 || t.created.is_empty() {
        return Err(format!(
            "nothing to conserve: {contexts} contexts, total {system_total}"
        ));
    }
    println!("@@gpupm metric cuse_handshakes={}", t.handshakes);
    println!("@@gpupm metric cuse_contexts_created={}", t.created.len());
    println!(
        "@@gpupm metric cuse_contexts_destroyed={}",
        t.destroyed.len()
    );
    println!("@@gpupm metric cuse_conserved_context_blocks={contexts}");
    println!("@@gpupm metric cuse_conserved_system_total={system_total}");
    Ok(())
}
