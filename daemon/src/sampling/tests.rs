//! The plane against a recording device and recording sinks.

use std::sync::atomic::AtomicBool;

use gpupm_uapi::layout::{envelope_flags, Envelope};
use gpupm_uapi::sampling::{PcRecord, PC_RECORD_MAGIC};
use gpupm_uapi::tenant::sampling::{sample_flags, sample_kind};
use zerocopy::IntoBytes;

use super::*;

#[derive(Debug, Default)]
struct FakeDevice {
    programmed: Mutex<Vec<(u32, Settings)>>,
    fail: AtomicBool,
    /// The drain epoch; each cut advances it.
    epoch: AtomicU64,
}

impl SamplerDevice for FakeDevice {
    fn program(&self, p: u32, settings: &Settings) -> Result<(), DevError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(DevError::BatchTooLarge(0));
        }
        self.programmed.lock().unwrap().push((p, *settings));
        Ok(())
    }

    fn cut(&self, _p: u32) -> Result<u64, DevError> {
        Ok(self.epoch.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

#[derive(Debug, Default)]
struct Recorder {
    got: Mutex<Vec<(u16, u16, Vec<u8>)>>,
    lost: AtomicU64,
}

impl SampleSink for Recorder {
    fn deliver(&self, _kind: u16, lost: u64, records: &[Outgoing<'_>]) -> bool {
        self.lost.fetch_add(lost, Ordering::Relaxed);
        let mut g = self.got.lock().unwrap();
        g.extend(
            records
                .iter()
                .map(|r| (r.kind, r.flags, r.payload.to_vec())),
        );
        true
    }
}

fn cycles(period: u32, dither: u32) -> Demand {
    Demand {
        kinds: sample_kind::CYCLE,
        period,
        dither,
        branch_every: 0,
    }
}

fn target(vm: u32, ctx: Option<u32>) -> Target {
    Target {
        partition: 1,
        vm,
        ctx,
    }
}

/// A PC batch of partition 1: `(vm, ctx, ctx_cycle)` per slot; `sealed`
/// VMs' slots are marked encrypted; `lost` records, `lost_by` per scope.
fn pc_batch(
    slots: &[(u32, u32, u64)],
    sealed: &[u32],
    lost: u64,
    lost_by: &[(LostScope, u64)],
) -> Batch {
    let mut bytes = Vec::new();
    for &(vm, ctx, ctx_cycle) in slots {
        let enc = sealed.contains(&vm);
        let env = Envelope {
            vm,
            flags: envelope_flags::VALID | if enc { envelope_flags::ENCRYPTED } else { 0 },
            ..Envelope::default()
        };
        let rec = PcRecord {
            magic: PC_RECORD_MAGIC,
            vm,
            ctx,
            ctx_cycle,
            partition: 1,
            ..PcRecord::default()
        };
        bytes.extend_from_slice(env.as_bytes());
        bytes.extend_from_slice(rec.as_bytes());
        bytes.extend_from_slice(&[0; 16]);
    }
    Batch {
        partition: 1,
        kind: sample_kind::CYCLE,
        slot_size: 96,
        bytes,
        lost,
        lost_by: lost_by.to_vec(),
        epoch: 0,
    }
}

#[test]
fn sessions_program_their_union_and_closing_withdraws_it() {
    let dev = Arc::new(FakeDevice::default());
    let plane = Plane::new(dev.clone(), 1_000_000);
    let fast = plane
        .open(
            target(1, Some(3)),
            cycles(1000, 255),
            1,
            Arc::new(Recorder::default()),
        )
        .unwrap();
    let slow = plane
        .open(
            target(2, None),
            cycles(8000, 0),
            1,
            Arc::new(Recorder::default()),
        )
        .unwrap();
    // The second did not change what the device runs: no reprogramming.
    assert_eq!(
        *dev.programmed.lock().unwrap(),
        vec![(
            1,
            Settings {
                cycle: Some((1000, 255)),
                branch_every: None
            }
        )]
    );
    drop(fast);
    assert_eq!(plane.settings(1).cycle, Some((8000, 0)));
    drop(slow);
    assert!(plane.settings(1).is_off());
    assert_eq!(dev.programmed.lock().unwrap().len(), 3);
    assert_eq!(plane.stats().sessions.load(Ordering::Relaxed), 0);

    // A refused programming opens nothing and changes nothing.
    dev.fail.store(true, Ordering::Relaxed);
    assert!(plane
        .open(
            target(1, None),
            cycles(1000, 0),
            1,
            Arc::new(Recorder::default())
        )
        .is_err());
    assert!(plane.settings(1).is_off());
    assert_eq!(plane.stats().sessions.load(Ordering::Relaxed), 0);
}

#[test]
fn records_reach_only_their_sessions_at_each_sessions_rate() {
    let dev = Arc::new(FakeDevice::default());
    let plane = Plane::new(dev.clone(), 1_000_000);
    let (a, b, other, conf) = (
        Arc::new(Recorder::default()),
        Arc::new(Recorder::default()),
        Arc::new(Recorder::default()),
        Arc::new(Recorder::default()),
    );
    let _ta = plane
        .open(target(1, Some(3)), cycles(1000, 0), 1, a.clone())
        .unwrap();
    let _tb = plane
        .open(target(1, None), cycles(4000, 0), 1, b.clone())
        .unwrap();
    let _to = plane
        .open(target(2, Some(9)), cycles(1000, 0), 1, other.clone())
        .unwrap();
    let _tc = plane
        .open(target(5, Some(4)), cycles(1000, 0), 1, conf.clone())
        .unwrap();
    let mut slots: Vec<(u32, u32, u64)> = (0..40).map(|i| (1, 3, i * 1000)).collect();
    slots.extend((0..40).map(|i| (1, 7, i * 1000)));
    slots.push((5, 0, 0));
    // Three records lost: two of context 3 (VM 1), one of context 9 (VM
    // 2), as the device counts them per context and per VM.
    let lost_by = [
        (LostScope::Ctx(3), 2),
        (LostScope::Vm(1), 2),
        (LostScope::Ctx(9), 1),
        (LostScope::Vm(2), 1),
    ];
    let batch = Batch {
        epoch: dev.epoch.load(Ordering::Relaxed),
        ..pc_batch(&slots, &[5], 3, &lost_by)
    };
    plane.route(&batch);
    let count = |r: &Recorder| r.got.lock().unwrap().len();
    // a: context 3 only, at the device's rate; b: the whole VM at a
    // quarter of it; the other tenant nothing; the confidential session
    // its VM's sealed slot whole.
    assert_eq!(
        (count(&a), count(&b), count(&other), count(&conf)),
        (40, 20, 0, 1)
    );
    let (kind, flags, payload) = conf.got.lock().unwrap()[0].clone();
    assert_eq!(
        (kind, flags, payload.len()),
        (sample_kind::CYCLE, sample_flags::SEALED, 96)
    );
    assert_eq!(a.got.lock().unwrap()[0].2.len(), size_of::<PcRecord>());
    // Each session is told the losses of its own scope, no one else's.
    let lost = |r: &Recorder| r.lost.load(Ordering::Relaxed);
    assert_eq!(
        (lost(&a), lost(&b), lost(&other), lost(&conf)),
        (2, 2, 1, 0)
    );
    assert_eq!(plane.stats().device_lost.load(Ordering::Relaxed), 3);
    assert_eq!(plane.stats().drained.load(Ordering::Relaxed), 81);
}

#[test]
fn a_session_receives_nothing_written_before_it_opened() {
    let dev = Arc::new(FakeDevice::default());
    let plane = Plane::new(dev.clone(), 1_000_000);
    let (early, late) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    // Sealed records of confidential VM 5 go to every session on the VM:
    // only the drain epoch tells a late session what is not its own.
    let _te = plane
        .open(target(5, Some(4)), cycles(1000, 0), 1, early.clone())
        .unwrap();
    let before_late = dev.epoch.load(Ordering::Relaxed);
    let _tl = plane
        .open(target(5, Some(4)), cycles(1000, 0), 2, late.clone())
        .unwrap();
    let after_late = dev.epoch.load(Ordering::Relaxed);
    assert!(after_late > before_late);
    // What the late open's cut drained (and any batch read before it)
    // belongs to the early session alone; what follows, to both.
    for (epoch, n) in [(before_late, 3), (after_late, 2)] {
        let slots: Vec<(u32, u32, u64)> = (0..n).map(|i| (5, 0, i * 1000)).collect();
        plane.route(&Batch {
            epoch,
            ..pc_batch(&slots, &[5], 0, &[])
        });
    }
    let count = |r: &Recorder| r.got.lock().unwrap().len();
    assert_eq!((count(&early), count(&late)), (5, 2));
}
