//! What opening an RI or a sampling session on a handle shares: the
//! reservation of the handle under the table lock, the sink that queues
//! into that handle, and settling the session once its unit was
//! programmed without the lock (the handle may have been closed meanwhile).

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
    /// Takes the next session id for `fh` (and the next id `uid` is
    /// shown) and lets `install` put the session's queue on the handle,
    /// all under one lock; answers the sink of that session and the id
    /// shown. Refused while the table shuts down, for an unknown handle,
    /// and for a handle that already holds a session.
    pub(super) fn reserve_session(
        self: &Arc<Self>,
        fh: u64,
        uid: u32,
        install: impl FnOnce(&mut Handle, u64, u64),
    ) -> Result<(Arc<HandleSink>, u64), RequestError> {
        let mut guard = self.lock();
        let t = &mut *guard;
        if t.shut {
            return Err(RequestError::ShuttingDown);
        }
        let id = t.next_session;
        let handle = t.handles.get_mut(&fh).ok_or(RequestError::BadHandle)?;
        if handle.has_session() {
            return Err(RequestError::Busy);
        }
        t.next_session += 1;
        let public = Sessions::public_id(t, uid);
        let handle = t.handles.get_mut(&fh).ok_or(RequestError::BadHandle)?;
        install(handle, id, public);
        Ok((
            Arc::new(HandleSink {
                sessions: Arc::downgrade(self),
                fh,
                id,
            }),
            public,
        ))
    }

    /// Settles session `id` of `fh` once its unit answered `opened`:
    /// `place` is where the session sits on a handle. Still there: `accept`
    /// takes the unit's grant into it and answers the request. Closed
    /// meanwhile: the grant is dropped after the lock is released (it
    /// withdraws what it holds) and the answer is EBADF. Refused: the
    /// reserved session goes and the answer is `refused`'s.
    pub(super) fn settle_session<S: Reserved, G, E>(
        &self,
        fh: u64,
        id: u64,
        opened: Result<G, E>,
        place: impl Fn(&mut Handle) -> &mut Option<S>,
        accept: impl FnOnce(&mut S, G) -> Vec<u8>,
        refused: impl FnOnce(E) -> RequestError,
    ) -> Result<Vec<u8>, RequestError> {
        let mut t = self.lock();
        let slot = t
            .handles
            .get_mut(&fh)
            .and_then(|h| place(h).as_mut())
            .filter(|s| s.id() == id);
        match (opened, slot) {
            (Ok(grant), Some(s)) => Ok(accept(s, grant)),
            (Ok(grant), None) => {
                drop(t);
                drop(grant);
                Err(RequestError::BadHandle)
            }
            (Err(e), slot) => {
                if slot.is_some() {
                    if let Some(h) = t.handles.get_mut(&fh) {
                        *place(h) = None;
                    }
                }
                Err(refused(e))
            }
        }
    }
}

/// A session reserved on a handle, known by its id.
pub(super) trait Reserved {
    fn id(&self) -> u64;
}
