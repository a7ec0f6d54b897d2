//! `gpupm cpi` on a confidential VM, end to end: the real driver (step
//! clock, debug ledger, a device identity) and gpupmd, the tenant of the
//! built-in scenario's confidential VM 4 sampling its own context. Its
//! samples arrive sealed (withheld before the tenant establishes the VM's
//! session); with the session `gpupm cc establish` keeps — found by
//! default, or given with `--key-file` — the CPI per block matches the
//! device ledger (opened with the session's key) as for a plain VM; with a
//! wrong key or none the command fails with one line and prints no
//! estimate.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gpupm_cc::open;
use gpupm_test_support::cc::tenant_state;
use gpupm_test_support::cli::{finish, spawn_as_in, Fixture, UID_VM4};
use gpupm_uapi::ioctl::ledger_flags;
use gpupm_uapi::regs as r;
use serde_json::Value;
use zerocopy::IntoBytes;

const VM: u32 = 4;
const SAMPLES: u64 = 20_000;
/// Blocks with at least this share of the samples are scored.
const MIN_SHARE: f64 = 0.02;
/// Relative error allowed per scored block (as the plain-VM test).
const MAX_REL_ERR: f64 = 0.20;

/// The tenant's session file of VM 4 in `state`, and its current key
/// (read as root).
fn session(state: &Path) -> (PathBuf, [u8; 32]) {
    let dir = state.join("gpupm/cc");
    let node_dir = std::fs::read_dir(&dir)
        .expect("cc state")
        .next()
        .expect("a node dir")
        .expect("entry")
        .path();
    let path = node_dir.join(format!("vm-{VM}.json"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("session file"))
        .expect("session JSON");
    let epoch = v["epoch"].as_u64().expect("epoch");
    let hex = v["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["epoch"].as_u64() == Some(epoch))
        .expect("current key")["key"]
        .as_str()
        .expect("hex")
        .to_string();
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    (path, k)
}

/// A key file of `hex` that only `UID_VM4` may read.
fn key_file(f: &Fixture, name: &str, hex: &str) -> String {
    let path = f.tmp.join(name);
    std::fs::write(&path, format!("{hex}\n")).expect("key file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    nix::unistd::chown(&path, Some(UID_VM4.into()), Some(UID_VM4.into())).expect("chown");
    path.display().to_string()
}

/// Per (kernel, block): (instructions, cycles) of `ctx` so far, from the
/// sealed ledger opened with the VM's `key`.
fn truth(f: &Fixture, ctx: u32, key: &[u8; 32]) -> BTreeMap<(u64, u64), (u64, u64)> {
    let (pages, _) = f.dev.ledger_blocks(ctx).expect("ledger blocks");
    let mut out = BTreeMap::new();
    for mut p in pages {
        assert_ne!(
            p.flags & ledger_flags::SEALED,
            0,
            "a confidential ledger in plaintext"
        );
        let (envelope, tag) = (p.envelope, p.tag);
        open(key, &envelope, p.rows.as_mut_bytes(), &tag).expect("the VM key opens its ledger");
        for row in &p.rows[..p.count as usize] {
            let k = (u64::from(row.kernel), u64::from(row.block));
            out.insert(k, (row.instructions, row.cycles));
        }
    }
    out
}

/// Runs `gpupm cpi` as the VM's tenant (state directory `state`) while the
/// clock advances.
fn cpi(f: &mut Fixture, state: &Path, ctx: u32, extra: &[&str]) -> gpupm_test_support::users::Run {
    let ctx = ctx.to_string();
    let samples = SAMPLES.to_string();
    let default_samples = ["--samples", samples.as_str()];
    let args: Vec<String> = ["cpi", "--ctx", &ctx, "--timeout-s", "120", "--json"]
        .iter()
        .chain(extra)
        .chain(if extra.contains(&"--samples") {
            &[][..]
        } else {
            &default_samples[..]
        })
        .map(|s| s.to_string())
        .chain(["--tenant-node".into(), f.node()])
        .collect();
    let mut child = spawn_as_in(Some(UID_VM4), state, &args);
    while child.try_wait().expect("try_wait").is_none() {
        f.advance_ms(1);
    }
    finish(child)
}

#[test]
fn a_confidential_tenant_opens_its_samples_with_its_session_and_the_cpi_matches_the_ledger() {
    let mut f = Fixture::start_with_tenants("cpi-cc", &["--debug-ledger"], &[(VM, UID_VM4)]);
    let state = tenant_state(f.tmp.path(), UID_VM4);
    f.advance_ms(5);
    let ctx = f.program_context(VM);

    // Before the VM has a session its samples are withheld.
    let run = cpi(&mut f, &state, ctx, &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.out.is_empty(), "an estimate from sealed samples");
    assert!(run.err.contains("gpupm cc establish --vm 4"), "{}", run.err);

    let establish: Vec<String> = ["cc", "establish", "--vm", "4", "--tenant-node"]
        .iter()
        .map(|s| s.to_string())
        .chain([f.node()])
        .collect();
    let run = finish(spawn_as_in(Some(UID_VM4), &state, &establish));
    assert_eq!(run.code, 0, "establish: {run:?}");
    let (session_file, key) = session(&state);

    // With a wrong key: one line, no estimate.
    let wrong = key_file(&f, "wrong.key", &"00".repeat(32));
    let run = cpi(&mut f, &state, ctx, &["--key-file", wrong.as_str()]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.out.is_empty(),
        "an estimate from sealed samples: {}",
        run.out
    );
    assert!(run.err.contains("authentication failed"), "{}", run.err);
    assert_eq!(run.err.lines().count(), 1, "{}", run.err);

    // The session by default: the estimate matches the ledger.
    let before = truth(&f, ctx, &key);
    let run = cpi(&mut f, &state, ctx, &[]);
    let after = truth(&f, ctx, &key);
    assert_eq!(run.code, 0, "cpi: {}", run.err);
    check_estimate(&f, ctx, &run, &before, &after);
    // The session file given explicitly opens them too.
    let explicit = session_file.display().to_string();
    let run = cpi(
        &mut f,
        &state,
        ctx,
        &["--key-file", explicit.as_str(), "--samples", "500"],
    );
    assert_eq!(run.code, 0, "cpi --key-file SESSION: {}", run.err);
    let doc: Value = serde_json::from_str(&run.out).expect("cpi JSON");
    assert!(
        doc["samples"].as_u64().expect("samples") >= 500,
        "{}",
        run.out
    );
    f.stop();
}

/// The estimate of `run` against the ledger's growth from `before` to
/// `after`.
fn check_estimate(
    f: &Fixture,
    ctx: u32,
    run: &gpupm_test_support::users::Run,
    before: &BTreeMap<(u64, u64), (u64, u64)>,
    after: &BTreeMap<(u64, u64), (u64, u64)>,
) {
    let doc: Value = serde_json::from_str(&run.out).expect("cpi JSON");
    let total = doc["samples"].as_u64().expect("samples");
    eprintln!(
        "{total} samples, {} stacks, {} lost, {} broken walks",
        doc["stacks"], doc["lost"], doc["broken_walks"]
    );
    assert!(total >= SAMPLES, "{}", run.out);
    let program = f
        .dev
        .read32(r::ctx(ctx, r::CTX_PROGRAM))
        .expect("CTX_PROGRAM");
    let spec = &gpupm_driver::scenario::builtin().program_table()[program as usize - 1];
    let mut scored = 0;
    for kernel in doc["kernels"].as_array().expect("kernels") {
        let name = kernel["name"].as_str().expect("kernel name");
        let kid = spec
            .kernels
            .iter()
            .position(|k| k.name == name)
            .expect("a kernel of the program") as u64;
        for b in kernel["blocks"].as_array().expect("blocks") {
            let n = b["samples"].as_u64().unwrap();
            if (n as f64) < MIN_SHARE * total as f64 {
                continue;
            }
            let blk = b["block"].as_u64().unwrap();
            let (i0, c0) = before.get(&(kid, blk)).copied().unwrap_or((0, 0));
            let (i1, c1) = after[&(kid, blk)];
            let exact = (c1 - c0) as f64 / (i1 - i0) as f64;
            let cpi = b["cpi"].as_f64().expect("a sampled block has a CPI");
            let err = (cpi - exact).abs() / exact;
            eprintln!(
                "block {kid}/{blk}: {n} samples, CPI {cpi:.3} vs exact {exact:.3} ({:.2} %)",
                err * 100.0
            );
            assert!(
                err <= MAX_REL_ERR,
                "block {kid}/{blk}: CPI {cpi} vs ledger {exact}"
            );
            scored += 1;
        }
    }
    assert!(scored >= 2, "too few blocks scored: {}", run.out);
}
