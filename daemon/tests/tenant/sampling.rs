//! Sampling sessions on the real tenant node (in-process view, recording
//! sampler): malformed requests are EINVAL and change nothing, another
//! tenant's scope fails like a missing one, records reach their session by
//! read() and poll(), and closing the handle withdraws the demand.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::fixture::sampler::pc_batch;
use crate::fixture::*;
use gpupm_client::sampling::session::{SampleBody, SamplingRequest};
use gpupm_client::{Scope, TenantClient};
use gpupm_uapi::tenant::sampling::{sample_kind, OpenSampling};
use gpupm_uapi::tenant::{scope, TENANT_IOC_OPEN_SAMPLING, TENANT_STRUCT_VERSION};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use zerocopy::IntoBytes;

/// Makes a valid request malformed in one way.
type Spoil = fn(&mut OpenSampling);

fn valid() -> OpenSampling {
    OpenSampling {
        version: TENANT_STRUCT_VERSION,
        scope: scope::CONTEXT,
        id: 11,
        kinds: u32::from(sample_kind::ALL),
        period: 4096,
        dither: 255,
        branch_every: 64,
        ..OpenSampling::default()
    }
}

/// What the daemon shows of the sampling plane and the node.
fn digest(m: &Mounted) -> Value {
    let programmed: Vec<String> = m
        .view
        .sampler
        .programmed
        .lock()
        .unwrap()
        .iter()
        .map(|p| format!("{p:?}"))
        .collect();
    let settings: Vec<String> = (1..=3)
        .map(|p| format!("{:?}", m.view.plane.settings(p)))
        .collect();
    json!({
        "programmed": programmed,
        "settings": settings,
        "sessions": m.view.plane.stats().sessions.load(Ordering::Relaxed),
        "gauges": [m.gauges().0, m.gauges().1],
    })
}

#[test]
fn malformed_requests_are_einval_and_change_nothing() {
    let m = Mounted::new();
    let before = digest(&m);
    let got = run_as(&Cred::tenant_a(), || {
        let c = TenantClient::open(&m.path).expect("open");
        let bad: Vec<(&str, Spoil)> = vec![
            ("version", |a| a.version = 2),
            ("flags", |a| a.flags = 1),
            ("reserved", |a| a.reserved = 1),
            ("no kinds", |a| a.kinds = 0),
            ("unknown kind", |a| a.kinds = 4),
            ("period 0", |a| a.period = 0),
            ("period too small", |a| a.period = 255),
            ("period too large", |a| a.period = (1 << 30) + 1),
            ("dither too large", |a| a.dither = 4096),
            ("period without cycles", |a| {
                a.kinds = u32::from(sample_kind::BRANCH_STACK);
            }),
            ("N = 0", |a| a.branch_every = 0),
            ("N too large", |a| a.branch_every = (1 << 20) + 1),
            ("N without branches", |a| {
                a.kinds = u32::from(sample_kind::CYCLE)
            }),
            ("queue too large", |a| a.queue_records = (1 << 20) + 1),
            ("system scope", |a| {
                a.scope = scope::SYSTEM;
                a.id = 0;
            }),
            ("unknown scope", |a| a.scope = 9),
            ("ctx 0", |a| a.id = 0),
            ("VM id out of range", |a| {
                a.scope = scope::VM;
                a.id = 4096;
            }),
        ];
        let mut out = serde_json::Map::new();
        for (name, spoil) in bad {
            let mut arg = valid();
            spoil(&mut arg);
            let mut bytes = arg.as_bytes().to_vec();
            let r = c.raw_ioctl(TENANT_IOC_OPEN_SAMPLING, &mut bytes);
            out.insert(name.into(), json!(r.err().map(|e| e as i32)));
        }
        // Short argument: the size in the number is wrong.
        let short = gpupm_uapi::ioc::read_write(b'T', 0x08, 72);
        let mut bytes = valid().as_bytes()[..72].to_vec();
        let r = c.raw_ioctl(short, &mut bytes);
        out.insert("short".into(), json!(r.err().map(|e| e as i32)));
        // The handle is still fresh: a valid request succeeds on it.
        let ok = c.open_sampling(&SamplingRequest::cycles(Scope::Ctx(11), 4096, 255));
        out.insert("then valid".into(), json!(ok.is_ok()));
        json!(out)
    });
    for (name, errno) in got.as_object().unwrap() {
        if name == "then valid" {
            assert_eq!(errno, &json!(true));
        } else {
            assert_eq!(errno, &json!(libc::EINVAL), "{name}: {got}");
        }
    }
    // The valid session closed with the child: everything is as before,
    // except the programming log that shows it came and went.
    let deadline = Instant::now() + Duration::from_secs(10);
    while digest(&m)["settings"] != before["settings"] || digest(&m)["sessions"] != 0 {
        assert!(Instant::now() < deadline, "{}", digest(&m));
        std::thread::yield_now();
    }
    let after = digest(&m);
    assert_eq!(after["programmed"].as_array().unwrap().len(), 2, "{after}");
}

#[test]
fn another_tenants_context_fails_exactly_like_a_missing_one() {
    let m = Mounted::new();
    let before = digest(&m);
    let got = run_as(&Cred::tenant_a(), || {
        let c = TenantClient::open(&m.path).expect("open");
        let tries: Vec<i32> = [Scope::Ctx(21), Scope::Ctx(99), Scope::Vm(2), Scope::Vm(9)]
            .into_iter()
            .map(|s| errno_of(&c.open_sampling(&SamplingRequest::cycles(s, 4096, 255))))
            .collect();
        json!(tries)
    });
    assert_eq!(
        got,
        json!([libc::EACCES, libc::EACCES, libc::EACCES, libc::EACCES])
    );
    assert_eq!(digest(&m), before);
}

fn poll_in(c: &TenantClient, timeout_ms: u16) -> i16 {
    let mut fds = [PollFd::new(c.as_fd(), PollFlags::POLLIN)];
    nix::poll::poll(&mut fds, PollTimeout::from(timeout_ms)).expect("poll");
    fds[0].revents().map_or(0, |r| r.bits())
}

#[test]
fn records_reach_their_session_and_closing_withdraws_the_demand() {
    let m = Mounted::new();
    let mut child = spawn_as(&Cred::tenant_a(), |ctl| {
        let c = TenantClient::open(&m.path).expect("open");
        let opened = c
            .open_sampling(&SamplingRequest::cycles(Scope::Ctx(11), 4096, 255))
            .expect("own context");
        let busy = errno_of(&c.open_sampling(&SamplingRequest::cycles(Scope::Ctx(11), 4096, 0)));
        let small = {
            let mut buf = [0u8; 100];
            c.read_raw(&mut buf)
                .err()
                .and_then(|e| e.errno())
                .map_or(0, |e| e as i32)
        };
        let idle = poll_in(&c, 0);
        ctl.ready();
        let ready = poll_in(&c, 30_000);
        let mut blocks = Vec::new();
        while blocks.len() < 3 {
            for s in c.read_samples().expect("read") {
                match s.body {
                    SampleBody::Cycle(pc) => blocks.push(json!([s.header.seq, pc.ctx, pc.block])),
                    other => panic!("unexpected record {other:?}"),
                }
            }
        }
        json!({
            "partition": opened.partition, "program": opened.program,
            "device_period": opened.device_period, "device_dither": opened.device_dither,
            "busy": busy, "small": small, "idle": idle, "ready": ready, "blocks": blocks,
        })
    });
    child.wait_ready();
    assert_eq!(m.view.plane.settings(1).cycle, Some((4096, 255)));
    // Context 21 (VM 2, tenant B) shares no partition here, but a record of
    // it routed to partition 1 must not pass either.
    m.view.plane.route(&pc_batch(
        1,
        &[
            (1, 11, 0, 5),
            (2, 21, 10, 6),
            (1, 12, 20, 7),
            (1, 11, 5000, 8),
            (1, 11, 10_000, 9),
        ],
    ));
    let got = child.finish();
    assert_eq!(got["partition"], json!(1));
    assert_eq!(got["program"], json!(1));
    assert_eq!(
        (got["device_period"].clone(), got["device_dither"].clone()),
        (json!(4096), json!(255))
    );
    assert_eq!(got["busy"], json!(libc::EBUSY));
    assert_eq!(got["small"], json!(libc::EINVAL));
    assert_eq!(got["idle"], json!(0));
    assert_ne!(got["ready"].as_i64().unwrap() & i64::from(libc::POLLIN), 0);
    assert_eq!(got["blocks"], json!([[1, 11, 5], [2, 11, 8], [3, 11, 9]]));
    // The child exited: the kernel released its handle, the demand goes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !m.view.plane.settings(1).is_off() {
        assert!(Instant::now() < deadline, "the samplers stayed on");
        std::thread::yield_now();
    }
    assert_eq!(m.view.plane.stats().sessions.load(Ordering::Relaxed), 0);
}

/// A tenant's sampling rates are raised to the `[limits]` floors (the
/// answer says what it gets, and the samplers run no faster for it); the
/// admin's are not.
#[test]
fn a_tenants_rates_are_raised_to_the_floors_and_the_admins_are_not() {
    let m = Mounted::new();
    let limits = gpupm_client::config::Limits::default();
    let fastest = |c: &TenantClient| {
        let opened = c
            .open_sampling(&SamplingRequest::cycles(Scope::Ctx(11), 256, 0).with_branches(1))
            .expect("own context");
        json!([opened.device_period, opened.device_branch_every])
    };
    let mut tenant = spawn_as(&Cred::tenant_a(), |ctl| {
        let c = TenantClient::open(&m.path).expect("open");
        let got = fastest(&c);
        ctl.ready();
        ctl.wait_go();
        got
    });
    tenant.wait_ready();
    let floors = json!([
        limits.tenant_min_sample_period,
        limits.tenant_min_branch_every
    ]);
    assert_eq!(
        m.view.plane.settings(1),
        gpupmd::sampling::Settings {
            cycle: Some((u32::try_from(limits.tenant_min_sample_period).unwrap(), 0)),
            branch_every: Some(u32::try_from(limits.tenant_min_branch_every).unwrap())
        }
    );
    tenant.go();
    assert_eq!(tenant.finish(), floors);

    let admin = TenantClient::open(&m.path).expect("open as root");
    assert_eq!(fastest(&admin), json!([256, 1]));
    assert_eq!(m.view.plane.settings(1).cycle, Some((256, 0)));
}
