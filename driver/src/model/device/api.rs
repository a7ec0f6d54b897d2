//! The device's host-facing surface beyond single register accesses:
//! batches, time, the ledger, identity, interrupts and reset.

use std::time::Instant;

use gpupm_uapi::events::{MAX_EVENTS, MULTIBIT_SCALE};
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::{self, ledger_scope, Identity, LedgerQuery, RegOp, MAX_ADVANCE_CYCLES};
use gpupm_uapi::layout::Block;
use gpupm_uapi::regs::{ctx_state, MAX_CONTEXTS, MAX_PARTITION_SLOTS, MAX_VMS};

use super::Device;
use crate::model::access::{table_count, RegError};
use crate::model::cc::{self, EntropyError};
use crate::model::ccu::CountingSnapshot;
use crate::model::memory::WindowError;

/// Errors of the device's host-facing operations.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    /// A register access failed.
    #[error(transparent)]
    Reg(#[from] RegError),
    /// A memory-window access failed.
    #[error(transparent)]
    Window(#[from] WindowError),
    /// Advance on a real-time clock.
    #[error("the clock runs in real time; only a step clock can be advanced")]
    NotStepClock,
    /// Advance by 0 or too many cycles.
    #[error("cannot advance by {0} cycles (1..=2^40)")]
    AdvanceRange(u64),
    /// Unknown op kind or width in a batch.
    #[error("batch op kind {0} is neither READ nor WRITE")]
    BadOp(u32),
    /// Unknown ledger scope or id.
    #[error("no ledger scope {scope} with id {id}")]
    BadLedgerScope {
        /// Scope.
        scope: u32,
        /// Id.
        id: u32,
    },
    /// No session id for a reset.
    #[error(transparent)]
    Entropy(#[from] EntropyError),
}

/// A ledger row with the hierarchy's view beside it, per event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerTotals {
    /// Signal units generated.
    pub generated: [u64; MAX_EVENTS],
    /// Counts discarded by masks.
    pub masked: [u64; MAX_EVENTS],
    /// Multi-bit residue that never became a count (dropped + live).
    pub remainder: [u64; MAX_EVENTS],
}

impl LedgerTotals {
    /// What a block must hold after a full flush, per event:
    /// `(generated - remainder) / scale - masked`.
    pub fn expected_committed(&self) -> [u64; MAX_EVENTS] {
        let mut out = [0; MAX_EVENTS];
        for (e, o) in out.iter_mut().enumerate() {
            let id = u16::try_from(e).unwrap_or(u16::MAX);
            let scale = match gpupm_uapi::events::by_id(id) {
                Some(info) if info.multibit => MULTIBIT_SCALE,
                _ => 1,
            };
            *o = (self.generated[e] - self.remainder[e]) / scale - self.masked[e];
        }
        out
    }
}

impl Device {
    /// Writes a register; on error nothing changed.
    pub fn write_reg(&mut self, offset: u64, width: u32, value: u64) -> Result<(), RegError> {
        let mut shadow = self.shadow();
        let w = self.check_write(&mut shadow, offset, width, value)?;
        self.execute(w);
        Ok(())
    }

    /// Runs `ops` in order with no device time passing; all or nothing.
    pub fn batch(&mut self, ops: &mut [RegOp]) -> Result<(), (usize, DeviceError)> {
        let mut shadow = self.shadow();
        let mut writes = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            match op.op {
                ioctl::reg_op::READ => {
                    // Readability depends only on the address, not on state.
                    self.read_reg(op.offset, op.width)
                        .map_err(|e| (i, e.into()))?;
                    writes.push(None);
                }
                ioctl::reg_op::WRITE => {
                    let w = self
                        .check_write(&mut shadow, op.offset, op.width, op.value)
                        .map_err(|e| (i, e.into()))?;
                    writes.push(Some(w));
                }
                other => return Err((i, DeviceError::BadOp(other))),
            }
        }
        for (op, w) in ops.iter_mut().zip(writes) {
            match w {
                Some(w) => self.execute(w),
                // Checked above; a read cannot start failing in between.
                None => op.value = self.read_reg(op.offset, op.width).unwrap_or(0),
            }
        }
        Ok(())
    }

    /// Device resets so far.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// Appends the block slots whose host-visible bytes changed since the
    /// last call to `out` (each once): what the commit mirror copies.
    pub fn take_written_block_slots(&mut self, out: &mut Vec<u32>) {
        self.mem.take_written(out);
    }

    /// Reads host-visible device memory at window offset `offset`.
    pub fn read_window(&self, offset: u64, buf: &mut [u8]) -> Result<(), WindowError> {
        if offset >= gpupm_uapi::ranges::RANGE_REGION {
            return self.read_range_window(offset, buf);
        }
        if offset >= gpupm_uapi::ri::RI_REGION {
            return self.read_ri_window(offset, buf);
        }
        if offset >= gpupm_uapi::sampling::SAMPLE_REGION {
            return self.read_sample_window(offset, buf);
        }
        self.mem.read_window(offset, buf)
    }

    /// Advances a step clock by `cycles`; returns the new cycle.
    pub fn advance(&mut self, cycles: u64) -> Result<u64, DeviceError> {
        if !self.clock.is_step() {
            return Err(DeviceError::NotStepClock);
        }
        if cycles == 0 || cycles > MAX_ADVANCE_CYCLES {
            return Err(DeviceError::AdvanceRange(cycles));
        }
        self.run_until(self.clock.now() + cycles);
        Ok(self.clock.now())
    }

    /// Brings a real-time clock up to wall time `now` (no-op in step mode).
    pub fn tick(&mut self, now: Instant) {
        if self.clock.is_step() {
            return;
        }
        let khz = self.clock.tick_khz();
        let target = self.clock.tick_target(now, self.parts.switch_pending());
        if target == self.clock.now() {
            return;
        }
        // A tick stops at a switch request, so the host sees the request at
        // the device time it was raised, as with hardware whose clock runs
        // continuously, not up to a whole tick later.
        self.run_until_or_request(target, true);
        self.clock.settle_tick(target, khz);
    }

    /// Ledger of a scope, brought up to the current cycle.
    pub fn ledger_totals(&mut self, scope: u32, id: u32) -> Result<LedgerTotals, DeviceError> {
        let exists = match scope {
            ledger_scope::CONTEXT => {
                (1..MAX_CONTEXTS).contains(&id) && self.ctxs.get(id).state != ctx_state::FREE
            }
            ledger_scope::VM => (1..MAX_VMS).contains(&id) && self.vms.partition(id) != 0,
            ledger_scope::SYSTEM => id == 0,
            _ => false,
        };
        if !exists {
            return Err(DeviceError::BadLedgerScope { scope, id });
        }
        self.sync_all();
        let row = match scope {
            ledger_scope::CONTEXT => self.ledger.context(id),
            ledger_scope::VM => self.ledger.vm(id),
            _ => self.ledger.system(),
        };
        let mut remainder = row.remainder;
        for p in 0..MAX_PARTITION_SLOTS {
            let who = self.ccu.owner(p);
            let counts = match scope {
                ledger_scope::CONTEXT => who.ctx == id && id != 0,
                ledger_scope::VM => who.vm == id,
                _ => self.parts.is_configured(p) && !self.owner_confidential(p),
            };
            if counts {
                let live = self.ccu.residue(&self.topo, p);
                for (r, l) in remainder.iter_mut().zip(live) {
                    *r += l;
                }
            }
        }
        Ok(LedgerTotals {
            generated: row.generated,
            masked: row.masked,
            remainder,
        })
    }

    /// The ledger in its ioctl form: sealed under the VM's session key
    /// for a confidential VM or one of its contexts.
    pub fn ledger_query(&mut self, scope: u32, id: u32) -> Result<LedgerQuery, DeviceError> {
        let t = self.ledger_totals(scope, id)?;
        let mut q = LedgerQuery {
            version: ioctl::IOCTL_STRUCT_VERSION,
            scope,
            id,
            flags: 0,
            generated: t.generated,
            masked: t.masked,
            remainder: t.remainder,
            envelope: Default::default(),
            tag: [0; 16],
        };
        let vm = match scope {
            ledger_scope::CONTEXT => self.ctxs.get(id).vm,
            ledger_scope::VM => id,
            _ => 0,
        };
        if let Some(cipher) = self.vms.cipher(vm) {
            cc::seal_ledger(&mut q, cipher);
        }
        Ok(q)
    }

    /// Identity and topology summary.
    pub fn identity(&self) -> Identity {
        Identity {
            version: ioctl::IOCTL_STRUCT_VERSION,
            magic: gpupm_uapi::regs::DEVICE_MAGIC,
            abi_version: gpupm_uapi::ABI_VERSION,
            events: table_count(gpupm_uapi::events::EVENT_COUNT),
            partitions: table_count(self.parts.slice_count()),
            ccus: table_count(self.topo.ccus.len()),
            sms: self.topo.sm_count(),
            clock_khz: self.scenario.clock.khz,
            step_clock: u32::from(self.clock.is_step()),
            reserved: 0,
            cycle: self.clock.now(),
        }
    }

    /// Interrupt records with `seq >= from` (oldest first); returns the next seq.
    pub fn interrupts_since(&self, from: u64, out: &mut Vec<InterruptRecord>) -> u64 {
        self.intr.since(from, out)
    }

    /// `INTR_STATUS & !INTR_MASK`.
    pub fn interrupt_pending(&self) -> u32 {
        self.intr.pending()
    }

    /// Device reset: every count, block, ring and the ledger go to zero
    /// (the out-of-band channel's blocks excepted: it commits what was in
    /// flight first, and keeps counting across);
    /// trigger settings and masks return to the scenario's (which masks
    /// nothing); every confidential session a key exchange established
    /// ends, and so does every pending exchange (the VMs' slots are
    /// withheld until their tenants establish new ones); a VM whose key
    /// the scenario gives goes on under a fresh session id; contexts and
    /// scheduling carry on.
    pub fn reset(&mut self) -> Result<(), DeviceError> {
        let session = self.next_session()?;
        self.reset_into(session);
        Ok(())
    }

    /// The session id the next reset starts.
    pub(super) fn next_session(&self) -> Result<u64, EntropyError> {
        self.boot.draw(self.resets + 1)
    }

    /// [`Device::reset`] into session `session`.
    pub(super) fn reset_into(&mut self, session: u64) {
        self.sync_all();
        // The OOB channel is not the host's to reset: it takes everything
        // in flight first and keeps its blocks.
        self.oob_drain_for_reset();
        self.ccu.zero_values();
        self.ccu.reset_masks();
        self.ledger.clear();
        self.clear_program_truth();
        self.rc.reset();
        self.resets += 1;
        self.vms.start_session(session);
        self.responder.clear();
        self.staging.clear();
        for slot in self.mem.zero_counters() {
            let vm = self.mem.block(slot).vm;
            self.mem.publish(slot, self.vms.cipher(vm));
        }
        self.trig.clear_target();
        self.trig.program_defaults(self.clock.now());
        self.intr
            .raise(source::DEVICE_RESET, 0, 0, 0, self.clock.now());
    }

    /// The plaintext block in `slot` (device-internal; for tests and the
    /// simulator — the host reads the window).
    pub fn block(&self, slot: u32) -> &Block {
        self.mem.block(slot)
    }

    /// Block slot of context `ctx`, if it has one.
    pub fn ctx_slot(&self, ctx: u32) -> Option<u32> {
        self.ctxs.slot(ctx)
    }

    /// Contexts that exist (active or destroyed-unreleased): (id, vm, state).
    pub fn contexts(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.ctxs.live()
    }

    /// Contexts the workload could not create (no free id or block).
    pub fn ctx_create_failures(&self) -> u64 {
        self.ctxs.create_failures()
    }

    /// Every counter value below the RCs, after bringing all partitions to now.
    pub fn counting_snapshot(&mut self) -> CountingSnapshot {
        self.sync_all();
        self.ccu.snapshot()
    }

    /// Self-checks that must stay zero: CCU wraps, missed thresholds.
    pub fn self_check_failures(&self) -> (u64, u64) {
        (self.ccu.wraps(), self.ccu.missed_thresholds())
    }
}
