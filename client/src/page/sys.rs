//! The page module's `unsafe`: mapping a page file shared, viewing the
//! mapping as atomic words, unmapping it, and taking ownership of the
//! descriptors a page reply carries.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use gpupm_uapi::page::PAGE_SIZE;
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

/// Words of one page.
pub const PAGE_WORDS: usize = PAGE_SIZE / 8;
/// A page seen as the 64-bit atomics every access to it goes through.
pub type PageWords = [AtomicU64; PAGE_WORDS];

/// One page file mapped `MAP_SHARED`, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<PageWords>,
}

// SAFETY: the mapping is only ever accessed through `AtomicU64`s, which
// may be shared and used from any thread; the pointer stays valid until
// `drop`, which needs `&mut self`.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`: shared access is atomic word access only.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first page of `fd` with `prot` (`PROT_READ`, optionally
    /// `PROT_WRITE`). Refuses a file shorter than a page, whose tail would
    /// fault on access.
    pub fn map(fd: BorrowedFd<'_>, writable: bool) -> io::Result<Mapping> {
        let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
        if usize::try_from(st.st_size).unwrap_or(0) < PAGE_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the page file holds {} bytes, not {PAGE_SIZE}", st.st_size),
            ));
        }
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        let len = NonZeroUsize::new(PAGE_SIZE).ok_or(io::ErrorKind::InvalidInput)?;
        // SAFETY: a fresh shared mapping at an address the kernel picks
        // overlaps no Rust object; `fd` is open for the call; the file is
        // at least PAGE_SIZE long (checked above), so every byte of the
        // mapping is backed.
        let ptr = unsafe { mmap(None, len, prot, MapFlags::MAP_SHARED, fd, 0) }?;
        Ok(Mapping { ptr: ptr.cast() })
    }

    /// The page's words. A read-only mapping's words are only ever loaded
    /// (the reader in `seqlock` loads, the writer is only given writable
    /// mappings).
    pub fn words(&self) -> &PageWords {
        // SAFETY: `ptr` is a live PAGE_SIZE mapping (until drop), page
        // aligned and so aligned for `AtomicU64`, which has the size and
        // alignment of `u64`; every access to it from this process goes
        // through these atomics, and the other processes that map the file
        // access it with 64-bit atomics too, so no access is a data race.
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the start of a PAGE_SIZE mapping made in `map`
        // and not unmapped before; no reference from `words` outlives
        // `self`. (munmap of such a mapping cannot fail; if it did, the
        // page would stay mapped until exit, which is harmless.)
        unsafe { munmap(self.ptr.cast(), PAGE_SIZE) }.ok();
    }
}

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
