//! The page server's `unsafe`: taking ownership of accepted connections
//! and asking the kernel for a peer's supplementary groups
//! (`SO_PEERGROUPS`, which nix does not wrap).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::sys::socket::{accept4, SockFlag};

/// Accepts one connection on `listener`, non-blocking and close-on-exec.
pub fn accept(listener: BorrowedFd<'_>) -> nix::Result<OwnedFd> {
    let fd = accept4(
        listener.as_raw_fd(),
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )?;
    // SAFETY: accept4 returned a new descriptor that this process now
    // holds and nothing else refers to.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Most supplementary groups asked for (NGROUPS_MAX is 65536).
const MAX_GROUPS: usize = 65_536;

/// The supplementary groups the connecting process had when it
/// connected, as the kernel recorded them.
pub fn peer_groups(sock: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = libc::socklen_t::try_from(groups.len() * size_of::<libc::gid_t>())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `groups` is a live buffer of `len` bytes that the kernel
        // fills with gid_t values (any bit pattern is a valid u32), and
        // `len` is a valid socklen_t it updates to the bytes needed or
        // written; the socket stays open for the call.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = usize::try_from(len).unwrap_or(0) / size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n.min(groups.len()));
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) || n <= groups.len() || n > MAX_GROUPS {
            return Err(e);
        }
        groups.resize(n, 0);
    }
}
