//! Driving a device that runs on a step clock (`gpupm-driver --clock
//! step`): device time passes only when its owner advances it, so whoever
//! owns the clock (`gpupm demo`, a test) must also let the flush
//! acknowledgements of a triggered switch arrive — the daemon only waits
//! for them. These are the owner's reads and writes; the loops around them
//! (deadlines, what else to check) are the owner's.

use gpupm_uapi::regs::{self as r, hs_state, part_status, trig_cmd, MAX_PARTITION_SLOTS};

use crate::ops::{reg32, write32};
use crate::{DevError, DevNode};

/// Configured GPU-slice partition slots (1..), from `PART_STATUS`.
pub fn configured_partitions(dev: &DevNode) -> Result<Vec<u32>, DevError> {
    let slots: Vec<u32> = (1..MAX_PARTITION_SLOTS).collect();
    let offsets: Vec<u64> = slots.iter().map(|&p| r::part(p, r::PART_STATUS)).collect();
    let status = dev.read_many(&offsets)?;
    Ok(slots
        .into_iter()
        .zip(status)
        .filter(|&(_, s)| reg32(s) & part_status::CONFIGURED != 0)
        .map(|(p, _)| p)
        .collect())
}

/// The handshake state (`hs_state::*`) of each partition of `parts`.
pub fn handshake_states(dev: &DevNode, parts: &[u32]) -> Result<Vec<u32>, DevError> {
    let offsets: Vec<u64> = parts.iter().map(|&p| r::part(p, r::PART_STATUS)).collect();
    Ok(dev
        .read_many(&offsets)?
        .into_iter()
        .map(|s| reg32(s) & part_status::STATE_MASK)
        .collect())
}

/// One step towards rest for the clock's owner: `true` when every
/// partition of `parts` is idle; otherwise, if a switch waits for its
/// flush acknowledgements, advances the clock by the longest ack latency
/// (`FLUSH_ACK_MAX_CYCLES`) so that they arrive, and returns `false`.
pub fn settle_step(dev: &DevNode, parts: &[u32]) -> Result<bool, DevError> {
    let states = handshake_states(dev, parts)?;
    if states.iter().all(|&s| s == hs_state::IDLE) {
        return Ok(true);
    }
    if states.contains(&hs_state::TRIGGERED) {
        dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))?;
    }
    Ok(false)
}

/// Commits everything (ULC partials, CCU banks, RCs) on every partition of
/// `parts` and the system channel, in one atomic batch.
pub fn flush_all(dev: &DevNode, parts: &[u32]) -> Result<(), DevError> {
    let mask = parts.iter().fold(1u32, |m, &p| m | 1 << p);
    dev.batch(&mut [
        write32(r::TRIG_TARGET, mask),
        write32(r::TRIG_CMD, trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER),
    ])
}
