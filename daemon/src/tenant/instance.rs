//! `TENANT_IOC_READ_INSTANCE` and `TENANT_IOC_READ_INSTANCE_RATES`: reads
//! of one context instance, named by (id, created cycle) — any instance the
//! daemon lists, not only the newest one of an id.
//!
//! Same order of checks as every request (see [`super::requests`]): shape
//! of the argument, then authorisation, then existence; nothing is changed
//! by any answer.

use gpupm_uapi::tenant::{counter_flags, ReadInstance, ReadInstanceRates, RATE_SAMPLES};
use zerocopy::FromZeros;

use super::answer::{
    check_reserved, check_version, checked_events, ctx_state_code, fill_rate_samples, CounterAnswer,
};
use super::authz::{missing, resolve_instance};
use super::error::RequestError;
use super::policy::Identity;
use crate::view::{CounterView, Totals};

pub(super) fn read_instance(
    view: &dyn CounterView,
    identity: &Identity,
    mut arg: Box<ReadInstance>,
) -> Result<Box<ReadInstance>, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    check_reserved(arg.reserved2)?;
    let n = checked_events(arg.n_events, &arg.events)?;
    let info = resolve_instance(
        view,
        identity,
        arg.scope,
        arg.id,
        arg.flags,
        arg.created_cycle,
    )?;
    let totals = view
        .instance_totals(info.ctx, info.created_cycle)
        .ok_or_else(|| missing(identity))?;
    let answer = CounterAnswer::of(totals, &arg.events[..n])?;
    arg.created_cycle = info.created_cycle;
    arg.state = ctx_state_code(info.state);
    arg.vm = info.vm;
    arg.out_flags = answer.flags;
    arg.commit_seq = answer.commit_seq;
    arg.cycle = answer.cycle;
    arg.values = answer.values;
    arg.sealed = answer.sealed;
    Ok(arg)
}

pub(super) fn read_instance_rates(
    view: &dyn CounterView,
    identity: &Identity,
    mut arg: Box<ReadInstanceRates>,
) -> Result<Box<ReadInstanceRates>, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    check_reserved(arg.reserved2)?;
    let max = usize::try_from(arg.max).unwrap_or(usize::MAX);
    if !(1..=RATE_SAMPLES).contains(&max) {
        return Err(RequestError::Invalid("max samples out of range"));
    }
    let info = resolve_instance(
        view,
        identity,
        arg.scope,
        arg.id,
        arg.flags,
        arg.created_cycle,
    )?;
    let samples = view
        .instance_recent(info.ctx, info.created_cycle, max)
        .ok_or_else(|| missing(identity))?;
    let sealed = matches!(
        view.instance_totals(info.ctx, info.created_cycle),
        Some(Totals::Sealed(_))
    ) || samples.iter().any(|s| s.sealed.is_some());
    arg.created_cycle = info.created_cycle;
    arg.count = 0;
    arg.out_flags = 0;
    arg.clock_khz = view.clock_khz();
    arg.samples = FromZeros::new_zeroed();
    if sealed {
        arg.out_flags = counter_flags::SEALED;
        return Ok(arg);
    }
    // The view answers the instance's own samples.
    arg.count = fill_rate_samples(&mut arg.samples, &samples, max, |s| {
        s.vm == info.vm && s.ctx == info.ctx
    });
    Ok(arg)
}
