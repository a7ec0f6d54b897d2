//! The health thresholds: the one table both `gpupm health`'s verdict and
//! the shipped Prometheus alert rules
//! (`deploy/prometheus/gpupm-alerts.rules.yml`) use, and gpupmd's journal
//! warnings. A test checks every alert's threshold in the rules file
//! against this table, so the two cannot drift.
//!
//! `gpupm health` judges totals since the daemon started (it reads one
//! scrape); the alerts judge the same quantities over their windows.

/// One threshold: a quantity above `warn_above` is a warning.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    /// The alert rule that fires on it.
    pub alert: &'static str,
    /// What is compared, in the alert's unit.
    pub quantity: &'static str,
    /// A value above this is a warning.
    pub warn_above: f64,
}

/// More than 1 % of context switches finished by the device's fallback
/// (`instance:gpupm_handshake_fallbacks:ratio_rate5m`).
pub const FALLBACK_RATIO: Threshold = Threshold {
    alert: "GpupmHandshakeFallbacksRising",
    quantity: "share of context switches finished by the device's fallback",
    warn_above: 0.01,
};

/// Any stream record lost.
pub const LOST_RECORDS: Threshold = Threshold {
    alert: "GpupmStreamRecordsLost",
    quantity: "stream records lost to ring overflow",
    warn_above: 0.0,
};

/// Rings more than 3/4 full at drain time (768 of a 1024-record ring).
pub const DRAIN_LAG_RECORDS: Threshold = Threshold {
    alert: "GpupmDrainLagHigh",
    quantity: "ring fill at drain time, records",
    warn_above: 768.0,
};

/// The slowest switch request to pause above 3/4 of the 2 ms timeout.
pub const RESPONSE_MAX_SECONDS: Threshold = Threshold {
    alert: "GpupmHandshakeResponseNearTimeout",
    quantity: "longest switch request to pause, seconds of device time",
    warn_above: 0.0015,
};

/// More than 9/10 of `[retired] max_contexts` retired contexts kept.
pub const RETAINED_CONTEXTS: Threshold = Threshold {
    alert: "GpupmRetainedContextsNearCap",
    quantity: "retired contexts kept",
    warn_above: 9000.0,
};

/// Every threshold an alert rule carries.
pub const ALERT_THRESHOLDS: [Threshold; 5] = [
    FALLBACK_RATIO,
    LOST_RECORDS,
    DRAIN_LAG_RECORDS,
    RESPONSE_MAX_SECONDS,
    RETAINED_CONTEXTS,
];

/// The share of real time below which a real-time device is behind
/// (device time per wall time): gpupmd's `device_behind` anomaly per
/// summary interval and `gpupm health`'s clock check since the clock
/// started. No alert rule carries it (`gpupm_device_lag_seconds_total`
/// rising is the metric to alert on).
pub const DEVICE_SPEED_MIN: f64 = 0.99;

impl Threshold {
    /// Whether `v` is above the threshold.
    pub fn exceeded(&self, v: f64) -> bool {
        v > self.warn_above
    }
}

/// The threshold an alert's `expr:` compares with (`… > N`), from the
/// rules file's text; `None` when the alert or its comparison is missing.
pub fn threshold_in_rules(rules: &str, alert: &str) -> Option<f64> {
    let mut lines = rules
        .lines()
        .skip_while(|l| l.trim() != format!("- alert: {alert}"));
    lines.next()?;
    let expr = lines
        .take_while(|l| !l.trim_start().starts_with("- alert:"))
        .find_map(|l| l.trim().strip_prefix("expr:"))?;
    expr.rsplit_once('>')?.1.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = include_str!("../../deploy/prometheus/gpupm-alerts.rules.yml");

    #[test]
    fn every_alert_threshold_is_the_tables() {
        for t in ALERT_THRESHOLDS {
            assert_eq!(
                threshold_in_rules(RULES, t.alert),
                Some(t.warn_above),
                "{} in gpupm-alerts.rules.yml",
                t.alert
            );
        }
        let alerts = RULES
            .lines()
            .filter(|l| l.trim().starts_with("- alert:"))
            .count();
        // GpupmDaemonDown is `up == 0`: no threshold, and `gpupm health`
        // fails an unreachable daemon.
        assert_eq!(
            alerts,
            ALERT_THRESHOLDS.len() + 1,
            "an alert the table lacks"
        );
    }

    #[test]
    fn a_threshold_is_read_from_its_own_alert() {
        let rules = "- alert: A\n  expr: x > 1\n- alert: B\n  expr: y > 2.5\n";
        assert_eq!(threshold_in_rules(rules, "B"), Some(2.5));
        assert_eq!(threshold_in_rules(rules, "C"), None);
    }
}
