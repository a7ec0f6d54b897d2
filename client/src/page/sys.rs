//! The page module's `unsafe`: taking ownership of the descriptors a page
//! reply carries. (A page's mapping is [`crate::shm::Shared`].)

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Takes ownership of descriptors the kernel installed for a received
/// `SCM_RIGHTS` message.
pub fn own_received(fds: Vec<RawFd>) -> Vec<OwnedFd> {
    fds.into_iter()
        // SAFETY: each descriptor was just installed in this process's
        // table by `recvmsg` for this message; nothing else knows of it,
        // so it has exactly one owner from here on.
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect()
}
