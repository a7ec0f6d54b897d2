//! One instance at a time: an exclusive `flock` on a lock file, taken by
//! `gpupmd` and `gpupm-driver` before they touch anything (the device, the
//! state, the pages, the commit mirror, a mount). The file holds the
//! holder's pid and what it serves, so a second instance can say who it
//! is in the way of. The kernel drops the lock when the holder exits,
//! however it exits; the file stays.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// Another instance holds it.
    #[error("already running as pid {pid} for {serves} (lock {})", path.display())]
    Held {
        /// The holder's pid, as it wrote it (`?` when unreadable).
        pid: String,
        /// What the holder serves, as it wrote it.
        serves: String,
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot take the instance lock {}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// The lock, held while this value lives. Its error reads
/// `already running as pid N for NODE (lock PATH)`: the program prefixes
/// its name (`gpupmd: already running as pid …`).
#[derive(Debug)]
pub struct InstanceLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl InstanceLock {
    /// Takes the lock at `path` (created owner-only if missing, never
    /// through a symlink), writing this process's pid and `serves` into
    /// it, or says who holds it.
    pub fn acquire(path: &Path, serves: &str) -> Result<InstanceLock, InstanceError> {
        let io = |source| InstanceError::Io {
            path: path.to_owned(),
            source,
        };
        // The lock is held through a read-only handle and the pid written
        // through one closed at once: the holder keeps nothing open for
        // writing there, so the directory's file system can still be
        // remounted read-only (gpupmd then keeps serving with its state
        // read-only, docs/pages.md).
        let write_handle = |truncate: bool| {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(truncate)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
        };
        drop(write_handle(false).map_err(io)?);
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(io)?;
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                // What the holder wrote; a holder that has not written
                // yet shows as `?`.
                file.read_to_string(&mut text).ok();
                let mut lines = text.lines();
                return Err(InstanceError::Held {
                    pid: lines
                        .next()
                        .filter(|p| !p.is_empty())
                        .unwrap_or("?")
                        .to_owned(),
                    serves: lines.next().unwrap_or("?").to_owned(),
                    path: path.to_owned(),
                });
            }
            Err((_, e)) => return Err(io(io::Error::from(e))),
        };
        let mut pid_file = write_handle(true).map_err(io)?;
        writeln!(pid_file, "{}\n{serves}", std::process::id()).map_err(io)?;
        Ok(InstanceLock {
            _lock: lock,
            path: path.to_owned(),
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_learns_who_holds_it_and_the_lock_goes_with_its_holder() {
        let dir = std::env::temp_dir().join(format!("gpupm-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        let held = InstanceLock::acquire(&path, "/run/gpupm/dev").unwrap();
        let err = InstanceLock::acquire(&path, "/elsewhere").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "already running as pid {} for /run/gpupm/dev (lock {})",
                std::process::id(),
                path.display()
            )
        );
        drop(held);
        let again = InstanceLock::acquire(&path, "/elsewhere").unwrap();
        assert_eq!(again.path(), path);
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_holder_keeps_no_handle_open_for_writing() {
        let dir = std::env::temp_dir().join(format!("gpupm-lock-ro-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        let held = InstanceLock::acquire(&path, "/run/gpupm/dev").unwrap();
        // Every descriptor of this process on the lock file, by its
        // access mode (fdinfo's octal flags).
        let modes: Vec<u32> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| std::fs::read_link(e.path()).ok().as_deref() == Some(path.as_path()))
            .map(|e| {
                let info = std::fs::read_to_string(format!(
                    "/proc/self/fdinfo/{}",
                    e.file_name().to_string_lossy()
                ))
                .unwrap();
                let flags = info
                    .lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .unwrap()
                    .trim();
                u32::from_str_radix(flags, 8).unwrap()
            })
            .collect();
        assert_eq!(modes.len(), 1, "{modes:?}");
        assert_eq!(modes[0] & libc::O_ACCMODE as u32, libc::O_RDONLY as u32);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{}\n/run/gpupm/dev\n", std::process::id()));
        drop(held);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
