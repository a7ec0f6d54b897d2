//! A small in-memory device for the transport's own tests
//! (`gpupm-driver --fake-backend`). It is not the device model: it has just
//! enough register behaviour to exercise the node — identity registers, a
//! 64-bit cycle counter, interrupt status/mask/ack with records, a trigger
//! command that raises `TRIGGER_DONE`, the mailbox, reset, read-only
//! registers that reject writes, scratch storage elsewhere, and a memory
//! window filled with a fixed pattern.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::{reg_op, Identity, LedgerQuery, RegOp};
use gpupm_uapi::regs::{self, mbox_op, mbox_status, trig_cmd, trig_ctrl};
use gpupm_uapi::ABI_VERSION;
use zerocopy::FromZeros;

use super::backend::{BackendError, DeviceBackend};

/// Size of the fake memory window.
pub const FAKE_WINDOW_SIZE: u64 = 16 << 20;
/// Catalogue size as a register value (the catalogue has at most 64 events).
#[allow(clippy::cast_possible_truncation)]
const EVENTS: u32 = EVENT_COUNT as u32;
/// Interrupt records kept.
const RETENTION: usize = 4096;
/// Nominal clock of the fake device.
const CLOCK_KHZ: u32 = 1_980_000;

/// Period of the window's byte pattern.
const PATTERN_PERIOD: usize = 251;
/// Two periods of the pattern, so any phase has a full period after it.
#[allow(clippy::cast_possible_truncation)]
const PATTERN: [u8; 2 * PATTERN_PERIOD] = {
    let mut p = [0u8; 2 * PATTERN_PERIOD];
    let mut i = 0;
    while i < p.len() {
        p[i] = (i % PATTERN_PERIOD) as u8; // < 251
        i += 1;
    }
    p
};

/// Byte `i` of the fake memory window.
#[allow(clippy::cast_possible_truncation)] // < 251
pub fn window_byte(i: u64) -> u8 {
    (i % PATTERN_PERIOD as u64) as u8
}

/// The fake device.
#[derive(Clone, Debug)]
pub struct FakeBackend {
    step: bool,
    started: Instant,
    cycle: u64,
    last_periodic: u64,
    scratch: BTreeMap<u64, u32>,
    intr_status: u32,
    intr_mask: u32,
    records: VecDeque<InterruptRecord>,
    next_seq: u64,
    mbox_arg: u32,
    mbox_status: u32,
    mbox_data: u64,
}

fn invalid(what: impl Into<String>) -> BackendError {
    BackendError::Invalid(what.into())
}

impl FakeBackend {
    /// A fake device with a step clock (`step`) or a real-time clock.
    pub fn new(step: bool) -> Self {
        FakeBackend {
            step,
            started: Instant::now(),
            cycle: 0,
            last_periodic: 0,
            scratch: BTreeMap::new(),
            intr_status: 0,
            intr_mask: 0,
            records: VecDeque::new(),
            next_seq: 1,
            mbox_arg: 0,
            mbox_status: mbox_status::IDLE,
            mbox_data: 0,
        }
    }

    fn raise(&mut self, src: u32, arg: u32) {
        self.intr_status |= src;
        if self.intr_mask & src != 0 {
            return;
        }
        if self.records.len() == RETENTION {
            self.records.pop_front();
        }
        self.records.push_back(InterruptRecord {
            seq: self.next_seq,
            cycle: self.cycle,
            source: src,
            partition: 0,
            arg,
            arg2: 0,
        });
        self.next_seq += 1;
    }

    fn read64(&self, offset: u64) -> Option<u64> {
        Some(match offset {
            regs::CYCLE => self.cycle,
            regs::INTR_SEQ => self.next_seq - 1,
            regs::MBOX_DATA => self.mbox_data,
            regs::CCU_WRAPS => 0,
            o if regs::is_64bit(o) => 0,
            _ => return None,
        })
    }

    fn read32(&self, offset: u64) -> u32 {
        let half = |o: u64| self.read64(o).unwrap_or(0);
        match offset {
            regs::ID => regs::DEVICE_MAGIC,
            regs::ABI_VERSION => ABI_VERSION,
            regs::TOPO_EVENTS => EVENTS,
            regs::CLOCK_KHZ => CLOCK_KHZ,
            regs::DEVICE_STATUS => u32::from(self.step),
            regs::INTR_STATUS => self.intr_status,
            regs::INTR_MASK => self.intr_mask,
            regs::INTR_PENDING => self.intr_status & !self.intr_mask,
            regs::MBOX_ARG => self.mbox_arg,
            regs::MBOX_STATUS => self.mbox_status,
            regs::RESET | regs::TRIG_CMD | regs::INTR_ACK | regs::MBOX_CMD => 0,
            o if regs::is_64bit(o) => (half(o) & 0xffff_ffff) as u32,
            o if o >= 4 && regs::is_64bit(o - 4) => (half(o - 4) >> 32) as u32,
            o => self.scratch.get(&o).copied().unwrap_or(0),
        }
    }

    fn write32(&mut self, offset: u64, value: u32) -> Result<(), BackendError> {
        const READ_ONLY: [u64; 8] = [
            regs::ID,
            regs::ABI_VERSION,
            regs::TOPO_EVENTS,
            regs::CLOCK_KHZ,
            regs::DEVICE_STATUS,
            regs::INTR_STATUS,
            regs::INTR_PENDING,
            regs::MBOX_STATUS,
        ];
        if READ_ONLY.contains(&offset)
            || regs::is_64bit(offset)
            || (offset >= 4 && regs::is_64bit(offset - 4))
        {
            return Err(invalid(format!("register {offset:#x} is read-only")));
        }
        match offset {
            regs::RESET if value == regs::RESET_MAGIC => self.do_reset(),
            regs::RESET => return Err(invalid("RESET needs RESET_MAGIC")),
            regs::TRIG_CMD if value & !trig_cmd::ALL == 0 => {
                self.raise(source::TRIGGER_DONE, value)
            }
            regs::TRIG_CMD => return Err(invalid("unknown TRIG_CMD bits")),
            regs::TRIG_CTRL if value & !trig_ctrl::ALL != 0 => {
                return Err(invalid("unknown TRIG_CTRL bits"))
            }
            regs::TRIG_PERIOD if value != 0 && value < regs::TRIG_PERIOD_MIN => {
                return Err(invalid("TRIG_PERIOD below minimum"))
            }
            regs::INTR_MASK if value & !source::ALL != 0 => {
                return Err(invalid("unknown INTR_MASK bits"))
            }
            regs::INTR_MASK => self.intr_mask = value,
            regs::INTR_ACK => self.intr_status &= !value,
            regs::MBOX_ARG => self.mbox_arg = value,
            regs::MBOX_CMD => self.mailbox(value),
            o => {
                self.scratch.insert(o, value);
            }
        }
        Ok(())
    }

    fn mailbox(&mut self, op: u32) {
        let (status, data) = match op {
            mbox_op::GET_CAPS => (
                mbox_status::OK,
                u64::from(ABI_VERSION) << 32 | EVENT_COUNT as u64,
            ),
            mbox_op::READ_CYCLE => (mbox_status::OK, self.cycle),
            mbox_op::READ_SYSTEM_COUNTER if (self.mbox_arg as usize) < EVENT_COUNT => {
                (mbox_status::OK, 0)
            }
            mbox_op::READ_SYSTEM_COUNTER => (mbox_status::ERR_ARG, 0),
            _ => (mbox_status::ERR_OPCODE, 0),
        };
        self.mbox_status = status;
        self.mbox_data = data;
        self.raise(source::MAILBOX_DONE, op);
    }

    fn do_reset(&mut self) {
        self.scratch.clear();
        self.intr_status = 0;
        self.intr_mask = 0;
        self.raise(source::DEVICE_RESET, 0);
    }

    fn apply(&mut self, op: &mut RegOp) -> Result<(), BackendError> {
        match op.op {
            reg_op::READ => op.value = self.read_reg(op.offset, op.width)?,
            reg_op::WRITE => self.write_reg(op.offset, op.width, op.value)?,
            other => return Err(invalid(format!("op kind {other}"))),
        }
        Ok(())
    }
}

impl DeviceBackend for FakeBackend {
    fn identity(&mut self) -> Identity {
        Identity {
            version: 0,
            magic: regs::DEVICE_MAGIC,
            abi_version: ABI_VERSION,
            events: EVENTS,
            partitions: 2,
            ccus: 4,
            sms: 8,
            clock_khz: CLOCK_KHZ,
            step_clock: u32::from(self.step),
            reserved: 0,
            cycle: self.cycle,
        }
    }

    fn read_reg(&mut self, offset: u64, width: u32) -> Result<u64, BackendError> {
        match width {
            4 => Ok(u64::from(self.read32(offset))),
            8 => self
                .read64(offset)
                .ok_or_else(|| invalid(format!("register {offset:#x} is not 64-bit"))),
            _ => Err(invalid(format!("width {width}"))),
        }
    }

    fn write_reg(&mut self, offset: u64, width: u32, value: u64) -> Result<(), BackendError> {
        let value = u32::try_from(value)
            .ok()
            .filter(|_| width == 4)
            .ok_or_else(|| invalid(format!("{width}-byte write of {value:#x} at {offset:#x}")))?;
        self.write32(offset, value)
    }

    fn read_mem(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= FAKE_WINDOW_SIZE);
        if end.is_none() {
            return Err(invalid(format!("window read at {offset:#x} past the end")));
        }
        let phase = usize::from(window_byte(offset));
        for chunk in buf.chunks_mut(PATTERN_PERIOD) {
            chunk.copy_from_slice(&PATTERN[phase..phase + chunk.len()]);
        }
        Ok(())
    }

    fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), (usize, BackendError)> {
        let mut next = self.clone();
        for (i, op) in ops.iter_mut().enumerate() {
            next.apply(op).map_err(|e| (i, e))?;
        }
        *self = next;
        Ok(())
    }

    fn advance(&mut self, cycles: u64) -> Result<u64, BackendError> {
        if !self.step {
            return Err(BackendError::NotSupported(
                "advance on a real-time clock".into(),
            ));
        }
        self.cycle += cycles;
        Ok(self.cycle)
    }

    fn ledger(&mut self, _scope: u32, id: u32) -> Result<LedgerQuery, BackendError> {
        if id >= regs::MAX_CONTEXTS {
            return Err(invalid(format!("id {id}")));
        }
        let mut q = LedgerQuery::new_zeroed();
        q.generated[0] = self.cycle;
        Ok(q)
    }

    fn reset(&mut self) -> Result<(), BackendError> {
        self.do_reset();
        Ok(())
    }

    fn tick(&mut self, now: Instant) {
        if self.step {
            return;
        }
        let ns = now.saturating_duration_since(self.started).as_nanos();
        self.cycle = u64::try_from(ns * u128::from(CLOCK_KHZ) / 1_000_000).unwrap_or(u64::MAX);
        let period = u64::from(self.read32(regs::TRIG_PERIOD));
        let enabled = self.read32(regs::TRIG_CTRL) & trig_ctrl::PERIODIC_ENABLE != 0;
        if enabled && period != 0 && self.cycle - self.last_periodic >= period {
            self.last_periodic = self.cycle;
            self.raise(source::TRIGGER_DONE, 0);
        }
    }

    fn interrupts_since(&self, from_seq: u64, out: &mut Vec<InterruptRecord>) -> u64 {
        out.extend(self.records.iter().filter(|r| r.seq >= from_seq));
        self.next_seq
    }

    fn interrupt_pending(&self) -> u32 {
        self.intr_status & !self.intr_mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_batch_changes_nothing() {
        let mut dev = FakeBackend::new(true);
        let scratch = regs::part(1, regs::PART_RC_BIND_VM);
        let mut ops = [
            RegOp {
                offset: scratch,
                value: 7,
                op: reg_op::WRITE,
                width: 4,
            },
            RegOp {
                offset: regs::TRIG_CMD,
                value: 2,
                op: reg_op::WRITE,
                width: 4,
            },
            RegOp {
                offset: regs::ID,
                value: 1,
                op: reg_op::WRITE,
                width: 4,
            },
        ];
        assert_eq!(dev.batch(&mut ops).err().map(|(i, _)| i), Some(2));
        assert_eq!(dev.read_reg(scratch, 4).ok(), Some(0));
        assert_eq!(dev.interrupts_since(0, &mut Vec::new()), 1);
    }
}
