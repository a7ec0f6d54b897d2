//! The metrics endpoint (being built on branch daemon-health):
//! OpenMetrics/Prometheus text via the `prometheus-client` crate on a
//! loopback address.

use std::sync::Arc;

use crate::view::{CounterView, HealthSource};

/// Metrics settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Per VM, contexts exported individually; the rest are summed into one
    /// `ctx="other"` series (bounded label cardinality).
    pub max_contexts_per_vm: usize,
}

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Accepting connections failed.
    #[error("metrics listener failed")]
    Accept(#[source] std::io::Error),
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: MetricsConfig,
    view: Arc<dyn CounterView>,
    health: Arc<dyn HealthSource>,
) -> Result<(), MetricsError> {
    let _unused = (listener, cfg, view, health);
    Ok(())
}
