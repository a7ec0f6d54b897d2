//! The metrics endpoint: OpenMetrics/Prometheus text via the
//! `prometheus-client` crate, served over HTTP/1.1 (hyper) on up to two
//! listeners.
//!
//! * The **local** listener (`[metrics] listen`, loopback by default) needs
//!   no credentials and serves only device and daemon health: the system
//!   block's events, the daemon's work, nothing of any one tenant. Any
//!   local user may read it; `gpupm health` does.
//! * The **authenticated** listener (`[metrics.authenticated]`), for a
//!   remote Prometheus, is guarded by an exporter-toolkit web configuration
//!   ([`web_config`]: TLS with rustls, client certificates, basic auth
//!   against bcrypt hashes). With `tenant_series = true` — refused unless
//!   the web configuration authenticates every client — it also serves the
//!   per-VM and per-context families.
//!
//! `GET /metrics` answers 200 with the metrics, built per scrape from the
//! view (see [`collect`] for the families). A client whose `Accept` names
//! `application/openmetrics-text` (the Prometheus server does) gets
//! OpenMetrics 1.0 text; any other client gets the Prometheus text format
//! 0.0.4, which `promtool check metrics` lints. Another path answers 404,
//! another method 405, a malformed head 400, an oversized one 431, missing
//! or wrong credentials 401. Bounds: see [`server`].

pub mod auth;
pub mod collect;
pub mod contexts;
mod format;
pub mod server;
pub mod stats;
pub mod tls;
pub mod web_config;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use self::auth::{AuthError, BasicAuth};
use self::collect::Series;
use self::contexts::OtherFloor;
pub use self::format::{Format, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE};
pub use self::server::{Access, Limits, IO_TIMEOUT, MAX_CONNECTIONS, MAX_REQUEST_BYTES};
use self::stats::ListenerStats;
use self::tls::TlsError;
use self::web_config::{WebConfig, WebConfigError};
use crate::view::{CounterView, HealthSource};

/// Metrics settings, from the configuration file's format.
pub use gpupm_client::config::{AuthenticatedListener, MetricsConfig};

/// Why the endpoint could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A listen address could not be bound.
    #[error("cannot listen for metrics on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Accepting connections failed.
    /// The endpoint's runtime could not start.
    #[error("cannot start the metrics runtime")]
    Runtime(#[source] std::io::Error),
    #[error("metrics listener failed")]
    Accept(#[source] std::io::Error),
    /// The web configuration was refused.
    #[error("metrics web configuration")]
    WebConfig(#[from] WebConfigError),
    /// Its TLS settings could not be used.
    #[error("metrics web configuration")]
    Tls(#[from] TlsError),
    /// Basic auth could not be set up.
    #[error("metrics basic auth")]
    Auth(#[from] AuthError),
    /// Tenant series asked for on a listener that does not authenticate.
    #[error("{path}: tenant_series = true needs a web configuration that authenticates every client (basic_auth_users, or client_auth_type RequireAndVerifyClientCert)")]
    Unauthenticated {
        /// The web configuration file.
        path: String,
    },
    /// Basic-auth passwords in clear text to a remote address.
    #[error("{path}: tenant_series = true with basic auth on the non-loopback address {addr} needs tls_server_config (the passwords would cross the network in clear text)")]
    ClearText {
        /// The web configuration file.
        path: String,
        /// The listen address.
        addr: SocketAddr,
    },
}

impl MetricsError {
    /// Whether the operator's configuration is at fault (exit status 2).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            MetricsError::WebConfig(_)
                | MetricsError::Tls(_)
                | MetricsError::Unauthenticated { .. }
                | MetricsError::ClearText { .. }
        )
    }
}

/// Handshake latency buckets: 10 µs doubling to ~20 ms.
fn handshake_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-6, 2.0, 12))
}

/// What a web configuration grants a listener: its families, TLS and
/// basic auth, checked and ready.
pub struct WebAccess {
    series: Series,
    tls: Option<tokio_rustls::TlsAcceptor>,
    auth: Option<Arc<BasicAuth>>,
}

impl std::fmt::Debug for WebAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebAccess")
            .field("series", &self.series)
            .field("tls", &self.tls.is_some())
            .field("auth", &self.auth)
            .finish()
    }
}

impl WebAccess {
    /// Checks `web` for a listener on `addr`: refused when tenant series
    /// are asked for without client authentication, or with basic-auth
    /// passwords in clear text to a non-loopback address; then sets up TLS
    /// (reading the certificates and the key) and basic auth.
    pub fn new(
        web: &WebConfig,
        tenant_series: bool,
        addr: SocketAddr,
    ) -> Result<WebAccess, MetricsError> {
        let path = web.path.display().to_string();
        if tenant_series && !web.authenticates() {
            return Err(MetricsError::Unauthenticated { path });
        }
        if tenant_series
            && web.tls.is_none()
            && !web.users.is_empty()
            && !addr.ip().to_canonical().is_loopback()
        {
            return Err(MetricsError::ClearText { path, addr });
        }
        let tls = web
            .tls
            .as_ref()
            .map(tls::server_config)
            .transpose()?
            .map(tokio_rustls::TlsAcceptor::from);
        let auth = if web.users.is_empty() {
            None
        } else {
            Some(Arc::new(BasicAuth::new(web.users.clone())?))
        };
        Ok(WebAccess {
            series: if tenant_series {
                Series::Tenants
            } else {
                Series::Health
            },
            tls,
            auth,
        })
    }
}

/// The authenticated listener's configuration, loaded and checked before
/// the daemon touches the device ([`prepare`]).
#[derive(Debug)]
pub struct Prepared {
    authenticated: Option<(AuthenticatedListener, WebAccess)>,
}

impl Prepared {
    /// The authenticated listener's configured address and scheme (`http`,
    /// `https`), if one is configured.
    pub fn authenticated(&self) -> Option<(SocketAddr, &'static str)> {
        self.authenticated.as_ref().map(|(a, web)| {
            let scheme = if web.tls.is_some() { "https" } else { "http" };
            (a.listen, scheme)
        })
    }
}

/// Loads and checks the web configuration of the authenticated listener,
/// if one is configured: every refusal of the operator's metrics settings
/// happens here, at start, before anything else is touched.
pub fn prepare(cfg: &MetricsConfig) -> Result<Prepared, MetricsError> {
    let authenticated = match &cfg.authenticated {
        None => None,
        Some(a) => {
            let web = WebConfig::load(&a.web_config_file)?;
            let access = WebAccess::new(&web, a.tenant_series, a.listen)?;
            tracing::info!(
                listen = %a.listen,
                web_config_file = %a.web_config_file.display(),
                tls = web.tls.is_some(),
                client_certificates = ?web.tls.as_ref().map(|t| t.client_auth),
                basic_auth_users = web.users.len(),
                tenant_series = a.tenant_series,
                "authenticated metrics listener configured"
            );
            Some((a.clone(), access))
        }
    };
    Ok(Prepared { authenticated })
}

/// What a scrape keeps from the previous ones.
#[derive(Debug)]
struct ScrapeState {
    handshakes: Histogram,
    floor: OtherFloor,
}

/// What every listener and connection shares.
pub struct Endpoint {
    max_contexts_per_vm: usize,
    view: Arc<dyn CounterView>,
    health: Arc<dyn HealthSource>,
    state: Mutex<ScrapeState>,
    listeners: Mutex<Vec<Arc<ListenerStats>>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("max_contexts_per_vm", &self.max_contexts_per_vm)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The endpoint over `view` and `health`.
    pub fn new(
        max_contexts_per_vm: usize,
        view: Arc<dyn CounterView>,
        health: Arc<dyn HealthSource>,
    ) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            max_contexts_per_vm,
            view,
            health,
            state: Mutex::new(ScrapeState {
                handshakes: handshake_histogram(),
                floor: OtherFloor::default(),
            }),
            listeners: Mutex::new(Vec::new()),
        })
    }

    /// Counters of a new listener named `name`, exported with every scrape.
    fn listener_stats(&self, name: &'static str) -> Arc<ListenerStats> {
        let stats = Arc::new(ListenerStats::new(name));
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&stats));
        stats
    }

    /// The local listener's access: health only, no credentials.
    pub fn local_access(&self) -> Access {
        Access {
            series: Series::Health,
            tls: None,
            auth: None,
            stats: self.listener_stats("local"),
        }
    }

    /// The authenticated listener's access from `web` (loaded), for a
    /// listener on `addr` (see [`WebAccess::new`]).
    pub fn authenticated_access(
        &self,
        web: &WebConfig,
        tenant_series: bool,
        addr: SocketAddr,
    ) -> Result<Access, MetricsError> {
        Ok(self.access(WebAccess::new(web, tenant_series, addr)?))
    }

    /// A listener's access from a checked web configuration.
    pub fn access(&self, web: WebAccess) -> Access {
        Access {
            series: web.series,
            tls: web.tls,
            auth: web.auth,
            stats: self.listener_stats("authenticated"),
        }
    }

    /// Encodes the current metrics of `series`.
    pub fn scrape(&self, series: Series, format: Format) -> Result<String, std::fmt::Error> {
        let listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|l| l.counts())
            .collect();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut snap = self.health.snapshot();
        for ns in std::mem::take(&mut snap.handshake_latency_ns) {
            #[allow(clippy::cast_precision_loss)] // ns latencies are far below 2^52
            state.handshakes.observe(ns as f64 / 1e9);
        }
        let handshakes = state.handshakes.clone();
        let data = collect::gather(
            self.view.as_ref(),
            series,
            self.max_contexts_per_vm,
            &mut state.floor,
            snap,
            handshakes,
            listeners,
        );
        drop(state);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(data));
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &registry)?;
        Ok(match format {
            Format::OpenMetrics => om,
            Format::Prometheus => format::openmetrics_to_prometheus(&om),
        })
    }
}

/// The running listeners, on a tokio runtime of their own (the one place
/// gpupmd uses tokio: the HTTP and TLS stack); dropping it stops them.
#[derive(Debug)]
pub struct Running {
    /// The local listener's address.
    pub local: SocketAddr,
    /// The authenticated listener's address and scheme (`http`, `https`).
    pub authenticated: Option<(SocketAddr, &'static str)>,
    tasks: Vec<JoinHandle<Result<(), MetricsError>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// How long stopping waits for connections being served.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(STOP_WAIT);
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, MetricsError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError::Bind { addr, source })
}

/// Binds both listeners (the authenticated one as [`prepare`]d) and
/// serves them on the endpoint's own runtime.
pub fn start(
    local: SocketAddr,
    cfg: &MetricsConfig,
    prepared: Prepared,
    view: Arc<dyn CounterView>,
    health: Arc<dyn HealthSource>,
) -> Result<Running, MetricsError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gpupmd-metrics")
        .enable_all()
        .build()
        .map_err(MetricsError::Runtime)?;
    let endpoint = Endpoint::new(cfg.max_contexts_per_vm, view, health);
    let mut running = runtime.block_on(listen(local, prepared, endpoint))?;
    running.runtime = Some(runtime);
    Ok(running)
}

/// Binds and serves the listeners on the current runtime.
async fn listen(
    local: SocketAddr,
    prepared: Prepared,
    endpoint: Arc<Endpoint>,
) -> Result<Running, MetricsError> {
    let authenticated = match prepared.authenticated {
        None => None,
        Some((a, web)) => Some((bind(a.listen).await?, endpoint.access(web))),
    };
    if !local.ip().to_canonical().is_loopback() {
        tracing::warn!(listen = %local, "the unauthenticated metrics listener is not on loopback: every host that reaches it reads the device's health series");
    }
    let local_listener = bind(local).await?;
    let local_addr = local_listener.local_addr().unwrap_or(local);
    let mut tasks = vec![tokio::spawn(server::serve(
        local_listener,
        endpoint.local_access(),
        Arc::clone(&endpoint),
        Limits::default(),
    ))];
    let authenticated = match authenticated {
        None => None,
        Some((listener, access)) => {
            let addr = listener.local_addr().map_err(MetricsError::Accept)?;
            let scheme = if access.tls.is_some() {
                "https"
            } else {
                "http"
            };
            tasks.push(tokio::spawn(server::serve(
                listener,
                access,
                Arc::clone(&endpoint),
                Limits::default(),
            )));
            Some((addr, scheme))
        }
    };
    Ok(Running {
        local: local_addr,
        authenticated,
        tasks,
        runtime: None,
    })
}
