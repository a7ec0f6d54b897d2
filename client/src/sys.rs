//! The ioctl system call on a gpupm node or device: typed (argument size
//! checked against the request number), on a byte buffer of exactly the
//! encoded size, or raw (for probing the ABI with arbitrary bytes). Every
//! ioctl of gpupm goes through here: the device and tenant nodes', and the
//! kernel PMU module's (`/dev/gpupm_pmu`, which gpupmd publishes to).

use std::os::fd::{AsRawFd, BorrowedFd};

use gpupm_uapi::ioc;
use nix::errno::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[cfg(feature = "test-utils")]
/// Smallest buffer [`raw`] accepts: one page, the most any generic VFS
/// ioctl the kernel handles itself reads or writes at its argument.
pub const RAW_MIN_BUF: usize = 4096;

#[cfg(feature = "test-utils")]
/// Generic VFS ioctls that change the file descriptor, the file or the file
/// system instead of reaching the node; [`raw`] refuses them.
// The FIO* numbers are below 2^32; libc types them as the platform's
// ioctl request type.
#[allow(clippy::cast_possible_truncation)]
pub const VFS_STATEFUL_IOCTLS: [u32; 10] = [
    libc::FIONBIO as u32,
    libc::FIOASYNC as u32,
    libc::FIOCLEX as u32,
    libc::FIONCLEX as u32,
    ioc::encode(ioc::Dir::None, 0x00, 1, 0), // FIBMAP
    ioc::read_write(b'X', 119, 4),           // FIFREEZE
    ioc::read_write(b'X', 120, 4),           // FITHAW
    ioc::write(0x94, 9, 4),                  // FICLONE
    ioc::write(0x94, 13, 32),                // FICLONERANGE
    ioc::read_write(0x94, 54, 24),           // FIDEDUPERANGE
];

/// `ioctl(fd, cmd, arg)` for a command whose encoded size is `T`'s (any
/// other command fails with EINVAL before the call).
pub fn call<T: IntoBytes + FromBytes + KnownLayout + Immutable>(
    fd: BorrowedFd<'_>,
    cmd: u32,
    arg: &mut T,
) -> Result<i32, Errno> {
    if ioc::size(cmd) != size_of::<T>() {
        return Err(Errno::EINVAL);
    }
    let ptr: *mut T = arg;
    // SAFETY: `ptr` points to an exclusively borrowed, live `T`. For a
    // command whose `_IOC_SIZE` is `size_of::<T>()` (checked above) at most
    // that many bytes are copied from and to `ptr`: a node (a FUSE file:
    // restricted ioctls) makes the kernel copy exactly that, and the
    // gpupm_pmu module copies `_IOC_SIZE` bytes of its commands; `T:
    // FromBytes` accepts any bytes.
    let res = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::Ioctl, ptr) };
    Errno::result(res)
}

/// `ioctl(fd, cmd, buf)` for a command whose argument is exactly `buf`
/// (its encoded size is `buf.len()`; any other command fails with EINVAL
/// before the call): a head and a payload whose length the number
/// carries, as `GPUPM_IOC_WINDOW_READ(len)` has.
pub fn call_bytes(fd: BorrowedFd<'_>, cmd: u32, buf: &mut [u8]) -> Result<i32, Errno> {
    if ioc::size(cmd) != buf.len() {
        return Err(Errno::EINVAL);
    }
    let ptr = buf.as_mut_ptr();
    // SAFETY: `buf` is exclusively borrowed for the call and is exactly
    // `_IOC_SIZE(cmd)` bytes (checked above), all that the node's
    // restricted ioctl copies from and to `ptr`; any bytes are a valid `[u8]`.
    let res = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::Ioctl, ptr) };
    Errno::result(res)
}

#[cfg(feature = "test-utils")]
/// `ioctl(fd, cmd, buf)` with any command on the node, for probing the ABI:
/// the buffer must hold [`RAW_MIN_BUF`] bytes and the command's encoded
/// size; [`VFS_STATEFUL_IOCTLS`] are refused with EPERM before the call.
pub fn raw(fd: BorrowedFd<'_>, cmd: u32, buf: &mut [u8]) -> Result<i32, Errno> {
    if buf.len() < RAW_MIN_BUF.max(ioc::size(cmd)) {
        return Err(Errno::EINVAL);
    }
    if VFS_STATEFUL_IOCTLS.contains(&cmd) {
        return Err(Errno::EPERM);
    }
    let ptr = buf.as_mut_ptr();
    // SAFETY: `buf` is exclusively borrowed for the call. On the node the
    // kernel either forwards the command as a restricted FUSE ioctl, which
    // copies at most `_IOC_SIZE(cmd)` bytes from and to `ptr`, or handles a
    // generic VFS ioctl itself, none of which touches more than one page at
    // `ptr` (the state-changing ones are refused above); `buf` covers both.
    // Any bytes written into a `[u8]` are valid.
    let res = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::Ioctl, ptr) };
    Errno::result(res)
}
