//! The tenant node, mounted for real, called by real unprivileged users:
//! isolation, confidential VMs, and the errno of every bad input.

// Test constants are small; truncating casts cannot lose anything here.
#![allow(clippy::cast_possible_truncation)]

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::PermissionsExt;

use crate::fixture::*;
use gpupm_client::Scope;
use gpupm_client::{TenantClient, WhoamiExt};
use gpupm_driver::model::cc;
use gpupm_uapi::events::{EVENT_COUNT, MAX_EVENTS};
use gpupm_uapi::layout::{Block, BlockSlot};
use gpupm_uapi::tenant::*;
use gpupmd::tenant::TenantStats;
use serde_json::{json, Value};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Errnos of every scope-taking request for `s`, in a fixed order.
fn errnos(c: &TenantClient, s: Scope) -> Vec<i32> {
    let mut out = vec![
        errno_of(&c.read_counters(s, &[])),
        errno_of(&c.read_counters(s, &[0, 5])),
        errno_of(&c.read_rates(s, 4)),
        errno_of(&c.open_stream(s)),
    ];
    if let Scope::Vm(vm) = s {
        out.push(errno_of(&c.list_contexts(vm)));
    }
    out
}

/// What one tenant sees of everything, as JSON.
fn survey(path: &std::path::Path) -> Value {
    let c = TenantClient::open(path).expect("open node");
    let w = c.whoami().expect("whoami");
    let mut seen = serde_json::Map::new();
    for vm in 1..=4u32 {
        seen.insert(format!("vm{vm}"), json!(errnos(&c, Scope::Vm(vm))));
    }
    for ctx in [11u32, 12, 21, 22, 31, 99, 4095] {
        seen.insert(format!("ctx{ctx}"), json!(errnos(&c, Scope::Ctx(ctx))));
    }
    seen.insert("vm63".into(), json!(errnos(&c, Scope::Vm(63))));
    seen.insert(
        "system".into(),
        json!(errno_of(&c.read_counters(Scope::System, &[]))),
    );
    json!({ "admin": w.admin, "uid": w.uid, "vms": w.visible_vms(), "errnos": seen })
}

fn errnos_of(v: &Value, key: &str) -> Vec<i64> {
    v["errnos"][key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {v}"))
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

#[test]
fn tenant_sees_only_its_vm_and_foreign_ids_fail_like_missing_ones() {
    let m = Mounted::new();
    let meta = std::fs::metadata(&m.path).expect("stat node");
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);
    assert_eq!(
        std::fs::metadata(&m.dir).unwrap().permissions().mode() & 0o777,
        0o755
    );

    let a = run_as(&Cred::tenant_a(), || survey(&m.path));
    assert_eq!(
        (a["admin"].as_u64(), a["uid"].as_u64()),
        (Some(0), Some(u64::from(UID_A)))
    );
    assert_eq!(a["vms"], json!([1]));
    for own in ["vm1", "ctx11", "ctx12"] {
        assert!(errnos_of(&a, own).iter().all(|&e| e == 0), "{own}: {a}");
    }
    let eacces = i64::from(libc::EACCES);
    // Another tenant's VM and contexts, a confidential VM, a VM and
    // contexts that do not exist: all the same EACCES, request by request.
    for other in [
        "vm2", "vm3", "vm4", "vm63", "ctx21", "ctx22", "ctx31", "ctx99", "ctx4095",
    ] {
        let got = errnos_of(&a, other);
        assert!(got.iter().all(|&e| e == eacces), "{other}: {got:?}");
        assert_eq!(
            got,
            errnos_of(
                &a,
                if other.starts_with("vm") {
                    "vm4"
                } else {
                    "ctx99"
                }
            )
        );
    }
    assert_eq!(a["errnos"]["system"], json!(libc::EACCES));

    let b = run_as(&Cred::tenant_b(), || survey(&m.path));
    assert_eq!(b["vms"], json!([2]));
    assert!(errnos_of(&b, "vm1").iter().all(|&e| e == eacces));
    assert_eq!(errnos_of(&b, "ctx11"), errnos_of(&b, "ctx99"));
    assert!(errnos_of(&b, "ctx21").iter().all(|&e| e == 0));
}

#[test]
fn an_unmapped_caller_is_refused_at_open_and_on_every_request_of_a_handle_it_holds() {
    let m = Mounted::new();
    // Handles the admin opened, one of them a stream session, inherited by
    // a process that runs as a user no [[tenant]] entry names.
    let plain = TenantClient::open_nonblocking(&m.path).expect("open as root");
    let stream = TenantClient::open_nonblocking(&m.path).expect("open as root");
    stream
        .open_stream(Scope::Vm(1))
        .expect("root opens a session");
    let got = run_as(&Cred::nobody(), || {
        let poll = |c: &TenantClient| {
            let mut fds = [nix::poll::PollFd::new(
                c.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
                Ok(_) => fds[0]
                    .revents()
                    .map_or(-1, |r| i32::from(r.contains(nix::poll::PollFlags::POLLERR))),
                Err(e) => e as i32,
            }
        };
        json!({
            "open": errno_of(&TenantClient::open(&m.path)),
            "open_nonblocking": errno_of(&TenantClient::open_nonblocking(&m.path)),
            "whoami": errno_of(&plain.whoami()),
            "event_info": errno_of(&plain.event_info(0)),
            "vm1": errnos(&plain, Scope::Vm(1)),
            "ctx11": errnos(&plain, Scope::Ctx(11)),
            "system": errno_of(&plain.read_counters(Scope::System, &[])),
            "instance": errno_of(&plain.read_latest_instance(11, &[])),
            "unknown_ioctl": plain
                .raw_ioctl(0x5401, &mut [0; gpupm_client::sys::RAW_MIN_BUF])
                .err()
                .map_or(0, |e| e as i32),
            "read_plain": errno_of(&plain.read_deltas(1)),
            "read_stream": errno_of(&stream.read_deltas(1)),
            "poll_stream": poll(&stream),
        })
    });
    let eacces = json!(libc::EACCES);
    for key in [
        "open",
        "open_nonblocking",
        "whoami",
        "event_info",
        "system",
        "instance",
        "unknown_ioctl",
        "read_plain",
        "read_stream",
    ] {
        assert_eq!(got[key], eacces, "{key}: {got}");
    }
    assert_eq!(got["vm1"], json!(vec![libc::EACCES; 5]), "{got}");
    assert_eq!(got["ctx11"], json!(vec![libc::EACCES; 4]), "{got}");
    // poll cannot return an errno through poll(2): the refused request
    // shows as POLLERR.
    assert_eq!(got["poll_stream"], json!(1), "{got}");
    // The handles still work for the admin who opened them: nothing the
    // unmapped caller did changed them.
    assert_eq!(plain.whoami().expect("whoami as root").admin, 1);
    let root_read = errno_of(&stream.read_deltas(1));
    assert!(
        root_read == 0 || root_read == libc::EAGAIN,
        "the session broke: {root_read}"
    );
}

#[test]
fn tenant_reads_exactly_its_own_counters_contexts_and_rates() {
    let m = Mounted::new();
    let got = run_as(&Cred::tenant_a(), || {
        let c = TenantClient::open(&m.path).expect("open");
        let ctxs: Vec<Value> = c
            .list_contexts(1)
            .expect("list")
            .iter()
            .map(|e| json!([e.ctx, e.state, e.created_cycle]))
            .collect();
        let vm = c.read_counters(Scope::Vm(1), &[]).expect("vm totals");
        let ctx = c
            .read_counters(Scope::Ctx(11), &[3, 0, 38])
            .expect("ctx totals");
        let rates = c.read_rates(Scope::Vm(1), 4).expect("rates");
        let samples: Vec<Value> = rates.samples[..rates.count as usize]
            .iter()
            .map(|s| json!([s.start_cycle, s.ctx, s.deltas[0], s.deltas[63]]))
            .collect();
        json!({
            "ctxs": ctxs,
            "vm": [vm.flags, vm.commit_seq, vm.cycle, vm.values[0], vm.values[63]],
            "ctx": [ctx.values[0], ctx.values[1], ctx.values[2], ctx.values[3]],
            "rates": samples, "clock": rates.clock_khz, "rflags": rates.flags,
        })
    });
    assert_eq!(
        got["ctxs"],
        json!([[11, ctx_state::ACTIVE, 100], [12, ctx_state::RETIRED, 200]])
    );
    assert_eq!(got["vm"], json!([0, 10, 1000, 1000, 1063]));
    assert_eq!(got["ctx"], json!([1103, 1100, 1138, 0]));
    let want: Vec<Value> = (17..=20u64)
        .map(|i| json!([i * 1000, 11, 1_000_000 + i * 100, 1_000_000 + i * 100 + 63]))
        .collect();
    assert_eq!(got["rates"], json!(want));
    assert_eq!(
        (got["clock"].as_u64(), got["rflags"].as_u64()),
        (Some(1_500_000), Some(0))
    );
}

#[test]
fn admin_sees_everything_including_system_and_missing_ids_are_enoent() {
    let m = Mounted::new();
    for cred in [Cred::root(), Cred::group_admin()] {
        let got = run_as(&cred, || {
            let c = TenantClient::open(&m.path).expect("open");
            let w = c.whoami().expect("whoami");
            let sys = c.read_counters(Scope::System, &[]).expect("system");
            let vm2 = c.read_counters(Scope::Vm(2), &[1]).expect("vm2");
            let ctx22 = c.read_counters(Scope::Ctx(22), &[]).expect("ctx22");
            json!({
                "admin": w.admin, "vms": w.visible_vms(),
                "sys": [sys.values[0], sys.commit_seq], "vm2": vm2.values[0], "ctx22": ctx22.values[5],
                "vm4": errnos(&c, Scope::Vm(4)), "ctx99": errnos(&c, Scope::Ctx(99)),
                "ctx21": errnos(&c, Scope::Ctx(21)),
                "sys_rates": errno_of(&c.read_rates(Scope::System, 1)),
            })
        });
        assert_eq!(got["admin"], json!(1), "{cred:?}");
        assert_eq!(got["vms"], json!([1, 2, 3]));
        assert_eq!(got["sys"], json!([9000, 99]));
        assert_eq!(
            (got["vm2"].as_u64(), got["ctx22"].as_u64()),
            (Some(2001), Some(2205))
        );
        assert_eq!(got["vm4"], json!(vec![libc::ENOENT; 5]));
        assert_eq!(got["ctx99"], json!(vec![libc::ENOENT; 4]));
        assert_eq!(got["ctx21"], json!(vec![0; 4]));
        assert_eq!(got["sys_rates"], json!(libc::EINVAL));
    }
}

#[test]
fn confidential_owner_gets_the_exact_sealed_bytes_and_can_open_them() {
    let m = Mounted::new();
    let got = run_as(&Cred::tenant_c(), || {
        let c = TenantClient::open(&m.path).expect("open");
        let w = c.whoami().expect("whoami");
        let vm = c.read_counters(Scope::Vm(3), &[]).expect("vm3");
        let ctx = c.read_counters(Scope::Ctx(31), &[]).expect("ctx31");
        let rates = c.read_rates(Scope::Ctx(31), 16).expect("rates");
        json!({
            "vms": w.visible_vms(),
            "vm": [vm.flags, vm.values.iter().sum::<u64>(), vm.commit_seq],
            "vm_sealed": vm.sealed.as_bytes(), "ctx_sealed": ctx.sealed.as_bytes(),
            "ctx_flags": ctx.flags, "rates": [rates.flags, rates.count],
            "vm1": errnos(&c, Scope::Vm(1)),
        })
    });
    assert_eq!(got["vms"], json!([3]));
    assert_eq!(got["vm"], json!([counter_flags::SEALED, 0, 0]));
    assert_eq!(got["ctx_flags"], json!(counter_flags::SEALED));
    assert_eq!(got["rates"], json!([counter_flags::SEALED, 0]));
    assert_eq!(got["vm1"], json!(vec![libc::EACCES; 5]));
    for (key, scope, base) in [
        ("vm_sealed", Scope::Vm(3), 3000),
        ("ctx_sealed", Scope::Ctx(31), 3100),
    ] {
        let bytes: Vec<u8> = serde_json::from_value(got[key].clone()).unwrap();
        assert_eq!(
            bytes, m.view.sealed[&scope],
            "{key}: not the published bytes"
        );
        let mut slot = BlockSlot::read_from_bytes(&bytes).unwrap();
        let tag = slot.tag;
        cc::open(&KEY3, &slot.envelope, &mut slot.payload, &tag).expect("decrypt with the VM key");
        let block = Block::read_from_bytes(&slot.payload).unwrap();
        assert_eq!(
            (block.vm, block.counters[0], block.counters[63]),
            (3, base, base + 63)
        );
        let mut wrong = BlockSlot::read_from_bytes(&bytes).unwrap();
        assert!(cc::open(&[0; 32], &wrong.envelope, &mut wrong.payload, &tag).is_err());
    }
    // Another tenant cannot read it either way.
    let a = run_as(&Cred::tenant_a(), || {
        let c = TenantClient::open(&m.path).expect("open");
        json!([errnos(&c, Scope::Vm(3)), errnos(&c, Scope::Ctx(31))])
    });
    assert_eq!(a, json!([vec![libc::EACCES; 5], vec![libc::EACCES; 4]]));
}

fn code_rw(nr: u8, size: usize) -> u32 {
    gpupm_uapi::ioc::read_write(TENANT_IOC_MAGIC, nr, size)
}

/// `(what, errno)` for every kind of bad input, as a tenant sends it.
fn bad_inputs(path: &std::path::Path) -> Vec<(String, i32)> {
    let c = TenantClient::open(path).expect("open");
    let mut out = Vec::new();
    let mut note = |what: &str, r: Result<(), gpupm_client::ClientError>| {
        out.push((what.to_string(), errno_of(&r)))
    };
    let mut buf = vec![0u8; 16 * 1024];
    let raw = |cmd: u32, buf: &mut [u8]| match c.raw_ioctl(cmd, buf) {
        Ok(_) => 0,
        Err(e) => e as i32,
    };
    out_push(
        &mut note,
        "unknown type",
        raw(code_rw(0, 8) & !0xff00 | 0x7a00, &mut buf),
    );
    out_push(&mut note, "unknown nr", raw(code_rw(0x40, 8), &mut buf));
    out_push(&mut note, "tty ioctl", raw(0x5401, &mut buf));
    out_push(&mut note, "whoami short", raw(code_rw(0, 8), &mut buf));
    out_push(
        &mut note,
        "counters long",
        raw(code_rw(2, size_of::<ReadCounters>() + 8), &mut buf),
    );
    let wrong_dir = gpupm_uapi::ioc::read(TENANT_IOC_MAGIC, 4, size_of::<OpenStream>());
    out_push(&mut note, "stream wrong dir", raw(wrong_dir, &mut buf));

    let mut w = Whoami::new_zeroed();
    note("whoami version", c.call("w", TENANT_IOC_WHOAMI, &mut w));
    let mut l = Box::new(ListContexts::new_zeroed());
    l.version = TENANT_STRUCT_VERSION;
    l.vm = 1;
    l.reserved = 1;
    note(
        "list reserved",
        c.call("l", TENANT_IOC_LIST_CONTEXTS, &mut *l),
    );
    l.reserved = 0;
    for vm in [0, 64, u32::MAX] {
        l.vm = vm;
        note(
            &format!("list vm {vm}"),
            c.call("l", TENANT_IOC_LIST_CONTEXTS, &mut *l),
        );
    }
    let counters = |f: &dyn Fn(&mut ReadCounters)| {
        let mut r = Box::new(ReadCounters::new_zeroed());
        r.version = TENANT_STRUCT_VERSION;
        r.scope = scope::VM;
        r.id = 1;
        f(&mut r);
        c.call("r", TENANT_IOC_READ_COUNTERS, &mut *r)
    };
    note("counters ok", counters(&|_| {}));
    note("counters version 2", counters(&|r| r.version = 2));
    note("counters reserved", counters(&|r| r.reserved = 1));
    note(
        "counters n_events 65",
        counters(&|r| r.n_events = MAX_EVENTS as u32 + 1),
    );
    note(
        "counters event id",
        counters(&|r| {
            r.n_events = 2;
            r.events[1] = EVENT_COUNT as u16;
        }),
    );
    note("counters scope 0", counters(&|r| r.scope = 0));
    note("counters scope 4", counters(&|r| r.scope = 4));
    note(
        "counters system id 1",
        counters(&|r| {
            r.scope = scope::SYSTEM;
            r.id = 1;
        }),
    );
    note(
        "counters ctx 0",
        counters(&|r| {
            r.scope = scope::CONTEXT;
            r.id = 0;
        }),
    );
    note(
        "counters ctx 4096",
        counters(&|r| {
            r.scope = scope::CONTEXT;
            r.id = 4096;
        }),
    );
    let rates = |f: &dyn Fn(&mut ReadRates)| {
        let mut r = Box::new(ReadRates::new_zeroed());
        r.version = TENANT_STRUCT_VERSION;
        r.scope = scope::VM;
        r.id = 1;
        r.max = 1;
        f(&mut r);
        c.call("r", TENANT_IOC_READ_RATES, &mut *r)
    };
    note("rates ok", rates(&|_| {}));
    note("rates max 0", rates(&|r| r.max = 0));
    note("rates max 17", rates(&|r| r.max = 17));
    note("rates reserved", rates(&|r| r.reserved = 9));
    note(
        "rates system",
        rates(&|r| {
            r.scope = scope::SYSTEM;
            r.id = 0;
        }),
    );
    let stream = |f: &dyn Fn(&mut OpenStream)| {
        let mut s = OpenStream {
            version: TENANT_STRUCT_VERSION,
            scope: scope::VM,
            id: 1,
            flags: 0,
        };
        f(&mut s);
        c.call("s", TENANT_IOC_OPEN_STREAM, &mut s)
    };
    note("stream flags", stream(&|s| s.flags = 1));
    note(
        "stream system",
        stream(&|s| {
            s.scope = scope::SYSTEM;
            s.id = 0;
        }),
    );
    note("stream version 0", stream(&|s| s.version = 0));
    let info = |id: u32, reserved: u8| {
        let mut e = EventInfo::new_zeroed();
        e.version = TENANT_STRUCT_VERSION;
        e.id = id;
        e.reserved = reserved;
        c.call("e", TENANT_IOC_EVENT_INFO, &mut e)
    };
    note("event 0", info(0, 0));
    note("event last", info(EVENT_COUNT as u32 - 1, 0));
    note("event past last", info(EVENT_COUNT as u32, 0));
    note("event reserved", info(1, 1));
    note("read without session", c.read_delta().map(|_| ()));
    out
}

fn out_push(
    note: &mut impl FnMut(&str, Result<(), gpupm_client::ClientError>),
    what: &str,
    errno: i32,
) {
    let r = if errno == 0 {
        Ok(())
    } else {
        Err(gpupm_client::ClientError::Ioctl {
            op: "raw",
            source: nix::errno::Errno::from_raw(errno),
        })
    };
    note(what, r);
}

#[test]
fn every_bad_input_gets_its_errno_and_changes_nothing() {
    let m = Mounted::new();
    let before = (m.gauges(), m.view.subscribers());
    let got = run_as(&Cred::tenant_a(), || json!(bad_inputs(&m.path)));
    let got: Vec<(String, i32)> = serde_json::from_value(got).unwrap();
    let want = |what: &str| match what {
        "unknown type" | "unknown nr" | "tty ioctl" => libc::ENOTTY,
        "counters ok" | "rates ok" | "event 0" | "event last" => 0,
        _ => libc::EINVAL,
    };
    for (what, errno) in &got {
        assert_eq!(*errno, want(what), "{what}");
    }
    assert_eq!(got.len(), 34, "{got:?}");
    m.wait_gauges(before.0);
    assert_eq!(m.view.subscribers(), before.1);

    // A failed OPEN_STREAM leaves the handle's session as it was.
    let c = TenantClient::open_nonblocking(&m.path).unwrap();
    c.open_stream(Scope::Vm(1)).unwrap();
    let mut bad = OpenStream {
        version: TENANT_STRUCT_VERSION,
        scope: scope::VM,
        id: 1,
        flags: 4,
    };
    assert_eq!(
        errno_of(&c.call("s", TENANT_IOC_OPEN_STREAM, &mut bad)),
        libc::EINVAL
    );
    assert_eq!(errno_of(&c.read_delta()), libc::EAGAIN);
    let mut tiny = [0u8; 16];
    let n = nix::unistd::read(c.as_fd().as_raw_fd(), &mut tiny);
    assert_eq!(
        n,
        Err(nix::errno::Errno::EINVAL),
        "read shorter than a record"
    );
    assert_eq!(
        nix::unistd::write(c.as_fd(), b"x"),
        Err(nix::errno::Errno::EBADF),
        "opened read-only"
    );
    drop(c);
    m.wait_gauges(before.0);
    let stats = m.stats();
    assert!(TenantStats::get(&stats.errors) >= 30, "errors counted");
}

#[test]
fn a_stale_mount_is_recovered_and_a_live_one_refused() {
    require_root_and_fuse();
    let dir = std::env::temp_dir().join(format!("gpupm-tenant-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    {
        // A FUSE mount whose server is gone: every access fails with ENOTCONN.
        let fuse = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .unwrap();
        let data = format!(
            "fd={},rootmode=40755,user_id=0,group_id=0,allow_other",
            std::os::fd::AsRawFd::as_raw_fd(&fuse)
        );
        nix::mount::mount(
            Some("stale"),
            &dir,
            Some("fuse.stale"),
            nix::mount::MsFlags::empty(),
            Some(data.as_str()),
        )
        .expect("mount a FUSE file system");
        drop(fuse);
        let err = std::fs::metadata(&dir).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN));
    }
    let view = Fixture::new();
    let node = gpupmd::tenant::TenantNode::mount(
        &dir,
        crate::fixture::served(&view),
        policy(),
        crate::fixture::bounds(),
        gpupmd::tenant::DEFAULT_THREADS,
    )
    .expect("recovers the stale mount");
    let c = TenantClient::open(dir.join("node")).unwrap();
    assert_eq!(c.whoami().unwrap().admin, 1);
    drop(c);
    let again = gpupmd::tenant::TenantNode::mount(
        &dir,
        crate::fixture::served(&view),
        policy(),
        crate::fixture::bounds(),
        gpupmd::tenant::DEFAULT_THREADS,
    );
    assert!(again.is_err(), "mounted over a live node");
    drop(node);
    let fs_type = nix::sys::statfs::statfs(&dir).unwrap().filesystem_type();
    assert_ne!(
        fs_type,
        nix::sys::statfs::FUSE_SUPER_MAGIC,
        "still mounted after drop"
    );
    std::fs::remove_dir(&dir).unwrap();
}
