//! Who may change and who may read the configuration file. It holds the
//! tenant map — which local user sees which VM — so a file that anyone
//! but root or gpupmd's own user could have written is refused (whoever
//! can write it can map themselves to any VM), and one every local user
//! can read is reported with a warning in the journal (it tells anyone
//! who sees which VM). The package installs it root:gpupm-admin 0640
//! (docs/operations.md, "The configuration file").
//!
//! "Written" covers the file and the directories it is reached through: a
//! directory someone else may write lets them replace the file (unless it
//! is sticky, as `/tmp` is: then only the file's owner may).

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::{getegid, geteuid};

/// What others may do with an accepted file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposure {
    /// Nobody but its owner, its group and root may read it.
    Private,
    /// Every local user may read it; `mode` is its permission bits.
    ReadableByOthers {
        /// The file's permission bits.
        mode: u32,
    },
}

/// Why the file is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigAccessError {
    /// The file or a directory could not be examined.
    #[error("cannot check who may change {path}")]
    Stat {
        /// The file or directory.
        path: PathBuf,
        /// What `stat` said.
        #[source]
        source: io::Error,
    },
    /// Someone other than root or gpupmd's user may change it.
    #[error(
        "{path} may be changed by {who} (owner uid {uid}, group gid {gid}, mode {mode:04o}): \
         only root and gpupmd's own user may be able to change the tenant map \
         (the package installs the file root:gpupm-admin 0640, in /etc/gpupm 0755 root)"
    )]
    Writable {
        /// The file or directory at fault.
        path: PathBuf,
        /// Who may write it.
        who: String,
        /// Its owner.
        uid: u32,
        /// Its group.
        gid: u32,
        /// Its permission bits.
        mode: u32,
    },
}

/// The ids allowed to write: root and this process's effective ones.
#[derive(Clone, Copy, Debug)]
struct Trusted {
    uid: u32,
    gid: u32,
}

impl Trusted {
    fn uid(self, uid: u32) -> bool {
        uid == 0 || uid == self.uid
    }

    fn gid(self, gid: u32) -> bool {
        gid == 0 || gid == self.gid
    }
}

fn stat(path: &Path) -> Result<fs::Metadata, ConfigAccessError> {
    fs::metadata(path).map_err(|source| ConfigAccessError::Stat {
        path: path.to_owned(),
        source,
    })
}

/// Who other than root and `trusted` may write `meta` (a file, or a
/// directory: there writing means replacing an entry), if anyone.
fn other_writer(meta: &fs::Metadata, trusted: Trusted) -> Option<String> {
    let mode = meta.mode();
    let sticky_dir = meta.is_dir() && mode & 0o1000 != 0;
    if !trusted.uid(meta.uid()) {
        return Some(format!("its owner, uid {}", meta.uid()));
    }
    if sticky_dir {
        // Only an entry's owner (checked on the file) or the directory's
        // owner (just checked) may replace an entry.
        return None;
    }
    if mode & 0o002 != 0 {
        return Some("every local user".into());
    }
    if mode & 0o020 != 0 && !trusted.gid(meta.gid()) {
        return Some(format!("the members of group {}", meta.gid()));
    }
    None
}

fn check_one(path: &Path, trusted: Trusted) -> Result<fs::Metadata, ConfigAccessError> {
    let meta = stat(path)?;
    match other_writer(&meta, trusted) {
        None => Ok(meta),
        Some(who) => Err(ConfigAccessError::Writable {
            path: path.to_owned(),
            who,
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode() & 0o7777,
        }),
    }
}

/// Checks `path` (the configuration file gpupmd read) for this process.
pub fn check(path: &Path) -> Result<Exposure, ConfigAccessError> {
    check_as(path, geteuid().as_raw(), getegid().as_raw())
}

/// Checks `path` as if gpupmd ran with effective ids `uid` and `gid`: the
/// file (followed through symlinks), the directory it is named in and,
/// when that is a symlink, the directory of its target.
pub fn check_as(path: &Path, uid: u32, gid: u32) -> Result<Exposure, ConfigAccessError> {
    let trusted = Trusted { uid, gid };
    let file = check_one(path, trusted)?;
    let real = fs::canonicalize(path).map_err(|source| ConfigAccessError::Stat {
        path: path.to_owned(),
        source,
    })?;
    let named_in = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    check_one(named_in, trusted)?;
    if let Some(dir) = real.parent() {
        check_one(dir, trusted)?;
    }
    let mode = file.mode() & 0o7777;
    Ok(if mode & 0o004 != 0 {
        Exposure::ReadableByOthers { mode }
    } else {
        Exposure::Private
    })
}

#[cfg(test)]
mod tests;
