//! The device behind the node: what a transport needs from the device model.
//!
//! The transport never links the model's internals; it holds one
//! `Box<dyn DeviceBackend>` behind a mutex and calls these methods with the
//! lock held, so each call is atomic with respect to every other node
//! request and to the real-time clock.

use crate::model::oob::host::HostEvent;
use std::time::Instant;

use gpupm_uapi::cc::{Finish, KeyExchange};
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::ioctl::{BlockLedgerQuery, Identity, LedgerQuery, RegOp, RiLedgerQuery};

/// Why the device refused a request. Mapped to an errno only at the node
/// boundary ([`super::error`]).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The request names something that does not exist or a value out of range.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The request is valid in general but not in this configuration
    /// (e.g. advancing a real-time clock).
    #[error("not supported in this configuration: {0}")]
    NotSupported(String),
    /// The device is in a state that forbids the request right now.
    #[error("device busy: {0}")]
    Busy(String),
    /// The device model failed internally.
    #[error("device fault: {0}")]
    Fault(String),
    /// The device lacks what the request needs (a confidential key
    /// exchange on a device without an identity).
    #[error("not available on this device: {0}")]
    Unavailable(String),
}

/// A device that a node transport serves.
pub trait DeviceBackend: Send + 'static {
    /// Identity for `GPUPM_IOC_IDENTITY` (fills every field except `version`).
    fn identity(&mut self) -> Identity;
    /// 4- or 8-byte register read at a BAR0 offset.
    fn read_reg(&mut self, offset: u64, width: u32) -> Result<u64, BackendError>;
    /// 4- or 8-byte register write.
    fn write_reg(&mut self, offset: u64, width: u32, value: u64) -> Result<(), BackendError>;
    /// Read from the memory window; `offset` is relative to the window start
    /// (node file offset minus `layout::MEM_WINDOW_OFFSET`).
    fn read_mem(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError>;
    /// Appends the block slots whose window bytes changed since the last
    /// call to `out`, each once (what the commit mirror copies).
    fn take_written_block_slots(&mut self, out: &mut Vec<u32>);
    /// Device resets so far.
    fn resets(&self) -> u64;
    /// Atomic batch: all ops or none; on error returns the failing index.
    fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), (usize, BackendError)>;
    /// Step clock only; returns the new cycle.
    fn advance(&mut self, cycles: u64) -> Result<u64, BackendError>;
    /// Whether the debug ledger (`GPUPM_IOC_LEDGER`) exists.
    fn debug_ledger(&self) -> bool;
    /// Debug ledger read (sealed for a confidential VM's scopes).
    fn ledger(&mut self, scope: u32, id: u32) -> Result<LedgerQuery, BackendError>;
    /// Debug per-block ledger of context `ctx`'s program from row `first`
    /// (sealed for a confidential VM's context).
    fn ledger_blocks(&mut self, ctx: u32, first: u32) -> Result<BlockLedgerQuery, BackendError>;
    /// Debug ground truth of runtime-instrumentation control block `block`.
    fn ledger_ri(&mut self, block: u32) -> Result<RiLedgerQuery, BackendError>;
    /// Debug ledger of partition `p`'s marked ranges for context `ctx`
    /// (sealed for a confidential VM's context).
    fn ledger_ranges(
        &mut self,
        ctx: u32,
        p: u32,
    ) -> Result<gpupm_uapi::ranges::RangeLedgerQuery, BackendError>;
    /// Debug call-graph ledger of context `ctx` from call site `first`
    /// (sealed for a confidential VM's context).
    fn ledger_calls(
        &mut self,
        ctx: u32,
        first: u32,
    ) -> Result<gpupm_uapi::ranges::CallLedgerQuery, BackendError>;
    /// Device reset.
    fn reset(&mut self) -> Result<(), BackendError>;
    /// A confidential VM's key exchange: fills the output fields of `msg`.
    fn cc_key_exchange(&mut self, msg: &mut KeyExchange) -> Result<(), BackendError>;
    /// Finishes a confidential VM's key exchange: fills `msg.key_epoch`.
    fn cc_finish(&mut self, msg: &mut Finish) -> Result<(), BackendError>;
    /// Real-time clock: bring the device up to wall time `now` (no-op in step mode).
    fn tick(&mut self, now: Instant);
    /// What the device knows of its host driver changed (the OOB
    /// mailbox's `OOB_HOST_STATE` reports it to the BMC).
    fn host_event(&mut self, event: HostEvent);
    /// Interrupt records with seq >= `from_seq` appended to `out` (oldest
    /// first); returns the seq the next record will have. Records older than
    /// the device's retention are gone (the caller sees a seq gap).
    fn interrupts_since(&self, from_seq: u64, out: &mut Vec<InterruptRecord>) -> u64;
    /// `INTR_STATUS & !INTR_MASK`.
    fn interrupt_pending(&self) -> u32;
}
