//! Sampling sessions on the tenant node: checking
//! `TENANT_IOC_OPEN_SAMPLING`, and a session's queue of encoded records.
//!
//! A session's records are queued already encoded (a `SampleHeader`
//! followed by the payload), so a `read()` copies whole records out up to
//! its size. The queue holds at most the session's `queue_records`;
//! records that do not fit are counted and reported in the next record of
//! their kind (`lost_before`), together with what the device lost on the
//! session's partition buffer.

use std::collections::VecDeque;

use gpupm_uapi::tenant::sampling::{
    sample_kind, OpenSampling, SampleHeader, DEFAULT_SESSION_RECORDS, MAX_BRANCH_EVERY,
    MAX_SAMPLE_DITHER, MAX_SAMPLE_PERIOD, MAX_SESSION_RECORDS, MIN_SAMPLE_PERIOD,
};
use zerocopy::IntoBytes;

use super::answer::{check_no_flags, check_reserved, check_version};
use super::authz::{recheck, resolve};
use super::error::RequestError;
use super::policy::Identity;
use crate::sampling::{Demand, Outgoing, Target};
use crate::view::{CounterView, Scope, Totals};

/// Bytes of the largest record a session can return (a sealed branch
/// slot and its header): the smallest `read()` a session accepts.
pub const MAX_RECORD_BYTES: usize =
    size_of::<SampleHeader>() + size_of::<gpupm_uapi::sampling::BranchSlot>();
/// Fewest records a session's queue is worth opening with: below this
/// the request is refused (ENOSPC) rather than clamped.
pub const MIN_QUEUE_RECORDS: u32 = 16;

/// A sampling session the caller was granted.
#[derive(Debug)]
pub struct SamplingGrant {
    /// Where it samples.
    pub target: Target,
    /// What it asked for.
    pub demand: Demand,
    /// Records its queue holds.
    pub queue_records: u32,
    /// The request, whose output fields the node fills in.
    pub answer: Box<OpenSampling>,
}

impl SamplingGrant {
    /// Queue bytes one record of this session can take: its largest
    /// record (by kinds, sealed or not), header and length included.
    pub fn record_bytes(&self) -> u64 {
        use gpupm_uapi::sampling::{BranchSlot, BranchStackRecord, PcRecord, PcSlot};
        let sealed = self.answer.confidential != 0;
        let branch = self.demand.kinds & sample_kind::BRANCH_STACK != 0;
        let payload = match (sealed, branch) {
            (true, true) => size_of::<BranchSlot>(),
            (true, false) => size_of::<PcSlot>(),
            (false, true) => size_of::<BranchStackRecord>(),
            (false, false) => size_of::<PcRecord>(),
        };
        (size_of::<SampleHeader>() + payload + size_of::<u32>()) as u64
    }
}

/// Checks `TENANT_IOC_OPEN_SAMPLING`: shape first, then the scope.
pub(super) fn open_sampling(
    view: &dyn CounterView,
    identity: &Identity,
    arg: Box<OpenSampling>,
) -> Result<SamplingGrant, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    check_no_flags(arg.flags)?;
    let demand = checked_demand(&arg)?;
    if arg.queue_records > MAX_SESSION_RECORDS {
        return Err(RequestError::Invalid("queue_records too large"));
    }
    let r = resolve(view, identity, arg.scope, arg.id, false)?;
    let vm =
        r.vm.ok_or(RequestError::Internal("sampling scope without a VM"))?;
    let partition = view
        .vm_partition(vm)
        .ok_or(RequestError::Internal("VM without a partition"))?;
    let confidential = matches!(view.totals(Scope::Vm(vm)), Some(Totals::Sealed(_)));
    recheck(view, identity, r)?;
    let ctx = match r.scope {
        Scope::Ctx(c) => Some(c),
        _ => None,
    };
    let mut answer = arg;
    answer.program = ctx.and_then(|c| view.ctx_program(c)).unwrap_or(0);
    answer.reserved2 = 0;
    answer.partition = partition;
    answer.confidential = u32::from(confidential);
    Ok(SamplingGrant {
        target: Target { partition, vm, ctx },
        demand,
        queue_records: if answer.queue_records == 0 {
            DEFAULT_SESSION_RECORDS
        } else {
            answer.queue_records
        },
        answer,
    })
}

fn checked_demand(arg: &OpenSampling) -> Result<Demand, RequestError> {
    let kinds = u16::try_from(arg.kinds)
        .ok()
        .filter(|&k| k != 0 && k & !sample_kind::ALL == 0)
        .ok_or(RequestError::Invalid("record kinds"))?;
    if kinds & sample_kind::CYCLE != 0 {
        if !(MIN_SAMPLE_PERIOD..=MAX_SAMPLE_PERIOD).contains(&arg.period) {
            return Err(RequestError::Invalid("period out of range"));
        }
        if arg.dither > MAX_SAMPLE_DITHER {
            return Err(RequestError::Invalid("dither out of range"));
        }
    } else if arg.period != 0 || arg.dither != 0 {
        return Err(RequestError::Invalid(
            "period or dither without cycle samples",
        ));
    }
    if kinds & sample_kind::BRANCH_STACK != 0 {
        if !(1..=MAX_BRANCH_EVERY).contains(&arg.branch_every) {
            return Err(RequestError::Invalid("branch_every out of range"));
        }
    } else if arg.branch_every != 0 {
        return Err(RequestError::Invalid("branch_every without branch stacks"));
    }
    Ok(Demand {
        kinds,
        period: arg.period,
        dither: arg.dither,
        branch_every: arg.branch_every,
    })
}

/// Encoded records of one session, oldest first.
#[derive(Debug)]
pub(super) struct SampleQueue {
    bytes: VecDeque<u8>,
    sizes: VecDeque<u32>,
    /// Most records queued.
    cap: usize,
    /// Most bytes queued (the queue never reallocates past it).
    cap_bytes: usize,
    next_seq: u64,
    /// Lost records not yet reported, per kind (branch, cycle).
    lost_pending: [u64; 2],
}

/// Makes room in `q` for `more` items, doubling its capacity as a vector
/// does but never past `cap` items (what its session was charged for).
fn grow_within<T>(q: &mut VecDeque<T>, more: usize, cap: usize) {
    let need = q.len() + more;
    if need > q.capacity() {
        let want = q.capacity().saturating_mul(2).max(need).min(cap.max(need));
        q.reserve_exact(want - q.len());
    }
}

fn kind_index(kind: u16) -> usize {
    usize::from(kind == sample_kind::CYCLE)
}

impl SampleQueue {
    /// A queue of `cap` records of at most `record_bytes` each (as
    /// [`SamplingGrant::record_bytes`] counts them): what the session was
    /// charged for. Its memory grows as records queue up (a reader that
    /// keeps up keeps it small) and never past that.
    pub(super) fn new(cap: u32, record_bytes: u64) -> Self {
        let cap = cap as usize;
        let cap_bytes = cap.saturating_mul(
            usize::try_from(record_bytes)
                .unwrap_or(usize::MAX)
                .saturating_sub(size_of::<u32>()),
        );
        SampleQueue {
            bytes: VecDeque::new(),
            sizes: VecDeque::new(),
            cap,
            cap_bytes,
            next_seq: 1,
            lost_pending: [0; 2],
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// Queues `records` of `kind` after `lost` device losses; returns how
    /// many the queue had to drop.
    pub(super) fn push(&mut self, kind: u16, lost: u64, records: &[Outgoing<'_>]) -> u64 {
        let k = kind_index(kind);
        self.lost_pending[k] = self.lost_pending[k].saturating_add(lost);
        let mut dropped = 0;
        for r in records {
            let size = size_of::<SampleHeader>() + r.payload.len();
            if self.sizes.len() >= self.cap || self.bytes.len() + size > self.cap_bytes {
                self.lost_pending[k] += 1;
                dropped += 1;
                continue;
            }
            grow_within(&mut self.bytes, size, self.cap_bytes);
            grow_within(&mut self.sizes, 1, self.cap);
            let header = SampleHeader {
                kind: r.kind,
                flags: r.flags,
                size: u32::try_from(size).unwrap_or(u32::MAX),
                seq: self.next_seq,
                lost_before: std::mem::take(&mut self.lost_pending[k]),
            };
            self.next_seq += 1;
            self.bytes.extend(header.as_bytes());
            self.bytes.extend(r.payload);
            self.sizes.push_back(header.size);
        }
        dropped
    }

    /// Whole records, oldest first, up to `max_bytes`.
    pub(super) fn take(&mut self, max_bytes: usize) -> Vec<u8> {
        let mut n = 0usize;
        while let Some(&s) = self.sizes.front() {
            if n + s as usize > max_bytes {
                break;
            }
            n += s as usize;
            self.sizes.pop_front();
        }
        self.bytes.drain(..n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromBytes;

    fn rec(payload: &[u8]) -> Outgoing<'_> {
        Outgoing {
            kind: sample_kind::CYCLE,
            flags: 0,
            payload,
        }
    }

    #[test]
    fn a_full_queue_reports_device_and_queue_losses_in_the_next_record() {
        let mut q = SampleQueue::new(2, 72 + 4);
        let p = [7u8; 48];
        assert_eq!(
            q.push(sample_kind::CYCLE, 3, &[rec(&p), rec(&p), rec(&p)]),
            1
        );
        let out = q.take(1000);
        assert_eq!(out.len(), 2 * 72);
        let (h, _) = SampleHeader::read_from_prefix(&out).unwrap();
        assert_eq!((h.seq, h.lost_before, h.size), (1, 3, 72));
        assert_eq!(q.push(sample_kind::CYCLE, 0, &[rec(&p)]), 0);
        // Reads return whole records only.
        assert!(q.take(71).is_empty());
        let out = q.take(72);
        let (h, _) = SampleHeader::read_from_prefix(&out).unwrap();
        assert_eq!((h.seq, h.lost_before), (3, 1));
        assert!(q.is_empty());
    }

    #[test]
    fn a_queue_grows_with_its_records_and_never_past_its_charge() {
        let mut q = SampleQueue::new(1000, 72 + 4);
        let p = [1u8; 48];
        q.push(sample_kind::CYCLE, 0, &[rec(&p)]);
        assert!(q.bytes.capacity() < 1000 * 72, "nothing allocated ahead");
        let many: Vec<Outgoing<'_>> = (0..1500).map(|_| rec(&p)).collect();
        assert_eq!(q.push(sample_kind::CYCLE, 0, &many), 501);
        assert_eq!(q.sizes.len(), 1000);
        assert!(q.bytes.capacity() <= 1000 * 72, "{}", q.bytes.capacity());
        assert!(q.sizes.capacity() <= 1000, "{}", q.sizes.capacity());
    }
}
