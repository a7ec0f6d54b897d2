//! Who may have which page, with real unprivileged uids (forked children
//! that drop to them): a tenant gets its own VM's and contexts' pages and
//! for anyone else's exactly what it gets for one that does not exist;
//! malformed requests are EINVAL; refusals change nothing; a tenant can
//! map its page only for reading (no shared writable mapping, no
//! mprotect, no reopening for writing); a confidential VM's page holds
//! only the device's ciphertext, which its tenant's key opens.

use std::collections::BTreeSet;
use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use crate::fixture::{
    config, connect as connect_pages, device_slot, open_sealed, scenario, sealed_ledger,
    socket as page_socket, wait_current, GID_C, NO_BACKSTOP_MS, UID_A, UID_B, UID_C, UID_NOBODY,
    VM_A, VM_B, VM_CC,
};
use crate::raw;
use gpupm_client::page::{request, MappedPage, PageClient};
use gpupm_client::DevNode;
use gpupm_driver::model::cc;
use gpupm_test_support::device::{self, flush, step, wait_none_destroyed};
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::spawn_daemon;
use gpupm_test_support::users::{run_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::page::{page_flags, page_request_flags, PageReply, PAGE_SIZE, PAGE_STRUCT_VERSION};
use gpupm_uapi::regs::ctx_state;
use gpupm_uapi::tenant::scope;
use nix::errno::Errno;
use nix::sys::socket::{
    connect, recvmsg, send, socket, AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr,
};
use serde_json::json;
use zerocopy::{FromZeros, IntoBytes};

/// A device that ran a while and is quiescent, with its daemon.
struct Running {
    tmp: Scratch,
    driver: Option<Driver>,
    dev: DevNode,
    daemon: Proc,
}

impl Running {
    fn start(tag: &str) -> Running {
        let tmp = Scratch::new(tag);
        let driver = Driver::start_in(&tmp, DriverOptions::system(scenario()));
        let dev = driver.node();
        let mut daemon = spawn_daemon(&tmp, &config(&tmp, NO_BACKSTOP_MS, ""), &[], &[]);
        daemon.wait_for("READY=1");
        for _ in 0..60 {
            step(&dev, STEP, &mut daemon);
        }
        flush(&dev);
        wait_none_destroyed(&dev);
        Running {
            tmp,
            driver: Some(driver),
            dev,
            daemon,
        }
    }

    /// A live context of `vm`: (id, created cycle).
    fn ctx_of(&self, vm: u32) -> (u32, u64) {
        device::contexts(&self.dev)
            .into_iter()
            .find(|&(_, state, v, _)| v == vm && state == ctx_state::ACTIVE)
            .map(|(ctx, _, _, created)| (ctx, created))
            .expect("a live context of the VM")
    }

    fn store_files(&self) -> BTreeSet<String> {
        std::fs::read_dir(self.tmp.join("pages").join("store"))
            .expect("list the page store")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let status = self
            .daemon
            .signal_and_wait(nix::sys::signal::Signal::SIGTERM);
        assert!(
            status.success(),
            "gpupmd exit {status}:\n{}",
            self.daemon.log()
        );
        if let Some(d) = self.driver.take() {
            d.stop();
        }
    }
}

/// The errno of a page request (0: granted with one descriptor).
fn status(pages: &PageClient, kind: u32, id: u32, flags: u32, created: u64) -> i32 {
    match pages.request(&request(kind, id, flags, created)) {
        Ok((reply, fd)) => {
            assert_eq!(reply.status == 0, fd.is_some(), "a descriptor iff granted");
            i32::try_from(reply.status).expect("an errno")
        }
        Err(e) => panic!("page socket failed: {e}"),
    }
}

/// Sends `bytes` as one message on a fresh connection; the reply's status.
fn raw_status(sock: &Path, bytes: &[u8]) -> i32 {
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    connect(fd.as_raw_fd(), &UnixAddr::new(sock).unwrap()).unwrap();
    send(fd.as_raw_fd(), bytes, MsgFlags::MSG_NOSIGNAL).unwrap();
    let mut reply = PageReply::new_zeroed();
    let mut iov = [IoSliceMut::new(reply.as_mut_bytes())];
    let n = recvmsg::<UnixAddr>(fd.as_raw_fd(), &mut iov, None, MsgFlags::empty())
        .unwrap()
        .bytes;
    assert_eq!(n, size_of::<PageReply>());
    assert_eq!(reply.version, PAGE_STRUCT_VERSION);
    i32::try_from(reply.status).unwrap()
}

#[test]
fn another_tenants_page_fails_exactly_like_a_missing_one_and_bad_requests_change_nothing() {
    let run = Running::start("pages-access");
    let sock: PathBuf = page_socket(&run.tmp);
    let (own, own_created) = run.ctx_of(VM_A);
    let (theirs, theirs_created) = run.ctx_of(VM_B);
    let missing_ctx = 4000;
    assert!(device::contexts(&run.dev)
        .iter()
        .all(|c| c.0 != missing_ctx));
    // The admin first, so that the tenant's own pages exist: what follows
    // may then change nothing in the store.
    let admin = connect_pages(&run.tmp);
    let e = |s: i32| Errno::from_raw(s);
    assert_eq!(status(&admin, scope::VM, VM_A, 0, 0), 0);
    assert_eq!(status(&admin, scope::CONTEXT, own, 0, own_created), 0);
    assert_eq!(
        e(status(&admin, scope::VM, 63, 0, 0)),
        Errno::ENOENT,
        "the admin may learn what is missing"
    );
    assert_eq!(
        e(status(
            &admin,
            scope::CONTEXT,
            missing_ctx,
            page_request_flags::LATEST,
            0
        )),
        Errno::ENOENT
    );
    let before = run.store_files();

    let probe = |cred: Cred| {
        let sock = sock.clone();
        run_as(&cred, move || {
            let pages = PageClient::connect(&sock).expect("connect");
            let st = |kind, id, flags, created| status(&pages, kind, id, flags, created);
            let ours = |flags| {
                json!({
                    "vm_own": st(scope::VM, VM_A, 0, 0),
                    "ctx_own_latest": st(scope::CONTEXT, own, page_request_flags::LATEST, 0),
                    "ctx_own_instance": st(scope::CONTEXT, own, 0, own_created),
                    "flags": flags,
                })
            };
            json!({
                "ours": ours(0),
                "refused": [
                    st(scope::VM, VM_B, 0, 0),
                    st(scope::VM, 2, 0, 0),
                    st(scope::VM, 63, 0, 0),
                    st(scope::VM, VM_CC, 0, 0),
                    st(scope::CONTEXT, theirs, page_request_flags::LATEST, 0),
                    st(scope::CONTEXT, theirs, 0, theirs_created),
                    st(scope::CONTEXT, missing_ctx, page_request_flags::LATEST, 0),
                    st(scope::CONTEXT, own, 0, own_created + 1),
                ],
                "invalid": [
                    st(scope::SYSTEM, 0, 0, 0),
                    st(99, 1, 0, 0),
                    st(scope::VM, 0, 0, 0),
                    st(scope::VM, 64, 0, 0),
                    st(scope::VM, VM_A, 0, 5),
                    st(scope::VM, VM_A, page_request_flags::LATEST, 0),
                    st(scope::VM, VM_A, 1 << 7, 0),
                    st(scope::CONTEXT, 0, page_request_flags::LATEST, 0),
                    st(scope::CONTEXT, 4096, page_request_flags::LATEST, 0),
                    st(scope::CONTEXT, own, page_request_flags::LATEST, 7),
                    raw_status(&sock, &[0u8; 8]),
                    raw_status(&sock, &[0u8; 32]),
                    raw_status(&sock, {
                        let mut r = request(scope::VM, VM_A, 0, 0);
                        r.version = 2;
                        r
                    }.as_bytes()),
                ],
            })
        })
    };
    let a = probe(Cred::user(UID_A));
    let eacces = Errno::EACCES as i32;
    let einval = Errno::EINVAL as i32;
    assert_eq!(
        a["ours"],
        json!({"vm_own": 0, "ctx_own_latest": 0, "ctx_own_instance": 0, "flags": 0}),
        "{a}"
    );
    assert!(
        a["refused"].as_array().unwrap().iter().all(|s| s == eacces),
        "tenant A: {a}"
    );
    assert!(
        a["invalid"].as_array().unwrap().iter().all(|s| s == einval),
        "tenant A: {a}"
    );
    // Someone mapped to nothing gets nothing, not even tenant A's pages,
    // nor a connection: it is refused at accept with EACCES, and a second
    // request finds it closed (docs/isolation.md).
    let sock2 = sock.clone();
    let nobody = run_as(&Cred::user(UID_NOBODY), move || {
        let pages = PageClient::connect(&sock2).expect("connect");
        let first = status(&pages, scope::VM, VM_A, 0, 0);
        let again = pages.request(&request(scope::VM, VM_A, 0, 0));
        json!([first, again.is_err()])
    });
    assert_eq!(nobody, json!([eacces, true]), "nobody");
    assert_eq!(
        run.store_files(),
        before,
        "refused and malformed requests changed the store"
    );
    // Tenant B sees its VM and context but not A's.
    let b = probe(Cred::user(UID_B));
    assert_eq!(b["ours"]["vm_own"], eacces, "B asking for A's VM: {b}");
    assert_eq!(
        (&b["refused"][0], &b["refused"][4]),
        (&json!(0), &json!(0)),
        "B's own VM and context: {b}"
    );
}

#[test]
fn a_tenant_maps_its_page_only_for_reading() {
    let run = Running::start("pages-ro");
    let sock = page_socket(&run.tmp);
    let store = run.tmp.join("pages").join("store");
    let admin = connect_pages(&run.tmp);
    let watched = admin.map_vm(VM_A).expect("the admin's mapping");
    let r = run_as(&Cred::user(UID_A), move || {
        let pages = PageClient::connect(&sock).expect("connect");
        let (reply, fd) = pages
            .request(&request(scope::VM, VM_A, 0, 0))
            .expect("request");
        assert_eq!(reply.status, 0);
        let fd = fd.expect("a descriptor");
        let page = MappedPage::from_fd(fd.as_fd()).expect("read-only mapping");
        let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let open_rw = |p: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .map(|_| ())
                .map_err(|e| e.raw_os_error())
        };
        let err = |r: Result<(), Errno>| r.map_or_else(|e| e as i32, |()| 0);
        json!({
            "readable": page.read_counters().is_ok(),
            "map_shared_writable": err(raw::map_shared_writable(fd.as_fd())),
            "mprotect_writable": err(raw::mprotect_writable(fd.as_fd())),
            "reopen_rw": open_rw(Path::new(&proc_path)).err().flatten(),
            "open_store_file": open_rw(&store.join(format!("vm-{VM_A}"))).err().flatten(),
            "fchmod": err(nix::sys::stat::fchmod(fd.as_raw_fd(), nix::sys::stat::Mode::from_bits_truncate(0o666))),
            "ftruncate": err(nix::unistd::ftruncate(fd.as_fd(), 0)),
            "private_copy_write": err(raw::write_private_copy(fd.as_fd(), PAGE_SIZE - 1)),
        })
    });
    let eacces = Errno::EACCES as i32;
    assert_eq!(r["readable"], true, "{r}");
    assert_eq!(r["map_shared_writable"], eacces, "{r}");
    assert_eq!(r["mprotect_writable"], eacces, "{r}");
    assert_eq!(r["reopen_rw"], eacces, "{r}");
    assert_eq!(r["open_store_file"], eacces, "{r}");
    assert_eq!(r["fchmod"], Errno::EPERM as i32, "{r}");
    assert_eq!(r["ftruncate"], Errno::EINVAL as i32, "{r}");
    // A private copy may be written; the shared page is untouched.
    assert_eq!(r["private_copy_write"], 0, "{r}");
    // The byte the tenant wrote into its private copy (in the page's
    // reserved tail, which the daemon never writes) is not in the page.
    let file = std::fs::read(
        run.tmp
            .join("pages")
            .join("store")
            .join(format!("vm-{VM_A}")),
    )
    .unwrap();
    assert_eq!(file.len(), PAGE_SIZE);
    assert_eq!(
        file[PAGE_SIZE - 1],
        0,
        "a private write reached the shared page"
    );
    assert!(watched.read_counters().is_ok());
}

#[test]
fn a_confidential_vms_page_holds_only_ciphertext_that_its_tenants_key_opens() {
    let run = Running::start("pages-cc");
    let sock = page_socket(&run.tmp);
    let admin = connect_pages(&run.tmp);
    let page = admin.map_vm(VM_CC).expect("map the confidential VM's page");
    wait_current(&run.dev, &[&page]);
    let c_cred = Cred {
        uid: UID_C,
        gid: UID_C,
        groups: vec![GID_C],
    };
    let sock_c = sock.clone();
    let seen = run_as(&c_cred, move || {
        let pages = PageClient::connect(&sock_c).expect("connect");
        let p = pages.map_vm(VM_CC).expect("tenant C maps its VM's page");
        let d = p.read().expect("read");
        json!({
            "flags": d.counters.flags,
            "plaintext_zero": d.counters.totals.iter().all(|&v| v == 0) && d.counters.commit_seq == 0,
            "sealed": d.sealed.as_bytes().iter().map(|b| format!("{b:02x}")).collect::<String>(),
        })
    });
    assert_ne!(
        seen["flags"].as_u64().unwrap() & u64::from(page_flags::SEALED),
        0,
        "{seen}"
    );
    assert_eq!(seen["plaintext_zero"], true, "{seen}");
    let slot = device_slot(&run.dev, &page);
    let hex: String = slot.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        seen["sealed"].as_str().unwrap(),
        hex,
        "the page holds the device's ciphertext"
    );
    // Only the VM's key opens it (under the device's current session), and
    // it holds the VM's exact totals, which the sealed ledger confirms.
    assert_ne!(slot.envelope.session(), 0, "sealed in a device session");
    assert_eq!(
        open_sealed(&slot),
        sealed_ledger(&run.dev, ledger_scope::VM, VM_CC)
    );
    let mut wrong = slot.payload;
    assert!(cc::open(&[0; 32], &slot.envelope, &mut wrong, &slot.tag).is_err());
    // Tenant A cannot have it.
    let a = run_as(&Cred::user(UID_A), move || {
        let pages = PageClient::connect(&sock).expect("connect");
        json!(status(&pages, scope::VM, VM_CC, 0, 0))
    });
    assert_eq!(a, json!(Errno::EACCES as i32));
}
