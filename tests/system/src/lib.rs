//! Checks the whole-system tests share (the tests are in `tests/`): the
//! exact comparison of the device's blocks and the daemon's persisted
//! retired contexts with the device's ledger.
//!
//! The tests start the real `gpupm-driver` and `gpupmd` as processes
//! (through `gpupm-test-support`); they need root and `/dev/fuse`, and fail
//! saying so without them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpupm_client::DevNode;
use gpupm_test_support::device::{block_at, contexts, expected};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::{block_slot_offset, SYSTEM_BLOCK_SLOT};
use gpupm_uapi::regs::{self as r, ctx_state, MAX_VMS};
use gpupmd::store::retired::RetiredStore;

fn add(a: &mut [u64; MAX_EVENTS], b: &[u64; MAX_EVENTS]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// What [`check_exact`] compared.
#[derive(Debug, Default)]
pub struct Checked {
    /// VMs.
    pub vms: usize,
    /// Live contexts.
    pub live: usize,
    /// Retired (persisted) contexts.
    pub retired: usize,
}

/// With the device flushed and quiescent: the system block, every VM block
/// and every live context block equal the ledger; the persisted retired set
/// is exactly the set of destroyed instances, each persisted once; and per
/// VM, persisted retired totals plus live context totals equal the VM's
/// ledger (so no retired context is lost or counted twice).
pub fn check_exact(dev: &DevNode, state_dir: &Path, destroyed: &BTreeSet<(u32, u64)>) -> Checked {
    let mut checked = Checked::default();
    let sys = block_at(dev, block_slot_offset(SYSTEM_BLOCK_SLOT));
    assert_eq!(
        sys.counters,
        expected(&dev.ledger(ledger_scope::SYSTEM, 0).expect("ledger")),
        "system block"
    );

    let (retired, bad) = RetiredStore::open(state_dir)
        .expect("state dir")
        .load_all()
        .expect("load retired");
    assert!(bad.is_empty(), "unreadable retired files: {bad:?}");
    let persisted: BTreeSet<(u32, u64)> =
        retired.iter().map(|r| (r.ctx, r.created_cycle)).collect();
    assert_eq!(persisted.len(), retired.len());
    let missing: Vec<_> = destroyed.difference(&persisted).collect();
    let extra: Vec<_> = persisted.difference(destroyed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "retired set differs: missing {missing:?}, extra {extra:?}"
    );

    let mut per_vm: BTreeMap<u32, [u64; MAX_EVENTS]> = BTreeMap::new();
    for rec in &retired {
        let b = rec.block().expect("plaintext retired block");
        assert_eq!(
            (b.id, b.vm),
            (rec.ctx, rec.vm),
            "retired block names its context"
        );
        add(per_vm.entry(rec.vm).or_insert([0; MAX_EVENTS]), &b.counters);
        checked.retired += 1;
    }
    for (ctx, state, vm, _) in contexts(dev) {
        assert_eq!(state, ctx_state::ACTIVE, "context {ctx} still destroyed");
        let off = dev.read64(r::ctx(ctx, r::CTX_BLOCK)).expect("CTX_BLOCK");
        let b = block_at(dev, off);
        assert_eq!(
            b.counters,
            expected(&dev.ledger(ledger_scope::CONTEXT, ctx).expect("ledger")),
            "context {ctx}"
        );
        add(per_vm.entry(vm).or_insert([0; MAX_EVENTS]), &b.counters);
        checked.live += 1;
    }
    for vm in 1..MAX_VMS {
        if dev
            .read32(r::vm(vm, r::VM_PARTITION))
            .expect("VM_PARTITION")
            == 0
        {
            continue;
        }
        let want = expected(&dev.ledger(ledger_scope::VM, vm).expect("ledger"));
        let off = dev.read64(r::vm(vm, r::VM_BLOCK)).expect("VM_BLOCK");
        assert_eq!(block_at(dev, off).counters, want, "VM {vm} block");
        assert_eq!(
            per_vm.get(&vm).copied().unwrap_or([0; MAX_EVENTS]),
            want,
            "VM {vm}: retired + live contexts"
        );
        checked.vms += 1;
    }
    checked
}
