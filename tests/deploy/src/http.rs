//! A minimal HTTP/1.0 GET for loopback servers (gpupmd's metrics endpoint,
//! the Prometheus API): HTTP/1.0 so that the server sends the body plainly
//! and closes the connection (no chunked encoding to undo).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Time a server has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// `GET path` (already percent-encoded) from `addr`: the status code and
/// the body, or why the request failed.
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut conn =
        TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("connect {addr}: {e}"))?;
    conn.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| conn.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| format!("socket timeouts: {e}"))?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut response = String::new();
    conn.read_to_string(&mut response)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP response from {addr}: {response:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// `s` percent-encoded for a URL query value (RFC 3986 unreserved
/// characters stay).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn encodes_everything_but_unreserved_characters() {
        assert_eq!(
            encode(r#"sum by (event) (x{a=~"b|c"})"#),
            "sum%20by%20%28event%29%20%28x%7Ba%3D~%22b%7Cc%22%7D%29"
        );
    }
}
