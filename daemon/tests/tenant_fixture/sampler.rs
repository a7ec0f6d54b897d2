//! The fixture's sampling plane: a [`SamplerDevice`] that records what it
//! is asked to program, and PC batches to route through the plane.

use std::sync::Mutex;

use gpupm_client::DevError;
use gpupm_uapi::layout::{envelope_flags, Envelope};
use gpupm_uapi::sampling::{PcRecord, PC_RECORD_MAGIC};
use gpupm_uapi::tenant::sampling::sample_kind;
use gpupmd::sampling::records::Batch;
use gpupmd::sampling::{SamplerDevice, Settings};
use zerocopy::IntoBytes;

/// Records every programming, in order.
#[derive(Debug, Default)]
pub struct RecordingSampler {
    pub programmed: Mutex<Vec<(u32, Settings)>>,
}

impl SamplerDevice for RecordingSampler {
    fn program(&self, p: u32, settings: &Settings) -> Result<(), DevError> {
        self.programmed.lock().unwrap().push((p, *settings));
        Ok(())
    }
}

/// A PC batch of `partition`: one plaintext slot per `(vm, ctx, ctx_cycle,
/// block)`.
pub fn pc_batch(partition: u32, slots: &[(u32, u32, u64, u16)]) -> Batch {
    let mut bytes = Vec::new();
    for (i, &(vm, ctx, ctx_cycle, block)) in slots.iter().enumerate() {
        let env = Envelope {
            vm,
            flags: envelope_flags::VALID,
            ..Envelope::default()
        };
        let rec = PcRecord {
            magic: PC_RECORD_MAGIC,
            partition: u16::try_from(partition).expect("partition slot"),
            vm,
            ctx,
            seq: i as u64 + 1,
            ctx_cycle,
            block,
            interval: 4096,
            ..PcRecord::default()
        };
        bytes.extend_from_slice(env.as_bytes());
        bytes.extend_from_slice(rec.as_bytes());
        bytes.extend_from_slice(&[0; 16]);
    }
    Batch {
        partition,
        kind: sample_kind::CYCLE,
        slot_size: 96,
        bytes,
        lost: 0,
        lost_by: Vec::new(),
    }
}
