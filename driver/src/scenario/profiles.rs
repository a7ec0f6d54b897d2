//! Checks and resolves activity profiles and the device profile.

use std::ops::Range;

use gpupm_uapi::events::{self, UnitType, CATALOGUE};
use toml::Spanned;

use super::error::SpanError;
use super::program::ProgramSpec;
use super::raw::{RawPhase, RawProfile};
use super::spec::{PhaseSpec, ProfileSpec};
use super::time::{positive, required, Clock};

/// A profile with, for the NVLink rules, the first NVLink and the first
/// other rate it gives (span and event name).
#[derive(Debug)]
pub(super) struct Profile {
    pub spec: ProfileSpec,
    first_nvlink: Option<(Range<usize>, &'static str)>,
    first_other: Option<(Range<usize>, &'static str)>,
}

/// Resolves the `[[profile]]` tables, in file order.
pub(super) fn profiles(
    raw: &[RawProfile],
    programs: &[ProgramSpec],
    time: Clock,
) -> Result<Vec<Profile>, SpanError> {
    let mut out: Vec<Profile> = Vec::with_capacity(raw.len());
    for p in raw {
        let mut profile = profile(p, &out, time)?;
        profile.spec.program = p
            .program
            .as_ref()
            .map(|name| super::program_parse::lookup(programs, name))
            .transpose()?;
        out.push(profile);
    }
    Ok(out)
}

/// Resolves `device_profile`: the profile must exist and give NVLink rates only.
pub(super) fn device_profile(
    name: Option<&Spanned<String>>,
    profiles: &[Profile],
) -> Result<Option<usize>, SpanError> {
    let Some(name) = name else { return Ok(None) };
    let i = lookup(profiles, name)?;
    if let Some((span, event)) = &profiles[i].first_other {
        return Err(SpanError::new(
            span.clone(),
            format!(
                "event \"{event}\" is not an NVLink event, but profile \"{}\" is the \
                 device_profile, which drives only the NVLinks",
                profiles[i].spec.name
            ),
        ));
    }
    Ok(Some(i))
}

fn profile(raw: &RawProfile, earlier: &[Profile], time: Clock) -> Result<Profile, SpanError> {
    let name = raw.name.get_ref();
    if earlier.iter().any(|p| &p.spec.name == name) {
        return Err(SpanError::new(
            raw.name.span(),
            format!("profile \"{name}\" is defined twice"),
        ));
    }
    if raw.phase.is_empty() {
        return Err(SpanError::new(
            raw.name.span(),
            format!("profile \"{name}\" has no phase; add a [[profile.phase]]"),
        ));
    }
    let mut out = Profile {
        spec: ProfileSpec {
            name: name.clone(),
            phases: Vec::with_capacity(raw.phase.len()),
            program: None,
        },
        first_nvlink: None,
        first_other: None,
    };
    for ph in &raw.phase {
        let resolved = phase(ph, &mut out, time)?;
        out.spec.phases.push(resolved);
    }
    Ok(out)
}

fn phase(
    raw: &Spanned<RawPhase>,
    profile: &mut Profile,
    time: Clock,
) -> Result<PhaseSpec, SpanError> {
    let ph = raw.get_ref();
    let duration = required(
        time,
        "duration",
        &ph.duration_us,
        &ph.duration_cycles,
        raw.span(),
    )?;
    let duration_cycles = positive("phase duration", duration)?;
    let mut entries: Vec<_> = ph.rates.iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    let mut rates = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let event = events::by_name(key.get_ref()).ok_or_else(|| {
            let hint = suggest(key.get_ref(), CATALOGUE.iter().map(|e| e.name))
                .map_or_else(String::new, |s| format!(" (did you mean \"{s}\"?)"));
            SpanError::new(
                key.span(),
                format!("unknown event \"{}\"{hint}", key.get_ref()),
            )
        })?;
        let rate = *value.get_ref();
        let (max, kind) = if event.multibit {
            (32.0, "multi-bit")
        } else {
            (1.0, "single-bit")
        };
        if !rate.is_finite() || !(0.0..=max).contains(&rate) {
            return Err(SpanError::new(
                value.span(),
                format!(
                    "rate {rate} of {kind} event \"{}\" is out of range; it must lie in 0..={max}",
                    event.name
                ),
            ));
        }
        let first = if event.unit == UnitType::Nvlink {
            &mut profile.first_nvlink
        } else {
            &mut profile.first_other
        };
        if first.is_none() {
            *first = Some((key.span(), event.name));
        }
        rates.push((event.id, rate));
    }
    rates.sort_by_key(|(id, _)| *id);
    Ok(PhaseSpec {
        duration_cycles,
        rates,
    })
}

/// Index of the profile `name` refers to.
fn lookup(profiles: &[Profile], name: &Spanned<String>) -> Result<usize, SpanError> {
    profiles
        .iter()
        .position(|p| &p.spec.name == name.get_ref())
        .ok_or_else(|| {
            let hint = suggest(
                name.get_ref(),
                profiles.iter().map(|p| p.spec.name.as_str()),
            )
            .map_or_else(String::new, |s| format!(" (did you mean \"{s}\"?)"));
            SpanError::new(
                name.span(),
                format!("unknown profile \"{}\"{hint}", name.get_ref()),
            )
        })
}

/// Index of the profile `name` refers to, which a context is going to run.
pub(super) fn context_profile(
    profiles: &[Profile],
    name: &Spanned<String>,
    user: &str,
) -> Result<usize, SpanError> {
    let i = lookup(profiles, name)?;
    match &profiles[i].first_nvlink {
        Some((span, event)) => Err(SpanError::new(
            span.clone(),
            format!(
                "NVLink event \"{event}\" is counted at device level only, but profile \"{}\" is \
                 used by a {user}; give NVLink rates in the device_profile",
                profiles[i].spec.name
            ),
        )),
        None => Ok(i),
    }
}

/// The candidate closest to `word` by edit distance, if it is close enough
/// to be a likely typo (at most half of the longer name differs).
fn suggest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (strsim::levenshtein(word, c), c))
        .filter(|(d, c)| *d <= word.chars().count().max(c.chars().count()) / 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::suggest;
    use crate::scenario::test_support::{assert_at, err, ok};

    /// A profile `p` whose only phase has the rates of line 6 and after.
    fn with_rates(rates: &str) -> String {
        format!("[[profile]]\nname = \"p\"\n[[profile.phase]]\nduration_cycles = 10\n[profile.phase.rates]\n{rates}")
    }

    #[test]
    fn unknown_event_name_reports_line_and_suggestion() {
        let e = err(&with_rates("sm_cycles_elapsed = 1.0\nsm_inst_exec = 0.5\n"));
        assert_at(
            &e,
            7,
            "unknown event \"sm_inst_exec\" (did you mean \"sm_inst_executed\"?)",
        );
        assert_eq!(e.column, 1);
        assert_eq!(
            e.to_string(),
            "t.toml:7:1: unknown event \"sm_inst_exec\" (did you mean \"sm_inst_executed\"?)"
        );
    }

    #[test]
    fn unknown_event_far_from_any_name_gets_no_suggestion() {
        let e = err(&with_rates("frobnicate = 0.5\n"));
        assert_at(&e, 6, "unknown event \"frobnicate\"");
        assert!(!e.reason.contains("did you mean"), "{e}");
    }

    #[test]
    fn single_bit_rate_above_one_is_rejected() {
        let e = err(&with_rates("sm_issue_active = 1.5\n"));
        assert_at(&e, 6, "rate 1.5 of single-bit event \"sm_issue_active\" is out of range; it must lie in 0..=1");
        assert_eq!(e.column, 19);
    }

    #[test]
    fn multi_bit_rate_above_32_is_rejected() {
        assert_at(
            &err(&with_rates("sm_threads_active = 33\n")),
            6,
            "multi-bit event \"sm_threads_active\"",
        );
        let s = ok(&with_rates(
            "sm_threads_active = 32\nsm_cycles_elapsed = 1\n",
        ));
        assert_eq!(s.profiles[0].phases[0].rates, vec![(0, 1.0), (4, 32.0)]);
    }

    #[test]
    fn negative_rate_is_rejected() {
        assert_at(
            &err(&with_rates("sm_branch = -0.1\n")),
            6,
            "rate -0.1 of single-bit event",
        );
    }

    #[test]
    fn non_finite_rate_is_rejected() {
        assert_at(
            &err(&with_rates("\nfb_bytes = nan\n")),
            7,
            "rate NaN of multi-bit event",
        );
        assert_at(&err(&with_rates("fb_bytes = inf\n")), 6, "rate inf");
    }

    #[test]
    fn duplicate_profile_name_is_rejected() {
        let e = err(&format!("{}[[profile]]\nname = \"p\"\n", with_rates("")));
        assert_at(&e, 7, "profile \"p\" is defined twice");
    }

    #[test]
    fn profile_without_phase_is_rejected() {
        assert_at(
            &err("[[profile]]\nname = \"idle\"\n"),
            2,
            "profile \"idle\" has no phase",
        );
    }

    #[test]
    fn zero_phase_duration_is_rejected() {
        let e = err("[[profile]]\nname = \"p\"\n[[profile.phase]]\nduration_us = 0\n");
        assert_at(&e, 4, "phase duration must be greater than 0");
    }

    #[test]
    fn phase_without_duration_is_rejected() {
        let e = err("[[profile]]\nname = \"p\"\n[[profile.phase]]\nrates = { sm_branch = 0.1 }\n");
        assert_at(&e, 3, "`duration_us` or `duration_cycles` is required");
    }

    #[test]
    fn unknown_device_profile_reports_suggestion() {
        let e = err("device_profile = \"link\"\n[[profile]]\nname = \"links\"\nphase = [{ duration_us = 1 }]\n");
        assert_at(&e, 1, "unknown profile \"link\" (did you mean \"links\"?)");
        assert_eq!(e.column, 18);
    }

    #[test]
    fn device_profile_with_non_nvlink_rate_is_rejected() {
        let e = err(&format!(
            "device_profile = \"p\"\n{}",
            with_rates("nvlink_rx_flits = 0.5\nsm_branch = 0.1\n")
        ));
        assert_at(
            &e,
            8,
            "event \"sm_branch\" is not an NVLink event, but profile \"p\" is the device_profile",
        );
        let s = ok(&format!(
            "device_profile = \"p\"\n{}",
            with_rates("nvlink_rx_flits = 0.5\n")
        ));
        assert_eq!(s.device_profile, Some(0));
    }

    #[test]
    fn context_profile_with_nvlink_rate_is_rejected() {
        let text = format!(
            "{}[[context]]\nvm = 1\nprofile = \"p\"\n",
            with_rates("sm_branch = 0.1\nnvlink_tx_flits = 0.5\n")
        );
        assert_at(
            &err(&text),
            7,
            "NVLink event \"nvlink_tx_flits\" is counted at device level only",
        );
    }

    #[test]
    fn churn_profile_with_nvlink_rate_is_rejected() {
        let text = format!(
            "{}[[churn]]\nvm = 1\nprofiles = [\"p\"]\nevery_us = 1\nlifetime_us = 1\n",
            with_rates("nvlink_cycles_active = 0.5\n")
        );
        assert_at(&err(&text), 6, "profile \"p\" is used by a churn");
    }

    #[test]
    fn suggestion_is_the_closest_plausible_name() {
        let names = ["l2_hit", "l2_miss", "sm_l1_hit"];
        assert_eq!(suggest("l2_hti", names.into_iter()), Some("l2_hit"));
        assert_eq!(suggest("zzzzzzzz", names.into_iter()), None);
    }
}
