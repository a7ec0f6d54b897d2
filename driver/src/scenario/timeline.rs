//! Checks and resolves what happens when: fixed contexts, context churn,
//! throttle windows and VM migrations.

use toml::Spanned;

use super::error::SpanError;
use super::profiles::{context_profile, Profile};
use super::raw::{RawChurn, RawContext, RawMigrate, RawThrottle};
use super::spec::{ChurnSpec, ContextSpec, MigrationSpec, PartitionSpec, ThrottleWindow, VmSpec};
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

/// Resolves the `[[migrate]]` tables, in the order they are due (file
/// order among equal times): each names a configured VM and a configured
/// slot other than the one the VM is on by then.
pub(super) fn migrations(
    raw: &[Spanned<RawMigrate>],
    vms: &[VmSpec],
    partitions: &[PartitionSpec],
    time: Clock,
) -> Result<Vec<MigrationSpec>, SpanError> {
    let mut due = Vec::with_capacity(raw.len());
    for m in raw {
        let t = m.get_ref();
        let at = required(time, "at", &t.at_us, &t.at_cycles, m.span())?;
        let vm = check_vm(&t.vm, vms)?;
        let to = *t.to.get_ref();
        if !partitions.iter().any(|p| p.slot == to) {
            return Err(SpanError::new(
                t.to.span(),
                format!("partition slot {to} is not configured"),
            ));
        }
        due.push((
            at.cycles,
            MigrationSpec {
                at: at.cycles,
                vm,
                to,
            },
            t.to.span(),
        ));
    }
    due.sort_by_key(|(at, _, _)| *at);
    let mut on: Vec<(u32, u32)> = vms.iter().map(|v| (v.id, v.partition)).collect();
    let mut out = Vec::with_capacity(due.len());
    for (_, m, span) in due {
        let slot = on.iter_mut().find(|(id, _)| *id == m.vm).map(|(_, p)| p);
        if let Some(slot) = slot {
            if *slot == m.to {
                return Err(SpanError::new(
                    span,
                    format!("VM {} is on slot {} already at cycle {}", m.vm, m.to, m.at),
                ));
            }
            *slot = m.to;
        }
        out.push(m);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::scenario::test_support::{assert_at, err, ok};
    use crate::scenario::{MigrationSpec, ThrottleWindow};

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

    /// A second slot (lines 1-4) for VM 1 (on slot 1) to move to.
    const SLOT2: &str = "[[partition]]\nslot = 2\ngpcs = [1]\nmemory_slices = [1]\n";

    fn migrate(body: &str) -> String {
        format!("{SLOT2}[[migrate]]\n{body}")
    }

    #[test]
    fn migration_to_an_unconfigured_slot_or_of_an_unknown_vm_is_rejected() {
        assert_at(
            &err(&migrate("at_cycles = 10\nvm = 1\nto = 5\n")),
            8,
            "partition slot 5 is not configured",
        );
        assert_at(
            &err(&migrate("at_cycles = 10\nvm = 9\nto = 2\n")),
            7,
            "VM 9 is not configured",
        );
    }

    #[test]
    fn migration_without_a_time_is_rejected_at_its_table() {
        assert_at(
            &err(&migrate("vm = 1\nto = 2\n")),
            5,
            "`at_us` or `at_cycles` is required here",
        );
    }

    #[test]
    fn migration_to_the_slot_the_vm_is_on_by_then_is_rejected() {
        // Due first although written second: the one at cycle 20 finds VM 1
        // on slot 2 already.
        let e = err(&migrate(
            "at_cycles = 20\nvm = 1\nto = 2\n[[migrate]]\nat_cycles = 10\nvm = 1\nto = 2\n",
        ));
        assert_at(&e, 8, "VM 1 is on slot 2 already at cycle 20");
        assert_at(
            &err(&migrate("at_cycles = 10\nvm = 1\nto = 1\n")),
            8,
            "VM 1 is on slot 1 already at cycle 10",
        );
    }

    #[test]
    fn migrations_come_out_in_the_order_they_are_due() {
        let s = ok(&migrate(
            "at_cycles = 50\nvm = 1\nto = 1\n[[migrate]]\nat_cycles = 10\nvm = 1\nto = 2\n",
        ));
        assert_eq!(
            s.migrations,
            vec![
                MigrationSpec {
                    at: 10,
                    vm: 1,
                    to: 2
                },
                MigrationSpec {
                    at: 50,
                    vm: 1,
                    to: 1
                },
            ]
        );
    }
}
