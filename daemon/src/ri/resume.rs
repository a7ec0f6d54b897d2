//! Re-enabling a halted session in place (`TENANT_IOC_RI_RESUME`, ABI 1.8).
//! A halt means the VM moved to a partition the session's control block
//! does not fit; once the VM runs on one it fits again, the session may go
//! on in the same block and buffer. The daemon checks the control block
//! against the partition the VM is on now, then disables and re-enables the
//! block in one register batch, in which the device checks the whole block
//! once more.

use gpupm_client::ops::write32;
use gpupm_uapi::ri::{self as ri, ri_ctrl, ri_status};

use super::{drain, PartitionCaps, RiError, RiUnit};

impl RiUnit {
    /// Re-enables halted session `id` on `block`; answers the partition it
    /// runs on. Refused, changing nothing: a session that ended or is not
    /// halted, an RGS above the partition's maximum (`Invalid`), a
    /// partition of another capability version than the session began on
    /// (`Unsupported`: its records would mix two versions in one buffer).
    pub fn resume(&self, block: u32, id: u64) -> Result<PartitionCaps, RiError> {
        // Deliver the groups stored before the halt, and the halt marker,
        // before the device numbers groups from 1 again.
        self.drain_block(block);
        let mut slots = self.lock();
        let s = slots
            .get_mut(block as usize)
            .and_then(Option::as_mut)
            .filter(|s| s.id == id)
            .ok_or(RiError::Invalid("the session ended"))?;
        let status = drain::read_status(&self.dev, block)?.status;
        if status & ri_status::HALTED == 0 {
            return Err(RiError::Invalid("the session is not halted"));
        }
        let caps = self.caps(s.config.vm)?;
        if s.config.rgs > caps.max_rgs {
            return Err(RiError::Invalid("RGS above the partition's maximum"));
        }
        if caps.version != s.version {
            return Err(RiError::Unsupported(
                "the partition's version is not the one the session began on",
            ));
        }
        let ctrl = s.config.ctrl();
        self.dev
            .batch(&mut [
                write32(ri::ri(block, ri::RI_CTRL), ctrl & !ri_ctrl::ENABLE),
                write32(ri::ri(block, ri::RI_CTRL), ctrl),
            ])
            .map_err(|e| match drain::errno_of(&e) {
                // The VM moved again, or the context ended, since the checks.
                Some(libc::EINVAL) => RiError::Invalid("the device refused the control block"),
                _ => RiError::Device(e),
            })?;
        s.seen = 0;
        s.halt_reported = false;
        Ok(caps)
    }
}
