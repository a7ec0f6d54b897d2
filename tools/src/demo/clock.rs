//! Driving the demo device's step clock at wall-clock pace, and bringing
//! the device and the daemon to rest before the final totals are read.
//!
//! The driver runs with `--clock step`, so device time passes only when the
//! demo advances it: it advances in chunks of at most half the switch
//! timeout and, after each chunk, waits until every partition's handshake
//! is idle again (the daemon has serviced every switch), so no switch falls
//! back and the ledger and the totals describe the same instant.

use std::time::{Duration, Instant};

use gpupm_client::ops::reg32;
use gpupm_client::{stepclock, DevNode};
use gpupm_uapi::regs::{self as r, ctx_state, MAX_CONTEXTS};

use super::procs::Proc;
use crate::error::{one_line, CliError, CliResult};

use crate::progress::Spinner;

/// Longest the demo waits for the daemon to go idle.
const IDLE_PATIENCE: Duration = Duration::from_secs(30);

/// The step clock and the partitions it drives.
#[derive(Debug)]
pub struct Stepper {
    /// The device node.
    pub dev: DevNode,
    /// Configured partition slots.
    pub parts: Vec<u32>,
    khz: u64,
    chunk: u64,
    started: Instant,
    advanced: u64,
    /// Wall time spent behind real time (the model was slower).
    pub behind_ms: u64,
}

fn dev_err(e: gpupm_client::DevError) -> CliError {
    CliError::runtime(one_line(e))
}

impl Stepper {
    /// A stepper on `dev`.
    pub fn new(dev: DevNode) -> CliResult<Stepper> {
        let id = dev.identity().map_err(dev_err)?;
        if id.step_clock == 0 {
            return Err(CliError::usage(
                "the demo device must run with --clock step",
            ));
        }
        let parts = stepclock::configured_partitions(&dev).map_err(dev_err)?;
        let timeout = parts
            .iter()
            .filter_map(|&p| dev.read32(r::part(p, r::PART_SWITCH_TIMEOUT)).ok())
            .min()
            .unwrap_or(1 << 20);
        let khz = u64::from(id.clock_khz.max(1));
        Ok(Stepper {
            dev,
            parts,
            khz,
            chunk: (u64::from(timeout) / 2).clamp(1024, khz),
            started: Instant::now(),
            advanced: 0,
            behind_ms: 0,
        })
    }

    /// Restarts the pacing reference (call when the view starts).
    pub fn restart(&mut self) {
        self.started = Instant::now();
        self.advanced = 0;
    }

    /// Advances device time up to the wall-clock time elapsed, spending at
    /// most `budget`, waiting for the daemon after each chunk.
    pub fn catch_up(&mut self, daemon: &mut Proc, budget: Duration) -> CliResult {
        let until = Instant::now() + budget;
        let elapsed_us = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let target = elapsed_us.saturating_mul(self.khz) / 1000;
        while self.advanced < target {
            let step = self.chunk.min(target - self.advanced);
            self.dev.advance(step).map_err(dev_err)?;
            self.advanced += step;
            self.wait_idle(daemon)?;
            if Instant::now() >= until {
                break;
            }
        }
        self.behind_ms = (target - self.advanced.min(target)) * 1000 / self.khz / 1000;
        Ok(())
    }

    /// Waits until every partition's handshake is idle.
    pub fn wait_idle(&self, daemon: &mut Proc) -> CliResult {
        let deadline = Instant::now() + IDLE_PATIENCE;
        let mut spins = 0u32;
        // The demo owns the step clock, so it is the one that lets the
        // flush acks of a triggered switch arrive; the daemon only waits.
        while !stepclock::settle_step(&self.dev, &self.parts).map_err(dev_err)? {
            check_alive(daemon)?;
            if Instant::now() > deadline {
                return Err(CliError::runtime(
                    "the daemon did not finish its handshakes within 30 s",
                ));
            }
            spins += 1;
            if spins > 20 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Commits everything (ULC partials, CCU banks, RCs) on every
    /// configured partition and the system channel in one register batch,
    /// then waits until the daemon is idle: handshakes idle, no stream ring
    /// at its watermark, destroyed contexts retired.
    pub fn flush_and_settle(&self, daemon: &mut Proc) -> CliResult {
        stepclock::flush_all(&self.dev, &self.parts).map_err(dev_err)?;
        let mut spin = Spinner::new("waiting for the daemon to drain");
        let deadline = Instant::now() + IDLE_PATIENCE;
        loop {
            spin.tick();
            self.wait_idle(daemon)?;
            if self.drained()? && !self.any_destroyed()? {
                return Ok(());
            }
            check_alive(daemon)?;
            if Instant::now() > deadline {
                return Err(CliError::runtime(
                    "the daemon did not come to rest (stream rings, retired contexts) within 30 s",
                ));
            }
            std::thread::yield_now();
        }
    }

    /// No ring holds a drain's worth of records: the daemon drains a ring
    /// when it reaches its watermark (or overflows), so a fill below the
    /// watermark is all it leaves behind at rest.
    fn drained(&self) -> CliResult<bool> {
        let offs: Vec<u64> = self
            .parts
            .iter()
            .flat_map(|&p| {
                [
                    r::part(p, r::PART_STREAM_HEAD),
                    r::part(p, r::PART_STREAM_TAIL),
                    r::part(p, r::PART_STREAM_WATERMARK),
                ]
            })
            .collect();
        let v = self.dev.read_many(&offs).map_err(dev_err)?;
        Ok(v.chunks_exact(3)
            .all(|x| reg32(x[0]).wrapping_sub(reg32(x[1])) < reg32(x[2]).max(1)))
    }

    fn any_destroyed(&self) -> CliResult<bool> {
        let offs: Vec<u64> = (1..MAX_CONTEXTS).map(|c| r::ctx(c, r::CTX_STATE)).collect();
        Ok(self
            .dev
            .read_many(&offs)
            .map_err(dev_err)?
            .iter()
            .any(|&s| reg32(s) == ctx_state::DESTROYED))
    }
}

/// Fails when the daemon has exited.
pub fn check_alive(daemon: &mut Proc) -> CliResult {
    match daemon.exited() {
        Some(st) => Err(CliError::runtime(format!(
            "gpupmd exited ({st}): {}",
            daemon.why()
        ))),
        None => Ok(()),
    }
}
