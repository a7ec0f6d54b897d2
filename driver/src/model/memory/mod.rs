//! Device memory: counter blocks and stream rings, and the host-visible
//! memory window through which the host reads them.
//!
//! The device keeps plaintext blocks internally (RCs add into them); every
//! commit re-publishes the touched blocks to their host-visible slots, via
//! the copy engine's encryption for confidential VMs.
//!
//! Blocks have no registers of their own (the VM and context tables give
//! their window offsets); the rings' registers are in [`ring`].

pub mod ring;

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::layout::{
    block_kind, Block, BlockSlot, BLOCK_MAGIC, BLOCK_SLOT_SIZE, CTX_BLOCK_SLOTS,
    CTX_BLOCK_SLOT_BASE, STREAM_REGION, STREAM_RING_SPAN,
};
use zerocopy::{FromZeros, IntoBytes};

use self::ring::{window_range, Ring};
use super::cc::{seal, VmCipher};

/// Why a memory-window access failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum WindowError {
    /// The range is not inside one region of the window.
    #[error("memory-window range {offset:#x}+{len} is outside the block and ring regions")]
    OutOfRange {
        /// Window offset.
        offset: u64,
        /// Length.
        len: usize,
    },
}

/// Device memory.
#[derive(Debug)]
pub struct Memory {
    blocks: Vec<Block>,
    host_blocks: Vec<BlockSlot>,
    free_ctx_slots: std::collections::BTreeSet<u32>,
    /// Host-visible block slots changed since [`Memory::take_written`]
    /// last ran (each once), and their marks: what the node copies into
    /// the commit mirror.
    written: Vec<u32>,
    written_mark: Vec<bool>,
    /// Stream ring per partition slot (index = slot).
    pub rings: Vec<Ring>,
}

/// Total block slots.
const BLOCK_SLOTS: u32 = CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS;

impl Memory {
    /// Memory with `ring_slots` rings, ring `p` with the (capacity,
    /// watermark) `size(p)`.
    pub fn new(ring_slots: u32, size: impl Fn(u32) -> (u32, u32)) -> Self {
        Memory {
            blocks: vec![Block::new_zeroed(); BLOCK_SLOTS as usize],
            host_blocks: vec![BlockSlot::new_zeroed(); BLOCK_SLOTS as usize],
            free_ctx_slots: (CTX_BLOCK_SLOT_BASE..BLOCK_SLOTS).collect(),
            written: Vec::new(),
            written_mark: vec![false; BLOCK_SLOTS as usize],
            rings: (0..ring_slots)
                .map(|p| {
                    let (cap, watermark) = size(p);
                    Ring::new(cap, watermark)
                })
                .collect(),
        }
    }

    /// Initialises block `slot` with a header and zero counters.
    pub fn init_block(
        &mut self,
        slot: u32,
        kind: u16,
        id: u32,
        vm: u32,
        cipher: Option<&mut VmCipher>,
    ) {
        let b = &mut self.blocks[slot as usize];
        *b = Block::new_zeroed();
        b.magic = BLOCK_MAGIC;
        b.kind = kind;
        b.version = gpupm_uapi::ABI_MAJOR;
        b.id = id;
        b.vm = vm;
        self.publish(slot, cipher);
    }

    /// Allocates a context-block slot (lowest free first, for determinism).
    pub fn alloc_ctx_slot(&mut self) -> Option<u32> {
        self.free_ctx_slots.pop_first()
    }

    /// Returns a context-block slot to the pool and clears it.
    pub fn release_ctx_slot(&mut self, slot: u32) {
        self.blocks[slot as usize] = Block::new_zeroed();
        self.host_blocks[slot as usize] = BlockSlot::new_zeroed();
        self.mark_written(slot);
        self.free_ctx_slots.insert(slot);
    }

    fn mark_written(&mut self, slot: u32) {
        if let Some(m) = self.written_mark.get_mut(slot as usize) {
            if !*m {
                *m = true;
                self.written.push(slot);
            }
        }
    }

    /// Appends the block slots whose host-visible bytes changed since the
    /// last call to `out` (each once, in the order first changed) and
    /// forgets them. At most one entry per slot is ever held.
    pub fn take_written(&mut self, out: &mut Vec<u32>) {
        for &slot in &self.written {
            self.written_mark[slot as usize] = false;
        }
        out.append(&mut self.written);
    }

    /// Atomically adds `deltas` into block `slot` and republishes it.
    pub fn add(
        &mut self,
        slot: u32,
        deltas: &[u64; MAX_EVENTS],
        cycle: u64,
        cipher: Option<&mut VmCipher>,
    ) {
        let b = &mut self.blocks[slot as usize];
        for (c, d) in b.counters.iter_mut().zip(deltas) {
            *c += d;
        }
        b.commit_seq += 1;
        b.last_commit_cycle = cycle;
        self.publish(slot, cipher);
    }

    /// Zeroes the counters of every block in use and empties the rings
    /// (device reset); returns the slots the caller must republish with
    /// [`Memory::publish`] (each through its VM's one cipher, so that every
    /// seal advances the real nonce counter).
    pub fn zero_counters(&mut self) -> Vec<u32> {
        let mut in_use = Vec::new();
        for slot in 0..BLOCK_SLOTS {
            let b = &mut self.blocks[slot as usize];
            if b.magic != BLOCK_MAGIC {
                continue;
            }
            b.counters = [0; MAX_EVENTS];
            b.commit_seq = 0;
            b.last_commit_cycle = 0;
            in_use.push(slot);
        }
        for r in &mut self.rings {
            r.clear();
        }
        in_use
    }

    /// The block slots in use that belong to VM `vm` (its VM block and its
    /// contexts'), in slot order.
    pub fn slots_of_vm(&self, vm: u32) -> Vec<u32> {
        (0..BLOCK_SLOTS)
            .filter(|&slot| {
                let b = &self.blocks[slot as usize];
                b.magic == BLOCK_MAGIC && b.kind != block_kind::SYSTEM && b.vm == vm
            })
            .collect()
    }

    /// The plaintext block in `slot` (device-internal view).
    pub fn block(&self, slot: u32) -> &Block {
        &self.blocks[slot as usize]
    }

    /// Copies block `slot` to its host-visible slot, sealed by `cipher`
    /// for a confidential VM's block.
    pub fn publish(&mut self, slot: u32, cipher: Option<&mut VmCipher>) {
        let b = &self.blocks[slot as usize];
        let host = &mut self.host_blocks[slot as usize];
        host.payload.copy_from_slice(b.as_bytes());
        let vm = if b.kind == block_kind::SYSTEM {
            0
        } else {
            b.vm
        };
        seal(
            &mut host.envelope,
            &mut host.payload,
            &mut host.tag,
            vm,
            cipher,
        );
        self.mark_written(slot);
    }

    /// Copies host-visible bytes at window `offset` into `buf`.
    pub fn read_window(&self, offset: u64, buf: &mut [u8]) -> Result<(), WindowError> {
        let len = buf.len();
        let err = WindowError::OutOfRange { offset, len };
        let end = u64::try_from(len)
            .ok()
            .and_then(|l| offset.checked_add(l))
            .ok_or(err.clone())?;
        if end <= u64::from(BLOCK_SLOTS) * BLOCK_SLOT_SIZE {
            let range = window_range(offset, end).ok_or(err.clone())?;
            buf.copy_from_slice(&self.host_blocks.as_bytes()[range]);
            return Ok(());
        }
        let rel = offset.checked_sub(STREAM_REGION).ok_or(err.clone())?;
        let ring = usize::try_from(rel / STREAM_RING_SPAN)
            .ok()
            .and_then(|p| self.rings.get(p))
            .ok_or(err.clone())?;
        ring.read_slots(rel % STREAM_RING_SPAN, buf).ok_or(err)
    }
}
