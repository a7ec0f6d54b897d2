//! The built-in scenario the demo runs when given no scenario file.

use super::parse::parse;
use super::spec::Scenario;

/// The built-in scenario: an H100-class GPU split into four slices.
///
/// Slot 1 (GPCs 0-3) runs VM 1; slot 2 (GPCs 4-5) is time-sliced between
/// VMs 2 and 3; slot 3 (GPC 6) runs the confidential VM 4; slot 4 (GPC 7) is
/// shared by VM 5 and VM 6, which only runs churned contexts. NVLink traffic
/// comes from a device profile imitating all-reduce bursts, and the clock is
/// throttled for 10 ms.
///
/// Rates are per unit instance and cycle: SM rates per SM, L2 rates per L2
/// slice, FB rates per FB partition. Multi-bit byte signals are bytes per
/// cycle (`fb_bytes` is 32 x the sectors moved).
pub const BUILTIN_TOML: &str = include_str!("builtin.toml");

/// The parsed [`BUILTIN_TOML`].
///
/// # Panics
///
/// Never: the text is a constant that a unit test parses.
pub fn builtin() -> Scenario {
    match parse("builtin", BUILTIN_TOML) {
        Ok(s) => s,
        Err(e) => panic!("the built-in scenario is invalid: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::events::{self, UnitType};

    use super::*;

    fn rate(phase: &crate::scenario::PhaseSpec, name: &str) -> f64 {
        let id = events::by_name(name).map(|e| e.id);
        phase
            .rates
            .iter()
            .find(|(e, _)| Some(*e) == id)
            .map_or(0.0, |(_, r)| *r)
    }

    #[test]
    fn builtin_parses_into_the_documented_shape() {
        let s = builtin();
        assert_eq!(s.clock.khz, 1_980_000);
        assert_eq!(s.topology.sms_per_gpc.iter().sum::<u32>(), 132);
        assert_eq!(s.trigger.period_cycles, 1_980_000);
        assert!(!s.trigger.dither);
        let slots: Vec<_> = s
            .partitions
            .iter()
            .map(|p| (p.slot, p.gpcs.clone(), p.memory_slices.clone()))
            .collect();
        assert_eq!(
            slots,
            vec![
                (1, vec![0, 1, 2, 3], vec![0, 1, 2, 3]),
                (2, vec![4, 5], vec![4, 5]),
                (3, vec![6], vec![6]),
                (4, vec![7], vec![7]),
            ]
        );
        assert_eq!(s.vms.len(), 6);
        assert_eq!(s.vms.iter().filter(|v| v.partition == 2).count(), 2);
        assert_eq!(
            s.vms
                .iter()
                .map(|v| (v.id, v.confidential))
                .filter(|&(_, c)| c)
                .collect::<Vec<_>>(),
            [(4, true)]
        );
        assert!(
            s.vms.iter().all(|v| v.confidential_key.is_none()),
            "the built-in scenario gives no VM a key (anyone holding the binary would know it)"
        );
        assert!(s.profiles.len() >= 4);
        assert!(s.profiles.iter().any(|p| p.phases.len() >= 2));
        assert!((10..=12).contains(&s.contexts.len()));
        assert_eq!(s.churn.len(), 2);
        assert!(s
            .churn
            .iter()
            .all(|c| c.every_cycles == 3 * 1_980_000 && c.lifetime_cycles == 7 * 1_980_000));
        assert_eq!(s.throttle.len(), 1);
        let device = s.device_profile.map(|i| &s.profiles[i]);
        assert!(device.is_some_and(|p| p.phases.iter().all(|ph| ph
            .rates
            .iter()
            .all(|(id, _)| events::by_id(*id).is_some_and(|e| e.unit == UnitType::Nvlink)))));
    }

    #[test]
    fn builtin_rates_are_internally_consistent() {
        let s = builtin();
        for p in &s.profiles {
            if Some(p.name.as_str()) == s.device_profile.map(|i| s.profiles[i].name.as_str()) {
                continue;
            }
            for ph in &p.phases {
                let r = |n| rate(ph, n);
                assert_eq!(r("sm_cycles_elapsed"), 1.0, "{}", p.name);
                assert!(
                    r("sm_cycles_active") <= r("sm_cycles_elapsed"),
                    "{}",
                    p.name
                );
                assert!(r("sm_issue_active") <= r("sm_cycles_active"), "{}", p.name);
                assert!(
                    r("sm_inst_executed") <= r("sm_issue_active") + 1e-9,
                    "{}",
                    p.name
                );
                assert!(
                    r("sm_threads_active") <= 32.0 * r("sm_inst_executed") + 1e-9,
                    "{}",
                    p.name
                );
                assert!(r("sm_branch_divergent") <= r("sm_branch"), "{}", p.name);
                assert!(
                    r("l2_hit") <= r("l2_read_req") + r("l2_write_req"),
                    "{}",
                    p.name
                );
                let fb_sectors = r("fb_read_sectors") + r("fb_write_sectors");
                assert!(
                    (r("fb_bytes") - 32.0 * fb_sectors).abs() <= 0.05 * 32.0 * fb_sectors + 1e-9,
                    "{}",
                    p.name
                );
            }
        }
    }
}
