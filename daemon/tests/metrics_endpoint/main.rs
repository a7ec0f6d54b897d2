//! The metrics endpoint against real tools and real callers: `promtool
//! check metrics` on both listeners' scrapes, the bounded and cumulative
//! context series ([`harness`] serves the in-process fixture), credentials
//! and client certificates refused ([`access`]), a real `prometheus`
//! server scraping over TLS with a client certificate and basic auth
//! ([`prometheus`]), and the real driver and daemon: an unmapped uid's
//! scrape and counters through context churn and restarts ([`daemon`]).

mod access;
mod daemon;
mod fixture;
mod harness;
mod prometheus;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};

use fixture::{FixtureView, VM1_SM_INST_EXECUTED};
use gpupm_test_support::require_tool;
use gpupm_test_support::scrape::{http_get, samples};
use gpupm_uapi::events::{Scope as EventScope, CATALOGUE, MAX_EVENTS};
use gpupmd::metrics::{OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE};
use harness::{start_local, start_tenant_plain, value_of};

/// Families that name a tenant (a VM or a context).
pub const TENANT_FAMILIES: [&str; 3] = [
    "gpupm_vm_events_total",
    "gpupm_context_events_total",
    "gpupm_vm_confidential",
];

/// `promtool check metrics` finds nothing to say about `body`.
pub fn assert_promtool_clean(body: &str) {
    let promtool = require_tool("promtool", "prometheus");
    let mut lint = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    let problems = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && problems.trim().is_empty(),
        "promtool: {problems}\n--- scrape ---\n{body}"
    );
}

/// What of `body` names a tenant: a tenant family's sample or any sample
/// with a `vm` or `ctx` label.
pub fn tenant_samples(body: &str) -> Vec<String> {
    samples(body)
        .into_iter()
        .filter(|(n, l, _)| {
            TENANT_FAMILIES.contains(&n.as_str()) || l.contains_key("vm") || l.contains_key("ctx")
        })
        .map(|(n, l, v)| format!("{n}{l:?} {v}"))
        .chain(
            body.lines()
                .filter(|l| {
                    TENANT_FAMILIES
                        .iter()
                        .any(|f| l.contains(f.trim_end_matches("_total")))
                })
                .map(str::to_owned),
        )
        .collect()
}

#[test]
fn the_local_listener_passes_promtool_and_names_no_tenant() {
    let (_rt, addr) = start_local(FixtureView::new(3), 64);
    let (status, headers, body) = http_get(addr, "/metrics", None);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains(&format!("content-type: {PROMETHEUS_CONTENT_TYPE}")),
        "{headers}"
    );
    assert_promtool_clean(&body);
    assert_eq!(tenant_samples(&body), Vec::<String>::new());
    assert_eq!(
        value_of(
            &body,
            "gpupm_device_events_total",
            &[("event", "nvlink_rx_flits")]
        ),
        Some("4242".into())
    );
    for (name, want) in [
        ("gpupm_handshake_fallbacks_total", "3"),
        ("gpupm_stream_mirrored_records_total", "4990"),
        ("gpupm_stream_mirror_fallbacks_total", "2"),
        ("gpupm_handshake_duration_seconds_count", "3"),
        ("gpupm_handshake_response_max_seconds", "0.00125"),
        ("gpupm_uptime_seconds", "42.5"),
    ] {
        assert_eq!(value_of(&body, name, &[]), Some(want.into()), "{name}");
    }
    // The listener counts itself: this request is answered after the scrape.
    assert_eq!(
        value_of(&body, "gpupm_metrics_connections", &[("listener", "local")]),
        Some("1".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_device_lag_seconds_total", &[]),
        Some("0.25".into())
    );
}

#[test]
fn the_tenant_listener_reports_the_fixture_totals_and_keeps_the_histogram() {
    let (_rt, addr, client) = start_tenant_plain(FixtureView::new(3), 64);
    let (code, _, body) = client.get(addr, "/metrics").unwrap();
    assert_eq!(code, 200, "{body}");
    assert_promtool_clean(&body);
    assert_eq!(
        value_of(
            &body,
            "gpupm_vm_events_total",
            &[("vm", "1"), ("event", "sm_inst_executed")]
        ),
        Some(VM1_SM_INST_EXECUTED.to_string())
    );
    // Device-level events are never per VM; the confidential VM 2 has no
    // per-event series at all, only its flag.
    let all = samples(&body);
    assert!(!all
        .iter()
        .any(|(n, l, _)| n == "gpupm_vm_events_total" && l["event"].starts_with("nvlink")));
    assert!(!all.iter().any(
        |(n, l, _)| n.ends_with("events_total") && l.get("vm").map(String::as_str) == Some("2")
    ));
    assert_eq!(
        value_of(&body, "gpupm_vm_confidential", &[("vm", "2")]),
        Some("1".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_vm_confidential", &[("vm", "1")]),
        Some("0".into())
    );

    // OpenMetrics when asked; the histogram keeps growing across scrapes
    // of either listener: three samples per snapshot.
    let (s, h, om) = harness::get_with_accept(addr, "application/openmetrics-text; version=1.0.0");
    assert_eq!(s, 200);
    assert!(
        h.to_ascii_lowercase()
            .contains(&format!("content-type: {OPENMETRICS_CONTENT_TYPE}")),
        "{h}"
    );
    assert!(om.ends_with("# EOF\n"));
    assert_eq!(
        value_of(&om, "gpupm_handshake_duration_seconds_count", &[]),
        Some("6".into())
    );
}

#[test]
fn context_series_are_instances_capped_per_vm_and_add_up_to_the_vm() {
    const CAP: usize = 4;
    const VM3_CONTEXTS: u32 = 10;
    let fixture = FixtureView::new(VM3_CONTEXTS);
    let newest: BTreeSet<(String, String)> = {
        let mut infos: Vec<_> = fixture.contexts.iter().filter(|c| c.info.vm == 3).collect();
        infos.sort_by_key(|c| std::cmp::Reverse(c.info.created_cycle));
        infos
            .iter()
            .take(CAP)
            .map(|c| (c.info.ctx.to_string(), c.info.created_cycle.to_string()))
            .collect()
    };
    let vm_totals: BTreeMap<u32, [u64; MAX_EVENTS]> = fixture
        .vms
        .iter()
        .filter_map(|(&vm, c)| Some((vm, (*c)?)))
        .collect();
    let (_rt, addr, client) = start_tenant_plain(fixture, CAP);
    let (_, _, body) = client.get(addr, "/metrics").unwrap();

    let mut instances: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    let mut sums: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (name, labels, value) in samples(&body) {
        if name != "gpupm_context_events_total" {
            continue;
        }
        let created = labels.get("created_cycle").cloned().unwrap_or_default();
        assert_eq!(
            created.is_empty(),
            labels["ctx"] == "other",
            "only ctx=\"other\" lacks created_cycle: {labels:?}"
        );
        instances
            .entry(labels["vm"].clone())
            .or_default()
            .insert((labels["ctx"].clone(), created));
        *sums
            .entry((labels["vm"].clone(), labels["event"].clone()))
            .or_default() += value.parse::<u64>().unwrap();
    }
    let vm3 = &instances["3"];
    assert_eq!(vm3.len(), CAP + 1, "{vm3:?}");
    let mut want = newest;
    want.insert(("other".into(), String::new()));
    assert_eq!(vm3, &want);
    // Context 1 ran twice: two instances, two series.
    assert_eq!(
        instances["1"],
        BTreeSet::from([
            ("1".to_owned(), "50".to_owned()),
            ("1".to_owned(), "100".to_owned()),
            ("2".to_owned(), "200".to_owned()),
            ("other".to_owned(), String::new()),
        ])
    );
    assert!(
        !instances.contains_key("2"),
        "confidential VM exported contexts"
    );
    // Every plain VM's context series, `other` included, add up to its
    // VM series, event by event.
    let partition_events: Vec<_> = CATALOGUE
        .iter()
        .filter(|e| e.unit.scope() != EventScope::Device)
        .collect();
    for (vm, totals) in &vm_totals {
        for e in &partition_events {
            assert_eq!(
                sums[&(vm.to_string(), e.name.to_owned())],
                // Exported in the event's unit: device counts × scale.
                totals[usize::from(e.id)] * e.scale(),
                "VM {vm} {}",
                e.name
            );
        }
    }
}
