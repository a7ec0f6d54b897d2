//! Device memory: counter blocks and stream rings, and the host-visible
//! memory window through which the host reads them.
//!
//! The device keeps plaintext blocks internally (RCs add into them); every
//! commit re-publishes the touched blocks to their host-visible slots, via
//! the copy engine's encryption for confidential VMs.

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::layout::{
    block_kind, envelope_flags, Block, BlockSlot, Envelope, StreamRecord, StreamSlot, BLOCK_MAGIC,
    BLOCK_SLOT_SIZE, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE, STREAM_REGION, STREAM_RING_SPAN,
    STREAM_SLOT_SIZE,
};
use zerocopy::{FromZeros, IntoBytes};

use super::cc::VmCipher;

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

/// A stream ring in device memory.
#[derive(Clone, Debug)]
pub struct Ring {
    /// Capacity in records (power of two).
    pub cap: u32,
    /// Next index the device writes (mod 2^32).
    pub head: u32,
    /// Next index the host reads (mod 2^32).
    pub tail: u32,
    /// Records lost to a full ring.
    pub lost: u64,
    /// Watermark in records.
    pub watermark: u32,
    /// Stream sequence: records produced or lost.
    pub seq: u64,
    slots: Vec<StreamSlot>,
}

/// What happened to a record pushed into a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Stored; the ring now holds this many records.
    Stored {
        /// Fill after the push.
        fill: u32,
    },
    /// The ring was full; the record was counted as lost.
    Lost,
}

impl Ring {
    fn new(cap: u32, watermark: u32) -> Self {
        Ring {
            cap,
            head: 0,
            tail: 0,
            lost: 0,
            watermark,
            seq: 0,
            slots: vec![StreamSlot::new_zeroed(); cap as usize],
        }
    }

    /// Records waiting for the host.
    pub fn fill(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Stores `record` (its `seq` is assigned here) unless the ring is full.
    pub fn push(&mut self, mut record: StreamRecord, cipher: Option<&mut VmCipher>) -> Pushed {
        self.seq += 1;
        record.seq = self.seq;
        if self.fill() >= self.cap {
            self.lost += 1;
            return Pushed::Lost;
        }
        let slot = &mut self.slots[(self.head & (self.cap - 1)) as usize];
        slot.payload.copy_from_slice(record.as_bytes());
        seal(
            &mut slot.envelope,
            &mut slot.payload,
            &mut slot.tag,
            record.vm,
            cipher,
        );
        self.head = self.head.wrapping_add(1);
        Pushed::Stored { fill: self.fill() }
    }
}

fn seal(
    envelope: &mut Envelope,
    payload: &mut [u8],
    tag: &mut [u8; 16],
    vm: u32,
    cipher: Option<&mut VmCipher>,
) {
    match cipher {
        Some(c) => (*envelope, *tag) = c.seal(payload),
        None => {
            *envelope = Envelope {
                vm,
                flags: envelope_flags::VALID,
                ..Envelope::default()
            };
            *tag = [0; 16];
        }
    }
}

/// Device memory.
#[derive(Clone, Debug)]
pub struct Memory {
    blocks: Vec<Block>,
    host_blocks: Vec<BlockSlot>,
    free_ctx_slots: std::collections::BTreeSet<u32>,
    /// Stream ring per partition slot (index = slot).
    pub rings: Vec<Ring>,
}

/// Total block slots.
const BLOCK_SLOTS: u32 = CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS;

impl Memory {
    /// Memory with `ring_slots` rings of `cap` records.
    pub fn new(ring_slots: u32, cap: u32, watermark: u32) -> Self {
        Memory {
            blocks: vec![Block::new_zeroed(); BLOCK_SLOTS as usize],
            host_blocks: vec![BlockSlot::new_zeroed(); BLOCK_SLOTS as usize],
            free_ctx_slots: (CTX_BLOCK_SLOT_BASE..BLOCK_SLOTS).collect(),
            rings: (0..ring_slots).map(|_| Ring::new(cap, watermark)).collect(),
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
        self.free_ctx_slots.insert(slot);
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

    /// Zeroes the counters of every block in use (device reset).
    pub fn zero_counters(&mut self, mut cipher_of: impl FnMut(u32) -> Option<VmCipher>) {
        for slot in 0..BLOCK_SLOTS {
            let b = &mut self.blocks[slot as usize];
            if b.magic != BLOCK_MAGIC {
                continue;
            }
            b.counters = [0; MAX_EVENTS];
            b.commit_seq = 0;
            b.last_commit_cycle = 0;
            let vm = b.vm;
            let mut cipher = cipher_of(vm);
            self.publish(slot, cipher.as_mut());
        }
        for r in &mut self.rings {
            *r = Ring::new(r.cap, r.watermark);
        }
    }

    /// The plaintext block in `slot` (device-internal view).
    pub fn block(&self, slot: u32) -> &Block {
        &self.blocks[slot as usize]
    }

    fn publish(&mut self, slot: u32, cipher: Option<&mut VmCipher>) {
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
    }

    /// Copies host-visible bytes at window `offset` into `buf`.
    pub fn read_window(&self, offset: u64, buf: &mut [u8]) -> Result<(), WindowError> {
        let len = buf.len();
        let err = WindowError::OutOfRange { offset, len };
        let end = offset.checked_add(len as u64).ok_or(err.clone())?;
        if end <= u64::from(BLOCK_SLOTS) * BLOCK_SLOT_SIZE {
            let bytes = self.host_blocks.as_bytes();
            buf.copy_from_slice(&bytes[offset as usize..end as usize]);
            return Ok(());
        }
        let rel = offset.checked_sub(STREAM_REGION).ok_or(err.clone())?;
        let p = rel / STREAM_RING_SPAN;
        let within = rel % STREAM_RING_SPAN;
        let ring = self.rings.get(p as usize).ok_or(err.clone())?;
        let ring_bytes = ring.slots.as_bytes();
        let stop = within + len as u64;
        if stop > u64::from(ring.cap) * STREAM_SLOT_SIZE {
            return Err(err);
        }
        buf.copy_from_slice(&ring_bytes[within as usize..stop as usize]);
        Ok(())
    }
}
