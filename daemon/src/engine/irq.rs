//! The interrupt thread: waits on `card0` with poll, runs every requested
//! handshake at once on this thread (two register batches, far inside the
//! device's fallback timeout), hands everything else to the worker, and
//! acknowledges what it read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use gpupm_client::handshake::{self, Outcome};
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

/// Runs until `stop` is set or the node keeps failing.
pub fn run(
    dev: &DevNode,
    store: &Store,
    mut reader: IntrReader,
    work: &Sender<Work>,
    stop: &AtomicBool,
) {
    let mut recs: Vec<InterruptRecord> = Vec::new();
    let mut failures = 0;
    sweep(dev, store);
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
            sweep(dev, store);
            continue;
        }
        let t0 = Instant::now();
        let mut unacked = recs.iter().fold(0, |seen, rec| seen | rec.source);
        for rec in recs.iter().filter(|r| r.source == source::SWITCH_REQUESTED) {
            handshake_on(dev, store, rec.partition, t0, &mut unacked);
        }
        if batch.missed > 0 {
            tracing::warn!(
                missed = batch.missed,
                "interrupt records were dropped by the device; resynchronising"
            );
            sweep(dev, store);
            send(work, stop, Work::Resync);
        }
        for rec in &recs {
            match rec.source {
                source::STREAM_WATERMARK | source::STREAM_OVERFLOW => {
                    send(work, stop, Work::Drain(rec.partition))
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

fn handshake_on(dev: &DevNode, store: &Store, p: u32, t0: Instant, ack: &mut u32) {
    match handshake::run(&mut &*dev, p, ack) {
        Ok(Outcome::Done { response_cycles }) => {
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            store.record_handshake(ns, response_cycles);
        }
        Ok(Outcome::NotRequested) => {}
        Ok(Outcome::Abandoned) => tracing::warn!(
            partition = p,
            "handshake abandoned; the device's fallback completes it"
        ),
        Err(e) => tracing::error!(
            partition = p,
            error = format!("{:#}", anyhow::Error::new(e)),
            "handshake failed"
        ),
    }
}

/// Runs the handshake on every partition that waits for one.
fn sweep(dev: &DevNode, store: &Store) {
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
            handshake_on(dev, store, p, Instant::now(), &mut 0);
        }
    }
}
