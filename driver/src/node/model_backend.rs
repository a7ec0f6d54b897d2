//! The device model as the node's backend: the kernel-style driver layer
//! between the transport and the hardware model.

use crate::model::oob::host::HostEvent;
use std::time::Instant;

use gpupm_uapi::cc::{Finish, KeyExchange};
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::ioctl::{BlockLedgerQuery, Identity, LedgerQuery, RegOp, RiLedgerQuery};

use super::backend::{BackendError, DeviceBackend};
use crate::model::cc::ExchangeError;
use crate::model::{Device, DeviceError, RegError};

/// The emulated device behind a node.
#[derive(Debug)]
pub struct ModelBackend {
    dev: Device,
    debug_ledger: bool,
}

impl ModelBackend {
    /// Serves `dev`, without the debug ledger.
    pub fn new(dev: Device) -> Self {
        ModelBackend {
            dev,
            debug_ledger: false,
        }
    }

    /// The ledgers are a debug interface.
    fn debug_only(&self) -> Result<(), BackendError> {
        if self.debug_ledger {
            Ok(())
        } else {
            Err(BackendError::NotSupported(
                "the ledger is a debug interface (gpupm-driver --debug-ledger)".into(),
            ))
        }
    }

    /// Serves `dev` with the debug ledger (`GPUPM_IOC_LEDGER`): the
    /// emulator's test oracle, for tests and the demo.
    pub fn with_debug_ledger(dev: Device) -> Self {
        ModelBackend {
            dev,
            debug_ledger: true,
        }
    }
}

fn invalid(e: impl std::fmt::Display) -> BackendError {
    BackendError::Invalid(e.to_string())
}

fn from_exchange(e: ExchangeError) -> BackendError {
    match e {
        ExchangeError::NoIdentity => BackendError::Unavailable(e.to_string()),
        ExchangeError::SessionExists(_) => BackendError::Busy(e.to_string()),
        ExchangeError::Entropy(_) => BackendError::Fault(e.to_string()),
        other => invalid(other),
    }
}

fn from_device(e: DeviceError) -> BackendError {
    match e {
        DeviceError::NotStepClock => BackendError::NotSupported(e.to_string()),
        other => invalid(other),
    }
}

impl DeviceBackend for ModelBackend {
    fn identity(&mut self) -> Identity {
        self.dev.identity()
    }

    fn read_reg(&mut self, offset: u64, width: u32) -> Result<u64, BackendError> {
        self.dev.read_reg(offset, width).map_err(invalid)
    }

    fn write_reg(&mut self, offset: u64, width: u32, value: u64) -> Result<(), BackendError> {
        self.dev
            .write_reg(offset, width, value)
            .map_err(|e: RegError| invalid(e))
    }

    fn read_mem(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        self.dev.read_window(offset, buf).map_err(invalid)
    }

    fn take_written_block_slots(&mut self, out: &mut Vec<u32>) {
        self.dev.take_written_block_slots(out);
    }

    fn resets(&self) -> u64 {
        self.dev.resets()
    }

    fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), (usize, BackendError)> {
        self.dev.batch(ops).map_err(|(i, e)| (i, from_device(e)))
    }

    fn advance(&mut self, cycles: u64) -> Result<u64, BackendError> {
        self.dev.advance(cycles).map_err(from_device)
    }

    fn debug_ledger(&self) -> bool {
        self.debug_ledger
    }

    fn ledger(&mut self, scope: u32, id: u32) -> Result<LedgerQuery, BackendError> {
        if !self.debug_ledger {
            return Err(BackendError::NotSupported(
                "the ledger is a debug interface (gpupm-driver --debug-ledger)".into(),
            ));
        }
        self.dev.ledger_query(scope, id).map_err(from_device)
    }

    fn ledger_blocks(&mut self, ctx: u32, first: u32) -> Result<BlockLedgerQuery, BackendError> {
        if !self.debug_ledger {
            return Err(BackendError::NotSupported(
                "the ledger is a debug interface (gpupm-driver --debug-ledger)".into(),
            ));
        }
        self.dev.ledger_blocks(ctx, first).map_err(from_device)
    }

    fn ledger_ri(&mut self, block: u32) -> Result<RiLedgerQuery, BackendError> {
        if !self.debug_ledger {
            return Err(BackendError::NotSupported(
                "the ledger is a debug interface (gpupm-driver --debug-ledger)".into(),
            ));
        }
        self.dev.ledger_ri(block).map_err(from_device)
    }

    fn ledger_ranges(
        &mut self,
        ctx: u32,
        p: u32,
    ) -> Result<gpupm_uapi::ranges::RangeLedgerQuery, BackendError> {
        self.debug_only()?;
        self.dev.ledger_ranges(ctx, p).map_err(from_device)
    }

    fn ledger_calls(
        &mut self,
        ctx: u32,
        first: u32,
    ) -> Result<gpupm_uapi::ranges::CallLedgerQuery, BackendError> {
        self.debug_only()?;
        self.dev.ledger_calls(ctx, first).map_err(from_device)
    }

    fn reset(&mut self) -> Result<(), BackendError> {
        self.dev
            .reset()
            .map_err(|e| BackendError::Fault(e.to_string()))
    }

    fn cc_key_exchange(&mut self, msg: &mut KeyExchange) -> Result<(), BackendError> {
        self.dev.cc_key_exchange(msg).map_err(from_exchange)
    }

    fn cc_finish(&mut self, msg: &mut Finish) -> Result<(), BackendError> {
        self.dev.cc_finish(msg).map_err(from_exchange)
    }

    fn tick(&mut self, now: Instant) {
        self.dev.tick(now);
    }

    fn host_event(&mut self, event: HostEvent) {
        self.dev.host_event(event);
    }

    fn interrupts_since(&self, from_seq: u64, out: &mut Vec<InterruptRecord>) -> u64 {
        self.dev.interrupts_since(from_seq, out)
    }

    fn interrupt_pending(&self) -> u32 {
        self.dev.interrupt_pending()
    }
}
