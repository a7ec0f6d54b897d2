//! Runtime-instrumentation control blocks through the device node, with
//! the real `gpupm-driver` process: a session programmed by register
//! writes stores report groups that read back from the memory window;
//! a malformed control block is EINVAL and changes nothing; a VM migrated
//! through `RI_MIGRATE` halts the session with `RI_HALT`; the RI debug
//! ledger (`GPUPM_IOC_LEDGER_RI`) answers only with `--debug-ledger`.

use std::fs::File;
use std::os::unix::fs::FileExt;

use gpupm_test_support::rawnode::ioctl;
use gpupm_test_support::rawnode::{
    advance, drain_records, errno, rd32, rd64, service, service_pending, wr32, Tally,
};
use gpupm_test_support::{Driver, DriverOptions};
use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::{RiLedgerQuery, GPUPM_IOC_LEDGER_RI, IOCTL_STRUCT_VERSION};
use gpupm_uapi::layout::{ri_record, RiBeginRecord, MEM_WINDOW_OFFSET};
use gpupm_uapi::regs as r;
use gpupm_uapi::ri::{self as ri, halt_reason, ri_ctrl, ri_mode, ri_status};
use zerocopy::{FromBytes, IntoBytes};

fn ledger_ri(card: &File, block: u32) -> std::io::Result<RiLedgerQuery> {
    let mut q = RiLedgerQuery {
        version: IOCTL_STRUCT_VERSION,
        block,
        ..RiLedgerQuery::default()
    };
    ioctl(card, GPUPM_IOC_LEDGER_RI, q.as_mut_bytes())?;
    Ok(q)
}

/// The RI scenario with switches left to the host (the harness runs
/// every handshake; the device's fallback never races it).
fn toml() -> String {
    gpupm_test_support::model::ri::scenario_toml(6, "gemm").replace(
        "switch_timeout_cycles = 3000",
        "switch_timeout_cycles = 10000000",
    )
}

fn run(card: &mut File, tally: &mut Tally, steps: u32) {
    for _ in 0..steps {
        advance(card, 10_000).unwrap();
        service(card, tally);
    }
}

/// Every RI register of block `i`.
fn block_regs(card: &File, i: u32) -> Vec<u32> {
    (0..ri::RI_STRIDE)
        .step_by(4)
        .map(|o| rd32(card, ri::ri(i, o)).unwrap_or(u32::MAX))
        .collect()
}

#[test]
fn sessions_store_groups_and_halt_on_migration_through_the_node() {
    let d = Driver::start_with(DriverOptions::toml(toml()));
    let mut card = d.card_nonblock();
    let mut irqs = d.card_nonblock();
    let ctrl = ri_ctrl::ENABLE
        | ri_mode::CYCLE << ri_ctrl::MODE_SHIFT
        | 1 << ri_ctrl::RGS_SHIFT
        | ri_ctrl::INTR_ENABLE
        | ri_ctrl::WRAP;
    for (reg, v) in [
        (ri::RI_CTX, 1),
        (ri::RI_SF, 1500),
        (ri::RI_ROA, 64),
        (ri::RI_RLA, 64 * 1024 - 1),
    ] {
        wr32(&card, ri::ri(7, reg), v).unwrap();
    }
    // The origin is not aligned to 64-byte groups at RGS 1: refused.
    let before = block_regs(&card, 7);
    wr32(&card, ri::ri(7, ri::RI_ROA), 32).unwrap();
    let e = wr32(&card, ri::ri(7, ri::RI_CTRL), ctrl).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    wr32(&card, ri::ri(7, ri::RI_ROA), 64).unwrap();
    assert_eq!(block_regs(&card, 7), before);
    wr32(&card, ri::ri(7, ri::RI_CTRL), ctrl).unwrap();
    let mut tally = Tally::default();
    service_pending(&card);
    run(&mut card, &mut tally, 40);
    let groups = rd64(&card, ri::ri(7, ri::RI_GROUPS)).unwrap();
    assert!(groups > 20, "only {groups} groups");
    let q = ledger_ri(&card, 7).unwrap();
    assert_eq!(
        (q.ctx, q.stored),
        (1, rd64(&card, ri::ri(7, ri::RI_GROUPS)).unwrap())
    );
    let mut group = [0u8; 64];
    card.read_exact_at(&mut group, MEM_WINDOW_OFFSET + ri::ri_span_offset(7) + 64)
        .unwrap();
    let begin = RiBeginRecord::read_from_bytes(&group[..16]).unwrap();
    assert_eq!(
        (begin.kind, begin.rgs, begin.version),
        (ri_record::BEGIN, 1, 1)
    );
    assert_eq!(group[48], ri_record::INSTRUCTION);

    // Migrate VM 1 to slot 3 (version 2) once it is not running.
    wr32(&card, ri::RI_MIGRATE_VM, 1).unwrap();
    let mut refused = 0;
    while let Err(e) = wr32(&card, ri::RI_MIGRATE, 3) {
        assert_eq!(errno(&e), libc::EINVAL);
        refused += 1;
        assert!(refused < 500, "VM 1 never stopped running");
        run(&mut card, &mut tally, 1);
    }
    assert_eq!(rd32(&card, r::vm(1, r::VM_PARTITION)).unwrap(), 3);
    assert_eq!(rd32(&card, ri::RI_MIGRATIONS).unwrap(), 1);
    let status = rd32(&card, ri::ri(7, ri::RI_STATUS)).unwrap();
    assert_ne!(status & ri_status::HALTED, 0);
    assert_eq!(
        rd32(&card, ri::ri(7, ri::RI_HALT_REASON)).unwrap(),
        halt_reason::VERSION
    );
    let halt: Vec<_> = drain_records(&mut irqs)
        .into_iter()
        .filter(|r| r.source == source::RI_HALT)
        .collect();
    assert_eq!(halt.len(), 1);
    assert_eq!(
        (halt[0].partition, halt[0].arg, halt[0].arg2),
        (3, 7, halt_reason::VERSION)
    );
    let groups = rd64(&card, ri::ri(7, ri::RI_GROUPS)).unwrap();
    run(&mut card, &mut tally, 40);
    assert_eq!(rd64(&card, ri::ri(7, ri::RI_GROUPS)).unwrap(), groups);
    assert!(
        ledger_ri(&card, 7).unwrap().not_stored > 0,
        "the context ran on slot 3"
    );
    // Output fields set on input, or a block out of range: EINVAL.
    let mut bad = RiLedgerQuery {
        version: IOCTL_STRUCT_VERSION,
        block: 7,
        stored: 1,
        ..RiLedgerQuery::default()
    };
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_LEDGER_RI, bad.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(
        errno(&ledger_ri(&card, ri::RI_BLOCKS).unwrap_err()),
        libc::EINVAL
    );
    d.stop();

    let d = Driver::start_with(DriverOptions::toml(toml()).without_ledger());
    let card = d.card();
    assert_eq!(errno(&ledger_ri(&card, 0).unwrap_err()), libc::ENOTTY);
    d.stop();
}
