//! Halts of runtime-instrumentation sessions: a VM migrated to a
//! partition of another capability version, or whose maximum RGS is below
//! the session's, halts the session (reason in `RI_HALT_REASON`, one
//! `RI_HALT`), and only then; a halted session stores nothing more.

#![allow(clippy::cast_possible_truncation)]

use gpupm_driver::host::Host;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::parse;
use gpupm_test_support::model::ri::*;
use gpupm_test_support::model::{assert_blocks_match_ledger, device, digest, settle_and_flush};
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::layout::{ri_group_flags, RiBeginRecord};
use gpupm_uapi::regs as r;
use gpupm_uapi::ri::{self as ri, halt_reason, ri_ctrl, ri_status};
use proptest::prelude::*;
use zerocopy::FromBytes;

/// Migrates VM `vm` to slot `to` at the first moment it is not running.
fn migrate_when_idle(dev: &mut Device, host: &mut Host, vm: u32, to: u32) {
    dev.write_reg(ri::RI_MIGRATE_VM, 4, u64::from(vm)).unwrap();
    for _ in 0..1000 {
        if dev.write_reg(ri::RI_MIGRATE, 4, u64::from(to)).is_ok() {
            return;
        }
        run(dev, host, 5_000, 5_000);
    }
    panic!("VM {vm} never stopped running");
}

fn halts(dev: &Device) -> Vec<InterruptRecord> {
    let mut out = Vec::new();
    dev.interrupts_since(0, &mut out);
    out.retain(|r| r.source == source::RI_HALT);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Slot 2 allows RGS ≤ 2, slot 3 has version 2, slot 4 matches slot 1.
    #[test]
    fn sessions_halt_exactly_on_version_change_or_rgs_over_limit(
        seed in 0u64..500,
        rgs in 0u32..=7,
        to in 2u32..=4,
        program in prop_oneof![Just("gemm"), Just("reduce")],
    ) {
        let mut dev = Device::new(&scenario(seed, program), EngineKind::Batched, true).unwrap();
        let mut host = Host::new();
        let cb = Cb {
            rgs,
            bits: ri_ctrl::INTR_ENABLE | ri_ctrl::WRAP,
            rla: 64 * 4096 - 1,
            ..Cb::cycles(1, 2000, 1)
        };
        arm(&mut dev, 5, cb).unwrap();
        run(&mut dev, &mut host, 300_000, 10_000);
        let migrations = dev.read_reg(ri::RI_MIGRATIONS, 4).unwrap();
        migrate_when_idle(&mut dev, &mut host, 1, to);
        prop_assert_eq!(dev.read_reg(ri::RI_MIGRATIONS, 4).unwrap(), migrations + 1);
        prop_assert_eq!(dev.read_reg(r::vm(1, r::VM_PARTITION), 4).unwrap(), u64::from(to));
        let want = match to {
            3 => halt_reason::VERSION,
            2 if rgs > 2 => halt_reason::RGS_LIMIT,
            _ => halt_reason::NONE,
        };
        prop_assert_eq!(reg(&dev, 5, ri::RI_HALT_REASON) as u32, want);
        let halted = reg(&dev, 5, ri::RI_STATUS) as u32 & ri_status::HALTED != 0;
        prop_assert_eq!(halted, want != halt_reason::NONE);
        let irqs = halts(&dev);
        prop_assert_eq!(irqs.len(), usize::from(halted));
        if let Some(irq) = irqs.first() {
            prop_assert_eq!((irq.partition, irq.arg, irq.arg2), (to, 5, want));
        }
        let stored = dev.ledger_ri(5).unwrap().stored;
        let ctx_cycles = dev.ledger_blocks(1, 0).unwrap().ctx_cycles;
        run(&mut dev, &mut host, 600_000, 10_000);
        let after = dev.ledger_ri(5).unwrap();
        // The context runs on its new slice.
        prop_assert!(dev.ledger_blocks(1, 0).unwrap().ctx_cycles > ctx_cycles);
        if halted {
            prop_assert_eq!(after.stored, stored);
            prop_assert!(after.not_stored > 0);
            let begin = RiBeginRecord::read_from_bytes(&span(&dev, 5, cb.rla)[..16]).unwrap();
            prop_assert!(stored == 0 || begin.flags & ri_group_flags::HALTED != 0);
        } else {
            prop_assert!(after.stored > stored);
            prop_assert_eq!(after.not_stored, 0);
        }
    }
}

/// Migration is refused while the VM runs or is about to, to its own
/// slot, to an unconfigured slot, or for a VM that does not exist — and
/// a refusal changes nothing.
#[test]
fn bad_migrations_are_refused_and_change_nothing() {
    let mut dev = Device::new(&scenario(2, "gemm"), EngineKind::Batched, true).unwrap();
    let mut host = Host::new();
    run(&mut dev, &mut host, 50_000, 10_000);
    assert!(
        dev.write_reg(ri::RI_MIGRATE_VM, 4, 9).is_err(),
        "VM 9 does not exist"
    );
    assert!(dev.write_reg(ri::RI_MIGRATE_VM, 4, 0).is_err());
    let vm_running = dev.read_reg(r::part(1, r::PART_CUR_VM), 4).unwrap();
    dev.write_reg(ri::RI_MIGRATE_VM, 4, vm_running).unwrap();
    for to in [1, 5, 0, 15] {
        assert!(dev.write_reg(ri::RI_MIGRATE, 4, to).is_err(), "to {to}");
    }
    assert!(
        dev.write_reg(ri::RI_MIGRATE, 4, 4).is_err(),
        "the running VM {vm_running}"
    );
    assert_eq!(dev.read_reg(ri::RI_MIGRATIONS, 4).unwrap(), 0);
    assert_eq!(
        dev.read_reg(r::vm(vm_running as u32, r::VM_PARTITION), 4)
            .unwrap(),
        1
    );
}

/// Re-enabling a halted block starts a fresh session on the new slice.
#[test]
fn re_enabling_clears_the_halt() {
    let mut dev = Device::new(&scenario(4, "gemm"), EngineKind::Batched, true).unwrap();
    let mut host = Host::new();
    let cb = Cb {
        bits: ri_ctrl::INTR_ENABLE,
        ..Cb::cycles(1, 2000, 256)
    };
    arm(&mut dev, 0, cb).unwrap();
    migrate_when_idle(&mut dev, &mut host, 1, 3);
    assert_eq!(
        reg(&dev, 0, ri::RI_HALT_REASON),
        u64::from(halt_reason::VERSION)
    );
    dev.write_reg(
        ri::ri(0, ri::RI_CTRL),
        4,
        u64::from(cb.ctrl() & !ri_ctrl::ENABLE),
    )
    .unwrap();
    dev.write_reg(ri::ri(0, ri::RI_CTRL), 4, u64::from(cb.ctrl()))
        .unwrap();
    assert_eq!(reg(&dev, 0, ri::RI_STATUS), u64::from(ri_status::ENABLED));
    run(&mut dev, &mut host, 600_000, 10_000);
    let begin = RiBeginRecord::read_from_bytes(&span(&dev, 0, cb.rla)[..16]).unwrap();
    assert_eq!(begin.version, 2, "the new session began on version 2");
    assert!(reg(&dev, 0, ri::RI_GROUPS) > 0);
}

/// A `[[migrate]]` entry moves VM 1 from slot 1 to slot `to` the way the
/// register path does: at its cycle when VM 1 is neither current nor
/// incoming on slot 1, else at a later scheduling point of slot 1.
/// Once (`RI_MIGRATIONS`), in both engines alike (everything host-visible
/// equal), the contexts run on the new slice, and every block still
/// equals the ledger.
#[test]
fn scenario_migrations_move_the_vm_exactly_in_both_engines() {
    let mut retried = 0;
    for (at, to) in [(250_000u64, 2u32), (410_000, 4), (520_000, 3), (777_000, 4)] {
        let text = format!(
            "{}[[migrate]]\nat_cycles = {at}\nvm = 1\nto = {to}\n",
            scenario_toml(at, "gemm")
        );
        let s = parse("migrate", &text).expect("the scenario parses");
        let mut digests = Vec::new();
        for engine in [EngineKind::Batched, EngineKind::CycleLevel] {
            let mut dev = device(&s, engine);
            let mut host = Host::new();
            let start = dev.now();
            run(&mut dev, &mut host, at - 1 - start, 10_000);
            assert_eq!(dev.now(), at - 1);
            let on_slot1 = |dev: &Device| {
                [r::PART_CUR_VM, r::PART_NEXT_VM]
                    .iter()
                    .any(|&reg| dev.read_reg(r::part(1, reg), 4).unwrap() == 1)
            };
            assert_eq!(dev.read_reg(r::vm(1, r::VM_PARTITION), 4).unwrap(), 1);
            // Through the due cycle (the host's handshakes may carry the
            // clock a little further), then in small steps until the VM has
            // moved: a move after that first step needs slot 1 to have been
            // running VM 1 or bringing it in meanwhile (a refusal, then a
            // retry at slot 1's next scheduling point).
            run(&mut dev, &mut host, 1, 1);
            let (mut saw_busy, mut late) = (false, false);
            while dev.read_reg(r::vm(1, r::VM_PARTITION), 4).unwrap() == 1 {
                assert!(dev.now() < at + 2_000_000, "VM 1 never migrated");
                saw_busy |= on_slot1(&dev);
                late = true;
                run(&mut dev, &mut host, 500, 500);
            }
            assert!(!late || saw_busy, "due at {at}, moved by {}", dev.now());
            retried += u32::from(late);
            assert_eq!(
                dev.read_reg(r::vm(1, r::VM_PARTITION), 4).unwrap(),
                u64::from(to)
            );
            assert_eq!(dev.read_reg(ri::RI_MIGRATIONS, 4).unwrap(), 1);
            let ctx_cycles = dev.ledger_blocks(1, 0).unwrap().ctx_cycles;
            run(&mut dev, &mut host, 400_000, 10_000);
            assert!(
                dev.ledger_blocks(1, 0).unwrap().ctx_cycles > ctx_cycles,
                "VM 1's context runs on slot {to}"
            );
            assert_eq!(dev.read_reg(ri::RI_MIGRATIONS, 4).unwrap(), 1);
            settle_and_flush(&mut dev);
            assert_blocks_match_ledger(&mut dev, &s);
            digests.push(digest(&dev));
        }
        assert!(digests[0] == digests[1], "engines differ (due at {at})");
    }
    // The retry path ran at least once (VM 1 was busy at its due cycle).
    assert!(retried > 0, "no case exercised the retry");
}
