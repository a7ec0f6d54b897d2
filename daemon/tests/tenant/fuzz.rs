//! Fuzzes the tenant node's ioctls through the real mount: random and
//! near-valid command numbers, sizes and payloads, from a tenant and as
//! root, checking that nothing crashes, hangs, leaks, changes state or
//! lets a tenant see what is not its own.

// Test constants are small; truncating casts cannot lose anything here.
#![allow(clippy::cast_possible_truncation)]

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::time::Instant;

use crate::fixture::*;
use gpupm_client::sys::VFS_STATEFUL_IOCTLS;
use gpupm_client::Scope;
use gpupm_client::TenantClient;
use gpupm_uapi::ioc;
use gpupm_uapi::tenant::*;
use gpupmd::tenant::TenantStats;
use serde_json::{json, Value};

/// Calls per identity.
const CALLS: u64 = 100_000;

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Ids worth trying: own, foreign, missing, edges.
const IDS: [u32; 14] = [0, 1, 2, 3, 4, 11, 12, 21, 22, 31, 63, 64, 4095, 4096];

fn encode(dir: u32, nr: u32, size: u32) -> u32 {
    let dir = ioc::dir(dir << 30);
    let [nr, ..] = nr.to_le_bytes();
    ioc::encode(dir, TENANT_IOC_MAGIC, nr, (size & 0x3fff) as usize)
}

/// Scope a structured request names, if its fields make one.
fn named_scope(kind: u32, id: u32) -> Option<Scope> {
    match kind {
        scope::SYSTEM => Some(Scope::System),
        scope::VM => Some(Scope::Vm(id)),
        scope::CONTEXT => Some(Scope::Ctx(id)),
        _ => None,
    }
}

/// Runs the fuzz loop; returns the errno histogram and any violations.
fn fuzz(path: &std::path::Path, seed: u64, own: &[Scope], admin: bool) -> Value {
    let mut rng = Rng(seed);
    let mut handles: Vec<TenantClient> = (0..4)
        .map(|_| TenantClient::open_nonblocking(path).expect("open"))
        .collect();
    let mut buf = vec![0u8; 16 * 1024 + 64];
    let mut hist: BTreeMap<i32, u64> = BTreeMap::new();
    let mut violations: Vec<String> = Vec::new();
    let mut refused_locally = 0u64;
    let started = Instant::now();
    for i in 0..CALLS {
        let h = rng.below(handles.len() as u64) as usize;
        let c = &handles[h];
        let class = rng.below(10);
        let (kind_id, cmd) = match class {
            // Fully random command number.
            0 | 1 => (None, rng.next() as u32),
            // Right type byte and a tenant nr, random size and direction.
            2 | 3 => (
                None,
                encode(
                    rng.below(4) as u32,
                    rng.below(8) as u32,
                    rng.below(16 * 1024) as u32,
                ),
            ),
            // A real command with a well-formed header and random ids.
            _ => {
                let (_, cmd) = rng.pick(TENANT_IOCTLS);
                (Some((rng.below(5) as u32, rng.pick(&IDS))), cmd)
            }
        };
        let size = ioc::size(cmd);
        for b in buf.iter_mut().take(size.max(64)) {
            *b = rng.next() as u8;
        }
        if let Some((kind, id)) = kind_id {
            // version, then the scope/id fields most structs put next
            // (WHOAMI/EVENT_INFO/LIST read them differently; that is fine).
            buf[0..4].copy_from_slice(&TENANT_STRUCT_VERSION.to_le_bytes());
            if rng.below(4) != 0 {
                let (k, id) = if cmd == TENANT_IOC_LIST_CONTEXTS {
                    (id, 0)
                } else {
                    (kind, id)
                };
                buf[4..8].copy_from_slice(&k.to_le_bytes());
                buf[8..12].copy_from_slice(&id.to_le_bytes());
                // Zero the count/flags/reserved words most of the time.
                if rng.below(2) == 0 {
                    for b in &mut buf[12..size.min(4096)] {
                        *b = 0;
                    }
                    buf[12] = rng.below(3) as u8;
                }
            }
        }
        let res = c.raw_ioctl(cmd, &mut buf);
        let errno = match res {
            Ok(_) => 0,
            Err(nix::errno::Errno::EPERM) if VFS_STATEFUL_IOCTLS.contains(&cmd) => {
                refused_locally += 1;
                continue;
            }
            Err(e) => e as i32,
        };
        *hist.entry(errno).or_default() += 1;
        if !admin && errno == libc::ENOENT && TENANT_IOCTLS.iter().any(|&(_, k)| k == cmd) {
            violations.push(format!("call {i}: tenant got ENOENT from {cmd:#x}"));
        }
        if errno == 0 && cmd != TENANT_IOC_WHOAMI && cmd != TENANT_IOC_EVENT_INFO && !admin {
            // Whatever succeeded must have named one of the caller's scopes.
            let kind = u32::from_le_bytes(buf[4..8].try_into().unwrap());
            let id = u32::from_le_bytes(buf[8..12].try_into().unwrap());
            let named = if cmd == TENANT_IOC_LIST_CONTEXTS {
                Some(Scope::Vm(kind))
            } else {
                named_scope(kind, id)
            };
            if TENANT_IOCTLS.iter().any(|&(_, k)| k == cmd)
                && !named.is_some_and(|s| own.contains(&s))
            {
                violations.push(format!("call {i}: {cmd:#x} succeeded for {named:?}"));
            }
        }
        // Now and then: drain a session, or replace a handle.
        match rng.below(64) {
            0 => {
                let mut rbuf = vec![0u8; rng.below(3000) as usize];
                let r = nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&c.as_fd()), &mut rbuf);
                *hist.entry(-r.err().map_or(0, |e| e as i32)).or_default() += 1;
            }
            1 => handles[h] = TenantClient::open_nonblocking(path).expect("reopen"),
            _ => {}
        }
    }
    json!({
        "hist": hist.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "violations": violations,
        "refused_locally": refused_locally,
        "secs": started.elapsed().as_secs_f64(),
        "whoami_after": handles[0].whoami().map(|w| w.n_vms).map_err(|e| e.to_string()),
    })
}

/// Everything the admin can read, for before/after comparison.
fn snapshot(path: &std::path::Path) -> Vec<u8> {
    let c = TenantClient::open(path).expect("open");
    let mut out = Vec::new();
    for s in [
        Scope::System,
        Scope::Vm(1),
        Scope::Vm(2),
        Scope::Vm(3),
        Scope::Ctx(11),
        Scope::Ctx(21),
        Scope::Ctx(31),
    ] {
        out.extend_from_slice(zerocopy::IntoBytes::as_bytes(
            &*c.read_counters(s, &[]).expect("counters"),
        ));
    }
    for vm in 1..=3 {
        for e in c.list_contexts(vm).expect("list") {
            out.extend_from_slice(zerocopy::IntoBytes::as_bytes(&e));
        }
    }
    out
}

fn check(m: &Mounted, who: &str, got: &Value, base: ((u64, u64), usize), before: &[u8]) {
    eprintln!("fuzz {who}: {got}");
    assert_eq!(got["violations"], json!([]), "{who}");
    assert!(
        got["whoami_after"]["Ok"].is_u64(),
        "{who}: node stopped answering: {got}"
    );
    let calls: u64 = got["hist"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum::<u64>()
        + got["refused_locally"].as_u64().unwrap();
    assert!(calls >= CALLS, "{who}: {calls} calls");
    // Only the errnos the ABI allows (and those the kernel itself answers
    // for its generic ioctls).
    for errno in got["hist"].as_object().unwrap().keys() {
        let e: i32 = errno.parse().unwrap();
        let allowed = [
            0,
            libc::ENOTTY,
            libc::EINVAL,
            libc::EACCES,
            libc::ENOENT,
            libc::EAGAIN,
            libc::EOPNOTSUPP,
        ];
        assert!(
            allowed.contains(&e.abs()),
            "{who}: unexpected errno {e}: {got}"
        );
    }
    m.wait_gauges(base.0);
    assert_eq!(
        m.view.subscribers(),
        base.1,
        "{who}: a session's feed leaked"
    );
    assert_eq!(snapshot(&m.path), before, "{who}: state changed");
}

#[test]
fn fuzzed_ioctls_never_crash_hang_leak_change_state_or_cross_tenants() {
    let m = Mounted::new();
    let before = snapshot(&m.path);
    // The snapshot's handle is released asynchronously after close().
    m.wait_gauges((0, 0));
    let base = (m.gauges(), m.view.subscribers());
    let stats = m.stats();
    let requests_before = TenantStats::get(&stats.requests);

    let path = m.path.clone();
    let own_a = [Scope::Vm(1), Scope::Ctx(11), Scope::Ctx(12)];
    let got = run_as(&Cred::tenant_a(), || {
        fuzz(&path, 0x5eed_0001, &own_a, false)
    });
    check(&m, "tenant A", &got, base, &before);

    let got = run_as(&Cred::root(), || fuzz(&path, 0x5eed_0002, &[], true));
    check(&m, "root", &got, base, &before);

    let served = TenantStats::get(&stats.requests) - requests_before;
    eprintln!(
        "fuzz: node served {served} requests, {} errors",
        TenantStats::get(&stats.errors)
    );
    assert!(served >= CALLS, "requests were not counted: {served}");
}
