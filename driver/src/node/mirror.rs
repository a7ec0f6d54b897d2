//! The commit mirror ([`gpupm_uapi::mirror`]): after every periodic commit
//! the node copies the block slots whose window bytes changed since the
//! previous one into a privileged shared-memory file and rings its
//! doorbell — the emulated form of a GPU writing its performance-monitor
//! output to host memory by DMA — so a host that follows commits reads
//! them there instead of parking a `GPUPM_IOC_WAIT_COMMIT` per commit.
//!
//! Publishing runs where the node already answers commit waits
//! ([`super::device::NodeCore::deliver`], with the device lock held, so the
//! window cannot change while it is copied): one register read per
//! delivery, and per commit the changed slots only. A periodic count that
//! went down is a device reset: the generation changes (the reset
//! republished every block in use, so they are all copied).

use std::path::Path;

use gpupm_client::mirror::MirrorWriter;
use gpupm_uapi::ioctl::IOCTL_STRUCT_VERSION;
use gpupm_uapi::layout::{block_slot_offset, BlockSlot};
use gpupm_uapi::mirror::MirrorInfo;
use gpupm_uapi::regs::CYCLE;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::backend::DeviceBackend;
use super::commit_wait;
use super::error::{malformed, NodeError};
use super::ioctl::IoctlReply;

/// Directory of the mirror files of the CUSE device (a FUSE node's is
/// next to its node directory).
pub const DEFAULT_MIRROR_DIR: &str = "/run/gpupm/mirror";

/// The node's mirror and what it needs between commits.
#[derive(Debug)]
pub struct Mirror {
    writer: MirrorWriter,
    /// `TRIG_COUNT_PERIODIC` at the last publication.
    last_seq: u64,
    /// Device resets at the last publication.
    last_resets: u64,
    /// Reused list of changed slots (no allocation per commit).
    slots: Vec<u32>,
    block: BlockSlot,
    /// The last publication failed (logged once per run of failures:
    /// publishing is tried at every delivery, thousands per second).
    failing: bool,
}

impl Mirror {
    /// Creates the mirror files in `dir` with `generation` (see
    /// [`MirrorWriter::create`] for the checks).
    pub fn create(dir: &Path, generation: u64) -> std::io::Result<Mirror> {
        Ok(Mirror {
            writer: MirrorWriter::create(dir, generation)?,
            // No count matches: the first delivery publishes every block
            // initialised so far.
            last_seq: u64::MAX,
            last_resets: 0,
            slots: Vec::new(),
            block: BlockSlot::new_zeroed(),
            failing: false,
        })
    }

    /// The mirror file's path.
    pub fn path(&self) -> &Path {
        self.writer.path()
    }

    /// Publishes a commit if the periodic count moved since the last one;
    /// logs the first failure of a run and the recovery after it.
    pub fn publish(&mut self, backend: &mut dyn DeviceBackend) {
        match self.try_publish(backend) {
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!("commit mirror updated again");
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!(error = %e, "commit mirror not updated");
            }
            Err(_) => {}
        }
    }

    fn try_publish(&mut self, backend: &mut dyn DeviceBackend) -> Result<(), NodeError> {
        let seq = commit_wait::sequence(backend)?;
        let resets = backend.resets();
        if seq == self.last_seq && resets == self.last_resets {
            return Ok(());
        }
        let cycle = backend.read_reg(CYCLE, 8)?;
        let reset = resets != self.last_resets;
        (self.last_seq, self.last_resets) = (seq, resets);
        self.slots.clear();
        backend.take_written_block_slots(&mut self.slots);
        let next_generation = self.writer.generation().wrapping_add(1);
        let mut commit = self.writer.begin();
        if reset {
            commit.set_generation(next_generation);
        }
        for &slot in &self.slots {
            backend.read_mem(block_slot_offset(slot), self.block.as_mut_bytes())?;
            commit.slot(slot, &self.block);
        }
        commit.finish(seq, cycle);
        Ok(())
    }

    /// Answers `GPUPM_IOC_MIRROR_INFO`.
    pub fn info(mirror: Option<&Mirror>, input: &[u8]) -> Result<IoctlReply, NodeError> {
        let arg = MirrorInfo::read_from_bytes(input).map_err(|_| {
            malformed(format!(
                "mirror info argument of {} bytes, expected {}",
                input.len(),
                size_of::<MirrorInfo>()
            ))
        })?;
        if arg.version != IOCTL_STRUCT_VERSION || arg.flags != 0 {
            return Err(malformed("mirror info version or flags"));
        }
        let info = mirror.ok_or(NodeError::NoMirror)?.writer.info();
        Ok(IoctlReply {
            result: 0,
            data: info.as_bytes().to_vec(),
        })
    }
}
