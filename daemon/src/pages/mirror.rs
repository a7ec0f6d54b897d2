//! Following the device's commits through its commit mirror (ABI 1.9,
//! `gpupm_uapi::mirror`): instead of one `GPUPM_IOC_WAIT_COMMIT` round trip
//! through the node per commit, the commit thread sleeps on the mirror's
//! doorbell (a shared futex) and reads the followed slots from the mapping
//! under its sequence lock — no system call per commit but the wake-up.
//!
//! The node names the mirror (`GPUPM_IOC_MIRROR_INFO`); it is used only if
//! both its files pass [`gpupm_client::mirror::open_checked`]: regular
//! files with their directory's owner (root, or the unprivileged driver),
//! no other access, no group write on the mirror, in a directory no group
//! or other may write — a file anyone else could have written is never
//! taken for the device's. Without a mirror
//! (an older node: ENOTTY; a driver with none: ENODEV), or with one that
//! is refused or stays busy, commits are followed with the wait as before.
//! The node is asked again at each start of following, so a driver that
//! restarted (a new file, a new generation) or was reset is picked up.

use std::time::{Duration, Instant};

use gpupm_client::mirror::{MirrorError, MirrorReader};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::layout::{BlockSlot, BLOCK_SLOT_SIZE};
use gpupm_uapi::mirror::MirrorInfo;
use nix::errno::Errno;
use zerocopy::FromZeros;

use super::table::Key;

/// What asking the node for its mirror gave.
#[derive(Debug)]
pub(super) enum Offer {
    /// Opened and checked.
    Mirror(Box<Follower>),
    /// The node keeps none (or predates them).
    None,
    /// The node named one that cannot be used.
    Refused(MirrorError),
    /// Asking failed otherwise (the node is gone, say).
    Failed(DevError),
}

/// The mirror opened, with the doorbell value last read and reused
/// buffers (no allocation per commit once they have grown).
#[derive(Debug)]
pub(super) struct Follower {
    reader: MirrorReader,
    info_generation: u64,
    path: Vec<u8>,
    seen: u32,
    slots: Vec<u32>,
    blocks: Vec<BlockSlot>,
}

/// Asks the node for its mirror; keeps `current` when the node still
/// names the same one.
pub(super) fn offer(dev: &DevNode, current: Option<Box<Follower>>) -> Offer {
    let info = match dev.mirror_info() {
        Ok(info) => info,
        Err(DevError::Ioctl {
            source: Errno::ENOTTY | Errno::ENODEV | Errno::EOPNOTSUPP,
            ..
        }) => return Offer::None,
        Err(e) => return Offer::Failed(e),
    };
    let path = MirrorInfo::path_of(&info.path).unwrap_or_default().to_vec();
    if let Some(f) = current {
        if f.info_generation == info.generation && f.path == path {
            return Offer::Mirror(f);
        }
    }
    match MirrorReader::open(&info) {
        Ok(reader) => {
            // The first read takes what is there now.
            let seen = reader.doorbell().wrapping_sub(1);
            Offer::Mirror(Box::new(Follower {
                reader,
                info_generation: info.generation,
                path,
                seen,
                slots: Vec::new(),
                blocks: Vec::new(),
            }))
        }
        Err(e) => Offer::Refused(e),
    }
}

impl Follower {
    /// The mirror file's path as the node named it.
    pub(super) fn path(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }

    /// Waits until the doorbell rang since the last call (at once if it
    /// already did) or `timeout` passed; `false` for a timeout.
    pub(super) fn next_commit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.reader.doorbell();
            if now != self.seen {
                self.seen = now;
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if let Err(e) = self.reader.wait(now, left) {
                tracing::debug!(error = %e, "doorbell wait failed");
                return false;
            }
        }
    }

    /// The `wanted` pages' slots as the mirror holds them, in `wanted`'s
    /// order.
    pub(super) fn read(&mut self, wanted: &[(Key, u64)]) -> Result<&[BlockSlot], MirrorError> {
        self.slots.clear();
        self.slots.extend(
            wanted
                .iter()
                .map(|&(_, off)| u32::try_from(off / BLOCK_SLOT_SIZE).unwrap_or(u32::MAX)),
        );
        self.blocks.resize(wanted.len(), BlockSlot::new_zeroed());
        self.reader.read(&self.slots, &mut self.blocks)?;
        Ok(&self.blocks)
    }
}
