//! The BAR0 register file: each access is decoded once (width, alignment,
//! which register and which half) and routed by address range to the unit
//! that owns the register.
//!
//! A write is first *checked* against a [`Shadow`] — a small copy of the
//! control state that decides whether a write is legal (handshake states,
//! pause bits, bind staging, trigger target, mask index, ring tail,
//! released contexts) — and only then executed. A failed check changes
//! nothing. A batch checks every op against one shadow that it advances op
//! by op, and executes only if all pass, which makes batches atomic without
//! copying the device.

use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::identity::bytes_to_words;
use gpupm_uapi::intr::source;
use gpupm_uapi::layout::SYSTEM_BLOCK_SLOT;
use gpupm_uapi::map::Location;
use gpupm_uapi::regdef::BlockId;
use gpupm_uapi::regs::{self as r, device_status, hs_state, part_ctrl, rc_cmd};

use super::Device;
use crate::model::access::{count32, r32, r64, slots, Access, RegError, RegValue, Reject};
use crate::model::cc::rekey::StagingWrite;
use crate::model::cc::{KeyWrite, RekeyStaging};
use crate::model::ccu::regs::CcuWrite;
use crate::model::ccu::Counting;
use crate::model::intr::{Interrupts, IntrWrite};
use crate::model::mailbox::{Mailbox, MailboxView, MailboxWrite};
use crate::model::memory::ring::{Ring, RingWrite};
use crate::model::oob::mailbox::{OobMailbox, OobWrite};
use crate::model::partition::handshake;
use crate::model::partition::{PartShadow, PartWrite};
use crate::model::ranges::{RangeShadow, RangeWrite};
use crate::model::ri::{RiShadow, RiWrite};
use crate::model::sampling::buffer::BufWrite;
use crate::model::sampling::{SampShadow, SampWrite};
use crate::model::trigger::{TriggerBlock, TriggerWrite};

/// The unit an access goes to, with the instance and the offset inside
/// the instance's block for per-instance arrays (the absolute offset for
/// the device-wide blocks, as their constants are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Identity,
    Trigger,
    RcBuffer,
    Interrupts,
    Mailbox,
    /// The OOB mailbox (its own registers, the host layout's and past it).
    OobMailbox,
    Rekey,
    /// A partition block: the partition's, its ring's or its RC's register.
    Partition(u32, u64),
    /// A partition's sampling block.
    Sampling(u32, u64),
    /// The runtime-instrumentation globals.
    RiGlobal,
    /// A runtime-instrumentation control block.
    Ri(u32, u64),
    /// A partition's range block.
    Range(u32, u64),
    /// A partition's range-record ring registers.
    RangeRing(u32, u64),
    Ccu(u32, u64),
    Vm(u32, u64),
    Ctx(u32, u64),
}

/// Who serves the block a decoded access lies in: one arm per block of
/// the register map, so a new block does not compile until it is routed.
fn unit_of(at: &Location) -> Unit {
    let (i, o) = (at.instance, at.offset);
    match at.block.id {
        BlockId::Identity => Unit::Identity,
        BlockId::Trigger => Unit::Trigger,
        BlockId::RcBuffer => Unit::RcBuffer,
        BlockId::Interrupts => Unit::Interrupts,
        BlockId::Mailbox => Unit::Mailbox,
        BlockId::OobMailbox => Unit::OobMailbox,
        BlockId::Rekey => Unit::Rekey,
        BlockId::RiGlobal => Unit::RiGlobal,
        BlockId::RangeRing => Unit::RangeRing(i, o),
        BlockId::Partition => Unit::Partition(i, o),
        BlockId::Sampling => Unit::Sampling(i, o),
        BlockId::Ccu => Unit::Ccu(i, o),
        BlockId::Ri => Unit::Ri(i, o),
        BlockId::Range => Unit::Range(i, o),
        BlockId::Vm => Unit::Vm(i, o),
        BlockId::Ctx => Unit::Ctx(i, o),
    }
}

/// Control state that decides whether writes are legal.
#[derive(Clone, Debug)]
pub(super) struct Shadow {
    parts: [PartShadow; r::MAX_PARTITION_SLOTS as usize],
    target: u32,
    mask_index: [u32; r::MAX_CCUS as usize],
    tail: [u32; r::MAX_PARTITION_SLOTS as usize],
    released: Vec<u32>,
    staging: RekeyStaging,
    samp: [SampShadow; r::MAX_PARTITION_SLOTS as usize],
    /// Made at the batch's first RI write: most batches have none.
    ri: Option<Box<RiShadow>>,
    ranges: [RangeShadow; r::MAX_PARTITION_SLOTS as usize],
}

/// A checked write, ready to execute.
#[derive(Clone, Debug)]
pub(super) enum Write {
    /// A reset into the new session `session`.
    Reset {
        session: u64,
    },
    Trigger(TriggerWrite),
    Interrupt(IntrWrite),
    /// A write to the host's mailbox.
    Mailbox(MailboxWrite),
    /// A write to the OOB mailbox.
    OobMailbox(OobWrite),
    Staging(StagingWrite),
    Partition(u32, PartWrite),
    Ring(u32, RingWrite),
    Sampling(u32, SampWrite),
    Ri(RiWrite),
    Range(u32, RangeWrite),
    Ccu(u32, CcuWrite),
    Vm(u32, KeyWrite),
    CtxRelease(u32),
}

impl Device {
    /// Reads a register.
    pub fn read_reg(&self, offset: u64, width: u32) -> Result<u64, RegError> {
        let access = Access::decode(offset, width)?;
        let v = self
            .read_value(&access.at, access.base)
            .ok_or(RegError::NoRegister { offset })?;
        Ok(access.extract(v))
    }

    /// The value of the register at `offset` (located at `at`), typed by
    /// its width; `None` where its instance does not exist (or answers
    /// nothing yet).
    fn read_value(&self, at: &Location, offset: u64) -> Option<RegValue> {
        match unit_of(at) {
            Unit::Identity => self.read_identity(offset),
            Unit::Trigger => self.trig.read(offset),
            Unit::RcBuffer => self.rc.read_global(offset),
            Unit::Interrupts => self.intr.read(offset),
            Unit::Mailbox => self.mbox.read(offset),
            Unit::OobMailbox => self.oob_mbox.read(offset),
            Unit::Rekey => RekeyStaging::read(offset),
            Unit::Partition(p, o) if !self.parts.is_configured(p) => self.parts.read(p, o),
            Unit::Partition(p, o) if Ring::owns(o) => self.mem.rings.get(p as usize)?.read(p, o),
            Unit::Partition(p, o) if o == r::PART_COMMIT_SEQ => self.rc.read_channel(p, o),
            Unit::Partition(p, o) => self.parts.read(p, o),
            Unit::Sampling(p, o) => self.samplers[p as usize].read(o),
            Unit::RiGlobal => self.ri.read_global(offset),
            Unit::Ri(i, o) => self.ri.read(i, o),
            Unit::Range(p, o) => self.ranges[p as usize].read_range(o),
            Unit::RangeRing(p, o) => self.ranges[p as usize].read_ring(o),
            Unit::Ccu(c, o) => self.ccu.read_ccu(&self.topo, c, o),
            Unit::Vm(vm, o) => self.vms.read(vm, o),
            Unit::Ctx(ctx, o) => self.ctxs.read(ctx, o),
        }
    }

    /// Identity, topology and device-status registers; the clock's own.
    fn read_identity(&self, offset: u64) -> Option<RegValue> {
        let t = &self.scenario.topology;
        match offset {
            r::ID => r32(r::DEVICE_MAGIC),
            r::ABI_VERSION => r32(gpupm_uapi::ABI_VERSION),
            r::TOPO_GPCS => count32(t.sms_per_gpc.len()),
            r::TOPO_SMS => r32(self.topo.sm_count()),
            r::TOPO_L2_SLICES => r32(t.memory_slices * t.l2_per_slice),
            r::TOPO_FB_PARTITIONS => r32(t.memory_slices * t.fb_per_slice),
            r::TOPO_NVLINKS => r32(t.nvlinks),
            r::TOPO_COPY_ENGINES => r32(t.memory_slices * t.ce_per_slice),
            r::TOPO_CCUS => count32(self.topo.ccus.len()),
            r::TOPO_PARTITIONS => count32(self.parts.slice_count()),
            r::TOPO_EVENTS => count32(EVENT_COUNT),
            r::TOPO_MEMORY_SLICES => r32(t.memory_slices),
            r::DEVICE_STATUS => r32(self.device_status()),
            r::RESET => r32(0),
            r::TOPO_VMS => r32(r::MAX_VMS),
            r::TOPO_CONTEXTS => r32(r::MAX_CONTEXTS),
            r::CCU_WRAPS => r64(self.ccu.wraps()),
            r::GPU_INDEX => r32(self.scenario.identity.index),
            r::PCI_ADDRESS => r32(self.scenario.identity.pci.to_register()),
            o if (r::UUID..r::MODEL_NAME + 4 * r::MODEL_NAME_WORDS as u64).contains(&o) => {
                r32(self.identity_word(o))
            }
            // The rest of the block is the clock's (`CLOCK_KHZ`, `CYCLE`, …).
            _ => self.clock.read(offset),
        }
    }

    /// One word of the `UUID`, `SERIAL` or `MODEL_NAME` arrays (which
    /// follow one another) at `offset`.
    fn identity_word(&self, offset: u64) -> u32 {
        let id = &self.scenario.identity;
        let (field, base): (&[u8], u64) = if offset >= r::MODEL_NAME {
            (id.model.as_bytes(), r::MODEL_NAME)
        } else if offset >= r::SERIAL {
            (id.serial.as_bytes(), r::SERIAL)
        } else {
            (&id.uuid.0, r::UUID)
        };
        let at = usize::try_from(offset - base).unwrap_or(usize::MAX);
        let mut word = [0u32; 1];
        bytes_to_words(field.get(at..).unwrap_or(&[]), &mut word);
        word[0]
    }

    fn device_status(&self) -> u32 {
        let step = if self.clock.is_step() {
            device_status::STEP_CLOCK
        } else {
            0
        };
        let fallback = if self.parts.fallback_seen() {
            device_status::FALLBACK_SEEN
        } else {
            0
        };
        step | fallback
    }

    /// The shadow of the current control state.
    pub(super) fn shadow(&self) -> Shadow {
        let mut tail = [0; r::MAX_PARTITION_SLOTS as usize];
        for (t, ring) in tail.iter_mut().zip(&self.mem.rings) {
            *t = ring.tail;
        }
        Shadow {
            parts: self.parts.shadow(),
            target: self.trig.target(),
            mask_index: self.ccu.mask_index_shadow(),
            tail,
            released: Vec::new(),
            staging: self.staging,
            samp: std::array::from_fn(|p| self.samplers[p].shadow()),
            ri: None,
            ranges: std::array::from_fn(|p| self.ranges[p].shadow()),
        }
    }

    /// Checks a write against `sh` and advances `sh` past it.
    pub(super) fn check_write(
        &self,
        sh: &mut Shadow,
        offset: u64,
        width: u32,
        value: u64,
    ) -> Result<Write, RegError> {
        let access = Access::decode(offset, width)?;
        if self.read_value(&access.at, access.base).is_none() {
            return Err(RegError::NoRegister { offset });
        }
        if !access.is_whole32() || !access.reg.access.writable() {
            return Err(RegError::ReadOnly { offset });
        }
        let v = u32::try_from(value).map_err(|_| RegError::BadValue {
            offset,
            value,
            reason: "wider than 32 bits",
        })?;
        self.check_routed(sh, &access, v)
            .map_err(|reject| reject.at(offset, value))
    }

    /// Routes a checked-width write of `v` to its unit's check.
    fn check_routed(&self, sh: &mut Shadow, access: &Access, v: u32) -> Result<Write, Reject> {
        let offset = access.base;
        Ok(match unit_of(&access.at) {
            Unit::Identity if offset == r::RESET && v == r::RESET_MAGIC => Write::Reset {
                session: self
                    .next_session()
                    .map_err(|_| Reject::BadValue("no session id: the random source failed"))?,
            },
            Unit::Identity if offset == r::RESET => {
                return Err(Reject::BadValue("reset needs RESET_MAGIC"))
            }
            Unit::Trigger => {
                let configured = self.parts.configured_mask();
                let w = TriggerBlock::check_write(offset, v, &mut sh.target, configured)?;
                if let TriggerWrite::Command { mask, cmd } = w {
                    for p in slots(mask) {
                        let ps = &mut sh.parts[p as usize];
                        ps.advance_hs(handshake::after_trigger(ps.hs(), cmd));
                    }
                }
                Write::Trigger(w)
            }
            Unit::Interrupts => Write::Interrupt(Interrupts::check_write(offset, v)?),
            Unit::Mailbox => Write::Mailbox(Mailbox::check_write(offset, v)?),
            Unit::OobMailbox => Write::OobMailbox(OobMailbox::check_write(offset, v)?),
            Unit::Rekey => Write::Staging(RekeyStaging::check_write(offset, v, &mut sh.staging)?),
            Unit::Partition(p, o) if Ring::owns(o) => {
                let ring = self.mem.rings.get(p as usize).ok_or(Reject::ReadOnly)?;
                Write::Ring(p, ring.check_write(o, v, &mut sh.tail[p as usize])?)
            }
            Unit::Partition(p, o) => {
                let ps = &mut sh.parts[p as usize];
                let tables = (&self.vms, &self.ctxs);
                Write::Partition(p, self.parts.check_write(p, o, v, ps, tables)?)
            }
            Unit::Sampling(p, o) => {
                let sh = &mut sh.samp[p as usize];
                Write::Sampling(p, self.samplers[p as usize].check_write(o, v, sh)?)
            }
            Unit::RiGlobal => {
                let ri = sh.ri.get_or_insert_with(|| Box::new(self.ri.shadow()));
                Write::Ri(self.ri.check_global(offset, v, ri, self.ri_tables())?)
            }
            Unit::Ri(i, o) => {
                let ri = sh.ri.get_or_insert_with(|| Box::new(self.ri.shadow()));
                Write::Ri(self.ri.check_write(i, o, v, ri, self.ri_tables())?)
            }
            Unit::Range(p, o) => {
                let sh = &mut sh.ranges[p as usize];
                let unit = &self.ranges[p as usize];
                Write::Range(p, unit.check_range_write(o, v, sh, &self.programs)?)
            }
            Unit::RangeRing(p, o) => {
                let sh = &mut sh.ranges[p as usize];
                Write::Range(p, self.ranges[p as usize].check_ring_write(o, v, sh)?)
            }
            Unit::Ccu(c, o) => {
                let index = &mut sh.mask_index[c as usize];
                Write::Ccu(c, Counting::check_ccu_write(&self.topo, c, o, v, index)?)
            }
            Unit::Vm(vm, o) => Write::Vm(vm, self.vms.check_write(vm, o, v, &mut sh.staging)?),
            Unit::Ctx(ctx, o) => {
                Write::CtxRelease(self.ctxs.check_write(ctx, o, v, &mut sh.released)?)
            }
            Unit::Identity | Unit::RcBuffer => return Err(Reject::ReadOnly),
        })
    }

    /// Executes a checked write.
    pub(super) fn execute(&mut self, w: Write) {
        let now = self.clock.now();
        match w {
            Write::Reset { session } => self.reset_into(session),
            Write::Trigger(w) => self.execute_trigger(w),
            Write::Interrupt(w) => self.intr.apply(w),
            Write::Mailbox(w) => {
                if let Some(op) = self.mbox.apply(w) {
                    self.run_mailbox(op);
                }
            }
            Write::OobMailbox(w) => {
                if let Some(op) = self.oob_mbox.apply(w) {
                    self.run_oob_mailbox(op);
                }
            }
            Write::Staging(w) => self.staging.apply(w),
            Write::Partition(p, w) => self.execute_partition(p, w),
            Write::Ring(p, w) => self.mem.rings[p as usize].apply(w),
            Write::Sampling(p, w) => {
                // What ran so far was watched under the old settings; a
                // drain (tail, watermark) changes no setting, and a watched
                // partition is counted up to now whenever time stops.
                if !matches!(
                    w,
                    SampWrite::Buf(_, BufWrite::Tail(_) | BufWrite::Watermark(_))
                ) {
                    self.sync(p);
                }
                self.samplers[p as usize].apply(w);
            }
            Write::Ri(w) => self.execute_ri(w),
            Write::Range(p, w) => {
                // Arming, disarming and sizing the ring change what is
                // counted from now on: what ran so far is counted first.
                if w.changes_counting() {
                    self.sync(p);
                }
                self.ranges[p as usize].apply(w);
            }
            Write::Ccu(c, w) => {
                if let (CcuWrite::MaskData(_), Some(owner)) = (w, self.topo.ccus[c as usize].owner)
                {
                    self.sync(owner);
                }
                self.ccu.apply_ccu_write(&self.topo, c, w);
            }
            Write::Vm(vm, w) => {
                self.vms.apply(vm, w);
                self.staging.clear();
                // Everything of the VM is sealed under the new key at
                // once: the tenant needs no older epoch's key for a block.
                self.republish_vm(vm);
            }
            Write::CtxRelease(ctx) => self.release_context(ctx),
        }
        debug_assert_eq!(self.clock.now(), now, "a register write took device time");
    }

    fn execute_trigger(&mut self, w: TriggerWrite) {
        match w {
            TriggerWrite::Ctrl(_) | TriggerWrite::Threshold(_) => {
                // Counting so far happened under the old settings.
                self.sync_all();
                self.trig.apply_setting(w, self.clock.now());
            }
            TriggerWrite::Period(_) | TriggerWrite::Target(_) => {
                self.trig.apply_setting(w, self.clock.now());
            }
            TriggerWrite::Command { mask, cmd } => self.trigger_command(mask, cmd),
            TriggerWrite::External => self.external_trigger(),
        }
    }

    fn execute_partition(&mut self, p: u32, w: PartWrite) {
        match w {
            PartWrite::Ctrl(value) => match (self.parts.get(p).hs(), value) {
                (hs_state::REQUESTED, part_ctrl::CTX_PAUSE) => self.step_pause_ctx(p),
                (hs_state::CTX_PAUSED, part_ctrl::ALL) => self.step_pause_transfers(p),
                (hs_state::REPOINTED, 0) => {
                    self.parts.host_completed(p);
                    self.step_unpause(p);
                }
                _ => {}
            },
            PartWrite::RcCmd(cmd) => {
                if cmd & rc_cmd::COMMIT != 0 {
                    self.step_commit(p, false);
                }
                if cmd & rc_cmd::REPOINT != 0 {
                    self.step_repoint(p);
                }
            }
            _ => {
                if self.parts.apply_setting(p, &w) {
                    self.schedule(p);
                }
            }
        }
    }

    /// Runs host mailbox command `op` against the device-level state.
    fn run_mailbox(&mut self, op: u32) {
        let now = self.clock.now();
        let view = MailboxView {
            system_counters: &self.mem.block(SYSTEM_BLOCK_SLOT).counters,
            idle_cycles: self.clock.idle_cycles(),
            now,
            fallbacks: self.parts.total_fallbacks(),
        };
        let status = self.mbox.run(op, view);
        self.intr.raise(source::MAILBOX_DONE, 0, op, status, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ccu::EngineKind;

    fn unit_at(offset: u64) -> Unit {
        unit_of(&gpupm_uapi::map::locate(offset).expect("a block"))
    }

    #[test]
    fn routing_follows_the_register_map() {
        assert_eq!(unit_at(r::CYCLE), Unit::Identity);
        assert_eq!(unit_at(r::RECORDS_ROUTED), Unit::RcBuffer);
        assert_eq!(unit_at(r::TRIG_COUNT_COMMAND), Unit::Trigger);
        assert_eq!(unit_at(r::INTR_SEQ), Unit::Interrupts);
        assert_eq!(unit_at(r::MBOX_DATA), Unit::Mailbox);
        assert_eq!(unit_at(r::OOB_MBOX_DATA), Unit::OobMailbox);
        assert_eq!(unit_at(r::OOB_MBOX_DATA3), Unit::OobMailbox);
        assert_eq!(unit_at(r::REKEY_TAG), Unit::Rekey);
        assert_eq!(
            unit_at(r::part(2, r::PART_STREAM_TAIL)),
            Unit::Partition(2, r::PART_STREAM_TAIL)
        );
        assert_eq!(
            unit_at(r::ccu(5, r::CCU_RECORDS)),
            Unit::Ccu(5, r::CCU_RECORDS)
        );
        assert_eq!(
            unit_at(r::vm(7, r::VM_KEY_COMMIT)),
            Unit::Vm(7, r::VM_KEY_COMMIT)
        );
        assert_eq!(unit_at(r::ctx(9, r::CTX_CMD)), Unit::Ctx(9, r::CTX_CMD));
        assert_eq!(gpupm_uapi::map::locate(r::BAR0_SIZE - 4), None);
    }

    /// Every offset a unit answers is a register the map declares, with
    /// the width it declares: a unit cannot serve an undocumented
    /// register, nor silently widen or narrow one. The units are asked
    /// directly, past the map's check, at every word of every block.
    #[test]
    fn units_answer_only_the_registers_the_map_declares_at_their_width() {
        let scenario = crate::scenario::builtin();
        let dev = Device::new(&scenario, EngineKind::Batched, true).unwrap();
        let mut seen = 0;
        for offset in (0..r::BAR0_SIZE).step_by(4) {
            let Some(at) = gpupm_uapi::map::locate(offset) else {
                continue;
            };
            let Some(v) = dev.read_value(&at, offset) else {
                continue;
            };
            seen += 1;
            let reg = gpupm_uapi::map::register(offset)
                .unwrap_or_else(|| panic!("{offset:#x} answers but the map declares nothing"));
            let wide = matches!(v, RegValue::R64(_));
            assert_eq!(
                wide,
                gpupm_uapi::map::is_64bit(offset),
                "register {} at {offset:#x}",
                reg.name
            );
        }
        assert!(seen > 1000, "only {seen} registers answered");
    }

    /// An offset inside a block where the map declares no register is no
    /// register, read or written, whatever unit owns the block; a write
    /// to a declared read-only register fails; neither changes anything.
    #[test]
    fn holes_inside_blocks_and_read_only_registers_refuse_and_change_nothing() {
        let scenario = crate::scenario::builtin();
        let mut dev = Device::new(&scenario, EngineKind::Batched, true).unwrap();
        let holes = [
            r::part(1, r::PART_SWITCH_REQ_CYCLE + 8),
            r::ccu(0, r::CCU_GROUP_INDEX + 4),
            r::vm(1, r::VM_BLOCK + 8),
            r::RECORDS_ROUTED + 8,
            r::INTR_SEQ + 8,
        ];
        let before = format!("{:?}", dev.shadow());
        for offset in holes {
            assert_eq!(
                dev.read_reg(offset, 4),
                Err(RegError::NoRegister { offset }),
                "read {offset:#x}"
            );
            assert_eq!(
                dev.write_reg(offset, 4, 1),
                Err(RegError::NoRegister { offset }),
                "write {offset:#x}"
            );
        }
        for offset in [r::CYCLE, r::TOPO_SMS, r::part(1, r::PART_STATUS)] {
            let width = if gpupm_uapi::map::is_64bit(offset) {
                8
            } else {
                4
            };
            let value = dev.read_reg(offset, width).unwrap();
            assert!(
                matches!(dev.write_reg(offset, 4, 1), Err(RegError::ReadOnly { .. })),
                "write {offset:#x}"
            );
            assert_eq!(
                dev.read_reg(offset, width),
                Ok(value),
                "{offset:#x} changed"
            );
        }
        assert_eq!(
            format!("{:?}", dev.shadow()),
            before,
            "a refused write changed the control state"
        );
    }

    /// The identity registers carry the scenario's `[identity]`, read back
    /// word by word with the encodings of `gpupm_uapi::identity`, and
    /// refuse writes.
    #[test]
    fn identity_registers_carry_the_scenarios_identity_and_refuse_writes() {
        use gpupm_uapi::identity::{ascii_field, words_to_bytes, DeviceUuid, PciAddress};

        let text = format!(
            "{}\n[identity]\nindex = 5\npci_address = \"0002:ab:01.3\"\nserial = \"SN-0042\"\nmodel = \"A model name of exactly 32 bytes\"\n",
            crate::scenario::BUILTIN_TOML
        );
        let scenario = crate::scenario::parse("identity", &text).unwrap();
        let mut dev = Device::new(&scenario, EngineKind::Batched, true).unwrap();
        let words = |dev: &Device, base: u64, n: usize| -> Vec<u32> {
            (0..n as u64)
                .map(|i| u32::try_from(dev.read_reg(base + 4 * i, 4).unwrap()).unwrap())
                .collect()
        };
        let text_of = |w: &[u32]| {
            let mut b = vec![0u8; w.len() * 4];
            words_to_bytes(w, &mut b);
            ascii_field(&b)
        };
        assert_eq!(dev.read_reg(r::GPU_INDEX, 4), Ok(5));
        let pci = PciAddress::from_register(
            u32::try_from(dev.read_reg(r::PCI_ADDRESS, 4).unwrap()).unwrap(),
        );
        assert_eq!(pci.to_string(), "0002:ab:01.3");
        let uuid_words: [u32; r::UUID_WORDS] =
            words(&dev, r::UUID, r::UUID_WORDS).try_into().unwrap();
        assert_eq!(DeviceUuid::from_words(&uuid_words), scenario.identity.uuid);
        assert_eq!(text_of(&words(&dev, r::SERIAL, r::SERIAL_WORDS)), "SN-0042");
        assert_eq!(
            text_of(&words(&dev, r::MODEL_NAME, r::MODEL_NAME_WORDS)),
            "A model name of exactly 32 bytes"
        );
        for offset in [
            r::GPU_INDEX,
            r::PCI_ADDRESS,
            r::UUID + 4,
            r::SERIAL,
            r::MODEL_NAME + 28,
        ] {
            let before = dev.read_reg(offset, 4).unwrap();
            assert!(
                matches!(dev.write_reg(offset, 4, 0), Err(RegError::ReadOnly { .. })),
                "write {offset:#x}"
            );
            assert_eq!(dev.read_reg(offset, 4), Ok(before), "{offset:#x} changed");
        }
    }

    /// The other way round: every register of the device-wide blocks (which
    /// always exist) reads, whatever its access: a write-only one reads 0.
    #[test]
    fn every_declared_device_wide_register_reads() {
        let scenario = crate::scenario::builtin();
        let dev = Device::new(&scenario, EngineKind::Batched, true).unwrap();
        for block in gpupm_uapi::map::BLOCKS {
            if !matches!(block.placement, gpupm_uapi::regdef::Placement::Fixed { .. }) {
                continue;
            }
            for reg in block.regs {
                for word in 0..u64::from(reg.words) {
                    let offset = reg.offset + 4 * word;
                    let width = u32::try_from(reg.width.bytes()).unwrap();
                    let v = dev.read_reg(offset, width);
                    assert!(v.is_ok(), "{} word {word}: {v:?}", reg.name);
                    if reg.access == gpupm_uapi::regdef::Access::Wo {
                        assert_eq!(v, Ok(0), "{} is write-only", reg.name);
                    }
                }
            }
        }
    }
}
