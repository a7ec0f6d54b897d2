//! The out-of-band mailbox (SMBPBI-like): a BMC writes an argument and an
//! opcode, then reads status and a 64-bit result. Commands read device-level
//! state directly from device registers and the system block; nothing is
//! allocated, no host memory is touched, no daemon is involved.

use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::intr::source;
use gpupm_uapi::layout::SYSTEM_BLOCK_SLOT;
use gpupm_uapi::regs::{mbox_op, mbox_status};

use super::device::Device;

/// Mailbox registers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mailbox {
    pub arg: u32,
    pub status: u32,
    pub data: u64,
}

impl Device {
    /// Runs mailbox command `op`.
    pub(crate) fn run_mailbox(&mut self, op: u32) {
        let arg = self.mbox.arg;
        let result = match op {
            mbox_op::GET_CAPS => Ok(u64::from(gpupm_uapi::ABI_VERSION) << 32 | EVENT_COUNT as u64),
            mbox_op::READ_SYSTEM_COUNTER => {
                match usize::try_from(arg).ok().filter(|&e| e < EVENT_COUNT) {
                    Some(e) => Ok(self.mem.block(SYSTEM_BLOCK_SLOT).counters[e]),
                    None => Err(mbox_status::ERR_ARG),
                }
            }
            mbox_op::READ_IDLE_CYCLES => Ok(self.idle_cycles),
            mbox_op::READ_CYCLE => Ok(self.now),
            mbox_op::READ_FALLBACKS => Ok(self.parts.iter().map(|p| p.fallbacks).sum()),
            _ => Err(mbox_status::ERR_OPCODE),
        };
        match result {
            Ok(v) => {
                self.mbox.status = mbox_status::OK;
                self.mbox.data = v;
            }
            Err(status) => {
                self.mbox.status = status;
                self.mbox.data = 0;
            }
        }
        self.intr
            .raise(source::MAILBOX_DONE, 0, op, self.mbox.status, self.now);
    }
}
