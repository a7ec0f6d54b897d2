//! The rule files under `deploy/prometheus/` and their promtool unit
//! tests, read as YAML.

use std::fs;
use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

/// The recording rules.
pub const RECORDING: &str = "deploy/prometheus/gpupm-recording.rules.yml";
/// The alerting rules.
pub const ALERTS: &str = "deploy/prometheus/gpupm-alerts.rules.yml";
/// The promtool unit tests.
pub const UNIT_TESTS: [&str; 2] = [
    "deploy/prometheus/tests/gpupm-alerts.test.yml",
    "deploy/prometheus/tests/gpupm-recording.test.yml",
];

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Whether it is an alert (else a recording rule).
    pub alert: bool,
    /// The alert name or the recorded metric name.
    pub name: String,
    /// The PromQL expression.
    pub expr: String,
}

/// `rel` (a path relative to the workspace root) as an absolute path.
pub fn path(rel: &str) -> PathBuf {
    crate::repo().join(rel)
}

/// The single YAML document of `path`.
pub fn load_yaml(path: &Path) -> Yaml {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut docs =
        YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(docs.len(), 1, "{}: one YAML document", path.display());
    docs.remove(0)
}

/// A list in `y` (an empty one when the key is absent).
pub fn list(y: &Yaml) -> &[Yaml] {
    y.as_vec().map_or(&[], Vec::as_slice)
}

/// Every rule of the rule file `rel`.
pub fn load(rel: &str) -> Vec<Rule> {
    let doc = load_yaml(&path(rel));
    let mut out = Vec::new();
    for group in list(&doc["groups"]) {
        for rule in list(&group["rules"]) {
            let (alert, name) = match (rule["alert"].as_str(), rule["record"].as_str()) {
                (Some(a), None) => (true, a),
                (None, Some(r)) => (false, r),
                _ => panic!("{rel}: a rule is neither an alert nor a recording rule: {rule:?}"),
            };
            let expr = rule["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{rel}: {name} has no expr"));
            out.push(Rule {
                alert,
                name: name.to_owned(),
                expr: expr.to_owned(),
            });
        }
    }
    out
}

/// Every rule of both files.
pub fn all() -> Vec<Rule> {
    let mut rules = load(RECORDING);
    rules.extend(load(ALERTS));
    rules
}

/// Writes the alert rules to `to` with every `for:` duration replaced by
/// `duration`, expressions unchanged: a live test cannot wait the minutes
/// the fleet's `for:` asks for (the promtool unit tests check those).
/// Returns how many durations it replaced.
pub fn alerts_with_for(to: &Path, duration: &str) -> usize {
    let text = fs::read_to_string(path(ALERTS)).expect("read the alert rules");
    let mut replaced = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.split_once("for: ") {
            Some((indent, _)) if indent.trim().is_empty() => {
                replaced += 1;
                format!("{indent}for: {duration}")
            }
            _ => l.to_owned(),
        })
        .collect();
    fs::write(to, lines.join("\n") + "\n").expect("write the alert rules copy");
    replaced
}
