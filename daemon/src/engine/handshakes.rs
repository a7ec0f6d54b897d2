//! Handshakes of several partitions at once: the switches one interrupt
//! read brings (the reference load's partitions switch in step, eight
//! requests and then eight flush acks at a time) go to the device as one
//! register batch per handshake step rather than one per partition.
//!
//! A batch is atomic and checked before it runs: if any partition's part
//! is refused (its switch was finished by the fallback, or a record was
//! seen twice), nothing in it took effect, and each partition of the
//! group is then run on its own by [`gpupm_client::handshake`], which
//! tells those cases apart. The interrupt acknowledgement owed rides in
//! the first batch that goes out.

use std::collections::BTreeMap;
use std::time::Instant;

use gpupm_client::handshake::{self, Outcome, PauseAndFlush, Pending, Rebind};
use gpupm_client::ops::write32;
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::ioctl::{RegOp, MAX_BATCH_OPS};
use gpupm_uapi::regs as r;

use crate::view::CtxId;

/// Ops of a [`PauseAndFlush`].
const FIRST_OPS: usize = 10;
/// Ops of a [`Rebind`] without its acknowledgement.
const SECOND_OPS: usize = 4;

/// Switches awaiting their flush acks, by partition slot: the rest of the
/// handshake and when its request was read.
pub type Awaiting = BTreeMap<u32, (Pending, Instant)>;

/// What became of one partition's handshake step: the slot, the incoming
/// context when known, when the request was read, the outcome.
pub type Step = (u32, Option<CtxId>, Instant, Result<Outcome, DevError>);

/// Steps 1–4 for every partition of `parts` (requests read at `t0`): one
/// batch per [`MAX_BATCH_OPS`]' worth, `*ack` riding in the first.
pub fn pause_and_flush(dev: &DevNode, parts: &[u32], t0: Instant, ack: &mut u32) -> Vec<Step> {
    let per_batch = (MAX_BATCH_OPS - 1) / FIRST_OPS;
    let mut out = Vec::with_capacity(parts.len());
    for group in parts.chunks(per_batch) {
        let mut firsts: Vec<PauseAndFlush> = group.iter().map(|&p| PauseAndFlush::new(p)).collect();
        let mut ops: Vec<RegOp> = firsts.iter_mut().flat_map(|f| f.ops().to_vec()).collect();
        if *ack != 0 {
            ops.push(write32(r::INTR_ACK, *ack));
        }
        if dev.batch(&mut ops).is_err() {
            // Refused as a whole: each partition on its own (the single
            // path tells a finished switch from an error).
            out.extend(
                group
                    .iter()
                    .map(|&p| (p, None, t0, handshake::run_polling(&mut &*dev, p, ack, 0))),
            );
            continue;
        }
        *ack = 0;
        for ((&p, first), done) in group.iter().zip(&mut firsts).zip(ops.chunks(FIRST_OPS)) {
            first.ops().copy_from_slice(done);
            let pending = Pending {
                partition: p,
                vm: reg32(first.next_vm),
                ctx: reg32(first.next_ctx),
                response_cycles: first.now.value.saturating_sub(first.requested_at.value),
            };
            // The batch is atomic: no device time passed in it, so the
            // acks are still travelling; they arrive as FLUSH_ACKED.
            out.push((p, Some(pending.ctx), t0, Ok(Outcome::AwaitingAcks(pending))));
        }
    }
    out
}

/// Steps 6–7 for every switch of `parts` awaiting its acks (their
/// `FLUSH_ACKED` records arrived): one batch per [`MAX_BATCH_OPS`]'
/// worth, `*ack` riding in the first. Takes them out of `awaiting`.
pub fn rebind(dev: &DevNode, parts: &[u32], awaiting: &mut Awaiting, ack: &mut u32) -> Vec<Step> {
    let ready: Vec<(Pending, Instant)> = parts.iter().filter_map(|p| awaiting.remove(p)).collect();
    let per_batch = (MAX_BATCH_OPS - 1) / SECOND_OPS;
    let mut out = Vec::with_capacity(ready.len());
    for group in ready.chunks(per_batch) {
        let mut ops: Vec<RegOp> = group
            .iter()
            .flat_map(|(pd, _)| Rebind::new(pd.partition, pd.vm, pd.ctx, 0).ops().to_vec())
            .collect();
        if *ack != 0 {
            ops.push(write32(r::INTR_ACK, *ack));
        }
        if dev.batch(&mut ops).is_err() {
            out.extend(group.iter().map(|(pd, t0)| {
                (
                    pd.partition,
                    Some(pd.ctx),
                    *t0,
                    handshake::resume(&mut &*dev, pd, ack),
                )
            }));
            continue;
        }
        *ack = 0;
        out.extend(group.iter().map(|(pd, t0)| {
            let done = Outcome::Done {
                response_cycles: pd.response_cycles,
            };
            (pd.partition, Some(pd.ctx), *t0, Ok(done))
        }));
    }
    out
}

fn reg32(op: RegOp) -> u32 {
    gpupm_client::ops::reg32(op.value)
}
