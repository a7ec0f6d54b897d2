//! `deploy/grafana/gpupm.json`: a well-formed dashboard whose queries use
//! only metrics a real `gpupmd` exports (or the rules record), and every
//! panel of which shows data from a real Prometheus server scraping a real
//! node with the rules loaded. The rules' own metric names are checked
//! against the same scrape.
//!
//! Grafana itself is not run (Debian has no package); its query text is
//! turned into PromQL with every template variable at "All" and
//! `$__rate_interval` at one minute.

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use gpupm_deploy_tests::node::Node;
use gpupm_deploy_tests::prometheus::{Prometheus, Target, POLL};
use gpupm_deploy_tests::promql::{grafana_to_promql, metric_names, variables};
use gpupm_deploy_tests::rules::{self, ALERTS, RECORDING};
use gpupm_deploy_tests::scenario::{scenario, STEP};
use gpupm_deploy_tests::web::WebAuth;
use gpupm_deploy_tests::{repo, wait_until};
use serde_json::Value;

/// The series Prometheus makes itself for every target.
const PROMETHEUS_OWN: [&str; 1] = ["up"];

fn dashboard() -> Value {
    let path = repo().join("deploy/grafana/gpupm.json");
    let text = fs::read_to_string(&path).expect("read the dashboard");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every panel (rows' nested panels too).
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// `(panel title, query text)` of every panel target.
fn panel_queries(d: &Value) -> Vec<(String, String)> {
    panels(d)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or("?").to_owned();
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap_or("").to_owned()))
        })
        .collect()
}

/// `(variable, selector, label)` of every `label_values(SELECTOR, LABEL)`
/// query variable.
fn variable_queries(d: &Value) -> Vec<(String, String, String)> {
    d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let name = v["name"].as_str().expect("a variable name").to_owned();
            let q = v["query"]["query"].as_str().expect("a variable query");
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("${name}: not label_values(…): {q}"));
            let (selector, label) = inner
                .rsplit_once(',')
                .expect("label_values(selector, label)");
            (name, selector.trim().to_owned(), label.trim().to_owned())
        })
        .collect()
}

#[test]
fn dashboard_is_well_formed() {
    let d = dashboard();
    assert_eq!(d["uid"], "gpupm-fleet");
    let all = panels(&d);
    let mut ids = BTreeSet::new();
    for p in &all {
        let id = p["id"].as_u64().expect("a panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        for k in ["h", "w", "x", "y"] {
            assert!(p["gridPos"][k].is_u64(), "panel {id}: gridPos.{k}");
        }
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {id}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {id} has no query");
        let refs: BTreeSet<&str> = targets.iter().filter_map(|t| t["refId"].as_str()).collect();
        assert_eq!(refs.len(), targets.len(), "panel {id}: refIds");
    }
    let defined: BTreeSet<String> = d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect();
    for want in ["datasource", "instance", "vm", "ctx", "event"] {
        assert!(defined.contains(want), "no ${want} variable");
    }
    let used = panel_queries(&d)
        .into_iter()
        .map(|(_, q)| q)
        .chain(variable_queries(&d).into_iter().map(|(_, s, _)| s));
    for q in used {
        for v in variables(&q) {
            assert!(defined.contains(&v), "${v} is not defined: {q}");
        }
    }
}

/// Metric names of the sample lines of a scrape.
fn scraped_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_metric_named_is_scraped_or_recorded_and_every_panel_shows_data() {
    let auth = WebAuth::new();
    let mut node = Node::start("node-a", &scenario(31), "", &auth);
    let dev = node.device();
    for _ in 0..20 {
        assert!(
            dev.step(STEP, || node.daemon_gone()),
            "gpupmd died:\n{}",
            node.logs()
        );
    }
    dev.flush();
    let scraped = scraped_names(&node.scrape());
    assert!(scraped.len() >= 20, "{scraped:?}");
    let recorded: BTreeSet<String> = rules::load(RECORDING).into_iter().map(|r| r.name).collect();
    let known = |name: &String| {
        scraped.contains(name) || recorded.contains(name) || PROMETHEUS_OWN.contains(&name.as_str())
    };

    let mut unknown = Vec::new();
    for rule in rules::all() {
        for name in metric_names(&rule.expr).expect("rule PromQL") {
            if !known(&name) {
                unknown.push(format!("rule {}: {name}", rule.name));
            }
        }
    }
    let d = dashboard();
    let panel = panel_queries(&d);
    let vars = variable_queries(&d);
    for (title, q) in &panel {
        for name in metric_names(&grafana_to_promql(q, "1m")).expect("panel PromQL") {
            if !known(&name) {
                unknown.push(format!("panel {title:?}: {name}"));
            }
        }
    }
    for (var, selector, _) in &vars {
        for name in metric_names(&grafana_to_promql(selector, "1m")).expect("variable PromQL") {
            if !known(&name) {
                unknown.push(format!("variable ${var}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "names neither in a scrape of gpupmd nor recorded: {unknown:#?}\nscraped: {scraped:#?}"
    );

    let target = Target {
        instance: node.name.clone(),
        addr: node.metrics,
    };
    let prom = Prometheus::start(
        &[target],
        &[rules::path(RECORDING), rules::path(ALERTS)],
        &auth,
    );
    wait_until(
        "every panel and variable shows data",
        Duration::from_secs(60),
        POLL,
        || {
            for (title, q) in &panel {
                let promql = grafana_to_promql(q, "1m");
                if prom.query(&promql)?.is_empty() {
                    return Err(format!("panel {title:?}: no data for {promql}"));
                }
            }
            for (var, selector, label) in &vars {
                let found = prom.query(&grafana_to_promql(selector, "1m"))?;
                if !found.iter().any(|s| !s.label(label).is_empty()) {
                    return Err(format!("${var}: no {label} values from {selector}"));
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "{} panel queries and {} variables show data; {} metric names scraped, {} recorded",
        panel.len(),
        vars.len(),
        scraped.len(),
        recorded.len()
    );
}
