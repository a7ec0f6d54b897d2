//! The partition register file by itself: what each slot reads (a
//! pending switch shows only while it is pending), and the write checks
//! that decide which writes are legal in which handshake state — the
//! pause steps in order, commit after the acks, re-point after the commit
//! with the binds naming the incoming VM and context, binds to this
//! slice's VMs and active contexts, timings of at least 1024 cycles — each
//! advancing the batch's view only when it passes.

use gpupm_uapi::regs::{
    self as r, ctx_state, hs_state, part_ctrl, part_status, rc_cmd, MAX_PARTITION_SLOTS,
};

use super::*;
use crate::model::access::{RegValue, Reject};
use crate::model::context::ContextTable;
use crate::model::partition::Partitions;
use crate::model::topology::{h100_class, Topology};
use crate::model::vm::VmTable;
use crate::scenario::{PartitionSpec, VmSpec};

/// Slice 1: VM 1 with active contexts 5 and 7 (7 destroyed); slice 2: VM
/// 2 with context 6.
struct Fixture {
    topo: Topology,
    parts: Partitions,
    vms: VmTable,
    ctxs: ContextTable,
}

impl Fixture {
    fn new() -> Self {
        let slice = |slot: u32, ts_ctx| PartitionSpec {
            slot,
            gpcs: vec![slot - 1],
            memory_slices: vec![slot - 1],
            ctx_timeslice_cycles: ts_ctx,
            vm_timeslice_cycles: 0,
            ri_version: 1,
            ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
        };
        let specs = [slice(1, 2048), slice(2, 0)];
        let topo = Topology::build(&h100_class(), &specs).expect("the layout builds");
        let mut parts = Partitions::new(&topo);
        let mut vms = VmTable::default();
        for spec in &specs {
            parts.configure(spec, &topo, 4096);
            parts.bind_vm(spec.slot, spec.slot);
            let vm = VmSpec {
                id: spec.slot,
                partition: spec.slot,
                confidential: false,
                confidential_key: None,
            };
            vms.configure(&vm, 1);
        }
        let mut ctxs = ContextTable::default();
        for (ctx, vm) in [(5, 1), (6, 2), (7, 1)] {
            ctxs.insert(ctx, vm, 100 + ctx, 0, 0);
        }
        ctxs.entry(7).state = ctx_state::DESTROYED;
        vms.set_runnable(1, 5, true);
        Fixture {
            topo,
            parts,
            vms,
            ctxs,
        }
    }

    fn check(&self, p: u32, offset: u64, v: u32, ps: &mut PartShadow) -> Result<PartWrite, Reject> {
        self.parts
            .check_write(p, offset, v, ps, (&self.vms, &self.ctxs))
    }

    /// Checks a write that must be refused with `want`, and that the
    /// batch's view did not move.
    fn refused(&self, p: u32, offset: u64, v: u32, ps: &mut PartShadow, want: Reject) {
        let before = format!("{ps:?}");
        assert_eq!(
            self.check(p, offset, v, ps).unwrap_err(),
            want,
            "{offset:#x} <- {v:#x}"
        );
        assert_eq!(
            format!("{ps:?}"),
            before,
            "{offset:#x} <- {v:#x} moved the view"
        );
    }

    fn read(&self, p: u32, offset: u64) -> u64 {
        match self.parts.read(p, offset).expect("a register") {
            RegValue::R32(x) => u64::from(x),
            RegValue::R64(x) => x,
        }
    }

    fn hs(&self, p: u32) -> u32 {
        u32::try_from(self.read(p, r::PART_STATUS)).expect("32 bits") & part_status::STATE_MASK
    }

    /// Requests slice 1's switch to (VM 1, context 5) at `now`.
    fn request(&mut self, now: u64) {
        assert_eq!(
            self.parts.schedule(1, now, &self.vms, &self.ctxs),
            Some((1, 5))
        );
    }
}

fn seq(state: u32, reason: &'static str) -> Reject {
    Reject::BadSequence {
        partition: 1,
        state,
        reason,
    }
}

fn mask(ccus: &[u32]) -> u64 {
    ccus.iter().fold(0, |m, &c| m | 1 << c)
}

#[test]
fn an_unconfigured_slot_shows_a_zero_status_and_the_system_channel_switches_nothing() {
    let fx = Fixture::new();
    assert_eq!(fx.parts.read(3, r::PART_STATUS), Some(RegValue::R32(0)));
    assert_eq!(fx.parts.read(3, r::PART_CTRL), None);
    assert_eq!(fx.parts.read(MAX_PARTITION_SLOTS, r::PART_STATUS), None);
    assert_eq!(
        fx.read(0, r::PART_STATUS),
        u64::from(part_status::CONFIGURED)
    );
    assert_eq!(
        fx.read(0, r::PART_CCU_ASSIGNED),
        mask(&fx.topo.partition_ccus[0])
    );
    let mut ps = fx.parts.shadow()[0];
    let why = Reject::BadValue("the system channel has no contexts to switch");
    for offset in [
        r::PART_CTRL,
        r::PART_RC_CMD,
        r::PART_RC_BIND_VM,
        r::PART_RC_BIND_CTX,
    ] {
        fx.refused(0, offset, 0, &mut ps, why);
    }
    for offset in [
        r::PART_SWITCH_TIMEOUT,
        r::PART_TIMESLICE_CTX,
        r::PART_STATUS,
    ] {
        fx.refused(0, offset, 4096, &mut ps, Reject::ReadOnly);
    }
}

#[test]
fn a_slice_reads_its_settings_and_a_pending_switch_only_while_it_is_pending() {
    let mut fx = Fixture::new();
    let read = |fx: &Fixture, offset| fx.read(1, offset);
    assert_eq!(
        read(&fx, r::PART_STATUS),
        u64::from(part_status::CONFIGURED | hs_state::IDLE)
    );
    assert_eq!(read(&fx, r::PART_GPC_MASK), 1 << 0);
    assert_eq!(read(&fx, r::PART_MEM_MASK), 1 << 0);
    assert_eq!(fx.read(2, r::PART_GPC_MASK), 1 << 1);
    assert_eq!(
        read(&fx, r::PART_CCU_ASSIGNED),
        mask(&fx.topo.partition_ccus[1])
    );
    assert_eq!(read(&fx, r::PART_SWITCH_TIMEOUT), 4096);
    assert_eq!(read(&fx, r::PART_TIMESLICE_CTX), 2048);
    assert_eq!(read(&fx, r::PART_TIMESLICE_VM), 0);
    assert_eq!(read(&fx, r::PART_RC_CMD), 0);
    let pending = [r::PART_NEXT_VM, r::PART_NEXT_CTX, r::PART_SWITCH_REQ_CYCLE];
    assert_eq!(pending.map(|o| read(&fx, o)), [0, 0, 0]);
    fx.request(100);
    assert_eq!(pending.map(|o| read(&fx, o)), [1, 5, 100]);
    let status = part_status::CONFIGURED | part_status::VM_SWITCH | hs_state::REQUESTED;
    assert_eq!(read(&fx, r::PART_STATUS), u64::from(status));
    // The switch completes: the incoming pair is current, nothing pending.
    let assigned = read(&fx, r::PART_CCU_ASSIGNED);
    fx.parts.ctx_paused(1);
    assert_eq!(read(&fx, r::PART_CTRL), u64::from(part_ctrl::CTX_PAUSE));
    fx.parts.transfers_paused(1);
    fx.parts.triggered(1);
    fx.parts.flush_requested(1, vec![(150, assigned)]);
    assert_eq!(read(&fx, r::PART_CCU_ACKED), 0);
    fx.parts.acks_arrived(1, 150);
    assert_eq!(read(&fx, r::PART_CCU_ACKED), assigned);
    assert_eq!(fx.hs(1), hs_state::ACKED);
    fx.parts.committed(1);
    fx.parts.repointed(1);
    fx.parts.unpaused(1, 200);
    assert_eq!(pending.map(|o| read(&fx, o)), [0, 0, 0]);
    assert_eq!(
        [
            r::PART_CUR_VM,
            r::PART_CUR_CTX,
            r::PART_SWITCHES,
            r::PART_FALLBACKS,
            r::PART_CTRL
        ]
        .map(|o| read(&fx, o)),
        [1, 5, 1, 0, 0]
    );
    assert_eq!(
        read(&fx, r::PART_STATUS),
        u64::from(part_status::CONFIGURED)
    );
    assert_eq!(fx.parts.read(1, 0xFC), None);
}

#[test]
fn pause_writes_follow_the_switch_steps_in_order() {
    let mut fx = Fixture::new();
    let why = "pause bits must follow the switch steps in order";
    let mut ps = fx.parts.shadow()[1];
    fx.refused(
        1,
        r::PART_CTRL,
        part_ctrl::CTX_PAUSE,
        &mut ps,
        seq(hs_state::IDLE, why),
    );
    fx.request(10);
    let mut ps = fx.parts.shadow()[1];
    assert_eq!(ps.hs(), hs_state::REQUESTED);
    for v in [part_ctrl::ALL, 0, part_ctrl::TRIG_PAUSE, 1 << 3] {
        fx.refused(1, r::PART_CTRL, v, &mut ps, seq(hs_state::REQUESTED, why));
    }
    // Steps 1 and 2 in one batch: the second is checked against the first.
    assert!(matches!(
        fx.check(1, r::PART_CTRL, part_ctrl::CTX_PAUSE, &mut ps),
        Ok(PartWrite::Ctrl(part_ctrl::CTX_PAUSE))
    ));
    assert_eq!(ps.hs(), hs_state::CTX_PAUSED);
    fx.refused(
        1,
        r::PART_CTRL,
        part_ctrl::CTX_PAUSE,
        &mut ps,
        seq(hs_state::CTX_PAUSED, why),
    );
    fx.refused(1, r::PART_CTRL, 0, &mut ps, seq(hs_state::CTX_PAUSED, why));
    assert!(fx.check(1, r::PART_CTRL, part_ctrl::ALL, &mut ps).is_ok());
    assert_eq!(ps.hs(), hs_state::XFER_PAUSED);
    assert_eq!(
        fx.parts.get(1).hs(),
        hs_state::REQUESTED,
        "checks change nothing"
    );
    fx.refused(1, r::PART_CTRL, 0, &mut ps, seq(hs_state::XFER_PAUSED, why));
    // Step 7 unpauses from REPOINTED only.
    ps.advance_hs(hs_state::REPOINTED);
    fx.refused(
        1,
        r::PART_CTRL,
        part_ctrl::ALL,
        &mut ps,
        seq(hs_state::REPOINTED, why),
    );
    assert!(fx.check(1, r::PART_CTRL, 0, &mut ps).is_ok());
    assert_eq!(ps.hs(), hs_state::IDLE);
}

#[test]
fn rc_commands_need_every_ack_then_the_commit_then_binds_naming_the_incoming_pair() {
    let mut fx = Fixture::new();
    fx.request(10);
    let mut ps = fx.parts.shadow()[1];
    let undefined = Reject::BadValue("needs defined RC command bits");
    for v in [0, 1 << 2, rc_cmd::COMMIT | 1 << 5] {
        fx.refused(1, r::PART_RC_CMD, v, &mut ps, undefined);
    }
    let early = "commit only after the flush request and every CCU's ack";
    for state in [
        hs_state::REQUESTED,
        hs_state::XFER_PAUSED,
        hs_state::TRIGGERED,
    ] {
        ps.advance_hs(state);
        fx.refused(
            1,
            r::PART_RC_CMD,
            rc_cmd::COMMIT,
            &mut ps,
            seq(state, early),
        );
    }
    let before_commit = "re-point only after the switch commit";
    ps.advance_hs(hs_state::ACKED);
    fx.refused(
        1,
        r::PART_RC_CMD,
        rc_cmd::REPOINT,
        &mut ps,
        seq(hs_state::ACKED, before_commit),
    );
    assert!(matches!(
        fx.check(1, r::PART_RC_CMD, rc_cmd::COMMIT, &mut ps),
        Ok(PartWrite::RcCmd(rc_cmd::COMMIT))
    ));
    assert_eq!(ps.hs(), hs_state::COMMITTED);
    // The binds must name the incoming VM 1 and context 5.
    let binds = "bind registers must name the incoming VM and context";
    fx.refused(
        1,
        r::PART_RC_CMD,
        rc_cmd::REPOINT,
        &mut ps,
        seq(hs_state::COMMITTED, binds),
    );
    fx.check(1, r::PART_RC_BIND_VM, 1, &mut ps).unwrap();
    fx.refused(
        1,
        r::PART_RC_CMD,
        rc_cmd::REPOINT,
        &mut ps,
        seq(hs_state::COMMITTED, binds),
    );
    fx.check(1, r::PART_RC_BIND_CTX, 5, &mut ps).unwrap();
    assert!(fx
        .check(1, r::PART_RC_CMD, rc_cmd::REPOINT, &mut ps)
        .is_ok());
    assert_eq!(ps.hs(), hs_state::REPOINTED);
    // Commit and re-point in one write, from ACKED.
    let mut ps = fx.parts.shadow()[1];
    ps.advance_hs(hs_state::ACKED);
    fx.check(1, r::PART_RC_BIND_VM, 1, &mut ps).unwrap();
    fx.check(1, r::PART_RC_BIND_CTX, 5, &mut ps).unwrap();
    assert!(fx.check(1, r::PART_RC_CMD, rc_cmd::ALL, &mut ps).is_ok());
    assert_eq!(ps.hs(), hs_state::REPOINTED);
    // A commit that is not a switch's (no switch pending) is refused too.
    let idle = Fixture::new();
    let mut ps = idle.parts.shadow()[1];
    idle.refused(
        1,
        r::PART_RC_CMD,
        rc_cmd::COMMIT,
        &mut ps,
        seq(hs_state::IDLE, early),
    );
}

#[test]
fn binds_name_only_this_slices_vms_and_active_contexts() {
    let fx = Fixture::new();
    let mut ps = fx.parts.shadow()[1];
    let vm = Reject::BadValue("not a VM bound to this partition");
    for v in [2, 3, 1000, u32::MAX] {
        fx.refused(1, r::PART_RC_BIND_VM, v, &mut ps, vm);
    }
    let ctx = Reject::BadValue("not an active context of this partition");
    // 6 is slice 2's, 7 destroyed, 8 and 4000 free.
    for v in [6, 7, 8, 4000, u32::MAX] {
        fx.refused(1, r::PART_RC_BIND_CTX, v, &mut ps, ctx);
    }
    for (offset, v) in [
        (r::PART_RC_BIND_VM, 1),
        (r::PART_RC_BIND_VM, 0),
        (r::PART_RC_BIND_CTX, 5),
        (r::PART_RC_BIND_CTX, 0),
    ] {
        fx.check(1, offset, v, &mut ps)
            .unwrap_or_else(|e| panic!("{offset:#x} <- {v}: {e:?}"));
    }
    assert!(fx
        .check(2, r::PART_RC_BIND_CTX, 6, &mut fx.parts.shadow()[2])
        .is_ok());
    assert!(fx
        .check(2, r::PART_RC_BIND_VM, 2, &mut fx.parts.shadow()[2])
        .is_ok());
    // Applied, they read back.
    let mut fx = fx;
    assert!(!fx.parts.apply_setting(1, &PartWrite::BindVm(1)));
    assert!(!fx.parts.apply_setting(1, &PartWrite::BindCtx(5)));
    assert_eq!(
        [
            fx.read(1, r::PART_RC_BIND_VM),
            fx.read(1, r::PART_RC_BIND_CTX)
        ],
        [1, 5]
    );
    let ps = fx.parts.shadow()[1];
    assert_eq!(
        (ps.bind_vm, ps.bind_ctx),
        (1, 5),
        "the next batch starts from them"
    );
}

#[test]
fn timings_below_1024_cycles_are_refused_and_a_timeslice_may_be_0() {
    let mut fx = Fixture::new();
    let mut ps = fx.parts.shadow()[1];
    let low = Reject::BadValue("below the minimum of 1024 cycles");
    for v in [0, 1, MIN_TIMING_CYCLES - 1] {
        fx.refused(1, r::PART_SWITCH_TIMEOUT, v, &mut ps, low);
    }
    for offset in [r::PART_TIMESLICE_CTX, r::PART_TIMESLICE_VM] {
        for v in [1, MIN_TIMING_CYCLES - 1] {
            fx.refused(1, offset, v, &mut ps, low);
        }
        for v in [0, MIN_TIMING_CYCLES, u32::MAX] {
            assert!(
                fx.check(1, offset, v, &mut ps).is_ok(),
                "{offset:#x} <- {v}"
            );
        }
    }
    assert!(matches!(
        fx.check(1, r::PART_SWITCH_TIMEOUT, MIN_TIMING_CYCLES, &mut ps),
        Ok(PartWrite::SwitchTimeout(MIN_TIMING_CYCLES))
    ));
    // A timeslice change asks for a scheduler decision only while idle.
    assert!(!fx.parts.apply_setting(1, &PartWrite::SwitchTimeout(5000)));
    assert!(fx.parts.apply_setting(1, &PartWrite::TimesliceCtx(3000)));
    assert!(fx.parts.apply_setting(1, &PartWrite::TimesliceVm(0)));
    fx.request(10);
    assert!(!fx.parts.apply_setting(1, &PartWrite::TimesliceCtx(4000)));
    assert!(!fx.parts.apply_setting(1, &PartWrite::TimesliceVm(8000)));
    assert!(!fx
        .parts
        .apply_setting(1, &PartWrite::Ctrl(part_ctrl::CTX_PAUSE)));
    assert_eq!(
        fx.hs(1),
        hs_state::REQUESTED,
        "handshake writes are the device's to wire"
    );
    assert_eq!(
        [
            r::PART_SWITCH_TIMEOUT,
            r::PART_TIMESLICE_CTX,
            r::PART_TIMESLICE_VM
        ]
        .map(|o| fx.read(1, o)),
        [5000, 4000, 8000]
    );
    // The new timeout moves the deadline of the pending switch.
    assert_eq!(fx.parts.get(1).wake_at(), 10 + 5000);
}

#[test]
fn the_rest_of_the_block_is_read_only() {
    let fx = Fixture::new();
    let mut ps = fx.parts.shadow()[1];
    for offset in [
        r::PART_STATUS,
        r::PART_CUR_VM,
        r::PART_CUR_CTX,
        r::PART_NEXT_VM,
        r::PART_NEXT_CTX,
        r::PART_CCU_ASSIGNED,
        r::PART_CCU_ACKED,
        r::PART_FALLBACKS,
        r::PART_SWITCHES,
        r::PART_GPC_MASK,
        r::PART_MEM_MASK,
        r::PART_SWITCH_REQ_CYCLE,
        0xFC,
    ] {
        fx.refused(1, offset, 4096, &mut ps, Reject::ReadOnly);
    }
}
