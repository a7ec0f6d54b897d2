//! The commit mirror's `unsafe`: opening a file relative to a directory
//! descriptor, and the shared (cross-process) futex calls on the
//! doorbell, which neither nix nor libc wrap. (Its mappings are
//! [`crate::shm::Shared`].)

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use nix::fcntl::{openat, OFlag};
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
