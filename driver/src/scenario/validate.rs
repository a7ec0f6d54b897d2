//! Checks a [`RawScenario`] and resolves it into a [`Scenario`].
//!
//! The device-wide settings (clock, topology, trigger, stream) are checked
//! here; slices, profiles and the timeline in their own modules. The first
//! error found is returned, located by the span of the offending value.

use std::ops::Range;

use gpupm_uapi::events::MAX_CCU_ULCS;
use gpupm_uapi::layout::STREAM_RING_MAX;
use gpupm_uapi::regs::{
    MAX_CCUS, MAX_PARTITION_SLOTS, TRIG_PERIOD_MIN, TRIG_THRESHOLD_MAX, TRIG_THRESHOLD_MIN,
};
use toml::Spanned;

use super::error::SpanError;
use super::raw::{RawClock, RawOob, RawScenario, RawStream, RawTopology, RawTrigger};
use super::spec::{
    h100_class, ClockSpec, OobSpec, Scenario, StreamSpec, TopologySpec, TriggerSpec, OOB_PERIOD_MIN,
};
use super::time::{fit_u32, positive, Clock};
use super::{identity, profiles, program_parse, slices, timeline};

/// Nominal clock when the file gives none (1.98 GHz).
const DEFAULT_KHZ: u32 = 1_980_000;
/// Slowest nominal or secondary clock.
const MIN_KHZ: u32 = 1_000;
/// Fastest nominal clock.
const MAX_KHZ: u32 = 10_000_000;
/// Most GPCs.
const MAX_GPCS: u32 = 16;
/// Most memory slices.
const MAX_MEMORY_SLICES: u32 = 16;
/// Most NVLinks.
const MAX_NVLINKS: usize = MAX_CCU_ULCS - 1;
/// Smallest stream ring.
const MIN_RING_RECORDS: u32 = 16;

// One CCU per GPC, per memory slice, the system CCU and one PCIe lane CCU
// per partition slot: the limits above keep every scenario within MAX_CCUS,
// so the count needs no run-time check.
const _: () = assert!(MAX_GPCS + MAX_MEMORY_SLICES + 1 + (MAX_PARTITION_SLOTS - 1) <= MAX_CCUS);

/// The span of the value given last in the file among `spans`.
fn last_span(spans: &[Option<Range<usize>>]) -> Range<usize> {
    spans
        .iter()
        .flatten()
        .max_by_key(|s| s.start)
        .cloned()
        .unwrap_or(0..0)
}

/// Checks `raw` and resolves it; `default_name` names a scenario without `name`.
pub(super) fn resolve(raw: RawScenario, default_name: &str) -> Result<Scenario, SpanError> {
    let clock = clock(raw.clock.as_ref())?;
    let time = Clock::nominal(clock.khz);
    let topology = topology(raw.topology.as_ref())?;
    let trigger = trigger(raw.trigger.as_ref(), time)?;
    let stream = stream(raw.stream.as_ref())?;
    let oob = oob(raw.oob.as_ref(), time, clock.khz)?;
    let switch_timeout_cycles = time.time_u32(
        "switch_timeout",
        &raw.switch_timeout_us,
        &raw.switch_timeout_cycles,
        2_000,
    )?;
    let partitions = slices::partitions(&raw.partition, &topology, time)?;
    let vms = slices::vms(&raw.vm, &partitions)?;
    let programs = program_parse::programs(&raw.program)?;
    let profiles = profiles::profiles(&raw.profile, &programs, time)?;
    let device_profile = profiles::device_profile(raw.device_profile.as_ref(), &profiles)?;
    let contexts = timeline::contexts(&raw.context, &vms, &profiles, time)?;
    let churn = timeline::churns(&raw.churn, &vms, &profiles, time)?;
    let throttle = timeline::throttle(&raw.throttle, time)?;
    let migrations = timeline::migrations(&raw.migrate, &vms, &partitions, time)?;
    let name = raw.name.unwrap_or_else(|| default_name.to_owned());
    let seed = raw.seed.unwrap_or(0);
    let identity = identity::identity(raw.identity.as_ref(), &name, seed)?;
    Ok(Scenario {
        name,
        seed,
        identity,
        clock,
        topology,
        trigger,
        stream,
        switch_timeout_cycles,
        partitions,
        vms,
        profiles: profiles.into_iter().map(|p| p.spec).collect(),
        programs,
        device_profile,
        contexts,
        churn,
        throttle,
        migrations,
        oob,
    })
}

/// `[oob]`: the out-of-band channel's period (at least [`OOB_PERIOD_MIN`]
/// cycles) and host timeout (positive).
fn oob(raw: Option<&RawOob>, time: Clock, khz: u32) -> Result<OobSpec, SpanError> {
    let mut spec = OobSpec::at_khz(khz);
    let Some(raw) = raw else { return Ok(spec) };
    if let Some(p) = time.time("period", &raw.period_us, &raw.period_cycles)? {
        if p.cycles < OOB_PERIOD_MIN {
            return Err(SpanError::new(
                p.span,
                format!(
                    "OOB period of {} cycles is too short; it must be at least {OOB_PERIOD_MIN} cycles",
                    p.cycles
                ),
            ));
        }
        spec.period_cycles = p.cycles;
    }
    let timeout = time.time(
        "host_timeout",
        &raw.host_timeout_us,
        &raw.host_timeout_cycles,
    )?;
    if let Some(t) = timeout {
        spec.host_timeout_cycles = positive("host timeout", t)?;
    }
    Ok(spec)
}

/// A frequency given as `<prefix>mhz` or `<prefix>khz`, in kHz.
fn freq(
    prefix: &str,
    mhz: Option<&Spanned<u64>>,
    khz: Option<&Spanned<u64>>,
) -> Result<Option<(u64, Range<usize>)>, SpanError> {
    match (mhz, khz) {
        (Some(m), Some(k)) => Err(SpanError::new(
            last_span(&[Some(m.span()), Some(k.span())]),
            format!("both `{prefix}mhz` and `{prefix}khz` are given; give only one"),
        )),
        (Some(m), None) => Ok(Some((m.get_ref().saturating_mul(1000), m.span()))),
        (None, Some(k)) => Ok(Some((*k.get_ref(), k.span()))),
        (None, None) => Ok(None),
    }
}

fn clock(raw: Option<&RawClock>) -> Result<ClockSpec, SpanError> {
    let Some(raw) = raw else {
        return Ok(ClockSpec {
            khz: DEFAULT_KHZ,
            secondary_khz: DEFAULT_KHZ / 2,
        });
    };
    let khz = match freq("", raw.mhz.as_ref(), raw.khz.as_ref())? {
        None => DEFAULT_KHZ,
        Some((khz, span)) => match u32::try_from(khz) {
            Ok(k) if (MIN_KHZ..=MAX_KHZ).contains(&k) => k,
            _ => {
                return Err(SpanError::new(
                    span,
                    format!(
                    "clock of {khz} kHz is out of range; it must lie in {MIN_KHZ}..={MAX_KHZ} kHz"
                ),
                ))
            }
        },
    };
    let secondary = freq(
        "secondary_",
        raw.secondary_mhz.as_ref(),
        raw.secondary_khz.as_ref(),
    )?;
    let secondary_khz = match secondary {
        None => (khz / 2).max(MIN_KHZ),
        Some((sec, span)) => match u32::try_from(sec) {
            Ok(s) if (MIN_KHZ..=khz).contains(&s) => s,
            _ => {
                return Err(SpanError::new(
                    span,
                    format!(
                        "secondary clock of {sec} kHz is out of range; it must lie in \
                         {MIN_KHZ}..={khz} kHz (at most the nominal clock)"
                    ),
                ))
            }
        },
    };
    Ok(ClockSpec { khz, secondary_khz })
}

fn topology(raw: Option<&RawTopology>) -> Result<TopologySpec, SpanError> {
    let mut t = h100_class();
    let Some(raw) = raw else { return Ok(t) };
    if let Some(gpcs) = &raw.sms_per_gpc {
        if !(1..=MAX_GPCS as usize).contains(&gpcs.get_ref().len()) {
            return Err(SpanError::new(
                gpcs.span(),
                format!(
                    "{} GPCs given; a GPU has 1..={MAX_GPCS} GPCs",
                    gpcs.get_ref().len()
                ),
            ));
        }
        for (i, sms) in gpcs.get_ref().iter().enumerate() {
            if !(1..=MAX_CCU_ULCS).contains(&(*sms.get_ref() as usize)) {
                return Err(SpanError::new(
                    sms.span(),
                    format!(
                        "GPC {i} has {} SMs; a GPC has 1..={MAX_CCU_ULCS} SMs",
                        sms.get_ref()
                    ),
                ));
            }
        }
        t.sms_per_gpc = gpcs.get_ref().iter().map(|s| *s.get_ref()).collect();
    }
    if let Some(m) = &raw.memory_slices {
        if !(1..=MAX_MEMORY_SLICES).contains(m.get_ref()) {
            return Err(SpanError::new(
                m.span(),
                format!(
                    "{} memory slices given; a GPU has 1..={MAX_MEMORY_SLICES}",
                    m.get_ref()
                ),
            ));
        }
        t.memory_slices = *m.get_ref();
    }
    let per_slice = [&raw.l2_per_slice, &raw.fb_per_slice, &raw.ce_per_slice];
    let [l2, fb, ce] = per_slice.map(|v| v.as_ref().map(|v| *v.get_ref()));
    t.l2_per_slice = l2.unwrap_or(t.l2_per_slice);
    t.fb_per_slice = fb.unwrap_or(t.fb_per_slice);
    t.ce_per_slice = ce.unwrap_or(t.ce_per_slice);
    let units = u64::from(t.l2_per_slice) + u64::from(t.fb_per_slice) + u64::from(t.ce_per_slice);
    if !(1..=MAX_CCU_ULCS as u64).contains(&units) {
        let spans = per_slice.map(|v| v.as_ref().map(Spanned::span));
        return Err(SpanError::new(
            last_span(&spans),
            format!(
                "a memory slice would have {units} units (L2 + FB + CE); its CCU serves 1..={MAX_CCU_ULCS}"
            ),
        ));
    }
    if let Some(n) = &raw.nvlinks {
        if *n.get_ref() as usize > MAX_NVLINKS {
            return Err(SpanError::new(
                n.span(),
                format!(
                    "{} NVLinks given; at most {MAX_NVLINKS} are supported",
                    n.get_ref()
                ),
            ));
        }
        t.nvlinks = *n.get_ref();
    }
    t.pcie = raw.pcie.unwrap_or(t.pcie);
    Ok(t)
}

fn trigger(raw: Option<&RawTrigger>, time: Clock) -> Result<TriggerSpec, SpanError> {
    let (us, cycles) = raw.map_or((None, None), |r| {
        (r.period_us.clone(), r.period_cycles.clone())
    });
    let period = time.time("period", &us, &cycles)?;
    let period_cycles = match &period {
        None => time.time_u32("period", &None, &None, 1_000)?,
        Some(p) => {
            let v = fit_u32("trigger period", p)?;
            if v != 0 && v < TRIG_PERIOD_MIN {
                return Err(SpanError::new(
                    p.span.clone(),
                    format!(
                        "trigger period of {v} cycles is too short; give 0 (disabled) or at least \
                         {TRIG_PERIOD_MIN} cycles"
                    ),
                ));
            }
            v
        }
    };
    let threshold = match raw.and_then(|r| r.threshold.as_ref()) {
        None => TRIG_THRESHOLD_MAX,
        Some(t) if (TRIG_THRESHOLD_MIN..=TRIG_THRESHOLD_MAX).contains(t.get_ref()) => *t.get_ref(),
        Some(t) => {
            return Err(SpanError::new(
                t.span(),
                format!(
                    "threshold {} is out of range; it must lie in \
                     {TRIG_THRESHOLD_MIN}..={TRIG_THRESHOLD_MAX}",
                    t.get_ref()
                ),
            ))
        }
    };
    let dither = raw.and_then(|r| r.dither).unwrap_or(false);
    Ok(TriggerSpec {
        period_cycles,
        dither,
        threshold,
    })
}

fn stream(raw: Option<&RawStream>) -> Result<StreamSpec, SpanError> {
    let ring_records = match raw.and_then(|r| r.ring_records.as_ref()) {
        None => 1024,
        Some(r) => {
            let v = *r.get_ref();
            if !v.is_power_of_two() || !(MIN_RING_RECORDS..=STREAM_RING_MAX).contains(&v) {
                return Err(SpanError::new(
                    r.span(),
                    format!(
                        "ring_records = {v} is not a power of two in \
                         {MIN_RING_RECORDS}..={STREAM_RING_MAX}"
                    ),
                ));
            }
            v
        }
    };
    let watermark = match raw.and_then(|r| r.watermark.as_ref()) {
        None => ring_records / 2,
        Some(w) if (1..=ring_records).contains(w.get_ref()) => *w.get_ref(),
        Some(w) => {
            return Err(SpanError::new(
                w.span(),
                format!(
                    "watermark {} is out of range; it must lie in 1..={ring_records}",
                    w.get_ref()
                ),
            ))
        }
    };
    Ok(StreamSpec {
        ring_records,
        watermark,
    })
}

#[cfg(test)]
mod tests {
    use crate::scenario::test_support::{assert_at, err, ok};

    #[test]
    fn clock_outside_range_is_rejected() {
        assert_at(
            &err("[clock]\nkhz = 999\n"),
            2,
            "clock of 999 kHz is out of range",
        );
        assert_at(
            &err("[clock]\n\nmhz = 10001\n"),
            3,
            "clock of 10001000 kHz is out of range",
        );
    }

    #[test]
    fn clock_given_in_mhz_and_khz_is_rejected() {
        assert_at(
            &err("[clock]\nmhz = 1000\nkhz = 1000000\n"),
            3,
            "both `mhz` and `khz`",
        );
    }

    #[test]
    fn secondary_clock_above_nominal_is_rejected() {
        let e = err("[clock]\nmhz = 1000\nsecondary_mhz = 1500\n");
        assert_at(&e, 3, "at most the nominal clock");
        assert_eq!(e.column, 17);
    }

    #[test]
    fn secondary_clock_below_minimum_is_rejected() {
        assert_at(
            &err("[clock]\nsecondary_khz = 999\n"),
            2,
            "secondary clock of 999 kHz",
        );
    }

    #[test]
    fn gpc_count_outside_range_is_rejected() {
        assert_at(&err("[topology]\nsms_per_gpc = []\n"), 2, "0 GPCs given");
        let seventeen = format!("[topology]\nsms_per_gpc = [{}]\n", ["1"; 17].join(", "));
        assert_at(&err(&seventeen), 2, "17 GPCs given");
    }

    #[test]
    fn sms_per_gpc_outside_range_is_rejected_at_the_element() {
        let e = err("[topology]\nsms_per_gpc = [8, 49]\n");
        assert_at(&e, 2, "GPC 1 has 49 SMs");
        assert_eq!(e.column, 19);
        assert_at(
            &err("[topology]\nsms_per_gpc = [0]\n"),
            2,
            "GPC 0 has 0 SMs",
        );
    }

    #[test]
    fn memory_slice_count_outside_range_is_rejected() {
        assert_at(
            &err("[topology]\nmemory_slices = 17\n"),
            2,
            "17 memory slices",
        );
        assert_at(
            &err("[topology]\nmemory_slices = 0\n"),
            2,
            "0 memory slices",
        );
    }

    #[test]
    fn units_per_memory_slice_beyond_one_ccu_are_rejected() {
        let e = err("[topology]\nl2_per_slice = 40\nfb_per_slice = 8\nce_per_slice = 1\n");
        assert_at(&e, 4, "49 units");
        let e = err("[topology]\nce_per_slice = 0\nl2_per_slice = 0\nfb_per_slice = 0\n");
        assert_at(&e, 4, "0 units");
    }

    #[test]
    fn too_many_nvlinks_are_rejected() {
        assert_at(&err("[topology]\nnvlinks = 48\n"), 2, "48 NVLinks");
        assert_eq!(ok("[topology]\nnvlinks = 47\n").topology.nvlinks, 47);
    }

    #[test]
    fn trigger_period_below_minimum_is_rejected() {
        assert_at(&err("[trigger]\nperiod_cycles = 1023\n"), 2, "too short");
        assert_eq!(
            ok("[trigger]\nperiod_cycles = 0\n").trigger.period_cycles,
            0
        );
        assert_eq!(
            ok("[trigger]\nperiod_cycles = 1024\n")
                .trigger
                .period_cycles,
            1024
        );
    }

    #[test]
    fn cycles_that_overflow_a_u32_field_are_rejected() {
        let e = err("[trigger]\nperiod_us = 3000000\n");
        assert_at(&e, 2, "does not fit in 32 bits");
        let e = err("switch_timeout_cycles = 4294967296\n");
        assert_at(&e, 1, "does not fit in 32 bits");
    }

    #[test]
    fn microseconds_that_overflow_64_bit_cycles_are_rejected() {
        let e = err("[trigger]\nperiod_us = 9223372036854775807\n");
        assert_at(&e, 2, "do not fit in 64 bits");
    }

    #[test]
    fn time_given_in_us_and_cycles_is_rejected_at_the_later_key() {
        let e = err("[trigger]\nperiod_cycles = 2048\nperiod_us = 10\n");
        assert_at(&e, 3, "both `period_us` and `period_cycles`");
    }

    #[test]
    fn threshold_outside_range_is_rejected() {
        assert_at(
            &err("[trigger]\nthreshold = 1023\n"),
            2,
            "threshold 1023 is out of range",
        );
        assert_at(
            &err("[trigger]\nthreshold = 268434945\n"),
            2,
            "out of range",
        );
    }

    #[test]
    fn ring_size_not_a_power_of_two_in_range_is_rejected() {
        assert_at(
            &err("[stream]\nring_records = 1000\n"),
            2,
            "not a power of two",
        );
        assert_at(&err("[stream]\nring_records = 8\n"), 2, "16..=8192");
        assert_at(&err("[stream]\nring_records = 16384\n"), 2, "16..=8192");
    }

    #[test]
    fn watermark_outside_ring_is_rejected() {
        assert_at(
            &err("[stream]\nwatermark = 0\n"),
            2,
            "watermark 0 is out of range",
        );
        let e = err("[stream]\nring_records = 64\nwatermark = 65\n");
        assert_at(&e, 3, "1..=64");
        assert_eq!(ok("[stream]\nring_records = 64\n").stream.watermark, 32);
    }
}
