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
//!
//! At every publication the stream records each ring received since the
//! previous one are copied into the mirror's ring area (ABI 1.10) and the
//! ring's head published after them. A reset is published in the same
//! device-lock hold as the request that made it ([`Mirror::after_request`]),
//! so no register read can show a reset the mirror does not: the ring
//! heads restart at 0 with the new generation (`gpupm_uapi::mirror`, "Its
//! ordering").

use std::path::Path;

use gpupm_client::mirror::{MirrorDirs, MirrorWriter, RingLayout};
use gpupm_uapi::ioctl::IOCTL_STRUCT_VERSION;
use gpupm_uapi::layout::{block_slot_offset, BlockSlot, StreamSlot, STREAM_SLOT_SIZE};
use gpupm_uapi::mirror::MirrorInfo;
use gpupm_uapi::regs::{self as r, CYCLE, MAX_PARTITION_SLOTS};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::backend::DeviceBackend;
use super::commit_wait;
use super::error::{malformed, NodeError};
use super::ioctl::IoctlReply;

/// Directory of the mirror files of the CUSE device (a FUSE node's is
/// next to its node directory).
pub const DEFAULT_MIRROR_DIR: &str = "/run/gpupm/mirror";

/// Stream slots one window read of a publication copies (38 KiB).
const RECORDS_PER_READ: u32 = 64;

/// The records a publication copies when the mirror holds ring indices
/// below `published` and the device's head is `head`: `(first, count)`.
/// More than `cap` since the last publication (records the host drained
/// through the window meanwhile) leaves only the newest `cap` in the
/// device's ring: the older slots were overwritten.
pub fn records_to_copy(published: u32, head: u32, cap: u32) -> (u32, u32) {
    let n = head.wrapping_sub(published);
    if n > cap {
        (head.wrapping_sub(cap), cap)
    } else {
        (published, n)
    }
}

/// Every partition slot's ring as `backend` lays it out (a ring whose
/// registers cannot be read is not mirrored).
pub fn ring_layouts(backend: &mut dyn DeviceBackend) -> Vec<RingLayout> {
    (0..MAX_PARTITION_SLOTS)
        .map(|p| {
            let cap = backend.read_reg(r::part(p, r::PART_STREAM_CAP), 4);
            let base = backend.read_reg(r::part(p, r::PART_STREAM_BASE), 8);
            match (cap, base) {
                (Ok(cap), Ok(window_base)) => RingLayout {
                    cap: u32::try_from(cap).unwrap_or(0),
                    window_base,
                },
                _ => RingLayout::default(),
            }
        })
        .collect()
}

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
    /// Per ring: its layout and the device head the mirror holds records
    /// up to.
    rings: Vec<(RingLayout, u32)>,
    /// Reused window-read buffer of [`RECORDS_PER_READ`] stream slots.
    records: Vec<u8>,
    /// The last publication failed (logged once per run of failures:
    /// publishing is tried at every delivery, thousands per second).
    failing: bool,
}

impl Mirror {
    /// Creates the mirror files in `dirs` with `generation` and a ring
    /// area for `rings` (see [`MirrorWriter::create_in`] for the checks).
    pub fn create(
        dirs: MirrorDirs<'_>,
        generation: u64,
        rings: &[RingLayout],
    ) -> std::io::Result<Mirror> {
        Ok(Mirror {
            writer: MirrorWriter::create_in(dirs, generation, rings)?,
            rings: rings.iter().map(|&l| (l, 0)).collect(),
            records: vec![0; RECORDS_PER_READ as usize * size_of::<StreamSlot>()],
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

    /// Publishes now if the request just served reset the device: called
    /// with the device lock still held after every request, so that the
    /// new generation and the restarted ring heads are in the mirror
    /// before any register read shows the reset.
    pub fn after_request(&mut self, backend: &mut dyn DeviceBackend) {
        if backend.resets() != self.last_resets {
            self.publish(backend);
        }
    }

    fn try_publish(&mut self, backend: &mut dyn DeviceBackend) -> Result<(), NodeError> {
        let seq = commit_wait::sequence(backend)?;
        let resets = backend.resets();
        if seq != self.last_seq || resets != self.last_resets {
            self.publish_commit(backend, seq, resets)?;
        }
        self.publish_rings(backend)
    }

    /// The block slots a periodic commit (or a reset) changed, under the
    /// sequence lock.
    fn publish_commit(
        &mut self,
        backend: &mut dyn DeviceBackend,
        seq: u64,
        resets: u64,
    ) -> Result<(), NodeError> {
        let cycle = backend.read_reg(CYCLE, 8)?;
        let reset = resets != self.last_resets;
        (self.last_seq, self.last_resets) = (seq, resets);
        self.slots.clear();
        backend.take_written_block_slots(&mut self.slots);
        let next_generation = self.writer.generation().wrapping_add(1);
        let mut commit = self.writer.begin();
        if reset {
            // The device's rings restarted: so do the mirror's heads.
            commit.set_generation(next_generation);
            for (_, head) in &mut self.rings {
                *head = 0;
            }
        }
        for &slot in &self.slots {
            backend.read_mem(block_slot_offset(slot), self.block.as_mut_bytes())?;
            commit.slot(slot, &self.block);
        }
        commit.finish(seq, cycle);
        Ok(())
    }

    /// Copies each ring's records since the last publication and publishes
    /// its head after them; no allocation (the read buffer is the
    /// mirror's).
    fn publish_rings(&mut self, backend: &mut dyn DeviceBackend) -> Result<(), NodeError> {
        for (ring, (layout, published)) in (0u32..).zip(self.rings.iter_mut()) {
            if layout.cap == 0 {
                continue;
            }
            let head = u32::try_from(backend.read_reg(r::part(ring, r::PART_STREAM_HEAD), 4)?)
                .unwrap_or(0);
            if head == *published {
                continue;
            }
            let (first, n) = records_to_copy(*published, head, layout.cap);
            let mut done = 0u32;
            while done < n {
                let index = first.wrapping_add(done);
                let at = index % layout.cap;
                let count = (n - done).min(layout.cap - at).min(RECORDS_PER_READ);
                let bytes = &mut self.records[..count as usize * size_of::<StreamSlot>()];
                backend.read_mem(layout.window_base + u64::from(at) * STREAM_SLOT_SIZE, bytes)?;
                self.writer.copy_ring_records(ring, index, bytes);
                done += count;
            }
            self.writer.publish_ring_head(ring, head);
            *published = head;
        }
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

#[cfg(test)]
mod tests {
    use super::records_to_copy;

    #[test]
    fn a_publication_copies_the_records_since_the_last_and_at_most_a_ring() {
        assert_eq!(records_to_copy(10, 10, 16), (10, 0));
        assert_eq!(records_to_copy(10, 26, 16), (10, 16));
        assert_eq!(records_to_copy(10, 27, 16), (11, 16), "only the newest cap");
        assert_eq!(records_to_copy(u32::MAX - 2, 4, 16), (u32::MAX - 2, 7));
        assert_eq!(records_to_copy(0, 1000, 16), (984, 16));
    }
}
