//! Mapping attempts a tenant makes on a page descriptor, with the
//! system's answers (the tests' only `unsafe` besides forking).

use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;

use gpupm_uapi::page::PAGE_SIZE;
use nix::errno::Errno;
use nix::sys::mman::{mmap, mprotect, munmap, MapFlags, ProtFlags};

fn len() -> NonZeroUsize {
    NonZeroUsize::new(PAGE_SIZE).expect("a page is not empty")
}

/// `mmap(PROT_READ | PROT_WRITE, MAP_SHARED)`: the errno, or `Ok` (then
/// unmapped again).
pub fn map_shared_writable(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: a new mapping at a kernel-chosen address overlaps nothing;
    // it is unmapped below without being accessed.
    let p = unsafe {
        mmap(
            None,
            len(),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            fd,
            0,
        )
    }?;
    // SAFETY: `p` is the mapping just made, of `len()` bytes.
    unsafe { munmap(p, PAGE_SIZE) }
}

/// Maps read-only and shared, then `mprotect(PROT_READ | PROT_WRITE)`:
/// the errno of the mprotect (the mapping is removed either way).
pub fn mprotect_writable(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: as in `map_shared_writable`.
    let p = unsafe {
        mmap(
            None,
            len(),
            ProtFlags::PROT_READ,
            MapFlags::MAP_SHARED,
            fd,
            0,
        )
    }?;
    // SAFETY: `p` is the mapping just made; changing its protection
    // affects no Rust object.
    let r = unsafe { mprotect(p, PAGE_SIZE, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE) };
    // SAFETY: `p` is the mapping made above, never used as a reference.
    unsafe { munmap(p, PAGE_SIZE) }?;
    r
}

/// A private writable mapping (allowed: copy on write), one byte written
/// into it at `offset`; the page other mappings see must not change.
pub fn write_private_copy(fd: BorrowedFd<'_>, offset: usize) -> Result<(), Errno> {
    // SAFETY: as in `map_shared_writable`.
    let p = unsafe {
        mmap(
            None,
            len(),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE,
            fd,
            0,
        )
    }?;
    // SAFETY: `offset` < PAGE_SIZE (checked by the caller's use of page
    // offsets) lies inside the private writable mapping `p`, which only
    // this process sees and nothing else references.
    unsafe { p.cast::<u8>().add(offset % PAGE_SIZE).write_volatile(0xee) };
    // SAFETY: `p` is the mapping made above.
    unsafe { munmap(p, PAGE_SIZE) }
}
