//! Stream-ring drains against the real driver (step clock, no daemon
//! running): drains of every size, alternating the periodic sweep of every
//! ring and the drain of one ring, reuse the drain's window and sample
//! buffers from one ring and one drain to the next, and still record every
//! record the device wrote exactly once, in order — reading the records
//! from the device's commit mirror, through the window without one
//! (`--no-mirror`), and from a mirror that lags the device (both).

use std::collections::BTreeMap;
use std::sync::Arc;

use gpupm_client::mirror::{MirrorReader, MirrorWriter, RingLayout};
use gpupm_client::DevNode;
use gpupm_test_support::scenario::{small, STEP};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::layout::{StreamSlot, STREAM_SLOT_SIZE};
use gpupm_uapi::regs::{self as r, vm_flags, MAX_PARTITION_SLOTS, MAX_VMS};
use gpupmd::engine::drain::{self, Rings};
use gpupmd::engine::program;
use gpupmd::mirror::{DeviceMirror, OpenMirror};
use gpupmd::store::retention::Retention;
use gpupmd::store::retired::RetiredStore;
use gpupmd::store::{Store, VmInfo};
use gpupmd::view::{CounterView, DeltaSample, Scope};

/// Device time between drains, in [`STEP`]s: 1 to `MAX_STEPS`, so that
/// drains find from one record to over a dozen (the step clock simulates
/// ~80k cycles a second here, so more would make a slow test).
const MAX_STEPS: u64 = 24;
/// Drain rounds.
const ROUNDS: u64 = 40;

fn vms(dev: &DevNode) -> BTreeMap<u32, VmInfo> {
    (1..MAX_VMS)
        .filter_map(|vm| {
            let partition = dev.read32(r::vm(vm, r::VM_PARTITION)).unwrap();
            (partition != 0).then(|| {
                let flags = dev.read32(r::vm(vm, r::VM_FLAGS)).unwrap();
                let info = VmInfo {
                    partition,
                    confidential: flags & vm_flags::CONFIDENTIAL != 0,
                    block_offset: dev.read64(r::vm(vm, r::VM_BLOCK)).unwrap(),
                };
                (vm, info)
            })
        })
        .collect()
}

/// Records ring `p` holds, and the records it lost.
fn fill_and_lost(dev: &DevNode, p: u32) -> (u32, u64) {
    let head = dev.read32(r::part(p, r::PART_STREAM_HEAD)).unwrap();
    let tail = dev.read32(r::part(p, r::PART_STREAM_TAIL)).unwrap();
    let lost = dev.read64(r::part(p, r::PART_STREAM_LOST)).unwrap();
    (head.wrapping_sub(tail), lost)
}

/// Sequence numbers of `samples`, which must be plaintext.
fn seqs<'a>(samples: impl IntoIterator<Item = &'a DeltaSample>) -> Vec<u64> {
    samples
        .into_iter()
        .map(|s| {
            assert!(s.sealed.is_none(), "a plaintext VM's sample is sealed");
            s.seq
        })
        .collect()
}

/// Where the drains read the records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The driver's commit mirror, current after every request.
    Mirror,
    /// The window only: the driver keeps no mirror.
    Window,
    /// A mirror of the test's own that publishes up to four fewer
    /// records per ring than the device holds at each drain.
    LaggingMirror,
}

#[test]
fn drains_from_the_mirror_record_every_record_once() {
    let rings = drains_record_every_record_once(Source::Mirror);
    assert!(rings.mirrored_records() > 0);
    assert_eq!(rings.window_records(), 0, "the mirror is current");
    assert_eq!(rings.mirror_fallbacks(), 0);
}

#[test]
fn drains_without_a_mirror_record_every_record_once() {
    let rings = drains_record_every_record_once(Source::Window);
    assert_eq!(rings.mirrored_records(), 0);
    assert!(rings.window_records() > 0);
}

#[test]
fn drains_from_a_lagging_mirror_read_the_rest_through_the_window() {
    let rings = drains_record_every_record_once(Source::LaggingMirror);
    assert!(rings.mirrored_records() > 0, "from the mirror");
    assert!(rings.window_records() > 0, "past the mirror's head");
}

/// A mirror the test publishes: the device's ring layout, and the records
/// copied from the window up to a head the test chooses.
struct Lagging {
    writer: MirrorWriter,
    published: Vec<u32>,
    layouts: Vec<RingLayout>,
}

impl Lagging {
    fn new(dir: &std::path::Path, dev: &DevNode, partitions: &[u32]) -> (Lagging, Arc<OpenMirror>) {
        let layouts: Vec<RingLayout> = (0..MAX_PARTITION_SLOTS)
            .map(|p| {
                if !partitions.contains(&p) {
                    return RingLayout::default();
                }
                RingLayout {
                    cap: dev.read32(r::part(p, r::PART_STREAM_CAP)).unwrap(),
                    window_base: dev.read64(r::part(p, r::PART_STREAM_BASE)).unwrap(),
                }
            })
            .collect();
        let writer = MirrorWriter::create_with_rings(dir, 1, &layouts).expect("a mirror");
        let reader = MirrorReader::open(&writer.info()).expect("open it");
        let open = Arc::new(OpenMirror::new(reader, "lagging"));
        let published = vec![0; layouts.len()];
        (
            Lagging {
                writer,
                published,
                layouts,
            },
            open,
        )
    }

    /// Publishes ring `p` up to `lag` records short of the device's head.
    fn publish(&mut self, dev: &DevNode, p: u32, lag: u32) {
        let head = dev.read32(r::part(p, r::PART_STREAM_HEAD)).unwrap();
        let (i, layout) = (p as usize, self.layouts[p as usize]);
        let target = head.saturating_sub(lag).max(self.published[i]);
        let mut slot = vec![0u8; size_of::<StreamSlot>()];
        for index in self.published[i]..target {
            let at = layout.window_base + u64::from(index % layout.cap) * STREAM_SLOT_SIZE;
            dev.window(at, &mut slot).unwrap();
            self.writer.copy_ring_records(p, index, &slot);
        }
        self.writer.publish_ring_head(p, target);
        self.published[i] = target;
    }
}

/// Drains of every size against `source`; every record recorded once.
fn drains_record_every_record_once(source: Source) -> Rings {
    let tmp = Scratch::new("drain");
    let mut opts = DriverOptions::system(small());
    if source == Source::Window {
        opts.args.push("--no-mirror".into());
    }
    let driver = Driver::start_in(&tmp, opts);
    let dev = Arc::new(driver.node());
    let (identity, step_clock) = program::identify(&dev).expect("identify");
    assert!(step_clock, "the test owns the step clock");
    let partitions = program::configured_partitions(&dev).expect("partitions");
    let retired = RetiredStore::open(tmp.path()).expect("state directory");
    let store = Store::new(
        Arc::clone(&dev),
        identity,
        retired,
        Retention::default(),
        65_536,
        None,
    );
    let mirror = DeviceMirror::new(Arc::clone(&dev));
    let vms = vms(&dev);
    store.set_topology(vms.clone(), partitions.clone());

    let mut rings = Rings::new(true);
    let mut lagging = None;
    match source {
        Source::Mirror => assert!(rings.follow(&mirror), "the driver's mirror"),
        Source::Window => assert!(!rings.follow(&mirror), "--no-mirror"),
        Source::LaggingMirror => {
            let (l, open) = Lagging::new(&tmp.join("lagging"), &dev, &partitions);
            assert!(rings.follow_mirror(open));
            lagging = Some(l);
        }
    }
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut largest_fill = 0;
    for round in 0..ROUNDS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        dev.advance(STEP * (1 + rng % MAX_STEPS)).expect("advance");
        for &p in &partitions {
            let (fill, lost) = fill_and_lost(&dev, p);
            assert_eq!(lost, 0, "ring {p} overflowed: the test must drain sooner");
            largest_fill = largest_fill.max(fill);
        }
        if let Some(l) = lagging.as_mut() {
            for &p in &partitions {
                l.publish(&dev, p, u32::try_from(rng % 5).unwrap());
            }
        }
        if round % 3 == 2 {
            for &p in &partitions {
                drain::drain(&dev, &store, &mut rings, p).expect("drain one ring");
            }
        } else {
            drain::drain_rings(&dev, &store, &mut rings, &partitions).expect("sweep");
        }
    }
    // A periodic drain may leave records below the watermark; with the
    // step clock stopped, one more sweep takes the rest.
    drain::drain_rings(&dev, &store, &mut rings, &partitions).expect("sweep");
    assert!(
        largest_fill >= 8,
        "drains of many sizes: largest {largest_fill}"
    );

    let mut written = BTreeMap::new();
    for &p in &partitions {
        assert_eq!(fill_and_lost(&dev, p), (0, 0), "ring {p} drained whole");
        let head = dev.read32(r::part(p, r::PART_STREAM_HEAD)).unwrap();
        written.insert(p, u64::from(head));
    }
    assert!(
        written.values().all(|&n| n > 0),
        "every ring wrote: {written:?}"
    );
    let recent = |scope| store.recent(scope, 1 << 20).expect("a known scope");

    // The system scope holds RC0's records and the records of other rings
    // made while no VM ran (VM 0): RC0's must all be there, once each.
    let rc0 = partitions
        .iter()
        .find(|&&p| !vms.values().any(|v| v.partition == p));
    let rc0 = *rc0.expect("a ring no VM is on (RC0's)");
    let mut vm0 = seqs(&recent(Scope::System));
    vm0.sort_unstable();
    take_each_once(&format!("ring {rc0} (RC0)"), &mut vm0, 1..=written[&rc0]);
    // Every other ring: its VMs' records, and the VM-0 records left.
    let mut sealed = 0u64;
    let mut sealed_written = 0u64;
    for (&p, &count) in written.iter().filter(|&(&p, _)| p != rc0) {
        let on_p = vms.iter().filter(|(_, v)| v.partition == p);
        let samples: Vec<DeltaSample> = on_p
            .clone()
            .flat_map(|(&vm, _)| recent(Scope::Vm(vm)))
            .collect();
        if on_p.clone().all(|(_, v)| v.confidential) {
            // Ciphertext carries no sequence: only counts can be checked.
            sealed += samples.len() as u64;
            sealed_written += count;
            continue;
        }
        for (&vm, _) in on_p.clone() {
            let order = seqs(&recent(Scope::Vm(vm)));
            assert!(order.is_sorted_by(|a, b| a < b), "VM {vm}: out of order");
        }
        let mut mine = seqs(&samples);
        mine.sort_unstable();
        mine.dedup();
        assert_eq!(mine.len(), samples.len(), "ring {p}: a record twice");
        let missing: Vec<u64> = (1..=count)
            .filter(|n| mine.binary_search(n).is_err())
            .collect();
        take_each_once(&format!("ring {p}'s VM-0 records"), &mut vm0, missing);
        assert!(
            mine.iter().all(|&n| (1..=count).contains(&n)),
            "ring {p}: unknown sequence"
        );
    }
    assert_eq!(
        sealed + vm0.len() as u64,
        sealed_written,
        "confidential rings' records"
    );
    rings
}

/// Removes one occurrence of each of `want` from the sorted `pool`.
fn take_each_once(what: &str, pool: &mut Vec<u64>, want: impl IntoIterator<Item = u64>) {
    for n in want {
        let at = pool.binary_search(&n);
        let at = at.unwrap_or_else(|_| panic!("{what}: record {n} was not recorded"));
        pool.remove(at);
    }
}
