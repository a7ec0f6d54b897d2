//! What a tenant can make the daemon hold, counted and capped
//! (`[limits]`, docs/isolation.md): handles, sessions of each kind, bytes
//! of session queues and parked reads per uid and in all, an equal share
//! of the queue budget per VM (and one for the admin), and a bucket of
//! device reads per tenant uid.
//!
//! Everything held is charged when it is taken and returned when its
//! charge ([`HandleCharge`], [`SessionCharge`], [`ParkCharge`]) is dropped,
//! so nothing leaks whatever path a handle or session takes out. The
//! answer a caller past a cap gets depends only on what its own uid (or
//! its own VM's callers) hold, and on the totals — never on what one
//! other tenant holds within its own caps: a VM's share is fixed by the
//! configuration (total ÷ (mapped VMs + 1)), not by who is active.
//!
//! Lock order: the node's handle table, then this module's lock; nothing
//! here calls out while holding it.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use gpupm_client::config::{Limits, TenantPolicy};

use super::error::RequestError;
use crate::view::{BoundsSnapshot, VmId};

/// The kinds of session a handle can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionKind {
    /// `TENANT_IOC_OPEN_STREAM`.
    Stream,
    /// `TENANT_IOC_OPEN_SAMPLING`.
    Sampling,
    /// `TENANT_IOC_OPEN_RI`.
    Ri,
}

/// Whose share of the queue budget a session's queue takes: the admin's,
/// or its VM's (whichever of the VM's callers opened it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Share {
    /// Root and the admin group.
    Admin,
    /// The callers mapped to this VM.
    Vm(VmId),
}

#[derive(Debug, Default)]
struct UidUse {
    handles: u64,
    sessions: [u64; 3],
    parked: u64,
    queued: u64,
}

impl UidUse {
    fn is_idle(&self) -> bool {
        self.handles == 0 && self.sessions == [0; 3] && self.parked == 0 && self.queued == 0
    }
}

#[derive(Debug, Default)]
struct Usage {
    uids: HashMap<u32, UidUse>,
    shares: HashMap<Share, u64>,
    handles: u64,
    sessions: [u64; 3],
    parked: u64,
    queued: u64,
}

/// A token bucket of device reads.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Refusals, by what was refused (metrics).
#[derive(Debug, Default)]
struct Refusals {
    handles: AtomicU64,
    sessions: AtomicU64,
    queued: AtomicU64,
    parked: AtomicU64,
    device_reads: AtomicU64,
    page_connections: AtomicU64,
}

/// Most rate buckets kept before idle (full) ones are dropped.
const MAX_BUCKETS: usize = 4096;

/// The accountant.
#[derive(Debug)]
pub struct Bounds {
    limits: Limits,
    share_bytes: u64,
    usage: Mutex<Usage>,
    buckets: Mutex<HashMap<u32, Bucket>>,
    refusals: Refusals,
    page_connections: AtomicU64,
}

fn kind_index(kind: SessionKind) -> usize {
    match kind {
        SessionKind::Stream => 0,
        SessionKind::Sampling => 1,
        SessionKind::Ri => 2,
    }
}

impl Bounds {
    /// The accountant of `limits`; `policy` fixes each VM's share of the
    /// queue budget (the budget over its mapped VMs and the admin).
    pub fn new(limits: Limits, policy: &TenantPolicy) -> Arc<Bounds> {
        let vms: BTreeSet<VmId> = policy.tenants.iter().map(|t| t.vm).collect();
        let shares = u64::try_from(vms.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        Arc::new(Bounds {
            share_bytes: limits.queued_bytes_total() / shares,
            limits,
            usage: Mutex::new(Usage::default()),
            buckets: Mutex::new(HashMap::new()),
            refusals: Refusals::default(),
            page_connections: AtomicU64::new(0),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes of queue one share (a VM's callers, or the admin) may reserve.
    pub fn share_bytes(&self) -> u64 {
        self.share_bytes
    }

    fn lock(&self) -> MutexGuard<'_, Usage> {
        // Every update leaves the counts consistent.
        self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refused(counter: &AtomicU64, e: RequestError) -> RequestError {
        counter.fetch_add(1, Ordering::Relaxed);
        e
    }

    /// Charges a handle opened by `uid`: EMFILE past the uid's cap,
    /// ENFILE past the total.
    pub fn open_handle(self: &Arc<Self>, uid: u32) -> Result<HandleCharge, RequestError> {
        let mut u = self.lock();
        if u.handles >= self.limits.handles_total {
            return Err(Self::refused(
                &self.refusals.handles,
                RequestError::NodeFull,
            ));
        }
        let mine = u.uids.entry(uid).or_default();
        if mine.handles >= self.limits.handles_per_uid {
            return Err(Self::refused(
                &self.refusals.handles,
                RequestError::TooManyHandles,
            ));
        }
        mine.handles += 1;
        u.handles += 1;
        Ok(HandleCharge {
            bounds: Arc::clone(self),
            uid,
        })
    }

    fn kind_cap(&self, kind: SessionKind) -> u64 {
        match kind {
            SessionKind::Stream => self.limits.stream_sessions_per_uid,
            SessionKind::Sampling => self.limits.sampling_sessions_per_uid,
            SessionKind::Ri => self.limits.ri_sessions_per_uid,
        }
    }

    /// Charges a session of `kind` opened by `uid` whose queue wants
    /// `want` bytes and is useless below `least`: grants the bytes that
    /// fit within the uid's cap, `share`'s share and the total (at most
    /// `want`). ENOSPC past the uid's sessions of this kind, past the
    /// sessions of everyone, or when not even `least` bytes fit.
    pub fn open_session(
        self: &Arc<Self>,
        uid: u32,
        kind: SessionKind,
        share: Share,
        want: u64,
        least: u64,
    ) -> Result<SessionCharge, RequestError> {
        let k = kind_index(kind);
        let mut u = self.lock();
        let total_sessions: u64 = u.sessions.iter().sum();
        let mine = u.uids.entry(uid).or_default();
        if mine.sessions[k] >= self.kind_cap(kind) || total_sessions >= self.limits.sessions_total {
            return Err(Self::refused(
                &self.refusals.sessions,
                RequestError::OverQuota("the caller holds the most sessions of this kind it may"),
            ));
        }
        let by_uid = self
            .limits
            .queued_bytes_per_uid()
            .saturating_sub(mine.queued);
        let by_share = self
            .share_bytes
            .saturating_sub(u.shares.get(&share).copied().unwrap_or(0));
        let by_total = self.limits.queued_bytes_total().saturating_sub(u.queued);
        let bytes = want.min(by_uid).min(by_share).min(by_total);
        if bytes < least {
            return Err(Self::refused(
                &self.refusals.queued,
                RequestError::OverQuota("no room left in the caller's queue budget"),
            ));
        }
        let mine = u.uids.entry(uid).or_default();
        mine.sessions[k] += 1;
        mine.queued += bytes;
        u.sessions[k] += 1;
        u.queued += bytes;
        *u.shares.entry(share).or_default() += bytes;
        Ok(SessionCharge {
            bounds: Arc::clone(self),
            uid,
            kind,
            share,
            bytes,
        })
    }

    /// Charges a read of `uid` that waits: EBUSY past the uid's cap or
    /// the total.
    pub fn park(self: &Arc<Self>, uid: u32) -> Result<ParkCharge, RequestError> {
        let mut u = self.lock();
        if u.parked >= self.limits.parked_reads_total {
            return Err(Self::refused(
                &self.refusals.parked,
                RequestError::TooManyWaiting,
            ));
        }
        let mine = u.uids.entry(uid).or_default();
        if mine.parked >= self.limits.parked_reads_per_uid {
            return Err(Self::refused(
                &self.refusals.parked,
                RequestError::TooManyWaiting,
            ));
        }
        mine.parked += 1;
        u.parked += 1;
        Ok(ParkCharge {
            bounds: Arc::clone(self),
            uid,
        })
    }

    /// Whether `uid` may make a device read now: its bucket
    /// (`device_reads_per_s` tokens, refilled continuously) holds one.
    /// EAGAIN when it is empty. Nothing is taken: [`Bounds::spend_device_read`]
    /// takes it once the request turned out to read the device.
    pub fn device_read(&self, uid: u32) -> Result<(), RequestError> {
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let tokens = self.refill(&mut b, uid).tokens;
        drop(b);
        if tokens < 1.0 {
            return Err(Self::refused(
                &self.refusals.device_reads,
                RequestError::RateLimited,
            ));
        }
        Ok(())
    }

    /// Takes one device read from `uid`'s bucket (several requests let
    /// through at once may leave it below empty: it refills from there).
    pub fn spend_device_read(&self, uid: u32) {
        let rate = self.limits.device_reads_per_s as f64;
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let k = self.refill(&mut b, uid);
        k.tokens = (k.tokens - 1.0).max(-rate);
    }

    /// `uid`'s bucket, refilled up to now.
    fn refill<'a>(&self, b: &'a mut HashMap<u32, Bucket>, uid: u32) -> &'a mut Bucket {
        let rate = self.limits.device_reads_per_s as f64;
        let now = Instant::now();
        if b.len() >= MAX_BUCKETS && !b.contains_key(&uid) {
            // A full bucket is one nobody drew from for a second: forgetting
            // it changes no answer.
            b.retain(|_, k| k.tokens + now.duration_since(k.at).as_secs_f64() * rate < rate);
        }
        let k = b.entry(uid).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        k.tokens = (k.tokens + now.duration_since(k.at).as_secs_f64() * rate).min(rate);
        k.at = now;
        k
    }

    /// Reads parked now.
    pub fn parked_reads(&self) -> u64 {
        self.lock().parked
    }

    /// A page-socket connection was refused (cap, or no tenant).
    pub fn page_refused(&self) {
        self.refusals
            .page_connections
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The page socket holds `n` connections.
    pub fn set_page_connections(&self, n: usize) {
        self.page_connections
            .store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn release(&self, uid: u32, f: impl FnOnce(&mut Usage, &mut UidUse)) {
        let mut u = self.lock();
        let mut mine = u.uids.remove(&uid).unwrap_or_default();
        f(&mut u, &mut mine);
        if !mine.is_idle() {
            u.uids.insert(uid, mine);
        }
    }

    /// Use, caps and refusals now.
    pub fn snapshot(&self) -> BoundsSnapshot {
        let u = self.lock();
        let max_uid = |f: fn(&UidUse) -> u64| u.uids.values().map(f).max().unwrap_or(0);
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BoundsSnapshot {
            limits: self.limits,
            share_bytes: self.share_bytes,
            handles: u.handles,
            stream_sessions: u.sessions[0],
            sampling_sessions: u.sessions[1],
            ri_sessions: u.sessions[2],
            parked_reads: u.parked,
            queued_bytes: u.queued,
            max_uid_handles: max_uid(|m| m.handles),
            max_uid_parked_reads: max_uid(|m| m.parked),
            max_uid_queued_bytes: max_uid(|m| m.queued),
            max_share_queued_bytes: u.shares.values().copied().max().unwrap_or(0),
            page_connections: self.page_connections.load(Ordering::Relaxed),
            refused_handles: r(&self.refusals.handles),
            refused_sessions: r(&self.refusals.sessions),
            refused_queued: r(&self.refusals.queued),
            refused_parked_reads: r(&self.refusals.parked),
            refused_device_reads: r(&self.refusals.device_reads),
            refused_page_connections: r(&self.refusals.page_connections),
        }
    }
}

/// A charged handle; dropping it returns the charge.
#[derive(Debug)]
pub struct HandleCharge {
    bounds: Arc<Bounds>,
    uid: u32,
}

impl Drop for HandleCharge {
    fn drop(&mut self) {
        self.bounds.release(self.uid, |u, mine| {
            mine.handles = mine.handles.saturating_sub(1);
            u.handles = u.handles.saturating_sub(1);
        });
    }
}

/// A charged session and its queue bytes; dropping it returns them.
#[derive(Debug)]
pub struct SessionCharge {
    bounds: Arc<Bounds>,
    uid: u32,
    kind: SessionKind,
    share: Share,
    bytes: u64,
}

impl SessionCharge {
    /// Queue bytes granted.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for SessionCharge {
    fn drop(&mut self) {
        let (k, bytes, share) = (kind_index(self.kind), self.bytes, self.share);
        self.bounds.release(self.uid, |u, mine| {
            mine.sessions[k] = mine.sessions[k].saturating_sub(1);
            mine.queued = mine.queued.saturating_sub(bytes);
            u.sessions[k] = u.sessions[k].saturating_sub(1);
            u.queued = u.queued.saturating_sub(bytes);
            if let Some(s) = u.shares.get_mut(&share) {
                *s = s.saturating_sub(bytes);
                if *s == 0 {
                    u.shares.remove(&share);
                }
            }
        });
    }
}

/// A charged parked read; dropping it returns the charge.
#[derive(Debug)]
pub struct ParkCharge {
    bounds: Arc<Bounds>,
    uid: u32,
}

impl Drop for ParkCharge {
    fn drop(&mut self) {
        self.bounds.release(self.uid, |u, mine| {
            mine.parked = mine.parked.saturating_sub(1);
            u.parked = u.parked.saturating_sub(1);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpupm_client::config::TenantMap;

    fn bounds(limits: Limits) -> Arc<Bounds> {
        let tenant = |vm, uid| TenantMap {
            vm,
            uid: Some(uid),
            gid: None,
        };
        Bounds::new(
            limits,
            &TenantPolicy {
                admin_gid: None,
                tenants: vec![tenant(1, 1001), tenant(2, 1002), tenant(3, 1003)],
            },
        )
    }

    #[test]
    fn handles_are_capped_per_uid_then_in_all_and_come_back_when_dropped() {
        let b = bounds(Limits {
            handles_per_uid: 2,
            handles_total: 3,
            ..Limits::default()
        });
        let a1 = b.open_handle(1001).unwrap();
        let a2 = b.open_handle(1001).unwrap();
        assert_eq!(b.open_handle(1001).unwrap_err().errno(), libc::EMFILE);
        let c1 = b.open_handle(1002).unwrap();
        assert_eq!(b.open_handle(1003).unwrap_err().errno(), libc::ENFILE);
        drop(a1);
        let a3 = b.open_handle(1001).unwrap();
        assert_eq!(b.snapshot().handles, 3);
        assert_eq!(b.snapshot().refused_handles, 2);
        drop((a2, a3, c1));
        assert_eq!(b.snapshot().handles, 0);
        assert!(b.lock().uids.is_empty(), "idle uids are forgotten");
    }

    #[test]
    fn queues_are_clamped_to_the_uid_cap_and_the_vm_share_then_refused() {
        // 4 MiB in all over VMs 1..=3 and the admin: 1 MiB each.
        let b = bounds(Limits {
            queued_mib_total: 4,
            queued_mib_per_uid: 3,
            ..Limits::default()
        });
        assert_eq!(b.share_bytes(), 1 << 20);
        let s = |uid, share, want| b.open_session(uid, SessionKind::Sampling, share, want, 1000);
        let first = s(1001, Share::Vm(1), 700_000).unwrap();
        assert_eq!(first.bytes(), 700_000);
        let clamped = s(1001, Share::Vm(1), 700_000).unwrap();
        assert_eq!(clamped.bytes(), (1 << 20) - 700_000);
        let e = s(1001, Share::Vm(1), 700_000).unwrap_err();
        assert_eq!(e.errno(), libc::ENOSPC);
        // Another VM's share is untouched by VM 1's use.
        assert_eq!(s(1002, Share::Vm(2), 700_000).unwrap().bytes(), 700_000);
        drop(first);
        assert_eq!(s(1001, Share::Vm(1), 700_000).unwrap().bytes(), 700_000);
    }

    #[test]
    fn sessions_of_each_kind_and_parked_reads_are_capped_per_uid() {
        let b = bounds(Limits {
            ri_sessions_per_uid: 1,
            parked_reads_per_uid: 2,
            parked_reads_total: 3,
            ..Limits::default()
        });
        let ri = b
            .open_session(1001, SessionKind::Ri, Share::Vm(1), 10, 1)
            .unwrap();
        let e = b
            .open_session(1001, SessionKind::Ri, Share::Vm(1), 10, 1)
            .unwrap_err();
        assert_eq!(e.errno(), libc::ENOSPC);
        let stream = b
            .open_session(1001, SessionKind::Stream, Share::Vm(1), 10, 1)
            .unwrap();
        let p: Vec<_> = (0..2).map(|_| b.park(1001).unwrap()).collect();
        assert_eq!(b.park(1001).unwrap_err().errno(), libc::EBUSY);
        let q = b.park(1002).unwrap();
        assert_eq!(b.park(1003).unwrap_err().errno(), libc::EBUSY);
        assert_eq!(b.snapshot().parked_reads, 3);
        drop((ri, stream, p, q));
        assert_eq!(b.snapshot().parked_reads, 0);
        assert!(b.lock().uids.is_empty());
    }

    #[test]
    fn device_reads_past_the_bucket_are_eagain_and_refill_with_time() {
        let b = bounds(Limits {
            device_reads_per_s: 5,
            ..Limits::default()
        });
        for _ in 0..5 {
            b.device_read(1001).unwrap();
            b.spend_device_read(1001);
        }
        assert_eq!(b.device_read(1001).unwrap_err().errno(), libc::EAGAIN);
        // Asking takes nothing; another uid has its own bucket.
        for _ in 0..10 {
            b.device_read(1002).unwrap();
        }
        // A bucket drawn down at some time refills at the rate.
        b.buckets.lock().unwrap().get_mut(&1001).unwrap().at -= std::time::Duration::from_secs(1);
        b.device_read(1001).unwrap();
    }
}
