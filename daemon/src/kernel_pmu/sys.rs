//! The ioctls of the publication device (`/dev/gpupm_pmu`): the module's
//! only `unsafe`. Each wrapper takes a borrowed descriptor and a reference
//! to the argument struct whose size the request number encodes.

use std::os::fd::{AsRawFd, BorrowedFd};

use gpupm_uapi::pmu::{Publish, Wanted, GPUPM_PMU_IOC_PUBLISH, GPUPM_PMU_IOC_WANTED};

mod raw {
    use super::{Publish, Wanted, GPUPM_PMU_IOC_PUBLISH, GPUPM_PMU_IOC_WANTED};

    nix::ioctl_write_ptr_bad!(publish, GPUPM_PMU_IOC_PUBLISH, Publish);
    nix::ioctl_readwrite_bad!(wanted, GPUPM_PMU_IOC_WANTED, Wanted);
}

/// Size encoded in a Linux ioctl request number.
const fn ioc_size(cmd: u32) -> usize {
    ((cmd >> 16) & 0x3fff) as usize
}
const _: () = assert!(ioc_size(GPUPM_PMU_IOC_PUBLISH) == core::mem::size_of::<Publish>());
const _: () = assert!(ioc_size(GPUPM_PMU_IOC_WANTED) == core::mem::size_of::<Wanted>());

/// `GPUPM_PMU_IOC_PUBLISH`.
pub fn publish(fd: BorrowedFd<'_>, req: &Publish) -> nix::Result<i32> {
    // SAFETY: `fd` is borrowed, so it stays open for the call; `req` is a
    // live `#[repr(C)]` struct whose size equals the request's size field
    // (asserted above), which is all the kernel copies in.
    unsafe { raw::publish(fd.as_raw_fd(), req) }
}

/// `GPUPM_PMU_IOC_WANTED`.
pub fn wanted(fd: BorrowedFd<'_>, req: &mut Wanted) -> nix::Result<i32> {
    // SAFETY: as for `publish`; the kernel writes back at most
    // `size_of::<Wanted>()` bytes into the exclusively borrowed struct, and
    // every bit pattern is a valid `Wanted` (zerocopy `FromBytes`).
    unsafe { raw::wanted(fd.as_raw_fd(), req) }
}
