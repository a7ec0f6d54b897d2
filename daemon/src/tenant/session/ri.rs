//! RI sessions of the handle table: opening one on a handle, queueing the
//! entries the unit drains for it, RIEMIT and the status.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use gpupm_uapi::ri::{group_bytes, ri_status};
use gpupm_uapi::tenant::ri::{ri_state, RiGroupHeader, RiResume, RiStatus};
use gpupm_uapi::tenant::TENANT_STRUCT_VERSION;
use zerocopy::IntoBytes;

use super::reserve::{HandleSink, Reserved};
use super::{run, serve_readers, Sessions};
use crate::ri::{drain::Status, Entry, RiError, RiSink, RiTicket, RiUnit};
use crate::tenant::bounds::{SessionCharge, SessionKind, Share};
use crate::tenant::error::RequestError;
use crate::tenant::policy::Identity;
use crate::tenant::ri::{entry_bytes, RiGrant, RiQueue};

/// One RI session: its queue and its control block.
#[derive(Debug)]
pub(super) struct RiSession {
    id: u64,
    pub(super) vm: u32,
    rgs: u32,
    pub(super) queue: RiQueue,
    pub(super) ended: bool,
    ticket: Option<RiTicket>,
    _charge: SessionCharge,
}

impl Reserved for RiSession {
    fn id(&self) -> u64 {
        self.id
    }
}

impl RiSession {
    pub(super) fn readable(&self) -> bool {
        !self.queue.is_empty() || self.ended
    }

    /// The smallest read the session accepts: one whole group.
    pub(super) fn min_read(&self) -> usize {
        size_of::<RiGroupHeader>() + usize::try_from(group_bytes(self.rgs)).unwrap_or(usize::MAX)
    }
}

/// Where a session's requests go: the unit, the block and the session id
/// (`None` once the daemon's unit is gone).
type RiTarget = (Arc<RiUnit>, u32, u64);

impl RiSink for HandleSink {
    fn deliver(&self, lost: u64, entries: Vec<Entry>) -> Option<u64> {
        self.sessions
            .upgrade()?
            .ri_deliver(self.fh, self.id, lost, entries, false)
    }

    fn end(&self) {
        if let Some(s) = self.sessions.upgrade() {
            s.ri_deliver(self.fh, self.id, 0, Vec::new(), true);
        }
    }
}

fn refused(e: RiError) -> RequestError {
    match e {
        RiError::Invalid(why) => RequestError::Invalid(why),
        RiError::Busy => RequestError::Busy,
        RiError::Unsupported(why) => RequestError::Unsupported(why),
        RiError::NoBlock => RequestError::Exhausted,
        RiError::Quota => RequestError::OverQuota("the VM holds its share of RI control blocks"),
        RiError::Device(e) => {
            tracing::warn!(
                error = gpupm_fusemount::logging::one_line(e),
                "programming an RI control block failed"
            );
            RequestError::Device
        }
    }
}

impl Sessions {
    /// Makes `fh` an RI session of `grant` on `unit` for `uid`: the
    /// queue is in place before the block is programmed, and the table
    /// lock is not held while it is. The queue holds what fits of
    /// `grant.queue_groups` in the uid's and `share`'s queue budget
    /// (ENOSPC when not one group does, past the uid's RI sessions, or
    /// when the context's VM holds `quota` blocks). Answers the filled-in
    /// request: the session id (counted per uid), the VM's own block
    /// slot and the groups the queue holds.
    #[allow(clippy::too_many_arguments)]
    pub fn open_ri(
        self: &Arc<Self>,
        fh: u64,
        grant: RiGrant,
        unit: &Arc<RiUnit>,
        quota: u32,
        uid: u32,
        share: Share,
    ) -> Result<Vec<u8>, RequestError> {
        let per_group = entry_bytes(grant.config.rgs);
        let charge = self.bounds.open_session(
            uid,
            SessionKind::Ri,
            share,
            u64::from(grant.queue_groups) * per_group,
            per_group,
        )?;
        let groups = u32::try_from(charge.bytes() / per_group).unwrap_or(u32::MAX);
        let (sink, public) = self.reserve_session(fh, uid, |handle, id, public| {
            handle.ri = Some(RiSession {
                id,
                vm: grant.config.vm,
                rgs: grant.config.rgs,
                queue: RiQueue::new(groups, public),
                ended: false,
                ticket: None,
                _charge: charge,
            });
        })?;
        let id = sink.id;
        let opened = unit.open(grant.config, quota, sink);
        self.settle_session(
            fh,
            id,
            opened,
            |h| &mut h.ri,
            |s, (ticket, caps)| {
                let mut answer = grant.answer;
                answer.session = public;
                answer.block = ticket.vm_slot();
                answer.queue_groups = groups;
                answer.partition = caps.partition;
                answer.partition_version = caps.version;
                answer.partition_max_rgs = caps.max_rgs;
                answer.device_max_rgs = caps.device_max_rgs;
                answer.reserved2 = 0;
                s.ticket = Some(ticket);
                answer.as_bytes().to_vec()
            },
            refused,
        )
    }

    /// Queues entries for RI session `id` of `fh` (and marks it ended);
    /// answers the groups dropped, `None` once that session is gone.
    fn ri_deliver(
        &self,
        fh: u64,
        id: u64,
        lost: u64,
        entries: Vec<Entry>,
        end: bool,
    ) -> Option<u64> {
        let mut actions = Vec::new();
        let dropped = {
            let mut t = self.lock();
            let handle = t.handles.get_mut(&fh)?;
            let s = handle.ri.as_mut().filter(|s| s.id == id)?;
            let dropped = s.queue.push(lost, entries);
            if dropped > 0 {
                self.stats
                    .session_drops
                    .fetch_add(dropped, Ordering::Relaxed);
            }
            s.ended |= end;
            serve_readers(handle, &mut actions);
            dropped
        };
        run(actions);
        Some(dropped)
    }

    /// The block and unit of `fh`'s RI session, for a caller with `identity`.
    fn ri_target(
        &self,
        fh: u64,
        identity: &Identity,
    ) -> Result<(Option<RiTarget>, u64), RequestError> {
        let t = self.lock();
        if t.shut {
            return Err(RequestError::ShuttingDown);
        }
        let handle = t.handles.get(&fh).ok_or(RequestError::BadHandle)?;
        let s = handle
            .ri
            .as_ref()
            .ok_or(RequestError::Invalid("no RI session on this handle"))?;
        if !identity.may_see_vm(s.vm) {
            return Err(RequestError::Denied);
        }
        let target = s
            .ticket
            .as_ref()
            .and_then(|k| Some((k.unit()?, k.block(), k.id())));
        Ok((target, s.queue.dropped))
    }

    /// RIEMIT `value` into `fh`'s RI session.
    pub fn ri_emit(&self, fh: u64, identity: &Identity, value: u32) -> Result<(), RequestError> {
        let (target, _) = self.ri_target(fh, identity)?;
        let (unit, block, id) = target.ok_or(RequestError::Invalid("the session ended"))?;
        unit.emit(block, id, value).map_err(refused)
    }

    /// Re-enables `fh`'s halted RI session (ABI 1.8); answers the
    /// filled-in request.
    pub fn ri_resume(&self, fh: u64, identity: &Identity) -> Result<Vec<u8>, RequestError> {
        let (target, _) = self.ri_target(fh, identity)?;
        let (unit, block, id) = target.ok_or(RequestError::Invalid("the session ended"))?;
        let caps = unit.resume(block, id).map_err(refused)?;
        let out = RiResume {
            version: TENANT_STRUCT_VERSION,
            partition: caps.partition,
            partition_version: caps.version,
            partition_max_rgs: caps.max_rgs,
            ..RiResume::default()
        };
        Ok(out.as_bytes().to_vec())
    }

    /// `fh`'s RI session status, encoded.
    pub fn ri_status(&self, fh: u64, identity: &Identity) -> Result<Vec<u8>, RequestError> {
        let (target, dropped) = self.ri_target(fh, identity)?;
        let st = match target {
            Some((unit, block, id)) => unit.status(block, id).map_err(refused)?,
            None => None,
        };
        let mut out = RiStatus {
            version: TENANT_STRUCT_VERSION,
            ..RiStatus::default()
        };
        match st {
            Some(st) => fill_status(&mut out, &st, dropped),
            None => {
                out.state = ri_state::ENDED;
                out.lost = dropped;
            }
        }
        Ok(out.as_bytes().to_vec())
    }
}

fn fill_status(out: &mut RiStatus, st: &Status, dropped: u64) {
    out.state = [
        (ri_status::ENABLED, ri_state::ENABLED),
        (ri_status::HALTED, ri_state::HALTED),
    ]
    .iter()
    .filter(|&&(d, _)| st.status & d != 0)
    .fold(0, |acc, &(_, t)| acc | t);
    out.halt_reason = st.halt_reason;
    out.groups = st.groups;
    out.delivered = st.delivered.saturating_sub(dropped);
    out.suppressed = st.suppressed;
    out.overwritten = st.overwritten;
    out.lost = st.lost + dropped;
    out.device_max_rgs = st.caps.device_max_rgs;
    out.partition_max_rgs = st.caps.max_rgs;
    out.partition_version = st.caps.version;
    out.partition = st.caps.partition;
}
