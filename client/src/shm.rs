//! A file mapped `MAP_SHARED` and seen only through atomic words: the one
//! shared-memory mapping of the crate (tenant pages, the commit mirror and
//! its waiter word), and its `unsafe`.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

/// `len` bytes of a file mapped `MAP_SHARED`, unmapped on drop. Every
/// access goes through [`Shared::u64_at`], [`Shared::u64s_at`],
/// [`Shared::u64_array`] or [`Shared::u32_at`].
#[derive(Debug)]
pub struct Shared {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomics, which may be
// shared and used from any thread; it stays mapped until `drop`, which
// needs `&mut self`.
unsafe impl Send for Shared {}
// SAFETY: as for `Send`: shared access is atomic word access only.
unsafe impl Sync for Shared {}

impl Shared {
    /// Maps the first `len` bytes of `fd`, read-only unless `writable`.
    /// The caller has checked that the file is at least `len` bytes long
    /// (`fstat`), so that no access faults.
    pub fn map(fd: BorrowedFd<'_>, len: usize, writable: bool) -> io::Result<Shared> {
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        let nz = NonZeroUsize::new(len).ok_or(io::ErrorKind::InvalidInput)?;
        // SAFETY: a fresh shared mapping at an address the kernel picks
        // overlaps no Rust object; `fd` is open for the call.
        let ptr = unsafe { mmap(None, nz, prot, MapFlags::MAP_SHARED, fd, 0) }?;
        Ok(Shared {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The 64-bit word at byte `offset`; `None` when it is not 8-aligned
    /// or not inside the mapping.
    pub fn u64_at(&self, offset: usize) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) || offset.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: `offset + 8 <= len` (checked), so the word lies inside
        // the live mapping (page-aligned, so the 8-aligned offset gives an
        // address aligned for `AtomicU64`, which has the layout of `u64`).
        // Every access to the mapping, in this process and in the others
        // that map the file, is an atomic of this width at this offset
        // (the mirror protocol, `gpupm_uapi::mirror`), so none is a data
        // race; the reference lives no longer than `self`.
        Some(unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() })
    }

    /// The `count` 64-bit words from byte `offset`; as [`Shared::u64_at`]
    /// for each (one bounds check for a whole slot).
    pub fn u64s_at(&self, offset: usize, count: usize) -> Option<&[AtomicU64]> {
        let end = offset.checked_add(count.checked_mul(8)?)?;
        if !offset.is_multiple_of(8) || end > self.len {
            return None;
        }
        // SAFETY: `offset + 8 * count <= len` (checked), so the words lie
        // inside the live mapping, 8-aligned as in `u64_at`; each is
        // accessed only as a 64-bit atomic by every process (as there),
        // and the slice lives no longer than `self`.
        Some(unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr().add(offset).cast::<AtomicU64>(), count)
        })
    }

    /// The `N` 64-bit words from byte `offset` as an array; as
    /// [`Shared::u64s_at`].
    pub fn u64_array<const N: usize>(&self, offset: usize) -> Option<&[AtomicU64; N]> {
        self.u64s_at(offset, N)?.try_into().ok()
    }

    /// The 32-bit word at byte `offset`; as [`Shared::u64_at`].
    pub fn u32_at(&self, offset: usize) -> Option<&AtomicU32> {
        if !offset.is_multiple_of(4) || offset.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: as in `u64_at`, for a 4-aligned 4-byte word inside the
        // mapping, accessed only as a 32-bit atomic by every process.
        Some(unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU32>() })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping made in `map`, not unmapped
        // before; no reference from `u64_at`/`u32_at` outlives `self`. (If
        // munmap failed the range would stay mapped until exit: harmless.)
        unsafe { munmap(self.ptr.cast(), self.len) }.ok();
    }
}
