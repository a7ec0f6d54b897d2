//! Identifying the device and programming it from the configuration.

use gpupm_client::ops::{read32, reg32, write32};
use gpupm_client::DevNode;
use gpupm_uapi::ioctl::{Identity, RegOp};
use gpupm_uapi::regs::{self, part_status, trig_ctrl};
use gpupm_uapi::{split_abi_version, ABI_MAJOR, ABI_VERSION};

use super::EngineError;
use crate::config::Programming;
use crate::view::DeviceIdentity;

/// Checks the device's identity and ABI version against the daemon's.
pub fn check_identity(id: &Identity) -> Result<DeviceIdentity, EngineError> {
    if id.magic != regs::DEVICE_MAGIC {
        return Err(EngineError::NotAGpupmDevice(id.magic));
    }
    let (major, minor) = split_abi_version(id.abi_version);
    if major != ABI_MAJOR {
        let (ours, our_minor) = split_abi_version(ABI_VERSION);
        return Err(EngineError::AbiMismatch {
            device: format!("{major}.{minor}"),
            daemon: format!("{ours}.{our_minor}"),
        });
    }
    Ok(DeviceIdentity {
        abi_version: id.abi_version,
        clock_khz: id.clock_khz,
        partitions: id.partitions,
        ccus: id.ccus,
        sms: id.sms,
    })
}

/// Identifies the device behind `dev`.
pub fn identify(dev: &DevNode) -> Result<(DeviceIdentity, bool), EngineError> {
    let id = dev.identity()?;
    Ok((check_identity(&id)?, id.step_clock != 0))
}

/// Configured partition slots, the system slot 0 first.
pub fn configured_partitions(dev: &DevNode) -> Result<Vec<u32>, EngineError> {
    let offsets: Vec<u64> = (0..regs::MAX_PARTITION_SLOTS)
        .map(|p| regs::part(p, regs::PART_STATUS))
        .collect();
    let status = dev.read_many(&offsets)?;
    Ok((0..regs::MAX_PARTITION_SLOTS)
        .zip(status)
        .filter(|&(p, s)| p == 0 || reg32(s) & part_status::CONFIGURED != 0)
        .map(|(p, _)| p)
        .collect())
}

/// Writes the configured trigger settings, masks and ring watermarks.
/// Each group is one atomic batch; a refused value names the register.
pub fn program(
    dev: &DevNode,
    cfg: &Programming,
    clock_khz: u32,
    partitions: &[u32],
) -> Result<(), EngineError> {
    let mut trig = vec![read32(regs::TRIG_CTRL)];
    dev.batch(&mut trig)?;
    let mut ctrl = reg32(trig[0].value);
    let mut ops: Vec<RegOp> = Vec::new();
    if let Some(us) = cfg.period_us {
        let cycles = us.saturating_mul(u64::from(clock_khz)) / 1000;
        let cycles =
            u32::try_from(cycles).map_err(|_| EngineError::PeriodTooLong { us, cycles })?;
        ops.push(write32(regs::TRIG_PERIOD, cycles));
        if cycles == 0 {
            ctrl &= !trig_ctrl::PERIODIC_ENABLE;
        } else {
            ctrl |= trig_ctrl::PERIODIC_ENABLE;
        }
    }
    if let Some(d) = cfg.dither {
        ctrl = if d {
            ctrl | trig_ctrl::DITHER
        } else {
            ctrl & !trig_ctrl::DITHER
        };
    }
    if let Some(t) = cfg.threshold {
        ops.push(write32(regs::TRIG_THRESHOLD, t));
        ctrl |= trig_ctrl::THRESHOLD_ENABLE;
    }
    if !ops.is_empty() || cfg.dither.is_some() {
        ops.push(write32(regs::TRIG_CTRL, ctrl));
        dev.batch(&mut ops)
            .map_err(|e| refused("trigger settings", e))?;
    }
    for &(ccu, word, bits) in &cfg.masks {
        let mut ops = [
            write32(regs::ccu(ccu, regs::CCU_MASK_INDEX), word),
            write32(regs::ccu(ccu, regs::CCU_MASK_DATA), bits),
        ];
        dev.batch(&mut ops)
            .map_err(|e| refused(&format!("mask of CCU {ccu} word {word}"), e))?;
    }
    if let Some(w) = cfg.watermark {
        let mut ops: Vec<RegOp> = partitions
            .iter()
            .map(|&p| write32(regs::part(p, regs::PART_STREAM_WATERMARK), w))
            .collect();
        dev.batch(&mut ops)
            .map_err(|e| refused(&format!("stream watermark {w}"), e))?;
    }
    Ok(())
}

fn refused(what: &str, source: gpupm_client::DevError) -> EngineError {
    EngineError::Refused {
        what: what.into(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_different_abi_major_is_refused_and_a_newer_minor_accepted() {
        let mut id = Identity {
            magic: regs::DEVICE_MAGIC,
            abi_version: (u32::from(ABI_MAJOR) + 1) << 16,
            clock_khz: 1000,
            ..Identity::default()
        };
        let err = check_identity(&id).unwrap_err();
        assert!(matches!(err, EngineError::AbiMismatch { .. }));
        assert!(err.to_string().contains("ABI"), "{err}");
        id.abi_version = u32::from(ABI_MAJOR) << 16 | 0xff;
        assert_eq!(check_identity(&id).unwrap().clock_khz, 1000);
        id.magic = 0;
        assert!(matches!(
            check_identity(&id),
            Err(EngineError::NotAGpupmDevice(0))
        ));
    }
}
