//! The device engine: programs the device, keeps the daemon's tables in
//! step with it, and runs two threads — the interrupt thread (poll, read,
//! handshakes, acks) and a worker (drains, context table, retiring).
//!
//! # Start-up and crash recovery
//! [`Engine::start`] opens the interrupt handle first (so every record
//! raised from then on is seen), programs the device, starts the interrupt
//! thread (which at once runs any handshake left `REQUESTED`; a switch
//! abandoned half-way by a killed daemon is finished by the device's
//! fallback), loads the persisted retired set and rebuilds the context
//! table from the device: a destroyed context already persisted is only
//! released, one not yet persisted is read, persisted and released. Only
//! then does the worker start and `start` return.
//!
//! # Stream drains
//! A watermark or overflow interrupt makes the worker drain that ring
//! until it is empty ([`drain`] says why it loops); every
//! `drain_interval` the worker also drains every ring that holds records,
//! so a record below the watermark (which raises nothing) waits at most
//! that long.

pub mod drain;
pub mod handshakes;
pub mod irq;
pub mod program;
pub mod samples;
pub mod worker;

use gpupm_client::cpus::CpuList;
use gpupm_client::{DevError, DevNode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use self::drain::Rings;
use self::worker::{Work, Worker};
use crate::config::Programming;
use crate::planes::Planes;
use crate::sampling::drain::DevSampler;
use crate::store::retired::RetiredError;
use crate::store::Store;

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A device-node operation failed.
    #[error(transparent)]
    Dev(#[from] DevError),
    /// The node is not a gpupm device.
    #[error("the node is not a gpupm device (ID {0:#010x})")]
    NotAGpupmDevice(u32),
    /// The device speaks another ABI major version.
    #[error("device ABI {device} is incompatible with this gpupmd (ABI {daemon}); install a matching gpupmd")]
    AbiMismatch {
        /// Device's version.
        device: String,
        /// Daemon's version.
        daemon: String,
    },
    /// The device refused a configured value.
    #[error("the device refused the configured {what}")]
    Refused {
        /// What.
        what: String,
        /// The device's answer.
        #[source]
        source: DevError,
    },
    /// The configured trigger period does not fit the period register.
    #[error("the configured trigger period of {us} µs is {cycles} cycles, more than the 32-bit register holds")]
    PeriodTooLong {
        /// The period.
        us: u64,
        /// In device cycles.
        cycles: u64,
    },
    /// Persisting a retired context failed.
    #[error(transparent)]
    Retired(#[from] RetiredError),
    /// A thread could not be started.
    #[error("cannot start an engine thread")]
    Thread(#[source] std::io::Error),
}

/// The running engine.
#[derive(Debug)]
pub struct Engine {
    dev: Arc<DevNode>,
    /// Woken at stop: the sampling thread may sleep on it.
    sampler: Arc<DevSampler>,
    /// Woken at stop: the RI drain thread sleeps while no session is open.
    ri: Arc<crate::ri::RiUnit>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Books the retired contexts a previous daemon persisted (an unreadable
/// file is skipped with a warning).
fn restore_retired(store: &Store) -> Result<(), EngineError> {
    let (persisted, bad) = store.retired_files().load_all()?;
    for path in bad {
        tracing::warn!(path = %path.display(), "ignoring an unreadable retired-context file");
    }
    for rec in &persisted {
        store.ctx_retired(
            rec.ctx,
            rec.created_cycle,
            rec.vm,
            rec.retired_cycle,
            rec.tenancy,
        );
    }
    Ok(())
}

impl Engine {
    /// Programs the device, reconciles with it and starts the threads;
    /// the worker drains every non-empty ring each `drain_interval`.
    pub fn start(
        dev: Arc<DevNode>,
        store: Arc<Store>,
        planes: &Planes,
        program: Programming,
        drain_interval: Option<Duration>,
        device_cpus: Option<CpuList>,
    ) -> Result<Engine, EngineError> {
        let reader = dev.interrupts()?;
        let partitions = program::configured_partitions(&dev)?;
        store.set_topology(Default::default(), partitions.clone());
        program::program(&dev, &program, store.identity().clock_khz, &partitions)?;
        planes.ranges.start(&partitions)?;
        tracing::info!(?program, "device programmed");

        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (sample_tx, sample_rx) = mpsc::channel();
        let irq = {
            let (dev, store, stop) = (Arc::clone(&dev), Arc::clone(&store), Arc::clone(&stop));
            let planes = planes.clone();
            crate::affinity::spawn_device_thread("gpupmd-irq", device_cpus, move || {
                let to = irq::Handoff {
                    work: &tx,
                    samples: &sample_tx,
                };
                irq::run(&dev, &store, &planes, reader, to, &stop);
                stop.store(true, Ordering::Release);
            })
            .map_err(EngineError::Thread)?
        };
        let mut engine = Engine {
            dev: Arc::clone(&dev),
            sampler: Arc::clone(&planes.sampler),
            ri: Arc::clone(&planes.ri),
            stop: Arc::clone(&stop),
            threads: vec![irq],
        };
        let sampler = {
            let (planes, stop) = (planes.clone(), Arc::clone(&stop));
            thread::Builder::new()
                .name("gpupmd-samples".into())
                .spawn(move || samples::run(&planes, &sample_rx, &stop))
                .map_err(EngineError::Thread)
        };
        match sampler {
            Ok(t) => engine.threads.push(t),
            Err(e) => {
                engine.stop();
                return Err(e);
            }
        }

        if let Err(e) = planes.ri.reclaim() {
            engine.stop();
            return Err(e.into());
        }
        match crate::ri::start(&planes.ri, &stop) {
            Ok(t) => engine.threads.push(t),
            Err(e) => {
                engine.stop();
                return Err(EngineError::Thread(e));
            }
        }

        restore_retired(&store)?;
        let mut rings = Rings::new(drain_interval.is_some());
        if rings.follow(&planes.mirror) {
            tracing::info!("drains read the stream records from the device's commit mirror");
        }
        let mut worker = Worker {
            dev: &dev,
            store: &store,
            planes,
            program: &program,
            rings,
        };
        if let Err(e) = worker.resync() {
            engine.stop();
            return Err(e);
        }
        let rings = std::mem::take(&mut worker.rings);
        let work = {
            let stop = Arc::clone(&stop);
            let planes = planes.clone();
            thread::Builder::new()
                .name("gpupmd-work".into())
                .spawn(move || {
                    let mut worker = Worker {
                        dev: &dev,
                        store: &store,
                        planes: &planes,
                        program: &program,
                        rings,
                    };
                    work_loop(&mut worker, &rx, &stop, drain_interval);
                    stop.store(true, Ordering::Release);
                })
                .map_err(EngineError::Thread)?
        };
        engine.threads.push(work);
        Ok(engine)
    }

    /// Whether both threads still run.
    pub fn is_running(&self) -> bool {
        !self.stop.load(Ordering::Acquire) && self.threads.iter().all(|t| !t.is_finished())
    }

    /// Stops and joins the threads.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if !self.threads.is_empty() {
            irq::wake(&self.dev);
            self.sampler.wake();
            self.ri.wake();
        }
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!("an engine thread panicked");
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Longest the worker waits for work before looking at `stop` again.
const IDLE_WAIT: Duration = Duration::from_millis(100);

fn work_loop(
    worker: &mut Worker<'_>,
    rx: &Receiver<Work>,
    stop: &AtomicBool,
    drain_interval: Option<Duration>,
) {
    let mut items = Vec::new();
    let mut failures = 0u32;
    let mut next_sweep = drain_interval.map(|d| Instant::now() + d);
    while !stop.load(Ordering::Acquire) {
        let wait = next_sweep.map_or(IDLE_WAIT, |at| {
            at.saturating_duration_since(Instant::now()).min(IDLE_WAIT)
        });
        match rx.recv_timeout(wait) {
            Ok(w) => items.push(w),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        items.extend(rx.try_iter());
        if let (Some(at), Some(every)) = (next_sweep, drain_interval) {
            let now = Instant::now();
            if now >= at {
                items.push(Work::DrainNonEmpty);
                next_sweep = Some(now + every);
            }
        }
        if items.is_empty() {
            continue;
        }
        match worker.run(&items) {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                tracing::error!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "device work failed; resynchronising"
                );
                if failures > 50 {
                    break;
                }
                if let Err(e) = worker.resync() {
                    tracing::error!(
                        error = gpupm_fusemount::logging::one_line(e),
                        "resynchronising failed"
                    );
                }
            }
        }
        items.clear();
    }
}
