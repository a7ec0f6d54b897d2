//! Helpers of the sampling tests: scenarios with programs, arming the
//! sampling units through registers, reading their buffers.

use gpupm_client::ops::write32 as write;
use gpupm_driver::model::Device;
use gpupm_driver::scenario::program::generate;
use gpupm_driver::scenario::{parse, Scenario};
use gpupm_uapi::ioctl::BlockTruth;
use gpupm_uapi::layout::envelope_flags;
use gpupm_uapi::sampling::{
    self as s, buf_kind, samp, BranchSlot, BranchStackRecord, PcRecord, PcSlot,
};
use zerocopy::FromBytes;

/// The small scenario with programs on its busy (the built-in GEMM, whose
/// straight loops an unwatched walk skips in closed form) and light (a
/// generated one) profiles.
pub fn small_with_programs() -> Scenario {
    let mut sc = super::small_scenario();
    let gemm = gpupm_driver::scenario::builtin().programs[0].clone();
    sc.programs = vec![gemm, generate(sc.seed, 1)];
    sc.profiles[0].program = Some(0);
    sc.profiles[1].program = Some(1);
    sc
}

/// One partition, one VM, one context running the resonant loop and
/// nothing else (no switches to re-phase a sampler).
pub fn resonant_alone() -> Scenario {
    let builtin = gpupm_driver::scenario::BUILTIN_TOML;
    let program = &builtin[builtin
        .find("# The resonant loop")
        .expect("resonant program")..];
    let program = &program[..program.find("[[churn]]").expect("churn follows")];
    let text = format!(
        "seed = 3\n[trigger]\nperiod_cycles = 0\n\
         [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\nctx_timeslice_cycles = 0\nvm_timeslice_cycles = 0\n\
         [[vm]]\nid = 1\npartition = 1\n\
         [[profile]]\nname = \"r\"\nprogram = \"resonant\"\n[[profile.phase]]\nduration_cycles = 1000000\n\
         rates = {{ sm_cycles_elapsed = 1.0 }}\n\
         [[context]]\nvm = 1\nprofile = \"r\"\n{program}"
    );
    parse("resonant", &text).expect("the resonant scenario parses")
}

/// Sampler settings.
#[derive(Clone, Copy, Debug)]
pub struct Arm {
    pub pc_cap: u32,
    pub branch_cap: u32,
    pub period: u32,
    pub dither: u32,
    pub n: u32,
}

/// Places the branch buffer at 0 and the PC buffer after it, sets P,
/// R_MAX and N, and enables both samplers of partition `p` (one batch).
pub fn arm(dev: &mut Device, p: u32, a: Arm) {
    let branch_bytes = u64::from(a.branch_cap) * s::slot_size(buf_kind::BRANCH);
    let pc_base = u32::try_from(branch_bytes.next_multiple_of(s::BUF_ALIGN)).unwrap();
    let b = |kind, reg| samp(p, s::buf(kind, reg));
    let mut ops = [
        write(b(buf_kind::BRANCH, s::BUF_BASE), 0),
        write(b(buf_kind::BRANCH, s::BUF_CAP), a.branch_cap),
        write(b(buf_kind::PC, s::BUF_BASE), pc_base),
        write(b(buf_kind::PC, s::BUF_CAP), a.pc_cap),
        write(samp(p, s::SAMP_CYCLE_PERIOD), a.period),
        write(samp(p, s::SAMP_CYCLE_DITHER), a.dither),
        write(samp(p, s::SAMP_BRANCH_PERIOD), a.n),
        write(samp(p, s::SAMP_CTRL), s::samp_ctrl::ALL),
    ];
    dev.batch(&mut ops).expect("arming succeeds");
}

/// Raw slot bytes of the records buffer `kind` of `p` holds now (tail..head).
pub fn slots(dev: &Device, p: u32, kind: u32) -> Vec<Vec<u8>> {
    let reg = |r| {
        let off = samp(p, s::buf(kind, r));
        let width = if gpupm_uapi::map::is_64bit(off) { 8 } else { 4 };
        dev.read_reg(off, width).unwrap()
    };
    let word = |r| u32::try_from(reg(r)).expect("a 32-bit buffer register");
    let (head, tail, cap) = (word(s::BUF_HEAD), word(s::BUF_TAIL), word(s::BUF_CAP));
    let addr = reg(s::BUF_ADDR);
    let size = s::slot_size(kind);
    (tail..head)
        .map(|i| {
            let mut buf = vec![0u8; usize::try_from(size).expect("a slot size")];
            let at = addr + u64::from(i & (cap - 1)) * size;
            dev.read_window(at, &mut buf).expect("slot readable");
            buf
        })
        .collect()
}

/// The PC records of `p`, opened with `key` for a confidential VM.
pub fn pc_records(dev: &Device, p: u32, key: Option<&[u8; 32]>) -> Vec<PcRecord> {
    slots(dev, p, buf_kind::PC)
        .iter()
        .map(|b| {
            let mut slot = PcSlot::read_from_bytes(b).unwrap();
            open(key, &slot.envelope, &mut slot.payload, &slot.tag);
            PcRecord::read_from_bytes(&slot.payload).unwrap()
        })
        .collect()
}

/// The branch-stack records of `p`, opened with `key` for a confidential VM.
pub fn branch_records(dev: &Device, p: u32, key: Option<&[u8; 32]>) -> Vec<BranchStackRecord> {
    slots(dev, p, buf_kind::BRANCH)
        .iter()
        .map(|b| {
            let mut slot = BranchSlot::read_from_bytes(b).unwrap();
            open(key, &slot.envelope, &mut slot.payload, &slot.tag);
            BranchStackRecord::read_from_bytes(&slot.payload).unwrap()
        })
        .collect()
}

fn open(
    key: Option<&[u8; 32]>,
    env: &gpupm_uapi::layout::Envelope,
    payload: &mut [u8],
    tag: &[u8; 16],
) {
    let encrypted = env.flags & envelope_flags::ENCRYPTED != 0;
    assert!(env.flags & envelope_flags::VALID != 0, "slot not valid");
    assert_eq!(
        encrypted,
        key.is_some(),
        "sealed exactly for confidential VMs"
    );
    if let Some(k) = key {
        gpupm_driver::model::cc::open(k, env, payload, tag)
            .expect("record opens with the VM's key");
    }
}

/// Every per-block row of `ctx`'s program, opened with `key` if sealed.
pub fn truth(dev: &mut Device, ctx: u32, key: Option<&[u8; 32]>) -> (Vec<BlockTruth>, u64) {
    let mut rows = Vec::new();
    let mut first = 0;
    loop {
        let mut q = dev.ledger_blocks(ctx, first).expect("ledger_blocks");
        if let Some(k) = key {
            let mut payload = zerocopy::IntoBytes::as_bytes(&q.rows).to_vec();
            gpupm_driver::model::cc::open(k, &q.envelope, &mut payload, &q.tag).expect("opens");
            q.rows = FromBytes::read_from_bytes(&payload[..]).unwrap();
        }
        rows.extend_from_slice(&q.rows[..q.count as usize]);
        first += q.count;
        if first >= q.total {
            return (rows, q.ctx_cycles);
        }
    }
}
