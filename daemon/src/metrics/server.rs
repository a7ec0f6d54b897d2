//! Serving one listener: TCP accept with connection caps, TLS (rustls) when
//! configured, HTTP/1.1 on hyper, basic auth before anything else.
//!
//! Bounds (every one a constant of [`Limits`], stated in
//! docs/operations.md): connections per listener and per remote address;
//! the time a client has for its TLS handshake and for each request head
//! (an idle keep-alive connection is closed after the same time); the size
//! of a request head; the lifetime of a connection. A request is answered
//! only after its credentials passed: a caller without them gets 401 (or,
//! without a required client certificate, no TLS session at all) and
//! nothing else — not even whether the path exists.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::auth::BasicAuth;
use super::collect::Series;
use super::stats::ListenerStats;
use super::{Endpoint, Format, MetricsError};

/// Largest request head accepted (request line and headers); hyper's
/// smallest read buffer.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Time a client has for its TLS handshake and for each request head.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at the same time by one listener; more are closed
/// at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Connections from one remote (non-loopback) address at the same time.
pub const MAX_CONNECTIONS_PER_PEER: usize = 4;
/// Longest a connection is kept (then closed after its current request):
/// a client that stops reading cannot hold a slot for longer.
pub const MAX_CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// A listener's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// See [`IO_TIMEOUT`].
    pub io_timeout: Duration,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`MAX_CONNECTIONS_PER_PEER`].
    pub max_connections_per_peer: usize,
    /// See [`MAX_CONNECTION_LIFETIME`].
    pub max_connection_lifetime: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            io_timeout: IO_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_connections_per_peer: MAX_CONNECTIONS_PER_PEER,
            max_connection_lifetime: MAX_CONNECTION_LIFETIME,
        }
    }
}

/// Who may ask a listener for what.
pub struct Access {
    /// The families served.
    pub series: Series,
    /// TLS, when configured.
    pub tls: Option<TlsAcceptor>,
    /// Basic auth, when configured.
    pub auth: Option<Arc<BasicAuth>>,
    /// The listener's counters.
    pub stats: Arc<ListenerStats>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("series", &self.series)
            .field("tls", &self.tls.is_some())
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// Open connections per remote address.
#[derive(Debug, Default)]
struct Peers {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in [`Peers`], given back on drop.
struct PeerSlot {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    fn take(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<PeerSlot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self
            .peers
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Accept errors that concern one connection or a passing shortage, not
/// the listener.
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNABORTED
                | libc::ECONNRESET
                | libc::EINTR
                | libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EPROTO
                | libc::EPERM
        )
    )
}

/// Serves `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    access: Access,
    endpoint: Arc<Endpoint>,
    limits: Limits,
) -> Result<(), MetricsError> {
    let access = Arc::new(access);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let peers = Arc::new(Peers::default());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) if transient(&e) => {
                tracing::warn!(error = %e, "metrics: accept failed; retrying");
                // Back off so a descriptor shortage does not spin the loop.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(MetricsError::Accept(e)),
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            access.stats.refused();
            tracing::debug!(%peer, "metrics: too many connections; closing");
            continue;
        };
        let slot = if peer.ip().to_canonical().is_loopback() {
            None
        } else {
            match peers.take(peer.ip(), limits.max_connections_per_peer) {
                Some(s) => Some(s),
                None => {
                    access.stats.refused();
                    tracing::debug!(%peer, "metrics: too many connections from one address");
                    continue;
                }
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "metrics: TCP_NODELAY failed");
        }
        let (access, endpoint) = (Arc::clone(&access), Arc::clone(&endpoint));
        tokio::spawn(async move {
            access.stats.opened();
            match &access.tls {
                None => serve_connection(stream, peer, &access, endpoint, limits).await,
                Some(tls) => {
                    match tokio::time::timeout(limits.io_timeout, tls.accept(stream)).await {
                        Ok(Ok(tls_stream)) => {
                            serve_connection(tls_stream, peer, &access, endpoint, limits).await;
                        }
                        Ok(Err(e)) => {
                            access.stats.tls_failed();
                            tracing::debug!(%peer, error = %e, "metrics: TLS handshake failed");
                        }
                        Err(_elapsed) => {
                            access.stats.tls_failed();
                            tracing::debug!(%peer, "metrics: TLS handshake timed out");
                        }
                    }
                }
            }
            access.stats.closed();
            drop((permit, slot));
        });
    }
}

/// HTTP/1.1 on one (plain or TLS) connection, within the lifetime bound.
async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    access: &Arc<Access>,
    endpoint: Arc<Endpoint>,
    limits: Limits,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service_access = Arc::clone(access);
    let service = hyper::service::service_fn(move |req| {
        let (access, endpoint) = (Arc::clone(&service_access), Arc::clone(&endpoint));
        async move { Ok::<_, Infallible>(respond(req, &access, endpoint).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.io_timeout)
        .max_buf_size(MAX_REQUEST_BYTES)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = tokio::time::sleep(limits.max_connection_lifetime) => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(limits.io_timeout, conn.as_mut()).await {
                Ok(r) => r,
                Err(_elapsed) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "metrics: connection ended");
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// One request: credentials first, then the path and method, then the
/// scrape (on a blocking thread: it reads the device).
async fn respond(
    req: Request<Incoming>,
    access: &Access,
    endpoint: Arc<Endpoint>,
) -> Response<Full<Bytes>> {
    let response = answer(req, access, endpoint).await;
    access.stats.answered(response.status().as_u16());
    response
}

async fn answer(
    req: Request<Incoming>,
    access: &Access,
    endpoint: Arc<Endpoint>,
) -> Response<Full<Bytes>> {
    if let Some(auth) = &access.auth {
        let header = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
        if !auth.verify(header).await {
            let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            r.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"gpupm\""),
            );
            return r;
        }
    }
    if req.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found; try GET /metrics\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET /metrics\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let accept = req
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let format = Format::negotiate(accept.as_deref());
    let series = access.series;
    let scraped = tokio::task::spawn_blocking(move || endpoint.scrape(series, format)).await;
    match scraped {
        Ok(Ok(body)) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            r
        }
        Ok(Err(std::fmt::Error)) | Err(_) => {
            text(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n")
        }
    }
}
