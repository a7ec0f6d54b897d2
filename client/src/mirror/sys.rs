//! The commit mirror's `unsafe`: opening a file relative to a directory
//! descriptor, mapping a file shared, viewing words of the mapping as
//! atomics, unmapping it, and the shared (cross-process) futex calls on
//! the doorbell, which neither nix nor libc wrap.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

use nix::fcntl::{openat, OFlag};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use nix::sys::stat::Mode;

/// Opens the existing entry `name` of the directory `dir` (`openat`, so
/// the file is the one in the directory already checked), read-only or
/// read-write, without following a symlink (ELOOP).
pub fn open_in(dir: &File, name: &OsStr, writable: bool) -> io::Result<File> {
    let access = if writable {
        OFlag::O_RDWR
    } else {
        OFlag::O_RDONLY
    };
    let flags = access | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    let fd = openat(Some(dir.as_raw_fd()), name, flags, Mode::empty())?;
    // SAFETY: `openat` just returned `fd`, an open descriptor that nothing
    // else owns or will close.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// `len` bytes of a file mapped `MAP_SHARED`, unmapped on drop. Every
/// access goes through [`Shared::u64_at`] / [`Shared::u32_at`].
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

/// Sleeps while `word` holds `expected`, at most `timeout` (`None`: no
/// limit; an armed timeout costs ~1 µs per wait on a VM): a shared
/// `FUTEX_WAIT` (the waker is another process). Returns at a wake-up, a
/// changed value (EAGAIN), the timeout (ETIMEDOUT) or a signal (EINTR);
/// the caller re-reads the word in every case, so these are not errors.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> io::Result<()> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos()),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, 4-aligned 32-bit word (the kernel only
    // reads it); `ts_ptr` is null (no timeout) or points to `ts`, a valid
    // timespec that outlives the call; the unused arguments are ignored
    // by FUTEX_WAIT.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => Ok(()),
        _ => Err(e),
    }
}

/// Wakes every process sleeping in [`futex_wait`] on `word` (a shared
/// `FUTEX_WAKE`). Returns how many were woken.
pub fn futex_wake(word: &AtomicU32) -> io::Result<usize> {
    // SAFETY: `word` is a live, 4-aligned 32-bit word; FUTEX_WAKE only
    // uses its address as the key; the unused arguments are ignored.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}
