//! Drained sample slots, as routing sees them: which VM and context each
//! belongs to, its cycle, and the bytes a session receives.

use gpupm_uapi::layout::{envelope_flags, Envelope};
use gpupm_uapi::sampling::{BranchStackRecord, PcRecord, BRANCH_RECORD_MAGIC, PC_RECORD_MAGIC};
use gpupm_uapi::tenant::sampling::{sample_flags, sample_kind};
use zerocopy::FromBytes;

use super::{LostScope, Outgoing};

/// Slots drained from one buffer of one partition.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// Partition slot.
    pub partition: u32,
    /// One `sample_kind` bit.
    pub kind: u16,
    /// Bytes of one slot.
    pub slot_size: usize,
    /// The slots, back to back.
    pub bytes: Vec<u8>,
    /// Records the device lost to a full buffer since the previous drain.
    pub lost: u64,
    /// Of them, per watched scope (`SamplerDevice::watch_lost`).
    pub lost_by: Vec<(LostScope, u64)>,
    /// The device's drain epoch when the slots were read
    /// ([`super::SamplerDevice::cut`]): a session receives only batches
    /// of the epoch its open cut, or later.
    pub epoch: u64,
}

/// One slot, parsed.
#[derive(Clone, Copy, Debug)]
pub struct Parsed<'a> {
    /// The envelope's VM.
    pub vm: u32,
    /// Context (0 when sealed).
    pub ctx: u32,
    /// Context cycle (PC records; 0 otherwise).
    pub ctx_cycle: u64,
    /// Whether the payload is ciphertext.
    pub sealed: bool,
    /// What a session receives: the record, or the whole sealed slot.
    pub payload: &'a [u8],
}

impl<'a> Parsed<'a> {
    /// The record as handed to a sink.
    pub fn outgoing(&self, kind: u16) -> Outgoing<'a> {
        Outgoing {
            kind,
            flags: if self.sealed { sample_flags::SEALED } else { 0 },
            payload: self.payload,
        }
    }
}

const ENVELOPE: usize = size_of::<Envelope>();

impl Batch {
    /// Records of `scope` the device lost since the previous drain.
    pub fn lost_of(&self, scope: LostScope) -> u64 {
        self.lost_by
            .iter()
            .filter(|(s, _)| *s == scope)
            .map(|(_, n)| n)
            .sum()
    }

    /// The valid slots of the batch (empty or corrupt ones skipped).
    pub fn records(&self) -> impl Iterator<Item = Parsed<'_>> {
        let kind = self.kind;
        self.bytes
            .chunks_exact(self.slot_size.max(1))
            .filter_map(move |slot| parse(kind, slot))
    }
}

/// Parses one slot of a buffer of `kind`.
pub fn parse(kind: u16, slot: &[u8]) -> Option<Parsed<'_>> {
    let (env, rest) = Envelope::read_from_prefix(slot).ok()?;
    if env.flags & envelope_flags::VALID == 0 {
        return None;
    }
    if env.flags & envelope_flags::ENCRYPTED != 0 {
        return Some(Parsed {
            vm: env.vm,
            ctx: 0,
            ctx_cycle: 0,
            sealed: true,
            payload: slot,
        });
    }
    let (vm, ctx, ctx_cycle, len) = match kind {
        sample_kind::CYCLE => {
            let (r, _) = PcRecord::read_from_prefix(rest).ok()?;
            if r.magic != PC_RECORD_MAGIC {
                return None;
            }
            (r.vm, r.ctx, r.ctx_cycle, size_of::<PcRecord>())
        }
        sample_kind::BRANCH_STACK => {
            let (r, _) = BranchStackRecord::read_from_prefix(rest).ok()?;
            if r.magic != BRANCH_RECORD_MAGIC {
                return None;
            }
            (r.vm, r.ctx, 0, size_of::<BranchStackRecord>())
        }
        _ => return None,
    };
    Some(Parsed {
        vm,
        ctx,
        ctx_cycle,
        sealed: false,
        payload: &slot[ENVELOPE..ENVELOPE + len],
    })
}
