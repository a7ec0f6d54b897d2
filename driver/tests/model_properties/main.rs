//! Property tests of the device model against its ledger (≥ 1,000 generated
//! scenarios per run): exact conservation across the hierarchy, switches
//! (host-driven, partial, fallback), VM time-slicing, churn, masks,
//! thresholds, throttling; the out-of-band channel's blocks against the
//! same ledger whatever the host does, host resets included (`oob`); and
//! bit-for-bit agreement of the batched engine with the cycle-level
//! reference.

#![allow(clippy::cast_possible_truncation)] // 32-bit register values are read as u64

mod gen;
mod oob;

use gen::Op;
use gpupm_driver::host::Host;
use gpupm_driver::model::EngineKind;
use gpupm_test_support::model::*;
use gpupm_uapi::ioctl::ledger_scope;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_context_vm_and_system_block_equals_ledger_after_flush(s in gen::scenario(), ops in gen::ops()) {
        let mut dev = device(&s, EngineKind::Batched);
        let mut host = Host::new();
        host.release_destroyed = false;
        for op in &ops {
            gen::apply(&mut dev, &mut host, op);
        }
        settle_and_flush(&mut dev);
        assert_blocks_match_ledger(&mut dev, &s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_ccu_counter_wraps_whatever_period_is_programmed(
        s in gen::scenario(),
        period in prop_oneof![Just(0u32), 1u32 << 30..u32::MAX],
        span in (1u64 << 28)..(1u64 << 30),
    ) {
        let mut s = s;
        s.trigger.period_cycles = period;
        s.trigger.threshold = gpupm_uapi::regs::TRIG_THRESHOLD_MAX;
        for p in &mut s.partitions {
            p.ctx_timeslice_cycles = 0;
            p.vm_timeslice_cycles = 0;
        }
        s.churn.clear();
        let mut dev = device(&s, EngineKind::Batched);
        let mut host = Host::new();
        dev.advance(1_000).unwrap();
        host.service(&mut dev).unwrap();
        dev.advance(span).unwrap();
        host.service(&mut dev).unwrap();
        prop_assert_eq!(dev.self_check_failures(), (0, 0));
        settle_and_flush(&mut dev);
        assert_blocks_match_ledger(&mut dev, &s);
    }
}

fn short_ops() -> impl Strategy<Value = Vec<Op>> {
    gen::ops().prop_map(|ops| {
        ops.into_iter()
            .take(16)
            .map(|op| match op {
                Op::Advance(n) => Op::Advance(n % 6_000 + 1),
                Op::PartialHandshake { which, steps, wait } => Op::PartialHandshake {
                    which,
                    steps,
                    wait: wait % 3_000,
                },
                other => other,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn batched_engine_agrees_bit_for_bit_with_cycle_level_reference(s in gen::scenario(), ops in short_ops()) {
        let mut fast = device(&s, EngineKind::Batched);
        let mut slow = device(&s, EngineKind::CycleLevel);
        let (mut h1, mut h2) = (Host::new(), Host::new());
        for op in &ops {
            gen::apply(&mut fast, &mut h1, op);
            gen::apply(&mut slow, &mut h2, op);
            prop_assert_eq!(fast.counting_snapshot(), slow.counting_snapshot(), "after {:?}", op);
        }
        prop_assert_eq!(digest(&fast), digest(&slow));
        prop_assert_eq!(
            fast.ledger_totals(ledger_scope::SYSTEM, 0).unwrap(),
            slow.ledger_totals(ledger_scope::SYSTEM, 0).unwrap()
        );
        prop_assert_eq!(slow.self_check_failures(), (0, 0));
    }
}
