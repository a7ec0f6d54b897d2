//! The metrics listeners' own counts, exported with every scrape:
//!
//! | name | type | labels |
//! |---|---|---|
//! | `gpupm_metrics_connections` | gauge | `listener` (`local`, `authenticated`): connections open |
//! | `gpupm_metrics_connections_refused_total` | counter | `listener`: closed at accept, over a connection cap |
//! | `gpupm_metrics_tls_handshake_failures_total` | counter | `listener`: failed or timed-out TLS handshakes (a client without a required certificate among them) |
//! | `gpupm_metrics_requests_total` | counter | `listener`, `code`: requests answered, by status (401: credentials missing or wrong) |

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Status codes the endpoint answers itself.
pub const CODES: [u16; 6] = [200, 400, 401, 404, 405, 500];

/// One listener's counters.
#[derive(Debug)]
pub struct ListenerStats {
    name: &'static str,
    connections: AtomicU64,
    refused: AtomicU64,
    tls_failures: AtomicU64,
    requests: [AtomicU64; CODES.len()],
}

/// A copy of [`ListenerStats`] for one scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerCounts {
    /// `listener` label.
    pub name: &'static str,
    /// Connections open.
    pub connections: u64,
    /// Connections refused at accept.
    pub refused: u64,
    /// Failed TLS handshakes.
    pub tls_failures: u64,
    /// Requests answered per status code, in [`CODES`] order.
    pub requests: [u64; CODES.len()],
}

impl ListenerStats {
    /// Zeroed counters of listener `name`.
    pub fn new(name: &'static str) -> Self {
        ListenerStats {
            name,
            connections: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            tls_failures: AtomicU64::new(0),
            requests: Default::default(),
        }
    }

    /// A connection was accepted.
    pub fn opened(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// An accepted connection ended.
    pub fn closed(&self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }

    /// A connection was refused at accept.
    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A TLS handshake failed.
    pub fn tls_failed(&self) {
        self.tls_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A request was answered with `code`.
    pub fn answered(&self, code: u16) {
        if let Some(i) = CODES.iter().position(|&c| c == code) {
            self.requests[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts now.
    pub fn counts(&self) -> ListenerCounts {
        ListenerCounts {
            name: self.name,
            connections: self.connections.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            tls_failures: self.tls_failures.load(Ordering::Relaxed),
            requests: std::array::from_fn(|i| self.requests[i].load(Ordering::Relaxed)),
        }
    }
}

/// Encodes the `gpupm_metrics_*` families.
pub fn encode(
    listeners: &[ListenerCounts],
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(
        "gpupm_metrics_connections",
        "Connections open on a metrics listener.",
        None,
        MetricType::Gauge,
    )?;
    for l in listeners {
        m.encode_family(&[("listener", l.name)])?
            .encode_gauge(&l.connections)?;
    }
    let counters = [
        (
            "gpupm_metrics_connections_refused",
            "Connections a metrics listener closed at accept, over its connection caps.",
            false,
        ),
        (
            "gpupm_metrics_tls_handshake_failures",
            "TLS handshakes on a metrics listener that failed or timed out.",
            true,
        ),
    ];
    for (name, help, tls) in counters {
        let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for l in listeners {
            let n = if tls { l.tls_failures } else { l.refused };
            m.encode_family(&[("listener", l.name)])?
                .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
        }
    }
    let mut m = encoder.encode_descriptor(
        "gpupm_metrics_requests",
        "Requests a metrics listener answered, by status code (401: credentials missing or wrong).",
        None,
        MetricType::Counter,
    )?;
    for l in listeners {
        for (code, n) in CODES.iter().zip(l.requests) {
            let code = code.to_string();
            m.encode_family(&[("listener", l.name), ("code", code.as_str())])?
                .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
        }
    }
    Ok(())
}
