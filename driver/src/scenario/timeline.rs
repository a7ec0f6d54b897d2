//! Checks and resolves what happens when: fixed contexts, context churn and
//! throttle windows.

use toml::Spanned;

use super::error::SpanError;
use super::profiles::{context_profile, Profile};
use super::raw::{RawChurn, RawContext, RawThrottle};
use super::spec::{ChurnSpec, ContextSpec, ThrottleWindow, VmSpec};
use super::time::{positive, required, Clock, Cyc};

fn check_vm(vm: &Spanned<u32>, vms: &[VmSpec]) -> Result<u32, SpanError> {
    let id = *vm.get_ref();
    if vms.iter().any(|v| v.id == id) {
        Ok(id)
    } else {
        Err(SpanError::new(
            vm.span(),
            format!("VM {id} is not configured"),
        ))
    }
}

/// `later`, which must come after `earlier`.
fn after(
    later: Option<Cyc>,
    what: &str,
    earlier: u64,
    earlier_what: &str,
) -> Result<Option<u64>, SpanError> {
    match later {
        Some(t) if t.cycles <= earlier => Err(SpanError::new(
            t.span,
            format!(
                "{what} (cycle {}) must be after {earlier_what} (cycle {earlier})",
                t.cycles
            ),
        )),
        other => Ok(other.map(|t| t.cycles)),
    }
}

/// Resolves the `[[context]]` tables.
pub(super) fn contexts(
    raw: &[Spanned<RawContext>],
    vms: &[VmSpec],
    profiles: &[Profile],
    time: Clock,
) -> Result<Vec<ContextSpec>, SpanError> {
    raw.iter()
        .map(|c| context(c.get_ref(), vms, profiles, time))
        .collect()
}

fn context(
    raw: &RawContext,
    vms: &[VmSpec],
    profiles: &[Profile],
    time: Clock,
) -> Result<ContextSpec, SpanError> {
    let vm = check_vm(&raw.vm, vms)?;
    let profile = context_profile(profiles, &raw.profile, "context")?;
    let create_at = time
        .time("create_at", &raw.create_at_us, &raw.create_at_cycles)?
        .map_or(0, |t| t.cycles);
    let destroy = time.time("destroy_at", &raw.destroy_at_us, &raw.destroy_at_cycles)?;
    let destroy_at = after(destroy, "destroy_at", create_at, "create_at")?;
    Ok(ContextSpec {
        vm,
        profile,
        create_at,
        destroy_at,
    })
}

/// Resolves the `[[churn]]` tables.
pub(super) fn churns(
    raw: &[Spanned<RawChurn>],
    vms: &[VmSpec],
    profiles: &[Profile],
    time: Clock,
) -> Result<Vec<ChurnSpec>, SpanError> {
    raw.iter().map(|c| churn(c, vms, profiles, time)).collect()
}

fn churn(
    raw: &Spanned<RawChurn>,
    vms: &[VmSpec],
    profiles: &[Profile],
    time: Clock,
) -> Result<ChurnSpec, SpanError> {
    let c = raw.get_ref();
    let vm = check_vm(&c.vm, vms)?;
    if c.profiles.get_ref().is_empty() {
        return Err(SpanError::new(
            c.profiles.span(),
            "churn lists no profiles; give at least one",
        ));
    }
    let profiles = c
        .profiles
        .get_ref()
        .iter()
        .map(|name| context_profile(profiles, name, "churn"))
        .collect::<Result<_, _>>()?;
    let start_at = time
        .time("start_at", &c.start_at_us, &c.start_at_cycles)?
        .map_or(0, |t| t.cycles);
    let every = required(time, "every", &c.every_us, &c.every_cycles, raw.span())?;
    let every_cycles = positive("churn interval `every`", every)?;
    let lifetime = required(
        time,
        "lifetime",
        &c.lifetime_us,
        &c.lifetime_cycles,
        raw.span(),
    )?;
    let lifetime_cycles = positive("churn `lifetime`", lifetime)?;
    let stop = time.time("stop_at", &c.stop_at_us, &c.stop_at_cycles)?;
    let stop_at = after(stop, "stop_at", start_at, "start_at")?;
    Ok(ChurnSpec {
        vm,
        profiles,
        start_at,
        every_cycles,
        lifetime_cycles,
        stop_at,
    })
}

/// Resolves the `[[throttle]]` tables; the windows come out sorted by start.
pub(super) fn throttle(
    raw: &[Spanned<RawThrottle>],
    time: Clock,
) -> Result<Vec<ThrottleWindow>, SpanError> {
    let mut out: Vec<ThrottleWindow> = Vec::with_capacity(raw.len());
    for w in raw {
        let t = w.get_ref();
        let start = required(time, "start", &t.start_us, &t.start_cycles, w.span())?;
        let end = required(time, "end", &t.end_us, &t.end_cycles, w.span())?;
        let start_span = start.span.clone();
        let end =
            after(Some(end), "throttle end", start.cycles, "its start")?.unwrap_or(start.cycles);
        let window = ThrottleWindow {
            start: start.cycles,
            end,
        };
        if let Some(o) = out
            .iter()
            .find(|o| o.start < window.end && window.start < o.end)
        {
            return Err(SpanError::new(
                start_span,
                format!(
                    "throttle window [{}, {}) overlaps the earlier window [{}, {})",
                    window.start, window.end, o.start, o.end
                ),
            ));
        }
        out.push(window);
    }
    out.sort_by_key(|w| w.start);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::scenario::test_support::{assert_at, err, ok};
    use crate::scenario::ThrottleWindow;

    /// Profiles `gemm` and `stream`, six lines.
    const PROFILES: &str = "[[profile]]\nname = \"gemm\"\nphase = [{ duration_cycles = 5 }]\n\
                            [[profile]]\nname = \"stream\"\nphase = [{ duration_cycles = 5 }]\n";

    fn churn(body: &str) -> String {
        format!("{PROFILES}[[churn]]\nvm = 1\nprofiles = [\"gemm\", \"stream\"]\n{body}")
    }

    #[test]
    fn context_of_unconfigured_vm_is_rejected() {
        let e = err(&format!(
            "{PROFILES}[[context]]\nprofile = \"gemm\"\nvm = 9\n"
        ));
        assert_at(&e, 9, "VM 9 is not configured");
    }

    #[test]
    fn context_with_unknown_profile_reports_suggestion() {
        let e = err(&format!(
            "{PROFILES}[[context]]\nvm = 1\nprofile = \"strem\"\n"
        ));
        assert_at(
            &e,
            9,
            "unknown profile \"strem\" (did you mean \"stream\"?)",
        );
    }

    #[test]
    fn context_destroyed_before_creation_is_rejected() {
        let e = err(&format!("{PROFILES}[[context]]\nvm = 1\nprofile = \"stream\"\ncreate_at_cycles = 100\ndestroy_at_cycles = 100\n"));
        assert_at(
            &e,
            11,
            "destroy_at (cycle 100) must be after create_at (cycle 100)",
        );
        let s = ok(&format!("{PROFILES}[[context]]\nvm = 1\nprofile = \"stream\"\ncreate_at_us = 1\ndestroy_at_us = 2\n"));
        assert_eq!(
            (
                s.contexts[0].profile,
                s.contexts[0].create_at,
                s.contexts[0].destroy_at
            ),
            (1, 1980, Some(3960))
        );
    }

    #[test]
    fn churn_with_zero_interval_or_lifetime_is_rejected() {
        assert_at(
            &err(&churn("every_us = 0\nlifetime_us = 5\n")),
            10,
            "churn interval `every` must be greater than 0",
        );
        assert_at(
            &err(&churn("every_us = 5\nlifetime_cycles = 0\n")),
            11,
            "churn `lifetime` must be greater than 0",
        );
    }

    #[test]
    fn churn_without_interval_is_rejected_at_its_table() {
        assert_at(
            &err(&churn("lifetime_us = 5\n")),
            7,
            "`every_us` or `every_cycles` is required",
        );
    }

    #[test]
    fn churn_without_profiles_is_rejected() {
        let e = err(&format!(
            "{PROFILES}[[churn]]\nvm = 1\nprofiles = []\nevery_us = 1\nlifetime_us = 1\n"
        ));
        assert_at(&e, 9, "churn lists no profiles");
    }

    #[test]
    fn churn_of_unconfigured_vm_is_rejected() {
        let e = err(&format!(
            "{PROFILES}[[churn]]\nvm = 2\nprofiles = [\"gemm\"]\nevery_us = 1\nlifetime_us = 1\n"
        ));
        assert_at(&e, 8, "VM 2 is not configured");
    }

    #[test]
    fn churn_stopping_before_it_starts_is_rejected() {
        let e = err(&churn(
            "every_us = 1\nlifetime_us = 1\nstart_at_us = 10\nstop_at_us = 5\n",
        ));
        assert_at(
            &e,
            13,
            "stop_at (cycle 9900) must be after start_at (cycle 19800)",
        );
        let s = ok(&churn("every_us = 1\nlifetime_us = 2\n"));
        assert_eq!(
            (
                s.churn[0].profiles.clone(),
                s.churn[0].every_cycles,
                s.churn[0].stop_at
            ),
            (vec![0, 1], 1980, None)
        );
    }

    #[test]
    fn throttle_ending_before_it_starts_is_rejected() {
        let e = err("[[throttle]]\nstart_cycles = 50\nend_cycles = 40\n");
        assert_at(
            &e,
            3,
            "throttle end (cycle 40) must be after its start (cycle 50)",
        );
    }

    #[test]
    fn throttle_without_end_is_rejected_at_its_table() {
        assert_at(
            &err("[[throttle]]\nstart_cycles = 50\n"),
            1,
            "`end_us` or `end_cycles` is required",
        );
    }

    #[test]
    fn overlapping_throttle_windows_are_rejected() {
        let e = err("[[throttle]]\nstart_cycles = 100\nend_cycles = 200\n[[throttle]]\nstart_cycles = 150\nend_cycles = 300\n");
        assert_at(
            &e,
            5,
            "throttle window [150, 300) overlaps the earlier window [100, 200)",
        );
    }

    #[test]
    fn adjacent_throttle_windows_are_accepted_and_sorted() {
        let s = ok("[[throttle]]\nstart_cycles = 200\nend_cycles = 300\n[[throttle]]\nstart_cycles = 100\nend_cycles = 200\n");
        assert_eq!(
            s.throttle,
            vec![
                ThrottleWindow {
                    start: 100,
                    end: 200
                },
                ThrottleWindow {
                    start: 200,
                    end: 300
                }
            ]
        );
    }
}
