//! Sampling end to end: `gpupm-driver` (step clock, the built-in scenario
//! and its programs) and `gpupmd` as processes, two tenants (real uids)
//! sampling their own contexts through the tenant node at the same time.
//! Every record they get is their context's, none is lost at the planned
//! buffer sizes, and the CPI reconstructed per block (from branch stacks
//! and cycle samples at a dithered period) is within 20 % of the device
//! ledger's exact CPI over the sampled window for every block with ≥ 1 % of
//! the samples. Malformed requests change no sampling register; closing a
//! session turns the samplers off.

use std::collections::BTreeMap;

use gpupm_client::sampling::reconstruct::{Estimator, Scale};
use gpupm_client::sampling::session::{SampleBody, SamplingRequest};
use gpupm_client::{DevNode, Scope, TenantClient};
use gpupm_driver::scenario::BUILTIN_TOML;
use gpupm_test_support::device::{block_truth, builtin_shape, context_running, step};
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{errno_of, run_as, spawn_as, Cred};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::sampling::{self as s, buf_kind, samp};
use gpupm_uapi::tenant::sampling::OpenSampling;
use gpupm_uapi::tenant::{scope, TENANT_IOC_OPEN_SAMPLING, TENANT_STRUCT_VERSION};
use serde_json::{json, Value};
use zerocopy::IntoBytes;

const UID_A: u32 = 61401;
const UID_B: u32 = 61402;
/// Cycle samples each tenant collects.
const SAMPLES: u64 = 50_000;
/// Relative error allowed per block (generous: no flakes).
const MAX_REL_ERR: f64 = 0.20;

fn tenants() -> String {
    format!("[[tenant]]\nvm = 1\nuid = {UID_A}\n[[tenant]]\nvm = 2\nuid = {UID_B}\n")
}

/// The first context of `vm` running program `name` of the built-in table.
/// A tenant child: samples `ctx` until [`SAMPLES`] cycle samples, answers
/// per-block estimates, foreign records and losses.
fn sampler(
    node: &std::path::Path,
    ctx: u32,
    program: u32,
    uid: u32,
) -> gpupm_test_support::users::Child {
    let node = node.to_owned();
    spawn_as(&Cred::user(uid), move |ctl| {
        let c = TenantClient::open(&node).expect("open");
        let req = SamplingRequest::cycles(Scope::Ctx(ctx), 4096, 255).with_branches(64);
        let opened = c.open_sampling(&req).expect("own context");
        ctl.ready();
        let mut est = Estimator::new(builtin_shape(program)).with_branch_every(64);
        let (mut samples, mut stacks, mut lost, mut foreign) = (0u64, 0u64, 0u64, 0u64);
        while samples < SAMPLES {
            for rec in c.read_samples().expect("read") {
                lost += rec.header.lost_before;
                match rec.body {
                    SampleBody::Cycle(pc) => {
                        foreign += u64::from(pc.ctx != ctx);
                        est.add_pc_record(&pc);
                        samples += 1;
                    }
                    SampleBody::Branch(b) => {
                        foreign += u64::from(b.ctx != ctx);
                        est.add_stack_record(&b);
                        stacks += 1;
                    }
                    SampleBody::Sealed(_) => foreign += 1,
                }
            }
        }
        // The samplers' own scale, as `gpupm cpi` uses it.
        let e = est.estimate(Scale::Rates {
            branch_records: stacks as f64,
            branch_every: 64.0,
        });
        let blocks: Vec<Value> = e
            .kernels
            .iter()
            .flat_map(|k| {
                k.blocks
                    .iter()
                    .map(move |b| json!([k.kernel, b.block, b.cpi, b.samples]))
            })
            .collect();
        json!({ "program": opened.program, "samples": samples, "stacks": stacks, "lost": lost,
                "foreign": foreign, "blocks": blocks })
    })
}

/// Checks one tenant's answer against the ledger's window.
fn score(
    name: &str,
    got: &Value,
    before: &BTreeMap<(u32, u32), (u64, u64)>,
    after: &BTreeMap<(u32, u32), (u64, u64)>,
) -> usize {
    assert_eq!(
        got["foreign"],
        json!(0),
        "{name}: records of other contexts"
    );
    assert_eq!(
        got["lost"],
        json!(0),
        "{name}: records lost at planned sizes"
    );
    assert!(
        got["stacks"].as_u64().unwrap() > 0,
        "{name}: no branch stacks"
    );
    let total = got["samples"].as_u64().unwrap();
    let mut checked = 0;
    for b in got["blocks"].as_array().unwrap() {
        let (k, blk, cpi, n) = (
            u32::try_from(b[0].as_u64().unwrap()).unwrap(),
            u32::try_from(b[1].as_u64().unwrap()).unwrap(),
            b[2].as_f64(),
            b[3].as_u64().unwrap(),
        );
        if n * 100 < total {
            continue;
        }
        let (i0, c0) = before.get(&(k, blk)).copied().unwrap_or((0, 0));
        let (i1, c1) = after[&(k, blk)];
        let exact = (c1 - c0) as f64 / (i1 - i0) as f64;
        let cpi = cpi.unwrap_or_else(|| panic!("{name}: block {k}/{blk} has samples but no CPI"));
        let err = (cpi - exact).abs() / exact;
        eprintln!(
            "{name}: block {k}/{blk}: {n} samples, CPI {cpi:.3} vs exact {exact:.3} ({:.2} %)",
            err * 100.0
        );
        assert!(
            err <= MAX_REL_ERR,
            "{name}: block {k}/{blk}: CPI {cpi} vs {exact}"
        );
        checked += 1;
    }
    checked
}

/// The driver (built-in scenario, step clock) and a ready gpupmd with
/// both tenants mapped, stepped until the scenario's contexts exist.
fn started(name: &str) -> (Scratch, Driver, DevNode, gpupm_test_support::Proc) {
    let tmp = Scratch::new(name);
    let driver = Driver::start_in(&tmp, DriverOptions::system(BUILTIN_TOML));
    let dev = driver.node();
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
    daemon.wait_for("READY=1");
    for _ in 0..64 {
        step(&dev, STEP, &mut daemon);
    }
    (tmp, driver, dev, daemon)
}

#[test]
fn two_tenants_sample_their_own_contexts_and_the_dithered_cpi_matches_the_ledger() {
    let (tmp, driver, dev, mut daemon) = started("sampling");
    let node = tmp.join("tenant").join("node");
    let (gemm, gemm_prog) = context_running(&dev, Some(1), "gemm");
    let (res, res_prog) = context_running(&dev, Some(2), "resonant");

    // Tenant A cannot sample B's context; a malformed request changes no
    // sampling register.
    let regs = |dev: &DevNode| -> Vec<u64> {
        (1..=4u32)
            .flat_map(|p| {
                [
                    s::SAMP_CTRL,
                    s::SAMP_CYCLE_PERIOD,
                    s::SAMP_CYCLE_DITHER,
                    s::SAMP_BRANCH_PERIOD,
                    s::buf(buf_kind::PC, s::BUF_CAP),
                    s::buf(buf_kind::BRANCH, s::BUF_CAP),
                ]
                .map(|reg| samp(p, reg))
            })
            .map(|o| u64::from(dev.read32(o).expect("read")))
            .collect()
    };
    let before_regs = regs(&dev);
    let denied = run_as(&Cred::user(UID_A), || {
        let c = TenantClient::open(&node).expect("open");
        let other =
            errno_of(&c.open_sampling(&SamplingRequest::cycles(Scope::Ctx(res), 4096, 255)));
        let missing =
            errno_of(&c.open_sampling(&SamplingRequest::cycles(Scope::Ctx(4000), 4096, 255)));
        let mut bad = OpenSampling {
            version: TENANT_STRUCT_VERSION,
            scope: scope::CONTEXT,
            id: gemm,
            kinds: 2,
            period: 100,
            ..OpenSampling::default()
        };
        let bad = c
            .raw_ioctl(TENANT_IOC_OPEN_SAMPLING, bad.as_mut_bytes())
            .err()
            .map_or(0, |e| e as i32);
        json!([other, missing, bad])
    });
    assert_eq!(denied, json!([libc::EACCES, libc::EACCES, libc::EINVAL]));
    assert_eq!(
        regs(&dev),
        before_regs,
        "a refused request changed a sampling register"
    );

    let mut a = sampler(&node, gemm, gemm_prog, UID_A);
    let mut b = sampler(&node, res, res_prog, UID_B);
    a.wait_ready();
    b.wait_ready();
    assert_ne!(
        dev.read32(samp(1, s::SAMP_CTRL)).unwrap(),
        0,
        "samplers of partition 1 off"
    );
    let (gemm0, res0) = (block_truth(&dev, gemm), block_truth(&dev, res));
    let mut steps = 0;
    while !(a.done() && b.done()) {
        step(&dev, STEP, &mut daemon);
        steps += 1;
        assert!(
            steps < 2_000_000,
            "the tenants did not get {SAMPLES} samples"
        );
    }
    let (gemm1, res1) = (block_truth(&dev, gemm), block_truth(&dev, res));
    let (got_a, got_b) = (a.finish(), b.finish());
    eprintln!("{steps} steps");
    assert!(score("gemm", &got_a, &gemm0, &gemm1) >= 2);
    assert!(score("resonant", &got_b, &res0, &res1) >= 2);

    // Both sessions closed with their processes: the samplers go off.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while dev.read32(samp(1, s::SAMP_CTRL)).unwrap() != 0
        || dev.read32(samp(2, s::SAMP_CTRL)).unwrap() != 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the samplers stayed on"
        );
        std::thread::yield_now();
    }
    driver.stop();
}

/// A session is handed only what the device wrote after it opened: a
/// first session closes with records still in the device's buffers (the
/// daemon drains them when reprogramming the samplers off); a second
/// session on the same context opens later and none of the records it
/// receives was written before its open.
#[test]
fn a_session_is_handed_nothing_written_before_it_opened() {
    let (tmp, driver, dev, mut daemon) = started("sampling-cut");
    let node = tmp.join("tenant").join("node");
    let (gemm, _) = context_running(&dev, Some(1), "gemm");
    let request = SamplingRequest::cycles(Scope::Ctx(gemm), 4096, 255);

    let first_node = node.clone();
    let mut first = spawn_as(&Cred::user(UID_A), move |ctl| {
        let c = TenantClient::open(&first_node).expect("open");
        c.open_sampling(&request).expect("own context");
        ctl.ready();
        ctl.wait_go();
        json!(null)
    });
    first.wait_ready();
    for _ in 0..32 {
        step(&dev, STEP, &mut daemon);
    }
    first.go();
    first.finish();
    // Closed: the samplers go off, what the buffers held drained.
    while dev.read32(samp(1, s::SAMP_CTRL)).unwrap() != 0 {
        std::thread::yield_now();
    }

    let opened_at = dev.read64(gpupm_uapi::regs::CYCLE).expect("CYCLE");
    let second_node = node.clone();
    let mut second = spawn_as(&Cred::user(UID_A), move |ctl| {
        let c = TenantClient::open(&second_node).expect("open");
        c.open_sampling(&request).expect("own context");
        ctl.ready();
        let (mut n, mut earliest) = (0u64, u64::MAX);
        while n < 64 {
            for rec in c.read_samples().expect("read") {
                if let SampleBody::Cycle(pc) = rec.body {
                    n += 1;
                    earliest = earliest.min(pc.cycle);
                }
            }
        }
        json!({ "records": n, "earliest": earliest })
    });
    second.wait_ready();
    while !second.done() {
        step(&dev, STEP, &mut daemon);
    }
    let got = second.finish();
    let earliest = got["earliest"].as_u64().expect("earliest");
    assert!(
        earliest > opened_at,
        "the session opened at cycle {opened_at} was handed a record of cycle {earliest}"
    );
    driver.stop();
}

/// Runs `argv` as `uid` through `setpriv` while the device advances;
/// returns its stdout.
fn run_while_advancing(
    argv: &[&std::path::Path],
    args: &[String],
    uid: u32,
    cwd: &std::path::Path,
    dev: &DevNode,
    daemon: &mut gpupm_test_support::Proc,
) -> String {
    use std::process::{Command, Stdio};
    let mut child = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .args(argv)
        .args(args)
        .current_dir(cwd)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux) runs the example");
    let mut steps = 0;
    while child.try_wait().expect("wait").is_none() {
        step(dev, STEP, daemon);
        steps += 1;
        assert!(steps < 1_000_000, "{argv:?} never finished");
    }
    let out = child.wait_with_output().expect("output");
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// (samples, cycles, lost) of an example's output; every line checked.
fn parse_example(out: &str) -> (u64, u64, u64) {
    let (mut n, mut cycles, mut lost) = (0, 0, None);
    for line in out.lines() {
        let f: Vec<u64> = line
            .split(' ')
            .skip(1)
            .map(|x| x.parse().expect("number"))
            .collect();
        match line.split(' ').next() {
            Some("block") => {
                n += f[2];
                cycles += f[3];
            }
            Some("lost") => lost = Some(f[0]),
            _ => panic!("unexpected line {line:?}"),
        }
    }
    (n, cycles, lost.expect("a lost line"))
}

#[test]
fn the_c_and_python_session_examples_read_their_contexts_samples() {
    let tmp = Scratch::new("sampling-examples");
    let driver = Driver::start_in(&tmp, DriverOptions::system(BUILTIN_TOML));
    let dev = driver.node();
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &tenants()), &[], &[]);
    daemon.wait_for("READY=1");
    for _ in 0..64 {
        step(&dev, STEP, &mut daemon);
    }
    let (gemm, _) = context_running(&dev, Some(1), "gemm");
    let root = gpupm_test_support::workspace_root();
    let exe = tmp.join("tenant_sample");
    let built = std::process::Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(root.join("include"))
        .arg(root.join("examples/c/tenant_sample.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("this test needs a C compiler as `cc`");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    for f in ["tenant_sample.py", "gpupm_tenant.py"] {
        std::fs::copy(root.join("examples/python").join(f), tmp.join(f)).expect("stage python");
    }
    let node = tmp.join("tenant").join("node");
    let args = [gemm.to_string(), "2000".into(), node.display().to_string()];
    let python = std::path::PathBuf::from("/usr/bin/python3");
    let script = tmp.join("tenant_sample.py");
    for argv in [
        vec![exe.as_path()],
        vec![python.as_path(), script.as_path()],
    ] {
        let out = run_while_advancing(&argv, &args, UID_A, tmp.path(), &dev, &mut daemon);
        let (n, cycles, lost) = parse_example(&out);
        assert_eq!((n, lost), (2000, 0), "{argv:?}:\n{out}");
        // Each sample stands for P + R + S − A cycles, R in 0..=255.
        let (lo, hi) = (n * (4096 + 12 - 8), n * (4096 + 255 + 12 - 8));
        assert!(
            (lo..=hi).contains(&cycles),
            "{argv:?}: {cycles} cycles for {n} samples"
        );
    }
    // Another tenant's context: the example fails with EACCES.
    let out = std::process::Command::new("setpriv")
        .arg(format!("--reuid={UID_B}"))
        .arg(format!("--regid={UID_B}"))
        .arg("--clear-groups")
        .arg(&exe)
        .args(&args)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{out:?}"
    );
    driver.stop();
}
