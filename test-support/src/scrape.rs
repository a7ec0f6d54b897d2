//! Scraping a metrics endpoint: a plain HTTP GET and the sample lines of
//! an OpenMetrics / Prometheus text exposition.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One sample of an exposition: name, labels, value (as written).
pub type Sample = (String, BTreeMap<String, String>, String);

/// A plain HTTP/1.1 GET with `Connection: close`; returns (status line,
/// headers, body).
pub fn http_get(addr: SocketAddr, target: &str, accept: Option<&str>) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .expect("send the request");
    raw_response(s)
}

/// Reads a whole response up to EOF and splits it into (status line,
/// headers, body).
pub fn raw_response(mut s: TcpStream) -> (String, String, String) {
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("read response");
    let all = String::from_utf8(all).expect("utf-8 response");
    let (head, body) = all.split_once("\r\n\r\n").expect("response head");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

/// The metrics address a daemon announced in its notify `STATUS=` line
/// ("… metrics on http://ADDR/metrics").
pub fn metrics_addr(notes: &[String]) -> SocketAddr {
    notes
        .iter()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .expect("READY status names the metrics address")
        .parse()
        .expect("a socket address")
}

/// The authenticated metrics listener a daemon announced in its notify
/// `STATUS=` line ("… authenticated metrics at SCHEME://ADDR/metrics; …").
pub fn authenticated_metrics_addr(notes: &[String]) -> SocketAddr {
    notes
        .iter()
        .find_map(|l| l.split("authenticated metrics at ").nth(1))
        .and_then(|rest| rest.split_once("://"))
        .and_then(|(_, rest)| rest.split_once("/metrics"))
        .expect("READY status names the authenticated metrics address")
        .0
        .parse()
        .expect("a socket address")
}

/// The body of a `GET /metrics` from `addr` (asserting 200).
pub fn metrics(addr: SocketAddr) -> String {
    let (status, _, body) = http_get(addr, "/metrics", None);
    assert!(status.contains(" 200 "), "scrape: {status}");
    body
}

/// The sample lines of an exposition (comments and blank lines skipped).
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample value");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once("=\"").expect("label");
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels, value.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::samples;

    #[test]
    fn samples_split_name_labels_and_value() {
        let text = "# TYPE x counter\nx_total{vm=\"1\",event=\"a b\"} 42\n\nup 1\n";
        let s = samples(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0, "x_total");
        assert_eq!(s[0].1["vm"], "1");
        assert_eq!(s[0].1["event"], "a b");
        assert_eq!(s[0].2, "42");
        assert_eq!(
            (s[1].0.as_str(), s[1].1.len(), s[1].2.as_str()),
            ("up", 0, "1")
        );
    }
}
