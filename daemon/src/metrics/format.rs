//! Exposition formats. `prometheus-client` encodes OpenMetrics text; for
//! clients that do not ask for OpenMetrics (curl, `promtool check metrics`)
//! the same encoding is rewritten into the Prometheus text format 0.0.4,
//! as the Go client library negotiates.

/// Content type of OpenMetrics text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus text format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which exposition format a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text.
    OpenMetrics,
    /// Prometheus text 0.0.4.
    Prometheus,
}

impl Format {
    /// The format for an `Accept` header value (None: no header).
    pub fn negotiate(accept: Option<&str>) -> Self {
        match accept {
            Some(a)
                if a.to_ascii_lowercase()
                    .contains("application/openmetrics-text") =>
            {
                Format::OpenMetrics
            }
            _ => Format::Prometheus,
        }
    }

    /// `Content-Type` of a response in this format.
    pub const fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
        }
    }
}

/// Rewrites OpenMetrics text into Prometheus text 0.0.4: counter families
/// are named with their `_total` sample name, `# UNIT` and `# EOF` lines go.
/// Sample lines are unchanged (label values never contain a raw newline).
pub fn openmetrics_to_prometheus(om: &str) -> String {
    let counters: Vec<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len() + 8 * counters.len());
    for line in om.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|tag| {
            let rest = line.strip_prefix(tag)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{tag}{name}_total {tail}"))
        });
        match renamed {
            Some(r) => out.push_str(&r),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_families_take_their_sample_name() {
        let om = "# HELP a_events Some help.\n# TYPE a_events counter\na_events_total{event=\"x\"} 3\n\
                  # HELP up_seconds Up.\n# TYPE up_seconds gauge\n# UNIT up_seconds seconds\nup_seconds 1.5\n# EOF\n";
        assert_eq!(
            openmetrics_to_prometheus(om),
            "# HELP a_events_total Some help.\n# TYPE a_events_total counter\na_events_total{event=\"x\"} 3\n\
             # HELP up_seconds Up.\n# TYPE up_seconds gauge\nup_seconds 1.5\n"
        );
    }

    #[test]
    fn negotiation_prefers_openmetrics_only_when_asked() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::negotiate(None), Format::Prometheus);
    }
}
