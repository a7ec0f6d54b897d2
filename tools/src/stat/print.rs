//! `gpupm stat`'s readings as text, CSV and JSON.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use gpupm_client::Scope;
use gpupm_uapi::events::{self, EventInfo, Scope as EventScope, MAX_EVENTS};
use schemars::JsonSchema;
use serde::Serialize;

use crate::derived::{self, Metric};
use crate::error::CliResult;
use crate::interval::{Span, Status};
use crate::node::{Reading, Target};
use crate::numfmt::thousands;
use crate::output::emit_stream;

/// What a reading reads, in `gpupm stat`'s JSON and CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScopeKind {
    /// A VM.
    Vm,
    /// A context (an id's newest instance, or one instance).
    Ctx,
    /// The whole device.
    System,
}

impl ScopeKind {
    /// The name in CSV and text.
    fn name(self) -> &'static str {
        match self {
            ScopeKind::Vm => "vm",
            ScopeKind::Ctx => "ctx",
            ScopeKind::System => "system",
        }
    }
}

/// Kind and id of a target as the JSON and CSV schemas name them.
fn kind_id(t: Target) -> (ScopeKind, u32, Option<u64>) {
    match t {
        Target::Scope(Scope::System) => (ScopeKind::System, 0, None),
        Target::Scope(Scope::Vm(vm)) => (ScopeKind::Vm, vm, None),
        Target::Scope(Scope::Ctx(ctx)) => (ScopeKind::Ctx, ctx, None),
        Target::Instance { ctx, created_cycle } => (ScopeKind::Ctx, ctx, Some(created_cycle)),
    }
}

/// One reading of `gpupm stat --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StatJson {
    /// What was read.
    pub scope: ScopeKind,
    /// VM or context id (0 for the system).
    pub id: u32,
    /// The context instance read (`--ctx ID@CYCLE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_cycle: Option<u64>,
    /// Device cycle of the reading (its last commit): `end_cycle`.
    pub cycle: u64,
    /// The interval asked for (`-I`), in milliseconds; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// What the values cover: start and end cycle, device and wall time,
    /// timestamp. Totals since the device's reset start at cycle 0 and
    /// have no wall time.
    #[serde(flatten)]
    pub span: Span,
    /// `ok`; `catch_up` (the values cover the `no_data` rows before it, or
    /// a late reading: see the span); `no_data` (gpupmd did not answer:
    /// no values); `reset` (the device was reset: no values).
    pub status: Status,
    /// Why a row has no values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The chosen events, in their units (`units`): cumulative totals, or
    /// the span's deltas.
    pub events: BTreeMap<&'static str, u64>,
    /// The unit of each event in `events` (`bytes` for a `*_bytes` event).
    pub units: BTreeMap<&'static str, &'static str>,
    /// Chosen device-level events (NVLink) that a VM or context does not
    /// count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_supported: Vec<&'static str>,
    /// Derived metrics over the same span: `sm_utilization` (also, until
    /// the next minor release, as the deprecated `sm_utilisation`), `ipc`,
    /// `cpi`, `l1_hit_rate`, `l2_hit_rate` (fractions and ratios),
    /// `dram_bytes_per_s`, `pcie_bytes_per_s` (per second of device
    /// time); those without data in the span are left out.
    pub derived: BTreeMap<&'static str, f64>,
    /// Values that cannot be right (`ipc` above the SM's issue limit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// A confidential scope: `events` and `derived` are empty. Present
    /// only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed: bool,
}

/// One reading to print.
#[derive(Debug)]
pub struct Sample {
    span: Span,
    interval: Option<Duration>,
    status: Status,
    reason: Option<String>,
    /// Device counts (cumulative or the span's deltas); `None` without.
    values: Option<[u64; MAX_EVENTS]>,
    derived: Vec<Metric>,
    sealed: bool,
}

impl Sample {
    /// The values of `r` (or `delta`, its deltas over `span`).
    pub fn of(
        r: &Reading,
        delta: Option<&[u64; MAX_EVENTS]>,
        span: Span,
        interval: Option<Duration>,
        status: Status,
        clock_khz: u32,
    ) -> Sample {
        let values = *delta.unwrap_or(&r.values);
        let derived = derived::compute(
            &values,
            span.end_cycle.saturating_sub(span.start_cycle),
            clock_khz,
        );
        Sample {
            span,
            interval,
            status,
            reason: None,
            values: Some(values),
            derived,
            sealed: r.sealed,
        }
    }

    /// A row without values (`no_data`, `reset`) and why.
    pub fn missing(span: Span, interval: Option<Duration>, status: Status, why: String) -> Sample {
        Sample {
            span,
            interval,
            status,
            reason: Some(why),
            values: None,
            derived: Vec::new(),
            sealed: false,
        }
    }
}

/// Where and how readings are printed.
#[derive(Debug)]
pub struct Out<'a> {
    /// JSON lines.
    pub json: bool,
    /// CSV.
    pub csv: bool,
    /// On stderr (`gpupm stat -- CMD`), like `perf stat`.
    pub to_stderr: bool,
    /// The chosen events.
    pub shown: &'a [u16],
    /// What is read.
    pub target: Target,
}

const CSV_HEADER: &str =
    "scope,id,cycle,interval_ms,kind,name,value,timestamp,start_cycle,device_ms,wall_ms,status\n";

impl Out<'_> {
    fn write(&self, text: &str) -> CliResult {
        if self.to_stderr {
            // Like perf stat: the counts must not fail the command's run.
            std::io::stderr().lock().write_all(text.as_bytes()).ok();
            Ok(())
        } else {
            emit_stream(text)
        }
    }

    /// The CSV header, when CSV is asked for.
    pub fn header(&self) -> CliResult {
        if self.csv {
            self.write(CSV_HEADER)?;
        }
        Ok(())
    }

    /// Whether `e` is counted for the target (device-level events only
    /// for the system).
    fn supported(&self, e: &EventInfo) -> bool {
        e.unit.scope() != EventScope::Device || self.target == Target::Scope(Scope::System)
    }

    fn events(&self) -> impl Iterator<Item = &'static EventInfo> + '_ {
        self.shown.iter().filter_map(|&e| events::by_id(e))
    }

    /// Prints one reading.
    pub fn sample(&self, s: &Sample) -> CliResult {
        let text = if self.json {
            crate::output::json_line(&self.to_json(s))?
        } else if self.csv {
            self.csv_rows(s)
        } else {
            self.text(s)
        };
        self.write(&text)
    }

    fn to_json(&self, s: &Sample) -> StatJson {
        let (scope, id, created_cycle) = kind_id(self.target);
        let mut out = StatJson {
            scope,
            id,
            created_cycle,
            cycle: s.span.end_cycle,
            interval_ms: s
                .interval
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            span: s.span.clone(),
            status: s.status,
            reason: s.reason.clone(),
            events: BTreeMap::new(),
            units: BTreeMap::new(),
            not_supported: Vec::new(),
            derived: BTreeMap::new(),
            warnings: warnings(&s.derived),
            sealed: s.sealed,
        };
        let Some(values) = s.values.filter(|_| !s.sealed) else {
            return out;
        };
        let values = derived::in_units(&values);
        for e in self.events() {
            if self.supported(e) {
                out.events.insert(e.name, values[usize::from(e.id)]);
                out.units.insert(e.name, e.unit_name());
            } else {
                out.not_supported.push(e.name);
            }
        }
        out.derived = s.derived.iter().map(|m| (m.name, m.value)).collect();
        if let Some(u) = derived::get(&s.derived, "sm_utilization") {
            out.derived.insert("sm_utilisation", u);
        }
        out
    }

    fn csv_rows(&self, s: &Sample) -> String {
        let (kind, id, created_cycle) = kind_id(self.target);
        let kind = kind.name();
        let id = created_cycle.map_or_else(|| id.to_string(), |c| format!("{id}@{c}"));
        let iv = s
            .interval
            .map(|d| d.as_millis().to_string())
            .unwrap_or_default();
        let sp = &s.span;
        let wall = sp.wall_ms.map(|w| format!("{w:.3}")).unwrap_or_default();
        let tail = format!(
            "{},{},{:.3},{wall},{}",
            sp.timestamp,
            sp.start_cycle,
            sp.device_ms,
            s.status.name()
        );
        let mut t = String::new();
        let mut row = |k: &str, name: &str, value: String| {
            t += &format!(
                "{kind},{id},{},{iv},{k},{name},{value},{tail}\n",
                sp.end_cycle
            );
        };
        if s.sealed {
            return t;
        }
        let values = s.values.map(|v| derived::in_units(&v));
        for e in self.events() {
            let v = match values {
                Some(_) if !self.supported(e) => "<not supported>".to_string(),
                Some(v) => v[usize::from(e.id)].to_string(),
                None => String::new(),
            };
            row("event", e.name, v);
        }
        for m in &s.derived {
            row("derived", m.name, m.value.to_string());
        }
        t
    }

    fn text(&self, s: &Sample) -> String {
        let target = self.target;
        let mut t = match (s.interval, s.status) {
            (None, _) => format!(
                "Performance counter stats for {target} over {}, read {}:\n\n",
                s.span.describe(),
                s.span.timestamp
            ),
            (Some(_), Status::Ok) => {
                format!("{target}  {}  {}\n", s.span.timestamp, s.span.describe())
            }
            (Some(_), Status::CatchUp) => format!(
                "{target}  {}  CATCH-UP over {}: covers everything since the last reading, \
                 the rows without data included\n",
                s.span.timestamp,
                s.span.describe()
            ),
            (Some(_), Status::NoData | Status::Reset) => format!(
                "{target}  {}  {}: {}\n",
                s.span.timestamp,
                if s.status == Status::Reset {
                    "RESET"
                } else {
                    "NO DATA"
                },
                s.reason.as_deref().unwrap_or("")
            ),
        };
        if s.sealed {
            t += "  (confidential VM: counters are sealed; only the VM can decrypt them: --key-file)\n\n";
            return t;
        }
        let values = s.values.map(|v| derived::in_units(&v));
        for e in self.events() {
            let (value, note) = match values {
                Some(_) if !self.supported(e) => (
                    "<not supported>".to_string(),
                    "device-level event: not counted per VM or context",
                ),
                Some(v) => (thousands(v[usize::from(e.id)]), e.unit_name()),
                None => ("<not counted>".to_string(), e.unit_name()),
            };
            t += &format!("  {value:>26}  {:<22} # {note}\n", e.name);
        }
        if !s.derived.is_empty() {
            t += "\n";
            for m in &s.derived {
                let flag = warning(m).map(|w| format!("   # {w}")).unwrap_or_default();
                t += &format!("  {:>26}  {}{flag}\n", derived::human(m), m.name);
            }
        }
        t + "\n"
    }
}

/// Why a derived value cannot be right, if it cannot.
fn warning(m: &Metric) -> Option<String> {
    (m.name == "ipc" && m.value > derived::SM_MAX_IPC).then(|| {
        format!(
            "above the SM's issue limit of {} warp instructions per cycle: the counts are inconsistent",
            derived::SM_MAX_IPC
        )
    })
}

fn warnings(m: &[Metric]) -> Vec<String> {
    m.iter()
        .filter_map(|m| warning(m).map(|w| format!("{}: {w}", m.name)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipc_above_the_issue_limit_is_flagged() {
        let ok = Metric {
            name: "ipc",
            value: 3.9,
        };
        let impossible = Metric {
            name: "ipc",
            value: 20.0,
        };
        assert_eq!(warning(&ok), None);
        assert!(
            warning(&impossible).is_some_and(|w| w.starts_with("above the SM's issue limit of 4"))
        );
        assert_eq!(warnings(&[ok, impossible]).len(), 1);
    }
}
