//! Draining one control block: a snapshot of RCA's side (NRG, status,
//! halt reason, the context bound) in one register batch, the unseen
//! whole groups read from the memory window ([`super::plan`]), a second
//! look at NRG to drop any group the device may have overwritten while it
//! was read, and the halt marker once per halt.

use std::sync::atomic::Ordering;

use gpupm_client::ops::{read32, read64, reg32, write32};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::ri::{self as ri, group_bytes, ri_ctrl, ri_status};

use super::plan::{plan, torn};
use super::{PartitionCaps, RiStats, Slot};

/// One entry for a session: a whole group, or a halt marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Group `number` (NRG, 1-based) of RGS `rgs`: its records.
    Group {
        /// NRG of the group.
        number: u64,
        /// RGS.
        rgs: u8,
        /// 2^(RGS+1) × 16 bytes.
        bytes: Vec<u8>,
    },
    /// The session halted after `groups` groups, for `reason`.
    Halt {
        /// Groups stored before the halt.
        groups: u64,
        /// `ri::halt_reason`.
        reason: u32,
    },
}

/// What one drain produced.
#[derive(Debug, Default)]
pub struct Drained {
    /// Groups lost before the entries.
    pub lost: u64,
    /// Entries, oldest first.
    pub entries: Vec<Entry>,
    /// The device unbound the block (the context was released).
    pub ended: bool,
}

/// A session's status, as `TENANT_IOC_RI_STATUS` answers it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Status {
    /// `RI_STATUS`.
    pub status: u32,
    /// `RI_HALT_REASON`.
    pub halt_reason: u32,
    /// `RI_GROUPS`.
    pub groups: u64,
    /// `RI_SUPPRESSED`.
    pub suppressed: u64,
    /// `RI_OVERWRITTEN`.
    pub overwritten: u64,
    /// Groups the daemon lost for the session.
    pub lost: u64,
    /// Groups the daemon queued for the session.
    pub delivered: u64,
    /// The partition the VM is on now.
    pub caps: PartitionCaps,
}

/// The errno of a refused device request, if it was one.
pub fn errno_of(e: &DevError) -> Option<i32> {
    match e {
        DevError::Ioctl { source, .. } => Some(*source as i32),
        DevError::Access { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

/// Reads `block`'s counters in one batch.
pub fn read_status(dev: &DevNode, block: u32) -> Result<Status, DevError> {
    let mut ops = [
        read32(ri::ri(block, ri::RI_STATUS)),
        read32(ri::ri(block, ri::RI_HALT_REASON)),
        read64(ri::ri(block, ri::RI_GROUPS)),
        read64(ri::ri(block, ri::RI_SUPPRESSED)),
        read32(ri::ri(block, ri::RI_OVERWRITTEN)),
    ];
    dev.batch(&mut ops)?;
    Ok(Status {
        status: reg32(ops[0].value),
        halt_reason: reg32(ops[1].value),
        groups: ops[2].value,
        suppressed: ops[3].value,
        overwritten: u64::from(reg32(ops[4].value)),
        ..Status::default()
    })
}

/// Clears `ENABLE` (the session stores nothing more; the buffer and counts
/// stay readable).
pub fn stop(dev: &DevNode, block: u32) -> Result<(), DevError> {
    let ctrl = dev.read32(ri::ri(block, ri::RI_CTRL))?;
    if ctrl & ri_ctrl::ENABLE != 0 {
        dev.write32(ri::ri(block, ri::RI_CTRL), ctrl & !ri_ctrl::ENABLE)?;
    }
    Ok(())
}

/// Unbinds a disabled block.
pub fn unbind(dev: &DevNode, block: u32) -> Result<(), DevError> {
    dev.batch(&mut [write32(ri::ri(block, ri::RI_CTX), 0)])
}

/// Drains the groups `s` has not seen; books them in `stats`.
pub(super) fn drain(
    dev: &DevNode,
    block: u32,
    s: &mut Slot,
    stats: &RiStats,
) -> Result<Drained, DevError> {
    let mut ops = [
        read32(ri::ri(block, ri::RI_CTX)),
        read32(ri::ri(block, ri::RI_STATUS)),
        read32(ri::ri(block, ri::RI_HALT_REASON)),
        read32(ri::ri(block, ri::RI_RCA)),
        read64(ri::ri(block, ri::RI_GROUPS)),
    ];
    dev.batch(&mut ops)?;
    let (ctx, status, reason) = (
        reg32(ops[0].value),
        reg32(ops[1].value),
        reg32(ops[2].value),
    );
    let groups = ops[4].value;
    let rgs = s.config.rgs;
    let gb = group_bytes(rgs);
    let p = plan(s.seen, groups, s.cap, gb);
    let span = ri::ri_span_offset(block);
    let mut bytes = Vec::new();
    for &(off, len) in &p.ranges {
        let at = bytes.len();
        bytes.resize(at + usize::try_from(len).unwrap_or(0), 0);
        dev.window(span + off, &mut bytes[at..])?;
    }
    let read = p.groups(gb);
    // A halted or unbound block stores nothing more; an enabled one may
    // have wrapped onto what was just read.
    let later = if status & ri_status::ENABLED != 0 && status & ri_status::HALTED == 0 {
        dev.read64(ri::ri(block, ri::RI_GROUPS))?
    } else {
        groups
    };
    let torn = torn(read, groups, later, s.cap);
    let lost = p.lost + torn;
    let mut out = Drained {
        lost,
        ..Drained::default()
    };
    let chunk = usize::try_from(gb).unwrap_or(usize::MAX);
    let skip = usize::try_from(torn).unwrap_or(usize::MAX);
    for (k, g) in (0u64..).zip(bytes.chunks_exact(chunk)).skip(skip) {
        out.entries.push(Entry::Group {
            number: p.first + k,
            rgs: u8::try_from(rgs).unwrap_or(u8::MAX),
            bytes: g.to_vec(),
        });
    }
    s.seen = groups;
    let delivered = read - torn;
    s.lost += lost;
    s.delivered += delivered;
    stats.groups.fetch_add(delivered, Ordering::Relaxed);
    stats
        .records
        .fetch_add(delivered << (rgs + 1), Ordering::Relaxed);
    stats.lost.fetch_add(lost, Ordering::Relaxed);
    if status & ri_status::HALTED != 0 && !s.halt_reported {
        s.halt_reported = true;
        stats.halts.fetch_add(1, Ordering::Relaxed);
        out.entries.push(Entry::Halt { groups, reason });
    }
    out.ended = ctx != s.config.ctx;
    Ok(out)
}
