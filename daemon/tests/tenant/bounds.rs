//! The `[limits]` bounds through the real mount, as real users: each cap
//! answers its documented errno at once, counts per uid (another uid is
//! not touched) and in all, and gives back what was held when it goes.

use std::os::fd::AsFd;

use gpupm_client::config::Limits;
use gpupm_client::{Scope, TenantClient};
use gpupm_uapi::tenant::TenantDelta;
use serde_json::json;

use crate::fixture::*;

/// Opens handles until `open()` fails; answers how many and the errno.
fn open_until_refused(path: &std::path::Path, max: usize) -> (Vec<TenantClient>, i32) {
    let mut held = Vec::new();
    while held.len() < max {
        match TenantClient::open(path) {
            Ok(c) => held.push(c),
            Err(e) => return (held, e.errno().map_or(-1, |e| e as i32)),
        }
    }
    (held, 0)
}

#[test]
fn handles_are_emfile_past_the_uids_cap_and_enfile_past_the_nodes() {
    let m = Mounted::with_limits(Limits {
        handles_per_uid: 3,
        handles_total: 5,
        ..Limits::default()
    });
    let path = m.path.clone();
    let mut a = spawn_as(&Cred::tenant_a(), move |ctl| {
        let (held, errno) = open_until_refused(&path, 10);
        ctl.ready();
        ctl.wait_go();
        drop(held);
        // What was held came back: the cap again, no more.
        let (again, errno2) = open_until_refused(&path, 10);
        json!([errno, again.len(), errno2])
    });
    a.wait_ready();
    let path = m.path.clone();
    let b = run_as(&Cred::tenant_b(), move || {
        let (held, errno) = open_until_refused(&path, 10);
        json!([held.len(), errno])
    });
    // B is not refused by A's cap, only by the node's (3 + 2 = 5).
    assert_eq!(b, json!([2, libc::ENFILE]));
    a.go();
    assert_eq!(a.finish(), json!([libc::EMFILE, 3, libc::EMFILE]));
    m.wait_gauges((0, 0));
}

#[test]
fn stream_sessions_are_enospc_past_the_uids_cap_and_nothing_changes() {
    let m = Mounted::with_limits(Limits {
        stream_sessions_per_uid: 2,
        ..Limits::default()
    });
    let path = m.path.clone();
    let got = run_as(&Cred::tenant_a(), move || {
        let hs: Vec<TenantClient> = (0..3)
            .map(|_| TenantClient::open(&path).expect("open"))
            .collect();
        let errnos: Vec<i32> = hs
            .iter()
            .map(|c| errno_of(&c.open_stream(Scope::Vm(1))))
            .collect();
        // The refused handle holds no session: reading it is EINVAL.
        let refused_read = errno_of(&hs[2].read_delta());
        drop(hs.into_iter().next());
        let third = TenantClient::open(&path).expect("open");
        json!([
            errnos,
            refused_read,
            errno_of(&third.open_stream(Scope::Vm(1)))
        ])
    });
    assert_eq!(
        got,
        json!([[0, 0, libc::ENOSPC], libc::EINVAL, 0]),
        "the third session is refused until one goes"
    );
    m.wait_gauges((0, 0));
}

#[test]
fn device_reads_past_a_tenants_bucket_are_eagain_and_the_admin_is_not_bounded() {
    let m = Mounted::with_limits(Limits {
        device_reads_per_s: 20,
        ..Limits::default()
    });
    let read = |c: &TenantClient| errno_of(&c.read_counters(Scope::Vm(1), &[]));
    let path = m.path.clone();
    let tenant = run_as(&Cred::tenant_a(), move || {
        let c = TenantClient::open(&path).expect("open");
        let errnos: Vec<i32> = (0..25).map(|_| read(&c)).collect();
        // Table lookups are free.
        let whoami = errno_of(&c.whoami());
        json!([
            errnos.iter().filter(|&&e| e == 0).count(),
            errnos.iter().filter(|&&e| e == libc::EAGAIN).count(),
            whoami
        ])
    });
    // A burst of at most 20 (plus what refilled meanwhile), the rest EAGAIN.
    let (ok, again) = (tenant[0].as_u64().unwrap(), tenant[1].as_u64().unwrap());
    assert!((20..25).contains(&ok) && ok + again == 25, "{tenant}");
    assert_eq!(tenant[2], json!(0));
    let path = m.path.clone();
    let admin = run_as(&Cred::root(), move || {
        let c = TenantClient::open(&path).expect("open");
        json!((0..100).filter(|_| read(&c) != 0).count())
    });
    assert_eq!(admin, json!(0), "the admin is not rate-bounded");
}

#[test]
fn reads_past_the_uids_parked_cap_are_ebusy_at_once_and_the_parked_ones_still_complete() {
    let m = Mounted::with_limits(Limits {
        parked_reads_per_uid: 2,
        ..Limits::default()
    });
    let path = m.path.clone();
    let mut child = spawn_as(&Cred::tenant_a(), move |ctl| {
        let c = std::sync::Arc::new(TenantClient::open(&path).expect("open"));
        c.open_stream(Scope::Vm(1)).expect("own stream");
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..3 {
            let (c, tx) = (std::sync::Arc::clone(&c), tx.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; size_of::<TenantDelta>()];
                let got = nix::sys::uio::pread(c.as_fd(), &mut buf, 0);
                tx.send(got.map_or_else(|e| e as i32, |n| i32::try_from(n).unwrap_or(-1)))
                    .expect("report");
            });
        }
        // The third read comes back at once; two stay parked.
        let first = rx.recv().expect("a read");
        ctl.ready();
        let rest: Vec<i32> = (0..2).map(|_| rx.recv().expect("a read")).collect();
        json!([first, rest])
    });
    child.wait_ready();
    // Records for VM 1 complete the two parked reads.
    for seq in 0..2 {
        m.view.push_to(Scope::Vm(1), plain_sample(1, 11, 100 + seq));
    }
    let record = i32::try_from(size_of::<TenantDelta>()).unwrap();
    assert_eq!(child.finish(), json!([libc::EBUSY, [record, record]]));
    m.wait_gauges((0, 0));
}
