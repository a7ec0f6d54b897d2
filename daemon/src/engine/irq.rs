//! The interrupt thread: blocks in a read of `card0`'s interrupt records
//! (one request to the node per wake-up, no poll first), runs every
//! requested handshake on this thread (two register batches per group of
//! partitions that switch together, far inside the device's fallback
//! timeout, [`super::handshakes`]), hands everything else to the worker,
//! and acknowledges what it read (in those batches when it can).
//!
//! The first batch of a handshake ends with the flush request; the CCUs'
//! acks take some device cycles to arrive. Rather than spin on
//! `PART_CCU_ACKED` (which on a step clock would never see them: only the
//! clock's owner moves it), the thread leaves the switch awaiting its acks
//! and finishes it (second batch) on the device's `FLUSH_ACKED` record,
//! meanwhile serving other partitions' requests.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use gpupm_client::handshake::{self, Outcome, Pending};
use gpupm_client::ops::reg32;
use gpupm_client::{DevNode, IntrReader};
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::regs::{self as r, hs_state, mbox_op, part_status};

use super::handshakes::{self, Awaiting, Step};
use super::worker::Work;
use crate::planes::Planes;
use crate::store::Store;

/// Pause before reading again after the node failed.
const RETRY: Duration = Duration::from_millis(100);
/// Consecutive failures of the node after which the thread gives up.
const MAX_FAILURES: u32 = 50;

/// Where the interrupt thread hands work off.
#[derive(Debug, Clone, Copy)]
pub struct Handoff<'a> {
    /// The worker (rings, contexts, resets).
    pub work: &'a Sender<Work>,
    /// The sample-drain thread (partitions whose sample buffers need it).
    pub samples: &'a Sender<u32>,
}

/// Runs until `stop` is set (whoever sets it makes the device raise a
/// record, [`wake`]) or the node keeps failing.
pub fn run(
    dev: &DevNode,
    store: &Store,
    planes: &Planes,
    mut reader: IntrReader,
    to: Handoff<'_>,
    stop: &AtomicBool,
) {
    let work = to.work;
    let mut recs: Vec<InterruptRecord> = Vec::new();
    let mut failures = 0;
    let mut awaiting = Awaiting::new();
    sweep(dev, store, &mut awaiting);
    while !stop.load(Ordering::Acquire) {
        recs.clear();
        let batch = match reader.wait_blocking(&mut recs) {
            Ok(b) => b,
            Err(e) => {
                failures += 1;
                tracing::error!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "waiting for interrupts failed"
                );
                if failures >= MAX_FAILURES {
                    break;
                }
                std::thread::sleep(RETRY);
                continue;
            }
        };
        failures = 0;
        if recs.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        let mut unacked = recs.iter().fold(0, |seen, rec| seen | rec.source);
        let slots = |src: u32| -> Vec<u32> {
            let set: BTreeSet<u32> = recs
                .iter()
                .filter(|rec| rec.source == src)
                .map(|rec| rec.partition)
                .collect();
            set.into_iter().collect()
        };
        // Finishing switches first: their partitions are paused already.
        let acked = slots(source::FLUSH_ACKED);
        for step in handshakes::rebind(dev, &acked, &mut awaiting, &mut unacked) {
            record(store, step, &mut awaiting);
        }
        let requested = slots(source::SWITCH_REQUESTED);
        let steps = handshakes::pause_and_flush(dev, &requested, t0, &mut unacked);
        // The outgoing contexts are paused: their range counts are final.
        planes.ranges.snapshot(&requested);
        for step in steps {
            record(store, step, &mut awaiting);
        }
        if batch.missed > 0 {
            tracing::warn!(
                missed = batch.missed,
                "interrupt records were dropped by the device; resynchronising"
            );
            sweep(dev, store, &mut awaiting);
            send(work, stop, Work::Resync);
        }
        route(&recs, store, planes, to, stop);
        planes.ranges.on_interrupts(&recs);
        // What no batch carried: a switch still awaiting its acks carries
        // it soon; otherwise it is written now.
        if unacked != 0 && awaiting.is_empty() {
            if let Err(e) = dev.write32(r::INTR_ACK, unacked) {
                tracing::warn!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "acknowledging interrupts failed"
                );
            }
        }
    }
}

/// Hands each record's work to the thread that does it (the handshakes
/// were done in place); a fallback is booked at once.
fn route(
    recs: &[InterruptRecord],
    store: &Store,
    planes: &Planes,
    to: Handoff<'_>,
    stop: &AtomicBool,
) {
    let work = to.work;
    for rec in recs {
        match rec.source {
            source::STREAM_WATERMARK | source::STREAM_OVERFLOW => {
                send(work, stop, Work::Drain(rec.partition))
            }
            source::SAMPLE_WATERMARK | source::SAMPLE_OVERFLOW => {
                send_drain(to.samples, stop, rec.partition)
            }
            source::RI_BUFFER_FULL | source::RI_HALT => planes.ri.notify(rec.arg),
            source::CTX_CREATED => send(work, stop, Work::Created(rec.arg)),
            source::CTX_DESTROYED => send(work, stop, Work::Destroyed(rec.arg)),
            source::DEVICE_RESET => send(work, stop, Work::Reset),
            source::SWITCH_FALLBACK => {
                store.switch_committed(rec.partition, Some(rec.arg));
                let fallbacks = store.record_fallback();
                crate::health::handshake_fallback(rec.partition, fallbacks);
            }
            _ => {}
        }
    }
}

/// Makes the device raise a record (a host mailbox `GET_CAPS` completes
/// with `MAILBOX_DONE`), so that an interrupt thread blocked in its read
/// wakes and sees `stop`. Harmless to anyone else reading records.
pub fn wake(dev: &DevNode) {
    if let Err(e) = dev.write32(r::MBOX_CMD, mbox_op::GET_CAPS) {
        tracing::debug!(
            error = gpupm_fusemount::logging::one_line(e),
            "waking the interrupt thread failed (the device is gone?)"
        );
    }
}

/// Hands `w` to the worker thread. Both threads watch `stop`, so after a
/// stop request the worker may be gone already (seen as an error line on
/// every clean `systemctl stop` shortly after start): the work is moot
/// then, not an error.
fn send(work: &Sender<Work>, stop: &AtomicBool, w: Work) {
    if work.send(w).is_err() && !stop.load(Ordering::Acquire) {
        tracing::error!(work = ?w, "the worker thread is gone");
    }
}

/// Hands partition `p`'s sample buffers to the drain thread (which, like
/// the worker, only stops with the engine).
fn send_drain(samples: &Sender<u32>, stop: &AtomicBool, p: u32) {
    if samples.send(p).is_err() && !stop.load(Ordering::Acquire) {
        tracing::error!("the sample-drain thread is gone");
    }
}

/// Books a handshake's outcome; a completed switch's commit goes to the
/// pages.
fn record(store: &Store, (p, incoming, t0, outcome): Step, awaiting: &mut Awaiting) {
    match outcome {
        Ok(Outcome::Done { response_cycles }) => {
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            store.record_handshake(ns, response_cycles);
            store.switch_committed(p, incoming);
        }
        Ok(Outcome::AwaitingAcks(pending)) => {
            awaiting.insert(p, (pending, t0));
        }
        Ok(Outcome::NotRequested) => {}
        // The device's fallback record is logged (rate-limited) and
        // counted: one warning per fallback is enough.
        Ok(Outcome::Abandoned) => tracing::debug!(
            partition = p,
            "handshake abandoned; the device's fallback completed it"
        ),
        Err(e) => tracing::error!(
            partition = p,
            error = gpupm_fusemount::logging::one_line(e),
            "handshake failed"
        ),
    }
}

/// Runs the handshake on every partition that waits for one, finishes
/// every switch whose acks arrived (a `FLUSH_ACKED` record may have been
/// missed), and adopts a switch a previous daemon left between its two
/// batches ([`adopt`]). Runs at start, after the interrupt handle was
/// opened (whatever happens later arrives as a record), and when records
/// were missed.
fn sweep(dev: &DevNode, store: &Store, awaiting: &mut Awaiting) {
    let waiting: Vec<(Pending, Instant)> = std::mem::take(awaiting).into_values().collect();
    for (pending, t0) in waiting {
        let outcome = handshake::resume(&mut &*dev, &pending, &mut 0);
        record(
            store,
            (pending.partition, Some(pending.ctx), t0, outcome),
            awaiting,
        );
    }
    let parts: Vec<u32> = store.partitions().into_iter().filter(|&p| p != 0).collect();
    let offsets: Vec<u64> = parts.iter().map(|&p| r::part(p, r::PART_STATUS)).collect();
    let status = match dev.read_many(&offsets) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                error = gpupm_fusemount::logging::one_line(e),
                "reading partition status failed"
            );
            return;
        }
    };
    for (&p, s) in parts.iter().zip(status) {
        match reg32(s) & part_status::STATE_MASK {
            hs_state::REQUESTED => {
                let outcome = handshake::run_polling(&mut &*dev, p, &mut 0, 0);
                record(store, (p, None, Instant::now(), outcome), awaiting);
            }
            // Between the two batches, and not one of this thread's: a
            // previous daemon's, killed after its first batch.
            hs_state::TRIGGERED | hs_state::ACKED if !awaiting.contains_key(&p) => {
                adopt(dev, store, p, awaiting);
            }
            _ => {}
        }
    }
}

/// Takes over a switch a previous daemon left between its two batches
/// (docs/abi.md §9): finished now when its flush acks are in (`ACKED`:
/// the `FLUSH_ACKED` record went to the dead daemon, so none comes for
/// this one), else held with the switches awaiting their acks
/// (`TRIGGERED`), to be finished on the record as this daemon's own are.
/// Left alone, it would wait for the device's fallback.
fn adopt(dev: &DevNode, store: &Store, p: u32, awaiting: &mut Awaiting) {
    let t0 = Instant::now();
    match handshake::adopt(&mut &*dev, p) {
        Ok(Some(pending)) => {
            tracing::info!(
                partition = p,
                "adopting a switch a previous daemon left between its two batches"
            );
            let outcome = handshake::resume(&mut &*dev, &pending, &mut 0);
            record(store, (p, Some(pending.ctx), t0, outcome), awaiting);
        }
        // Moved on since the status was read (e.g. the fallback finished it).
        Ok(None) => {}
        Err(e) => record(store, (p, None, t0, Err(e)), awaiting),
    }
}
