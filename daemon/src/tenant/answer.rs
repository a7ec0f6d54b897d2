//! What the request handlers share: argument checks (version, reserved
//! fields, event ids) and answer building (counter answers, rate samples,
//! context states), for scope reads ([`super::requests`]) and instance
//! reads ([`super::instance`]) alike.

use gpupm_uapi::events::{EVENT_COUNT, MAX_EVENTS};
use gpupm_uapi::layout::BlockSlot;
use gpupm_uapi::tenant::{
    counter_flags, ctx_state, RateSample, RATE_SAMPLES, TENANT_STRUCT_VERSION,
};
use zerocopy::{FromBytes, FromZeros};

use super::error::RequestError;
use crate::view::{CtxState, DeltaSample, Totals};

pub(super) fn check_version(version: u32) -> Result<(), RequestError> {
    if version == TENANT_STRUCT_VERSION {
        Ok(())
    } else {
        Err(RequestError::Invalid("struct version"))
    }
}

pub(super) fn check_reserved(reserved: u32) -> Result<(), RequestError> {
    if reserved == 0 {
        Ok(())
    } else {
        Err(RequestError::Invalid("reserved field not zero"))
    }
}

/// A request's `flags` field, where no flag is defined yet.
pub(super) fn check_no_flags(flags: u32) -> Result<(), RequestError> {
    if flags == 0 {
        Ok(())
    } else {
        Err(RequestError::Invalid("unknown flags"))
    }
}

pub(super) fn ctx_state_code(state: CtxState) -> u32 {
    match state {
        CtxState::Active => ctx_state::ACTIVE,
        CtxState::Destroyed => ctx_state::DESTROYED,
        CtxState::Retired => ctx_state::RETIRED,
    }
}

/// The number of event ids a request names, checked: at most
/// `MAX_EVENTS`, each in the catalogue (0 = all events).
pub(super) fn checked_events(n_events: u32, events: &[u16]) -> Result<usize, RequestError> {
    let n = usize::try_from(n_events)
        .ok()
        .filter(|&n| n <= MAX_EVENTS.min(events.len()))
        .ok_or(RequestError::Invalid("too many event ids"))?;
    if events[..n].iter().any(|&e| usize::from(e) >= EVENT_COUNT) {
        return Err(RequestError::Invalid("event id out of range"));
    }
    Ok(n)
}

/// What a counter read answers for a scope's totals.
pub(super) struct CounterAnswer {
    /// `counter_flags`.
    pub flags: u32,
    /// Commits folded in (0 when sealed).
    pub commit_seq: u64,
    /// Device cycle of the last commit (0 when sealed).
    pub cycle: u64,
    /// The values of `events` in order, or every event when none are named.
    pub values: [u64; MAX_EVENTS],
    /// The block slot as published, for a confidential scope.
    pub sealed: BlockSlot,
}

impl CounterAnswer {
    /// The answer for `totals`, selecting `events` (checked by
    /// [`checked_events`]; empty = all).
    pub(super) fn of(totals: Totals, events: &[u16]) -> Result<CounterAnswer, RequestError> {
        Ok(match totals {
            Totals::Plain {
                counters,
                commit_seq,
                cycle,
            } => {
                let mut values = [0; MAX_EVENTS];
                if events.is_empty() {
                    values = counters;
                } else {
                    for (v, &e) in values.iter_mut().zip(events) {
                        *v = counters.get(usize::from(e)).copied().unwrap_or(0);
                    }
                }
                CounterAnswer {
                    flags: 0,
                    commit_seq,
                    cycle,
                    values,
                    sealed: BlockSlot::new_zeroed(),
                }
            }
            Totals::Sealed(bytes) => CounterAnswer {
                flags: counter_flags::SEALED,
                commit_seq: 0,
                cycle: 0,
                values: [0; MAX_EVENTS],
                sealed: BlockSlot::read_from_bytes(&bytes)
                    .map_err(|_| RequestError::Internal("sealed block of the wrong size"))?,
            },
        })
    }
}

/// Copies the newest `max` of `samples` that pass `belongs` into `out`,
/// oldest first; returns how many. The filter keeps an answer inside the
/// resolved scope whatever a view returns.
pub(super) fn fill_rate_samples(
    out: &mut [RateSample; RATE_SAMPLES],
    samples: &[DeltaSample],
    max: usize,
    belongs: impl Fn(&DeltaSample) -> bool,
) -> u32 {
    let recent: Vec<&DeltaSample> = samples
        .iter()
        .filter(|s| belongs(s))
        .rev()
        .take(max)
        .collect();
    for (slot, s) in out.iter_mut().zip(recent.iter().rev()) {
        *slot = RateSample {
            start_cycle: s.start_cycle,
            end_cycle: s.end_cycle,
            flags: u32::from(s.flags),
            ctx: s.ctx,
            deltas: s.deltas,
        };
    }
    u32::try_from(recent.len()).unwrap_or(0)
}
