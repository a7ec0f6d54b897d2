//! The Prometheus rules in `deploy/prometheus/`: `promtool check rules`
//! accepts them, `promtool test rules` passes their unit tests, and the
//! unit tests cover every rule: each alert once firing and once not, each
//! recording rule with expected samples.
//!
//! Needs `promtool` (Debian package `prometheus`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use gpupm_deploy_tests::rules::{self, list, load_yaml, ALERTS, RECORDING, UNIT_TESTS};
use gpupm_deploy_tests::{promql, repo, require_tool};

fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new(require_tool("promtool", "prometheus"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run promtool");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn promtool_accepts_both_rule_files() {
    let (ok, text) = promtool(&["check", "rules", RECORDING, ALERTS]);
    assert!(ok, "promtool check rules:\n{text}");
    for (file, kind) in [(RECORDING, false), (ALERTS, true)] {
        let n = rules::load(file).iter().filter(|r| r.alert == kind).count();
        assert!(
            text.contains(&format!("SUCCESS: {n} rules found")),
            "{file}: {n} rules expected:\n{text}"
        );
    }
}

#[test]
fn promtool_unit_tests_pass() {
    let mut args = vec!["test", "rules"];
    args.extend(UNIT_TESTS);
    let (ok, text) = promtool(&args);
    assert!(ok, "promtool test rules:\n{text}");
    assert_eq!(
        text.matches("SUCCESS").count(),
        UNIT_TESTS.len(),
        "every unit-test file passes:\n{text}"
    );
}

/// Per alert: (cases where it fires, cases where it does not).
fn alert_cases() -> BTreeMap<String, (usize, usize)> {
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for file in UNIT_TESTS {
        let doc = load_yaml(&rules::path(file));
        for test in list(&doc["tests"]) {
            for case in list(&test["alert_rule_test"]) {
                let name = case["alertname"].as_str().expect("alertname").to_owned();
                let entry = cases.entry(name).or_default();
                if list(&case["exp_alerts"]).is_empty() {
                    entry.1 += 1;
                } else {
                    entry.0 += 1;
                }
            }
        }
    }
    cases
}

#[test]
fn every_alert_has_a_firing_and_a_non_firing_unit_test() {
    let cases = alert_cases();
    let alerts: BTreeSet<String> = rules::load(ALERTS)
        .into_iter()
        .filter(|r| r.alert)
        .map(|r| r.name)
        .collect();
    assert_eq!(alerts.len(), 6, "the six alerts of the runbook: {alerts:?}");
    for alert in &alerts {
        let (firing, quiet) = cases.get(alert).copied().unwrap_or_default();
        assert!(
            firing >= 1 && quiet >= 1,
            "{alert}: {firing} firing and {quiet} non-firing cases"
        );
    }
    let unknown: Vec<&String> = cases.keys().filter(|a| !alerts.contains(*a)).collect();
    assert!(
        unknown.is_empty(),
        "tests of alerts that do not exist: {unknown:?}"
    );
}

#[test]
fn every_recording_rule_has_expected_samples_in_a_unit_test() {
    let mut tested = BTreeSet::new();
    for file in UNIT_TESTS {
        let doc = load_yaml(&rules::path(file));
        for test in list(&doc["tests"]) {
            for case in list(&test["promql_expr_test"]) {
                if list(&case["exp_samples"]).is_empty() {
                    continue;
                }
                let expr = case["expr"].as_str().expect("expr");
                tested.extend(promql::metric_names(expr).expect("a PromQL expr"));
            }
        }
    }
    for rule in rules::load(RECORDING) {
        assert!(!rule.alert, "{RECORDING} holds recording rules only");
        assert!(
            tested.contains(&rule.name),
            "{} has no promql_expr_test with expected samples",
            rule.name
        );
    }
}

/// `deploy/prometheus/gpupm-scrape.yml` agrees with the package's daemon
/// configuration: the job the rules expect, over HTTPS with basic auth, to
/// the port of the documented `[metrics.authenticated]` listener; and
/// `promtool check config` accepts it once its files exist.
#[test]
fn the_shipped_scrape_job_reaches_the_authenticated_listener_and_promtool_accepts_it() {
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/gpupm-scrape.yml"))
        .expect("the scrape configuration");
    let doc = load_yaml(&repo().join("deploy/prometheus/gpupm-scrape.yml"));
    let job = &doc["scrape_configs"][0];
    assert_eq!(job["job_name"].as_str(), Some("gpupm"));
    assert_eq!(job["scheme"].as_str(), Some("https"));
    assert!(job["tls_config"]["ca_file"].as_str().is_some());
    assert!(job["basic_auth"]["password_file"].as_str().is_some());
    let documented = std::fs::read_to_string(repo().join("daemon/gpupmd.toml")).unwrap();
    let section = documented
        .split("[metrics.authenticated]")
        .nth(1)
        .expect("gpupmd.toml documents [metrics.authenticated]");
    let port = section
        .lines()
        .find_map(|l| l.strip_prefix("listen = \""))
        .and_then(|l| l.split('"').next())
        .and_then(|a| a.rsplit_once(':'))
        .map(|(_, p)| p.to_owned())
        .expect("its listen address");
    for t in job["static_configs"][0]["targets"]
        .as_vec()
        .expect("targets")
    {
        let target = t.as_str().expect("a target");
        assert!(
            target.ends_with(&format!(":{port}")),
            "{target} is not port {port}"
        );
    }

    // promtool checks the files a job names: give it real ones.
    let dir = gpupm_test_support::Scratch::new("scrape-config");
    let mut local = text;
    for (from, name) in [
        ("/etc/prometheus/gpupm-ca.crt", "ca.crt"),
        ("/etc/prometheus/gpupm-password", "password"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, "x").unwrap();
        local = local.replace(from, &path.display().to_string());
    }
    local = local.replace(
        "/usr/share/gpupm/prometheus/",
        &format!("{}/", repo().join("deploy/prometheus").display()),
    );
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, local).unwrap();
    let (ok, out) = promtool(&["check", "config", &config.display().to_string()]);
    assert!(ok, "promtool check config:\n{out}");
}
