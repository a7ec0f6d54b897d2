//! Files holding secrets (a device identity, a VM key, a tenant's session):
//! read only when they are regular files that only their owner — the
//! reader — may access, opened without following a symbolic link and
//! without blocking on a FIFO; written atomically (a new file of mode 0600
//! renamed into place). What was read is returned in a [`Zeroizing`]
//! buffer.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

/// Permission bits a secret file must not have (group and other).
const FOREIGN_ACCESS: u32 = 0o077;

/// Why a secret file was not read or written.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The file could not be opened (ELOOP: it is a symbolic link).
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file (a FIFO, a device, a directory).
    #[error("{0} is not a regular file")]
    NotRegular(PathBuf),
    /// Owned by someone other than the reader.
    #[error("{path} belongs to uid {owner}, not to this process's uid {euid}")]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The reader.
        euid: u32,
    },
    /// Group or others may access it.
    #[error("{path} is accessible by others (mode {mode:03o}); run `chmod 600 {path}`")]
    Mode {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Larger than the reader allows.
    #[error("{path} is larger than {max} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        max: usize,
    },
    /// Reading or writing failed.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// "read", "write", "rename" ….
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> SecretFileError + 'a {
    move |source| SecretFileError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Reads the secret file `path` (at most `max_len` bytes) after checking
/// that it is a regular file owned by this process's effective uid that
/// its group and others cannot access.
pub fn read(path: &Path, max_len: usize) -> Result<Zeroizing<Vec<u8>>, SecretFileError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|source| SecretFileError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    check(&file, path)?;
    let mut bytes = Zeroizing::new(Vec::with_capacity(max_len + 1));
    let limit = u64::try_from(max_len).unwrap_or(u64::MAX).saturating_add(1);
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(io("read", path))?;
    if bytes.len() > max_len {
        return Err(SecretFileError::TooLarge {
            path: path.to_path_buf(),
            max: max_len,
        });
    }
    Ok(bytes)
}

/// The checks of [`read`] on an open file.
fn check(file: &File, path: &Path) -> Result<(), SecretFileError> {
    let meta = file.metadata().map_err(io("stat", path))?;
    if !meta.is_file() {
        return Err(SecretFileError::NotRegular(path.to_path_buf()));
    }
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(SecretFileError::Owner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            euid,
        });
    }
    let mode = meta.mode() & 0o777;
    if mode & FOREIGN_ACCESS != 0 {
        return Err(SecretFileError::Mode {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically as a file of mode 0600: a new
/// temporary file beside it (never following a link, never reusing a
/// file), synced, then renamed over `path`, and the directory synced.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), SecretFileError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|source| SecretFileError::Open {
                path: tmp.clone(),
                source,
            })?;
        f.write_all(bytes).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("sync", &tmp))?;
        std::fs::rename(&tmp, path).map_err(io("rename", path))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync", dir))
    })();
    if result.is_err() && tmp.exists() {
        // Best effort: the error that matters is the one returned.
        std::fs::remove_file(&tmp).ok();
    }
    result
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn only_an_owner_only_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write(&path, b"abc").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(read(&path, 3).unwrap().as_slice(), b"abc");
        assert!(matches!(
            read(&path, 2),
            Err(SecretFileError::TooLarge { .. })
        ));
        for mode in [0o640, 0o604, 0o610, 0o601, 0o620] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(
                matches!(read(&path, 3), Err(SecretFileError::Mode { .. })),
                "mode {mode:o}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(read(&path, 3).is_ok());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(read(&link, 3), Err(SecretFileError::Open { .. })));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // A FIFO with no writer: the open must not block, and it is refused.
        assert!(matches!(
            read(&fifo, 3),
            Err(SecretFileError::NotRegular(_))
        ));
        assert!(matches!(
            read(dir.path(), 3),
            Err(SecretFileError::NotRegular(_))
        ));
    }
}
