//! The device side of the sampling plane: programming a partition's
//! samplers and sizing its buffers from the plan ([`SamplerDevice`] for
//! the device node), and draining the buffers.
//!
//! Buffers are sized with `gpupm_client::sampling::plan` for the drain
//! interval [`DRAIN_INTERVAL`]: the sampling thread drains every buffer at
//! least that often (and at once on a watermark or overflow interrupt),
//! so at the planned rates a buffer cannot fill. Resizing a buffer empties
//! it, so reprogramming first drains what the buffers hold; those records
//! are kept and routed by the next drain.
//!
//! Lost records per session scope: for every watched scope of a
//! partition, each drain selects the scope (`SAMP_LOST_SELECT`) and reads
//! what each buffer lost for it (`BUF_LOST_SELECTED`) in the same atomic
//! batch as the buffer's head, tail and `BUF_LOST`; the difference from
//! the previous read is the scope's share of the batch's losses.
//!
//! Drain epochs: every batch is stamped with the epoch it was read in,
//! and a session's open cuts the partition's buffers (drains them) and
//! starts a new epoch, so that the session is handed only what was
//! written after it opened ([`SamplerDevice::cut`]).
//!
//! One lock ([`DevSampler`]'s) serialises programming and draining of the
//! buffers; routing runs after it is released.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use gpupm_client::ops::{read32, read64, reg32, write32};
use gpupm_client::sampling::plan::{self, SamplerSettings};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::sampling::{self as s, buf_kind, samp, samp_ctrl};
use gpupm_uapi::tenant::sampling::sample_kind;

use super::records::Batch;
use super::{LostScope, SamplerDevice, Settings};

/// Longest time between two drains of a sample buffer; buffers are sized
/// for it.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(plan::DEFAULT_DRAIN_MS);

/// Slots read per window access.
const CHUNK_BYTES: usize = 256 << 10;

/// What the daemon knows of one buffer.
#[derive(Clone, Copy, Debug, Default)]
struct BufState {
    /// Capacity the daemon programmed (0 = none).
    cap: u32,
    /// `BUF_LOST` at the previous drain.
    last_lost: u64,
}

/// A scope whose lost records are counted.
#[derive(Clone, Copy, Debug, Default)]
struct Watched {
    /// Sessions watching it.
    sessions: u32,
    /// `BUF_LOST_SELECTED` per buffer kind at the previous read.
    seen: [u64; 2],
}

/// The `SAMP_LOST_SELECT` value naming `scope`.
fn select_of(scope: LostScope) -> u32 {
    match scope {
        LostScope::Ctx(c) => c,
        LostScope::Vm(v) => v | s::lost_select::VM,
    }
}

#[derive(Debug, Default)]
struct State {
    /// Per partition slot and kind.
    bufs: std::collections::BTreeMap<(u32, u32), BufState>,
    /// Watched scopes per partition slot.
    watched: std::collections::BTreeMap<(u32, LostScope), Watched>,
    /// Records drained while reprogramming, routed by the next drain.
    pending: Vec<Batch>,
    /// Read buffer, kept across drains.
    scratch: Vec<u8>,
    /// Stamped on every batch read ([`Batch::epoch`]); a cut advances it.
    epoch: u64,
}

/// The samplers of the device node.
#[derive(Debug)]
pub struct DevSampler {
    dev: Arc<DevNode>,
    clock_khz: u32,
    state: Mutex<State>,
    /// Notified when a buffer is programmed (and when the engine stops):
    /// the sampling thread sleeps on it while no buffer exists.
    programmed: Condvar,
}

/// `sample_kind` of buffer kind `k`.
fn kind_bit(k: u32) -> u16 {
    if k == buf_kind::BRANCH {
        sample_kind::BRANCH_STACK
    } else {
        sample_kind::CYCLE
    }
}

impl DevSampler {
    /// Samplers of `dev`, whose nominal clock is `clock_khz`.
    pub fn new(dev: Arc<DevNode>, clock_khz: u32) -> Self {
        DevSampler {
            dev,
            clock_khz,
            state: Mutex::new(State::default()),
            programmed: Condvar::new(),
        }
    }

    /// Returns at once while a buffer is programmed; otherwise sleeps
    /// until one is or `stop` is set (and [`DevSampler::wake`] called).
    /// Returns whether it slept.
    pub fn wait_for_buffers(&self, stop: &AtomicBool) -> bool {
        let mut st = self.lock();
        let mut slept = false;
        while !stop.load(Ordering::Acquire) && !st.bufs.values().any(|b| b.cap > 0) {
            st = self.programmed.wait(st).unwrap_or_else(|e| e.into_inner());
            slept = true;
        }
        slept
    }

    /// Wakes [`DevSampler::wait_for_buffers`] to look at its stop flag.
    pub fn wake(&self) {
        let _st = self.lock();
        self.programmed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drains every buffer of partition `p` (and what reprogramming kept).
    pub fn drain(&self, p: u32) -> Result<Vec<Batch>, DevError> {
        let mut st = self.lock();
        let mut out = std::mem::take(&mut st.pending);
        for k in [buf_kind::BRANCH, buf_kind::PC] {
            if let Some(b) = self.drain_one(&mut st, p, k)? {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// Drains both buffers of partition `p` into `pending`, routed by the
    /// next drain (with the epoch they were read in).
    fn keep_pending(&self, st: &mut State, p: u32) -> Result<(), DevError> {
        for k in [buf_kind::BRANCH, buf_kind::PC] {
            if let Some(b) = self.drain_one(st, p, k)? {
                st.pending.push(b);
            }
        }
        Ok(())
    }

    /// Partitions with a buffer.
    pub fn partitions(&self) -> Vec<u32> {
        let st = self.lock();
        let mut ps: Vec<u32> = st
            .bufs
            .iter()
            .filter(|(_, b)| b.cap > 0)
            .map(|(&(p, _), _)| p)
            .collect();
        ps.dedup();
        ps
    }

    fn drain_one(&self, st: &mut State, p: u32, k: u32) -> Result<Option<Batch>, DevError> {
        let b = st.bufs.get(&(p, k)).copied().unwrap_or_default();
        if b.cap == 0 {
            return Ok(None);
        }
        let scopes: Vec<LostScope> = st
            .watched
            .range((p, LostScope::Ctx(0))..=(p, LostScope::Vm(u32::MAX)))
            .map(|(&(_, scope), _)| scope)
            .collect();
        let mut regs = vec![
            read32(samp(p, s::buf(k, s::BUF_HEAD))),
            read32(samp(p, s::buf(k, s::BUF_TAIL))),
            read64(samp(p, s::buf(k, s::BUF_LOST))),
            read64(samp(p, s::buf(k, s::BUF_ADDR))),
        ];
        for &scope in &scopes {
            regs.push(write32(samp(p, s::SAMP_LOST_SELECT), select_of(scope)));
            regs.push(read64(samp(p, s::buf(k, s::BUF_LOST_SELECTED))));
        }
        self.dev.batch(&mut regs)?;
        let (head, tail) = (reg32(regs[0].value), reg32(regs[1].value));
        let (lost, addr) = (regs[2].value, regs[3].value);
        let mut lost_by = Vec::new();
        for (i, &scope) in scopes.iter().enumerate() {
            let now = regs[5 + 2 * i].value;
            if let Some(w) = st.watched.get_mut(&(p, scope)) {
                let delta = now.saturating_sub(w.seen[k as usize]);
                w.seen[k as usize] = now;
                if delta > 0 {
                    lost_by.push((scope, delta));
                }
            }
        }
        let fill = head.wrapping_sub(tail).min(b.cap);
        let slot = usize::try_from(s::slot_size(k)).unwrap_or(usize::MAX);
        let mut batch = Batch {
            partition: p,
            kind: kind_bit(k),
            slot_size: slot,
            bytes: Vec::with_capacity(fill as usize * slot),
            lost: lost.saturating_sub(b.last_lost),
            lost_by,
            epoch: st.epoch,
        };
        let mut scratch = std::mem::take(&mut st.scratch);
        let per_chunk = u32::try_from((CHUNK_BYTES / slot).max(1)).unwrap_or(u32::MAX);
        let mut done = 0u32;
        while done < fill {
            let idx = tail.wrapping_add(done) % b.cap;
            let n = (fill - done).min(b.cap - idx).min(per_chunk);
            scratch.resize(n as usize * slot, 0);
            self.dev
                .window(addr + u64::from(idx) * slot as u64, &mut scratch)?;
            batch.bytes.extend_from_slice(&scratch);
            done += n;
        }
        st.scratch = scratch;
        if fill > 0 {
            self.dev.batch(&mut [write32(
                samp(p, s::buf(k, s::BUF_TAIL)),
                tail.wrapping_add(fill),
            )])?;
        }
        if let Some(b) = st.bufs.get_mut(&(p, k)) {
            b.last_lost = lost;
        }
        Ok((fill > 0 || batch.lost > 0).then_some(batch))
    }

    /// Capacities (records) of the branch and PC buffers for `settings`.
    fn capacities(&self, p: u32, settings: &Settings) -> Result<(u32, u32), DevError> {
        // 0: no program runs on the partition, so no branch is taken.
        let gap = self.dev.read32(samp(p, s::SAMP_MIN_BRANCH_GAP))?.max(1);
        let planned = plan::plan(
            &SamplerSettings {
                partition: p,
                clock_khz: self.clock_khz,
                cycle_period: settings.cycle.map(|(period, _)| period),
                branch_every: settings.branch_every,
                min_branch_gap: u64::from(gap),
            },
            plan::DEFAULT_DRAIN_MS * 1000,
            plan::DEFAULT_MARGIN_PCT,
        );
        for b in planned.iter().filter(|b| b.clamped) {
            // The settings are valid; the span is what limits them, so an
            // operator should learn that losses (counted in BUF_LOST) are
            // expected rather than see them unexplained.
            tracing::warn!(
                partition = p,
                record_type = b.record_type.name(),
                planned_per_interval = b.events_per_interval,
                records = b.records,
                "sample buffer clamped to the partition's sample span; records may be lost"
            );
        }
        let cap_of = |t| {
            planned
                .iter()
                .find(|b| b.record_type == t)
                .map_or(0, |b| u32::try_from(b.records).unwrap_or(u32::MAX))
        };
        Ok((
            cap_of(plan::RecordType::BranchStack),
            cap_of(plan::RecordType::Cycle),
        ))
    }
}

impl SamplerDevice for DevSampler {
    fn program(&self, p: u32, settings: &Settings) -> Result<(), DevError> {
        let mut st = self.lock();
        let (branch_cap, pc_cap) = self.capacities(p, settings)?;
        // Stop both samplers and keep what the buffers hold.
        self.dev.write32(samp(p, s::SAMP_CTRL), 0)?;
        self.keep_pending(&mut st, p)?;
        // Empty both first: a new base must not overlap the other
        // buffer's old place.
        let mut ops = vec![
            write32(samp(p, s::buf(buf_kind::BRANCH, s::BUF_CAP)), 0),
            write32(samp(p, s::buf(buf_kind::PC, s::BUF_CAP)), 0),
        ];
        let mut at = 0u64;
        for (k, cap) in [(buf_kind::BRANCH, branch_cap), (buf_kind::PC, pc_cap)] {
            ops.push(write32(samp(p, s::buf(k, s::BUF_BASE)), reg_u32(at)));
            ops.push(write32(samp(p, s::buf(k, s::BUF_CAP)), cap));
            at += (u64::from(cap) * s::slot_size(k)).next_multiple_of(s::BUF_ALIGN);
            st.bufs.insert((p, k), BufState { cap, last_lost: 0 });
        }
        // A `BUF_CAP` write zeroes the device's lost counts.
        for (_, w) in st
            .watched
            .range_mut((p, LostScope::Ctx(0))..=(p, LostScope::Vm(u32::MAX)))
        {
            w.seen = [0; 2];
        }
        let mut ctrl = 0;
        if let Some(n) = settings.branch_every {
            ops.push(write32(samp(p, s::SAMP_BRANCH_PERIOD), n));
            ctrl |= samp_ctrl::BRANCH_ENABLE;
        }
        if let Some((period, dither)) = settings.cycle {
            ops.push(write32(samp(p, s::SAMP_CYCLE_PERIOD), period));
            ops.push(write32(samp(p, s::SAMP_CYCLE_DITHER), dither));
            ctrl |= samp_ctrl::CYCLE_ENABLE;
        }
        ops.push(write32(samp(p, s::SAMP_CTRL), ctrl));
        let res = self.dev.batch(&mut ops);
        // Even after an error: `bufs` says what the daemon programmed.
        self.programmed.notify_all();
        res
    }

    fn cut(&self, p: u32) -> Result<u64, DevError> {
        let mut st = self.lock();
        self.keep_pending(&mut st, p)?;
        st.epoch += 1;
        Ok(st.epoch)
    }

    fn watch_lost(&self, p: u32, scope: LostScope, on: bool) -> Result<(), DevError> {
        let mut st = self.lock();
        if !on {
            if let Some(w) = st.watched.get_mut(&(p, scope)) {
                w.sessions = w.sessions.saturating_sub(1);
                if w.sessions == 0 {
                    st.watched.remove(&(p, scope));
                }
            }
            return Ok(());
        }
        if let Some(w) = st.watched.get_mut(&(p, scope)) {
            w.sessions += 1;
            return Ok(());
        }
        // Count from now: what the buffers lost for the scope so far is
        // no session's.
        let mut regs = [
            write32(samp(p, s::SAMP_LOST_SELECT), select_of(scope)),
            read64(samp(p, s::buf(buf_kind::BRANCH, s::BUF_LOST_SELECTED))),
            read64(samp(p, s::buf(buf_kind::PC, s::BUF_LOST_SELECTED))),
        ];
        self.dev.batch(&mut regs)?;
        st.watched.insert(
            (p, scope),
            Watched {
                sessions: 1,
                seen: [regs[1].value, regs[2].value],
            },
        );
        Ok(())
    }
}

fn reg_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
