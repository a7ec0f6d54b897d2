//! Decoding and execution of the node's ioctls.
//!
//! The kernel copies in exactly `_IOC_SIZE(cmd)` bytes for `_IOW`/`_IOWR`
//! numbers and copies back the reply bytes for `_IOR`/`_IOWR` (restricted
//! mode), so every argument is decoded from untrusted bytes here with
//! `zerocopy`; a short or wrongly sized buffer is an error, never a panic.
//! Every check runs before the backend is called, so a malformed request
//! changes nothing.

mod cc;
mod ledger;

use gpupm_uapi::ioc;
use gpupm_uapi::ioctl::{
    reg_op, Advance, Identity, RegAccess, RegBatch, Reset, WindowRead, DEVICE_IOCTLS,
    GPUPM_IOC_ADVANCE, GPUPM_IOC_IDENTITY, GPUPM_IOC_LEDGER, GPUPM_IOC_LEDGER_BLOCKS,
    GPUPM_IOC_LEDGER_CALLS, GPUPM_IOC_LEDGER_RANGES, GPUPM_IOC_LEDGER_RI, GPUPM_IOC_REG_BATCH,
    GPUPM_IOC_REG_READ, GPUPM_IOC_REG_WRITE, GPUPM_IOC_RESET, GPUPM_IOC_WAIT_COMMIT,
    IOCTL_STRUCT_VERSION, IOC_MAGIC, MAX_ADVANCE_CYCLES, MAX_BATCH_OPS, WINDOW_READ_MAX,
    WINDOW_READ_NR,
};
use gpupm_uapi::regs;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::backend::DeviceBackend;
use super::error::{malformed, NodeError};
use super::reg_access::{reg_access, NodeKind};

/// What to send back for an ioctl: the syscall's return value (0, or a
/// negative errno when the call fails but still returns data, as a failed
/// batch does with its `failed_index`) and the bytes to copy out.
#[derive(Debug, PartialEq, Eq)]
pub struct IoctlReply {
    /// Return value of the ioctl (`-errno` on a failure with data).
    pub result: i32,
    /// Bytes copied back to the caller's argument.
    pub data: Vec<u8>,
}

impl IoctlReply {
    fn ok<T: IntoBytes + Immutable>(value: &T) -> Self {
        IoctlReply {
            result: 0,
            data: value.as_bytes().to_vec(),
        }
    }
}

/// Runs ioctl `cmd` with argument bytes `input` against `backend`.
pub fn dispatch(
    backend: &mut dyn DeviceBackend,
    cmd: u32,
    input: &[u8],
    out_size: u32,
) -> Result<IoctlReply, NodeError> {
    match cmd {
        GPUPM_IOC_IDENTITY => identity(backend, decode(input)?),
        GPUPM_IOC_REG_BATCH => reg_batch(backend, decode(input)?),
        GPUPM_IOC_REG_READ | GPUPM_IOC_REG_WRITE => single_access(backend, cmd, decode(input)?),
        _ if ioc::ty(cmd) == IOC_MAGIC && ioc::nr(cmd) == WINDOW_READ_NR => {
            window_read(backend, cmd, input)
        }
        GPUPM_IOC_ADVANCE => advance(backend, decode(input)?),
        // The ledger is the emulator's oracle, not part of the device:
        // without --debug-ledger its ioctls do not exist.
        _ if ledger::is_ledger(cmd) && !backend.debug_ledger() => Err(NodeError::UnknownIoctl(cmd)),
        GPUPM_IOC_LEDGER => ledger::totals(backend, decode(input)?),
        GPUPM_IOC_LEDGER_BLOCKS => ledger::blocks(backend, decode(input)?),
        GPUPM_IOC_LEDGER_RI => ledger::ri(backend, decode(input)?),
        GPUPM_IOC_LEDGER_RANGES => ledger::ranges(backend, decode(input)?),
        GPUPM_IOC_LEDGER_CALLS => ledger::calls(backend, decode(input)?),
        GPUPM_IOC_RESET => reset(backend, decode(input)?),
        gpupm_uapi::ioctl::GPUPM_IOC_CC_KEY_EXCHANGE => cc::key_exchange(backend, decode(input)?),
        gpupm_uapi::ioctl::GPUPM_IOC_CC_FINISH => cc::finish(backend, decode(input)?),
        // Parks until a commit: only `NodeCore::ioctl_deferred` serves it.
        GPUPM_IOC_WAIT_COMMIT => Err(malformed("a commit wait cannot be answered at once")),
        // The mirror is the node's: `NodeCore::ioctl` answers it.
        gpupm_uapi::ioctl::GPUPM_IOC_MIRROR_INFO => Err(NodeError::NoMirror),
        _ if ioc::ty(cmd) == IOC_MAGIC
            && DEVICE_IOCTLS
                .iter()
                .any(|&(_, c)| ioc::nr(c) == ioc::nr(cmd)) =>
        {
            Err(malformed(format!(
                "ioctl {cmd:#010x}: known number with wrong size or direction (out size {out_size})"
            )))
        }
        _ => Err(NodeError::UnknownIoctl(cmd)),
    }
}

fn identity(backend: &mut dyn DeviceBackend, arg: Identity) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    let mut id = backend.identity();
    id.version = IOCTL_STRUCT_VERSION;
    Ok(IoctlReply::ok(&id))
}

fn advance(backend: &mut dyn DeviceBackend, mut arg: Advance) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    if arg.cycles == 0 || arg.cycles > MAX_ADVANCE_CYCLES {
        return Err(malformed(format!("advance of {} cycles", arg.cycles)));
    }
    arg.now = backend.advance(arg.cycles)?;
    Ok(IoctlReply::ok(&arg))
}

fn reset(backend: &mut dyn DeviceBackend, arg: Reset) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    if arg.magic != regs::RESET_MAGIC {
        return Err(malformed("reset without RESET_MAGIC"));
    }
    backend.reset()?;
    Ok(IoctlReply {
        result: 0,
        data: Vec::new(),
    })
}

fn reg_batch(backend: &mut dyn DeviceBackend, mut arg: RegBatch) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    let count = arg.count as usize;
    if count == 0 || count > MAX_BATCH_OPS {
        return Err(malformed(format!("batch of {count} ops")));
    }
    // The same rule as a pread/pwrite on card0: a batch must not reach
    // what card0 cannot (the OOB mailbox is the BMC's alone).
    let invalid = arg.ops[..count].iter().position(|op| {
        let size = usize::try_from(op.width).unwrap_or(usize::MAX);
        reg_access(NodeKind::Card, op.offset, size).is_err()
            || !matches!(op.op, reg_op::READ | reg_op::WRITE)
    });
    let orig = arg;
    let failure = match invalid {
        Some(i) => Some((i, malformed(format!("batch op {i} malformed")))),
        None => backend
            .batch(&mut arg.ops[..count])
            .err()
            .map(|(i, e)| (i, NodeError::Backend(e))),
    };
    match failure {
        None => {
            arg.failed_index = arg.count;
            Ok(IoctlReply::ok(&arg))
        }
        Some((i, err)) => {
            tracing::debug!(index = i, error = %err, "register batch failed");
            // Report the caller's ops untouched: a failed batch has no effect.
            let mut out = orig;
            out.failed_index = u32::try_from(i).unwrap_or(u32::MAX);
            Ok(IoctlReply {
                result: -err.errno(),
                data: out.as_bytes().to_vec(),
            })
        }
    }
}

/// `GPUPM_IOC_REG_READ` (the value comes back) or `GPUPM_IOC_REG_WRITE`.
fn single_access(
    backend: &mut dyn DeviceBackend,
    cmd: u32,
    mut arg: RegAccess,
) -> Result<IoctlReply, NodeError> {
    let width = check_reg_access(&arg)?;
    if cmd == GPUPM_IOC_REG_READ {
        arg.value = backend.read_reg(arg.offset, width)?;
        return Ok(IoctlReply::ok(&arg));
    }
    if width == 4 && arg.value > u64::from(u32::MAX) {
        return Err(malformed(format!(
            "4-byte write of {:#x} does not fit",
            arg.value
        )));
    }
    backend.write_reg(arg.offset, width, arg.value)?;
    Ok(IoctlReply {
        result: 0,
        data: Vec::new(),
    })
}

/// Checks a [`RegAccess`] like a `pread`/`pwrite` of `width` bytes at
/// `offset` on `card0`; returns the width.
fn check_reg_access(arg: &RegAccess) -> Result<u32, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    if arg.reserved != 0 {
        return Err(malformed("reserved field set"));
    }
    let size = usize::try_from(arg.width).unwrap_or(usize::MAX);
    reg_access(NodeKind::Card, arg.offset, size)
}

/// `GPUPM_IOC_WINDOW_READ(len)`: the length is the number's size minus
/// the head's; the reply is the head followed by the bytes read.
fn window_read(
    backend: &mut dyn DeviceBackend,
    cmd: u32,
    input: &[u8],
) -> Result<IoctlReply, NodeError> {
    let head_size = core::mem::size_of::<WindowRead>();
    let len = ioc::size(cmd).saturating_sub(head_size);
    if ioc::dir(cmd) != ioc::Dir::ReadWrite || len == 0 || len > WINDOW_READ_MAX {
        return Err(malformed(format!(
            "ioctl {cmd:#010x}: not a window read of 1..={WINDOW_READ_MAX} bytes"
        )));
    }
    if input.len() != head_size + len {
        return Err(malformed(format!(
            "window read argument of {} bytes, expected {}",
            input.len(),
            head_size + len
        )));
    }
    let head: WindowRead = decode(&input[..head_size])?;
    check_version(head.version)?;
    check_flags(head.flags)?;
    let mut data = vec![0u8; head_size + len];
    data[..head_size].copy_from_slice(&input[..head_size]);
    backend.read_mem(head.offset, &mut data[head_size..])?;
    Ok(IoctlReply { result: 0, data })
}

/// Decodes an argument that must be exactly `size_of::<T>()` bytes.
fn decode<T: FromBytes + KnownLayout + Immutable>(input: &[u8]) -> Result<T, NodeError> {
    let expected = core::mem::size_of::<T>();
    if input.len() != expected {
        return Err(malformed(format!(
            "argument of {} bytes, expected {expected}",
            input.len()
        )));
    }
    T::read_from_bytes(input).map_err(|_| malformed("argument does not decode"))
}

fn check_version(version: u32) -> Result<(), NodeError> {
    if version == IOCTL_STRUCT_VERSION {
        Ok(())
    } else {
        Err(malformed(format!(
            "struct version {version}, expected {IOCTL_STRUCT_VERSION}"
        )))
    }
}

fn check_flags(flags: u32) -> Result<(), NodeError> {
    if flags == 0 {
        Ok(())
    } else {
        Err(malformed(format!("unknown flags {flags:#x}")))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{any, proptest};
    use zerocopy::FromZeros;

    use super::*;
    use crate::model::{Device, EngineKind};
    use crate::node::model_backend::ModelBackend;

    /// A one-partition device on a step clock.
    fn device() -> ModelBackend {
        let toml = "[topology]\nsms_per_gpc = [1]\nmemory_slices = 1\nl2_per_slice = 1\n\
                    fb_per_slice = 1\nce_per_slice = 1\nnvlinks = 0\n\
                    [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
                    [[vm]]\nid = 1\npartition = 1\n";
        let scenario = crate::scenario::parse("tiny.toml", toml).expect("tiny scenario parses");
        ModelBackend::new(Device::new(&scenario, EngineKind::Batched, true).expect("device builds"))
    }

    proptest! {
        #[test]
        fn arbitrary_ioctl_bytes_never_panic_and_bad_ones_change_nothing(
            nr in 0u32..8,
            size in 0usize..2048,
            fill in any::<u8>(),
            known in any::<bool>(),
        ) {
            let mut dev = device();
            let cmd = if known {
                DEVICE_IOCTLS[nr as usize % DEVICE_IOCTLS.len()].1
            } else {
                u32::try_from(nix::request_code_readwrite!(IOC_MAGIC, nr, size)).unwrap_or(0)
            };
            let input = vec![fill; size];
            let before = dev.interrupts_since(0, &mut Vec::new());
            if dispatch(&mut dev, cmd, &input, u32::try_from(size).unwrap_or(0)).is_err() {
                assert_eq!(dev.interrupts_since(0, &mut Vec::new()), before);
                assert_eq!(dev.read_reg(regs::CYCLE, 8).ok(), Some(0));
            }
        }
    }

    #[test]
    fn batch_with_zero_count_is_refused() {
        let mut dev = device();
        let mut b = RegBatch::new_zeroed();
        b.version = IOCTL_STRUCT_VERSION;
        assert!(dispatch(&mut dev, GPUPM_IOC_REG_BATCH, b.as_bytes(), 0).is_err());
    }
}
