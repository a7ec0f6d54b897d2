//! Runtime-instrumentation sessions on the tenant node: checking
//! `TENANT_IOC_OPEN_RI`, `TENANT_IOC_RI_EMIT` and `TENANT_IOC_RI_STATUS`,
//! and a session's queue of encoded entries.
//!
//! Checks run in the node's usual order: shape (version, flags, reserved
//! fields, mode, bits, SF, RSIC, RGS against the device's limit, sizes),
//! then the context against the caller's own VMs, then confidentiality.
//! The RGS limit of the context's partition is checked by the unit when
//! it opens the session (it reads the partition the VM is on then).

use std::collections::VecDeque;

use gpupm_uapi::ri::{ri_ctrl, ri_mode};
use gpupm_uapi::tenant::ri::{
    max_buffer_groups, ri_controls, ri_entry, ri_session_mode, OpenRi, RiEmit, RiGroupHeader,
    RiResume, RiStatus, DEFAULT_RI_QUEUE_GROUPS, MAX_RI_QUEUE_GROUPS, RI_RGS_MAX, RI_SF_MAX,
};
use gpupm_uapi::tenant::scope;
use zerocopy::{FromZeros, IntoBytes};

use super::answer::{check_reserved, check_version};
use super::authz::{recheck, resolve};
use super::error::RequestError;
use super::policy::Identity;
use crate::ri::{Entry, RiConfig};
use crate::view::{CounterView, Scope, Totals};

/// An RI session the caller was granted.
#[derive(Debug)]
pub struct RiGrant {
    /// The control block to program.
    pub config: RiConfig,
    /// Groups its queue holds.
    pub queue_groups: u32,
    /// The request, whose output fields the node fills in.
    pub answer: Box<OpenRi>,
}

/// The RI control blocks each VM may hold: an equal share of the
/// device's [`RI_BLOCKS`](gpupm_uapi::ri::RI_BLOCKS) over the VMs it has
/// (at least one), fixed by the VM table, not by what anyone holds.
pub fn block_quota(view: &dyn CounterView) -> u32 {
    let vms = u32::try_from(view.vms().len()).unwrap_or(u32::MAX).max(1);
    (gpupm_uapi::ri::RI_BLOCKS / vms).max(1)
}

/// Checks `TENANT_IOC_OPEN_RI`: shape first, then the context.
pub(super) fn open_ri(
    view: &dyn CounterView,
    identity: &Identity,
    arg: Box<OpenRi>,
) -> Result<RiGrant, RequestError> {
    check_version(arg.version)?;
    if arg.flags != 0 || arg.reserved != 0 {
        return Err(RequestError::Invalid("unknown flags or reserved field"));
    }
    let mode = match arg.mode {
        ri_session_mode::CYCLE => ri_mode::CYCLE,
        ri_session_mode::INSTRUCTION => ri_mode::INSTRUCTION,
        ri_session_mode::DIRECTED => ri_mode::DIRECTED,
        _ => return Err(RequestError::Invalid("unknown mode")),
    };
    if arg.controls & !ri_controls::ALL != 0 {
        return Err(RequestError::Invalid("unknown control bits"));
    }
    if arg.sf > RI_SF_MAX || arg.rsic > RI_SF_MAX {
        return Err(RequestError::Invalid("SF or RSIC out of range"));
    }
    if mode == ri_mode::DIRECTED && arg.sf != 0 {
        return Err(RequestError::Invalid("SF in directed mode"));
    }
    if arg.rgs > RI_RGS_MAX {
        return Err(RequestError::Invalid("RGS above the device's maximum"));
    }
    let buffer_groups = match arg.buffer_groups {
        0 => max_buffer_groups(arg.rgs),
        n if n <= max_buffer_groups(arg.rgs) => n,
        _ => return Err(RequestError::Invalid("buffer larger than the block's span")),
    };
    let queue_groups = match arg.queue_groups {
        0 => DEFAULT_RI_QUEUE_GROUPS,
        n if n <= MAX_RI_QUEUE_GROUPS => n,
        _ => return Err(RequestError::Invalid("queue_groups too large")),
    };
    let r = resolve(view, identity, scope::CONTEXT, arg.ctx, false)?;
    let vm = r.vm.ok_or(RequestError::Internal("context without a VM"))?;
    let confidential = matches!(view.totals(Scope::Vm(vm)), Some(Totals::Sealed(_)));
    recheck(view, identity, r)?;
    if confidential {
        return Err(RequestError::Unsupported(
            "the device offers no RI for confidential VMs",
        ));
    }
    Ok(RiGrant {
        config: RiConfig {
            ctx: arg.ctx,
            vm,
            mode,
            bits: device_bits(arg.controls),
            sf: arg.sf,
            rsic: arg.rsic,
            rgs: arg.rgs,
            buffer_groups,
        },
        queue_groups,
        answer: arg,
    })
}

fn device_bits(controls: u32) -> u32 {
    [
        (ri_controls::EMIT, ri_ctrl::EMIT),
        (ri_controls::ABORT, ri_ctrl::ABORT),
        (ri_controls::SUPPRESS_PRIMARY, ri_ctrl::SUPPRESS_PRIMARY),
        (ri_controls::SUPPRESS_SECONDARY, ri_ctrl::SUPPRESS_SECONDARY),
    ]
    .iter()
    .filter(|&&(t, _)| controls & t != 0)
    .fold(0, |acc, &(_, d)| acc | d)
}

/// Checks `TENANT_IOC_RI_EMIT`; answers the value.
pub(super) fn emit(arg: &RiEmit) -> Result<u32, RequestError> {
    check_version(arg.version)?;
    if arg.reserved != 0 {
        return Err(RequestError::Invalid("reserved field"));
    }
    Ok(arg.value)
}

/// Checks `TENANT_IOC_RI_STATUS`: every field but `version` is output.
pub(super) fn status(arg: &RiStatus) -> Result<(), RequestError> {
    check_version(arg.version)?;
    let blank = RiStatus {
        version: arg.version,
        ..RiStatus::new_zeroed()
    };
    check_reserved(u32::from(*arg != blank))
}

/// Checks `TENANT_IOC_RI_RESUME` (ABI 1.8): every field but `version`
/// is output or reserved.
pub(super) fn resume(arg: &RiResume) -> Result<(), RequestError> {
    check_version(arg.version)?;
    let blank = RiResume {
        version: arg.version,
        ..RiResume::new_zeroed()
    };
    check_reserved(u32::from(*arg != blank))
}

/// Queue bytes one entry of a session with report groups of `rgs` takes:
/// header, group and the entry's own allocation.
pub fn entry_bytes(rgs: u32) -> u64 {
    size_of::<RiGroupHeader>() as u64 + gpupm_uapi::ri::group_bytes(rgs) + ENTRY_OVERHEAD
}

/// What one queued entry costs besides its bytes (its vector and slot).
const ENTRY_OVERHEAD: u64 = 64;

/// Encoded entries of one session, oldest first.
#[derive(Debug)]
pub(super) struct RiQueue {
    entries: VecDeque<Vec<u8>>,
    cap: usize,
    /// The session id every header carries.
    pub(super) session: u64,
    lost_pending: u64,
    /// Groups the queue dropped (for the status).
    pub(super) dropped: u64,
}

impl RiQueue {
    pub(super) fn new(cap: u32, session: u64) -> Self {
        RiQueue {
            entries: VecDeque::new(),
            cap: cap as usize,
            session,
            lost_pending: 0,
            dropped: 0,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Queues `entries` after `lost` groups; returns the groups dropped.
    pub(super) fn push(&mut self, lost: u64, entries: Vec<Entry>) -> u64 {
        self.lost_pending = self.lost_pending.saturating_add(lost);
        let mut dropped = 0;
        for e in entries {
            let is_group = matches!(e, Entry::Group { .. });
            // A halt marker is never dropped: it is how the tenant learns
            // the session stopped.
            if is_group && self.entries.len() >= self.cap {
                self.lost_pending += 1;
                dropped += 1;
                continue;
            }
            let (mut header, body) = match e {
                Entry::Group { number, rgs, bytes } => (
                    RiGroupHeader {
                        kind: ri_entry::GROUP,
                        rgs,
                        group: number,
                        ..RiGroupHeader::default()
                    },
                    bytes,
                ),
                Entry::Halt { groups, reason } => (
                    RiGroupHeader {
                        kind: ri_entry::HALT,
                        halt_reason: u8::try_from(reason).unwrap_or(u8::MAX),
                        group: groups,
                        ..RiGroupHeader::default()
                    },
                    Vec::new(),
                ),
            };
            header.session = self.session;
            header.size =
                u32::try_from(size_of::<RiGroupHeader>() + body.len()).unwrap_or(u32::MAX);
            header.lost_before = std::mem::take(&mut self.lost_pending);
            let mut bytes = header.as_bytes().to_vec();
            bytes.extend_from_slice(&body);
            self.entries.push_back(bytes);
        }
        self.dropped += dropped;
        dropped
    }

    /// Whole entries, oldest first, up to `max_bytes`.
    pub(super) fn take(&mut self, max_bytes: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(e) = self.entries.front() {
            if out.len() + e.len() > max_bytes {
                break;
            }
            out.extend_from_slice(e);
            self.entries.pop_front();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromBytes;

    fn group(n: u64) -> Entry {
        Entry::Group {
            number: n,
            rgs: 0,
            bytes: vec![n.to_le_bytes()[0]; 32],
        }
    }

    #[test]
    fn a_full_queue_counts_drops_in_the_next_entry_and_keeps_halts() {
        let mut q = RiQueue::new(2, 9);
        let halt = Entry::Halt {
            groups: 3,
            reason: 1,
        };
        assert_eq!(q.push(4, vec![group(5), group(6), group(7), halt]), 1);
        let out = q.take(usize::MAX);
        assert_eq!(out.len(), 64 + 64 + 32);
        let (h, _) = RiGroupHeader::read_from_prefix(&out).unwrap();
        assert_eq!(
            (h.kind, h.session, h.group, h.lost_before, h.size),
            (1, 9, 5, 4, 64)
        );
        let (h, _) = RiGroupHeader::read_from_prefix(&out[128..]).unwrap();
        assert_eq!(
            (h.kind, h.halt_reason, h.lost_before, h.size),
            (2, 1, 1, 32)
        );
        q.push(0, vec![group(8)]);
        assert!(q.take(63).is_empty(), "whole entries only");
    }

    #[test]
    fn controls_map_to_the_device_bits() {
        assert_eq!(device_bits(0), 0);
        assert_eq!(
            device_bits(ri_controls::ALL),
            ri_ctrl::EMIT
                | ri_ctrl::ABORT
                | ri_ctrl::SUPPRESS_PRIMARY
                | ri_ctrl::SUPPRESS_SECONDARY
        );
    }
}
