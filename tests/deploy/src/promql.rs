//! The metric names a PromQL expression selects, and Grafana query text
//! turned into plain PromQL.

use std::collections::BTreeSet;

use promql_parser::parser::{self, Expr, VectorSelector};
use promql_parser::util::{walk_expr, ExprVisitor};

/// Every metric name `expr` selects (vector and range selectors); an
/// error for text that is not PromQL or a selector without a name.
pub fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let ast = parser::parse(expr).map_err(|e| format!("{expr:?}: {e}"))?;
    let mut names = Names::default();
    walk_expr(&mut names, &ast).map_err(|e| format!("{expr:?}: {e}"))?;
    Ok(names.0)
}

#[derive(Default)]
struct Names(BTreeSet<String>);

impl Names {
    fn add(&mut self, vs: &VectorSelector) -> Result<(), String> {
        let name = vs
            .name
            .clone()
            .ok_or_else(|| format!("a selector without a metric name: {vs}"))?;
        self.0.insert(name);
        Ok(())
    }
}

impl ExprVisitor for Names {
    type Error = String;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        match expr {
            Expr::VectorSelector(vs) => self.add(vs)?,
            Expr::MatrixSelector(ms) => self.add(&ms.vs)?,
            _ => {}
        }
        Ok(true)
    }
}

/// Grafana's query text as Prometheus sees it with every template
/// variable at "All" (`.*`) and the range variables at `rate_window`.
pub fn grafana_to_promql(query: &str, rate_window: &str) -> String {
    let mut q = query
        .replace("$__rate_interval", rate_window)
        .replace("$__interval", rate_window)
        .replace("$__range", rate_window);
    while let Some(start) = q.find('$') {
        let end = q[start + 1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '{' || c == '}'))
            .map_or(q.len(), |n| start + 1 + n);
        q.replace_range(start..end, ".*");
    }
    q
}

/// The template variable names `query` uses (`$name` or `${name}`),
/// Grafana's own `$__…` variables left out.
pub fn variables(query: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = query;
    while let Some(start) = rest.find('$') {
        let tail = &rest[start + 1..];
        let tail = tail.strip_prefix('{').unwrap_or(tail);
        let name: String = tail
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && !name.starts_with("__") {
            out.insert(name.clone());
        }
        rest = &tail[name.len()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_every_selector_and_not_from_labels_or_functions() {
        let names = metric_names(
            r#"sum by (instance) (rate(a_total{job="x"}[5m])) / on (instance) group_left b > bool 0 or absent(c)"#,
        )
        .unwrap();
        assert_eq!(
            names,
            ["a_total", "b", "c"]
                .map(str::to_owned)
                .into_iter()
                .collect()
        );
    }

    #[test]
    fn unnamed_selectors_and_bad_syntax_are_errors() {
        assert!(metric_names(r#"{job="x"}"#).is_err());
        assert!(metric_names("sum(").is_err());
    }

    #[test]
    fn grafana_variables_become_match_all_and_windows() {
        let q = r#"rate(x{instance=~"$instance", vm=~"${vm}"}[$__rate_interval])"#;
        assert_eq!(
            grafana_to_promql(q, "1m"),
            r#"rate(x{instance=~".*", vm=~".*"}[1m])"#
        );
        assert_eq!(
            variables(q),
            ["instance", "vm"].map(str::to_owned).into_iter().collect()
        );
    }
}
