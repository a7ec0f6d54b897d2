//! The daemon's health snapshot, composed from the parts that keep its
//! figures, each handed in explicitly by `main`: the store (tables,
//! handshakes, drains), the planes (RI and range counts), the pages, the
//! tenant node's request counters and the tenant bounds.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::pages::Pages;
use crate::ranges::RangeBook;
use crate::ri::RiUnit;
use crate::store::Store;
use crate::tenant::bounds::Bounds;
use crate::view::{HealthSnapshot, HealthSource, TenantStats};

/// Every part of the daemon that keeps a health figure.
#[derive(Debug)]
pub struct DaemonHealth {
    /// Tables, handshakes, drains, the device's counts.
    pub store: Arc<Store>,
    /// Runtime-instrumentation counts.
    pub ri: Arc<RiUnit>,
    /// Range-plane counts.
    pub ranges: Arc<RangeBook>,
    /// The tenant pages, when offered.
    pub pages: Option<Arc<Pages>>,
    /// The tenant node's request counters.
    pub tenant: Arc<TenantStats>,
    /// The tenant bounds' accountant.
    pub bounds: Arc<Bounds>,
}

impl HealthSource for DaemonHealth {
    fn snapshot(&self) -> HealthSnapshot {
        HealthSnapshot {
            tenant_requests: self.tenant.requests.load(Ordering::Relaxed),
            tenant_errors: self.tenant.errors.load(Ordering::Relaxed),
            pages: self.pages.as_ref().map(|p| p.stats()).unwrap_or_default(),
            ri: self.ri.stats().counts(),
            ranges: self.ranges.stats().snapshot(),
            bounds: self.bounds.snapshot(),
            ..self.store.snapshot()
        }
    }
}
