//! Who gets what from the authenticated listener, and what any caller can
//! make either listener hold: wrong or missing credentials get 401 and
//! nothing else, a client without the required certificate gets no TLS
//! session, tenant series are refused on a listener that authenticates
//! nobody, and malformed, oversized, idle or surplus connections are
//! answered or closed within their bounds while the endpoint keeps serving.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gpupm_test_support::scrape::{http_get, raw_response};
use gpupm_test_support::web::{write_web_config, Client, ClientCerts, Pki};
use gpupm_test_support::Scratch;
use gpupmd::metrics::{Limits, MetricsError};

use crate::fixture::FixtureView;
use crate::harness::{
    start_authenticated, start_local_with, start_tenant_plain, value_of, PASSWORD, USER,
};
use crate::tenant_samples;

/// A refusal: 401, a challenge, and a body that says nothing else.
fn assert_refused(answer: Result<(u16, String, String), String>, what: &str) {
    let (code, headers, body) = answer.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(code, 401, "{what}: {body}");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("www-authenticate: basic"),
        "{what}: {headers}"
    );
    assert_eq!(body, "Unauthorized\n", "{what}");
}

#[test]
fn missing_or_wrong_credentials_get_401_and_nothing_else() {
    let (_rt, addr, right) = start_tenant_plain(FixtureView::new(3), 64);
    let attempts = [
        ("no credentials", Client::plain()),
        (
            "a wrong password",
            Client::plain().basic_auth(USER, "hunter2"),
        ),
        ("an empty password", Client::plain().basic_auth(USER, "")),
        (
            "an unknown user",
            Client::plain().basic_auth("admin", PASSWORD),
        ),
        (
            "the password with a suffix",
            Client::plain().basic_auth(USER, &format!("{PASSWORD}x")),
        ),
        (
            "another scheme",
            Client::plain().header("Authorization", "Bearer abc"),
        ),
        (
            "garbage",
            Client::plain().header("Authorization", "Basic ###"),
        ),
    ];
    let mut refused = 0;
    for (what, client) in &attempts {
        for target in ["/metrics", "/no-such-path", "/metrics?x=1"] {
            assert_refused(client.get(addr, target), &format!("{what} on {target}"));
            refused += 1;
        }
    }
    // The same credentials work, and the refusals were counted.
    let (code, _, body) = right.get(addr, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(!tenant_samples(&body).is_empty(), "tenant series served");
    assert_eq!(
        value_of(
            &body,
            "gpupm_metrics_requests_total",
            &[("listener", "authenticated"), ("code", "401")]
        ),
        Some(refused.to_string())
    );
    assert_eq!(right.get(addr, "/other").unwrap().0, 404);
}

#[test]
fn a_client_without_the_required_certificate_gets_no_tls_session() {
    let dir = Scratch::new("metrics-mtls");
    let pki = Pki::generate(&dir.join("pki"));
    let web = write_web_config(
        &dir.join("web.yml"),
        Some((&pki, ClientCerts::Required)),
        &[],
    );
    let (_rt, addr) = start_authenticated(FixtureView::new(3), 64, &web, true).unwrap();
    for (what, client) in [
        ("no certificate", Client::tls(&pki, None)),
        (
            "another CA's certificate",
            Client::tls(&pki, Some(&pki.stranger)),
        ),
        (
            "the server's own certificate",
            Client::tls(&pki, Some(&pki.server)),
        ),
        ("plain HTTP", Client::plain()),
    ] {
        let got = client.get(addr, "/metrics");
        assert!(got.is_err(), "{what}: {got:?}");
    }
    let (code, _, body) = Client::tls(&pki, Some(&pki.client))
        .get(addr, "/metrics")
        .unwrap();
    assert_eq!(code, 200);
    assert!(!tenant_samples(&body).is_empty());
    let failures: u64 = value_of(
        &body,
        "gpupm_metrics_tls_handshake_failures_total",
        &[("listener", "authenticated")],
    )
    .unwrap()
    .parse()
    .unwrap();
    assert_eq!(failures, 4, "{body}");
}

#[test]
fn tenant_series_are_refused_on_a_listener_that_authenticates_nobody() {
    let dir = Scratch::new("metrics-unauth");
    let pki = Pki::generate(&dir.join("pki"));
    let tls_only = write_web_config(
        &dir.join("tls-only.yml"),
        Some((&pki, ClientCerts::None)),
        &[],
    );
    let err = start_authenticated(FixtureView::new(1), 64, &tls_only, true).unwrap_err();
    assert!(matches!(err, MetricsError::Unauthenticated { .. }), "{err}");
    assert!(err.is_config());
    let empty = write_web_config(&dir.join("empty.yml"), None, &[]);
    let err = start_authenticated(FixtureView::new(1), 64, &empty, true).unwrap_err();
    assert!(matches!(err, MetricsError::Unauthenticated { .. }), "{err}");

    // Without tenant series, TLS alone serves the health families only.
    let (_rt, addr) = start_authenticated(FixtureView::new(1), 64, &tls_only, false).unwrap();
    let (code, _, body) = Client::tls(&pki, None).get(addr, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert_eq!(tenant_samples(&body), Vec::<String>::new());
    assert!(body.contains("gpupm_device_events_total"));
}

fn send(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(raw).unwrap();
    raw_response(s).0
}

/// Waits for the peer to close `s`; returns how long that took.
fn closed_within(mut s: TcpStream, limit: Duration) -> Duration {
    let t0 = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return t0.elapsed(),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return t0.elapsed(),
            Err(e) => panic!("not closed within {limit:?}: {e}"),
        }
    }
}

#[test]
fn bad_idle_and_surplus_connections_are_bounded_and_the_endpoint_survives() {
    let limits = Limits {
        io_timeout: Duration::from_millis(500),
        max_connections: 2,
        ..Limits::default()
    };
    let (_rt, addr) = start_local_with(FixtureView::new(1), 4, limits);
    assert_eq!(http_get(addr, "/", None).0, "HTTP/1.1 404 Not Found");
    assert_eq!(
        http_get(addr, "/metricsx", None).0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        send(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
        "HTTP/1.1 405 Method Not Allowed"
    );
    assert_eq!(
        send(addr, b"\x00\xff garbage\r\n\r\n"),
        "HTTP/1.1 400 Bad Request"
    );
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Fill: ".to_vec();
    huge.resize(64 * 1024, b'a');
    assert_eq!(
        send(addr, &huge),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );

    // Two idle connections fill the listener: a third is closed at once;
    // the idle ones are closed after the head timeout, and then a request
    // is served again.
    let idle = [
        TcpStream::connect(addr).unwrap(),
        TcpStream::connect(addr).unwrap(),
    ];
    let surplus = TcpStream::connect(addr).unwrap();
    assert!(closed_within(surplus, Duration::from_secs(5)) < Duration::from_secs(5));
    for s in idle {
        let waited = closed_within(s, Duration::from_secs(10));
        assert!(waited < Duration::from_secs(5), "idle for {waited:?}");
    }
    let (status, _, body) = http_get(addr, "/metrics?x=1", None);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(
        value_of(
            &body,
            "gpupm_metrics_connections_refused_total",
            &[("listener", "local")],
        ),
        Some("1".into()),
        "{body}"
    );
}
