//! Every plane of a confidential VM against a curious host:
//! a scenario whose confidential VM runs a program and shares its
//! partition with a plain VM (time-sliced), two workloads of it that
//! differ in rates *and* program, the host arming every plane it can
//! (marked ranges on the confidential program and data, both samplers,
//! runtime-instrumentation attempts), and digests of everything the host
//! can read — every register, the whole memory window with sealed
//! payloads blanked, both mailboxes' answers — through one [`Port`] that
//! is the model in process or the device node.

use gpupm_client::ops::{read32, reg32, write32};
use gpupm_client::DevNode;
use gpupm_driver::model::Device;
use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::ioctl::{RegOp, MAX_BATCH_OPS};
use gpupm_uapi::layout::{self, envelope_flags, BLOCK_SLOT_SIZE, STREAM_REGION};
use gpupm_uapi::ranges::{
    self as rg, code_item, range_ctrl, range_event, range_reg, range_span_offset, rring, RangeSlot,
};
use gpupm_uapi::regs::{self as r, mbox_op, BAR0_SIZE, MAX_PARTITION_SLOTS};
use gpupm_uapi::ri::{self, ri_ctrl, ri_mode, RI_BLOCKS, RI_SPAN};
use gpupm_uapi::sampling::{self as s, buf_kind, samp, samp_status};

use crate::cc::DEVICE;
use crate::scenario::hex;

/// The plain VM alone on partition 1.
pub const LONE_VM: u32 = 1;
/// The confidential VM, on partition [`SHARED_SLOT`].
pub const CC_VM: u32 = 2;
/// Another tenant's plain VM, alone on partition 3.
pub const OTHER_VM: u32 = 3;
/// The plain VM time-sliced with [`CC_VM`] on partition [`SHARED_SLOT`].
pub const SHARED_VM: u32 = 4;
/// The partition the confidential VM shares.
pub const SHARED_SLOT: u32 = 2;
/// The confidential VM's key.
pub const CC_KEY: [u8; 32] = [0x3d; 32];
/// `CTX_PROGRAM` of the plain VMs' program ("work", first in the table).
pub const WORK_PROGRAM: u32 = 1;
/// `CTX_PROGRAM` of the confidential VM's program ("secret", second).
pub const SECRET_PROGRAM: u32 = 2;

/// Bytes of a range-ring slot.
const RANGE_SLOT: usize = std::mem::size_of::<RangeSlot>();

/// What the confidential VM runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    /// Its profile's rates, relative to the plain VMs'.
    pub rate: f64,
    /// Which body its program "secret" has (0 or 1): same name and table
    /// slot, other block sizes, CPIs, loop trips, branch probabilities,
    /// data addresses.
    pub body: u8,
}

/// One workload of the confidential VM.
pub const BUSY: Workload = Workload { rate: 1.0, body: 0 };
/// Another: a tenth of the rates, another program body.
pub const OTHER: Workload = Workload { rate: 0.1, body: 1 };

fn rates(k: f64) -> String {
    format!(
        "{{ sm_cycles_active = {}, l2_read_req = {}, l2_hit = {}, fb_bytes = {}, ce_bytes = {}, pcie_rx_bytes = {} }}",
        0.9 * k,
        0.3 * k,
        0.2 * k,
        12.5 * k,
        7.25 * k,
        0.1 * k
    )
}

/// The body of program "secret" (two kernels, four and two blocks, in
/// both bodies).
fn secret(body: u8) -> String {
    let (a, b) = if body == 0 {
        (
            (40, 1.5, 96, 2.0, 24, 256),
            (0.3, 64, 4.0, 0x1000_0000u32, 8),
        )
    } else {
        (
            (7, 3.25, 200, 1.0, 5, 4096),
            (0.75, 12, 9.5, 0x2200_0000u32, 5),
        )
    };
    let ((head_i, head_c, body_i, body_c, trips, stride), (p, leaf_i, leaf_c, base, last)) = (a, b);
    format!(
        r#"[[program]]
name = "secret"
[[program.kernel]]
name = "main"
[[program.kernel.block]]
name = "head"
instructions = {head_i}
cpi = {head_c}
[[program.kernel.block]]
name = "body"
instructions = {body_i}
cpi = {body_c}
data = {{ base = 0x{base:x}, stride = {stride}, span = 0x40000 }}
loop = {{ to = "body", trips = {trips} }}
[[program.kernel.block]]
name = "fork"
instructions = 16
cpi = 1.0
call = "leaf"
[[program.kernel.block]]
name = "tail"
instructions = 32
cpi = 3.0
branch = [{{ to = "head", p = {p} }}]
[[program.kernel]]
name = "leaf"
[[program.kernel.block]]
instructions = {leaf_i}
cpi = {leaf_c}
data = {{ base = 0x{leaf_base:x}, stride = 64, span = 0x1000 }}
[[program.kernel.block]]
instructions = {last}
cpi = 1.0
"#,
        leaf_base = base + 0x10_0000
    )
}

/// Three partitions: VM [`LONE_VM`] alone on 1, the confidential VM
/// [`CC_VM`] time-sliced with the plain VM [`SHARED_VM`] on 2, VM
/// [`OTHER_VM`] alone on 3. Every context runs a program; periodic and
/// threshold triggers; a throttle window.
pub fn scenario(w: Workload) -> String {
    let mut s = format!(
        r#"name = "cc-planes"
seed = 31
{DEVICE}[[throttle]]
start_cycles = 60000
end_cycles = 110000
[[profile]]
name = "plain"
program = "work"
[[profile.phase]]
duration_cycles = 30000
rates = {plain}
[[profile]]
name = "cc"
program = "secret"
[[profile.phase]]
duration_cycles = 30000
rates = {cc}
[[profile]]
name = "links"
[[profile.phase]]
duration_cycles = 50000
rates = {{ nvlink_rx_flits = 0.25, nvlink_tx_flits = 0.5 }}
[[program]]
name = "work"
[[program.kernel]]
name = "main"
[[program.kernel.block]]
instructions = 24
cpi = 2.0
[[program.kernel.block]]
name = "loop"
instructions = 48
cpi = 1.25
data = {{ base = 0x1000_0000, stride = 128, span = 0x8000 }}
loop = {{ to = "loop", trips = 12 }}
[[program.kernel.block]]
instructions = 16
cpi = 2.5
branch = [{{ to = "loop", p = 0.4 }}]
{secret}"#,
        plain = rates(1.0),
        cc = rates(w.rate),
        secret = secret(w.body)
    );
    for p in 1..=3u32 {
        let (ctx, vm) = if p == SHARED_SLOT {
            (9000, 23000)
        } else {
            (15000, 0)
        };
        s += &format!(
            "[[partition]]\nslot = {p}\ngpcs = [{g}]\nmemory_slices = [{g}]\n\
             ctx_timeslice_cycles = {ctx}\nvm_timeslice_cycles = {vm}\n",
            g = p - 1
        );
    }
    for (vm, slot) in [(LONE_VM, 1), (CC_VM, 2), (OTHER_VM, 3), (SHARED_VM, 2)] {
        s += &format!("[[vm]]\nid = {vm}\npartition = {slot}\n");
        if vm == CC_VM {
            s += &format!("confidential_key = \"{}\"\n", hex(&CC_KEY));
        }
        let profile = if vm == CC_VM { "cc" } else { "plain" };
        for _ in 0..2 {
            s += &format!("[[context]]\nvm = {vm}\nprofile = \"{profile}\"\n");
        }
    }
    s
}

/// The parsed [`scenario`].
pub fn model_scenario(w: Workload) -> gpupm_driver::scenario::Scenario {
    gpupm_driver::scenario::parse("cc-planes.toml", &scenario(w)).expect("the scenario parses")
}

/// What a host reaches of the device: the model in process, or a node.
pub trait Port {
    /// Runs a register batch; whether it succeeded (a refused batch
    /// changes nothing).
    fn run(&mut self, ops: &mut [RegOp]) -> bool;
    /// Reads window bytes; whether the read succeeded.
    fn window(&mut self, offset: u64, buf: &mut [u8]) -> bool;
}

impl Port for Device {
    fn run(&mut self, ops: &mut [RegOp]) -> bool {
        self.batch(ops).is_ok()
    }
    fn window(&mut self, offset: u64, buf: &mut [u8]) -> bool {
        self.read_window(offset, buf).is_ok()
    }
}

impl Port for &DevNode {
    fn run(&mut self, ops: &mut [RegOp]) -> bool {
        self.batch(ops).is_ok()
    }
    fn window(&mut self, offset: u64, buf: &mut [u8]) -> bool {
        DevNode::window(self, offset, buf).is_ok()
    }
}

/// A 32-bit register, if it reads.
pub fn reg(port: &mut impl Port, offset: u64) -> Option<u32> {
    let mut op = [read32(offset)];
    port.run(&mut op).then(|| reg32(op[0].value))
}

/// A 64-bit register (two halves in one batch), if it reads.
pub fn reg64(port: &mut impl Port, offset: u64) -> Option<u64> {
    let mut ops = [read32(offset), read32(offset + 4)];
    port.run(&mut ops)
        .then(|| u64::from(reg32(ops[0].value)) | u64::from(reg32(ops[1].value)) << 32)
}

/// Every readable 32-bit word of BAR0, found by batches that split where
/// one hits a hole. Which registers exist depends on the scenario alone,
/// so a model device built from the node's scenario finds the node's map
/// in process (holes cost many calls through a node).
pub fn register_map(port: &mut impl Port) -> Vec<u64> {
    fn readable(port: &mut impl Port, offsets: &[u64], out: &mut Vec<u64>) {
        let mut ops: Vec<_> = offsets.iter().map(|&o| read32(o)).collect();
        if port.run(&mut ops) {
            out.extend_from_slice(offsets);
        } else if offsets.len() > 1 {
            let (a, b) = offsets.split_at(offsets.len() / 2);
            readable(port, a, out);
            readable(port, b, out);
        }
    }
    let offsets: Vec<u64> = (0..BAR0_SIZE).step_by(4).collect();
    let mut out = Vec::new();
    for chunk in offsets.chunks(MAX_BATCH_OPS) {
        readable(port, chunk, &mut out);
    }
    out
}

/// The registers at `map` (offsets in `skip` left out), as
/// `offset=value;`, read in batches.
pub fn registers(port: &mut impl Port, map: &[u64], skip: &[u64]) -> Vec<u8> {
    let offsets: Vec<u64> = map.iter().copied().filter(|o| !skip.contains(o)).collect();
    let mut out = Vec::new();
    for chunk in offsets.chunks(MAX_BATCH_OPS) {
        let mut ops: Vec<_> = chunk.iter().map(|&o| read32(o)).collect();
        assert!(port.run(&mut ops), "a register of the map did not read");
        for op in &ops {
            out.extend_from_slice(format!("{:x}={};", op.offset, reg32(op.value)).as_bytes());
        }
    }
    out
}

/// A node file reached with 4-byte `pread`/`pwrite` at register offsets
/// (`card0-oob`, which has no batch ioctl): a batch runs op by op and
/// stops at the first refusal.
#[derive(Debug)]
pub struct RawPort(pub std::fs::File);

impl Port for RawPort {
    fn run(&mut self, ops: &mut [RegOp]) -> bool {
        use gpupm_uapi::ioctl::reg_op;
        use std::os::unix::fs::FileExt;
        ops.iter_mut().all(|op| {
            let mut word = [0u8; 4];
            if op.op == reg_op::WRITE {
                let value = reg32(op.value).to_le_bytes();
                return self.0.write_at(&value, op.offset).is_ok_and(|n| n == 4);
            }
            let ok = self.0.read_at(&mut word, op.offset).is_ok_and(|n| n == 4);
            op.value = u64::from(u32::from_le_bytes(word));
            ok
        })
    }
    fn window(&mut self, _: u64, _: &mut [u8]) -> bool {
        false
    }
}

/// Tenant uids of the scenario's VMs, by VM id (the daemon's `[[tenant]]`
/// tables: [`tenants`]).
pub const UIDS: [(u32, u32); 4] = [
    (LONE_VM, 61_601),
    (CC_VM, 61_602),
    (OTHER_VM, 61_603),
    (SHARED_VM, 61_604),
];

/// The daemon's `[[tenant]]` tables.
pub fn tenants() -> String {
    UIDS.iter()
        .map(|(vm, uid)| format!("[[tenant]]\nvm = {vm}\nuid = {uid}\n"))
        .collect()
}

/// Blanks what of a sealed slot (envelope, payload, tag) may differ
/// between two runs without saying anything about the workload: the
/// ciphertext and tag (their length stays) and the session id, drawn from
/// the OS at every device start. Returns whether the slot was sealed.
pub fn blank_sealed(slot: &mut [u8]) -> bool {
    let flags = u32::from_le_bytes(slot[4..8].try_into().expect("envelope flags"));
    if flags & envelope_flags::ENCRYPTED == 0 {
        return false;
    }
    slot[12..16].fill(0);
    slot[28..32].fill(0);
    slot[32..].fill(0);
    true
}

/// The memory window as the host reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct Window {
    /// The bytes, sealed slots blanked ([`blank_sealed`]).
    pub bytes: Vec<u8>,
    /// Sealed slots seen.
    pub sealed: usize,
    /// Where each region starts in `bytes`, and what it is.
    pub regions: Vec<(usize, String)>,
}

impl Window {
    /// The region holding byte `at` of [`Window::bytes`], and the offset
    /// inside it.
    pub fn locate(&self, at: usize) -> (String, usize) {
        let i = self.regions.partition_point(|(start, _)| *start <= at);
        let (start, name) = &self.regions[i.saturating_sub(1)];
        (name.clone(), at - start)
    }
}

/// The whole memory window as the host reads it: the block slots, every
/// stream ring, both sample buffers and the range ring of every
/// configured slot, and the span of every runtime-instrumentation block
/// that was ever placed (the others were never written).
pub fn window(port: &mut impl Port) -> Window {
    // (what, offset, length, slot size; 0 for bytes that are never sealed)
    let mut regions: Vec<(String, u64, u64, u64)> =
        vec![("block slots".into(), 0, STREAM_REGION, BLOCK_SLOT_SIZE)];
    for p in 0..MAX_PARTITION_SLOTS {
        if let Some(cap) = reg(port, r::part(p, r::PART_STREAM_CAP)) {
            let len = u64::from(cap) * layout::STREAM_SLOT_SIZE;
            let at = layout::stream_slot_offset(p, 0);
            regions.push((
                format!("stream ring {p}"),
                at,
                len,
                layout::STREAM_SLOT_SIZE,
            ));
        }
        let configured =
            reg(port, samp(p, s::SAMP_STATUS)).is_some_and(|v| v & samp_status::CONFIGURED != 0);
        if !configured {
            continue;
        }
        for kind in [buf_kind::BRANCH, buf_kind::PC] {
            let cap = reg(port, samp(p, s::buf(kind, s::BUF_CAP))).expect("BUF_CAP");
            let addr = reg64(port, samp(p, s::buf(kind, s::BUF_ADDR))).expect("BUF_ADDR");
            let slot = s::slot_size(kind);
            if cap > 0 {
                let what = format!("sample buffer {kind} of {p}");
                regions.push((what, addr, u64::from(cap) * slot, slot));
            }
        }
        let cap = reg(port, rring(p, rg::RRING_CAP)).expect("RRING_CAP");
        if cap > 0 {
            let slot = u64::try_from(RANGE_SLOT).expect("fits");
            let what = format!("range ring {p}");
            regions.push((what, range_span_offset(p), u64::from(cap) * slot, slot));
        }
    }
    for b in 0..RI_BLOCKS {
        let placed = [ri::RI_CTX, ri::RI_RLA, ri::RI_RCA]
            .iter()
            .any(|&at| reg(port, ri::ri(b, at)).is_some_and(|v| v != 0));
        if placed {
            regions.push((format!("RI span {b}"), ri::ri_span_offset(b), RI_SPAN, 0));
        }
    }
    let mut out = Window {
        bytes: Vec::new(),
        sealed: 0,
        regions: Vec::new(),
    };
    for (what, offset, len, slot) in regions {
        let mut buf = vec![0u8; usize::try_from(len).expect("a region fits in memory")];
        assert!(port.window(offset, &mut buf), "window read at {offset:#x}");
        if slot > 0 {
            let slot = usize::try_from(slot).expect("a slot fits in memory");
            for chunk in buf.chunks_exact_mut(slot) {
                out.sealed += usize::from(blank_sealed(chunk));
            }
        }
        out.regions.push((out.bytes.len(), what));
        out.bytes.extend_from_slice(&buf);
    }
    out
}

/// One mailbox command through the mailbox whose `MBOX_ARG` is at
/// `base`: its status and 64-bit data.
fn ask(port: &mut impl Port, base: u64, arg: u32, op: u32, out: &mut Vec<u8>) {
    let at = |reg: u64| base + (reg - r::MBOX_ARG);
    let mut ops = [
        write32(at(r::MBOX_ARG), arg),
        write32(at(r::MBOX_CMD), op),
        read32(at(r::MBOX_STATUS)),
        read32(at(r::MBOX_DATA)),
        read32(at(r::MBOX_DATA) + 4),
    ];
    assert!(port.run(&mut ops), "mailbox command {op} at {base:#x}");
    for op in &ops[2..] {
        out.extend_from_slice(&reg32(op.value).to_le_bytes());
    }
}

/// A mailbox's answers to every command, an unknown one and every
/// event's system counter: status and data of each. `oob` picks the BMC's
/// mailbox (`OOB_MBOX_*`, which only `card0-oob` reaches), else the host's.
pub fn mailbox(port: &mut impl Port, oob: bool) -> Vec<u8> {
    let base = if oob { r::OOB_MBOX_ARG } else { r::MBOX_ARG };
    let mut out = Vec::new();
    for op in [
        mbox_op::GET_CAPS,
        mbox_op::READ_IDLE_CYCLES,
        mbox_op::READ_CYCLE,
        mbox_op::READ_FALLBACKS,
        0xEE,
    ] {
        ask(port, base, 0, op, &mut out);
    }
    for e in 0..=u32::try_from(EVENT_COUNT).expect("fits") {
        ask(port, base, e, mbox_op::READ_SYSTEM_COUNTER, &mut out);
    }
    out
}

/// The contexts of `vm` (ids in order), from the context table.
pub fn contexts_of(port: &mut impl Port, vm: u32) -> Vec<u32> {
    (1..r::MAX_CONTEXTS)
        .filter(|&c| {
            reg(port, r::ctx(c, r::CTX_STATE)) == Some(r::ctx_state::ACTIVE)
                && reg(port, r::ctx(c, r::CTX_VM)) == Some(vm)
        })
        .collect()
}

/// What the host tries on every plane of partition [`SHARED_SLOT`] (and
/// runtime instrumentation device-wide), each as one batch: ranges (code
/// and data) on the confidential program and any program, one on the
/// plain program, the record ring, both samplers with small buffers (they
/// overflow), binding runtime-instrumentation blocks to every context of
/// both VMs (the confidential ones are refused). Returns each attempt's
/// outcome, which must not depend on the confidential workload either.
///
/// `ring` sizes the record ring first (`RRING_CAP`); a daemon that drains
/// it sized it itself, and a host that resizes it behind the daemon's back
/// only breaks the daemon's drain.
pub fn arm_everything(port: &mut impl Port, ring: Option<u32>, ri_interrupts: bool) -> Vec<bool> {
    let p = SHARED_SLOT;
    let ctrl = |event: u32, irq: u32, program: u32, data: bool| {
        range_ctrl::ENABLE
            | if data { range_ctrl::DATA } else { 0 }
            | event << range_ctrl::EVENT_SHIFT
            | irq
            | program << range_ctrl::PROGRAM_SHIFT
    };
    let range = |i: u32, start: u32, end: u32, threshold: u32, ctrl: u32| {
        vec![
            write32(range_reg(p, i, rg::RANGE_START), start),
            write32(range_reg(p, i, rg::RANGE_END), end),
            write32(range_reg(p, i, rg::RANGE_THRESHOLD), threshold),
            write32(range_reg(p, i, rg::RANGE_CTRL), ctrl),
        ]
    };
    let (count, latency) = (range_ctrl::COUNT_IRQ, range_ctrl::LATENCY_IRQ);
    let (inst, cycles, memory) = (
        range_event::INSTRUCTIONS,
        range_event::CYCLES,
        range_event::MEMORY,
    );
    let whole = (0, u32::MAX);
    let mut attempts: Vec<Vec<RegOp>> = ring
        .map(|cap| vec![write32(rring(p, rg::RRING_CAP), cap)])
        .into_iter()
        .collect();
    attempts.extend([
        // The confidential program: its main loop's instructions, its
        // leaf's latency, its data; any program's data; the plain program.
        range(
            0,
            code_item(0, 0),
            code_item(0, 3),
            500,
            ctrl(inst, count, SECRET_PROGRAM, false),
        ),
        range(
            1,
            code_item(1, 0),
            code_item(1, 1),
            40,
            ctrl(cycles, latency, SECRET_PROGRAM, false),
        ),
        range(2, whole.0, whole.1, 7, ctrl(memory, count, 0, true)),
        range(
            3,
            whole.0,
            whole.1,
            0,
            ctrl(cycles, 0, SECRET_PROGRAM, true),
        ),
        range(
            4,
            code_item(0, 0),
            code_item(0, 2),
            900,
            ctrl(inst, count, WORK_PROGRAM, false),
        ),
        // Both samplers, small buffers that overflow.
        vec![
            write32(samp(p, s::buf(buf_kind::BRANCH, s::BUF_BASE)), 0),
            write32(samp(p, s::buf(buf_kind::BRANCH, s::BUF_CAP)), 32),
            write32(samp(p, s::buf(buf_kind::PC, s::BUF_BASE)), 1 << 16),
            write32(samp(p, s::buf(buf_kind::PC, s::BUF_CAP)), 64),
            write32(samp(p, s::SAMP_CYCLE_PERIOD), 300),
            write32(samp(p, s::SAMP_CYCLE_DITHER), 255),
            write32(samp(p, s::SAMP_BRANCH_PERIOD), 4),
            write32(samp(p, s::SAMP_CTRL), s::samp_ctrl::ALL),
        ],
    ]);
    let mut blocks = 0..RI_BLOCKS;
    for vm in [CC_VM, SHARED_VM] {
        for ctx in contexts_of(port, vm) {
            let b = blocks.next().expect("RI blocks left");
            let intr = if ri_interrupts {
                ri_ctrl::INTR_ENABLE
            } else {
                0
            };
            attempts.push(vec![
                write32(ri::ri(b, ri::RI_CTX), ctx),
                write32(ri::ri(b, ri::RI_SF), 700),
                write32(ri::ri(b, ri::RI_ROA), 0),
                write32(ri::ri(b, ri::RI_RLA), 64 * 32 - 1),
                write32(
                    ri::ri(b, ri::RI_CTRL),
                    ri_ctrl::ENABLE
                        | ri_mode::CYCLE << ri_ctrl::MODE_SHIFT
                        | 1 << ri_ctrl::RGS_SHIFT
                        | ri_ctrl::ABORT
                        | ri_ctrl::WRAP
                        | intr,
                ),
            ]);
        }
    }
    attempts
        .into_iter()
        .map(|mut ops| port.run(&mut ops))
        .collect()
}

/// The armed ranges' `RANGE_COUNT`s of partition [`SHARED_SLOT`].
pub fn range_counts(port: &mut impl Port) -> Vec<u64> {
    (0..rg::RANGES_PER_PARTITION)
        .map(|i| reg64(port, range_reg(SHARED_SLOT, i, rg::RANGE_COUNT)).expect("RANGE_COUNT"))
        .collect()
}
