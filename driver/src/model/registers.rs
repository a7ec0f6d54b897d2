//! The BAR0 register file: decoding, reads, and writes.
//!
//! A write is first *checked* against a [`Shadow`] — a small copy of the
//! control state that decides whether a write is legal (handshake states,
//! pause bits, bind staging, trigger target, mask index, released contexts)
//! — and only then executed. A failed check changes nothing. A batch checks
//! every op against one shadow that it advances op by op, and executes only
//! if all pass, which makes batches atomic without copying the device.

use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::intr::source;
use gpupm_uapi::layout::{self, STREAM_RING_MAX};
use gpupm_uapi::regs::{
    self as r, clock_cap, ctx_cmd, ctx_state, device_status, hs_state, part_ctrl, part_status,
    rc_cmd, trig_cmd, trig_ctrl,
};

use super::device::{slots, Device, TriggerCause};

/// Why a register access failed. All map to EINVAL at the node boundary.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegError {
    /// Width not 4/8 or offset not aligned to it.
    #[error("a {width}-byte access at {offset:#x} is not a naturally aligned 4- or 8-byte access")]
    BadAccess {
        /// Offset.
        offset: u64,
        /// Width.
        width: u32,
    },
    /// Nothing is mapped there (or the instance does not exist).
    #[error("no register at {offset:#x}")]
    NoRegister {
        /// Offset.
        offset: u64,
    },
    /// An 8-byte access to a 32-bit register.
    #[error("register {offset:#x} is 32 bits wide; an 8-byte access is not allowed")]
    Not64 {
        /// Offset.
        offset: u64,
    },
    /// Write to a read-only register.
    #[error("register {offset:#x} is read-only")]
    ReadOnly {
        /// Offset.
        offset: u64,
    },
    /// Value out of range or with undefined bits.
    #[error("value {value:#x} is not valid for register {offset:#x}: {reason}")]
    BadValue {
        /// Offset.
        offset: u64,
        /// Value.
        value: u64,
        /// Why.
        reason: &'static str,
    },
    /// A handshake write out of order.
    #[error("partition {partition} is in handshake state {state}: {reason}")]
    BadSequence {
        /// Partition slot.
        partition: u32,
        /// Current state.
        state: u32,
        /// Why.
        reason: &'static str,
    },
}

/// A decoded register address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reg {
    Global(u64),
    Part(u32, u64),
    Ccu(u32, u64),
    Vm(u32, u64),
    Ctx(u32, u64),
}

fn decode(offset: u64) -> Reg {
    let within = |base: u64, stride: u64, count: u32| {
        (base..base + stride * u64::from(count))
            .contains(&offset)
            .then(|| (((offset - base) / stride) as u32, (offset - base) % stride))
    };
    if let Some((i, o)) = within(r::PART_BASE, r::PART_STRIDE, r::MAX_PARTITION_SLOTS) {
        Reg::Part(i, o)
    } else if let Some((i, o)) = within(r::CCU_BASE, r::CCU_STRIDE, r::MAX_CCUS) {
        Reg::Ccu(i, o)
    } else if let Some((i, o)) = within(r::VM_BASE, r::VM_STRIDE, r::MAX_VMS) {
        Reg::Vm(i, o)
    } else if let Some((i, o)) = within(r::CTX_BASE, r::CTX_STRIDE, r::MAX_CONTEXTS) {
        Reg::Ctx(i, o)
    } else {
        Reg::Global(offset)
    }
}

/// Control state that decides whether writes are legal.
#[derive(Clone, Debug)]
pub struct Shadow {
    parts: [PartShadow; r::MAX_PARTITION_SLOTS as usize],
    target: u32,
    mask_index: [u32; r::MAX_CCUS as usize],
    tail: [u32; r::MAX_PARTITION_SLOTS as usize],
    released: Vec<u32>,
}

#[derive(Clone, Copy, Debug, Default)]
struct PartShadow {
    hs: u32,
    ctrl: u32,
    bind_vm: u32,
    bind_ctx: u32,
}

/// A checked write, ready to execute.
#[derive(Clone, Copy, Debug)]
pub enum Write {
    Reset,
    TrigPeriod(u32),
    TrigCtrl(u32),
    TrigThreshold(u32),
    TrigTarget(u32),
    TrigCmd { mask: u32, cmd: u32 },
    TrigExternal,
    IntrMask(u32),
    IntrAck(u32),
    MboxArg(u32),
    MboxCmd(u32),
    PartCtrl { p: u32, value: u32 },
    RcCmd { p: u32, cmd: u32 },
    BindVm { p: u32, vm: u32 },
    BindCtx { p: u32, ctx: u32 },
    SwitchTimeout { p: u32, cycles: u32 },
    StreamTail { p: u32, tail: u32 },
    StreamWatermark { p: u32, value: u32 },
    TimesliceCtx { p: u32, cycles: u32 },
    TimesliceVm { p: u32, cycles: u32 },
    MaskIndex { c: u32, index: u32 },
    MaskData { c: u32, word: u32 },
    VmKeyWord { vm: u32, i: u32, word: u32 },
    VmKeyCommit { vm: u32 },
    CtxRelease { ctx: u32 },
}

/// Smallest programmable switch timeout and non-zero timeslice, in cycles.
pub const MIN_TIMING_CYCLES: u32 = 1024;

/// Checks an access's width and alignment and resolves it to the base
/// offset of the register plus which half (for 4-byte access to a 64-bit one).
fn resolve(offset: u64, width: u32) -> Result<(u64, Option<bool>), RegError> {
    if !matches!(width, 4 | 8) || !offset.is_multiple_of(u64::from(width)) {
        return Err(RegError::BadAccess { offset, width });
    }
    if offset >= r::BAR0_SIZE {
        return Err(RegError::NoRegister { offset });
    }
    if width == 8 {
        return if r::is_64bit(offset) {
            Ok((offset, None))
        } else {
            Err(RegError::Not64 { offset })
        };
    }
    if r::is_64bit(offset) {
        Ok((offset, Some(false)))
    } else if offset >= 4 && r::is_64bit(offset - 4) {
        Ok((offset - 4, Some(true)))
    } else {
        Ok((offset, None))
    }
}

impl Device {
    /// The shadow of the current control state.
    pub(crate) fn shadow(&self) -> Shadow {
        let mut parts = [PartShadow::default(); r::MAX_PARTITION_SLOTS as usize];
        let mut tail = [0; r::MAX_PARTITION_SLOTS as usize];
        for (i, p) in self.parts.iter().enumerate() {
            parts[i] = PartShadow {
                hs: p.hs,
                ctrl: p.ctrl,
                bind_vm: p.bind_vm,
                bind_ctx: p.bind_ctx,
            };
            tail[i] = self.mem.rings.get(i).map_or(0, |r| r.tail);
        }
        let mut mask_index = [0; r::MAX_CCUS as usize];
        mask_index[..self.ccu_mask_index.len()].copy_from_slice(&self.ccu_mask_index);
        Shadow {
            parts,
            target: self.trig.target,
            mask_index,
            tail,
            released: Vec::new(),
        }
    }

    /// Reads a register.
    pub fn read_reg(&self, offset: u64, width: u32) -> Result<u64, RegError> {
        let (base, half) = resolve(offset, width)?;
        let v = self
            .read_value(base)
            .ok_or(RegError::NoRegister { offset })?;
        Ok(match half {
            None => v,
            Some(false) => v & 0xFFFF_FFFF,
            Some(true) => v >> 32,
        })
    }

    fn read_value(&self, offset: u64) -> Option<u64> {
        let v = |x: u32| Some(u64::from(x));
        match decode(offset) {
            Reg::Global(o) => self.read_global(o),
            Reg::Part(p, o) => {
                let part = &self.parts[p as usize];
                if !part.configured {
                    return (o == r::PART_STATUS).then_some(0);
                }
                let ring = self.mem.rings.get(p as usize);
                match o {
                    r::PART_CTRL => v(part.ctrl),
                    r::PART_STATUS => v(part.hs
                        | part_status::CONFIGURED
                        | if part.last_fallback {
                            part_status::LAST_FALLBACK
                        } else {
                            0
                        }
                        | if part.vm_switch() {
                            part_status::VM_SWITCH
                        } else {
                            0
                        }),
                    r::PART_CUR_VM => v(part.cur_vm),
                    r::PART_CUR_CTX => v(part.cur_ctx),
                    r::PART_NEXT_VM => v(if part.hs == hs_state::IDLE {
                        0
                    } else {
                        part.next_vm
                    }),
                    r::PART_NEXT_CTX => v(if part.hs == hs_state::IDLE {
                        0
                    } else {
                        part.next_ctx
                    }),
                    r::PART_CCU_ASSIGNED => Some(part.ccu_assigned),
                    r::PART_CCU_ACKED => Some(part.acked),
                    r::PART_RC_CMD => Some(0),
                    r::PART_RC_BIND_VM => v(part.bind_vm),
                    r::PART_RC_BIND_CTX => v(part.bind_ctx),
                    r::PART_SWITCH_TIMEOUT => v(part.timeout),
                    r::PART_FALLBACKS => Some(part.fallbacks),
                    r::PART_SWITCHES => Some(part.switches),
                    r::PART_COMMIT_SEQ => Some(part.commit_seq),
                    r::PART_STREAM_HEAD => ring.map(|r| u64::from(r.head)),
                    r::PART_STREAM_TAIL => ring.map(|r| u64::from(r.tail)),
                    r::PART_STREAM_CAP => ring.map(|r| u64::from(r.cap)),
                    r::PART_STREAM_WATERMARK => ring.map(|r| u64::from(r.watermark)),
                    r::PART_STREAM_LOST => ring.map(|r| r.lost),
                    r::PART_STREAM_BASE => Some(layout::stream_slot_offset(p, 0)),
                    r::PART_TIMESLICE_CTX => v(part.ts_ctx),
                    r::PART_TIMESLICE_VM => v(part.ts_vm),
                    r::PART_GPC_MASK => v(part.gpc_mask),
                    r::PART_MEM_MASK => v(part.mem_mask),
                    r::PART_SWITCH_REQ_CYCLE => Some(if part.hs == hs_state::IDLE {
                        0
                    } else {
                        part.req_cycle
                    }),
                    _ => None,
                }
            }
            Reg::Ccu(c, o) => {
                let ccu = self.topo.ccus.get(c as usize)?;
                match o {
                    r::CCU_OWNER => v(ccu.owner.unwrap_or(u32::MAX)),
                    r::CCU_ULCS => v(ccu.ulcs.end - ccu.ulcs.start),
                    r::CCU_COUNTERS => v(ccu.counters.end - ccu.counters.start),
                    r::CCU_ACTIVE_BANK => v(u32::from(self.counting.active_bank[c as usize])),
                    r::CCU_MASK_INDEX => v(self.ccu_mask_index[c as usize]),
                    r::CCU_MASK_DATA => v(self.mask_word(c, self.ccu_mask_index[c as usize])),
                    r::CCU_RECORDS => Some(self.ccu_records[c as usize]),
                    r::CCU_GROUP => v(ccu.group),
                    r::CCU_GROUP_INDEX => v(ccu.group_index),
                    _ => None,
                }
            }
            Reg::Vm(vm, o) => {
                if vm == 0 {
                    return None;
                }
                let e = &self.vms[vm as usize];
                match o {
                    r::VM_PARTITION => v(e.partition),
                    r::VM_FLAGS => v(if e.cipher.is_some() {
                        r::vm_flags::CONFIDENTIAL
                    } else {
                        0
                    }),
                    r::VM_BLOCK => Some(if e.partition == 0 {
                        0
                    } else {
                        layout::block_slot_offset(vm)
                    }),
                    o if (r::VM_KEY..r::VM_KEY + 32).contains(&o) && o % 4 == 0 => Some(0),
                    r::VM_KEY_COMMIT => Some(0),
                    r::VM_KEY_EPOCH => v(e.cipher.as_ref().map_or(0, |c| c.key_epoch())),
                    _ => None,
                }
            }
            Reg::Ctx(ctx, o) => {
                if ctx == 0 {
                    return None;
                }
                let c = &self.ctxs[ctx as usize];
                match o {
                    r::CTX_VM => v(c.vm),
                    r::CTX_STATE => v(c.state),
                    r::CTX_BLOCK => Some(if c.state == ctx_state::FREE {
                        0
                    } else {
                        layout::block_slot_offset(c.slot)
                    }),
                    r::CTX_CMD => Some(0),
                    r::CTX_CREATED_CYCLE => Some(if c.state == ctx_state::FREE {
                        0
                    } else {
                        c.created_at
                    }),
                    _ => None,
                }
            }
        }
    }

    fn read_global(&self, o: u64) -> Option<u64> {
        let t = &self.scenario.topology;
        let v = |x: u32| Some(u64::from(x));
        let n = |x: usize| Some(x as u64);
        match o {
            r::ID => v(r::DEVICE_MAGIC),
            r::ABI_VERSION => v(gpupm_uapi::ABI_VERSION),
            r::TOPO_GPCS => n(t.sms_per_gpc.len()),
            r::TOPO_SMS => v(self.topo.sm_count()),
            r::TOPO_L2_SLICES => v(t.memory_slices * t.l2_per_slice),
            r::TOPO_FB_PARTITIONS => v(t.memory_slices * t.fb_per_slice),
            r::TOPO_NVLINKS => v(t.nvlinks),
            r::TOPO_COPY_ENGINES => v(t.memory_slices * t.ce_per_slice),
            r::TOPO_CCUS => n(self.topo.ccus.len()),
            r::TOPO_PARTITIONS => n(self.parts.iter().skip(1).filter(|p| p.configured).count()),
            r::TOPO_EVENTS => n(EVENT_COUNT),
            r::TOPO_MEMORY_SLICES => v(t.memory_slices),
            r::CLOCK_KHZ => v(self.scenario.clock.khz),
            r::CLOCK_CAP => v(
                if super::throttle::secondary_at(&self.scenario.throttle, self.now) {
                    clock_cap::SECONDARY
                } else {
                    clock_cap::PRIMARY
                },
            ),
            r::CYCLE => Some(self.now),
            r::DEVICE_STATUS => v(if self.step_clock {
                device_status::STEP_CLOCK
            } else {
                0
            } | if self.parts.iter().any(|p| p.fallbacks > 0) {
                device_status::FALLBACK_SEEN
            } else {
                0
            }),
            r::RESET => Some(0),
            r::TOPO_VMS => v(r::MAX_VMS),
            r::TOPO_CONTEXTS => v(r::MAX_CONTEXTS),
            r::CCU_WRAPS => Some(self.counting.wraps),
            r::TRIG_PERIOD => v(self.trig.period),
            r::TRIG_CTRL => v(self.trig.ctrl),
            r::TRIG_THRESHOLD => v(self.trig.threshold),
            r::TRIG_TARGET => v(self.trig.target),
            r::TRIG_CMD | r::TRIG_EXTERNAL => Some(0),
            r::TRIG_COUNT_PERIODIC => Some(self.trig.count_periodic),
            r::TRIG_COUNT_THRESHOLD => Some(self.trig.count_threshold),
            r::TRIG_COUNT_COMMAND => Some(self.trig.count_command),
            r::RECORDS_ROUTED => Some(self.trig.records_routed),
            r::INTR_STATUS => v(self.intr.status),
            r::INTR_MASK => v(self.intr.mask),
            r::INTR_ACK => Some(0),
            r::INTR_PENDING => v(self.intr.pending()),
            r::INTR_SEQ => Some(self.intr.next_seq()),
            r::MBOX_ARG => v(self.mbox.arg),
            r::MBOX_CMD => Some(0),
            r::MBOX_STATUS => v(self.mbox.status),
            r::MBOX_DATA => Some(self.mbox.data),
            _ => None,
        }
    }

    fn mask_word(&self, c: u32, index: u32) -> u32 {
        let range = self.topo.ccus[c as usize].counters.clone();
        let first = range.start as usize + index as usize * 32;
        (0..32usize)
            .filter(|&b| first + b < range.end as usize && self.counting.masked[first + b])
            .fold(0, |w, b| w | 1 << b)
    }

    fn configured_mask(&self) -> u32 {
        (0..r::MAX_PARTITION_SLOTS)
            .filter(|&p| self.parts[p as usize].configured)
            .fold(0, |m, p| m | 1 << p)
    }

    /// Checks a write against `sh` and advances `sh` past it.
    pub(crate) fn check_write(
        &self,
        sh: &mut Shadow,
        offset: u64,
        width: u32,
        value: u64,
    ) -> Result<Write, RegError> {
        let (base, half) = resolve(offset, width)?;
        if self.read_value(base).is_none() {
            return Err(RegError::NoRegister { offset });
        }
        if half.is_some() || width == 8 {
            return Err(RegError::ReadOnly { offset });
        }
        let bad = |reason| RegError::BadValue {
            offset,
            value,
            reason,
        };
        let v = u32::try_from(value).map_err(|_| bad("wider than 32 bits"))?;
        let w = match decode(base) {
            Reg::Global(o) => match o {
                r::RESET if v == r::RESET_MAGIC => Write::Reset,
                r::RESET => return Err(bad("reset needs RESET_MAGIC")),
                r::TRIG_PERIOD if v == 0 || v >= r::TRIG_PERIOD_MIN => Write::TrigPeriod(v),
                r::TRIG_PERIOD => return Err(bad("period below TRIG_PERIOD_MIN")),
                r::TRIG_CTRL if v & !trig_ctrl::ALL == 0 => Write::TrigCtrl(v),
                r::TRIG_THRESHOLD
                    if (r::TRIG_THRESHOLD_MIN..=r::TRIG_THRESHOLD_MAX).contains(&v) =>
                {
                    Write::TrigThreshold(v)
                }
                r::TRIG_THRESHOLD => {
                    return Err(bad(
                        "threshold outside TRIG_THRESHOLD_MIN..=MAX (a counter could wrap)",
                    ))
                }
                r::TRIG_TARGET if v & !self.configured_mask() == 0 => {
                    sh.target = v;
                    Write::TrigTarget(v)
                }
                r::TRIG_TARGET => return Err(bad("names an unconfigured partition slot")),
                r::TRIG_CMD if v != 0 && v & !trig_cmd::ALL == 0 && sh.target != 0 => {
                    for p in slots(sh.target) {
                        sh.parts[p as usize].hs = hs_after_trigger(sh.parts[p as usize].hs, v);
                    }
                    Write::TrigCmd {
                        mask: sh.target,
                        cmd: v,
                    }
                }
                r::TRIG_CMD => {
                    return Err(bad(
                        "needs defined command bits and a non-empty TRIG_TARGET",
                    ))
                }
                r::TRIG_EXTERNAL if v == 1 => Write::TrigExternal,
                r::INTR_MASK if v & !source::ALL == 0 => Write::IntrMask(v),
                r::INTR_ACK if v & !source::ALL == 0 => Write::IntrAck(v),
                r::MBOX_ARG => Write::MboxArg(v),
                r::MBOX_CMD => Write::MboxCmd(v),
                r::TRIG_CTRL | r::TRIG_EXTERNAL | r::INTR_MASK | r::INTR_ACK => {
                    return Err(bad("undefined bits set"))
                }
                _ => return Err(RegError::ReadOnly { offset }),
            },
            Reg::Part(p, o) => self.check_part_write(sh, p, o, v, offset)?,
            Reg::Ccu(c, o) => {
                let n = self.topo.ccus[c as usize].counters.len() as u32;
                let words = n.div_ceil(32);
                match o {
                    r::CCU_MASK_INDEX if v < words => {
                        sh.mask_index[c as usize] = v;
                        Write::MaskIndex { c, index: v }
                    }
                    r::CCU_MASK_INDEX => {
                        return Err(bad("mask word index beyond the CCU's counters"))
                    }
                    r::CCU_MASK_DATA => {
                        let valid = (n - sh.mask_index[c as usize] * 32).min(32);
                        let allowed = if valid == 32 {
                            u32::MAX
                        } else {
                            (1u32 << valid) - 1
                        };
                        if v & !allowed != 0 {
                            return Err(bad("mask bits beyond the CCU's counters"));
                        }
                        Write::MaskData { c, word: v }
                    }
                    _ => return Err(RegError::ReadOnly { offset }),
                }
            }
            Reg::Vm(vm, o) => {
                let confidential = self.vms[vm as usize].cipher.is_some();
                match o {
                    o if (r::VM_KEY..r::VM_KEY + 32).contains(&o) && confidential => {
                        Write::VmKeyWord {
                            vm,
                            i: ((o - r::VM_KEY) / 4) as u32,
                            word: v,
                        }
                    }
                    r::VM_KEY_COMMIT if confidential && v == 1 => Write::VmKeyCommit { vm },
                    o if (r::VM_KEY..=r::VM_KEY_COMMIT).contains(&o) => {
                        return Err(bad("keys exist only for confidential VMs; commit with 1"))
                    }
                    _ => return Err(RegError::ReadOnly { offset }),
                }
            }
            Reg::Ctx(ctx, o) => match o {
                r::CTX_CMD if v == ctx_cmd::RELEASE => {
                    if self.ctxs[ctx as usize].state != ctx_state::DESTROYED
                        || sh.released.contains(&ctx)
                    {
                        return Err(bad("only a destroyed, unreleased context can be released"));
                    }
                    sh.released.push(ctx);
                    Write::CtxRelease { ctx }
                }
                r::CTX_CMD => return Err(bad("unknown context command")),
                _ => return Err(RegError::ReadOnly { offset }),
            },
        };
        Ok(w)
    }

    fn check_part_write(
        &self,
        sh: &mut Shadow,
        p: u32,
        o: u64,
        v: u32,
        offset: u64,
    ) -> Result<Write, RegError> {
        let bad = |reason| RegError::BadValue {
            offset,
            value: u64::from(v),
            reason,
        };
        let part = &self.parts[p as usize];
        let ps = &mut sh.parts[p as usize];
        let hs_now = ps.hs;
        let seq = |reason| RegError::BadSequence {
            partition: p,
            state: hs_now,
            reason,
        };
        let gpu_slice = p != 0;
        Ok(match o {
            r::PART_CTRL if gpu_slice => {
                ps.hs = match (ps.hs, v) {
                    (hs_state::REQUESTED, part_ctrl::CTX_PAUSE) => hs_state::CTX_PAUSED,
                    (hs_state::CTX_PAUSED, part_ctrl::ALL) => hs_state::XFER_PAUSED,
                    (hs_state::REPOINTED, 0) => hs_state::IDLE,
                    _ => return Err(seq("pause bits must follow the switch steps in order")),
                };
                ps.ctrl = v;
                Write::PartCtrl { p, value: v }
            }
            r::PART_RC_CMD if gpu_slice => {
                if v == 0 || v & !rc_cmd::ALL != 0 {
                    return Err(bad("needs defined RC command bits"));
                }
                if v & rc_cmd::COMMIT != 0 && ps.hs == hs_state::ACKED {
                    ps.hs = hs_state::COMMITTED;
                }
                if v & rc_cmd::REPOINT != 0 {
                    if ps.hs != hs_state::COMMITTED {
                        return Err(seq("re-point only after the switch commit"));
                    }
                    if (ps.bind_vm, ps.bind_ctx) != (part.next_vm, part.next_ctx) {
                        return Err(seq("bind registers must name the incoming VM and context"));
                    }
                    ps.hs = hs_state::REPOINTED;
                }
                Write::RcCmd { p, cmd: v }
            }
            r::PART_RC_BIND_VM if gpu_slice => {
                if v != 0 && self.vms.get(v as usize).is_none_or(|e| e.partition != p) {
                    return Err(bad("not a VM bound to this partition"));
                }
                ps.bind_vm = v;
                Write::BindVm { p, vm: v }
            }
            r::PART_RC_BIND_CTX if gpu_slice => {
                let ok = v == 0
                    || self.ctxs.get(v as usize).is_some_and(|c| {
                        c.state == ctx_state::ACTIVE && self.vms[c.vm as usize].partition == p
                    });
                if !ok {
                    return Err(bad("not an active context of this partition"));
                }
                ps.bind_ctx = v;
                Write::BindCtx { p, ctx: v }
            }
            r::PART_SWITCH_TIMEOUT if gpu_slice && v >= MIN_TIMING_CYCLES => {
                Write::SwitchTimeout { p, cycles: v }
            }
            r::PART_TIMESLICE_CTX if gpu_slice && (v == 0 || v >= MIN_TIMING_CYCLES) => {
                Write::TimesliceCtx { p, cycles: v }
            }
            r::PART_TIMESLICE_VM if gpu_slice && (v == 0 || v >= MIN_TIMING_CYCLES) => {
                Write::TimesliceVm { p, cycles: v }
            }
            r::PART_SWITCH_TIMEOUT | r::PART_TIMESLICE_CTX | r::PART_TIMESLICE_VM if gpu_slice => {
                return Err(bad("below the minimum of 1024 cycles"))
            }
            r::PART_STREAM_TAIL => {
                let ring = &self.mem.rings[p as usize];
                let tail = sh.tail[p as usize];
                if v.wrapping_sub(tail) > ring.head.wrapping_sub(tail) {
                    return Err(bad("tail must lie between the old tail and head"));
                }
                sh.tail[p as usize] = v;
                Write::StreamTail { p, tail: v }
            }
            r::PART_STREAM_WATERMARK => {
                let cap = self.mem.rings[p as usize].cap;
                if v == 0 || v > cap.min(STREAM_RING_MAX) {
                    return Err(bad("watermark must be 1..=capacity"));
                }
                Write::StreamWatermark { p, value: v }
            }
            _ if !gpu_slice
                && matches!(
                    o,
                    r::PART_CTRL | r::PART_RC_CMD | r::PART_RC_BIND_VM | r::PART_RC_BIND_CTX
                ) =>
            {
                return Err(bad("the system channel has no contexts to switch"))
            }
            _ => return Err(RegError::ReadOnly { offset }),
        })
    }

    /// Executes a checked write.
    pub(crate) fn execute(&mut self, w: Write) {
        match w {
            Write::Reset => self.reset(),
            Write::TrigPeriod(v) => {
                self.trig.period = v;
                self.schedule_periodic(self.now);
            }
            Write::TrigCtrl(v) => {
                self.sync_all();
                self.trig.ctrl = v;
                self.schedule_periodic(self.now);
            }
            Write::TrigThreshold(v) => {
                self.sync_all();
                self.trig.threshold = v;
            }
            Write::TrigTarget(v) => self.trig.target = v,
            Write::TrigCmd { mask, cmd } => self.trigger_command(mask, cmd),
            Write::TrigExternal => {
                let mask = (0..r::MAX_PARTITION_SLOTS)
                    .filter(|&p| {
                        self.parts[p as usize].configured
                            && !self.parts[p as usize].triggers_paused()
                    })
                    .fold(0, |m, p| m | 1 << p);
                self.trigger(mask, false, TriggerCause::Command);
                self.intr.raise(source::TRIGGER_DONE, 0, mask, 0, self.now);
            }
            Write::IntrMask(v) => self.intr.mask = v,
            Write::IntrAck(v) => self.intr.ack(v),
            Write::MboxArg(v) => self.mbox.arg = v,
            Write::MboxCmd(v) => self.run_mailbox(v),
            Write::PartCtrl { p, value } => match (self.parts[p as usize].hs, value) {
                (hs_state::REQUESTED, part_ctrl::CTX_PAUSE) => self.step_pause_ctx(p),
                (hs_state::CTX_PAUSED, part_ctrl::ALL) => self.step_pause_transfers(p),
                (hs_state::REPOINTED, 0) => {
                    self.parts[p as usize].last_fallback = false;
                    self.step_unpause(p);
                }
                _ => {}
            },
            Write::RcCmd { p, cmd } => {
                if cmd & rc_cmd::COMMIT != 0 {
                    self.step_commit(p, false);
                }
                if cmd & rc_cmd::REPOINT != 0 {
                    self.step_repoint(p);
                }
            }
            Write::BindVm { p, vm } => self.parts[p as usize].bind_vm = vm,
            Write::BindCtx { p, ctx } => self.parts[p as usize].bind_ctx = ctx,
            Write::SwitchTimeout { p, cycles } => self.parts[p as usize].timeout = cycles,
            Write::TimesliceCtx { p, cycles } => {
                self.parts[p as usize].ts_ctx = cycles;
                self.reschedule(p);
            }
            Write::TimesliceVm { p, cycles } => {
                self.parts[p as usize].ts_vm = cycles;
                self.reschedule(p);
            }
            Write::StreamTail { p, tail } => {
                self.mem.rings[p as usize].tail = tail;
                self.parts[p as usize].overflow_reported = false;
                self.parts[p as usize].watermark_reported = false;
            }
            Write::StreamWatermark { p, value } => self.mem.rings[p as usize].watermark = value,
            Write::MaskIndex { c, index } => self.ccu_mask_index[c as usize] = index,
            Write::MaskData { c, word } => {
                if let Some(owner) = self.topo.ccus[c as usize].owner {
                    self.sync(owner);
                }
                let ccu = &self.topo.ccus[c as usize];
                let first =
                    ccu.counters.start as usize + self.ccu_mask_index[c as usize] as usize * 32;
                for b in 0..32usize {
                    if first + b < ccu.counters.end as usize {
                        self.counting.masked[first + b] = word & (1 << b) != 0;
                    }
                }
            }
            Write::VmKeyWord { vm, i, word } => self.vms[vm as usize].staged_key[i as usize] = word,
            Write::VmKeyCommit { vm } => {
                let e = &mut self.vms[vm as usize];
                let mut key = [0u8; 32];
                for (chunk, w) in key.chunks_exact_mut(4).zip(e.staged_key) {
                    chunk.copy_from_slice(&w.to_le_bytes());
                }
                if let Some(c) = e.cipher.as_mut() {
                    c.rekey(&key);
                }
            }
            Write::CtxRelease { ctx } => self.release_context(ctx),
        }
    }

    fn reschedule(&mut self, p: u32) {
        if self.parts[p as usize].hs == hs_state::IDLE {
            self.schedule(p);
        }
    }

    fn trigger_command(&mut self, mask: u32, cmd: u32) {
        if cmd & (trig_cmd::TRIGGER | trig_cmd::FLUSH_ULC) != 0 {
            let flush = cmd & trig_cmd::FLUSH_ULC != 0;
            if cmd & trig_cmd::TRIGGER != 0 {
                self.trigger(mask, flush, TriggerCause::Command);
            } else {
                for p in slots(mask) {
                    self.sync(p);
                    let leaving = self.parts[p as usize].hs >= hs_state::CTX_PAUSED;
                    self.counting
                        .flush_ulcs(&self.topo, &mut self.ledger, p, leaving);
                }
            }
            for p in slots(mask) {
                let part = &mut self.parts[p as usize];
                part.hs = hs_after_trigger(part.hs, cmd & !trig_cmd::FLUSH_REQ);
            }
        }
        if cmd & trig_cmd::FLUSH_REQ != 0 {
            self.flush_request(mask);
        }
        self.intr
            .raise(source::TRIGGER_DONE, 0, mask, cmd, self.now);
    }
}

/// Handshake state after a trigger command on a partition.
fn hs_after_trigger(hs: u32, cmd: u32) -> u32 {
    let full = trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER;
    let mut hs = hs;
    if hs == hs_state::XFER_PAUSED && cmd & full == full {
        hs = hs_state::TRIGGERED;
    }
    if hs == hs_state::TRIGGERED && cmd & trig_cmd::FLUSH_REQ != 0 {
        hs = hs_state::ACKED;
    }
    hs
}
