//! The raw system calls the tests make on the node (the only `unsafe` here).

use std::io;
use std::os::fd::AsRawFd;

/// `ioctl(fd, cmd, buf)` for a restricted-mode ioctl whose argument is `buf`.
/// Fails with EFAULT-like `InvalidInput` when `buf` is shorter than the size
/// encoded in `cmd`, so the kernel never touches memory past it.
pub fn ioctl(fd: &impl AsRawFd, cmd: u32, buf: &mut [u8]) -> io::Result<i32> {
    let size = gpupm_uapi::ioc::size(cmd);
    if buf.len() < size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "argument shorter than _IOC_SIZE(cmd)",
        ));
    }
    // SAFETY: `buf` is a live, writable buffer of at least _IOC_SIZE(cmd)
    // bytes, which is all the kernel reads or writes for a restricted-mode
    // ioctl; the fd is borrowed for the duration of the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::Ioctl, buf.as_mut_ptr()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
