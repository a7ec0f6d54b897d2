//! A page file mapped shared ([`crate::shm::Shared`]) and seen as the
//! atomic words every access to it goes through.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicU64;

use gpupm_uapi::page::PAGE_SIZE;

use crate::shm::Shared;

/// Words of one page.
pub const PAGE_WORDS: usize = PAGE_SIZE / 8;
/// A page seen as the 64-bit atomics every access to it goes through.
pub type PageWords = [AtomicU64; PAGE_WORDS];

/// One page file mapped `MAP_SHARED`, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    shared: Shared,
}

impl Mapping {
    /// Maps the first page of `fd`, read-only unless `writable`. Refuses a
    /// file shorter than a page, whose tail would fault on access.
    pub fn map(fd: BorrowedFd<'_>, writable: bool) -> io::Result<Mapping> {
        let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
        if usize::try_from(st.st_size).unwrap_or(0) < PAGE_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the page file holds {} bytes, not {PAGE_SIZE}", st.st_size),
            ));
        }
        let shared = Shared::map(fd, PAGE_SIZE, writable)?;
        if shared.u64_array::<PAGE_WORDS>(0).is_none() {
            return Err(io::Error::other("a page mapping shorter than a page"));
        }
        Ok(Mapping { shared })
    }

    /// The page's words. A read-only mapping's words are only ever loaded
    /// (the reader in `seqlock` loads, the writer is only given writable
    /// mappings).
    pub fn words(&self) -> &PageWords {
        match self.shared.u64_array(0) {
            Some(words) => words,
            // `map` checked that the mapping holds the whole page.
            None => unreachable!("a page mapping holds PAGE_WORDS words"),
        }
    }
}
