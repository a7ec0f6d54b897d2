//! The metrics endpoint: OpenMetrics/Prometheus text via the
//! `prometheus-client` crate, served on a (loopback) TCP listener.
//!
//! `GET /metrics` answers 200 with the current metrics, built per scrape
//! from the view (see [`collect`] for the families). A client whose
//! `Accept` names `application/openmetrics-text` (the Prometheus server
//! does) gets OpenMetrics 1.0 text; any other client gets the Prometheus
//! text format 0.0.4, which `promtool check metrics` lints. Any other
//! method or path answers 404, a malformed head 400, an oversized one 431.
//! One request per connection; at most [`MAX_CONNECTIONS`] at a time.

pub mod collect;
mod format;
mod http;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

pub use self::format::{Format, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE};
use self::http::RequestError;
pub use self::http::{IO_TIMEOUT, MAX_REQUEST_BYTES};
use crate::view::{CounterView, HealthSource};

/// Connections served at the same time; more are closed at once.
pub const MAX_CONNECTIONS: usize = 16;

/// Metrics settings, from the configuration file's format.
pub use gpupm_client::config::MetricsConfig;

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Accepting connections failed.
    #[error("metrics listener failed")]
    Accept(#[source] std::io::Error),
}

/// Handshake latency buckets: 10 µs doubling to ~20 ms.
fn handshake_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-6, 2.0, 12))
}

/// What every connection shares.
struct Endpoint {
    cfg: MetricsConfig,
    view: Arc<dyn CounterView>,
    health: Arc<dyn HealthSource>,
    handshakes: Histogram,
}

impl Endpoint {
    /// Encodes the current metrics.
    fn scrape(&self, format: Format) -> Result<String, std::fmt::Error> {
        let mut snap = self.health.snapshot();
        for ns in std::mem::take(&mut snap.handshake_latency_ns) {
            #[allow(clippy::cast_precision_loss)] // ns latencies are far below 2^52
            self.handshakes.observe(ns as f64 / 1e9);
        }
        let data = collect::gather(
            self.view.as_ref(),
            self.cfg.max_contexts_per_vm,
            snap,
            self.handshakes.clone(),
        );
        let mut registry = Registry::default();
        registry.register_collector(Box::new(data));
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &registry)?;
        Ok(match format {
            Format::OpenMetrics => om,
            Format::Prometheus => format::openmetrics_to_prometheus(&om),
        })
    }

    async fn handle(&self, mut stream: TcpStream) -> Result<(), RequestError> {
        let request = match http::read_request(&mut stream).await {
            Ok(r) => r,
            Err(e @ RequestError::TooLarge) => {
                return http::respond(
                    &mut stream,
                    "431 Request Header Fields Too Large",
                    "text/plain",
                    e.to_string().as_bytes(),
                )
                .await;
            }
            Err(e @ RequestError::Malformed) => {
                return http::respond(
                    &mut stream,
                    "400 Bad Request",
                    "text/plain",
                    e.to_string().as_bytes(),
                )
                .await;
            }
            Err(e) => return Err(e),
        };
        if request.method != "GET" || request.path != "/metrics" {
            return http::respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                b"not found; try GET /metrics\n",
            )
            .await;
        }
        let format = Format::negotiate(request.accept.as_deref());
        match self.scrape(format) {
            Ok(body) => {
                http::respond(
                    &mut stream,
                    "200 OK",
                    format.content_type(),
                    body.as_bytes(),
                )
                .await
            }
            Err(std::fmt::Error) => {
                http::respond(
                    &mut stream,
                    "500 Internal Server Error",
                    "text/plain",
                    b"encoding failed\n",
                )
                .await
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

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: MetricsConfig,
    view: Arc<dyn CounterView>,
    health: Arc<dyn HealthSource>,
) -> Result<(), MetricsError> {
    let endpoint = Arc::new(Endpoint {
        cfg,
        view,
        health,
        handshakes: handshake_histogram(),
    });
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
            tracing::debug!(%peer, "metrics: too many connections; closing");
            continue;
        };
        let endpoint = Arc::clone(&endpoint);
        tokio::spawn(async move {
            if let Err(e) = endpoint.handle(stream).await {
                tracing::debug!(%peer, error = %e, "metrics: request failed");
            }
            drop(permit);
        });
    }
}
