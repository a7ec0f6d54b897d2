//! The node's own threads: the feed worker, which moves what the stream
//! sessions' feeds publish into their queues (woken by the feeds), and the
//! reaper of killed readers (`session::reap`, the shared
//! `gpupm_fusemount::parked::Reaper`), apart from it so that no `/proc`
//! work ever delays a feed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gpupm_fusemount::parked::Reaper;

use super::session::{start_reaper, Sessions};
use crate::worker::Worker;

/// The feed worker and the reaper; both stop (joined) when it is dropped.
#[derive(Debug)]
pub struct Pump {
    _feed: Worker,
    _reaper: Reaper,
}

/// Pumps started (for thread names).
static PUMPS: AtomicU64 = AtomicU64::new(0);

impl Pump {
    /// Starts the feed worker and the reaper of `sessions`.
    pub fn start(sessions: Arc<Sessions>) -> std::io::Result<Pump> {
        let n = PUMPS.fetch_add(1, Ordering::Relaxed);
        let reaper = start_reaper(&sessions)?;
        let bell = Arc::clone(sessions.feed_bell());
        let feed = Worker::start(&format!("gpupm-tenant-feed-{n}"), bell, None, move || {
            sessions.pump_feeds()
        })?;
        Ok(Pump {
            _feed: feed,
            _reaper: reaper,
        })
    }
}
