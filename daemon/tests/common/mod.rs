//! Shared fixtures of the health and metrics tests: a small in-process
//! [`CounterView`] and scripted [`HealthSource`], and process helpers.

#![allow(dead_code)] // each test binary uses a subset

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_uapi::events::{by_name, MAX_EVENTS};
use gpupmd::view::{
    CounterView, CtxId, CtxInfo, CtxState, DeltaSample, HealthSnapshot, HealthSource, Scope,
    Totals, VmId,
};

/// The value the fixture reports for `sm_inst_executed` of VM 1.
pub const VM1_SM_INST_EXECUTED: u64 = 123_456;

/// One fixture context.
#[derive(Clone, Debug)]
pub struct FxCtx {
    pub info: CtxInfo,
    pub counters: [u64; MAX_EVENTS],
}

/// A fixed device: VM 1 (two contexts), VM 2 (confidential, one context),
/// VM 3 (`vm3_contexts` contexts with distinct created cycles).
#[derive(Debug)]
pub struct FixtureView {
    pub vms: BTreeMap<VmId, Option<[u64; MAX_EVENTS]>>,
    pub contexts: Vec<FxCtx>,
    pub system: [u64; MAX_EVENTS],
}

fn counters(seed: u64) -> [u64; MAX_EVENTS] {
    let mut c = [0u64; MAX_EVENTS];
    for (i, v) in c.iter_mut().enumerate() {
        *v = seed * 1000 + u64::try_from(i).unwrap() * 7;
    }
    c
}

fn event(name: &str) -> usize {
    usize::from(by_name(name).unwrap().id)
}

impl FixtureView {
    pub fn new(vm3_contexts: u32) -> Self {
        let mut contexts = Vec::new();
        let mut add = |ctx: CtxId, vm: VmId, created_cycle: u64, state: CtxState| {
            contexts.push(FxCtx {
                info: CtxInfo {
                    ctx,
                    vm,
                    created_cycle,
                    state,
                },
                counters: counters(u64::from(ctx) + 10),
            });
        };
        add(1, 1, 100, CtxState::Active);
        add(2, 1, 200, CtxState::Retired);
        add(30, 2, 300, CtxState::Active);
        for i in 0..vm3_contexts {
            // Created cycles not in id order, so "newest" differs from "highest id".
            add(
                100 + i,
                3,
                1_000 + u64::from((i * 7) % vm3_contexts),
                CtxState::Active,
            );
        }
        let mut vm1 = counters(1);
        vm1[event("sm_inst_executed")] = VM1_SM_INST_EXECUTED;
        let mut vms = BTreeMap::new();
        vms.insert(1, Some(vm1));
        vms.insert(2, None);
        vms.insert(3, Some(counters(3)));
        let mut system = counters(9);
        system[event("nvlink_rx_flits")] = 4242;
        Self {
            vms,
            contexts,
            system,
        }
    }
}

impl CounterView for FixtureView {
    fn vms(&self) -> Vec<VmId> {
        self.vms.keys().copied().collect()
    }
    fn vm_partition(&self, vm: VmId) -> Option<u32> {
        self.vms.contains_key(&vm).then_some(vm)
    }
    fn contexts(&self, vm: VmId) -> Option<Vec<CtxInfo>> {
        self.vms.contains_key(&vm).then(|| {
            self.contexts
                .iter()
                .filter(|c| c.info.vm == vm)
                .map(|c| c.info)
                .collect()
        })
    }
    fn ctx_vm(&self, ctx: CtxId) -> Option<VmId> {
        self.contexts
            .iter()
            .find(|c| c.info.ctx == ctx)
            .map(|c| c.info.vm)
    }
    fn totals(&self, scope: Scope) -> Option<Totals> {
        let plain = |counters| Totals::Plain {
            counters,
            commit_seq: 1,
            cycle: 10,
        };
        match scope {
            Scope::System => Some(plain(self.system)),
            Scope::Vm(vm) => Some(match self.vms.get(&vm)? {
                Some(c) => plain(*c),
                None => Totals::Sealed(vec![0xa5; 64]),
            }),
            Scope::Ctx(ctx) => {
                let c = self.contexts.iter().find(|c| c.info.ctx == ctx)?;
                Some(match self.vms.get(&c.info.vm)? {
                    Some(_) => plain(c.counters),
                    None => Totals::Sealed(vec![0x5a; 64]),
                })
            }
        }
    }
    fn recent(&self, _scope: Scope, _max: usize) -> Option<Vec<DeltaSample>> {
        None
    }
    fn subscribe(
        &self,
        _scope: Scope,
    ) -> Option<tokio::sync::broadcast::Receiver<Arc<DeltaSample>>> {
        None
    }
    fn clock_khz(&self) -> u32 {
        1_000_000
    }
}

/// Returns `script[k]` on the k-th call (the last one thereafter) and
/// publishes the number of calls.
#[derive(Debug)]
pub struct ScriptedHealth {
    script: Vec<HealthSnapshot>,
    calls: AtomicUsize,
    seen: tokio::sync::watch::Sender<usize>,
}

impl ScriptedHealth {
    pub fn new(script: Vec<HealthSnapshot>) -> Self {
        assert!(!script.is_empty());
        Self {
            script,
            calls: AtomicUsize::new(0),
            seen: tokio::sync::watch::Sender::new(0),
        }
    }
    pub fn calls(&self) -> tokio::sync::watch::Receiver<usize> {
        self.seen.subscribe()
    }
}

impl HealthSource for ScriptedHealth {
    fn snapshot(&self) -> HealthSnapshot {
        let k = self.calls.fetch_add(1, Ordering::SeqCst);
        let snap = self.script[k.min(self.script.len() - 1)].clone();
        self.seen.send_replace(k + 1);
        snap
    }
}

/// The metrics fixture's self-metrics (the same on every call, with three
/// latency samples each time).
pub fn steady_health() -> HealthSnapshot {
    HealthSnapshot {
        uptime_s: 42.5,
        handshakes: 1000,
        handshake_latency_ns: vec![20_000, 40_000, 900_000],
        fallbacks: 3,
        lost_records: 4,
        drained_records: 5000,
        drain_lag_records: 6,
        handshake_response_max_ns: 1_250_000,
        contexts_active: 12,
        contexts_retired: 7,
        tenant_requests: 800,
        tenant_errors: 9,
        ..HealthSnapshot::default()
    }
}

/// A plain HTTP/1.0-style GET; returns (status line, headers, body).
pub fn http_get(addr: SocketAddr, target: &str, accept: Option<&str>) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    raw_response(s)
}

/// Reads a whole response up to EOF and splits it.
pub fn raw_response(mut s: TcpStream) -> (String, String, String) {
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("read response");
    let all = String::from_utf8(all).expect("utf-8 response");
    let (head, body) = all.split_once("\r\n\r\n").expect("response head");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

/// One sample line of an exposition: name, labels, value.
pub fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, String)> {
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

/// Kills a child this test started (by its pid) when dropped.
#[derive(Debug)]
pub struct KillOnDrop(pub Child, pub &'static str);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.0.id()).unwrap());
        if let Err(e) = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM) {
            eprintln!("could not stop {} ({pid}): {e}", self.1);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(e) = self.0.kill() {
            eprintln!("could not kill {}: {e}", self.1);
        }
        if let Err(e) = self.0.wait() {
            eprintln!("could not reap {}: {e}", self.1);
        }
    }
}

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("gpupm-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Fails loudly when a tool the test needs is missing.
pub fn require_tool(path_or_name: &str, package: &str) -> std::path::PathBuf {
    let found = if path_or_name.contains('/') {
        Some(std::path::PathBuf::from(path_or_name)).filter(|p| p.exists())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(path_or_name))
                .find(|p| p.is_file())
        })
    };
    found.unwrap_or_else(|| {
        panic!("{path_or_name} is missing: install the Debian package `{package}`")
    })
}
