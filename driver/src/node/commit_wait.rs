//! `GPUPM_IOC_WAIT_COMMIT` ([`gpupm_uapi::commit_wait`]): a request the
//! node answers when the device's next periodic commit has landed, with
//! the blocks the caller named read at that moment, or at its timeout.
//!
//! Checking happens wherever the node already delivers interrupt records
//! ([`super::device::NodeCore::deliver`]: after every tick of a real-time
//! clock, every register write and ioctl, and every housekeeping wake-up
//! of a step clock), so a parked wait costs the node nothing but a
//! register read per delivery while it is parked, and its reply is sent
//! from the thread that made the commit — no serving thread is held.

use std::time::{Duration, Instant};

use gpupm_uapi::commit_wait::{WaitCommit, WAIT_COMMIT_MAX_BLOCKS, WAIT_COMMIT_MAX_TIMEOUT_US};
use gpupm_uapi::ioctl::IOCTL_STRUCT_VERSION;
use gpupm_uapi::layout::{block_slot_offset, BlockSlot, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE};
use gpupm_uapi::regs::{CYCLE, TRIG_COUNT_PERIODIC};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::backend::DeviceBackend;
use super::error::{malformed, NodeError};
use super::ioctl::IoctlReply;

/// Completes a deferred ioctl with its reply or an error.
pub type IoctlCompletion = Box<dyn FnOnce(Result<IoctlReply, NodeError>) + Send>;

/// A wait that was not answerable when it arrived.
pub struct ParkedWait {
    /// Names the wait for the reaper (unique while the node runs).
    pub ticket: u64,
    /// The caller's thread (for interrupts and killed waiters).
    pub pid: u32,
    /// The request, checked.
    pub arg: WaitCommit,
    /// When it times out.
    pub deadline: Instant,
    /// Sends the reply.
    pub complete: IoctlCompletion,
}

impl std::fmt::Debug for ParkedWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParkedWait")
            .field("pid", &self.pid)
            .field("after", &self.arg.after)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// Decodes and checks a wait's argument: every error before anything is
/// parked or read.
pub fn parse(input: &[u8]) -> Result<WaitCommit, NodeError> {
    let arg = WaitCommit::read_from_bytes(input).map_err(|_| {
        malformed(format!(
            "wait argument of {} bytes, expected {}",
            input.len(),
            core::mem::size_of::<WaitCommit>()
        ))
    })?;
    if arg.version != IOCTL_STRUCT_VERSION {
        return Err(malformed(format!("struct version {}", arg.version)));
    }
    if arg.flags != 0 || arg.reserved != 0 {
        return Err(malformed("wait flags or reserved field set"));
    }
    let count = arg.count as usize;
    if count == 0 || count > WAIT_COMMIT_MAX_BLOCKS {
        return Err(malformed(format!("wait for {count} blocks")));
    }
    if arg.timeout_us == 0 || arg.timeout_us > WAIT_COMMIT_MAX_TIMEOUT_US {
        return Err(malformed(format!("wait timeout of {} µs", arg.timeout_us)));
    }
    if let Some(s) = arg.slots[..count]
        .iter()
        .find(|&&s| s >= CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS)
    {
        return Err(malformed(format!("block slot {s} out of range")));
    }
    Ok(arg)
}

/// When a wait of `arg` that arrives at `now` times out.
pub fn deadline(arg: &WaitCommit, now: Instant) -> Instant {
    now + Duration::from_micros(u64::from(arg.timeout_us))
}

/// The device's periodic commit sequence now.
pub fn sequence(backend: &mut dyn DeviceBackend) -> Result<u64, NodeError> {
    Ok(backend.read_reg(TRIG_COUNT_PERIODIC, 8)?)
}

/// Whether a wait for commits after `after` is answered now, the sequence
/// being `seq`: a newer commit (or a sequence that restarted with a device
/// reset), or the deadline passed.
pub fn due(after: u64, seq: u64, deadline: Instant, now: Instant) -> bool {
    seq != after || now >= deadline
}

/// The reply to `arg` at sequence `seq`: the count, the cycle and the
/// named slots as the window holds them now.
pub fn answer(
    backend: &mut dyn DeviceBackend,
    mut arg: WaitCommit,
    seq: u64,
) -> Result<IoctlReply, NodeError> {
    arg.seq = seq;
    arg.cycle = backend.read_reg(CYCLE, 8)?;
    let count = arg.count as usize;
    for (slot, out) in arg.slots[..count].iter().zip(arg.blocks.iter_mut()) {
        backend.read_mem(block_slot_offset(*slot), out.as_mut_bytes())?;
    }
    for out in &mut arg.blocks[count..] {
        *out = BlockSlot::new_zeroed();
    }
    Ok(IoctlReply {
        result: 0,
        data: arg.as_bytes().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg() -> WaitCommit {
        let mut a = WaitCommit::new_zeroed();
        a.version = IOCTL_STRUCT_VERSION;
        a.timeout_us = 1000;
        a.count = 2;
        a.slots[..2].copy_from_slice(&[1, 2]);
        a
    }

    #[test]
    fn every_bad_field_is_refused() {
        assert!(parse(arg().as_bytes()).is_ok());
        let bad: [fn(&mut WaitCommit); 8] = [
            |a| a.version = 2,
            |a| a.flags = 1,
            |a| a.reserved = 1,
            |a| a.count = 0,
            |a| a.count = u32::try_from(WAIT_COMMIT_MAX_BLOCKS).unwrap() + 1,
            |a| a.timeout_us = 0,
            |a| a.timeout_us = WAIT_COMMIT_MAX_TIMEOUT_US + 1,
            |a| a.slots[1] = CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS,
        ];
        for (i, spoil) in bad.iter().enumerate() {
            let mut a = arg();
            spoil(&mut a);
            assert!(
                matches!(parse(a.as_bytes()), Err(NodeError::Malformed(_))),
                "spoiler {i}"
            );
        }
        assert!(parse(&arg().as_bytes()[1..]).is_err(), "short argument");
    }

    #[test]
    fn a_wait_is_due_on_a_new_sequence_or_at_its_deadline() {
        let now = Instant::now();
        let later = now + Duration::from_millis(1);
        assert!(!due(5, 5, later, now));
        assert!(due(5, 6, later, now));
        assert!(due(5, 0, later, now), "a reset restarts the sequence");
        assert!(due(5, 5, later, later));
    }
}
