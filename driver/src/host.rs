//! Host software for an in-process device: services interrupts the way the
//! daemon does through the node — runs each requested context/VM switch
//! handshake with two register batches, releases destroyed contexts'
//! blocks once read, and drains stream rings. Used by the simulator, the
//! benchmarks and the tests.

// Register values of 32-bit registers are read as u64 and narrowed back.
#![allow(clippy::cast_possible_truncation)]

use std::time::Instant;

use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::{reg_op, RegOp};
use gpupm_uapi::regs::{self as r, ctx_cmd, hs_state, part_ctrl, part_status, rc_cmd, trig_cmd};

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

fn read(offset: u64, width: u32) -> RegOp {
    RegOp {
        offset,
        value: 0,
        op: reg_op::READ,
        width,
    }
}

fn write(offset: u64, value: u64) -> RegOp {
    RegOp {
        offset,
        value,
        op: reg_op::WRITE,
        width: 4,
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
/// Returns whether it did: false when nothing was pending, or when the
/// CCUs' flush acks did not all arrive within [`ACK_POLLS`] polls or the
/// device's fallback finished the switch meanwhile.
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
    let status = dev
        .read_reg(r::part(p, r::PART_STATUS), 4)
        .map_err(|e| (0, e.into()))?;
    if status as u32 & part_status::STATE_MASK != hs_state::REQUESTED {
        return Ok(false);
    }
    // Steps 1-5: pause context, pause transfers, trigger with ULC flush,
    // flush request; read back who comes in and which CCUs acked.
    let mut first = [
        read(r::part(p, r::PART_NEXT_VM), 4),
        read(r::part(p, r::PART_NEXT_CTX), 4),
        write(r::part(p, r::PART_CTRL), u64::from(part_ctrl::CTX_PAUSE)),
        write(r::part(p, r::PART_CTRL), u64::from(part_ctrl::ALL)),
        write(r::TRIG_TARGET, 1 << p),
        write(
            r::TRIG_CMD,
            u64::from(trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER | trig_cmd::FLUSH_REQ),
        ),
        read(r::part(p, r::PART_CCU_ACKED), 8),
        read(r::part(p, r::PART_CCU_ASSIGNED), 8),
    ];
    dev.batch(&mut first)?;
    let (next_vm, next_ctx) = (first[0].value, first[1].value);
    // Step 5: the acks arrive after device time passes.
    let (acked, assigned) = (first[6].value, first[7].value);
    if !wait_for_acks(dev, p, acked, assigned, ACK_POLLS, pass_time)? {
        return Ok(false);
    }
    // Steps 6-7: commit, re-point to the incoming blocks, unpause.
    let mut second = [
        write(r::part(p, r::PART_RC_BIND_VM), next_vm),
        write(r::part(p, r::PART_RC_BIND_CTX), next_ctx),
        write(
            r::part(p, r::PART_RC_CMD),
            u64::from(rc_cmd::COMMIT | rc_cmd::REPOINT),
        ),
        write(r::part(p, r::PART_CTRL), 0),
    ];
    if let Err(e) = dev.batch(&mut second) {
        // Refused as a whole: if the partition left ACKED, the device's
        // fallback finished the switch while the host waited for acks.
        let status = dev
            .read_reg(r::part(p, r::PART_STATUS), 4)
            .map_err(|e| (0, e.into()))?;
        if status as u32 & part_status::STATE_MASK != hs_state::ACKED {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(true)
}

/// Reads of `PART_CCU_ACKED` before a handshake gives up on the flush acks
/// (the device's fallback then finishes the switch).
pub const ACK_POLLS: u32 = 10_000;

/// Lets device time pass while the host waits for flush acks: a step clock
/// is advanced by the largest ack latency (only host software moves it), a
/// real-time clock is brought up to wall time.
pub fn pass_time(dev: &mut Device) -> Result<(), DeviceError> {
    if dev.read_reg(r::DEVICE_STATUS, 4)? as u32 & r::device_status::STEP_CLOCK != 0 {
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
    mut acked: u64,
    assigned: u64,
    polls: u32,
    mut pass_time: impl FnMut(&mut Device) -> Result<(), DeviceError>,
) -> Result<bool, (usize, DeviceError)> {
    for _ in 0..polls {
        if acked & assigned == assigned {
            return Ok(true);
        }
        pass_time(dev).map_err(|e| (0, e))?;
        acked = dev
            .read_reg(r::part(p, r::PART_CCU_ACKED), 8)
            .map_err(|e| (0, e.into()))?;
    }
    Ok(acked & assigned == assigned)
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
    Ok(u64::from((head as u32).wrapping_sub(tail as u32)))
}

/// Flushes everything into memory blocks: ULC partials, CCU banks and RC
/// commits on every configured partition whose handshake is idle.
pub fn flush_all(dev: &mut Device) -> Result<(), DeviceError> {
    let mut mask = 0u64;
    for p in 0..r::MAX_PARTITION_SLOTS {
        if dev.read_reg(r::part(p, r::PART_STATUS), 4)? as u32 & part_status::CONFIGURED != 0 {
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
            let status = dev.read_reg(r::part(p, r::PART_STATUS), 4)? as u32;
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
        if dev.read_reg(r::DEVICE_STATUS, 4)? as u32 & r::device_status::STEP_CLOCK == 0 {
            return flush_all(dev);
        }
        dev.advance(waiting)?;
    }
    flush_all(dev)
}
