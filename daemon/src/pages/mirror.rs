//! Following the device's commits through its commit mirror (ABI 1.9,
//! `gpupm_uapi::mirror`): instead of one `GPUPM_IOC_WAIT_COMMIT` round trip
//! through the node per commit, the commit thread sleeps on the mirror's
//! doorbell (a shared futex) and reads the followed slots from the mapping
//! under its sequence lock — no system call per commit but the wake-up.
//!
//! The mirror is the device's one mapping ([`crate::mirror::DeviceMirror`],
//! which also checks that it can be trusted), shared with the drains.
//! Without a mirror
//! (an older node: ENOTTY; a driver with none: ENODEV), or with one that
//! is refused or stays busy, commits are followed with the wait as before.
//! The node is asked again at each start of following, so a driver that
//! restarted (a new file, a new generation) is picked up.

use std::sync::Arc;

use gpupm_client::mirror::MirrorError;
use gpupm_client::DevError;
use gpupm_uapi::layout::{BlockSlot, BLOCK_SLOT_SIZE};
use zerocopy::FromZeros;

use crate::mirror::{DeviceMirror, OpenMirror};

use super::table::Key;
use super::watch::CommitWatch;

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
    mirror: Arc<OpenMirror>,
    seen: u32,
    slots: Vec<u32>,
    blocks: Vec<BlockSlot>,
}

/// Asks the node for its mirror; keeps `current` when the node still
/// names the same one.
pub(super) fn offer(source: &DeviceMirror, current: Option<Box<Follower>>) -> Offer {
    let mirror = match source.offer() {
        crate::mirror::Offer::Mirror(m) => m,
        crate::mirror::Offer::None => return Offer::None,
        crate::mirror::Offer::Refused(e) => return Offer::Refused(e),
        crate::mirror::Offer::Failed(e) => return Offer::Failed(e),
    };
    if let Some(f) = current.filter(|f| Arc::ptr_eq(&f.mirror, &mirror)) {
        return Offer::Mirror(f);
    }
    // The first read takes what is there now.
    let seen = mirror.reader.doorbell().wrapping_sub(1);
    Offer::Mirror(Box::new(Follower {
        mirror,
        seen,
        slots: Vec::new(),
        blocks: Vec::new(),
    }))
}

impl Follower {
    /// The mirror file's path as the node named it.
    pub(super) fn path(&self) -> String {
        self.mirror.path()
    }

    /// The mirror followed.
    pub(super) fn mirror(&self) -> Arc<OpenMirror> {
        Arc::clone(&self.mirror)
    }

    /// Waits, with no timeout, until the doorbell rang since the last call
    /// (at once if it already did) or `watch` kicks; `false` for a kick.
    pub(super) fn next_commit(&mut self, watch: &CommitWatch) -> bool {
        let kicks = watch.kicks();
        loop {
            let now = self.mirror.reader.doorbell();
            if now != self.seen {
                self.seen = now;
                return true;
            }
            if watch.kicks() != kicks {
                return false;
            }
            if let Err(e) = self.mirror.reader.wait(now, None) {
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
        self.mirror.reader.read(&self.slots, &mut self.blocks)?;
        Ok(&self.blocks)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use gpupm_client::mirror::{MirrorReader, MirrorWriter};

    use super::*;
    use crate::pages::watch::STALL;

    /// A follower asleep with no timeout on a doorbell that no longer
    /// rings — the device stopped committing — is ended by the watchdog's
    /// kick, and reports no commit; a ring before that is a commit.
    #[test]
    fn the_watchdog_ends_an_untimed_wait_for_commits_that_stopped() {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "gpupmd-follow-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let mut writer = MirrorWriter::create(&dir, 2).expect("a mirror");
        let reader = MirrorReader::open(&writer.info()).expect("open the mirror");
        let mirror = Arc::new(OpenMirror::new(reader, "test"));
        let mut follower = Follower {
            seen: mirror.reader.doorbell(),
            mirror: Arc::clone(&mirror),
            slots: Vec::new(),
            blocks: Vec::new(),
        };
        let watch = Arc::new(CommitWatch::default());
        watch.sleep_on(Some(follower.mirror()));

        assert!(
            !writer.begin().finish(1, 1),
            "rung, with nobody asleep to wake"
        );
        assert!(follower.next_commit(&watch), "a ring is a commit");

        let asleep = {
            let watch = Arc::clone(&watch);
            std::thread::spawn(move || follower.next_commit(&watch))
        };
        let mut now = Instant::now();
        assert!(!watch.check(true, now), "the first look only notes");
        // A kick just before the follower falls asleep is lost; each later
        // look past the stall kicks again, as the refresher's do.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !asleep.is_finished() {
            assert!(Instant::now() < deadline, "the follower was never woken");
            now += STALL;
            assert!(watch.check(true, now), "no commit applied: kicked");
            std::thread::yield_now();
        }
        assert!(!asleep.join().expect("the follower"), "kicked, not rung");
        assert_eq!(mirror.reader.doorbell(), 1, "the kick rang nothing");
        std::fs::remove_dir_all(&dir).ok();
    }
}
