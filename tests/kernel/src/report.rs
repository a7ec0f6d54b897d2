//! The guest's result lines (see the crate documentation).

use std::collections::BTreeMap;

/// One check's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// Script name.
    pub name: String,
    /// Exited 0.
    pub passed: bool,
    /// Guest seconds it took.
    pub secs: f64,
}

/// Everything the guest reported.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Guest uptime when `/init` started.
    pub boot_uptime: Option<f64>,
    /// Guest uptime when the checks ended.
    pub done_uptime: Option<f64>,
    /// In order.
    pub checks: Vec<Check>,
    /// `@@gpupm metric` values.
    pub metrics: BTreeMap<String, String>,
}

fn field(parts: &[&str], key: &str) -> Option<f64> {
    parts
        .iter()
        .find_map(|p| p.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

impl Report {
    /// Parses a guest console log.
    pub fn parse(log: &str) -> Report {
        let mut r = Report::default();
        for line in log.lines() {
            let Some(rest) = line.trim_end_matches('\r').split("@@gpupm ").nth(1) else {
                continue;
            };
            let parts: Vec<&str> = rest.split_whitespace().collect();
            match parts.first().copied() {
                Some("boot") => r.boot_uptime = field(&parts, "uptime"),
                Some("done") => r.done_uptime = field(&parts, "uptime"),
                Some("check") if parts.len() >= 3 => r.checks.push(Check {
                    name: parts[1].to_string(),
                    passed: parts[2] == "pass",
                    secs: field(&parts, "end").unwrap_or(0.0)
                        - field(&parts, "start").unwrap_or(0.0),
                }),
                Some("metric") => {
                    if let Some((k, v)) = parts.get(1).and_then(|kv| kv.split_once('=')) {
                        r.metrics.insert(k.to_string(), v.to_string());
                    }
                }
                _ => {}
            }
        }
        r
    }

    /// What is wrong, if anything: a failed or missing check, or no end.
    pub fn problems(&self, expected: &[String]) -> Vec<String> {
        let mut p = Vec::new();
        for name in expected {
            match self.checks.iter().find(|c| &c.name == name) {
                Some(c) if c.passed => {}
                Some(_) => p.push(format!("check {name} failed")),
                None => p.push(format!("check {name} did not report")),
            }
        }
        if self.done_uptime.is_none() {
            p.push("the guest never reported done".into());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_checks_metrics_and_timings() {
        let log = "noise\r\n@@gpupm boot uptime=3.20\n[ 4.0] x @@gpupm metric a=1\n\
                   @@gpupm check one pass start=3.5 end=4.0\n@@gpupm check two fail start=4 end=9\n\
                   @@gpupm done uptime=9.5\n";
        let r = Report::parse(log);
        assert_eq!(r.boot_uptime, Some(3.2));
        assert_eq!(r.done_uptime, Some(9.5));
        assert_eq!(r.metrics.get("a").map(String::as_str), Some("1"));
        assert_eq!(r.checks.len(), 2);
        assert!(r.checks[0].passed && !r.checks[1].passed);
        assert!((r.checks[1].secs - 5.0).abs() < 1e-9);
        let want = vec!["one".to_string(), "two".to_string(), "three".to_string()];
        assert_eq!(
            r.problems(&want),
            ["check two failed", "check three did not report"]
        );
        assert!(Report::parse("@@gpupm check one pass")
            .problems(&want[..1])
            .contains(&"the guest never reported done".to_string()));
    }
}
