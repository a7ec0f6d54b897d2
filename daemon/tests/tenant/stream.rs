//! Stream sessions on the real tenant node: ordering, blocking and
//! non-blocking reads, poll readiness, isolation, overflow accounting,
//! killed readers and release.

// Test constants are small; truncating casts cannot lose anything here.
#![allow(clippy::cast_possible_truncation)]

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::fixture::*;
use gpupm_client::Scope;
use gpupm_client::TenantClient;
use gpupm_driver::model::cc;
use gpupm_uapi::layout::{StreamRecord, StreamSlot, RECORD_MAGIC};
use gpupm_uapi::tenant::TenantDelta;
use gpupmd::tenant::{TenantStats, SESSION_QUEUE};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use serde_json::{json, Value};
use zerocopy::{FromBytes, IntoBytes};

/// (seq, lost_before, record vm, ctx, record seq, deltas[0]) of a plaintext delta.
fn describe(d: &TenantDelta) -> Value {
    let r = StreamRecord::read_from_bytes(&d.slot.payload).expect("record");
    assert_eq!(r.magic, RECORD_MAGIC);
    json!([d.seq, d.lost_before, r.vm, r.ctx, r.seq, r.deltas[0]])
}

fn poll_in(c: &TenantClient, timeout_ms: u16) -> i16 {
    let mut fds = [PollFd::new(c.as_fd(), PollFlags::POLLIN)];
    nix::poll::poll(&mut fds, PollTimeout::from(timeout_ms)).expect("poll");
    fds[0].revents().map_or(0, |r| r.bits())
}

#[test]
fn deltas_arrive_in_order_to_their_owner_only() {
    let m = Mounted::new();
    let base = m.gauges();
    let mut child = spawn_as(&Cred::tenant_a(), |ctl| {
        let c = TenantClient::open(&m.path).expect("open");
        c.open_stream(Scope::Vm(1)).expect("own stream");
        ctl.ready();
        let mut got = Vec::new();
        while got.len() < 6 {
            for d in c.read_deltas(4).expect("read") {
                got.push(describe(&d));
            }
        }
        json!(got)
    });
    child.wait_ready();
    let mut want = Vec::new();
    for seq in 1..=6u64 {
        m.view.push(plain_sample(2, 21, seq));
        // A record of VM 2 wrongly fed into VM 1's feed must not pass either.
        m.view.push_to(Scope::Vm(1), plain_sample(2, 22, 100 + seq));
        m.view.push(plain_sample(1, 11 + (seq % 2) as u32, seq));
        want.push(json!([
            seq,
            0,
            1,
            11 + (seq % 2),
            seq,
            1_000_000 + seq * 100
        ]));
    }
    assert_eq!(child.finish(), json!(want));
    m.wait_gauges(base);
}

#[test]
fn nonblocking_reads_eagain_and_poll_reports_readiness() {
    let m = Mounted::new();
    let mut child = spawn_as(&Cred::tenant_a(), |ctl| {
        let c = TenantClient::open_nonblocking(&m.path).expect("open");
        c.open_stream(Scope::Ctx(11)).expect("own context stream");
        let idle = poll_in(&c, 0);
        let empty = errno_of(&c.read_delta());
        ctl.ready();
        let ready = poll_in(&c, 30_000);
        let d = c.read_delta().expect("read").expect("a record");
        let after = errno_of(&c.read_delta());
        let idle_again = poll_in(&c, 0);
        json!({ "idle": idle, "empty": empty, "ready": ready, "d": describe(&d), "after": after, "idle_again": idle_again })
    });
    child.wait_ready();
    m.view.push(plain_sample(1, 12, 1));
    m.view.push(plain_sample(1, 11, 2));
    let got = child.finish();
    assert_eq!(got["idle"], json!(0));
    assert_eq!(got["empty"], json!(libc::EAGAIN));
    assert_ne!(
        got["ready"].as_i64().unwrap() & i64::from(libc::POLLIN),
        0,
        "{got}"
    );
    assert_eq!(got["d"], json!([1, 0, 1, 11, 2, 1_000_200]));
    assert_eq!(got["after"], json!(libc::EAGAIN));
    assert_eq!(got["idle_again"], json!(0));
}

#[test]
fn a_tenant_cannot_open_or_read_another_tenants_stream() {
    let m = Mounted::new();
    let base = (m.gauges(), m.view.subscribers());
    let got = run_as(&Cred::tenant_a(), || {
        let c = TenantClient::open_nonblocking(&m.path).expect("open");
        let tries: Vec<i32> = [
            Scope::Vm(2),
            Scope::Ctx(21),
            Scope::Vm(3),
            Scope::Ctx(31),
            Scope::Vm(9),
            Scope::Ctx(99),
        ]
        .into_iter()
        .map(|s| errno_of(&c.open_stream(s)))
        .collect();
        // No session came of it.
        json!({ "tries": tries, "read": errno_of(&c.read_delta()), "poll": poll_in(&c, 0) })
    });
    assert_eq!(got["tries"], json!(vec![libc::EACCES; 6]));
    assert_eq!(got["read"], json!(libc::EINVAL));
    assert_ne!(got["poll"].as_i64().unwrap() & i64::from(libc::POLLERR), 0);
    m.wait_gauges(base.0);
    assert_eq!(m.view.subscribers(), base.1);

    // A session handed to another user (fd passing, fork) is refused to it.
    let c = TenantClient::open_nonblocking(&m.path).unwrap();
    c.open_stream(Scope::Vm(2)).unwrap();
    let got = run_as(&Cred::tenant_a(), || {
        json!([errno_of(&c.read_delta()), poll_in(&c, 0)])
    });
    assert_eq!(got[0], json!(libc::EACCES));
    assert_ne!(got[1].as_i64().unwrap() & i64::from(libc::POLLERR), 0);
}

#[test]
fn confidential_stream_records_arrive_sealed_and_open_with_the_key() {
    let m = Mounted::new();
    let mut child = spawn_as(&Cred::tenant_c(), |ctl| {
        let c = TenantClient::open(&m.path).expect("open");
        c.open_stream(Scope::Vm(3)).expect("own stream");
        ctl.ready();
        let d = c.read_delta().expect("read").expect("record");
        json!({ "seq": d.seq, "slot": d.slot.as_bytes() })
    });
    child.wait_ready();
    let sample = m.view.sealed_sample(31, 7);
    let published = sample.sealed.clone().unwrap();
    m.view.push(sample);
    let got = child.finish();
    assert_eq!(got["seq"], json!(1));
    let bytes: Vec<u8> = serde_json::from_value(got["slot"].clone()).unwrap();
    assert_eq!(bytes, published, "not the published bytes");
    let mut slot = StreamSlot::read_from_bytes(&bytes).unwrap();
    let tag = slot.tag;
    cc::open(&KEY3, &slot.envelope, &mut slot.payload, &tag).expect("decrypts");
    let r = StreamRecord::read_from_bytes(&slot.payload).unwrap();
    assert_eq!((r.vm, r.ctx, r.seq, r.deltas[1]), (3, 31, 7, 3_000_701));
}

#[test]
fn a_full_session_queue_reports_what_it_dropped() {
    let m = Mounted::new();
    let stats = m.stats();
    let c = TenantClient::open(&m.path).unwrap();
    c.open_stream(Scope::Vm(2)).unwrap();
    let extra = 10u64;
    let total = SESSION_QUEUE as u64 + extra;
    for seq in 1..=total {
        m.view.push(plain_sample(2, 21, seq));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while TenantStats::get(&stats.session_drops) < extra {
        assert!(
            Instant::now() < deadline,
            "the pump did not take the records"
        );
        std::thread::yield_now();
    }
    let mut got = Vec::new();
    while got.len() < SESSION_QUEUE {
        got.extend(c.read_deltas(64).unwrap());
    }
    for (i, d) in got.iter().enumerate() {
        assert_eq!(
            describe(d),
            json!([
                i as u64 + 1,
                0,
                2,
                21,
                i as u64 + 1,
                2_000_000 + (i as u64 + 1) * 100
            ])
        );
    }
    m.view.push(plain_sample(2, 22, total + 1));
    let next = c.read_delta().unwrap().unwrap();
    assert_eq!(
        describe(&next),
        json!([
            SESSION_QUEUE as u64 + 1,
            extra,
            2,
            22,
            total + 1,
            2_000_000 + (total + 1) * 100
        ])
    );
}

#[test]
fn a_killed_blocked_reader_is_released_and_its_session_closed() {
    let m = Mounted::new();
    let base = (m.gauges(), m.view.subscribers());
    let mut child = spawn_as(&Cred::tenant_b(), |ctl| {
        let c = TenantClient::open(&m.path).expect("open");
        c.open_stream(Scope::Vm(2)).expect("stream");
        ctl.ready();
        let d = c.read_delta();
        json!(format!("read returned {d:?}"))
    });
    child.wait_ready();
    // Wait until the child sleeps in the read on the node.
    gpupm_test_support::procfs::wait_blocked_in_fuse(child.pid.as_raw(), Duration::from_secs(10));
    assert_eq!(m.gauges(), (base.0 .0 + 1, base.0 .1 + 1));
    let status = child.kill();
    assert!(
        matches!(
            status,
            nix::sys::wait::WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGKILL, _)
        ),
        "{status:?}"
    );
    m.wait_gauges(base.0);
    // The session leaves its feed as it goes (before its charge does).
    assert_eq!(
        m.view.subscribers(),
        base.1,
        "feed of the closed session still subscribed"
    );
}

#[test]
fn dropping_the_node_fails_a_blocked_read_and_unmounts() {
    let mut m = Mounted::new();
    let mut child = spawn_as(&Cred::tenant_a(), |ctl| {
        let c = TenantClient::open(&m.path).expect("open");
        c.open_stream(Scope::Vm(1)).expect("stream");
        ctl.ready();
        json!(errno_of(&c.read_delta()))
    });
    child.wait_ready();
    gpupm_test_support::procfs::wait_blocked_in_fuse(child.pid.as_raw(), Duration::from_secs(10));
    drop(m.node.take());
    assert_eq!(child.finish(), json!(libc::ENODEV));
    let fs_type = nix::sys::statfs::statfs(&m.dir).unwrap().filesystem_type();
    assert_ne!(fs_type, nix::sys::statfs::FUSE_SUPER_MAGIC);
}
