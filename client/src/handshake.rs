//! The context/VM switch handshake, the one sequence used by the daemon
//! (through the device node) and by the driver's in-process host (against
//! the model), over a [`RegisterBatch`] executor.
//!
//! Two register batches: [`PauseAndFlush`] carries steps 1–5 (pause the
//! context, pause transfers, trigger with ULC flush, flush request, read
//! the acks, plus who comes in and when the device asked); once every
//! assigned CCU acked, [`Rebind`] carries steps 6–7 (bind, commit +
//! re-point, unpause) and, optionally, the interrupt acknowledgement.
//! The acks reach `PART_CCU_ACKED` some device cycles after the flush
//! request: a host polls for them (at most [`ACK_POLLS`] times, letting
//! time pass in between) or, when it cannot make device time pass (a step
//! clock someone else advances), leaves the switch
//! [`Outcome::AwaitingAcks`] and [`resume`]s it on the device's
//! `FLUSH_ACKED` interrupt. A host that starts while a previous run of
//! it left a switch between the two batches [`adopt`]s it and resumes it
//! the same way. Out-of-order writes are refused by the device as a
//! whole and change nothing, so a partition that is not waiting for the
//! host is left alone.

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

    /// Lets device time pass while the host waits for flush acks, which
    /// reach `PART_CCU_ACKED` only some cycles after the flush request
    /// (`FLUSH_ACK_MAX_CYCLES` at most). A real-time device's clock runs
    /// by itself (the default does nothing); a step clock moves only when
    /// host software advances it, so its executor must.
    fn let_time_pass(&mut self) -> Result<(), Self::Error> {
        Ok(())
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
    /// Steps 1–4 ran; the CCUs' flush acks had not all arrived within the
    /// polls allowed. Finish with [`resume`] once they have (the device
    /// raises `FLUSH_ACKED`), before the device's fallback timeout.
    AwaitingAcks(Pending),
    /// The device's fallback finished the switch meanwhile.
    Abandoned,
}

/// A switch whose first batch ran and whose flush acks are still
/// travelling: what [`resume`] needs to finish it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Partition slot.
    pub partition: u32,
    /// The incoming VM.
    pub vm: u32,
    /// The incoming context.
    pub ctx: u32,
    /// `CYCLE − PART_SWITCH_REQ_CYCLE` when the pause took effect.
    pub response_cycles: u64,
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

/// Runs the handshake on partition slot `p` if it is in `REQUESTED`,
/// polling for the flush acks at most [`ACK_POLLS`] times (letting device
/// time pass before each poll, [`RegisterBatch::let_time_pass`]).
///
/// A non-zero `*ack` (interrupt sources to acknowledge) rides in the
/// second batch, saving the caller a separate write; it is zeroed once
/// written.
pub fn run<B: RegisterBatch>(dev: &mut B, p: u32, ack: &mut u32) -> Result<Outcome, B::Error> {
    run_polling(dev, p, ack, ACK_POLLS)
}

/// [`run`] with at most `polls` polls for the flush acks; with too few
/// for them to arrive, the answer is [`Outcome::AwaitingAcks`] (a host
/// whose device runs a step clock that only others advance polls none and
/// resumes on `FLUSH_ACKED`).
pub fn run_polling<B: RegisterBatch>(
    dev: &mut B,
    p: u32,
    ack: &mut u32,
    polls: u32,
) -> Result<Outcome, B::Error> {
    let mut first = PauseAndFlush::new(p);
    if let Err(e) = dev.batch(first.ops()) {
        // Refused as a whole: most likely nothing was requested (already
        // handled, or completed by the fallback). Anything else is an error.
        return match state(dev, p)? {
            hs_state::REQUESTED => Err(e),
            _ => Ok(Outcome::NotRequested),
        };
    }
    let pending = Pending {
        partition: p,
        vm: value32(first.next_vm),
        ctx: value32(first.next_ctx),
        response_cycles: first.now.value.saturating_sub(first.requested_at.value),
    };
    if !wait_for_acks(dev, p, first.acked.value, first.assigned.value, polls)? {
        return Ok(Outcome::AwaitingAcks(pending));
    }
    rebind(dev, &pending, ack)
}

/// Finishes a switch left [`Outcome::AwaitingAcks`]: steps 6–7 once every
/// flush ack arrived; still awaiting while they travel; abandoned when the
/// device's fallback finished it meanwhile.
pub fn resume<B: RegisterBatch>(
    dev: &mut B,
    pending: &Pending,
    ack: &mut u32,
) -> Result<Outcome, B::Error> {
    match state(dev, pending.partition)? {
        hs_state::ACKED => rebind(dev, pending, ack),
        hs_state::TRIGGERED => Ok(Outcome::AwaitingAcks(*pending)),
        _ => Ok(Outcome::Abandoned),
    }
}

/// Takes over a switch on partition slot `p` that another host — a
/// previous run of this one, killed between its two batches — left half
/// done, holding its [`Pending`]: its first batch ran and the flush acks
/// are on their way (`TRIGGERED`) or in (`ACKED`). Reads what [`resume`]
/// needs from the device, in one batch with the state so that the two
/// agree: the incoming VM and context latched at the request. `None` in
/// any other state (nothing to take over).
pub fn adopt<B: RegisterBatch>(dev: &mut B, p: u32) -> Result<Option<Pending>, B::Error> {
    let mut ops = [
        read32(r::part(p, r::PART_STATUS)),
        read32(r::part(p, r::PART_NEXT_VM)),
        read32(r::part(p, r::PART_NEXT_CTX)),
    ];
    dev.batch(&mut ops)?;
    let state = value32(ops[0]) & part_status::STATE_MASK;
    if state != hs_state::TRIGGERED && state != hs_state::ACKED {
        return Ok(None);
    }
    Ok(Some(Pending {
        partition: p,
        vm: value32(ops[1]),
        ctx: value32(ops[2]),
        // The pause was the other host's, at a time nobody kept: 0 claims
        // no response time (and leaves a maximum of measured ones alone).
        response_cycles: 0,
    }))
}

/// Steps 6–7 (and the interrupt acknowledgement).
fn rebind<B: RegisterBatch>(
    dev: &mut B,
    pending: &Pending,
    ack: &mut u32,
) -> Result<Outcome, B::Error> {
    let p = pending.partition;
    let mut second = Rebind::new(p, pending.vm, pending.ctx, *ack);
    if let Err(e) = dev.batch(second.ops()) {
        // Refused: the device's fallback finished the switch meanwhile.
        return match state(dev, p)? {
            hs_state::ACKED => Err(e),
            _ => Ok(Outcome::Abandoned),
        };
    }
    *ack = 0;
    Ok(Outcome::Done {
        response_cycles: pending.response_cycles,
    })
}

/// Step 5: polls `PART_CCU_ACKED` of partition slot `p` (last read
/// `acked`) until every CCU in `assigned` acked, letting device time pass
/// before each poll, at most `polls` times. Returns whether all acked.
pub fn wait_for_acks<B: RegisterBatch>(
    dev: &mut B,
    p: u32,
    mut acked: u64,
    assigned: u64,
    polls: u32,
) -> Result<bool, B::Error> {
    for _ in 0..polls {
        if acked & assigned == assigned {
            return Ok(true);
        }
        dev.let_time_pass()?;
        acked = dev.read(r::part(p, r::PART_CCU_ACKED))?;
    }
    Ok(acked & assigned == assigned)
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
        time_passed: u32,
        state: u32,
        batches: Vec<Vec<RegOp>>,
    }

    impl Scripted {
        fn new(acks_after: Option<u32>) -> Self {
            Scripted {
                acks_after,
                polls: 0,
                time_passed: 0,
                state: hs_state::TRIGGERED,
                batches: Vec::new(),
            }
        }
    }

    impl RegisterBatch for Scripted {
        type Error = ();

        fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), ()> {
            for op in ops.iter_mut() {
                op.value = match op.offset {
                    o if o == r::part(3, r::PART_STATUS) => u64::from(self.state),
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
            if offset == r::part(3, r::PART_STATUS) {
                return Ok(u64::from(self.state));
            }
            assert_eq!(
                offset,
                r::part(3, r::PART_CCU_ACKED),
                "only the acks and the state are read"
            );
            assert_eq!(
                self.time_passed,
                self.polls + 1,
                "time passes before each poll"
            );
            self.polls += 1;
            Ok(if self.acks_after.is_some_and(|n| self.polls >= n) {
                0b11
            } else {
                0b01
            })
        }

        fn let_time_pass(&mut self) -> Result<(), ()> {
            self.time_passed += 1;
            Ok(())
        }
    }

    #[test]
    fn late_acks_are_polled_then_the_rebind_carries_the_ack() {
        let mut dev = Scripted::new(Some(5));
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
    fn acks_that_never_come_end_the_polling_after_a_bounded_number_of_polls() {
        let mut dev = Scripted::new(None);
        let mut ack = 0x40;
        let want = Pending {
            partition: 3,
            vm: 7,
            ctx: 70,
            response_cycles: 250,
        };
        assert_eq!(
            run(&mut dev, 3, &mut ack).unwrap(),
            Outcome::AwaitingAcks(want)
        );
        assert_eq!((dev.polls, dev.time_passed), (ACK_POLLS, ACK_POLLS));
        assert_eq!(dev.batches.len(), 1, "no rebind without every ack");
        assert_eq!(ack, 0x40, "the acknowledgement is left to the caller");
    }

    #[test]
    fn a_host_that_cannot_wait_resumes_once_the_acks_are_in() {
        let mut dev = Scripted::new(None);
        let mut ack = 0;
        let Outcome::AwaitingAcks(pending) = run_polling(&mut dev, 3, &mut ack, 0).unwrap() else {
            panic!("without polls the switch awaits its acks");
        };
        assert_eq!((dev.polls, dev.batches.len()), (0, 1));
        // Still travelling: nothing is written.
        assert_eq!(
            resume(&mut dev, &pending, &mut ack).unwrap(),
            Outcome::AwaitingAcks(pending)
        );
        assert_eq!(dev.batches.len(), 1);
        // In: steps 6-7 with the interrupt acknowledgement.
        dev.state = hs_state::ACKED;
        let mut ack = 0x200;
        assert_eq!(
            resume(&mut dev, &pending, &mut ack).unwrap(),
            Outcome::Done {
                response_cycles: 250
            }
        );
        assert_eq!((dev.batches.len(), dev.batches[1].len(), ack), (2, 5, 0));
        // Finished by the device's fallback meanwhile: nothing is written.
        dev.state = hs_state::IDLE;
        assert_eq!(
            resume(&mut dev, &pending, &mut ack).unwrap(),
            Outcome::Abandoned
        );
        assert_eq!(dev.batches.len(), 2);
    }
    #[test]
    fn a_switch_left_between_its_batches_is_adopted_and_resume_finishes_it() {
        let mut dev = Scripted::new(None);
        // Idle, or waiting for a first batch (which `run` answers): no
        // switch to take over.
        for state in [hs_state::IDLE, hs_state::REQUESTED, hs_state::REPOINTED] {
            dev.state = state;
            assert_eq!(adopt(&mut dev, 3).unwrap(), None, "state {state}");
        }
        let want = Pending {
            partition: 3,
            vm: 7,
            ctx: 70,
            response_cycles: 0,
        };
        // Acks still travelling: adopted, and resume keeps it waiting.
        dev.state = hs_state::TRIGGERED;
        assert_eq!(adopt(&mut dev, 3).unwrap(), Some(want));
        let mut ack = 0;
        assert_eq!(
            resume(&mut dev, &want, &mut ack).unwrap(),
            Outcome::AwaitingAcks(want)
        );
        // Acks in: resume binds the latched incoming VM and context.
        dev.state = hs_state::ACKED;
        let pending = adopt(&mut dev, 3).unwrap().expect("an ACKED switch");
        let before = dev.batches.len();
        assert_eq!(
            resume(&mut dev, &pending, &mut ack).unwrap(),
            Outcome::Done { response_cycles: 0 }
        );
        assert_eq!(dev.batches.len(), before + 1, "one rebind batch");
        let binds: Vec<(u64, u64)> = dev.batches[before][..2]
            .iter()
            .map(|o| (o.offset, o.value))
            .collect();
        assert_eq!(
            binds,
            [
                (r::part(3, r::PART_RC_BIND_VM), 7),
                (r::part(3, r::PART_RC_BIND_CTX), 70)
            ]
        );
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
