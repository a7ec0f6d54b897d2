//! The context/VM switch handshake (seed 000 ¶71–76) through the node, in
//! two register batches as `gpupm_driver::host::handshake` does in-process:
//! steps 1–5 (pause context, pause transfers, trigger with ULC flush, flush
//! request, read the acks) and steps 6–7 (bind, commit + re-point,
//! unpause). Out-of-order writes are refused by the device and change
//! nothing, so a partition that is not waiting for the host is left alone.

use gpupm_uapi::regs::{self as r, hs_state, part_ctrl, part_status, rc_cmd, trig_cmd};

use crate::devnode::{rd, reg32, wr, DevError, DevNode};

/// Polls of `PART_CCU_ACKED` before giving up (the device's fallback then
/// completes the switch).
const ACK_POLLS: u32 = 1000;

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
    /// The CCUs did not all ack; the device's fallback will finish.
    Abandoned,
}

/// Runs the handshake on partition slot `p` if it is in `REQUESTED`.
///
/// A non-zero `*ack` (interrupt sources to acknowledge) rides in the last
/// batch, saving the caller a separate write; it is zeroed once written.
pub fn run(dev: &DevNode, p: u32, ack: &mut u32) -> Result<Outcome, DevError> {
    let mut first = [
        rd(r::part(p, r::PART_NEXT_VM), 4),
        rd(r::part(p, r::PART_NEXT_CTX), 4),
        wr(r::part(p, r::PART_CTRL), part_ctrl::CTX_PAUSE),
        wr(r::part(p, r::PART_CTRL), part_ctrl::ALL),
        wr(r::TRIG_TARGET, 1 << p),
        wr(
            r::TRIG_CMD,
            trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER | trig_cmd::FLUSH_REQ,
        ),
        rd(r::part(p, r::PART_CCU_ACKED), 8),
        rd(r::part(p, r::PART_CCU_ASSIGNED), 8),
        rd(r::part(p, r::PART_SWITCH_REQ_CYCLE), 8),
        rd(r::CYCLE, 8),
    ];
    if let Err(e) = dev.batch(&mut first) {
        // Refused as a whole: most likely nothing was requested (already
        // handled, or completed by the fallback). Anything else is an error.
        let status = dev.read32(r::part(p, r::PART_STATUS))?;
        if status & part_status::STATE_MASK != hs_state::REQUESTED {
            return Ok(Outcome::NotRequested);
        }
        return Err(e);
    }
    let (next_vm, next_ctx) = (reg32(first[0].value), reg32(first[1].value));
    let assigned = first[7].value;
    let response_cycles = first[9].value.saturating_sub(first[8].value);
    let mut acked = first[6].value;
    let mut polls = 0;
    while acked & assigned != assigned {
        polls += 1;
        if polls > ACK_POLLS {
            return Ok(Outcome::Abandoned);
        }
        acked = dev.read64(r::part(p, r::PART_CCU_ACKED))?;
    }
    let mut second = [
        wr(r::part(p, r::PART_RC_BIND_VM), next_vm),
        wr(r::part(p, r::PART_RC_BIND_CTX), next_ctx),
        wr(r::part(p, r::PART_RC_CMD), rc_cmd::COMMIT | rc_cmd::REPOINT),
        wr(r::part(p, r::PART_CTRL), 0),
        wr(r::INTR_ACK, *ack),
    ];
    let ops = if *ack == 0 { 4 } else { 5 };
    if let Err(e) = dev.batch(&mut second[..ops]) {
        // Refused: the device's fallback finished the switch meanwhile.
        let status = dev.read32(r::part(p, r::PART_STATUS))?;
        if status & part_status::STATE_MASK != hs_state::ACKED {
            return Ok(Outcome::Abandoned);
        }
        return Err(e);
    }
    *ack = 0;
    Ok(Outcome::Done { response_cycles })
}
