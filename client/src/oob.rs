//! The BMC's side of the out-of-band mailbox (`docs/oob.md`): a typed
//! client of the `OOB_MBOX_*` registers of `card0-oob`, speaking the
//! documented protocol — `OOB_MBOX_SEQ` read before and after every
//! command, the command run again when another caller's interleaved — and
//! every OOB command: capabilities, the five legacy reads, the channel's
//! information and flush, VM and context enumeration, a block read as a
//! consistent copy through a snapshot and its latch, idle time, the host
//! driver's state and device information.
//!
//! The registers are reached through [`OobRegisters`]: an open `card0-oob`
//! ([`File`], 4-byte `pwrite`s and 4/8-byte `pread`s), or anything else
//! that answers like it (a test's fake). Every device answer is checked:
//! a status other than `OK` is an [`OobError`] of its own, and an answer
//! that cannot be right (a `SEQ` that did not move, a tag of 0, an
//! enumeration that goes backwards, an unknown state) is
//! [`OobError::Malformed`], never a panic.
//!
//! ```no_run
//! use gpupm_client::oob::{OobClient, OobScope};
//!
//! let oob = OobClient::open(std::path::Path::new("/run/gpupm/dev"))?;
//! for vm in oob.vms() {
//!     let vm = vm?;
//!     if !vm.confidential {
//!         let block = oob.read_block(OobScope::Vm(vm.id))?;
//!         println!("VM {}: {:?}", vm.id, &block.counters[..4]);
//!     }
//! }
//! # Ok::<(), gpupm_client::oob::OobError>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::regs::{
    mbox_op, mbox_status, oob_ctx_state, oob_host_state, oob_scope, oob_vm_flags, MAX_CONTEXTS,
    MAX_VMS, OOB_MBOX_ARG, OOB_MBOX_ARG2, OOB_MBOX_CMD, OOB_MBOX_DATA, OOB_MBOX_DATA1,
    OOB_MBOX_DATA2, OOB_MBOX_DATA3, OOB_MBOX_SEQ, OOB_MBOX_STATUS, OOB_MBOX_WORDS,
};

use crate::paths::OOB_NAME;

#[cfg(test)]
mod tests;

/// Times a command is run when other callers' commands keep interleaving.
pub const MAX_INTERLEAVED_TRIES: u32 = 8;
/// Snapshots a block read takes when other snapshots keep replacing the
/// latch under it.
pub const MAX_STALE_TRIES: u32 = 8;
/// Times [`OobClient::wait_flush`] re-reads the channel at most.
pub const MAX_FLUSH_POLLS: u32 = 1 << 16;

/// Why an OOB command failed. The status variants are the device's
/// answers; nothing changed on the device when one of them is returned.
#[derive(Debug, thiserror::Error)]
pub enum OobError {
    /// `card0-oob` could not be opened.
    #[error("cannot open the out-of-band node {path}")]
    Open {
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A register access failed.
    #[error("{what} of OOB register {offset:#x} failed")]
    Access {
        /// `read` or `write`.
        what: &'static str,
        /// Register offset.
        offset: u64,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// `IDLE`: the mailbox says no command ran, after ours did.
    #[error("OOB command {op:#x} left the mailbox idle")]
    Idle {
        /// Opcode.
        op: u32,
    },
    /// `ERR_OPCODE`: the device does not know the opcode.
    #[error("the device does not know OOB command {op:#x}")]
    Opcode {
        /// Opcode.
        op: u32,
    },
    /// `ERR_ARG`: an argument out of range.
    #[error("OOB command {op:#x} refused its arguments ({arg}, {arg2})")]
    Arg {
        /// Opcode.
        op: u32,
        /// `OOB_MBOX_ARG`.
        arg: u32,
        /// `OOB_MBOX_ARG2`.
        arg2: u32,
    },
    /// `ERR_NOT_FOUND`: the VM or context is not in the channel.
    #[error("OOB command {op:#x}: {arg} is not in the out-of-band channel")]
    NotFound {
        /// Opcode.
        op: u32,
        /// The id asked for.
        arg: u32,
    },
    /// `ERR_STALE`: the tag is not the current latch's (another snapshot
    /// replaced it).
    #[error("the latch tag {tag} is stale: another snapshot replaced the latch")]
    Stale {
        /// The tag used.
        tag: u32,
    },
    /// `ERR_CONFIDENTIAL`: a confidential VM, which the channel leaves out.
    #[error(
        "OOB command {op:#x}: VM {arg} is confidential; the out-of-band channel leaves it out"
    )]
    Confidential {
        /// Opcode.
        op: u32,
        /// The id asked for.
        arg: u32,
    },
    /// `END` answered by a command that is not an enumeration.
    #[error("OOB command {op:#x} answered END")]
    End {
        /// Opcode.
        op: u32,
    },
    /// `ERR_BUSY`: an earlier OOB flush has not completed.
    #[error("an earlier OOB flush has not completed yet")]
    Busy,
    /// A status the protocol does not define.
    #[error("OOB command {op:#x} answered the unknown status {status}")]
    UnknownStatus {
        /// Opcode.
        op: u32,
        /// Status.
        status: u32,
    },
    /// Other callers' commands interleaved with every try.
    #[error("OOB command {op:#x} was interleaved with other callers' commands {tries} times")]
    Interleaved {
        /// Opcode.
        op: u32,
        /// Tries made.
        tries: u32,
    },
    /// Other snapshots replaced the latch during every try of a block read.
    #[error("other snapshots replaced the latch during each of {tries} reads of the block")]
    StaleAgain {
        /// Snapshots taken.
        tries: u32,
    },
    /// The flush did not complete before the caller gave up.
    #[error("OOB flush {number} did not complete (channel at {completed} flushes completed)")]
    FlushNotCompleted {
        /// The flush's number.
        number: u64,
        /// Flushes the channel had completed when the wait gave up.
        completed: u64,
    },
    /// An answer the protocol does not allow.
    #[error("malformed answer to OOB command {op:#x}: {what}")]
    Malformed {
        /// Opcode.
        op: u32,
        /// What is wrong with it.
        what: String,
    },
}

/// The registers of one OOB mailbox: 4-byte writes, 4- and 8-byte reads.
pub trait OobRegisters {
    /// Reads a 32-bit register.
    fn read32(&self, offset: u64) -> io::Result<u32>;
    /// Reads a 64-bit register.
    fn read64(&self, offset: u64) -> io::Result<u64>;
    /// Writes a 32-bit register.
    fn write32(&self, offset: u64, value: u32) -> io::Result<()>;
}

impl OobRegisters for File {
    fn read32(&self, offset: u64) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.read_exact_at(&mut b, offset)?;
        Ok(u32::from_le_bytes(b))
    }

    fn read64(&self, offset: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read_exact_at(&mut b, offset)?;
        Ok(u64::from_le_bytes(b))
    }

    fn write32(&self, offset: u64, value: u32) -> io::Result<()> {
        self.write_all_at(&value.to_le_bytes(), offset)
    }
}

/// One command's answer as the registers gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// `OOB_MBOX_STATUS`.
    pub status: u32,
    /// `OOB_MBOX_DATA`..`_DATA3`.
    pub words: [u64; OOB_MBOX_WORDS],
}

/// `GET_CAPS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// ABI major version.
    pub abi_major: u16,
    /// ABI minor version.
    pub abi_minor: u16,
    /// Events the device counts (counters per block).
    pub events: u32,
}

/// `OOB_CHANNEL_INFO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelInfo {
    /// Channel commits so far (periodic, flushes, reset drains).
    pub generation: u64,
    /// Cycle of the last commit.
    pub last_commit_cycle: u64,
    /// The channel's own period in cycles.
    pub period_cycles: u64,
    /// OOB flushes completed.
    pub flushes_completed: u64,
}

/// An OOB flush requested (`OOB_FLUSH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushTicket {
    /// Its number: `flushes_completed` reaches it when it completed.
    pub number: u64,
    /// The cycle it completes at.
    pub due_cycle: u64,
}

/// A VM in the channel (`OOB_NEXT_VM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OobVm {
    /// VM id.
    pub id: u32,
    /// Its partition slot.
    pub slot: u32,
    /// Confidential: the channel holds no block of it.
    pub confidential: bool,
    /// Its contexts in the channel (0 for a confidential VM).
    pub contexts: u64,
}

/// A context's state in the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OobCtxState {
    /// Alive.
    Active,
    /// Destroyed; its block keeps its final counts.
    Destroyed,
}

/// A context in the channel (`OOB_NEXT_CONTEXT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OobContext {
    /// Context id.
    pub id: u32,
    /// Its VM.
    pub vm: u32,
    /// The cycle it was created at.
    pub created_cycle: u64,
    /// Active or destroyed.
    pub state: OobCtxState,
}

/// Which block (`OOB_SNAPSHOT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OobScope {
    /// The system block.
    System,
    /// A VM's block.
    Vm(u32),
    /// A context's block.
    Context(u32),
}

impl OobScope {
    /// `(ARG, ARG2)` of `OOB_SNAPSHOT`.
    fn args(self) -> (u32, u32) {
        match self {
            OobScope::System => (0, oob_scope::SYSTEM),
            OobScope::Vm(vm) => (vm, oob_scope::VM),
            OobScope::Context(c) => (c, oob_scope::CONTEXT),
        }
    }
}

/// A latched block (`OOB_SNAPSHOT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The latch's tag (never 0).
    pub tag: u32,
    /// The channel's generation when latched.
    pub generation: u64,
    /// Commits into the block.
    pub commits: u64,
    /// The context's created cycle, the VM's partition slot, or 0.
    pub detail: u64,
}

/// A block's counters, one consistent copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OobBlock {
    /// The snapshot the counters were read under.
    pub snapshot: Snapshot,
    /// One counter per event, by event id.
    pub counters: Vec<u64>,
}

/// `OOB_READ_IDLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Idle {
    /// Cycles with no context running on any partition.
    pub idle_cycles: u64,
    /// Idle periods begun.
    pub idle_periods: u64,
    /// The current cycle.
    pub cycle: u64,
    /// The last cycle was idle.
    pub idle_now: bool,
}

/// The host driver as the device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostDriver {
    /// Served, open, and heard from within the timeout.
    Loaded,
    /// Served and open, but silent past the timeout.
    NotResponding,
    /// Not served, or no handle open.
    Unloaded,
}

impl HostDriver {
    /// Lower-case name, as the command line shows it.
    pub fn name(self) -> &'static str {
        match self {
            HostDriver::Loaded => "loaded",
            HostDriver::NotResponding => "not responding",
            HostDriver::Unloaded => "unloaded",
        }
    }
}

/// `OOB_HOST_STATE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostState {
    /// The driver's state.
    pub driver: HostDriver,
    /// Cycles since the host's last request (`None`: never).
    pub since_request: Option<u64>,
    /// Handles open on `card0`.
    pub handles: u64,
    /// The timeout in cycles.
    pub timeout_cycles: u64,
}

/// `OOB_DEVICE_INFO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Nominal clock in kHz.
    pub nominal_khz: u64,
    /// The clock now in kHz.
    pub clock_khz: u64,
    /// Device resets the channel carried.
    pub resets: u64,
    /// Mask of configured partition slots (bit 0: the device-level units).
    pub partition_mask: u64,
}

/// A typed client of one OOB mailbox.
#[derive(Debug)]
pub struct OobClient<R: OobRegisters = File> {
    regs: R,
    events: OnceLock<usize>,
}

impl OobClient<File> {
    /// Opens `node_dir/card0-oob` read-write.
    pub fn open(node_dir: &Path) -> Result<Self, OobError> {
        let path = node_dir.join(OOB_NAME);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| OobError::Open { path, source })?;
        Ok(OobClient::new(file))
    }
}

fn low32(op: u32, what: &str, v: u64) -> Result<u32, OobError> {
    u32::try_from(v).map_err(|_| malformed(op, format!("{what} {v} is not a 32-bit value")))
}

fn malformed(op: u32, what: String) -> OobError {
    OobError::Malformed { op, what }
}

impl<R: OobRegisters> OobClient<R> {
    /// A client over `regs`.
    pub fn new(regs: R) -> Self {
        OobClient {
            regs,
            events: OnceLock::new(),
        }
    }

    /// The registers.
    pub fn registers(&self) -> &R {
        &self.regs
    }

    fn read32(&self, offset: u64) -> Result<u32, OobError> {
        self.regs.read32(offset).map_err(|source| OobError::Access {
            what: "read",
            offset,
            source,
        })
    }

    fn read64(&self, offset: u64) -> Result<u64, OobError> {
        self.regs.read64(offset).map_err(|source| OobError::Access {
            what: "read",
            offset,
            source,
        })
    }

    fn write32(&self, offset: u64, value: u32) -> Result<(), OobError> {
        self.regs
            .write32(offset, value)
            .map_err(|source| OobError::Access {
                what: "write",
                offset,
                source,
            })
    }

    /// Runs `op` with `arg` and `arg2` under the protocol: `SEQ` before
    /// and after; run again while another caller's command interleaved
    /// (at most [`MAX_INTERLEAVED_TRIES`] times). Any status is returned.
    pub fn exchange(&self, op: u32, arg: u32, arg2: u32) -> Result<Answer, OobError> {
        for _ in 0..MAX_INTERLEAVED_TRIES {
            let before = self.read32(OOB_MBOX_SEQ)?;
            self.write32(OOB_MBOX_ARG, arg)?;
            self.write32(OOB_MBOX_ARG2, arg2)?;
            self.write32(OOB_MBOX_CMD, op)?;
            let status = self.read32(OOB_MBOX_STATUS)?;
            let mut words = [0; OOB_MBOX_WORDS];
            for (w, at) in words.iter_mut().zip([
                OOB_MBOX_DATA,
                OOB_MBOX_DATA1,
                OOB_MBOX_DATA2,
                OOB_MBOX_DATA3,
            ]) {
                *w = self.read64(at)?;
            }
            match self.read32(OOB_MBOX_SEQ)?.wrapping_sub(before) {
                1 => return Ok(Answer { status, words }),
                0 => return Err(malformed(op, "OOB_MBOX_SEQ did not move".into())),
                _ => continue,
            }
        }
        Err(OobError::Interleaved {
            op,
            tries: MAX_INTERLEAVED_TRIES,
        })
    }

    /// Runs `op`; its result words, or the error its status means.
    pub fn command(&self, op: u32, arg: u32, arg2: u32) -> Result<[u64; OOB_MBOX_WORDS], OobError> {
        Self::command_result(op, arg, arg2, self.exchange(op, arg, arg2)?)
    }

    fn data(&self, op: u32, arg: u32) -> Result<u64, OobError> {
        Ok(self.command(op, arg, 0)?[0])
    }

    /// `GET_CAPS`.
    pub fn caps(&self) -> Result<Caps, OobError> {
        let op = mbox_op::GET_CAPS;
        let d = self.data(op, 0)?;
        let abi = low32(op, "ABI version", d >> 32)?;
        let events = low32(op, "event count", d & 0xffff_ffff)?;
        let [major, minor] = [abi >> 16, abi & 0xffff].map(|v| u16::try_from(v).unwrap_or(0));
        Ok(Caps {
            abi_major: major,
            abi_minor: minor,
            events,
        })
    }

    /// Counters per block: the events `GET_CAPS` reports (asked once).
    pub fn events(&self) -> Result<usize, OobError> {
        if let Some(n) = self.events.get() {
            return Ok(*n);
        }
        let n = usize::try_from(self.caps()?.events).unwrap_or(usize::MAX);
        if n == 0 || n > MAX_EVENTS {
            return Err(malformed(
                mbox_op::GET_CAPS,
                format!("{n} events (1..={MAX_EVENTS})"),
            ));
        }
        Ok(*self.events.get_or_init(|| n))
    }

    /// `READ_SYSTEM_COUNTER`: the host's system block (RC0) total of
    /// `event`.
    pub fn system_counter(&self, event: u16) -> Result<u64, OobError> {
        self.data(mbox_op::READ_SYSTEM_COUNTER, u32::from(event))
    }

    /// `READ_IDLE_CYCLES`.
    pub fn idle_cycles(&self) -> Result<u64, OobError> {
        self.data(mbox_op::READ_IDLE_CYCLES, 0)
    }

    /// `READ_CYCLE`.
    pub fn cycle(&self) -> Result<u64, OobError> {
        self.data(mbox_op::READ_CYCLE, 0)
    }

    /// `READ_FALLBACKS`.
    pub fn fallbacks(&self) -> Result<u64, OobError> {
        self.data(mbox_op::READ_FALLBACKS, 0)
    }

    /// `OOB_CHANNEL_INFO`.
    pub fn channel_info(&self) -> Result<ChannelInfo, OobError> {
        let [generation, last_commit_cycle, period_cycles, flushes_completed] =
            self.command(mbox_op::OOB_CHANNEL_INFO, 0, 0)?;
        Ok(ChannelInfo {
            generation,
            last_commit_cycle,
            period_cycles,
            flushes_completed,
        })
    }

    /// `OOB_FLUSH`: requests a flush ([`OobError::Busy`] while an earlier
    /// one has not completed).
    pub fn request_flush(&self) -> Result<FlushTicket, OobError> {
        let [number, due_cycle, ..] = self.command(mbox_op::OOB_FLUSH, 0, 0)?;
        Ok(FlushTicket { number, due_cycle })
    }

    /// Waits for `ticket`'s flush: re-reads the channel until its
    /// flushes-completed reaches the number. Nothing advances by itself on
    /// a step clock, so between reads `advance` is called with the cycles
    /// still to go until the due cycle (0 when past it): it advances the
    /// clock or sleeps, and answers `false` to give up.
    pub fn wait_flush(
        &self,
        ticket: FlushTicket,
        mut advance: impl FnMut(u64) -> bool,
    ) -> Result<ChannelInfo, OobError> {
        let mut info = self.channel_info()?;
        for _ in 0..MAX_FLUSH_POLLS {
            if info.flushes_completed >= ticket.number {
                return Ok(info);
            }
            let to_go = ticket.due_cycle.saturating_sub(self.cycle()?);
            if !advance(to_go) {
                break;
            }
            info = self.channel_info()?;
        }
        if info.flushes_completed >= ticket.number {
            return Ok(info);
        }
        Err(OobError::FlushNotCompleted {
            number: ticket.number,
            completed: info.flushes_completed,
        })
    }

    /// Requests a flush and waits for it ([`OobClient::wait_flush`]).
    pub fn flush(&self, advance: impl FnMut(u64) -> bool) -> Result<ChannelInfo, OobError> {
        let ticket = self.request_flush()?;
        self.wait_flush(ticket, advance)
    }

    /// `OOB_NEXT_VM` from 0 to `END`: every configured VM.
    pub fn vms(&self) -> Enumeration<'_, R, OobVm> {
        Enumeration {
            client: self,
            after: 0,
            vm: 0,
            done: false,
            next: Self::next_vm,
        }
    }

    /// `OOB_NEXT_CONTEXT` from 0 to `END`: every context in the channel,
    /// or only `vm`'s.
    pub fn contexts(&self, vm: Option<u32>) -> Enumeration<'_, R, OobContext> {
        Enumeration {
            client: self,
            after: 0,
            vm: vm.unwrap_or(0),
            done: false,
            next: Self::next_context,
        }
    }

    fn next_vm(&self, after: u32, _: u32) -> Result<Option<(u32, OobVm)>, OobError> {
        let op = mbox_op::OOB_NEXT_VM;
        let a = self.exchange(op, after, 0)?;
        if a.status == mbox_status::END {
            return Ok(None);
        }
        let [id, slot, flags, contexts] = Self::command_result(op, after, 0, a)?;
        let id = low32(op, "VM id", id)?;
        if id <= after || id >= MAX_VMS {
            return Err(malformed(op, format!("VM {id} after {after}")));
        }
        let vm = OobVm {
            id,
            slot: low32(op, "partition slot", slot)?,
            confidential: flags & oob_vm_flags::CONFIDENTIAL != 0,
            contexts,
        };
        Ok(Some((id, vm)))
    }

    fn next_context(&self, after: u32, vm: u32) -> Result<Option<(u32, OobContext)>, OobError> {
        let op = mbox_op::OOB_NEXT_CONTEXT;
        let a = self.exchange(op, after, vm)?;
        if a.status == mbox_status::END {
            return Ok(None);
        }
        let [id, owner, created_cycle, state] = Self::command_result(op, after, vm, a)?;
        let id = low32(op, "context id", id)?;
        if id <= after || id >= MAX_CONTEXTS {
            return Err(malformed(op, format!("context {id} after {after}")));
        }
        let state = match state {
            oob_ctx_state::ACTIVE => OobCtxState::Active,
            oob_ctx_state::DESTROYED => OobCtxState::Destroyed,
            s => return Err(malformed(op, format!("context state {s}"))),
        };
        let ctx = OobContext {
            id,
            vm: low32(op, "VM id", owner)?,
            created_cycle,
            state,
        };
        Ok(Some((id, ctx)))
    }

    /// The words of an exchanged answer, or its status's error.
    fn command_result(
        op: u32,
        arg: u32,
        arg2: u32,
        a: Answer,
    ) -> Result<[u64; OOB_MBOX_WORDS], OobError> {
        match a.status {
            mbox_status::OK => Ok(a.words),
            status => status_error(op, arg, arg2, status),
        }
    }

    /// `OOB_SNAPSHOT`: latches `scope`'s block.
    pub fn snapshot(&self, scope: OobScope) -> Result<Snapshot, OobError> {
        let op = mbox_op::OOB_SNAPSHOT;
        let (arg, arg2) = scope.args();
        let [tag, generation, commits, detail] = self.command(op, arg, arg2)?;
        let tag = low32(op, "tag", tag)?;
        if tag == 0 {
            return Err(malformed(op, "tag 0".into()));
        }
        Ok(Snapshot {
            tag,
            generation,
            commits,
            detail,
        })
    }

    /// `OOB_READ_LATCH`: four latched counters from event `first` under
    /// `tag` ([`OobError::Stale`] when another snapshot replaced it).
    pub fn read_latch(&self, tag: u32, first: u32) -> Result<[u64; OOB_MBOX_WORDS], OobError> {
        self.command(mbox_op::OOB_READ_LATCH, first, tag)
    }

    /// A consistent copy of `scope`'s block: a snapshot, then the latch
    /// four counters at a time; a new snapshot when another replaced the
    /// latch meanwhile (at most [`MAX_STALE_TRIES`] snapshots).
    pub fn read_block(&self, scope: OobScope) -> Result<OobBlock, OobError> {
        let events = self.events()?;
        'snapshot: for _ in 0..MAX_STALE_TRIES {
            let snapshot = self.snapshot(scope)?;
            let mut counters = Vec::with_capacity(events);
            while counters.len() < events {
                let first = u32::try_from(counters.len()).unwrap_or(u32::MAX);
                match self.read_latch(snapshot.tag, first) {
                    Ok(words) => {
                        let take = (events - counters.len()).min(OOB_MBOX_WORDS);
                        counters.extend_from_slice(&words[..take]);
                    }
                    Err(OobError::Stale { .. }) => continue 'snapshot,
                    Err(e) => return Err(e),
                }
            }
            return Ok(OobBlock { snapshot, counters });
        }
        Err(OobError::StaleAgain {
            tries: MAX_STALE_TRIES,
        })
    }

    /// `OOB_READ_IDLE`.
    pub fn idle(&self) -> Result<Idle, OobError> {
        let [idle_cycles, idle_periods, cycle, idle_now] =
            self.command(mbox_op::OOB_READ_IDLE, 0, 0)?;
        Ok(Idle {
            idle_cycles,
            idle_periods,
            cycle,
            idle_now: idle_now != 0,
        })
    }

    /// `OOB_HOST_STATE`.
    pub fn host_state(&self) -> Result<HostState, OobError> {
        let op = mbox_op::OOB_HOST_STATE;
        let [state, since, handles, timeout_cycles] = self.command(op, 0, 0)?;
        let driver = match state {
            oob_host_state::LOADED => HostDriver::Loaded,
            oob_host_state::NOT_RESPONDING => HostDriver::NotResponding,
            oob_host_state::UNLOADED => HostDriver::Unloaded,
            s => return Err(malformed(op, format!("host state {s}"))),
        };
        Ok(HostState {
            driver,
            since_request: (since != u64::MAX).then_some(since),
            handles,
            timeout_cycles,
        })
    }

    /// `OOB_DEVICE_INFO`.
    pub fn device_info(&self) -> Result<DeviceInfo, OobError> {
        let [nominal_khz, clock_khz, resets, partition_mask] =
            self.command(mbox_op::OOB_DEVICE_INFO, 0, 0)?;
        Ok(DeviceInfo {
            nominal_khz,
            clock_khz,
            resets,
            partition_mask,
        })
    }
}

/// The error a status other than `OK` means.
fn status_error<T>(op: u32, arg: u32, arg2: u32, status: u32) -> Result<T, OobError> {
    Err(match status {
        mbox_status::IDLE => OobError::Idle { op },
        mbox_status::ERR_OPCODE => OobError::Opcode { op },
        mbox_status::ERR_ARG => OobError::Arg { op, arg, arg2 },
        mbox_status::ERR_NOT_FOUND => OobError::NotFound { op, arg },
        mbox_status::ERR_STALE => OobError::Stale { tag: arg2 },
        mbox_status::ERR_CONFIDENTIAL => OobError::Confidential { op, arg },
        mbox_status::END => OobError::End { op },
        mbox_status::ERR_BUSY => OobError::Busy,
        status => OobError::UnknownStatus { op, status },
    })
}

type NextFn<R, T> = fn(&OobClient<R>, u32, u32) -> Result<Option<(u32, T)>, OobError>;

/// An enumeration (`OOB_NEXT_VM`, `OOB_NEXT_CONTEXT`): items until `END`;
/// after an error, that error and nothing more.
pub struct Enumeration<'a, R: OobRegisters, T> {
    client: &'a OobClient<R>,
    after: u32,
    vm: u32,
    done: bool,
    next: NextFn<R, T>,
}

impl<R: OobRegisters, T> std::fmt::Debug for Enumeration<'_, R, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enumeration")
            .field("after", &self.after)
            .field("vm", &self.vm)
            .field("done", &self.done)
            .finish()
    }
}

impl<R: OobRegisters, T> Iterator for Enumeration<'_, R, T> {
    type Item = Result<T, OobError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match (self.next)(self.client, self.after, self.vm) {
            Ok(Some((id, item))) => {
                self.after = id;
                Some(Ok(item))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
