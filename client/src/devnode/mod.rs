//! Client of the device node served by `gpupm-driver`, of either kind
//! ([`NodeKind`]): the FUSE file `card0`, where registers are read and
//! written by `pread`/`pwrite` at BAR0 offsets and the memory window by
//! `pread` at `MEM_WINDOW_OFFSET + offset`, or the CUSE character device
//! `/dev/gpupm0`, which has no file offset, where both go through
//! `GPUPM_IOC_REG_READ`/`REG_WRITE`/`WINDOW_READ`. On both: the other
//! `GPUPM_IOC_*` ioctls, and interrupt records by `poll` + `read`
//! ([`IntrReader`]).
//!
//! Shared by the daemon, the `gpupm` command line and the tests. A
//! [`DevNode`] is `Sync`: `pread`/`pwrite`/`ioctl` on one descriptor may run
//! from several threads at once; `&DevNode` is a [`RegisterBatch`] executor
//! for the [`crate::handshake`].

pub mod intr;

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};

use gpupm_uapi::ioctl::{
    window_read_cmd, Advance, BlockLedgerQuery, Identity, LedgerQuery, RegBatch, RegOp, Reset,
    WindowRead, GPUPM_IOC_ADVANCE, GPUPM_IOC_IDENTITY, GPUPM_IOC_LEDGER, GPUPM_IOC_LEDGER_BLOCKS,
    GPUPM_IOC_REG_BATCH, GPUPM_IOC_REG_READ, GPUPM_IOC_REG_WRITE, GPUPM_IOC_RESET,
    IOCTL_STRUCT_VERSION, MAX_BATCH_OPS, WINDOW_READ_MAX,
};
use gpupm_uapi::layout::{BlockSlot, MEM_WINDOW_OFFSET};
use gpupm_uapi::regs;
use zerocopy::{FromBytes, FromZeros};

pub use intr::IntrReader;

use crate::handshake::RegisterBatch;
use crate::ops;
use crate::paths::CARD_NAME;
use crate::sys;

/// Why a device-node operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// `card0` could not be opened.
    #[error("cannot open the device node {path}")]
    Open {
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A register or window access failed.
    #[error("{what} at {offset:#x} failed")]
    Access {
        /// What was attempted.
        what: &'static str,
        /// Offset (register, or window offset).
        offset: u64,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// An ioctl failed.
    #[error("ioctl {name} failed")]
    Ioctl {
        /// Which.
        name: &'static str,
        /// Cause.
        #[source]
        source: nix::Error,
    },
    /// A batch larger than the ABI allows.
    #[error("a register batch holds at most {MAX_BATCH_OPS} ops, not {0}")]
    BatchTooLarge(usize),
    /// Reading interrupt records failed.
    #[error("reading interrupt records failed")]
    Interrupts(#[source] io::Error),
}

/// Which kind of device node a [`DevNode`] has open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// The FUSE file `card0`: registers and window by `pread`/`pwrite`.
    File,
    /// The CUSE character device: registers and window by ioctl.
    CharDevice,
}

/// An open device node.
#[derive(Debug)]
pub struct DevNode {
    card: File,
    path: PathBuf,
    kind: NodeKind,
}

impl DevNode {
    /// Opens the device node read-write: `node` is either the node
    /// directory of the FUSE transport (`card0` in it is opened) or the
    /// CUSE character device itself (`/dev/gpupm0`).
    pub fn open(node: &Path) -> Result<DevNode, DevError> {
        let open_error = |path: &Path, source| DevError::Open {
            path: path.to_path_buf(),
            source,
        };
        // Anything but a character device is the node directory, also one
        // that does not exist: the error then names the `card0` expected.
        let path = match fs::metadata(node) {
            Ok(m) if m.file_type().is_char_device() => node.to_path_buf(),
            _ => node.join(CARD_NAME),
        };
        let card = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| open_error(&path, e))?;
        let kind = match card.metadata() {
            Ok(m) if m.file_type().is_char_device() => NodeKind::CharDevice,
            Ok(_) => NodeKind::File,
            Err(e) => return Err(open_error(&path, e)),
        };
        Ok(DevNode { card, path, kind })
    }

    /// Path of the open node (`card0` or the character device).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which kind of node this is.
    pub fn kind(&self) -> NodeKind {
        self.kind
    }

    /// A new interrupt reader on its own handle (its cursor starts now).
    pub fn interrupts(&self) -> Result<IntrReader, DevError> {
        IntrReader::open(&self.path)
    }

    fn read_reg(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        let access = |source| DevError::Access {
            what: "register read",
            offset,
            source,
        };
        if self.kind == NodeKind::CharDevice {
            let value = self.reg_ioctl(GPUPM_IOC_REG_READ, offset, buf.len(), 0)?;
            let bytes = value.to_le_bytes();
            buf.copy_from_slice(&bytes[..buf.len()]);
            return Ok(());
        }
        let n = self.card.read_at(buf, offset).map_err(access)?;
        if n != buf.len() {
            return Err(access(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short register read",
            )));
        }
        Ok(())
    }

    fn write_reg(&self, offset: u64, buf: &[u8]) -> Result<(), DevError> {
        let access = |source| DevError::Access {
            what: "register write",
            offset,
            source,
        };
        if self.kind == NodeKind::CharDevice {
            let mut le = [0u8; 8];
            le[..buf.len()].copy_from_slice(buf);
            let value = u64::from_le_bytes(le);
            return self
                .reg_ioctl(GPUPM_IOC_REG_WRITE, offset, buf.len(), value)
                .map(drop);
        }
        let n = self.card.write_at(buf, offset).map_err(access)?;
        if n != buf.len() {
            return Err(access(io::Error::new(
                io::ErrorKind::WriteZero,
                "short register write",
            )));
        }
        Ok(())
    }

    /// `GPUPM_IOC_REG_READ` or `REG_WRITE` of `width` bytes; the value read.
    fn reg_ioctl(&self, cmd: u32, offset: u64, width: usize, value: u64) -> Result<u64, DevError> {
        let what = if cmd == GPUPM_IOC_REG_READ {
            "register read"
        } else {
            "register write"
        };
        // 4 or 8: the callers pass fixed-size buffers.
        let mut arg = ops::access(offset, u32::try_from(width).unwrap_or(u32::MAX), value);
        sys::call(self.card.as_fd(), cmd, &mut arg).map_err(|e| DevError::Access {
            what,
            offset,
            source: e.into(),
        })?;
        Ok(arg.value)
    }

    /// Reads a 32-bit register.
    pub fn read32(&self, offset: u64) -> Result<u32, DevError> {
        let mut b = [0u8; 4];
        self.read_reg(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads a 64-bit register with one 8-byte access.
    pub fn read64(&self, offset: u64) -> Result<u64, DevError> {
        let mut b = [0u8; 8];
        self.read_reg(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a 32-bit register.
    pub fn write32(&self, offset: u64, value: u32) -> Result<(), DevError> {
        self.write_reg(offset, &value.to_le_bytes())
    }

    /// Writes a 64-bit register.
    pub fn write64(&self, offset: u64, value: u64) -> Result<(), DevError> {
        self.write_reg(offset, &value.to_le_bytes())
    }

    /// Runs `ops` (at most [`MAX_BATCH_OPS`]) as one atomic register batch;
    /// read ops get their values. On failure nothing took effect.
    pub fn batch(&self, ops: &mut [RegOp]) -> Result<(), DevError> {
        if ops.is_empty() {
            return Ok(());
        }
        if ops.len() > MAX_BATCH_OPS {
            return Err(DevError::BatchTooLarge(ops.len()));
        }
        let mut arg = RegBatch::new_zeroed();
        arg.version = IOCTL_STRUCT_VERSION;
        arg.count = u32::try_from(ops.len()).map_err(|_| DevError::BatchTooLarge(ops.len()))?;
        arg.ops[..ops.len()].copy_from_slice(ops);
        self.ioctl("GPUPM_IOC_REG_BATCH", GPUPM_IOC_REG_BATCH, &mut arg)?;
        ops.copy_from_slice(&arg.ops[..ops.len()]);
        Ok(())
    }

    /// Reads many registers (each at its natural width), batching them in
    /// groups of [`MAX_BATCH_OPS`]; not atomic across groups.
    pub fn read_many(&self, offsets: &[u64]) -> Result<Vec<u64>, DevError> {
        let mut out = Vec::with_capacity(offsets.len());
        for chunk in offsets.chunks(MAX_BATCH_OPS) {
            let mut ops: Vec<RegOp> = chunk.iter().map(|&o| ops::read(o)).collect();
            self.batch(&mut ops)?;
            out.extend(ops.iter().map(|op| op.value));
        }
        Ok(out)
    }

    /// Reads `buf.len()` bytes of the memory window at `offset`.
    pub fn window(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let failed = |source| DevError::Access {
                what: "window read",
                offset: at,
                source,
            };
            let n = match self.kind {
                NodeKind::File => self
                    .card
                    .read_at(&mut buf[done..], MEM_WINDOW_OFFSET + at)
                    .map_err(failed)?,
                NodeKind::CharDevice => self.window_ioctl(at, &mut buf[done..]).map_err(failed)?,
            };
            if n == 0 {
                return Err(failed(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "end of the memory window",
                )));
            }
            done += n;
        }
        Ok(())
    }

    /// One `GPUPM_IOC_WINDOW_READ(len)` of up to [`WINDOW_READ_MAX`] bytes.
    fn window_ioctl(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(WINDOW_READ_MAX);
        let head = WindowRead {
            version: IOCTL_STRUCT_VERSION,
            flags: 0,
            offset,
        };
        let head_size = core::mem::size_of::<WindowRead>();
        let mut arg = vec![0u8; head_size + n];
        arg[..head_size].copy_from_slice(zerocopy::IntoBytes::as_bytes(&head));
        sys::call_bytes(self.card.as_fd(), window_read_cmd(n), &mut arg)?;
        buf[..n].copy_from_slice(&arg[head_size..]);
        Ok(n)
    }

    /// Reads the block slot at window offset `offset`.
    pub fn block_slot(&self, offset: u64) -> Result<BlockSlot, DevError> {
        let mut slot = BlockSlot::new_zeroed();
        self.window(offset, zerocopy::IntoBytes::as_mut_bytes(&mut slot))?;
        Ok(slot)
    }

    /// `GPUPM_IOC_IDENTITY`.
    pub fn identity(&self) -> Result<Identity, DevError> {
        let mut arg = Identity {
            version: IOCTL_STRUCT_VERSION,
            ..Identity::default()
        };
        self.ioctl("GPUPM_IOC_IDENTITY", GPUPM_IOC_IDENTITY, &mut arg)?;
        Ok(arg)
    }

    /// `GPUPM_IOC_ADVANCE` (step clock only); returns the new cycle.
    pub fn advance(&self, cycles: u64) -> Result<u64, DevError> {
        let mut arg = Advance {
            version: IOCTL_STRUCT_VERSION,
            flags: 0,
            cycles,
            now: 0,
        };
        self.ioctl("GPUPM_IOC_ADVANCE", GPUPM_IOC_ADVANCE, &mut arg)?;
        Ok(arg.now)
    }

    /// `GPUPM_IOC_CC_KEY_EXCHANGE` (ABI 1.11): relays a confidential VM's
    /// tenant's half of the key exchange; the device's half comes back in
    /// `msg` (`docs/confidential.md`).
    pub fn cc_key_exchange(&self, msg: &mut gpupm_uapi::cc::KeyExchange) -> Result<(), DevError> {
        self.ioctl(
            "GPUPM_IOC_CC_KEY_EXCHANGE",
            gpupm_uapi::ioctl::GPUPM_IOC_CC_KEY_EXCHANGE,
            msg,
        )
    }

    /// `GPUPM_IOC_CC_FINISH` (ABI 1.11): relays the tenant's FINISH.
    pub fn cc_finish(&self, msg: &mut gpupm_uapi::cc::Finish) -> Result<(), DevError> {
        self.ioctl(
            "GPUPM_IOC_CC_FINISH",
            gpupm_uapi::ioctl::GPUPM_IOC_CC_FINISH,
            msg,
        )
    }

    /// `GPUPM_IOC_LEDGER` (privileged debug).
    pub fn ledger(&self, scope: u32, id: u32) -> Result<LedgerQuery, DevError> {
        let mut arg = LedgerQuery::new_zeroed();
        arg.version = IOCTL_STRUCT_VERSION;
        arg.scope = scope;
        arg.id = id;
        self.ioctl("GPUPM_IOC_LEDGER", GPUPM_IOC_LEDGER, &mut arg)?;
        Ok(arg)
    }

    /// `GPUPM_IOC_LEDGER_BLOCKS` (privileged debug, `--debug-ledger`): the
    /// exact per-(kernel, block) counts of context `ctx`'s program, every
    /// page, and its context cycles. A sealed answer (confidential VM)
    /// returns its pages as they came.
    pub fn ledger_blocks(&self, ctx: u32) -> Result<(Vec<BlockLedgerQuery>, u64), DevError> {
        let mut pages = Vec::new();
        let mut first = 0;
        loop {
            let mut arg = BlockLedgerQuery::new_zeroed();
            arg.version = IOCTL_STRUCT_VERSION;
            arg.ctx = ctx;
            arg.first = first;
            self.ioctl("GPUPM_IOC_LEDGER_BLOCKS", GPUPM_IOC_LEDGER_BLOCKS, &mut arg)?;
            first += arg.count;
            let (done, cycles) = (first >= arg.total || arg.count == 0, arg.ctx_cycles);
            pages.push(arg);
            if done {
                return Ok((pages, cycles));
            }
        }
    }

    /// `GPUPM_IOC_WAIT_COMMIT` (ABI 1.8): blocks until the device's
    /// periodic commit sequence differs from `arg.after` or `arg.timeout_us`
    /// passes, and fills `arg.seq`, `arg.cycle` and the blocks of
    /// `arg.slots` as they are then (`docs/pages.md`).
    pub fn wait_commit(
        &self,
        arg: &mut gpupm_uapi::commit_wait::WaitCommit,
    ) -> Result<(), DevError> {
        self.ioctl(
            "GPUPM_IOC_WAIT_COMMIT",
            gpupm_uapi::ioctl::GPUPM_IOC_WAIT_COMMIT,
            arg,
        )
    }

    /// `GPUPM_IOC_MIRROR_INFO` (ABI 1.9): where the device's commit mirror
    /// is (`docs/pages.md`); ENODEV when it keeps none, ENOTTY before 1.9.
    pub fn mirror_info(&self) -> Result<gpupm_uapi::mirror::MirrorInfo, DevError> {
        let mut arg = gpupm_uapi::mirror::MirrorInfo::new_zeroed();
        arg.version = IOCTL_STRUCT_VERSION;
        self.ioctl(
            "GPUPM_IOC_MIRROR_INFO",
            gpupm_uapi::ioctl::GPUPM_IOC_MIRROR_INFO,
            &mut arg,
        )?;
        Ok(arg)
    }

    /// `GPUPM_IOC_RESET`.
    pub fn reset(&self) -> Result<(), DevError> {
        let mut arg = Reset {
            version: IOCTL_STRUCT_VERSION,
            magic: regs::RESET_MAGIC,
        };
        self.ioctl("GPUPM_IOC_RESET", GPUPM_IOC_RESET, &mut arg)
    }

    fn ioctl<T: zerocopy::IntoBytes + FromBytes + zerocopy::KnownLayout + zerocopy::Immutable>(
        &self,
        name: &'static str,
        cmd: u32,
        arg: &mut T,
    ) -> Result<(), DevError> {
        sys::call(self.card.as_fd(), cmd, arg)
            .map(drop)
            .map_err(|source| DevError::Ioctl { name, source })
    }
}

impl RegisterBatch for &DevNode {
    type Error = DevError;

    fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), DevError> {
        DevNode::batch(self, ops)
    }

    /// One access at the register's natural width (a `pread`, or a
    /// `GPUPM_IOC_REG_READ` on the character device) instead of a batch.
    fn read(&mut self, offset: u64) -> Result<u64, DevError> {
        if gpupm_uapi::map::is_64bit(offset) {
            self.read64(offset)
        } else {
            self.read32(offset).map(u64::from)
        }
    }
}

/// Decodes a value from the front of `bytes` (a short buffer is `None`).
pub fn decode<T: FromBytes + zerocopy::KnownLayout + zerocopy::Immutable>(
    bytes: &[u8],
) -> Option<T> {
    T::read_from_prefix(bytes).ok().map(|(v, _)| v)
}
