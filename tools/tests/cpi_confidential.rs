//! `gpupm cpi --key-file` on a confidential VM, end to end: the real
//! driver (step clock, debug ledger) and gpupmd, the tenant of the
//! built-in scenario's confidential VM 4 sampling its own context. Its
//! samples arrive sealed; with the VM's key the CPI per block matches the
//! device ledger (opened with the same key) as for a plain VM; with a
//! wrong key or none the command fails with one line and prints no
//! estimate.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use gpupm_driver::model::cc::open;
use gpupm_test_support::cli::{finish, spawn_as, Fixture, UID_VM4};
use gpupm_uapi::ioctl::ledger_flags;
use gpupm_uapi::regs as r;
use serde_json::Value;
use zerocopy::IntoBytes;

const VM: u32 = 4;
/// The built-in scenario's key of VM 4.
const KEY_HEX: &str = "677075706d2d64656d6f2d6b65793a6e6f742d612d7365637265742d30303031";
const SAMPLES: u64 = 20_000;
/// Blocks with at least this share of the samples are scored.
const MIN_SHARE: f64 = 0.02;
/// Relative error allowed per scored block (as the plain-VM test).
const MAX_REL_ERR: f64 = 0.20;

fn key() -> [u8; 32] {
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&KEY_HEX[2 * i..2 * i + 2], 16).unwrap();
    }
    k
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
/// sealed ledger opened with the VM's key.
fn truth(f: &Fixture, ctx: u32) -> BTreeMap<(u64, u64), (u64, u64)> {
    let (pages, _) = f.dev.ledger_blocks(ctx).expect("ledger blocks");
    let mut out = BTreeMap::new();
    for mut p in pages {
        assert_ne!(
            p.flags & ledger_flags::SEALED,
            0,
            "a confidential ledger in plaintext"
        );
        let (envelope, tag) = (p.envelope, p.tag);
        open(&key(), &envelope, p.rows.as_mut_bytes(), &tag).expect("the VM key opens its ledger");
        for row in &p.rows[..p.count as usize] {
            let k = (u64::from(row.kernel), u64::from(row.block));
            out.insert(k, (row.instructions, row.cycles));
        }
    }
    out
}

/// Runs `gpupm cpi` as the VM's tenant while the clock advances.
fn cpi(f: &mut Fixture, ctx: u32, extra: &[&str]) -> gpupm_test_support::users::Run {
    let ctx = ctx.to_string();
    let samples = SAMPLES.to_string();
    let args: Vec<String> = [
        "cpi",
        "--ctx",
        &ctx,
        "--samples",
        &samples,
        "--timeout-s",
        "120",
        "--json",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .chain(["--tenant-node".into(), f.node()])
    .collect();
    let mut child = spawn_as(Some(UID_VM4), &args);
    while child.try_wait().expect("try_wait").is_none() {
        f.advance_ms(1);
    }
    finish(child)
}

#[test]
fn a_confidential_tenant_opens_its_samples_with_its_key_and_the_cpi_matches_the_ledger() {
    let mut f = Fixture::start_with_tenants("cpi-cc", &["--debug-ledger"], &[(VM, UID_VM4)]);
    f.advance_ms(5);
    let ctx = f.program_context(VM);

    // Without a key, or with the wrong one: one line, no estimate.
    let wrong = key_file(&f, "wrong.key", &"00".repeat(32));
    for extra in [&[][..], &["--key-file", wrong.as_str()][..]] {
        let run = cpi(&mut f, ctx, extra);
        assert_eq!(run.code, 2, "{extra:?}: {run:?}");
        assert!(
            run.out.is_empty(),
            "an estimate from sealed samples: {}",
            run.out
        );
        let want = if extra.is_empty() {
            "--key-file"
        } else {
            "authentication failed"
        };
        assert!(run.err.contains(want), "{extra:?}: {}", run.err);
        assert_eq!(run.err.lines().count(), 1, "{}", run.err);
    }

    let right = key_file(&f, "vm4.key", KEY_HEX);
    let before = truth(&f, ctx);
    let run = cpi(&mut f, ctx, &["--key-file", &right]);
    let after = truth(&f, ctx);
    assert_eq!(run.code, 0, "cpi: {}", run.err);
    let doc: Value = serde_json::from_str(&run.out).expect("cpi JSON");
    let total = doc["samples"].as_u64().expect("samples");
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
    f.stop();
}
