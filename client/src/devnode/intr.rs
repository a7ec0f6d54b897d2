//! Interrupt records from `card0`: a non-blocking handle of its own, woken
//! by `poll(POLLIN)`, read in whole records.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use gpupm_uapi::intr::InterruptRecord;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use zerocopy::FromBytes;

use super::DevError;

const RECORD_SIZE: usize = core::mem::size_of::<InterruptRecord>();
/// Records taken per `read()`.
const READ_RECORDS: usize = 128;

/// What one [`IntrReader::wait`] returned besides the records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Records the device dropped before these (a `seq` gap): the reader
    /// must resynchronise from registers.
    pub missed: u64,
}

/// A reader of interrupt records; its cursor starts at the next record
/// raised after it was opened.
#[derive(Debug)]
pub struct IntrReader {
    file: File,
    next_seq: Option<u64>,
    buf: Vec<u8>,
    /// Whether the handle was switched to blocking reads.
    blocking: bool,
}

impl IntrReader {
    /// Opens `path` (a `card0`) non-blocking.
    pub fn open(path: &Path) -> Result<IntrReader, DevError> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| DevError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(IntrReader {
            file,
            next_seq: None,
            buf: vec![0; RECORD_SIZE * READ_RECORDS],
            blocking: false,
        })
    }

    /// Blocks until records are available and appends them to `out` (up
    /// to one buffer's worth; nothing when a signal interrupted the wait).
    ///
    /// One request to the node per wake-up, where [`Self::wait`] takes a
    /// poll, the wait and a read. There is no timeout: whoever wants the
    /// thread back makes the device raise a record (every handle sees
    /// every record), e.g. a host mailbox command's `MAILBOX_DONE`. The
    /// handle stays blocking from the first call on.
    pub fn wait_blocking(&mut self, out: &mut Vec<InterruptRecord>) -> Result<Batch, DevError> {
        if !self.blocking {
            let flags = OFlag::from_bits_truncate(
                fcntl(self.file.as_raw_fd(), FcntlArg::F_GETFL)
                    .map_err(|e| DevError::Interrupts(e.into()))?,
            );
            fcntl(
                self.file.as_raw_fd(),
                FcntlArg::F_SETFL(flags & !OFlag::O_NONBLOCK),
            )
            .map_err(|e| DevError::Interrupts(e.into()))?;
            self.blocking = true;
        }
        let mut batch = Batch::default();
        let n = match self.file.read(&mut self.buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                return Ok(batch)
            }
            Err(e) => return Err(DevError::Interrupts(e)),
        };
        self.take_records(n, out, &mut batch);
        Ok(batch)
    }

    /// Waits up to `timeout` for records and appends every available one
    /// to `out` (nothing on timeout or a signal).
    pub fn wait(
        &mut self,
        timeout: Duration,
        out: &mut Vec<InterruptRecord>,
    ) -> Result<Batch, DevError> {
        let mut batch = Batch::default();
        // poll() first: it answers at once when records are pending, and a
        // read() that finds none would cost a whole round trip to the
        // device for nothing on every wake-up.
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.file.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(batch),
            Ok(_) => {}
            Err(e) => return Err(DevError::Interrupts(e.into())),
        }
        self.read_available(out, &mut batch)?;
        Ok(batch)
    }

    /// Reads until the handle has nothing; whether anything was read.
    fn read_available(
        &mut self,
        out: &mut Vec<InterruptRecord>,
        batch: &mut Batch,
    ) -> Result<bool, DevError> {
        let mut any = false;
        loop {
            let n = match self.file.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(DevError::Interrupts(e)),
            };
            if n == 0 {
                return Ok(any);
            }
            any |= self.take_records(n, out, batch);
            if n < self.buf.len() {
                return Ok(any);
            }
        }
    }

    /// Parses the `n` bytes read into records, counting a gap in `seq` as
    /// missed records. Returns whether any record was taken.
    fn take_records(
        &mut self,
        n: usize,
        out: &mut Vec<InterruptRecord>,
        batch: &mut Batch,
    ) -> bool {
        let mut any = false;
        for chunk in self.buf[..n].chunks_exact(RECORD_SIZE) {
            let Ok(rec) = InterruptRecord::read_from_bytes(chunk) else {
                continue;
            };
            if let Some(expected) = self.next_seq {
                batch.missed += rec.seq.saturating_sub(expected);
            }
            self.next_seq = Some(rec.seq + 1);
            out.push(rec);
            any = true;
        }
        any
    }
}
