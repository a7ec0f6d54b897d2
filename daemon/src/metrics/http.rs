//! A minimal HTTP/1.1 responder: one request per connection, bounded in
//! size and time, `Connection: close`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest request head accepted (request line and headers).
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Time a client has to send its request head, and to take the response.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed request head, as far as the endpoint cares.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// Method, as sent.
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// The `Accept` header, if any.
    pub accept: Option<String>,
}

/// Why a request head could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The head did not end within [`MAX_REQUEST_BYTES`].
    #[error("request head is larger than {MAX_REQUEST_BYTES} bytes")]
    TooLarge,
    /// The head is not HTTP/1.x.
    #[error("malformed request head")]
    Malformed,
    /// The client closed the connection before the head ended.
    #[error("connection closed before the request head ended")]
    Closed,
    /// The client took longer than [`IO_TIMEOUT`].
    #[error("client too slow")]
    TimedOut,
    /// Reading or writing failed.
    #[error("connection failed")]
    Io(#[source] std::io::Error),
}

/// Reads one request head from `stream`.
pub async fn read_request(stream: &mut TcpStream) -> Result<Request, RequestError> {
    let mut buf = Vec::with_capacity(1024);
    let head_len = tokio::time::timeout(IO_TIMEOUT, async {
        let mut chunk = [0u8; 1024];
        loop {
            if let Some(end) = find_head_end(&buf) {
                return Ok(end);
            }
            if buf.len() >= MAX_REQUEST_BYTES {
                return Err(RequestError::TooLarge);
            }
            let room = (MAX_REQUEST_BYTES - buf.len()).min(chunk.len());
            let n = stream
                .read(&mut chunk[..room])
                .await
                .map_err(RequestError::Io)?;
            if n == 0 {
                return Err(RequestError::Closed);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .map_err(|_elapsed| RequestError::TimedOut)??;
    parse_head(&buf[..head_len])
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Parses a request head (up to and including the blank line).
pub fn parse_head(head: &[u8]) -> Result<Request, RequestError> {
    let text = std::str::from_utf8(head).map_err(|_utf8| RequestError::Malformed)?;
    let mut lines = text.split("\r\n");
    let mut parts = lines.next().ok_or(RequestError::Malformed)?.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RequestError::Malformed);
    };
    if method.is_empty() || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Err(RequestError::Malformed);
    }
    let path = target.split_once('?').map_or(target, |(p, _query)| p);
    let mut accept = None;
    for line in lines.take_while(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or(RequestError::Malformed)?;
        if name.trim().eq_ignore_ascii_case("accept") {
            accept = Some(value.trim().to_owned());
        }
    }
    Ok(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        accept,
    })
}

/// Writes a whole response and closes the write side.
pub async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> Result<(), RequestError> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tokio::time::timeout(IO_TIMEOUT, async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_elapsed| RequestError::TimedOut)?
    .map_err(RequestError::Io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_line_query_and_accept() {
        let r = parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nACCEPT: text/plain\r\n\r\n")
            .unwrap();
        assert_eq!(
            r,
            Request {
                method: "GET".into(),
                path: "/metrics".into(),
                accept: Some("text/plain".into())
            }
        );
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for head in [
            &b"\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"GET / HTTP/1.1 x\r\n\r\n",
            b"GET / SPDY\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(head), Err(RequestError::Malformed)),
                "{head:?}"
            );
        }
    }
}
