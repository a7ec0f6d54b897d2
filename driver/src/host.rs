//! Host software for an in-process device: services interrupts the way the
//! daemon does through the node — runs each requested context/VM switch
//! handshake (the daemon's own sequence, [`gpupm_client::handshake`], with
//! the model as its register-batch executor), releases destroyed contexts'
//! blocks once read, and drains stream rings. Used by the simulator, the
//! benchmarks and the tests.

use std::time::Instant;

use gpupm_client::handshake::{self, Outcome, RegisterBatch};
use gpupm_client::ops::reg32;
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::RegOp;
use gpupm_uapi::regs::{self as r, ctx_cmd, hs_state, part_status, trig_cmd};

use crate::model::{Device, DeviceError};

/// What one [`Host::service`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Serviced {
    /// Handshakes completed by the host.
    pub handshakes: u64,
    /// Stream records drained.
    pub drained: u64,
    /// Contexts released.
    pub released: u64,
}

/// Host-side driver state.
#[derive(Debug, Default)]
pub struct Host {
    cursor: u64,
    records: Vec<InterruptRecord>,
    /// Release destroyed contexts' blocks (the daemon does after persisting).
    pub release_destroyed: bool,
}

/// The model as the handshake's register-batch executor: a failed batch
/// names the op that failed and changed nothing.
impl RegisterBatch for Device {
    type Error = (usize, DeviceError);

    fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), Self::Error> {
        Device::batch(self, ops)
    }

    fn read(&mut self, offset: u64) -> Result<u64, Self::Error> {
        let width = gpupm_client::ops::width_of(offset);
        self.read_reg(offset, width).map_err(|e| (0, e.into()))
    }

    fn let_time_pass(&mut self) -> Result<(), Self::Error> {
        pass_time(self).map_err(|e| (0, e))
    }
}

impl Host {
    /// A host that releases destroyed contexts.
    pub fn new() -> Self {
        Host {
            release_destroyed: true,
            ..Default::default()
        }
    }

    /// Handles every interrupt raised since the last call.
    pub fn service(&mut self, dev: &mut Device) -> Result<Serviced, (usize, DeviceError)> {
        let mut done = Serviced::default();
        self.records.clear();
        self.cursor = dev.interrupts_since(self.cursor, &mut self.records);
        let mut handled = 0;
        for i in 0..self.records.len() {
            let rec = self.records[i];
            handled |= rec.source;
            match rec.source {
                source::SWITCH_REQUESTED if handshake(dev, rec.partition)? => {
                    done.handshakes += 1;
                }
                source::CTX_DESTROYED
                    if self.release_destroyed
                        && dev
                            .write_reg(r::ctx(rec.arg, r::CTX_CMD), 4, u64::from(ctx_cmd::RELEASE))
                            .is_ok() =>
                {
                    done.released += 1;
                }
                source::STREAM_WATERMARK | source::STREAM_OVERFLOW => {
                    done.drained += drain(dev, rec.partition)?
                }
                _ => {}
            }
        }
        if handled != 0 {
            dev.write_reg(r::INTR_ACK, 4, u64::from(handled))
                .map_err(|e| (0, e.into()))?;
        }
        Ok(done)
    }
}

/// Runs the full switch handshake on partition `p` if one is pending,
/// letting time pass with [`pass_time`] while the flush acks travel.
/// Returns whether the host completed it: false when nothing was pending,
/// or when the CCUs' flush acks did not all arrive within
/// [`handshake::ACK_POLLS`] polls or the device's fallback finished the
/// switch meanwhile.
pub fn handshake(dev: &mut Device, p: u32) -> Result<bool, (usize, DeviceError)> {
    handshake_with(dev, p, pass_time)
}

/// [`handshake`] with the caller's way of letting time pass (a test that
/// drives a real-time device with its own wall clock).
pub fn handshake_with(
    dev: &mut Device,
    p: u32,
    pass_time: impl FnMut(&mut Device) -> Result<(), DeviceError>,
) -> Result<bool, (usize, DeviceError)> {
    let outcome = handshake::run(&mut WithClock { dev, pass_time }, p, &mut 0)?;
    Ok(matches!(outcome, Outcome::Done { .. }))
}

/// Lets device time pass while the host waits for flush acks: a step clock
/// is advanced by the largest ack latency (only host software moves it), a
/// real-time clock is brought up to wall time.
pub fn pass_time(dev: &mut Device) -> Result<(), DeviceError> {
    if reg32(dev.read_reg(r::DEVICE_STATUS, 4)?) & r::device_status::STEP_CLOCK != 0 {
        dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))?;
    } else {
        dev.tick(Instant::now());
    }
    Ok(())
}

/// Step 5: polls `PART_CCU_ACKED` of partition `p` (last read `acked`)
/// until every CCU in `assigned` acked, at most `polls` times, calling
/// `pass_time` between polls. Returns whether all acked.
pub fn wait_for_acks(
    dev: &mut Device,
    p: u32,
    acked: u64,
    assigned: u64,
    polls: u32,
    pass_time: impl FnMut(&mut Device) -> Result<(), DeviceError>,
) -> Result<bool, (usize, DeviceError)> {
    handshake::wait_for_acks(&mut WithClock { dev, pass_time }, p, acked, assigned, polls)
}

/// The model with the host's way of letting device time pass, as the
/// handshake's register-batch executor.
struct WithClock<'a, F> {
    dev: &'a mut Device,
    pass_time: F,
}

impl<F: FnMut(&mut Device) -> Result<(), DeviceError>> RegisterBatch for WithClock<'_, F> {
    type Error = (usize, DeviceError);

    fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), Self::Error> {
        RegisterBatch::batch(self.dev, ops)
    }

    fn read(&mut self, offset: u64) -> Result<u64, Self::Error> {
        RegisterBatch::read(self.dev, offset)
    }

    fn let_time_pass(&mut self) -> Result<(), Self::Error> {
        (self.pass_time)(self.dev).map_err(|e| (0, e))
    }
}

/// Consumes every record in partition `p`'s stream ring; returns how many.
pub fn drain(dev: &mut Device, p: u32) -> Result<u64, (usize, DeviceError)> {
    let head = dev
        .read_reg(r::part(p, r::PART_STREAM_HEAD), 4)
        .map_err(|e| (0, e.into()))?;
    let tail = dev
        .read_reg(r::part(p, r::PART_STREAM_TAIL), 4)
        .map_err(|e| (0, e.into()))?;
    dev.write_reg(r::part(p, r::PART_STREAM_TAIL), 4, head)
        .map_err(|e| (0, e.into()))?;
    Ok(u64::from(reg32(head).wrapping_sub(reg32(tail))))
}

/// Flushes everything into memory blocks: ULC partials, CCU banks and RC
/// commits on every configured partition whose handshake is idle.
pub fn flush_all(dev: &mut Device) -> Result<(), DeviceError> {
    let mut mask = 0u64;
    for p in 0..r::MAX_PARTITION_SLOTS {
        if reg32(dev.read_reg(r::part(p, r::PART_STATUS), 4)?) & part_status::CONFIGURED != 0 {
            mask |= 1 << p;
        }
    }
    dev.write_reg(r::TRIG_TARGET, 4, mask)?;
    dev.write_reg(
        r::TRIG_CMD,
        4,
        u64::from(trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER),
    )?;
    Ok(())
}

/// Completes every switch in flight (the host's part where it can, the
/// device's fallback otherwise) and flushes everything into the blocks, so
/// that blocks can be compared with the ledger.
pub fn settle(dev: &mut Device, host: &mut Host) -> Result<(), DeviceError> {
    for _ in 0..1_000 {
        host.service(dev).map_err(|(_, e)| e)?;
        let mut waiting = 0u64;
        for p in 1..r::MAX_PARTITION_SLOTS {
            let status = reg32(dev.read_reg(r::part(p, r::PART_STATUS), 4)?);
            match status & part_status::STATE_MASK {
                hs_state::IDLE => {}
                hs_state::REQUESTED => {
                    handshake(dev, p).map_err(|(_, e)| e)?;
                }
                _ => {
                    waiting = waiting.max(dev.read_reg(r::part(p, r::PART_SWITCH_TIMEOUT), 4)? + 1)
                }
            }
        }
        if waiting == 0 {
            return flush_all(dev);
        }
        if reg32(dev.read_reg(r::DEVICE_STATUS, 4)?) & r::device_status::STEP_CLOCK == 0 {
            return flush_all(dev);
        }
        dev.advance(waiting)?;
    }
    flush_all(dev)
}
