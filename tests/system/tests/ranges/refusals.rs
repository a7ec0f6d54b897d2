//! Refused requests: malformed ones, 50,000 fuzzed ones, and ENOSPC;
//! none changes what the tenants or the device show.

use gpupm_client::{DevNode, TenantClient};
use gpupm_test_support::users::{errno_of, run_as, Cred};
use gpupm_uapi::tenant::ranges::{range_kind, AddRange};
use gpupm_uapi::tenant::TENANT_STRUCT_VERSION;
use serde_json::{json, Value};
use zerocopy::{FromZeros, IntoBytes};

use crate::fixture::{registers, store_range, tenant_rows, UID_A, UID_B};

/// Issues `cmd` with `bytes` in a buffer of at least the page the client
/// insists on (so that the request reaches the daemon); the errno or 0.
pub(crate) fn raw(c: &TenantClient, cmd: u32, bytes: &mut [u8]) -> Result<i32, nix::errno::Errno> {
    let mut buf = bytes.to_vec();
    buf.resize(bytes.len().max(gpupm_client::sys::RAW_MIN_BUF), 0);
    c.raw_ioctl(cmd, &mut buf)
}

/// What the tenants can see of partition 1's ranges: the registers and
/// both tenants' rows.
pub(crate) fn visible(node: &std::path::Path, dev: &DevNode, a1: u32, b1: u32) -> Value {
    json!({
        "registers": registers(dev),
        "a1": format!("{:?}", tenant_rows(node, UID_A, a1)),
        "b1": format!("{:?}", tenant_rows(node, UID_B, b1)),
    })
}

/// Every malformed request is EINVAL (ENOTTY for an unknown number) and
/// 50,000 fuzzed calls by tenant B — random numbers, sizes and bytes, and
/// valid requests for A's context with one field spoiled — all fail;
/// nothing visible changes.
pub(crate) fn malformed_and_fuzzed_requests_change_nothing(
    node: &std::path::Path,
    dev: &DevNode,
    daemon: &gpupm_test_support::Proc,
    (a1, b1): (u32, u32),
    a1_store: u32,
) {
    let metrics = || {
        [
            "gpupm_range_ranges",
            "gpupm_range_registers",
            "gpupm_callgraph_graphs",
        ]
        .map(|m| daemon.metric(m))
    };
    let (metrics0, errors0) = (
        metrics(),
        daemon.metric("gpupm_tenant_request_errors_total"),
    );
    use gpupm_uapi::ioc;
    use gpupm_uapi::tenant::ranges::{GraphHeader, ReadCallEdges, ReadRanges, RemoveRange};
    use gpupm_uapi::tenant::{
        TENANT_IOC_ADD_RANGE, TENANT_IOC_READ_CALL_EDGES, TENANT_IOC_READ_RANGES,
        TENANT_IOC_REMOVE_RANGE,
    };
    let before = visible(node, dev, a1, b1);
    let n = node.to_owned();
    let got = run_as(&Cred::user(UID_A), move || {
        let c = TenantClient::open(&n).expect("open");
        let spoiled: Vec<(&str, AddRange)> = vec![
            (
                "version",
                AddRange {
                    version: 2,
                    ..store_range(a1, 500)
                },
            ),
            (
                "flags",
                AddRange {
                    flags: 1,
                    ..store_range(a1, 500)
                },
            ),
            (
                "reserved",
                AddRange {
                    reserved: 1,
                    ..store_range(a1, 500)
                },
            ),
            (
                "kind",
                AddRange {
                    kind: 3,
                    ..store_range(a1, 500)
                },
            ),
            (
                "event",
                AddRange {
                    event: 3,
                    ..store_range(a1, 500)
                },
            ),
            (
                "trigger",
                AddRange {
                    trigger: 3,
                    ..store_range(a1, 500)
                },
            ),
            (
                "threshold 0",
                AddRange {
                    threshold: 0,
                    ..store_range(a1, 500)
                },
            ),
            (
                "threshold without trigger",
                AddRange {
                    trigger: 0,
                    ..store_range(a1, 500)
                },
            ),
            (
                "first > last",
                AddRange {
                    first: 2,
                    last: 1,
                    ..store_range(a1, 500)
                },
            ),
            (
                "kernel > u16",
                AddRange {
                    kernel: 70_000,
                    ..store_range(a1, 500)
                },
            ),
            (
                "block > u16",
                AddRange {
                    last: 70_000,
                    ..store_range(a1, 500)
                },
            ),
            (
                "data with kernel",
                AddRange {
                    kind: range_kind::DATA,
                    ..store_range(a1, 500)
                },
            ),
            (
                "no such kernel",
                AddRange {
                    kernel: 5,
                    ..store_range(a1, 500)
                },
            ),
            (
                "no such block",
                AddRange {
                    first: 0,
                    last: 9,
                    ..store_range(a1, 500)
                },
            ),
            (
                "ctx 0",
                AddRange {
                    ctx: 0,
                    ..store_range(a1, 500)
                },
            ),
        ];
        let mut out = serde_json::Map::new();
        for (name, mut arg) in spoiled {
            let r = raw(&c, TENANT_IOC_ADD_RANGE, arg.as_mut_bytes());
            out.insert(name.into(), json!(r.err().map(|e| e as i32)));
        }
        let mut rr = ReadRanges::new_zeroed();
        (rr.version, rr.ctx, rr.flags) = (TENANT_STRUCT_VERSION, a1, 1);
        let r = raw(&c, TENANT_IOC_READ_RANGES, rr.as_mut_bytes());
        out.insert("read flags".into(), json!(r.err().map(|e| e as i32)));
        let mut rm = RemoveRange {
            version: TENANT_STRUCT_VERSION,
            ctx: a1,
            handle: a1_store,
            reserved: 1,
        };
        let r = raw(&c, TENANT_IOC_REMOVE_RANGE, rm.as_mut_bytes());
        out.insert("remove reserved".into(), json!(r.err().map(|e| e as i32)));
        let mut ge = ReadCallEdges::new_zeroed();
        ge.head = GraphHeader {
            version: TENANT_STRUCT_VERSION,
            ctx: a1,
            first: 1000,
            ..GraphHeader::default()
        };
        let r = raw(&c, TENANT_IOC_READ_CALL_EDGES, ge.as_mut_bytes());
        out.insert(
            "first past the end".into(),
            json!(r.err().map(|e| e as i32)),
        );
        let mut short = vec![0u8; 60];
        let r = raw(&c, ioc::read_write(b'T', 0x18, 60), &mut short);
        out.insert("short".into(), json!(r.err().map(|e| e as i32)));
        let r = raw(&c, ioc::read_write(b'T', 0x1E, 64), &mut [0u8; 64]);
        out.insert("unknown nr".into(), json!(r.err().map(|e| e as i32)));
        json!(out)
    });
    for (name, errno) in got.as_object().unwrap() {
        let want = if name == "unknown nr" {
            libc::ENOTTY
        } else {
            libc::EINVAL
        };
        assert_eq!(errno, &json!(want), "{name}: {got}");
    }

    let n = node.to_owned();
    let fuzz = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        let mut rng = gpupm_test_support::rng::Rng(0x5eed_0013);
        let (mut ok, mut calls) = (0u64, 0u64);
        let valid: [(u32, Vec<u8>); 4] = [
            (
                TENANT_IOC_ADD_RANGE,
                store_range(a1, 500).as_bytes().to_vec(),
            ),
            (TENANT_IOC_READ_RANGES, {
                let mut rr = ReadRanges::new_zeroed();
                (rr.version, rr.ctx) = (TENANT_STRUCT_VERSION, a1);
                rr.as_bytes().to_vec()
            }),
            (
                TENANT_IOC_REMOVE_RANGE,
                RemoveRange {
                    version: TENANT_STRUCT_VERSION,
                    ctx: a1,
                    handle: a1_store,
                    reserved: 0,
                }
                .as_bytes()
                .to_vec(),
            ),
            (TENANT_IOC_READ_CALL_EDGES, {
                let mut ge = ReadCallEdges::new_zeroed();
                ge.head = GraphHeader {
                    version: TENANT_STRUCT_VERSION,
                    ctx: a1,
                    ..GraphHeader::default()
                };
                ge.as_bytes().to_vec()
            }),
        ];
        while calls < 50_000 {
            let (cmd, mut buf) = if rng.below(2) == 0 {
                // A's valid request with one 32-bit word spoiled.
                let (cmd, bytes) = &valid[usize::try_from(rng.below(4)).unwrap()];
                let mut b = bytes.clone();
                let w = usize::try_from(rng.below((b.len() / 4) as u64)).unwrap() * 4;
                let v = u32::try_from(rng.below(1 << 32)).unwrap();
                b[w..w + 4].copy_from_slice(&v.to_le_bytes());
                (*cmd, b)
            } else {
                let nr = 0x18 + u8::try_from(rng.below(8)).unwrap();
                let size = [16usize, 24, 48, 56, 64, 536, 1072, 1584, 1840]
                    [usize::try_from(rng.below(9)).unwrap()];
                let cmd = match rng.below(3) {
                    0 => ioc::read_write(b'T', nr, size),
                    1 => ioc::write(b'T', nr, size),
                    _ => ioc::read(b'T', nr, size),
                };
                let b: Vec<u8> = (0..size)
                    .map(|_| u8::try_from(rng.below(256)).unwrap())
                    .collect();
                (cmd, b)
            };
            calls += 1;
            if raw(&c, cmd, &mut buf).is_ok() {
                ok += 1;
            }
        }
        json!([calls, ok])
    });
    assert_eq!(fuzz, json!([50_000, 0]), "a fuzzed call of B succeeded");
    let refused = daemon.metric("gpupm_tenant_request_errors_total") - errors0;
    assert!(
        refused >= 50_000,
        "only {refused} requests reached the daemon"
    );
    assert_eq!(metrics(), metrics0, "the range metrics changed");
    assert_eq!(
        visible(node, dev, a1, b1),
        before,
        "a refused request changed something"
    );
}

/// Distinct programmings take the rest of B's VM's share of the
/// registers; the next is ENOSPC and changes nothing, while registers of
/// VM 1's share stay free; removing them frees the registers.
pub(crate) fn registers_run_out_with_enospc(node: &std::path::Path, dev: &DevNode, b1: u32) {
    let before = registers(dev);
    let armed = |v: &[u64]| v.iter().step_by(4).filter(|&&ctrl| ctrl != 0).count();
    // B holds one register (its store range) of its VM's share of four
    // (two VMs on the partition): three more, then ENOSPC — with device
    // registers still free, which are VM 1's share.
    let n = node.to_owned();
    let got = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        let handles: Vec<u32> = (0..3u32)
            .map(|k| {
                c.add_range(&store_range(b1, 10_000 + k))
                    .expect("a register of B's share")
                    .handle
            })
            .collect();
        let full = errno_of(&c.add_range(&store_range(b1, 99_999)));
        json!([handles, full])
    });
    assert_eq!(got[1], json!(libc::ENOSPC));
    let held = registers(dev);
    assert_eq!(armed(&held), armed(&before) + 3);
    assert!(armed(&held) < 8, "the refusal left registers free");
    let n = node.to_owned();
    let handles = got[0].clone();
    let removed = run_as(&Cred::user(UID_B), move || {
        let c = TenantClient::open(&n).expect("open");
        json!(handles
            .as_array()
            .unwrap()
            .iter()
            .map(|h| errno_of(&c.remove_range(b1, u32::try_from(h.as_u64().unwrap()).unwrap())))
            .collect::<Vec<_>>())
    });
    assert!(removed.as_array().unwrap().iter().all(|e| e == &json!(0)));
    // Disarming writes RANGE_CTRL only (the staging registers keep their
    // values): the same registers are armed as before.
    let ctrls = |v: &[u64]| v.iter().step_by(4).copied().collect::<Vec<_>>();
    assert_eq!(ctrls(&registers(dev)), ctrls(&before));
}
