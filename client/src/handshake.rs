//! The context/VM switch handshake (seed 000 ¶71–76), the one sequence
//! used by the daemon (through the device node) and by the driver's
//! in-process host (against the model), over a [`RegisterBatch`] executor.
//!
//! Two register batches: [`PauseAndFlush`] carries steps 1–5 (pause the
//! context, pause transfers, trigger with ULC flush, flush request, read
//! the acks, plus who comes in and when the device asked); once every
//! assigned CCU acked (polled at most [`ACK_POLLS`] times), [`Rebind`]
//! carries steps 6–7 (bind, commit + re-point, unpause) and, optionally,
//! the interrupt acknowledgement. Out-of-order writes are refused by the
//! device as a whole and change nothing, so a partition that is not
//! waiting for the host is left alone.

use gpupm_uapi::ioctl::RegOp;
use gpupm_uapi::regs::{self as r, hs_state, part_ctrl, part_status, rc_cmd, trig_cmd};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ops::{read, read32, read64, reg32, write32};

/// Polls of `PART_CCU_ACKED` after the first batch before the host gives
/// up (the device's fallback then completes the switch).
pub const ACK_POLLS: u32 = 1000;

/// Something that runs register batches atomically: the device node
/// ([`crate::DevNode`]) or an in-process device model.
pub trait RegisterBatch {
    /// Why a batch failed.
    type Error;

    /// Runs `ops` as one atomic batch (read ops get their values); on
    /// failure no op took effect.
    fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), Self::Error>;

    /// Reads one register at its natural width. The default is a batch of
    /// one read; an executor with a cheaper single access overrides it.
    fn read(&mut self, offset: u64) -> Result<u64, Self::Error> {
        let mut op = [read(offset)];
        self.batch(&mut op)?;
        Ok(op[0].value)
    }
}

/// What a handshake attempt did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The switch completed, host-driven; the host paused the partition
    /// this many device cycles after the device requested the switch (the
    /// margin left to the device's fallback timeout).
    Done {
        /// `CYCLE − PART_SWITCH_REQ_CYCLE` when the pause took effect.
        response_cycles: u64,
    },
    /// The partition was not waiting for the host (nothing changed).
    NotRequested,
    /// The CCUs did not all ack in time, or the device's fallback finished
    /// the switch meanwhile; the device completes it.
    Abandoned,
}

/// Steps 1–5 as one batch, in execution order.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PauseAndFlush {
    /// Reads `PART_NEXT_VM`: the incoming VM.
    pub next_vm: RegOp,
    /// Reads `PART_NEXT_CTX`: the incoming context.
    pub next_ctx: RegOp,
    /// Step 1: pause the running context.
    pub pause_ctx: RegOp,
    /// Step 2: pause periodic triggers and ULC → CCU transfers.
    pub pause_transfers: RegOp,
    /// Steps 3–4 target this partition's CCUs only.
    pub trigger_target: RegOp,
    /// Steps 3–4: flush ULC partials, trigger (swap banks), flush request.
    pub trigger_and_flush: RegOp,
    /// Step 5: reads `PART_CCU_ACKED`.
    pub acked: RegOp,
    /// Reads `PART_CCU_ASSIGNED`: the CCUs that must ack.
    pub assigned: RegOp,
    /// Reads `PART_SWITCH_REQ_CYCLE`: when the device asked.
    pub requested_at: RegOp,
    /// Reads `CYCLE`: when the pause took effect.
    pub now: RegOp,
}

impl PauseAndFlush {
    /// The batch for partition slot `p`.
    pub const fn new(p: u32) -> Self {
        PauseAndFlush {
            next_vm: read32(r::part(p, r::PART_NEXT_VM)),
            next_ctx: read32(r::part(p, r::PART_NEXT_CTX)),
            pause_ctx: write32(r::part(p, r::PART_CTRL), part_ctrl::CTX_PAUSE),
            pause_transfers: write32(r::part(p, r::PART_CTRL), part_ctrl::ALL),
            trigger_target: write32(r::TRIG_TARGET, 1 << p),
            trigger_and_flush: write32(
                r::TRIG_CMD,
                trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER | trig_cmd::FLUSH_REQ,
            ),
            acked: read64(r::part(p, r::PART_CCU_ACKED)),
            assigned: read64(r::part(p, r::PART_CCU_ASSIGNED)),
            requested_at: read64(r::part(p, r::PART_SWITCH_REQ_CYCLE)),
            now: read64(r::CYCLE),
        }
    }

    /// The ops, in order, for [`RegisterBatch::batch`].
    pub fn ops(&mut self) -> &mut [RegOp] {
        let ops: &mut [RegOp; 10] = zerocopy::transmute_mut!(self);
        ops
    }
}

/// Steps 6–7 as one batch, with an optional interrupt acknowledgement.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Rebind {
    /// Binds the incoming VM's block.
    pub bind_vm: RegOp,
    /// Binds the incoming context's block.
    pub bind_ctx: RegOp,
    /// Step 6: commit to the outgoing blocks and re-point.
    pub commit_repoint: RegOp,
    /// Step 7: unpause.
    pub unpause: RegOp,
    /// Acknowledges interrupt sources (only sent when non-zero).
    pub intr_ack: RegOp,
}

impl Rebind {
    /// The batch for partition slot `p` switching to (`vm`, `ctx`).
    pub const fn new(p: u32, vm: u32, ctx: u32, ack: u32) -> Self {
        Rebind {
            bind_vm: write32(r::part(p, r::PART_RC_BIND_VM), vm),
            bind_ctx: write32(r::part(p, r::PART_RC_BIND_CTX), ctx),
            commit_repoint: write32(r::part(p, r::PART_RC_CMD), rc_cmd::COMMIT | rc_cmd::REPOINT),
            unpause: write32(r::part(p, r::PART_CTRL), 0),
            intr_ack: write32(r::INTR_ACK, ack),
        }
    }

    /// The ops for [`RegisterBatch::batch`]: without the acknowledgement
    /// when there is nothing to acknowledge.
    pub fn ops(&mut self) -> &mut [RegOp] {
        let with_ack = self.intr_ack.value != 0;
        let ops: &mut [RegOp; 5] = zerocopy::transmute_mut!(self);
        if with_ack {
            ops
        } else {
            &mut ops[..4]
        }
    }
}

/// Runs the handshake on partition slot `p` if it is in `REQUESTED`.
///
/// A non-zero `*ack` (interrupt sources to acknowledge) rides in the
/// second batch, saving the caller a separate write; it is zeroed once
/// written.
pub fn run<B: RegisterBatch>(dev: &mut B, p: u32, ack: &mut u32) -> Result<Outcome, B::Error> {
    let mut first = PauseAndFlush::new(p);
    if let Err(e) = dev.batch(first.ops()) {
        // Refused as a whole: most likely nothing was requested (already
        // handled, or completed by the fallback). Anything else is an error.
        return match state(dev, p)? {
            hs_state::REQUESTED => Err(e),
            _ => Ok(Outcome::NotRequested),
        };
    }
    let assigned = first.assigned.value;
    let mut acked = first.acked.value;
    let mut polls = 0;
    while acked & assigned != assigned {
        polls += 1;
        if polls > ACK_POLLS {
            return Ok(Outcome::Abandoned);
        }
        acked = dev.read(r::part(p, r::PART_CCU_ACKED))?;
    }
    let (vm, ctx) = (value32(first.next_vm), value32(first.next_ctx));
    let mut second = Rebind::new(p, vm, ctx, *ack);
    if let Err(e) = dev.batch(second.ops()) {
        // Refused: the device's fallback finished the switch meanwhile.
        return match state(dev, p)? {
            hs_state::ACKED => Err(e),
            _ => Ok(Outcome::Abandoned),
        };
    }
    *ack = 0;
    Ok(Outcome::Done {
        response_cycles: first.now.value.saturating_sub(first.requested_at.value),
    })
}

/// The handshake state of partition slot `p` (`hs_state`).
pub fn state<B: RegisterBatch>(dev: &mut B, p: u32) -> Result<u32, B::Error> {
    Ok(reg32(dev.read(r::part(p, r::PART_STATUS))?) & part_status::STATE_MASK)
}

fn value32(op: RegOp) -> u32 {
    reg32(op.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that answers every batch, acks `acks_after` polls late (or
    /// never), and records what it was sent.
    struct Scripted {
        acks_after: Option<u32>,
        polls: u32,
        batches: Vec<Vec<RegOp>>,
    }

    impl RegisterBatch for Scripted {
        type Error = ();

        fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), ()> {
            for op in ops.iter_mut() {
                op.value = match op.offset {
                    o if o == r::part(3, r::PART_NEXT_VM) => 7,
                    o if o == r::part(3, r::PART_NEXT_CTX) => 70,
                    o if o == r::part(3, r::PART_CCU_ASSIGNED) => 0b11,
                    o if o == r::part(3, r::PART_CCU_ACKED) => 0b01,
                    o if o == r::part(3, r::PART_SWITCH_REQ_CYCLE) => 1000,
                    o if o == r::CYCLE => 1250,
                    _ => op.value,
                };
            }
            self.batches.push(ops.to_vec());
            Ok(())
        }

        fn read(&mut self, offset: u64) -> Result<u64, ()> {
            assert_eq!(
                offset,
                r::part(3, r::PART_CCU_ACKED),
                "only the acks are polled"
            );
            self.polls += 1;
            Ok(if self.acks_after.is_some_and(|n| self.polls >= n) {
                0b11
            } else {
                0b01
            })
        }
    }

    #[test]
    fn late_acks_are_polled_then_the_rebind_carries_the_ack() {
        let mut dev = Scripted {
            acks_after: Some(5),
            polls: 0,
            batches: Vec::new(),
        };
        let mut ack = 0x40;
        let outcome = run(&mut dev, 3, &mut ack).unwrap();
        assert_eq!(
            outcome,
            Outcome::Done {
                response_cycles: 250
            }
        );
        assert_eq!((dev.polls, ack), (5, 0));
        assert_eq!(dev.batches.len(), 2);
        assert_eq!(dev.batches[0].len(), 10);
        let second = &dev.batches[1];
        let writes: Vec<(u64, u64)> = second.iter().map(|o| (o.offset, o.value)).collect();
        assert_eq!(
            writes,
            [
                (r::part(3, r::PART_RC_BIND_VM), 7),
                (r::part(3, r::PART_RC_BIND_CTX), 70),
                (
                    r::part(3, r::PART_RC_CMD),
                    u64::from(rc_cmd::COMMIT | rc_cmd::REPOINT)
                ),
                (r::part(3, r::PART_CTRL), 0),
                (r::INTR_ACK, 0x40),
            ]
        );
    }

    #[test]
    fn acks_that_never_come_end_the_attempt_after_a_bounded_number_of_polls() {
        let mut dev = Scripted {
            acks_after: None,
            polls: 0,
            batches: Vec::new(),
        };
        let mut ack = 0x40;
        assert_eq!(run(&mut dev, 3, &mut ack).unwrap(), Outcome::Abandoned);
        assert_eq!(dev.polls, ACK_POLLS);
        assert_eq!(dev.batches.len(), 1, "no rebind without every ack");
        assert_eq!(ack, 0x40, "the acknowledgement is left to the caller");
    }

    #[test]
    fn without_an_acknowledgement_the_rebind_has_four_ops() {
        let mut second = Rebind::new(1, 2, 3, 0);
        assert_eq!(second.ops().len(), 4);
        let mut first = PauseAndFlush::new(1);
        assert_eq!(
            first.ops()[2],
            write32(r::part(1, r::PART_CTRL), part_ctrl::CTX_PAUSE)
        );
    }
}
