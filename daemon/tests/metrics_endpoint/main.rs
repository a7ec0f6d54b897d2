//! The metrics endpoint against real tools: `promtool check metrics` on a
//! scrape, a real `prometheus` server scraping it on loopback, and the
//! bounded context cardinality.

mod fixture;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixture::{FixtureView, SteadyHealth, VM1_SM_INST_EXECUTED};
use gpupm_test_support::process::KillOnDrop;
use gpupm_test_support::require_tool;
use gpupm_test_support::scrape::{http_get, raw_response, samples};
use gpupm_uapi::events::{Scope as EventScope, CATALOGUE, MAX_EVENTS};
use gpupmd::metrics::{serve, MetricsConfig, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE};
use gpupmd::view::CounterView;

/// Serves the fixture on a loopback port; the runtime lives as long as the
/// returned guard.
fn start_endpoint(
    view: FixtureView,
    max_contexts_per_vm: usize,
) -> (tokio::runtime::Runtime, SocketAddr) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let health = Arc::new(SteadyHealth);
    rt.spawn(async move {
        if let Err(e) = serve(
            listener,
            MetricsConfig {
                max_contexts_per_vm,
            },
            Arc::new(view),
            health,
        )
        .await
        {
            panic!("metrics endpoint stopped: {e}");
        }
    });
    (rt, addr)
}

fn value_of(text: &str, name: &str, want: &[(&str, &str)]) -> Option<String> {
    samples(text).into_iter().find_map(|(n, labels, v)| {
        (n == name
            && labels.len() == want.len()
            && want
                .iter()
                .all(|(k, val)| labels.get(*k).map(String::as_str) == Some(val)))
        .then_some(v)
    })
}

#[test]
fn scrape_passes_promtool_and_reports_the_fixture_totals() {
    let promtool = require_tool("promtool", "prometheus");
    let (_rt, addr) = start_endpoint(FixtureView::new(3), 64);

    let (status, headers, body) = http_get(addr, "/metrics", None);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains(&format!("Content-Type: {PROMETHEUS_CONTENT_TYPE}")),
        "{headers}"
    );

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

    assert_eq!(
        value_of(
            &body,
            "gpupm_vm_events_total",
            &[("vm", "1"), ("event", "sm_inst_executed")]
        ),
        Some(VM1_SM_INST_EXECUTED.to_string())
    );
    assert_eq!(
        value_of(
            &body,
            "gpupm_device_events_total",
            &[("event", "nvlink_rx_flits")]
        ),
        Some("4242".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_handshake_fallbacks_total", &[]),
        Some("3".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_stream_mirrored_records_total", &[]),
        Some("4990".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_stream_mirror_fallbacks_total", &[]),
        Some("2".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_handshake_duration_seconds_count", &[]),
        Some("3".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_handshake_response_max_seconds", &[]),
        Some("0.00125".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_uptime_seconds", &[]),
        Some("42.5".into())
    );
    assert_eq!(
        value_of(&body, "gpupm_device_lag_seconds_total", &[]),
        Some("0.25".into())
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

    // The histogram keeps growing across scrapes: three samples per snapshot.
    let (_, headers, om) = http_get(
        addr,
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    );
    assert!(
        headers.contains(&format!("Content-Type: {OPENMETRICS_CONTENT_TYPE}")),
        "{headers}"
    );
    assert!(om.ends_with("# EOF\n"));
    assert_eq!(
        value_of(&om, "gpupm_handshake_duration_seconds_count", &[]),
        Some("6".into())
    );
}

#[test]
fn anything_but_get_metrics_is_refused_and_the_endpoint_survives() {
    let (_rt, addr) = start_endpoint(FixtureView::new(1), 4);
    assert_eq!(http_get(addr, "/", None).0, "HTTP/1.1 404 Not Found");
    assert_eq!(
        http_get(addr, "/metricsx", None).0,
        "HTTP/1.1 404 Not Found"
    );

    let send = |raw: &[u8]| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(raw).unwrap();
        raw_response(s).0
    };
    assert_eq!(
        send(b"POST /metrics HTTP/1.1\r\n\r\n"),
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        send(b"\x00\xff garbage\r\n\r\n"),
        "HTTP/1.1 400 Bad Request"
    );
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Fill: ".to_vec();
    huge.resize(64 * 1024, b'a');
    assert_eq!(send(&huge), "HTTP/1.1 431 Request Header Fields Too Large");
    // A client that connects and leaves without a request.
    drop(TcpStream::connect(addr).unwrap());

    assert_eq!(http_get(addr, "/metrics?x=1", None).0, "HTTP/1.1 200 OK");
}

#[test]
fn context_series_are_capped_per_vm_and_sums_are_preserved() {
    const CAP: usize = 4;
    const VM3_CONTEXTS: u32 = 10;
    let fixture = FixtureView::new(VM3_CONTEXTS);
    let expected_newest: BTreeSet<String> = {
        let mut ctxs = fixture.contexts(3).unwrap();
        ctxs.sort_by_key(|c| std::cmp::Reverse(c.created_cycle));
        ctxs.iter().take(CAP).map(|c| c.ctx.to_string()).collect()
    };
    let mut expected_sum = [0u64; MAX_EVENTS];
    for c in fixture.contexts.iter().filter(|c| c.info.vm == 3) {
        for (s, v) in expected_sum.iter_mut().zip(c.counters) {
            *s += v;
        }
    }
    let (_rt, addr) = start_endpoint(fixture, CAP);
    let (_, _, body) = http_get(addr, "/metrics", None);

    let mut labels_by_vm: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut sum_vm3: BTreeMap<String, u64> = BTreeMap::new();
    for (name, labels, value) in samples(&body) {
        if name != "gpupm_context_events_total" {
            continue;
        }
        labels_by_vm
            .entry(labels["vm"].clone())
            .or_default()
            .insert(labels["ctx"].clone());
        if labels["vm"] == "3" {
            *sum_vm3.entry(labels["event"].clone()).or_default() += value.parse::<u64>().unwrap();
        }
    }
    let vm3 = &labels_by_vm["3"];
    assert_eq!(vm3.len(), CAP + 1, "{vm3:?}");
    assert!(vm3.contains("other"));
    assert_eq!(
        vm3.iter()
            .filter(|c| *c != "other")
            .cloned()
            .collect::<BTreeSet<_>>(),
        expected_newest
    );
    assert_eq!(
        labels_by_vm["1"],
        BTreeSet::from(["1".to_owned(), "2".to_owned()])
    );
    assert!(
        !labels_by_vm.contains_key("2"),
        "confidential VM exported contexts"
    );

    let partition_events: Vec<_> = CATALOGUE
        .iter()
        .filter(|e| e.unit.scope() != EventScope::Device)
        .collect();
    assert_eq!(sum_vm3.len(), partition_events.len());
    for e in partition_events {
        assert_eq!(
            sum_vm3[e.name],
            expected_sum[usize::from(e.id)],
            "{}",
            e.name
        );
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn real_prometheus_scrapes_the_endpoint_and_answers_a_known_total() {
    let prometheus = require_tool("prometheus", "prometheus");
    let (_rt, addr) = start_endpoint(FixtureView::new(3), 64);
    let dir = gpupm_test_support::Scratch::new("prometheus");
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: gpupm\n    static_configs:\n      - targets: ['{addr}']\n"
        ),
    )
    .unwrap();
    let web = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(&prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let mut server = KillOnDrop(child, "prometheus");

    let query = r#"gpupm_vm_events_total{vm="1",event="sm_inst_executed"}"#;
    let target = format!("/api/v1/query?query={}", url_encode(query));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::from("no answer yet");
    let answered = loop {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "prometheus exited ({status}); log: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            break None;
        }
        if TcpStream::connect(web).is_ok() {
            let (_, _, body) = http_get(web, &target, None);
            let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if let Some(v) = json["data"]["result"][0]["value"][1].as_str() {
                break Some(v.to_owned());
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(server);
    let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    assert_eq!(
        answered,
        Some(VM1_SM_INST_EXECUTED.to_string()),
        "last answer: {last}\nprometheus log:\n{log}"
    );
}
