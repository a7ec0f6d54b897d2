//! The crate's only `unsafe`: taking ownership of descriptors that arrive
//! as bare numbers (inherited through `LISTEN_FDS`, or received as
//! `SCM_RIGHTS`), and the `FUSE_DEV_IOC_CLONE` ioctl.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Sets `FD_CLOEXEC` on open descriptor `raw`; fails with `EBADF` when it
/// is not open.
fn set_cloexec(raw: RawFd) -> io::Result<()> {
    let flags = FdFlag::from_bits_truncate(fcntl(raw, FcntlArg::F_GETFD).map_err(errno)?);
    fcntl(raw, FcntlArg::F_SETFD(flags | FdFlag::FD_CLOEXEC)).map_err(errno)?;
    Ok(())
}

/// Takes ownership of descriptor `raw` passed by the service manager
/// (`LISTEN_FDS`), marking it close-on-exec.
///
/// The caller must adopt each listed number at most once per process:
/// [`crate::systemd::inherited_fd`] builds its table of inherited
/// descriptors once, under a lock, and removes the `LISTEN_*` variables.
pub(crate) fn adopt_inherited(raw: RawFd) -> io::Result<OwnedFd> {
    set_cloexec(raw)?;
    // SAFETY: `raw` is open (F_GETFD succeeded just above) and, by the
    // sd_listen_fds(3) protocol, was installed by the service manager for
    // this process (LISTEN_PID matched) before `main`; no other owner
    // exists because the process adopts each listed number exactly once and
    // nothing else in it takes descriptors from 3 upwards by number.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Takes ownership of descriptor `raw` that `recvmsg` has just installed
/// from an `SCM_RIGHTS` control message, marking it close-on-exec.
pub(crate) fn adopt_received(raw: RawFd) -> io::Result<OwnedFd> {
    set_cloexec(raw)?;
    // SAFETY: the kernel allocated `raw` in this process while delivering
    // the SCM_RIGHTS message to the caller, which hands each number of the
    // message here exactly once; nothing else knows the number yet.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

// FUSE_DEV_IOC_CLONE = _IOR(229, 0, uint32_t) (linux/fuse.h): attaches the
// descriptor it is issued on to the connection of the descriptor whose
// number the argument holds.
nix::ioctl_read!(fuse_dev_ioc_clone, 229, 0, u32);

/// Opens `/dev/fuse` afresh and attaches it to the connection of `fd` (a
/// mounted `/dev/fuse` descriptor) with `FUSE_DEV_IOC_CLONE`: the kernel
/// then hands requests to readers of either descriptor, and a reply must be
/// written to the descriptor its request was read from.
pub(crate) fn clone_fuse_device(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    let mut source =
        u32::try_from(fd.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `dev` is an open `/dev/fuse` descriptor owned here, and the
    // argument points to a live, writable u32 for the duration of the call,
    // which is what the ioctl's `_IOR(.., uint32_t)` encoding promises the
    // kernel (it only reads the source descriptor number from it).
    unsafe { fuse_dev_ioc_clone(dev.as_raw_fd(), &mut source) }.map_err(errno)?;
    Ok(OwnedFd::from(dev))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn adopting_sets_cloexec_and_refuses_a_closed_number() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let raw = r.as_raw_fd();
        fcntl(raw, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
        // Ownership moves to the adopted descriptor; `r` must not close it too.
        std::mem::forget(r);
        let fd = adopt_inherited(raw).unwrap();
        let flags = FdFlag::from_bits_truncate(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFD).unwrap());
        assert!(flags.contains(FdFlag::FD_CLOEXEC));
        drop((fd, w));
        // A number far above any open descriptor (a freed one could be
        // reused by another test thread meanwhile).
        assert_eq!(
            adopt_inherited(RawFd::MAX - 1).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
