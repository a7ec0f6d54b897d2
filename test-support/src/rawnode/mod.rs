//! Host software through the node only, with raw system calls on a
//! `File` (what the node tests check is the node itself, not a client): ioctl wrappers, the context-switch
//! handshake as two `GPUPM_IOC_REG_BATCH` calls (the batches of
//! `gpupm_driver::host::handshake`), interrupt servicing, flushing, block
//! reads from the memory window, a digest of host-visible state, and the
//! exact-conservation check against `GPUPM_IOC_LEDGER`.

mod ioctl;

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use gpupm_driver::model::LedgerTotals;
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::{
    ledger_flags, ledger_scope, reg_op, Advance, Identity, LedgerQuery, RegBatch, RegOp,
    GPUPM_IOC_ADVANCE, GPUPM_IOC_IDENTITY, GPUPM_IOC_LEDGER, GPUPM_IOC_REG_BATCH,
    IOCTL_STRUCT_VERSION, MAX_BATCH_OPS,
};
use gpupm_uapi::layout::{
    self, block_kind, envelope_flags, Block, BlockSlot, BLOCK_SLOT_SIZE, MEM_WINDOW_OFFSET,
};
use gpupm_uapi::regs::{self as r, ctx_state, hs_state, part_ctrl, part_status, rc_cmd, trig_cmd};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

pub use self::ioctl::ioctl;

/// Errno of an I/O error (0 if none).
pub fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// 32-bit register read.
pub fn rd32(f: &File, offset: u64) -> io::Result<u32> {
    let mut b = [0u8; 4];
    let n = f.read_at(&mut b, offset)?;
    assert_eq!(n, 4, "short register read");
    Ok(u32::from_le_bytes(b))
}

/// 64-bit register read (one 8-byte access).
pub fn rd64(f: &File, offset: u64) -> io::Result<u64> {
    let mut b = [0u8; 8];
    let n = f.read_at(&mut b, offset)?;
    assert_eq!(n, 8, "short register read");
    Ok(u64::from_le_bytes(b))
}

/// 32-bit register write.
pub fn wr32(f: &File, offset: u64, value: u32) -> io::Result<()> {
    let n = f.write_at(&value.to_le_bytes(), offset)?;
    assert_eq!(n, 4, "short register write");
    Ok(())
}

/// Decodes interrupt records returned by `read()`.
pub fn records(bytes: &[u8]) -> Vec<InterruptRecord> {
    assert_eq!(bytes.len() % 32, 0, "read returned a partial record");
    bytes
        .chunks_exact(32)
        .map(|c| InterruptRecord::read_from_bytes(c).expect("32-byte record"))
        .collect()
}

/// Names of `pid`'s threads, sorted, once `loops` of them are fuser event
/// loops (`fuser-N`) or after `deadline`. A new thread names itself only
/// once it runs, so right after READY a loop may still carry its parent's
/// name.
pub fn thread_names_once_loops_run(pid: u32, loops: usize, deadline: Duration) -> Vec<String> {
    let end = Instant::now() + deadline;
    loop {
        let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks
                    .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                    .map(|n| n.trim().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let running = names.iter().filter(|n| n.starts_with("fuser-")).count();
        if running >= loops || Instant::now() >= end {
            return names;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A read op.
pub fn read_op(offset: u64, width: u32) -> RegOp {
    RegOp {
        offset,
        value: 0,
        op: reg_op::READ,
        width,
    }
}

/// A 4-byte write op.
pub fn write_op(offset: u64, value: u64) -> RegOp {
    RegOp {
        offset,
        value,
        op: reg_op::WRITE,
        width: 4,
    }
}

/// A batch argument holding `ops`.
pub fn batch_of(ops: &[RegOp]) -> RegBatch {
    let mut b = RegBatch::new_zeroed();
    b.version = IOCTL_STRUCT_VERSION;
    b.count = u32::try_from(ops.len()).expect("op count fits");
    b.ops[..ops.len()].copy_from_slice(ops);
    b
}

/// Runs `ops` as one `GPUPM_IOC_REG_BATCH`; read values land in `ops`.
pub fn batch(card: &File, ops: &mut [RegOp]) -> io::Result<()> {
    let mut b = batch_of(ops);
    ioctl(card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes())?;
    assert_eq!(
        b.failed_index, b.count,
        "a successful batch reports failed_index = count"
    );
    ops.copy_from_slice(&b.ops[..ops.len()]);
    Ok(())
}

/// `GPUPM_IOC_ADVANCE` by `cycles`; returns the new cycle.
pub fn advance(card: &File, cycles: u64) -> io::Result<u64> {
    let mut a = Advance {
        version: IOCTL_STRUCT_VERSION,
        flags: 0,
        cycles,
        now: 0,
    };
    ioctl(card, GPUPM_IOC_ADVANCE, a.as_mut_bytes())?;
    Ok(a.now)
}

/// `GPUPM_IOC_IDENTITY`.
pub fn identity(card: &File) -> Identity {
    let mut id = Identity {
        version: IOCTL_STRUCT_VERSION,
        ..Default::default()
    };
    ioctl(card, GPUPM_IOC_IDENTITY, id.as_mut_bytes()).expect("identity ioctl");
    id
}

/// `GPUPM_IOC_LEDGER` of one scope, as answered (sealed for a
/// confidential VM's scopes).
pub fn ledger(card: &File, scope: u32, id: u32) -> io::Result<LedgerQuery> {
    let mut q = LedgerQuery::new_zeroed();
    q.version = IOCTL_STRUCT_VERSION;
    q.scope = scope;
    q.id = id;
    ioctl(card, GPUPM_IOC_LEDGER, q.as_mut_bytes())?;
    Ok(q)
}

/// [`ledger`] opened with `key` when the answer is sealed (the tenant's
/// view of a confidential VM's ledger).
pub fn ledger_opened(
    card: &File,
    scope: u32,
    id: u32,
    key: Option<&[u8; 32]>,
) -> io::Result<LedgerQuery> {
    let mut q = ledger(card, scope, id)?;
    let sealed = q.flags & ledger_flags::SEALED != 0;
    assert_eq!(
        sealed,
        key.is_some(),
        "sealing of the ledger of {scope}/{id}"
    );
    if let Some(k) = key {
        gpupm_driver::model::cc::open_ledger(&mut q, k).expect("ledger opens under the VM key");
    }
    Ok(q)
}

/// What a block must hold after a full flush, per the ledger:
/// `(generated - remainder) / scale - masked`.
pub fn expected(q: &LedgerQuery) -> [u64; MAX_EVENTS] {
    LedgerTotals {
        generated: q.generated,
        masked: q.masked,
        remainder: q.remainder,
    }
    .expected_committed()
}

/// Every interrupt record available now on a non-blocking handle.
pub fn drain_records(card: &mut File) -> Vec<InterruptRecord> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 32 * 256];
    loop {
        match card.read(&mut buf) {
            Ok(n) => out.extend(records(&buf[..n])),
            Err(e) if errno(&e) == libc::EAGAIN => return out,
            Err(e) => panic!("interrupt read: {e}"),
        }
    }
}

/// Configured GPU-slice partition slots (1..), from `PART_STATUS`.
pub fn partitions(card: &File) -> Vec<u32> {
    (1..r::MAX_PARTITION_SLOTS)
        .filter(|&p| rd32(card, r::part(p, r::PART_STATUS)).unwrap() & part_status::CONFIGURED != 0)
        .collect()
}

/// Runs the switch handshake on partition `p` through two batches, as
/// `gpupm_driver::host::handshake` does in process. Fails (changing
/// nothing) when no switch is pending there.
pub fn handshake(card: &File, p: u32) -> io::Result<()> {
    let all = trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER | trig_cmd::FLUSH_REQ;
    let mut first = [
        read_op(r::part(p, r::PART_NEXT_VM), 4),
        read_op(r::part(p, r::PART_NEXT_CTX), 4),
        write_op(r::part(p, r::PART_CTRL), u64::from(part_ctrl::CTX_PAUSE)),
        write_op(r::part(p, r::PART_CTRL), u64::from(part_ctrl::ALL)),
        write_op(r::TRIG_TARGET, 1 << p),
        write_op(r::TRIG_CMD, u64::from(all)),
        read_op(r::part(p, r::PART_CCU_ACKED), 8),
        read_op(r::part(p, r::PART_CCU_ASSIGNED), 8),
    ];
    batch(card, &mut first)?;
    let (next_vm, next_ctx) = (first[0].value, first[1].value);
    wait_for_acks(card, p, first[6].value, first[7].value)?;
    let mut second = [
        write_op(r::part(p, r::PART_RC_BIND_VM), next_vm),
        write_op(r::part(p, r::PART_RC_BIND_CTX), next_ctx),
        write_op(
            r::part(p, r::PART_RC_CMD),
            u64::from(rc_cmd::COMMIT | rc_cmd::REPOINT),
        ),
        write_op(r::part(p, r::PART_CTRL), 0),
    ];
    batch(card, &mut second)
}

/// Reads of `PART_CCU_ACKED` before [`wait_for_acks`] gives up.
pub const ACK_POLLS: u32 = 1_000;

/// Step 5 through the node: polls `PART_CCU_ACKED` of partition `p` (last
/// read `acked`) until every CCU in `assigned` acked, advancing a step
/// clock by the largest ack latency between polls (a real-time clock moves
/// by itself); at most [`ACK_POLLS`] polls, then `TimedOut`.
pub fn wait_for_acks(card: &File, p: u32, mut acked: u64, assigned: u64) -> io::Result<()> {
    let step = rd32(card, r::DEVICE_STATUS)? & r::device_status::STEP_CLOCK != 0;
    for _ in 0..ACK_POLLS {
        if acked & assigned == assigned {
            return Ok(());
        }
        if step {
            advance(card, u64::from(r::FLUSH_ACK_MAX_CYCLES))?;
        }
        acked = rd64(card, r::part(p, r::PART_CCU_ACKED))?;
    }
    if acked & assigned == assigned {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("partition {p}: flush acks {acked:#x} of {assigned:#x} after {ACK_POLLS} polls"),
    ))
}

/// What servicing has seen so far.
#[derive(Debug, Default)]
pub struct Tally {
    /// Handshakes completed through the node.
    pub handshakes: u64,
    /// `SWITCH_REQUESTED` records read.
    pub requests: u64,
    /// `SWITCH_FALLBACK` records read.
    pub fallbacks: u64,
    /// Contexts announced by `CTX_CREATED`.
    pub created: BTreeSet<u32>,
    /// Contexts announced by `CTX_DESTROYED`.
    pub destroyed: BTreeSet<u32>,
    /// Next expected record seq (gaps are failures here).
    pub next_seq: Option<u64>,
}

impl Tally {
    /// Accounts for `recs` (without acting on them).
    pub fn note(&mut self, recs: &[InterruptRecord]) {
        for rec in recs {
            if let Some(want) = self.next_seq {
                assert_eq!(rec.seq, want, "interrupt records were lost");
            }
            self.next_seq = Some(rec.seq + 1);
            match rec.source {
                source::SWITCH_REQUESTED => self.requests += 1,
                source::SWITCH_FALLBACK => self.fallbacks += 1,
                source::CTX_CREATED => {
                    self.created.insert(rec.arg);
                }
                source::CTX_DESTROYED => {
                    self.destroyed.insert(rec.arg);
                }
                _ => {}
            }
        }
    }
}

/// Services every record available on `card` (non-blocking) like the
/// daemon: handshakes requested switches (each must succeed), drains
/// stream rings at their watermark, acknowledges what it handled.
/// Returns the number of records read.
pub fn service(card: &mut File, tally: &mut Tally) -> usize {
    let mut total = 0;
    loop {
        let recs = drain_records(card);
        if recs.is_empty() {
            return total;
        }
        total += recs.len();
        tally.note(&recs);
        let mut handled = 0;
        for rec in &recs {
            handled |= rec.source;
            match rec.source {
                source::SWITCH_REQUESTED => {
                    handshake(card, rec.partition).unwrap_or_else(|e| {
                        panic!(
                            "handshake on partition {} (record {rec:?}): {e}",
                            rec.partition
                        )
                    });
                    tally.handshakes += 1;
                }
                source::STREAM_WATERMARK | source::STREAM_OVERFLOW => {
                    let head = rd32(card, r::part(rec.partition, r::PART_STREAM_HEAD)).unwrap();
                    wr32(card, r::part(rec.partition, r::PART_STREAM_TAIL), head).unwrap();
                }
                _ => {}
            }
        }
        wr32(card, r::INTR_ACK, handled).unwrap();
    }
}

/// Handshakes switches already pending (requested before this handle was
/// opened, e.g. at cycle 0); returns how many.
pub fn service_pending(card: &File) -> u64 {
    let mut n = 0;
    for p in partitions(card) {
        let status = rd32(card, r::part(p, r::PART_STATUS)).unwrap();
        if status & part_status::STATE_MASK == hs_state::REQUESTED {
            handshake(card, p).expect("handshake of a pending switch");
            n += 1;
        }
    }
    n
}

/// Flushes ULC partials, CCU banks and RC commits into the blocks on every
/// configured channel (system included).
pub fn flush_all(card: &File) {
    let mask = partitions(card).iter().fold(1u32, |m, p| m | 1 << p);
    wr32(card, r::TRIG_TARGET, mask).unwrap();
    wr32(card, r::TRIG_CMD, trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER).unwrap();
}

/// The block slot at window offset `offset`, decrypted with `key` when the
/// envelope says it is encrypted.
pub fn read_block(card: &File, offset: u64, key: Option<&[u8; 32]>) -> Block {
    let mut buf = vec![0u8; usize::try_from(BLOCK_SLOT_SIZE).unwrap()];
    let n = card
        .read_at(&mut buf, MEM_WINDOW_OFFSET + offset)
        .expect("window read");
    assert_eq!(n, buf.len(), "short window read");
    let mut slot = BlockSlot::read_from_bytes(&buf).unwrap();
    let encrypted = slot.envelope.flags & envelope_flags::ENCRYPTED != 0;
    assert_eq!(
        encrypted,
        key.is_some(),
        "encryption of the block at {offset:#x}"
    );
    if let Some(k) = key {
        gpupm_driver::model::cc::open(k, &slot.envelope, &mut slot.payload, &slot.tag)
            .expect("block decrypts under the VM key");
    }
    Block::read_from_bytes(&slot.payload).unwrap()
}

/// Contexts that exist (active or destroyed, not released) among ids
/// `1..=max_id`: (id, vm, state), read with batched register reads.
pub fn contexts(card: &File, max_id: u32) -> Vec<(u32, u32, u32)> {
    let ids: Vec<u32> = (1..=max_id).collect();
    let mut out = Vec::new();
    for chunk in ids.chunks(MAX_BATCH_OPS / 2) {
        let mut ops: Vec<RegOp> = chunk
            .iter()
            .flat_map(|&c| {
                [
                    read_op(r::ctx(c, r::CTX_STATE), 4),
                    read_op(r::ctx(c, r::CTX_VM), 4),
                ]
            })
            .collect();
        batch(card, &mut ops).expect("context table batch");
        for (&c, pair) in chunk.iter().zip(ops.chunks(2)) {
            let state = u32::try_from(pair[0].value).expect("32-bit register");
            let vm = u32::try_from(pair[1].value).expect("32-bit register");
            if state != ctx_state::FREE {
                out.push((c, vm, state));
            }
        }
    }
    out
}

/// Sum of all counters.
pub fn total(counters: &[u64; MAX_EVENTS]) -> u64 {
    counters.iter().sum()
}

/// What the conservation check compared.
#[derive(Debug, Default)]
pub struct Conservation {
    /// Context blocks checked.
    pub contexts: usize,
    /// Sum of the system block's counters.
    pub system_total: u64,
}

/// Asserts every context block, every VM block (decrypting confidential
/// ones with `key_of`) and the system block, read from the memory window,
/// equal what `GPUPM_IOC_LEDGER` says they must hold. Call after
/// [`flush_all`].
pub fn assert_conserved(
    card: &File,
    vms: &[u32],
    max_ctx: u32,
    key_of: impl Fn(u32) -> Option<[u8; 32]>,
) -> Conservation {
    let mut out = Conservation::default();
    for (id, vm, state) in contexts(card, max_ctx) {
        assert!(state == ctx_state::ACTIVE || state == ctx_state::DESTROYED);
        let key = key_of(vm);
        let want = expected(&ledger_opened(card, ledger_scope::CONTEXT, id, key.as_ref()).unwrap());
        let off = rd64(card, r::ctx(id, r::CTX_BLOCK)).unwrap();
        let block = read_block(card, off, key_of(vm).as_ref());
        assert_eq!(
            (block.magic, block.kind, block.id, block.vm),
            (layout::BLOCK_MAGIC, block_kind::CONTEXT, id, vm)
        );
        assert_eq!(
            block.counters, want,
            "context {id} (vm {vm}) block != ledger"
        );
        out.contexts += 1;
    }
    for &vm in vms {
        let key = key_of(vm);
        let want = expected(&ledger_opened(card, ledger_scope::VM, vm, key.as_ref()).unwrap());
        let off = rd64(card, r::vm(vm, r::VM_BLOCK)).unwrap();
        let block = read_block(card, off, key_of(vm).as_ref());
        assert_eq!((block.kind, block.id), (block_kind::VM, vm));
        assert_eq!(block.counters, want, "VM {vm} block != ledger");
        assert!(total(&block.counters) > 0, "VM {vm} counted nothing");
    }
    let want = expected(&ledger(card, ledger_scope::SYSTEM, 0).unwrap());
    let system = read_block(
        card,
        layout::block_slot_offset(layout::SYSTEM_BLOCK_SLOT),
        None,
    );
    assert_eq!(system.kind, block_kind::SYSTEM);
    assert_eq!(system.counters, want, "system block != ledger");
    assert_eq!(
        rd64(card, r::CCU_WRAPS).unwrap(),
        0,
        "a CCU counter wrapped"
    );
    out.system_total = total(&system.counters);
    out
}

/// Everything host-visible that a request could change: every register of
/// the global, partition, CCU and VM ranges and of the first 64 contexts
/// (value or errno), and the block slots of the memory window.
pub fn digest(card: &File) -> Vec<u8> {
    let mut out = Vec::new();
    let ranges = [
        (0, r::OOB_MBOX_ARG),
        (r::OOB_MBOX_ARG + r::OOB_MBOX_DELTA, 0x600),
        (r::PART_BASE, r::CCU_BASE),
        (r::CCU_BASE, r::VM_BASE),
        (
            r::VM_BASE,
            r::VM_BASE + u64::from(r::MAX_VMS) * r::VM_STRIDE,
        ),
        (r::CTX_BASE, r::ctx(64, 0)),
    ];
    for (start, end) in ranges {
        for off in (start..end).step_by(4) {
            let v = rd32(card, off).map_err(|e| errno(&e));
            out.extend_from_slice(format!("{off:x}={v:?};").as_bytes());
        }
    }
    let blocks = u64::from(layout::CTX_BLOCK_SLOT_BASE + 64) * BLOCK_SLOT_SIZE;
    let mut buf = vec![0u8; usize::try_from(blocks).unwrap()];
    card.read_at(&mut buf, MEM_WINDOW_OFFSET)
        .expect("window read");
    out.extend_from_slice(&buf);
    out
}
