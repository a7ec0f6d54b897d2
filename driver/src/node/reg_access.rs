//! Which device file a handle was opened on, and which register accesses
//! each may make: the one rule both the file operations (`device`) and the
//! register ioctls (`ioctl`) apply.

use gpupm_uapi::regs;

use super::error::{malformed, NodeError};

/// Which device file a handle was opened on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// `card0`: registers, memory window, ioctls, interrupt records.
    Card,
    /// `card0-oob`: the mailbox registers only.
    Oob,
}

/// Validates a register access of `size` bytes at `offset` on node `kind`
/// and returns its width.
pub(super) fn reg_access(kind: NodeKind, offset: u64, size: usize) -> Result<u32, NodeError> {
    let width: u32 = match size {
        4 => 4,
        8 => 8,
        _ => {
            return Err(malformed(format!(
                "register access of {size} bytes (must be 4 or 8)"
            )))
        }
    };
    if !offset.is_multiple_of(u64::from(width)) {
        return Err(malformed(format!(
            "offset {offset:#x} not aligned to {width}"
        )));
    }
    let end = offset.saturating_add(u64::from(width));
    // The OOB mailbox is the BMC's alone: the host's node cannot reach it,
    // so the two callers' mailbox sequences can never interleave.
    let (oob_start, oob_end) = regs::OOB_MAILBOX_REGS.range();
    let oob = oob_start..oob_end;
    let in_range = match kind {
        NodeKind::Card => end <= regs::BAR0_SIZE && !(offset < oob.end && end > oob.start),
        NodeKind::Oob => offset >= oob.start && end <= oob.end,
    };
    if !in_range {
        return Err(malformed(format!(
            "offset {offset:#x} outside the register file"
        )));
    }
    Ok(width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_access_requires_width_alignment_and_range() {
        assert_eq!(reg_access(NodeKind::Card, regs::CYCLE, 8).ok(), Some(8));
        assert!(reg_access(NodeKind::Card, 2, 4).is_err());
        assert!(reg_access(NodeKind::Card, 0, 2).is_err());
        assert!(reg_access(NodeKind::Card, regs::BAR0_SIZE, 4).is_err());
        assert!(reg_access(NodeKind::Card, u64::MAX - 3, 4).is_err());
        assert!(reg_access(NodeKind::Oob, regs::OOB_MBOX_DATA, 8).is_ok());
        assert!(reg_access(NodeKind::Oob, regs::MBOX_DATA, 8).is_err());
        assert!(reg_access(NodeKind::Oob, regs::ID, 4).is_err());
        assert!(reg_access(NodeKind::Card, regs::OOB_MBOX_ARG, 4).is_err());
        assert!(reg_access(NodeKind::Card, regs::OOB_MBOX_DATA, 8).is_err());
        assert!(reg_access(NodeKind::Card, regs::MBOX_DATA, 8).is_ok());
    }
}
