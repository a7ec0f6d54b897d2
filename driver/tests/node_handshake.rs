//! The context-switch handshake driven purely through the node (two
//! `GPUPM_IOC_REG_BATCH` calls per switch, interrupt records read with
//! `read()`), over many host-driven switches, then exact conservation:
//! every context, VM and system block read from the memory window equals
//! the ledger read with `GPUPM_IOC_LEDGER`. And the device's own fallback
//! when nobody services the switches.

use gpupm_test_support::rawnode::{
    advance, assert_conserved, digest, drain_records, flush_all, handshake, partitions, service,
    service_pending, Tally,
};
use gpupm_test_support::rawnode::{errno, rd32, rd64, wr32};
use gpupm_test_support::scenario::{self, SWITCHING_TIMEOUT};
use gpupm_test_support::{Driver, DriverOptions};
use gpupm_uapi::regs::{self, device_status, mbox_op, part_status};

const VMS: [u32; 5] = [1, 2, 3, 4, 5];
/// Context ids scanned for the conservation check (the scenario creates
/// fewer than 60 contexts and none is released).
const MAX_CTX: u32 = 128;

fn sum_part(card: &std::fs::File, reg: u64) -> u64 {
    partitions(card)
        .iter()
        .map(|&p| rd64(card, regs::part(p, reg)).unwrap())
        .sum()
}

#[test]
fn every_block_equals_the_ledger_after_1000_switches_handshaked_through_the_node() {
    let d = Driver::start_with(DriverOptions::toml(scenario::switching()));
    let mut card = d.card_nonblock();
    assert_eq!(partitions(&card), [1, 2, 3]);
    let mut tally = Tally::default();
    // Switches requested at cycle 0, before this handle existed.
    tally.handshakes += service_pending(&card);
    assert!(tally.handshakes > 0, "cycle 0 asks for the first contexts");

    // A handshake with no switch pending is refused and changes nothing.
    let before = digest(&card);
    assert_eq!(errno(&handshake(&card, 1).unwrap_err()), libc::EINVAL);
    assert!(
        digest(&card) == before,
        "a refused handshake changed the device"
    );

    // Service after every step shorter than the switch timeout: the host
    // always answers before the device's fallback would.
    let step = SWITCHING_TIMEOUT / 5;
    let mut vm_switches = 0;
    let mut last_vm = [0u32; 16];
    while tally.handshakes < 1_000 {
        let now = advance(&card, step).unwrap();
        assert!(now < 20_000_000, "too few switches: {tally:?}");
        service(&mut card, &mut tally);
        for p in partitions(&card) {
            let vm = rd32(&card, regs::part(p, regs::PART_CUR_VM)).unwrap();
            if last_vm[p as usize] != 0 && vm != last_vm[p as usize] {
                vm_switches += 1;
            }
            last_vm[p as usize] = vm;
        }
    }
    let switches = sum_part(&card, regs::PART_SWITCHES);
    assert_eq!(
        sum_part(&card, regs::PART_FALLBACKS),
        0,
        "prompt service needs no fallback"
    );
    assert_eq!(tally.fallbacks, 0);
    assert_eq!(
        switches, tally.handshakes,
        "every switch was handshaked through the node"
    );
    assert!(
        vm_switches >= 20,
        "VMs were time-sliced ({vm_switches} VM switches)"
    );
    assert!(
        !tally.destroyed.is_empty(),
        "churn destroyed contexts: {tally:?}"
    );
    assert_eq!(
        rd32(&card, regs::DEVICE_STATUS).unwrap() & device_status::FALLBACK_SEEN,
        0
    );

    flush_all(&card);
    let c = assert_conserved(&card, &VMS, MAX_CTX, scenario::key_of);
    assert!(c.contexts >= 11 + tally.destroyed.len(), "{c:?}");
    assert!(tally.created.len() >= tally.destroyed.len());
    assert!(c.system_total > 0);
    d.stop();
}

#[test]
fn unserviced_switches_complete_by_fallback_and_counts_stay_exact() {
    let d = Driver::start_with(DriverOptions::toml(scenario::switching()));
    let mut card = d.card_nonblock();
    let mut tally = Tally::default();
    for _ in 0..10 {
        advance(&card, 100_000).unwrap();
        tally.note(&drain_records(&mut card));
    }
    let fallbacks = sum_part(&card, regs::PART_FALLBACKS);
    assert!(fallbacks > 20, "{fallbacks} fallbacks");
    assert_eq!(
        tally.fallbacks, fallbacks,
        "one SWITCH_FALLBACK record per fallback"
    );
    assert_eq!(
        sum_part(&card, regs::PART_SWITCHES),
        fallbacks,
        "no switch was host-driven"
    );
    assert_ne!(
        rd32(&card, regs::DEVICE_STATUS).unwrap() & device_status::FALLBACK_SEEN,
        0
    );
    for p in partitions(&card) {
        let status = rd32(&card, regs::part(p, regs::PART_STATUS)).unwrap();
        assert_ne!(status & part_status::LAST_FALLBACK, 0, "partition {p}");
    }
    wr32(&card, regs::MBOX_CMD, mbox_op::READ_FALLBACKS).unwrap();
    assert_eq!(
        rd64(&card, regs::MBOX_DATA).unwrap(),
        fallbacks,
        "the BMC sees them too"
    );

    // Switches may be in flight; counts are exact all the same.
    flush_all(&card);
    let c = assert_conserved(&card, &VMS, MAX_CTX, scenario::key_of);
    assert!(c.contexts >= 11 && c.system_total > 0, "{c:?}");
    d.stop();
}
