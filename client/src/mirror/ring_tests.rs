//! The ring area's writer and reader together, on real files.

use std::sync::atomic::{AtomicU64, Ordering};

use gpupm_uapi::layout::{StreamSlot, STREAM_SLOT_SIZE};
use zerocopy::{FromZeros, IntoBytes};

use super::*;

fn scratch() -> std::path::PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gpupm-rings-{}-{n}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}

/// A stream slot whose words all hold `index` (its ring index) in the
/// low half and `tag` in the high half.
fn record(index: u32, tag: u32) -> StreamSlot {
    let mut s = StreamSlot::new_zeroed();
    let v = u64::from(index) | u64::from(tag) << 32;
    for w in s.as_mut_bytes().chunks_exact_mut(8) {
        w.copy_from_slice(&v.to_le_bytes());
    }
    s
}

fn records(first: u32, n: u32, tag: u32) -> Vec<u8> {
    (0..n)
        .flat_map(|k| record(first.wrapping_add(k), tag).as_bytes().to_vec())
        .collect()
}

const SMALL: RingLayout = RingLayout {
    cap: 16,
    window_base: 0x1000,
};
const UNUSED: RingLayout = RingLayout {
    cap: 0,
    window_base: 0x2000,
};
const LARGE: RingLayout = RingLayout {
    cap: 64,
    window_base: 0x3000,
};

/// The records of ring `r` from `tail` up to `device_head`, as read.
fn read(
    reader: &MirrorReader,
    (r, layout): (u32, RingLayout),
    tail: u32,
    device_head: u32,
) -> (RingRead, Vec<StreamSlot>) {
    let mut got = Vec::new();
    let res = reader.read_ring((r, layout), (tail, device_head), |s| got.push(*s));
    (res, got)
}

#[test]
fn records_are_read_back_once_in_ring_order_across_the_wrap() {
    let dir = scratch();
    let w = MirrorWriter::create_with_rings(&dir, 5, &[SMALL, UNUSED, LARGE]).unwrap();
    let r = MirrorReader::open(&w.info()).unwrap();
    assert!(r.has_rings());
    assert_eq!(r.ring_layout(2), Some(LARGE));
    assert!(
        w.info().size >= MIRROR_SIZE + 80 * STREAM_SLOT_SIZE,
        "the slots past the block slots"
    );
    // Ring 2's records must survive ring 0's.
    w.copy_ring_records(2, 0, &records(0, 64, 9));
    w.publish_ring_head(2, 64);
    // Three publications of ring 0 (cap 16): 10, then 12, then 9 records,
    // each drained before the next, so indices 16.. overwrite 0..
    let mut tail = 0u32;
    let mut seen = Vec::new();
    for n in [10u32, 12, 9] {
        w.copy_ring_records(0, tail, &records(tail, n, 7));
        w.publish_ring_head(0, tail + n);
        assert_eq!(r.ring_head(0), Some(tail + n));
        let (res, got) = read(&r, (0, SMALL), tail, tail + n);
        assert_eq!(res, RingRead::Taken(n));
        seen.extend(got);
        tail += n;
    }
    let want: Vec<StreamSlot> = (0..31).map(|i| record(i, 7)).collect();
    assert_eq!(seen, want, "each record once, in order, across the wrap");
    // The other rings were not touched.
    let (res, got) = read(&r, (2, LARGE), 0, 64);
    assert_eq!(res, RingRead::Taken(64));
    assert_eq!(got, (0..64).map(|i| record(i, 9)).collect::<Vec<_>>());
    assert_eq!(read(&r, (1, UNUSED), 0, 0).0, RingRead::Unusable);
    assert_file_layout(&w, 0, 31, 7);
    std::fs::remove_dir_all(&dir).ok();
}

/// The file as a C reader sees it (`docs/abi.md`): the header's `rings`,
/// ring `ring`'s descriptor, and ring index `i`'s slot at `slots + (i %
/// cap) * slot_size` holding `record(i, tag)` for the newest `cap` of
/// `head` records.
fn assert_file_layout(w: &MirrorWriter, ring: u32, head: u32, tag: u32) {
    use gpupm_uapi::mirror::{mirror_ring_offset, MirrorHeader, MirrorRing, MirrorRings};
    use zerocopy::FromBytes;
    let bytes = std::fs::read(w.path()).unwrap();
    let header = MirrorHeader::read_from_prefix(&bytes).unwrap().0;
    let at = usize::try_from(header.rings).unwrap();
    let area = MirrorRings::read_from_prefix(&bytes[at..]).unwrap().0;
    assert_eq!((area.ring_size, area.slot_size), (32, 608));
    assert_eq!(at as u64 + area.area_size, bytes.len() as u64);
    let d = usize::try_from(mirror_ring_offset(header.rings, ring)).unwrap();
    let desc = MirrorRing::read_from_prefix(&bytes[d..]).unwrap().0;
    assert_eq!(desc.head, head);
    for i in head.saturating_sub(desc.cap)..head {
        let s = usize::try_from(desc.slots + u64::from(i % desc.cap) * 608).unwrap();
        assert_eq!(&bytes[s..s + 608], record(i, tag).as_bytes(), "index {i}");
    }
}

#[test]
fn a_lagging_mirror_gives_only_what_it_published_and_a_bad_head_nothing() {
    let dir = scratch();
    let w = MirrorWriter::create_with_rings(&dir, 5, &[SMALL]).unwrap();
    let r = MirrorReader::open(&w.info()).unwrap();
    w.copy_ring_records(0, 0, &records(0, 5, 1));
    w.publish_ring_head(0, 5);
    // The device is at 9: records 5..9 are not mirrored yet.
    let (res, got) = read(&r, (0, SMALL), 2, 9);
    assert_eq!(res, RingRead::Taken(3));
    assert_eq!(got, [record(2, 1), record(3, 1), record(4, 1)]);
    // The device head is nearer than the mirror's (it was read earlier).
    assert_eq!(read(&r, (0, SMALL), 2, 4).0, RingRead::Taken(2));
    // A head behind the tail (a reset raced the drain).
    assert_eq!(read(&r, (0, SMALL), 6, 9), (RingRead::Unusable, vec![]));
    // Another layout than the device's.
    let moved = RingLayout {
        window_base: 0,
        ..SMALL
    };
    assert_eq!(read(&r, (0, moved), 2, 9).0, RingRead::Unusable);
    assert_eq!(
        read(&r, (3, SMALL), 2, 9).0,
        RingRead::Unusable,
        "no such ring"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_span_refuses_a_head_behind_the_tail_or_more_than_cap_ahead() {
    assert_eq!(mirror_span(10, 20, 15, 16), Some(5), "the mirror lags");
    assert_eq!(
        mirror_span(10, 12, 15, 16),
        Some(2),
        "the device read first"
    );
    assert_eq!(mirror_span(10, 20, 10, 16), Some(0));
    assert_eq!(mirror_span(10, 20, 9, 16), None, "behind the tail");
    assert_eq!(mirror_span(10, 40, 27, 16), None, "more than cap ahead");
    assert_eq!(mirror_span(10, 40, 26, 16), Some(16));
    // Indices wrap modulo 2^32.
    assert_eq!(mirror_span(u32::MAX - 1, 3, 2, 16), Some(4));
    assert_eq!(mirror_span(3, 3, u32::MAX, 16), None);
}

#[test]
fn a_reset_restarts_the_heads_and_changes_the_generation() {
    let dir = scratch();
    let mut w = MirrorWriter::create_with_rings(&dir, 5, &[SMALL, LARGE]).unwrap();
    let r = MirrorReader::open(&w.info()).unwrap();
    w.copy_ring_records(0, 0, &records(0, 12, 1));
    w.publish_ring_head(0, 12);
    w.copy_ring_records(1, 0, &records(0, 3, 1));
    w.publish_ring_head(1, 3);
    let before = r.generation();
    let mut c = w.begin();
    c.set_generation(6);
    c.finish(1, 1);
    assert_ne!(r.generation(), before);
    assert_eq!((r.ring_head(0), r.ring_head(1)), (Some(0), Some(0)));
    // A drain that read the registers before the reset: its tail is past
    // the restarted head.
    assert_eq!(read(&r, (0, SMALL), 12, 12).0, RingRead::Unusable);
    // New records from 0 are the new generation's.
    w.copy_ring_records(0, 0, &records(0, 2, 2));
    w.publish_ring_head(0, 2);
    let (res, got) = read(&r, (0, SMALL), 0, 2);
    assert_eq!(res, RingRead::Taken(2));
    assert_eq!(got, [record(0, 2), record(1, 2)]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_reset_during_a_read_makes_it_discarded() {
    let dir = scratch();
    let mut w = MirrorWriter::create_with_rings(&dir, 5, &[SMALL]).unwrap();
    let r = MirrorReader::open(&w.info()).unwrap();
    w.copy_ring_records(0, 0, &records(0, 4, 1));
    w.publish_ring_head(0, 4);
    let mut handed = 0;
    let res = r.read_ring((0, SMALL), (0, 4), |_| {
        handed += 1;
        if handed == 2 {
            let mut c = w.begin();
            c.set_generation(9);
            c.finish(1, 1);
        }
    });
    assert_eq!(res, RingRead::GenerationChanged);
    assert_eq!(handed, 4);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_mirror_without_a_ring_area_offers_no_rings() {
    let dir = scratch();
    let w = MirrorWriter::create(&dir, 5).unwrap();
    assert_eq!(w.info().size, MIRROR_SIZE, "a 1.9 mirror's size");
    let r = MirrorReader::open(&w.info()).unwrap();
    assert!(!r.has_rings());
    assert_eq!(r.ring_layout(0), None);
    assert_eq!(read(&r, (0, SMALL), 0, 4).0, RingRead::Unusable);
    std::fs::remove_dir_all(&dir).ok();
}
