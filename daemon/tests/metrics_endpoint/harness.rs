//! Serving the fixture in-process: the local listener, or an authenticated
//! one from a web configuration file, each on an ephemeral loopback port.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use gpupm_test_support::scrape::samples;
use gpupm_test_support::web::{write_web_config, Client};
use gpupm_test_support::Scratch;
use gpupmd::metrics::server::serve;
use gpupmd::metrics::web_config::WebConfig;
use gpupmd::metrics::{Access, Endpoint, Limits, MetricsError};
use tokio::runtime::Runtime;

use crate::fixture::{FixtureView, SteadyHealth};

/// The basic-auth user of the tests' web configurations.
pub const USER: &str = "prometheus";
/// Its password.
pub const PASSWORD: &str = "correct horse battery staple";

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn endpoint(view: FixtureView, max_ctx: usize) -> Arc<Endpoint> {
    Endpoint::new(max_ctx, Arc::new(view), Arc::new(SteadyHealth))
}

fn spawn(rt: &Runtime, endpoint: Arc<Endpoint>, access: Access, limits: Limits) -> SocketAddr {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        if let Err(e) = serve(listener, access, endpoint, limits).await {
            panic!("metrics endpoint stopped: {e}");
        }
    });
    addr
}

/// The local listener over the fixture; the runtime lives as long as the
/// returned guard.
pub fn start_local(view: FixtureView, max_ctx: usize) -> (Runtime, SocketAddr) {
    start_local_with(view, max_ctx, Limits::default())
}

/// [`start_local`] with other bounds.
pub fn start_local_with(
    view: FixtureView,
    max_ctx: usize,
    limits: Limits,
) -> (Runtime, SocketAddr) {
    let rt = runtime();
    let endpoint = endpoint(view, max_ctx);
    let access = endpoint.local_access();
    let addr = spawn(&rt, endpoint, access, limits);
    (rt, addr)
}

/// An authenticated listener from the web configuration at `web`.
pub fn start_authenticated(
    view: FixtureView,
    max_ctx: usize,
    web: &Path,
    tenant_series: bool,
) -> Result<(Runtime, SocketAddr), MetricsError> {
    let rt = runtime();
    let endpoint = endpoint(view, max_ctx);
    let config = WebConfig::load(web)?;
    let access = {
        let _guard = rt.enter();
        endpoint.authenticated_access(
            &config,
            tenant_series,
            SocketAddr::from(([127, 0, 0, 1], 0)),
        )?
    };
    let addr = spawn(&rt, endpoint, access, Limits::default());
    Ok((rt, addr))
}

/// A tenant-series listener with basic auth over plain HTTP (allowed on
/// loopback only) and a client with the right credentials.
pub fn start_tenant_plain(view: FixtureView, max_ctx: usize) -> (Runtime, SocketAddr, Client) {
    let dir = Scratch::new("metrics-web");
    let web = write_web_config(&dir.join("web.yml"), None, &[(USER, PASSWORD)]);
    let (rt, addr) = start_authenticated(view, max_ctx, &web, true).unwrap();
    (rt, addr, Client::plain().basic_auth(USER, PASSWORD))
}

/// `GET /metrics` with the right credentials and `Accept: accept`.
pub fn get_with_accept(addr: SocketAddr, accept: &str) -> (u16, String, String) {
    Client::plain()
        .basic_auth(USER, PASSWORD)
        .header("Accept", accept)
        .get(addr, "/metrics")
        .unwrap()
}

/// The value of the sample `name` with exactly the labels `want`.
pub fn value_of(text: &str, name: &str, want: &[(&str, &str)]) -> Option<String> {
    samples(text).into_iter().find_map(|(n, labels, v)| {
        (n == name
            && labels.len() == want.len()
            && want
                .iter()
                .all(|(k, val)| labels.get(*k).map(String::as_str) == Some(val)))
        .then_some(v)
    })
}
