//! Helpers of the runtime-instrumentation tests: a scenario with
//! partitions of different characteristics, programming a control block
//! through registers, reading and checking its report groups.

use gpupm_client::ops::write32 as write;
use gpupm_client::ri::RiEntry;
use gpupm_client::TenantClient;
use gpupm_driver::host::Host;
use gpupm_driver::model::Device;
use gpupm_driver::scenario::{parse, Scenario};
use gpupm_uapi::layout::ri_record;
use gpupm_uapi::ri::{self as ri, group_bytes, ri_ctrl};

pub use crate::scenario::builtin_program;

/// Four slices: 1 runs VMs 1 and 2 (VM timeslices, so VM 1 is sometimes
/// switched out) with contexts 1, 2 (VM 1, two contexts that rotate) and
/// 3 (VM 2); 2 has max RGS 2; 3 has capability version 2; 4 matches 1.
/// VM 5 on slice 4 is confidential (context 4). Throttle windows make
/// the clock secondary part of the time. Switches finish by the device's
/// fallback when no host services them.
pub fn scenario(seed: u64, program: &str) -> Scenario {
    parse("ri", &scenario_toml(seed, program))
        .unwrap_or_else(|e| panic!("the RI scenario parses: {e}"))
}

/// The TOML of [`scenario`].
pub fn scenario_toml(seed: u64, program: &str) -> String {
    format!(
        "seed = {seed}\nswitch_timeout_cycles = 3000\n\
         [topology]\nsms_per_gpc = [1, 1, 1, 1]\nmemory_slices = 4\nl2_per_slice = 1\n\
         fb_per_slice = 1\nce_per_slice = 1\nnvlinks = 0\n\
         [trigger]\nperiod_cycles = 0\n\
         [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
         ctx_timeslice_cycles = 40000\nvm_timeslice_cycles = 150000\n\
         [[partition]]\nslot = 2\ngpcs = [1]\nmemory_slices = [1]\nri_max_rgs = 2\n\
         [[partition]]\nslot = 3\ngpcs = [2]\nmemory_slices = [2]\nri_version = 2\n\
         [[partition]]\nslot = 4\ngpcs = [3]\nmemory_slices = [3]\nvm_timeslice_cycles = 100000\n\
         [[vm]]\nid = 1\npartition = 1\n[[vm]]\nid = 2\npartition = 1\n\
         [[vm]]\nid = 5\npartition = 4\n\
         confidential_key = \"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\"\n\
         [[profile]]\nname = \"p\"\nprogram = \"{program}\"\n[[profile.phase]]\n\
         duration_cycles = 1000000\nrates = {{ sm_cycles_elapsed = 1.0 }}\n\
         [[context]]\nvm = 1\nprofile = \"p\"\n[[context]]\nvm = 1\nprofile = \"p\"\n\
         [[context]]\nvm = 2\nprofile = \"p\"\n[[context]]\nvm = 5\nprofile = \"p\"\n\
         [[throttle]]\nstart_cycles = 200000\nend_cycles = 450000\n\
         [[throttle]]\nstart_cycles = 900000\nend_cycles = 1300000\n\
         {}",
        builtin_program(program)
    )
}

/// A control block's settings.
#[derive(Clone, Copy, Debug)]
pub struct Cb {
    pub ctx: u32,
    pub mode: u32,
    pub rgs: u32,
    pub bits: u32,
    pub sf: u32,
    pub rsic: u32,
    pub roa: u32,
    pub rla: u32,
}

impl Cb {
    /// Cycle mode, RGS 2, a buffer of `groups` groups at 0.
    pub fn cycles(ctx: u32, sf: u32, groups: u32) -> Cb {
        Cb {
            ctx,
            mode: ri::ri_mode::CYCLE,
            rgs: 2,
            bits: 0,
            sf,
            rsic: 0,
            roa: 0,
            rla: groups * 128 - 1,
        }
    }

    /// The `RI_CTRL` value that enables it.
    pub fn ctrl(&self) -> u32 {
        ri_ctrl::ENABLE
            | self.mode << ri_ctrl::MODE_SHIFT
            | self.rgs << ri_ctrl::RGS_SHIFT
            | self.bits
    }
}

/// Programs and enables block `i` in one batch.
pub fn arm(dev: &mut Device, i: u32, cb: Cb) -> Result<(), usize> {
    let mut ops = [
        write(ri::ri(i, ri::RI_CTX), cb.ctx),
        write(ri::ri(i, ri::RI_SF), cb.sf),
        write(ri::ri(i, ri::RI_RSIC), cb.rsic),
        write(ri::ri(i, ri::RI_ROA), cb.roa),
        write(ri::ri(i, ri::RI_RLA), cb.rla),
        write(ri::ri(i, ri::RI_CTRL), cb.ctrl()),
    ];
    dev.batch(&mut ops).map_err(|(at, _)| at)
}

/// Runs `total` cycles in steps of `step`, a host servicing switches.
pub fn run(dev: &mut Device, host: &mut Host, total: u64, step: u64) {
    let end = dev.now() + total;
    while dev.now() < end {
        dev.advance(step.min(end - dev.now())).expect("advance");
        host.service(dev).expect("service");
    }
}

pub fn reg(dev: &Device, i: u32, r: u64) -> u64 {
    dev.read_reg(
        ri::ri(i, r),
        if gpupm_uapi::map::is_64bit(ri::ri(i, r)) {
            8
        } else {
            4
        },
    )
    .expect("RI register")
}

/// The span bytes `0..=rla` of block `i`.
pub fn span(dev: &Device, i: u32, rla: u32) -> Vec<u8> {
    let mut buf = vec![0; rla as usize + 1];
    dev.read_window(ri::ri_span_offset(i), &mut buf)
        .expect("the span reads");
    buf
}

/// The records of the groups stored in `[roa, rca)`, group by group.
pub fn groups(dev: &Device, i: u32, cb: Cb) -> Vec<Vec<[u8; 16]>> {
    let rca = usize::try_from(reg(dev, i, ri::RI_RCA)).expect("RCA fits usize");
    let bytes = span(dev, i, cb.rla);
    let size = usize::try_from(group_bytes(cb.rgs)).expect("a group size");
    bytes[cb.roa as usize..rca]
        .chunks(size)
        .map(|g| {
            g.chunks(16)
                .map(|r| r.try_into().expect("16 bytes"))
                .collect()
        })
        .collect()
}

/// Checks a group's shape: 2^(RGS+1) records, begin (at ROA) or
/// timestamp first, extras then fill, the instruction record last.
pub fn check_group(g: &[[u8; 16]], rgs: u32, at_origin: bool) -> Result<(), String> {
    if g.len() != 1 << (rgs + 1) {
        return Err(format!("{} records, RGS {rgs}", g.len()));
    }
    let head = if at_origin {
        ri_record::BEGIN
    } else {
        ri_record::TIMESTAMP
    };
    if g[0][0] != head {
        return Err(format!("first record kind {:#x}, want {head:#x}", g[0][0]));
    }
    if g[g.len() - 1][0] != ri_record::INSTRUCTION {
        return Err(format!("last record kind {:#x}", g[g.len() - 1][0]));
    }
    let body = &g[1..g.len() - 1];
    let extras = body
        .iter()
        .take_while(|r| matches!(r[0], ri_record::EMIT | ri_record::ABORT))
        .count();
    if body[extras..].iter().any(|r| *r != [0; 16]) {
        return Err("a non-fill record after the fill".into());
    }
    Ok(())
}

/// Reads a tenant's RI session entries through `c` until `done` says the
/// session has all it needs (given every entry read so far); fails at
/// end of file before then.
pub fn read_entries_until(
    c: &TenantClient,
    mut done: impl FnMut(&[RiEntry]) -> bool,
) -> Vec<RiEntry> {
    let mut all = Vec::new();
    while !done(&all) {
        let got = c.read_ri().expect("read");
        assert!(!got.is_empty(), "end of file before the session was done");
        all.extend(got);
    }
    all
}
