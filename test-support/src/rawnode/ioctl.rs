//! The ioctls the tests make on the node, with any command and argument:
//! through the client's one ioctl path (`gpupm_client::sys::raw`).

use std::io;
use std::os::fd::AsFd;

use gpupm_client::sys::{raw, RAW_MIN_BUF};

/// `ioctl(fd, cmd, buf)` for a restricted-mode ioctl whose argument is the
/// start of `buf`. Fails with `InvalidInput` when `buf` is shorter than the
/// size encoded in `cmd`; the call itself is made on a copy at least a page
/// long (as [`raw`] wants), copied back into `buf` whether it fails or not.
pub fn ioctl(fd: &impl AsFd, cmd: u32, buf: &mut [u8]) -> io::Result<i32> {
    if buf.len() < gpupm_uapi::ioc::size(cmd) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "argument shorter than _IOC_SIZE(cmd)",
        ));
    }
    let mut arg = vec![0u8; RAW_MIN_BUF.max(buf.len())];
    arg[..buf.len()].copy_from_slice(buf);
    let r = raw(fd.as_fd(), cmd, &mut arg);
    // A failed call may copy out too (a register batch's failed index).
    buf.copy_from_slice(&arg[..buf.len()]);
    r.map_err(io::Error::from)
}
