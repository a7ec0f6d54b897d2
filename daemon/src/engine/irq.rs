//! The interrupt thread: waits on `card0` with poll, runs every requested
//! handshake on this thread (two register batches, far inside the
//! device's fallback timeout), hands everything else to the worker, and
//! acknowledges what it read.
//!
//! The first batch of a handshake ends with the flush request; the CCUs'
//! acks take some device cycles to arrive. Rather than spin on
//! `PART_CCU_ACKED` (which on a step clock would never see them: only the
//! clock's owner moves it), the thread leaves the switch awaiting its acks
//! and finishes it (second batch) on the device's `FLUSH_ACKED` record,
//! meanwhile serving other partitions' requests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use gpupm_client::handshake::{self, Outcome, Pending};
use gpupm_client::ops::reg32;
use gpupm_client::{DevNode, IntrReader};
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::regs::{self as r, hs_state, part_status};

use super::worker::Work;
use crate::store::Store;

/// Longest wait for a record; on timeout the partitions are swept for a
/// request whose record was missed.
const POLL: Duration = Duration::from_millis(100);
/// Consecutive failures of the node after which the thread gives up.
const MAX_FAILURES: u32 = 50;

/// Switches awaiting their flush acks, by partition slot: the rest of the
/// handshake and when its request was read.
type Awaiting = BTreeMap<u32, (Pending, Instant)>;

/// Where the interrupt thread hands work off.
#[derive(Debug, Clone, Copy)]
pub struct Handoff<'a> {
    /// The worker (rings, contexts, resets).
    pub work: &'a Sender<Work>,
    /// The sample-drain thread (partitions whose sample buffers need it).
    pub samples: &'a Sender<u32>,
}

/// Runs until `stop` is set or the node keeps failing.
pub fn run(
    dev: &DevNode,
    store: &Store,
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
        let batch = match reader.wait(POLL, &mut recs) {
            Ok(b) => b,
            Err(e) => {
                failures += 1;
                tracing::error!(
                    error = format!("{:#}", anyhow::Error::new(e)),
                    "waiting for interrupts failed"
                );
                if failures >= MAX_FAILURES {
                    break;
                }
                std::thread::sleep(POLL);
                continue;
            }
        };
        failures = 0;
        if recs.is_empty() {
            sweep(dev, store, &mut awaiting);
            continue;
        }
        let t0 = Instant::now();
        let mut unacked = recs.iter().fold(0, |seen, rec| seen | rec.source);
        for rec in &recs {
            match rec.source {
                source::SWITCH_REQUESTED => {
                    handshake_on(dev, store, rec.partition, t0, &mut unacked, &mut awaiting)
                }
                source::FLUSH_ACKED => {
                    resume_on(dev, store, rec.partition, &mut unacked, &mut awaiting)
                }
                _ => {}
            }
        }
        if batch.missed > 0 {
            tracing::warn!(
                missed = batch.missed,
                "interrupt records were dropped by the device; resynchronising"
            );
            sweep(dev, store, &mut awaiting);
            send(work, stop, Work::Resync);
        }
        for rec in &recs {
            match rec.source {
                source::STREAM_WATERMARK | source::STREAM_OVERFLOW => {
                    send(work, stop, Work::Drain(rec.partition))
                }
                source::SAMPLE_WATERMARK | source::SAMPLE_OVERFLOW => {
                    send_drain(to.samples, stop, rec.partition)
                }
                source::CTX_CREATED => send(work, stop, Work::Created(rec.arg)),
                source::CTX_DESTROYED => send(work, stop, Work::Destroyed(rec.arg)),
                source::DEVICE_RESET => send(work, stop, Work::Reset),
                source::SWITCH_FALLBACK => {
                    let fallbacks = store.record_fallback();
                    crate::health::handshake_fallback(rec.partition, fallbacks);
                }
                _ => {}
            }
        }
        if unacked != 0 {
            if let Err(e) = dev.write32(r::INTR_ACK, unacked) {
                tracing::warn!(
                    error = format!("{:#}", anyhow::Error::new(e)),
                    "acknowledging interrupts failed"
                );
            }
        }
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

fn handshake_on(
    dev: &DevNode,
    store: &Store,
    p: u32,
    t0: Instant,
    ack: &mut u32,
    awaiting: &mut Awaiting,
) {
    let outcome = handshake::run_polling(&mut &*dev, p, ack, 0);
    record(store, p, t0, outcome, awaiting);
}

/// Finishes partition `p`'s switch if it awaited its flush acks.
fn resume_on(dev: &DevNode, store: &Store, p: u32, ack: &mut u32, awaiting: &mut Awaiting) {
    if let Some((pending, t0)) = awaiting.remove(&p) {
        let outcome = handshake::resume(&mut &*dev, &pending, ack);
        record(store, p, t0, outcome, awaiting);
    }
}

fn record(
    store: &Store,
    p: u32,
    t0: Instant,
    outcome: Result<Outcome, gpupm_client::DevError>,
    awaiting: &mut Awaiting,
) {
    match outcome {
        Ok(Outcome::Done { response_cycles }) => {
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            store.record_handshake(ns, response_cycles);
        }
        Ok(Outcome::AwaitingAcks(pending)) => {
            awaiting.insert(p, (pending, t0));
        }
        Ok(Outcome::NotRequested) => {}
        Ok(Outcome::Abandoned) => tracing::warn!(
            partition = p,
            "handshake abandoned; the device's fallback completed it"
        ),
        Err(e) => tracing::error!(
            partition = p,
            error = format!("{:#}", anyhow::Error::new(e)),
            "handshake failed"
        ),
    }
}

/// Runs the handshake on every partition that waits for one, and finishes
/// every switch whose acks arrived (a `FLUSH_ACKED` record may have been
/// missed).
fn sweep(dev: &DevNode, store: &Store, awaiting: &mut Awaiting) {
    let waiting: Vec<u32> = awaiting.keys().copied().collect();
    for p in waiting {
        resume_on(dev, store, p, &mut 0, awaiting);
    }
    let parts: Vec<u32> = store.partitions().into_iter().filter(|&p| p != 0).collect();
    let offsets: Vec<u64> = parts.iter().map(|&p| r::part(p, r::PART_STATUS)).collect();
    let status = match dev.read_many(&offsets) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                error = format!("{:#}", anyhow::Error::new(e)),
                "reading partition status failed"
            );
            return;
        }
    };
    for (&p, s) in parts.iter().zip(status) {
        if reg32(s) & part_status::STATE_MASK == hs_state::REQUESTED {
            handshake_on(dev, store, p, Instant::now(), &mut 0, awaiting);
        }
    }
}
