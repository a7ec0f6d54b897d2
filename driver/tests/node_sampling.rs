//! The sampling units through the device node, with the real
//! `gpupm-driver` process: samplers armed by register writes, PC records
//! read from the memory window, the per-block debug ledger
//! (`GPUPM_IOC_LEDGER_BLOCKS`, only with `--debug-ledger`).

use std::fs::File;
use std::os::unix::fs::FileExt;

use gpupm_test_support::rawnode::ioctl;
use gpupm_test_support::rawnode::{
    advance, errno, rd32, rd64, service, service_pending, wr32, Tally,
};
use gpupm_test_support::{Driver, DriverOptions};
use gpupm_uapi::ioctl::{BlockLedgerQuery, GPUPM_IOC_LEDGER_BLOCKS, IOCTL_STRUCT_VERSION};
use gpupm_uapi::layout::MEM_WINDOW_OFFSET;
use gpupm_uapi::regs as r;
use gpupm_uapi::sampling::{self as s, buf_kind, samp, PcRecord, PcSlot, PC_RECORD_MAGIC};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// One slice running the built-in resonant program alone.
fn scenario() -> String {
    gpupm_test_support::scenario::one_slice_running("resonant")
}

fn blocks_query(card: &File, ctx: u32) -> std::io::Result<BlockLedgerQuery> {
    let mut q = BlockLedgerQuery::new_zeroed();
    q.version = IOCTL_STRUCT_VERSION;
    q.ctx = ctx;
    ioctl(card, GPUPM_IOC_LEDGER_BLOCKS, q.as_mut_bytes())?;
    Ok(q)
}

#[test]
fn pc_records_reach_the_window_and_the_block_ledger_answers_only_in_debug() {
    let d = Driver::start_with(DriverOptions::toml(scenario()));
    let mut card = d.card_nonblock();
    let pc = |reg| samp(1, s::buf(buf_kind::PC, reg));
    wr32(&card, pc(s::BUF_CAP), 256).unwrap();
    wr32(&card, samp(1, s::SAMP_CTRL), s::samp_ctrl::CYCLE_ENABLE).unwrap();
    // A bad write through the node is EINVAL and changes nothing.
    let e = wr32(&card, samp(1, s::SAMP_CYCLE_PERIOD), 1).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    assert_eq!(
        rd32(&card, samp(1, s::SAMP_CYCLE_PERIOD)).unwrap(),
        s::DEFAULT_CYCLE_PERIOD
    );
    let mut tally = Tally::default();
    service_pending(&card);
    for _ in 0..80 {
        advance(&card, 5_000).unwrap();
        service(&mut card, &mut tally);
    }
    let head = rd32(&card, pc(s::BUF_HEAD)).unwrap();
    assert!(head >= 50, "only {head} samples");
    let addr = rd64(&card, pc(s::BUF_ADDR)).unwrap();
    let mut buf = vec![0u8; usize::try_from(s::slot_size(buf_kind::PC)).unwrap()];
    card.read_exact_at(
        &mut buf,
        MEM_WINDOW_OFFSET + addr + s::slot_size(buf_kind::PC),
    )
    .unwrap();
    let rec = PcRecord::read_from_bytes(&PcSlot::read_from_bytes(&buf).unwrap().payload).unwrap();
    assert_eq!(
        (rec.magic, rec.ctx, rec.seq, rec.kernel),
        (PC_RECORD_MAGIC, 1, 2, 0)
    );
    assert_eq!(rd32(&card, r::ctx(1, r::CTX_PROGRAM)).unwrap(), 1);
    let q = blocks_query(&card, 1).unwrap();
    assert_eq!((q.total, q.count), (2, 2));
    assert_eq!(q.rows[0].cycles + q.rows[1].cycles, q.ctx_cycles);
    assert!(q.ctx_cycles > 300_000);
    // Output fields set on input, or no context, are malformed.
    let mut bad = BlockLedgerQuery::new_zeroed();
    (bad.version, bad.ctx, bad.count) = (IOCTL_STRUCT_VERSION, 1, 1);
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_LEDGER_BLOCKS, bad.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(errno(&blocks_query(&card, 0).unwrap_err()), libc::EINVAL);
    assert_eq!(errno(&blocks_query(&card, 7).unwrap_err()), libc::EINVAL);
    d.stop();

    let d = Driver::start_with(DriverOptions::toml(scenario()).without_ledger());
    let card = d.card();
    advance(&card, 10_000).unwrap();
    assert_eq!(errno(&blocks_query(&card, 1).unwrap_err()), libc::ENOTTY);
    d.stop();
}
