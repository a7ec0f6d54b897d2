//! The out-of-band channel against the ledger (`docs/oob.md`): whatever a
//! host does — switches serviced, half done or left to the fallback,
//! triggers, masks, thresholds and periods programmed, device resets —
//! every OOB block, read through the OOB mailbox as a BMC reads it, equals
//! its scope's ledger (masked counts included) plus what the scope held
//! before each reset, at every OOB flush.

use gpupm_driver::host::Host;
use gpupm_driver::model::EngineKind;
use gpupm_test_support::model::device;
use gpupm_test_support::model::oob::{assert_oob_matches_ledger, OobOracle};
use proptest::prelude::*;

use crate::gen::{self, Op};

/// A host operation, a device reset, or a check at an OOB flush.
#[derive(Clone, Debug)]
enum Step {
    Host(Op),
    Reset,
    Check,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        12 => gen::op().prop_map(Step::Host),
        1 => Just(Step::Reset),
        2 => Just(Step::Check),
    ];
    prop::collection::vec(step, 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_oob_block_equals_the_ledger_at_every_oob_flush_whatever_the_host_does(
        s in gen::scenario(),
        steps in steps(),
    ) {
        let mut dev = device(&s, EngineKind::Batched);
        let mut host = Host::new();
        host.release_destroyed = false;
        let mut oracle = OobOracle::default();
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Host(op) => gen::apply(&mut dev, &mut host, op),
                Step::Reset => {
                    oracle = oracle.now(&mut dev, &s);
                    dev.reset().unwrap();
                }
                Step::Check => {
                    assert_oob_matches_ledger(&mut dev, &s, &oracle, &format!("step {i}"));
                }
            }
        }
        assert_oob_matches_ledger(&mut dev, &s, &oracle, "at the end");
    }
}
