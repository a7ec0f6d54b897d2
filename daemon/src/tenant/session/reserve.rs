//! What opening an RI or a sampling session on a handle shares: the
//! reservation of the handle under the table lock (before the unit is
//! programmed without it), and the sink that queues into that handle.

use std::sync::{Arc, Weak};

use super::{Handle, Sessions};
use crate::tenant::error::RequestError;

/// A session's sink: queues into handle `fh` of the node while session
/// `id` is still the handle's.
pub(super) struct HandleSink {
    pub(super) sessions: Weak<Sessions>,
    pub(super) fh: u64,
    pub(super) id: u64,
}

impl std::fmt::Debug for HandleSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleSink")
            .field("fh", &self.fh)
            .field("id", &self.id)
            .finish()
    }
}

impl Sessions {
    /// Takes the next session id for `fh` and lets `install` put the
    /// session's queue on the handle, all under one lock; answers the sink
    /// of that session. Refused while the table shuts down, for an unknown
    /// handle, and for a handle that already holds a session.
    pub(super) fn reserve_session(
        self: &Arc<Self>,
        fh: u64,
        install: impl FnOnce(&mut Handle, u64),
    ) -> Result<Arc<HandleSink>, RequestError> {
        let mut t = self.lock();
        if t.shut {
            return Err(RequestError::ShuttingDown);
        }
        let id = t.next_session;
        let handle = t.handles.get_mut(&fh).ok_or(RequestError::BadHandle)?;
        if handle.has_session() {
            return Err(RequestError::Busy);
        }
        install(handle, id);
        t.next_session += 1;
        Ok(Arc::new(HandleSink {
            sessions: Arc::downgrade(self),
            fh,
            id,
        }))
    }
}
