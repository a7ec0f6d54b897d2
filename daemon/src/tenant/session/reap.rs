//! The tenant node's parked reads as the shared reaper sees them
//! ([`gpupm_fusemount::parked`]): a read whose process was killed is
//! failed with EINTR, found without the table lock held during `/proc`
//! reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gpupm_fusemount::parked::{batch_of, take_tickets, ParkedRef, Parking, Reaper};

use super::{run, Action, Handle, ParkedRead, Sessions};
use crate::tenant::error::RequestError;

impl Parking for Sessions {
    fn parked_batch(&self, after: u64, max: usize) -> (Vec<ParkedRef>, u64) {
        batch_of(&self.lock().handles, after, max, |h: &Handle, out| {
            out.extend(h.readers.iter().map(|r| (r.ticket, r.pid)));
        })
    }

    fn fail_killed(&self, killed: &BTreeMap<u64, BTreeSet<u64>>) {
        let mut actions = Vec::new();
        {
            let mut t = self.lock();
            for (fh, tickets) in killed {
                let Some(h) = t.handles.get_mut(fh) else {
                    continue;
                };
                let dead = take_tickets(&mut h.readers, tickets, |r: &ParkedRead| r.ticket);
                actions.extend(
                    dead.into_iter()
                        .map(|r| Action::Complete(r.complete, Err(RequestError::Interrupted))),
                );
            }
        }
        run(actions);
    }

    fn any_parked(&self) -> bool {
        self.bounds.parked_reads() > 0
    }
}

/// Starts the reaper of `sessions`; it stops when dropped.
pub(crate) fn start(sessions: &Arc<Sessions>) -> std::io::Result<Reaper> {
    let bell = Arc::clone(&sessions.bell);
    Reaper::start(
        "gpupm-tenant-reaper",
        Arc::clone(sessions) as Arc<dyn Parking>,
        bell,
    )
}
