//! The commit mirror's ring area (ABI 1.10) through a real driver: every
//! ring is described with the device's capacity and window base; after
//! each request the mirror's head is the device's and the records below
//! it are the window's, byte for byte (a confidential VM's as ciphertext);
//! a reset restarts the heads with a new generation.

use std::fs::File;
use std::os::unix::fs::FileExt;

use gpupm_client::mirror::{MirrorReader, RingLayout, RingRead};
use gpupm_test_support::rawnode::{advance, ioctl, rd32, rd64};
use gpupm_test_support::Driver;
use gpupm_uapi::ioctl::{GPUPM_IOC_MIRROR_INFO, IOCTL_STRUCT_VERSION};
use gpupm_uapi::layout::{
    envelope_flags, StreamRecord, StreamSlot, MEM_WINDOW_OFFSET, RECORD_MAGIC, STREAM_SLOT_SIZE,
};
use gpupm_uapi::mirror::MirrorInfo;
use gpupm_uapi::regs::{self as r, MAX_PARTITION_SLOTS};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// The small scenario's periodic trigger.
const PERIOD: u64 = 20_000;
/// The small scenario's confidential VM (on partition 2).
const CONFIDENTIAL_VM: u32 = 3;

/// The partition slots the device has (a register of another answers
/// EINVAL, and its ring is described with capacity 0).
fn rings(card: &File) -> Vec<u32> {
    (0..MAX_PARTITION_SLOTS)
        .filter(|&p| rd32(card, r::part(p, r::PART_STREAM_CAP)).is_ok())
        .collect()
}

fn open_mirror(card: &File) -> MirrorReader {
    let mut info = MirrorInfo::new_zeroed();
    info.version = IOCTL_STRUCT_VERSION;
    ioctl(card, GPUPM_IOC_MIRROR_INFO, info.as_mut_bytes()).unwrap();
    MirrorReader::open(&info).unwrap()
}

/// Ring `p`'s layout and head as the device's registers give them.
fn device_ring(card: &File, p: u32) -> (RingLayout, u32) {
    let layout = RingLayout {
        cap: rd32(card, r::part(p, r::PART_STREAM_CAP)).unwrap(),
        window_base: rd64(card, r::part(p, r::PART_STREAM_BASE)).unwrap(),
    };
    (layout, rd32(card, r::part(p, r::PART_STREAM_HEAD)).unwrap())
}

/// The newest records of ring `p` (at most a ring's worth), from the
/// mirror and from the window, and the first index.
fn newest_records(
    card: &File,
    mirror: &MirrorReader,
    p: u32,
) -> (Vec<StreamSlot>, Vec<StreamSlot>) {
    let (layout, head) = device_ring(card, p);
    let first = head.saturating_sub(layout.cap);
    let mut mirrored = Vec::new();
    let read = mirror.read_ring((p, layout), (first, head), |s| mirrored.push(*s));
    assert_eq!(read, RingRead::Taken(head - first), "ring {p}");
    let window = (first..head)
        .map(|i| {
            let mut s = StreamSlot::new_zeroed();
            let at = layout.window_base + u64::from(i % layout.cap) * STREAM_SLOT_SIZE;
            card.read_exact_at(s.as_mut_bytes(), MEM_WINDOW_OFFSET + at)
                .unwrap();
            s
        })
        .collect();
    (mirrored, window)
}

#[test]
fn the_ring_area_holds_the_records_the_window_holds_after_each_request() {
    let d = Driver::start();
    let card = d.card();
    let mirror = open_mirror(&card);
    assert!(mirror.has_rings());
    let rings = rings(&card);
    assert!(rings.len() > 2, "rings {rings:?}");
    for p in 0..MAX_PARTITION_SLOTS {
        let layout = mirror
            .ring_layout(p)
            .expect("a descriptor per partition slot");
        if rings.contains(&p) {
            assert_eq!(layout, device_ring(&card, p).0, "ring {p}");
        } else {
            assert_eq!(layout.cap, 0, "slot {p} has no ring");
        }
    }
    let mut wrote = 0u32;
    // Enough time for the rings to wrap: drained by nobody, they fill and
    // then lose records; the newest cap are in the window.
    for _ in 0..12 {
        advance(&card, 3 * PERIOD + 77).unwrap();
        for &p in &rings {
            let (_, head) = device_ring(&card, p);
            assert_eq!(
                mirror.ring_head(p),
                Some(head),
                "ring {p}'s head is published"
            );
            let (mirrored, window) = newest_records(&card, &mirror, p);
            assert_eq!(mirrored, window, "ring {p}: the window's records");
            wrote = wrote.max(head);
        }
    }
    assert!(wrote > 0, "the rings received records");
    d.stop();
}

#[test]
fn a_confidential_vms_records_are_ciphertext_in_the_ring_area() {
    let d = Driver::start();
    let card = d.card();
    let mirror = open_mirror(&card);
    advance(&card, 8 * PERIOD + 77).unwrap();
    let (mut sealed, mut plain) = (0, 0);
    for p in rings(&card) {
        let (mirrored, _) = newest_records(&card, &mirror, p);
        for s in mirrored
            .iter()
            .filter(|s| s.envelope.flags & envelope_flags::VALID != 0)
        {
            let rec = StreamRecord::read_from_bytes(&s.payload).unwrap();
            if s.envelope.vm == CONFIDENTIAL_VM {
                assert_ne!(s.envelope.flags & envelope_flags::ENCRYPTED, 0);
                assert_ne!(rec.magic, RECORD_MAGIC, "a plaintext record of the VM");
                sealed += 1;
            } else {
                assert_eq!(rec.magic, RECORD_MAGIC);
                plain += 1;
            }
        }
    }
    assert!(
        sealed > 0 && plain > 0,
        "sealed {sealed}, plaintext {plain}"
    );
    d.stop();
}

#[test]
fn a_reset_restarts_the_ring_heads_with_a_new_generation() {
    let d = Driver::start();
    let card = d.card();
    let node = d.node();
    let mirror = open_mirror(&card);
    advance(&card, 4 * PERIOD + 77).unwrap();
    let before = mirror.generation();
    let rings = rings(&card);
    let heads: Vec<u32> = (0..MAX_PARTITION_SLOTS)
        .map(|p| mirror.ring_head(p).unwrap())
        .collect();
    assert!(heads.iter().any(|&h| h > 0), "records before the reset");
    node.reset().unwrap();
    assert_ne!(mirror.generation(), before, "a reset is a new generation");
    for &p in &rings {
        assert_eq!(mirror.ring_head(p), Some(0), "ring {p} restarted");
        let (layout, head) = device_ring(&card, p);
        assert_eq!(head, 0, "the device's ring {p} restarted");
        if heads[p as usize] == 0 {
            continue;
        }
        // A drain whose tail predates the reset takes nothing from it.
        let read = mirror.read_ring((p, layout), (heads[p as usize], head), |_| {});
        assert_eq!(read, RingRead::Unusable, "ring {p}");
    }
    advance(&card, 2 * PERIOD + 77).unwrap();
    for &p in &rings {
        let (mirrored, window) = newest_records(&card, &mirror, p);
        assert_eq!(mirrored, window, "ring {p} after the reset");
    }
    d.stop();
}
