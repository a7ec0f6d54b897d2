//! 1,100 connections to the page socket from 9 uids — two tenants and
//! seven uids mapped to nothing (a user's subordinate uids, say) — while
//! the admin and two other tenants still get their pages. The uids mapped
//! to nothing hold nothing (refused at `accept` with EACCES), each tenant
//! keeps at most its cap (EMFILE past it), and gpupmd's descriptors stay
//! within the caps.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use gpupm_client::page::{request, PageClient};
use gpupm_test_support::users::{spawn_as, Child, Cred};
use gpupm_uapi::page::PageReply;
use gpupm_uapi::tenant::scope;
use nix::sys::socket::{
    connect, recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr,
};
use serde_json::{json, Value};
use zerocopy::{FromBytes, IntoBytes};

use crate::fixture::{System, ATTACKER, IDLE_TENANT, NEIGHBOUR, UNMAPPED, VICTIM};

/// Connections in all.
const CONNECTIONS: usize = 1100;
/// Per tenant, under `fixture::LIMITS`.
const PER_TENANT: usize = 16;

/// One request for VM `vm`'s page on `s`, by the socket's protocol
/// (`docs/pages.md`): the outcome's name. A granted page's descriptor is
/// not taken (the kernel closes it).
fn ask(s: &OwnedFd, vm: u32) -> String {
    let req = request(scope::VM, vm, 0, 0);
    // A refused connection may be closed already (EPIPE); its refusal
    // still waits to be read.
    let sent = send(s.as_raw_fd(), req.as_bytes(), MsgFlags::MSG_NOSIGNAL);
    let mut buf = [0u8; 64];
    match recv(s.as_raw_fd(), &mut buf, MsgFlags::empty()) {
        Ok(0) => format!("closed (send {sent:?})"),
        Ok(n) => match PageReply::read_from_bytes(&buf[..n]) {
            Ok(r) if r.status == 0 => "granted".to_owned(),
            Ok(r) => format!("refused {}", r.status),
            Err(_) => format!("a reply of {n} bytes"),
        },
        Err(e) => format!("failed: {e}"),
    }
}

/// A flooder: `n` connections as `uid`, held until told to go; then one
/// request for VM `vm`'s page on each, tallied by outcome.
fn flooder(socket_path: &Path, uid: u32, vm: u32, n: usize) -> Child {
    let path = socket_path.to_owned();
    spawn_as(&Cred::user(uid), move |ctl| {
        let addr = UnixAddr::new(&path).expect("socket path");
        let mut socks: Vec<OwnedFd> = Vec::new();
        let mut failed = 0u64;
        for _ in 0..n {
            let s = socket(
                AddressFamily::Unix,
                SockType::SeqPacket,
                SockFlag::SOCK_CLOEXEC,
                None,
            )
            .expect("socket");
            match connect(s.as_raw_fd(), &addr) {
                Ok(()) => socks.push(s),
                Err(_) => failed += 1,
            }
        }
        ctl.ready();
        ctl.wait_go();
        let mut outcomes = std::collections::BTreeMap::<String, u64>::new();
        for s in &socks {
            *outcomes.entry(ask(s, vm)).or_default() += 1;
        }
        json!({ "connect_failed": failed, "outcomes": outcomes })
    })
}

fn served_as(socket_path: &Path, uid: u32, vm: u32) -> Value {
    let path = socket_path.to_owned();
    gpupm_test_support::users::run_as(&Cred::user(uid), move || {
        match PageClient::connect(&path).and_then(|c| c.map_vm(vm)) {
            Ok(page) => json!({ "ok": page.header().vm }),
            Err(e) => json!({ "err": e.to_string() }),
        }
    })
}

#[test]
fn a_thousand_page_connections_from_nine_uids_leave_the_admin_and_other_tenants_served() {
    let _machine = crate::fixture::sharing();
    let mut sys = System::realtime();
    let sock = sys.pages_socket();
    let fds_before = sys.fds();
    let uids: Vec<(u32, u32)> = [(ATTACKER, 1), (IDLE_TENANT, 4)]
        .into_iter()
        .chain(UNMAPPED.iter().map(|&u| (u, 1)))
        .collect();
    let per_uid = CONNECTIONS.div_ceil(uids.len());
    let mut floods: Vec<Child> = uids
        .iter()
        .map(|&(uid, vm)| flooder(&sock, uid, vm, per_uid))
        .collect();
    for f in &mut floods {
        f.wait_ready();
    }
    // Everyone is connected (or refused): the others are still served.
    let admin = PageClient::connect(&sock)
        .and_then(|c| c.map_vm(3))
        .map(|p| p.header().vm);
    let victim = served_as(&sock, VICTIM, 3);
    let neighbour = served_as(&sock, NEIGHBOUR, 2);
    let fds_during = sys.fds();
    let results: Vec<Value> = floods
        .into_iter()
        .map(|mut f| {
            f.go();
            f.finish()
        })
        .collect();
    eprintln!(
        "admin {admin:?}, victim {victim}, neighbour {neighbour}; gpupmd fds {fds_before} -> {fds_during}; {results:?}"
    );
    assert_eq!(admin.expect("the admin's page"), 3);
    assert_eq!(victim, json!({ "ok": 3 }));
    assert_eq!(neighbour, json!({ "ok": 2 }));
    // The two tenants: their cap granted, the rest refused with EMFILE.
    for r in &results[..2] {
        assert_eq!(r["outcomes"]["granted"], json!(PER_TENANT), "{r}");
        assert_eq!(
            r["outcomes"][format!("refused {}", libc::EMFILE)],
            json!(per_uid - PER_TENANT),
            "{r}"
        );
    }
    // Uids mapped to nothing: every connection refused with EACCES.
    for r in &results[2..] {
        assert_eq!(
            r["outcomes"],
            json!({ format!("refused {}", libc::EACCES): per_uid }),
            "{r}"
        );
    }
    // gpupmd held at most the two tenants' caps (and the three served).
    assert!(
        fds_during <= fds_before + 2 * PER_TENANT + 3,
        "gpupmd's descriptors went from {fds_before} to {fds_during}"
    );
    sys.daemon.stop();
}
