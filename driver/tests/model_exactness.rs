//! Exactness of the device model against its ledger in fixed scenarios:
//! host-driven switches, fallback switches, confidential VMs, masks,
//! throttling, stream rings, resets.

#![allow(clippy::cast_possible_truncation)] // 32-bit register values are read as u64

use gpupm_driver::host::{self, Host};
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::Scenario;
use gpupm_test_support::model::*;
use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::{self, StreamRecord, StreamSlot, SYSTEM_BLOCK_SLOT};
use gpupm_uapi::regs::{self as r, hs_state, part_ctrl};
use zerocopy::FromBytes;

fn run_serviced(dev: &mut Device, host: &mut Host, total: u64, step: u64) -> u64 {
    let mut handshakes = 0;
    let end = dev.now() + total;
    while dev.now() < end {
        dev.advance(step.min(end - dev.now())).unwrap();
        handshakes += host.service(dev).unwrap().handshakes;
    }
    handshakes
}

/// The small scenario on the batched engine after `total` cycles in
/// `step`s, the host servicing every interrupt.
fn serviced(total: u64, step: u64) -> (Scenario, Device, Host) {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    run_serviced(&mut dev, &mut host, total, step);
    (s, dev, host)
}

#[test]
fn every_block_equals_ledger_after_host_driven_switches_and_flush() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    let handshakes = run_serviced(&mut dev, &mut host, 3_000_000, 2_000);
    assert!(handshakes > 50, "only {handshakes} switches happened");
    let fallbacks: u64 = (1..3)
        .map(|p| dev.read_reg(r::part(p, r::PART_FALLBACKS), 8).unwrap())
        .sum();
    assert_eq!(fallbacks, 0, "the host serviced every request in time");
    host::flush_all(&mut dev).unwrap();
    assert_blocks_match_ledger(&mut dev, &s);
    let system = dev.ledger_totals(ledger_scope::SYSTEM, 0).unwrap();
    assert!(sum(&system.generated) > 1_000_000);
}

#[test]
fn switches_the_host_ignores_complete_by_fallback_with_exact_counts() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut records = Vec::new();
    dev.advance(2_000_000).unwrap();
    dev.interrupts_since(0, &mut records);
    let fallbacks: u64 = (1..3)
        .map(|p| dev.read_reg(r::part(p, r::PART_FALLBACKS), 8).unwrap())
        .sum();
    let fallback_irqs = records
        .iter()
        .filter(|r| r.source == source::SWITCH_FALLBACK)
        .count() as u64;
    assert!(fallbacks > 10);
    assert_eq!(fallbacks, fallback_irqs);
    assert_ne!(
        dev.read_reg(r::DEVICE_STATUS, 4).unwrap() as u32 & r::device_status::FALLBACK_SEEN,
        0
    );
    // Settle any switch still pending, then flush.
    dev.advance(u64::from(s.switch_timeout_cycles) + 1).unwrap();
    let busy = (1..3).any(|p| {
        dev.read_reg(r::part(p, r::PART_STATUS), 4).unwrap() as u32 & 0xF != hs_state::IDLE
    });
    if !busy {
        host::flush_all(&mut dev).unwrap();
        assert_blocks_match_ledger(&mut dev, &s);
    }
}

#[test]
fn nothing_is_counted_while_a_switch_window_is_open() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut records = Vec::new();
    let mut cursor = 0;
    // Find a switch request on partition 1 with a context running.
    let req = loop {
        dev.advance(1_000).unwrap();
        records.clear();
        cursor = dev.interrupts_since(cursor, &mut records);
        let running = dev.read_reg(r::part(1, r::PART_CUR_CTX), 4).unwrap() != 0;
        if let Some(rec) = records
            .iter()
            .find(|r| r.source == source::SWITCH_REQUESTED && r.partition == 1)
        {
            if running {
                break *rec;
            }
        }
        for rec in records
            .iter()
            .filter(|r| r.source == source::SWITCH_REQUESTED)
        {
            host::handshake(&mut dev, rec.partition).unwrap();
        }
    };
    let outgoing = dev.read_reg(r::part(1, r::PART_CUR_CTX), 4).unwrap() as u32;
    assert_ne!(outgoing, 0);
    dev.write_reg(r::part(1, r::PART_CTRL), 4, u64::from(part_ctrl::CTX_PAUSE))
        .unwrap();
    let before = dev.ledger_totals(ledger_scope::CONTEXT, outgoing).unwrap();
    dev.advance(10_000).unwrap();
    let after = dev.ledger_totals(ledger_scope::CONTEXT, outgoing).unwrap();
    assert_eq!(
        before.generated, after.generated,
        "a paused context generated events"
    );
    assert_eq!(req.partition, 1);
    // Finish the switch by hand and check exactness.
    host::handshake(&mut dev, 1).unwrap();
    let status = dev.read_reg(r::part(1, r::PART_STATUS), 4).unwrap() as u32;
    assert_eq!(
        status & 0xF,
        hs_state::CTX_PAUSED,
        "handshake() only starts from REQUESTED"
    );
    dev.advance(u64::from(s.switch_timeout_cycles)).unwrap();
    host::flush_all(&mut dev).unwrap();
    assert_blocks_match_ledger(&mut dev, &s);
}

#[test]
fn confidential_vm_blocks_leave_the_device_only_as_ciphertext() {
    let (s, mut dev, _) = serviced(500_000, 5_000);
    host::flush_all(&mut dev).unwrap();
    let key = s.vms[2].confidential_key.unwrap();
    let mut raw = vec![0u8; layout::BLOCK_SLOT_SIZE as usize];
    dev.read_window(layout::block_slot_offset(3), &mut raw)
        .unwrap();
    let slot = layout::BlockSlot::read_from_bytes(&raw).unwrap();
    assert_ne!(slot.envelope.flags & layout::envelope_flags::ENCRYPTED, 0);
    let plain = dev.block(3);
    assert!(plain.counters.iter().any(|&c| c > 0));
    let plain_bytes = zerocopy::IntoBytes::as_bytes(plain);
    assert!(!raw.windows(16).any(|w| plain_bytes
        .windows(16)
        .any(|p| p == w && p.iter().any(|&b| b != 0))));
    assert_eq!(&host_block(&dev, 3, Some(&key)), plain);
    let mut wrong = slot;
    assert!(gpupm_driver::model::cc::open(
        &[0; 32],
        &wrong.envelope,
        &mut wrong.payload,
        &wrong.tag
    )
    .is_err());
    // Non-confidential VM blocks are plaintext.
    assert_eq!(&host_block(&dev, 1, None), dev.block(1));
}

#[test]
fn masked_counters_never_add() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    // Mask every counter of every CCU.
    let ccus = dev.read_reg(r::TOPO_CCUS, 4).unwrap() as u32;
    for c in 0..ccus {
        let n = dev.read_reg(r::ccu(c, r::CCU_COUNTERS), 4).unwrap() as u32;
        for w in 0..n.div_ceil(32) {
            dev.write_reg(r::ccu(c, r::CCU_MASK_INDEX), 4, u64::from(w))
                .unwrap();
            let bits = if (w + 1) * 32 <= n {
                u32::MAX
            } else {
                (1 << (n - w * 32)) - 1
            };
            dev.write_reg(r::ccu(c, r::CCU_MASK_DATA), 4, u64::from(bits))
                .unwrap();
            assert_eq!(
                dev.read_reg(r::ccu(c, r::CCU_MASK_DATA), 4).unwrap(),
                u64::from(bits)
            );
        }
    }
    let mut host = Host::new();
    run_serviced(&mut dev, &mut host, 400_000, 4_000);
    host::flush_all(&mut dev).unwrap();
    assert!(dev
        .block(SYSTEM_BLOCK_SLOT)
        .counters
        .iter()
        .all(|&c| c == 0));
    let sys = dev.ledger_totals(ledger_scope::SYSTEM, 0).unwrap();
    assert!(sum(&sys.generated) > 0 && sum(&sys.masked) > 0);
    assert_blocks_match_ledger(&mut dev, &s);
}

#[test]
fn stream_records_sum_to_the_blocks_and_overflow_is_counted_not_hidden() {
    let mut s = small_scenario();
    s.stream.ring_records = 16;
    s.stream.watermark = 16;
    let mut dev = device(&s, EngineKind::Batched);
    // Service switches but never drain: the rings overflow.
    let mut host = Host::new();
    let end = 1_500_000;
    let mut records = Vec::new();
    let mut cursor = 0;
    while dev.now() < end {
        dev.advance(3_000).unwrap();
        records.clear();
        cursor = dev.interrupts_since(cursor, &mut records);
        for rec in records
            .iter()
            .filter(|r| r.source == source::SWITCH_REQUESTED)
        {
            host::handshake(&mut dev, rec.partition).unwrap();
        }
    }
    let _ = &mut host;
    let lost = dev.read_reg(r::part(1, r::PART_STREAM_LOST), 8).unwrap();
    let seq = dev.read_reg(r::part(1, r::PART_COMMIT_SEQ), 8).unwrap();
    assert!(lost > 0 && seq > lost);
    // The ring holds the first 16 records; their seqs are 1..=16 and a
    // reader sees the gap to the commit sequence.
    let mut buf = vec![0u8; 16 * layout::STREAM_SLOT_SIZE as usize];
    dev.read_window(layout::stream_slot_offset(1, 0), &mut buf)
        .unwrap();
    let seqs: Vec<u64> = buf
        .chunks(layout::STREAM_SLOT_SIZE as usize)
        .map(|c| {
            StreamRecord::read_from_bytes(&StreamSlot::read_from_bytes(c).unwrap().payload)
                .unwrap()
                .seq
        })
        .collect();
    assert_eq!(seqs, (1..=16).collect::<Vec<u64>>());
    assert_eq!(seq - 16, lost);
}

#[test]
fn drained_stream_deltas_add_up_to_each_context_block() {
    let mut s = small_scenario();
    s.vms[2].confidential_key = None;
    s.vms[2].confidential = false;
    let mut dev = device(&s, EngineKind::Batched);
    let mut per_ctx: std::collections::HashMap<u32, [u64; 64]> = Default::default();
    let mut records = Vec::new();
    let mut cursor = 0;
    let read_ring = |dev: &mut gpupm_driver::model::Device,
                     per_ctx: &mut std::collections::HashMap<u32, [u64; 64]>| {
        for p in 1..3u32 {
            let head = dev.read_reg(r::part(p, r::PART_STREAM_HEAD), 4).unwrap() as u32;
            let mut tail = dev.read_reg(r::part(p, r::PART_STREAM_TAIL), 4).unwrap() as u32;
            let cap = dev.read_reg(r::part(p, r::PART_STREAM_CAP), 4).unwrap() as u32;
            while tail != head {
                let mut buf = vec![0u8; layout::STREAM_SLOT_SIZE as usize];
                dev.read_window(layout::stream_slot_offset(p, tail & (cap - 1)), &mut buf)
                    .unwrap();
                let rec = StreamRecord::read_from_bytes(
                    &StreamSlot::read_from_bytes(&buf).unwrap().payload,
                )
                .unwrap();
                let acc = per_ctx.entry(rec.ctx).or_insert([0; 64]);
                for (a, d) in acc.iter_mut().zip(rec.deltas) {
                    *a += d;
                }
                tail = tail.wrapping_add(1);
            }
            dev.write_reg(r::part(p, r::PART_STREAM_TAIL), 4, u64::from(tail))
                .unwrap();
        }
    };
    while dev.now() < 1_000_000 {
        dev.advance(2_500).unwrap();
        records.clear();
        cursor = dev.interrupts_since(cursor, &mut records);
        for rec in records
            .iter()
            .filter(|r| r.source == source::SWITCH_REQUESTED)
        {
            host::handshake(&mut dev, rec.partition).unwrap();
        }
        read_ring(&mut dev, &mut per_ctx);
    }
    host::flush_all(&mut dev).unwrap();
    read_ring(&mut dev, &mut per_ctx);
    assert_eq!(dev.read_reg(r::part(1, r::PART_STREAM_LOST), 8).unwrap(), 0);
    let ctxs: Vec<(u32, u32, u32)> = dev.contexts().collect();
    assert!(ctxs.len() >= 4);
    for (id, _, _) in ctxs {
        let block = dev.block(dev.ctx_slot(id).unwrap()).counters;
        assert_eq!(
            per_ctx.get(&id).copied().unwrap_or([0; 64]),
            block,
            "ctx {id}"
        );
    }
}

#[test]
fn reset_zeroes_counts_and_exactness_continues_from_there() {
    let (s, mut dev, mut host) = serviced(300_000, 3_000);
    dev.write_reg(r::RESET, 4, u64::from(r::RESET_MAGIC))
        .unwrap();
    assert!(dev
        .block(SYSTEM_BLOCK_SLOT)
        .counters
        .iter()
        .all(|&c| c == 0));
    assert_eq!(
        sum(&dev
            .ledger_totals(ledger_scope::SYSTEM, 0)
            .unwrap()
            .generated),
        0
    );
    run_serviced(&mut dev, &mut host, 300_000, 3_000);
    host::flush_all(&mut dev).unwrap();
    assert_blocks_match_ledger(&mut dev, &s);
}

#[test]
fn oob_mailbox_reads_system_counters_without_the_daemon() {
    let (_, mut dev, _) = serviced(200_000, 2_000);
    host::flush_all(&mut dev).unwrap();
    let e = ev("sm_inst_executed");
    dev.write_reg(r::MBOX_ARG, 4, u64::from(e)).unwrap();
    dev.write_reg(r::MBOX_CMD, 4, u64::from(r::mbox_op::READ_SYSTEM_COUNTER))
        .unwrap();
    assert_eq!(
        dev.read_reg(r::MBOX_STATUS, 4).unwrap() as u32,
        r::mbox_status::OK
    );
    let v = dev.read_reg(r::MBOX_DATA, 8).unwrap();
    assert!(v > 0);
    assert_eq!(v, dev.block(SYSTEM_BLOCK_SLOT).counters[usize::from(e)]);
    dev.write_reg(r::MBOX_ARG, 4, 999).unwrap();
    dev.write_reg(r::MBOX_CMD, 4, u64::from(r::mbox_op::READ_SYSTEM_COUNTER))
        .unwrap();
    assert_eq!(
        dev.read_reg(r::MBOX_STATUS, 4).unwrap() as u32,
        r::mbox_status::ERR_ARG
    );
    dev.write_reg(r::MBOX_CMD, 4, 0x77).unwrap();
    assert_eq!(
        dev.read_reg(r::MBOX_STATUS, 4).unwrap() as u32,
        r::mbox_status::ERR_OPCODE
    );
    dev.write_reg(r::MBOX_CMD, 4, u64::from(r::mbox_op::READ_CYCLE))
        .unwrap();
    assert_eq!(dev.read_reg(r::MBOX_DATA, 8).unwrap(), dev.now());
}

#[test]
fn same_scenario_seed_and_steps_give_identical_bytes_however_time_is_split() {
    let s = small_scenario();
    let mut a = device(&s, EngineKind::Batched);
    let mut b = device(&s, EngineKind::Batched);
    a.advance(700_000).unwrap();
    for _ in 0..70 {
        b.advance(7_000).unwrap();
        b.advance(3_000).unwrap();
    }
    assert_eq!(digest(&a), digest(&b));
    let mut other = s.clone();
    other.seed += 1;
    let mut c = device(&other, EngineKind::Batched);
    c.advance(700_000).unwrap();
    assert_ne!(digest(&a), digest(&c), "the seed must matter");
}
