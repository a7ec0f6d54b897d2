//! Sampling sessions of the handle table: opening one on a handle and
//! queueing the records the plane routes to it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::reserve::{HandleSink, Reserved};
use super::{run, serve_readers, SampleQueue, SampleSession, Sessions};
use crate::sampling::{Outgoing, Plane, SampleSink};
use crate::tenant::bounds::{SessionKind, Share};
use crate::tenant::error::RequestError;
use crate::tenant::sampling::{SamplingGrant, MIN_QUEUE_RECORDS};

impl SampleSink for HandleSink {
    fn deliver(&self, kind: u16, lost: u64, records: &[Outgoing<'_>]) -> bool {
        self.sessions
            .upgrade()
            .is_some_and(|s| s.deliver_samples(self.fh, self.id, kind, lost, records))
    }
}

impl Reserved for SampleSession {
    fn id(&self) -> u64 {
        self.id
    }
}

impl Sessions {
    /// Makes `fh` a sampling session of `grant` on `plane` for `uid`:
    /// the queue is in place before the samplers are programmed, and the
    /// table lock is not held while they are. The queue holds what fits
    /// of `grant.queue_records` in the uid's and `share`'s queue budget
    /// (ENOSPC when not even [`MIN_QUEUE_RECORDS`] do, or past the uid's
    /// sampling sessions). Answers the filled-in request: the records the
    /// queue holds, the session id (counted per uid) and the caller's own
    /// requested rates, a tenant's raised to its floors
    /// (`tenant_min_sample_period`, `tenant_min_branch_every`) — nothing
    /// of other sessions on the partition.
    pub fn open_sampling(
        self: &Arc<Self>,
        fh: u64,
        mut grant: SamplingGrant,
        plane: &Arc<Plane>,
        uid: u32,
        share: Share,
    ) -> Result<Vec<u8>, RequestError> {
        if share != Share::Admin {
            let limits = self.bounds.limits();
            grant.demand = grant.demand.at_least(
                clamp_u32(limits.tenant_min_sample_period),
                clamp_u32(limits.tenant_min_branch_every),
            );
        }
        let per_record = grant.record_bytes();
        let charge = self.bounds.open_session(
            uid,
            SessionKind::Sampling,
            share,
            u64::from(grant.queue_records) * per_record,
            u64::from(MIN_QUEUE_RECORDS) * per_record,
        )?;
        let records = u32::try_from(charge.bytes() / per_record).unwrap_or(u32::MAX);
        let (sink, public) = self.reserve_session(fh, uid, |handle, id, _| {
            handle.sampling = Some(SampleSession {
                id,
                vm: grant.target.vm,
                queue: SampleQueue::new(records, per_record),
                ticket: None,
                _charge: charge,
            });
        })?;
        let id = sink.id;
        let opened = plane.open(grant.target, grant.demand, public, sink);
        self.settle_session(
            fh,
            id,
            opened,
            |h| &mut h.sampling,
            |s, ticket| {
                let mut answer = grant.answer;
                answer.session = public;
                answer.queue_records = records;
                answer.device_period = grant.demand.period;
                answer.device_dither = grant.demand.dither;
                answer.device_branch_every = grant.demand.branch_every;
                answer.clock_khz = plane.clock_khz();
                s.ticket = Some(ticket);
                zerocopy::IntoBytes::as_bytes(answer.as_ref()).to_vec()
            },
            |e| {
                tracing::warn!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "programming the samplers failed"
                );
                RequestError::Device
            },
        )
    }

    /// Queues records for sampling session `id` of `fh`; false once that
    /// session is gone.
    fn deliver_samples(
        &self,
        fh: u64,
        id: u64,
        kind: u16,
        lost: u64,
        records: &[Outgoing<'_>],
    ) -> bool {
        let mut actions = Vec::new();
        {
            let mut t = self.lock();
            let Some(handle) = t.handles.get_mut(&fh) else {
                return false;
            };
            let Some(s) = handle.sampling.as_mut().filter(|s| s.id == id) else {
                return false;
            };
            let dropped = s.queue.push(kind, lost, records);
            if dropped > 0 {
                self.stats
                    .session_drops
                    .fetch_add(dropped, Ordering::Relaxed);
            }
            serve_readers(handle, &mut actions);
        }
        run(actions);
        true
    }
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
