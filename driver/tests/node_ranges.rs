//! Marked ranges through the device node, with the real `gpupm-driver`
//! process: ranges armed by register writes, a bad programming refused
//! with EINVAL and nothing changed, threshold records read from the
//! memory window, the range and call-graph debug ledgers
//! (`GPUPM_IOC_LEDGER_RANGES`, `GPUPM_IOC_LEDGER_CALLS`, only with
//! `--debug-ledger`).

use std::fs::File;
use std::os::unix::fs::FileExt;

use gpupm_test_support::rawnode::ioctl;
use gpupm_test_support::rawnode::{
    advance, errno, rd32, rd64, service, service_pending, wr32, Tally,
};
use gpupm_test_support::{Driver, DriverOptions};
use gpupm_uapi::ioctl::{GPUPM_IOC_LEDGER_CALLS, GPUPM_IOC_LEDGER_RANGES, IOCTL_STRUCT_VERSION};
use gpupm_uapi::layout::MEM_WINDOW_OFFSET;
use gpupm_uapi::ranges::{
    self as rg, code_item, range_ctrl, range_event, range_reg, rring, CallLedgerQuery,
    RangeLedgerQuery, RangeRecord, RangeSlot, RANGE_RECORD_MAGIC,
};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// One slice running the built-in GEMM (its epilogue calls `store`) alone.
fn scenario() -> String {
    gpupm_test_support::scenario::one_slice_running("gemm")
}

fn ranges_query(card: &File, ctx: u32, p: u32) -> std::io::Result<RangeLedgerQuery> {
    let mut q = RangeLedgerQuery::new_zeroed();
    (q.version, q.ctx, q.partition) = (IOCTL_STRUCT_VERSION, ctx, p);
    ioctl(card, GPUPM_IOC_LEDGER_RANGES, q.as_mut_bytes())?;
    Ok(q)
}

fn calls_query(card: &File, ctx: u32) -> std::io::Result<CallLedgerQuery> {
    let mut q = CallLedgerQuery::new_zeroed();
    (q.version, q.ctx) = (IOCTL_STRUCT_VERSION, ctx);
    ioctl(card, GPUPM_IOC_LEDGER_CALLS, q.as_mut_bytes())?;
    Ok(q)
}

#[test]
fn ranges_count_through_the_node_and_the_ledgers_answer_only_in_debug() {
    let d = Driver::start_with(DriverOptions::toml(scenario()));
    let mut card = d.card_nonblock();
    // Range 0: the `store` kernel (called from main's epilogue), cycles,
    // a record every 2,000 cycles inside it.
    wr32(&card, rring(1, rg::RRING_CAP), 256).unwrap();
    wr32(&card, range_reg(1, 0, rg::RANGE_START), code_item(1, 0)).unwrap();
    wr32(&card, range_reg(1, 0, rg::RANGE_END), code_item(1, 0)).unwrap();
    wr32(&card, range_reg(1, 0, rg::RANGE_THRESHOLD), 2_000).unwrap();
    let ctrl = range_ctrl::ENABLE
        | range_event::CYCLES << range_ctrl::EVENT_SHIFT
        | range_ctrl::COUNT_IRQ
        | 1 << range_ctrl::PROGRAM_SHIFT;
    // A bad programming through the node is EINVAL and changes nothing.
    wr32(&card, range_reg(1, 1, rg::RANGE_START), code_item(0, 3)).unwrap();
    wr32(&card, range_reg(1, 1, rg::RANGE_END), code_item(0, 2)).unwrap();
    let e = wr32(&card, range_reg(1, 1, rg::RANGE_CTRL), ctrl).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    assert_eq!(rd32(&card, range_reg(1, 1, rg::RANGE_CTRL)).unwrap(), 0);
    wr32(&card, range_reg(1, 0, rg::RANGE_CTRL), ctrl).unwrap();
    let mut tally = Tally::default();
    service_pending(&card);
    for _ in 0..80 {
        advance(&card, 25_000).unwrap();
        service(&mut card, &mut tally);
    }
    let count = rd64(&card, range_reg(1, 0, rg::RANGE_COUNT)).unwrap();
    let entries = rd64(&card, range_reg(1, 0, rg::RANGE_ENTRIES)).unwrap();
    let head = rd32(&card, rring(1, rg::RRING_HEAD)).unwrap();
    assert!(
        entries > 10 && count >= 2_000,
        "{entries} entries, {count} cycles"
    );
    assert_eq!(u64::from(head), count / 2_000, "one record per crossing");
    let q = ranges_query(&card, 1, 1).unwrap();
    assert_eq!((q.rows[0].entries, q.rows[0].count), (entries, count));
    assert_eq!(q.rows[0].crossings, u64::from(head));
    assert_eq!(q.rows[0].ctrl, ctrl);
    let calls = calls_query(&card, 1).unwrap();
    assert_eq!((calls.total, calls.count), (1, 1));
    let edge = calls.rows[0];
    assert_eq!((edge.kernel, edge.call_block, edge.callee), (0, 4, 1));
    assert!(edge.calls >= entries && edge.calls <= entries + 1);
    let mut buf = vec![0u8; core::mem::size_of::<RangeSlot>()];
    card.read_exact_at(&mut buf, MEM_WINDOW_OFFSET + rg::range_span_offset(1))
        .unwrap();
    let rec =
        RangeRecord::read_from_bytes(&RangeSlot::read_from_bytes(&buf).unwrap().payload).unwrap();
    assert_eq!(
        (rec.magic, rec.ctx, rec.seq, rec.kernel, rec.depth, rec.value),
        (RANGE_RECORD_MAGIC, 1, 1, 1, 1, 2_000)
    );
    assert_eq!(
        (
            rec.stack[0].kernel,
            rec.stack[0].call_block,
            rec.stack[0].callee
        ),
        (0, 4, 1)
    );
    // Malformed queries: output fields set, no context, partition 0.
    let mut bad = RangeLedgerQuery::new_zeroed();
    (bad.version, bad.ctx, bad.partition, bad.rows[0].count) = (IOCTL_STRUCT_VERSION, 1, 1, 1);
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_LEDGER_RANGES, bad.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(errno(&ranges_query(&card, 0, 1).unwrap_err()), libc::EINVAL);
    assert_eq!(errno(&ranges_query(&card, 1, 0).unwrap_err()), libc::EINVAL);
    assert_eq!(errno(&ranges_query(&card, 7, 1).unwrap_err()), libc::EINVAL);
    assert_eq!(errno(&calls_query(&card, 0).unwrap_err()), libc::EINVAL);
    d.stop();

    let d = Driver::start_with(DriverOptions::toml(scenario()).without_ledger());
    let card = d.card();
    advance(&card, 10_000).unwrap();
    assert_eq!(errno(&ranges_query(&card, 1, 1).unwrap_err()), libc::ENOTTY);
    assert_eq!(errno(&calls_query(&card, 1).unwrap_err()), libc::ENOTTY);
    d.stop();
}
