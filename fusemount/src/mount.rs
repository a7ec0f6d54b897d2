//! Mounting `/dev/fuse` on a directory and taking such a mount away.
//!
//! Whether something is mounted at a directory, and what, is read from
//! `/proc/self/mountinfo` rather than with `stat`/`statfs` on the directory:
//! those are FUSE requests, and on a mount whose server has not answered
//! `FUSE_INIT` yet (a mount made by `gpupm-mount` whose service never
//! started) they would block. Only a FUSE mount found there is then
//! `stat`ed, to tell a crashed server's mount (`ENOTCONN`) from a live one.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{umount2, MntFlags, MsFlags};

/// Where the kernel's FUSE control file system lists connections.
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// Why a mount could not be made, checked or taken away.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// A system call failed.
    #[error("could not {op} at {dir}")]
    Sys {
        /// What was attempted.
        op: &'static str,
        /// The mount directory.
        dir: PathBuf,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// A FUSE file system that still answers is mounted there.
    #[error("{0} is already a live FUSE mount")]
    AlreadyMounted(PathBuf),
    /// Something other than FUSE is mounted there; it is left alone.
    #[error("{dir} holds a {fstype} mount, not a FUSE one")]
    NotFuse {
        /// The mount directory.
        dir: PathBuf,
        /// Its file-system type.
        fstype: String,
    },
}

fn sys<'a>(op: &'static str, dir: &'a Path) -> impl FnOnce(io::Error) -> MountError + 'a {
    move |source| MountError::Sys {
        op,
        dir: dir.to_owned(),
        source,
    }
}

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// How to mount: the FUSE mount options the nodes use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOptions {
    /// Source shown in the mount table (e.g. `gpupm`).
    pub source: String,
    /// FUSE subtype: the mount's type is `fuse.<subtype>`.
    pub subtype: String,
    /// Permission bits of the mount's root (`rootmode`), also given to the
    /// directory underneath.
    pub mode: u32,
    /// `user_id`: the uid the mount belongs to.
    pub user_id: u32,
    /// `group_id`: the gid the mount belongs to.
    pub group_id: u32,
    /// `allow_other`: users other than `user_id` may access the mount.
    pub allow_other: bool,
    /// `default_permissions`: the kernel checks file modes before asking
    /// the server.
    pub default_permissions: bool,
}

impl MountOptions {
    /// Source and subtype `name`, root mode 0755 owned by root,
    /// `allow_other` and `default_permissions`: what both nodes use.
    pub fn new(name: &str) -> Self {
        MountOptions {
            source: name.to_owned(),
            subtype: name.to_owned(),
            mode: 0o755,
            user_id: 0,
            group_id: 0,
            allow_other: true,
            default_permissions: true,
        }
    }

    /// The mount data string for the `/dev/fuse` descriptor `fd`.
    pub fn data(&self, fd: RawFd) -> String {
        let mut data = format!(
            "fd={fd},rootmode={:o},user_id={},group_id={}",
            libc::S_IFDIR | (self.mode & 0o7777),
            self.user_id,
            self.group_id
        );
        if self.allow_other {
            data.push_str(",allow_other");
        }
        if self.default_permissions {
            data.push_str(",default_permissions");
        }
        data
    }
}

/// Opens `/dev/fuse` and mounts it at `dir` (created if missing) after
/// [`recover_stale_mount`]; returns the descriptor to serve. Needs root.
pub fn mount(dir: &Path, opts: &MountOptions) -> Result<OwnedFd, MountError> {
    recover_stale_mount(dir)?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(opts.mode)
        .create(dir)
        .map_err(sys("create the mount directory", dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(opts.mode))
        .map_err(sys("set the mount directory's mode", dir))?;
    let fuse = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(sys("open /dev/fuse", dir))?;
    let fd = OwnedFd::from(fuse);
    let data = opts.data(fd.as_raw_fd());
    let fstype = format!("fuse.{}", opts.subtype);
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    nix::mount::mount(
        Some(opts.source.as_str()),
        dir,
        Some(fstype.as_str()),
        flags,
        Some(data.as_str()),
    )
    .map_err(|e| sys("mount", dir)(errno(e)))?;
    Ok(fd)
}

/// A second `/dev/fuse` descriptor of the connection of `fd` (a mounted
/// `/dev/fuse` descriptor, fresh or inherited), made with
/// `FUSE_DEV_IOC_CLONE` (Linux 4.5+): a server can read requests on each
/// clone from its own thread. Closing a clone leaves the connection alone
/// while another of its descriptors stays open. Fails where `/dev/fuse`
/// cannot be opened (e.g. a sandbox's private `/dev`).
pub fn clone_device(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    crate::sys::clone_fuse_device(fd)
}

/// Detaches a FUSE mount left at `dir` by a crashed server (`ENOTCONN`),
/// and refuses one that still answers. Anything else is left as it is.
pub fn recover_stale_mount(dir: &Path) -> Result<(), MountError> {
    // Repeated crashes can leave several dead mounts stacked on `dir`.
    for _ in 0..16 {
        match mount_at(dir)? {
            Some(entry) if entry.is_fuse() => {}
            _ => return Ok(()),
        }
        if !server_gone(dir) {
            return Err(MountError::AlreadyMounted(dir.to_owned()));
        }
        tracing::warn!(dir = %dir.display(), "stale mount from a crashed instance; detaching it");
        umount2(dir, MntFlags::MNT_DETACH)
            .map_err(|e| sys("detach the stale mount", dir)(errno(e)))?;
    }
    Err(sys("detach stale mounts", dir)(
        io::Error::from_raw_os_error(libc::ENOTCONN),
    ))
}

/// Whether the FUSE mount at `dir` lost its server (ENOTCONN). `statfs`
/// is asked first: the kernel may answer `stat` of a dead mount's root from
/// its attribute cache, while `statfs` always reaches the connection.
fn server_gone(dir: &Path) -> bool {
    matches!(
        nix::sys::statfs::statfs(dir),
        Err(nix::errno::Errno::ENOTCONN)
    ) || fs::metadata(dir).is_err_and(|e| e.raw_os_error() == Some(libc::ENOTCONN))
}

/// A detached FUSE mount's kernel connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    id: u32,
}

impl Connection {
    /// The connection's number under `/sys/fs/fuse/connections`.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Aborts the connection through fusectl, so that requests of files
    /// still open fail instead of waiting for a server. Returns whether it
    /// could (fusectl may not be mounted; the connection may be gone).
    pub fn abort(&self) -> bool {
        let path = format!("{FUSECTL}/{}/abort", self.id);
        match fs::write(&path, b"1") {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(path, error = %e, "could not abort the FUSE connection");
                false
            }
        }
    }
}

/// Lazily detaches the FUSE mount at `dir` (`MNT_DETACH`: files still open
/// keep working until closed or until the connection is aborted). `None`
/// when nothing is mounted there; a mount of another type is refused.
pub fn detach(dir: &Path) -> Result<Option<Connection>, MountError> {
    let Some(entry) = mount_at(dir)? else {
        return Ok(None);
    };
    if !entry.is_fuse() {
        return Err(MountError::NotFuse {
            dir: dir.to_owned(),
            fstype: entry.fstype,
        });
    }
    match umount2(dir, MntFlags::MNT_DETACH) {
        Ok(()) => Ok(Some(Connection { id: entry.dev })),
        // Unmounted by someone else since mountinfo was read.
        Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(None),
        Err(e) => Err(sys("unmount", dir)(errno(e))),
    }
}

/// Detaches the FUSE mount at `dir` and aborts its connection: for a mount
/// whose server is gone. Returns whether anything was mounted; unmounting
/// nothing is not an error.
pub fn unmount(dir: &Path) -> Result<bool, MountError> {
    let Some(conn) = detach(dir)? else {
        return Ok(false);
    };
    conn.abort();
    Ok(true)
}

/// Whether anything is mounted at `dir`, per `/proc/self/mountinfo` (no
/// request reaches a FUSE mount there, so a dead server cannot block it).
pub fn is_mounted(dir: &Path) -> Result<bool, MountError> {
    Ok(mount_at(dir)?.is_some())
}

/// The file-system type (`fuse.gpupm-node`, `tmpfs`, ...) of the topmost
/// mount at `dir`, per `/proc/self/mountinfo`; `None` when nothing is
/// mounted there.
pub fn mount_type(dir: &Path) -> Result<Option<String>, MountError> {
    Ok(mount_at(dir)?.map(|m| m.fstype))
}

/// One line of `/proc/self/mountinfo`, the parts used here.
#[derive(Debug, PartialEq, Eq)]
struct MountEntry {
    /// Device number in the kernel's encoding (the fusectl connection id).
    dev: u32,
    fstype: String,
}

impl MountEntry {
    fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.")
    }
}

/// The topmost mount at `dir`, per `/proc/self/mountinfo`.
fn mount_at(dir: &Path) -> Result<Option<MountEntry>, MountError> {
    let Some(path) = absolute_without_last_lookup(dir) else {
        return Ok(None);
    };
    let info = fs::read_to_string("/proc/self/mountinfo")
        .map_err(sys("read /proc/self/mountinfo", dir))?;
    Ok(find_mount(&info, &path))
}

/// `dir` made absolute by resolving its parent only: the last component may
/// be a FUSE mount whose lookup would block or fail. `None` when the parent
/// does not exist (so nothing can be mounted there).
fn absolute_without_last_lookup(dir: &Path) -> Option<PathBuf> {
    match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            Some(fs::canonicalize(parent).ok()?.join(name))
        }
        _ => fs::canonicalize(dir).ok(),
    }
}

/// The last (topmost) entry of mountinfo text `info` mounted at `path`.
fn find_mount(info: &str, path: &Path) -> Option<MountEntry> {
    let path = path.to_str()?;
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        if unescape(fields.get(4)?) != path {
            return None;
        }
        let (major, minor) = fields.get(2)?.split_once(':')?;
        let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
        let sep = fields.iter().position(|f| *f == "-")?;
        Some(MountEntry {
            dev: (major << 20) | minor,
            fstype: (*fields.get(sep + 1)?).to_owned(),
        })
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:52 / /run/gpupm/dev rw,nosuid,nodev,noexec,relatime shared:20 - fuse.gpupm gpupm rw,user_id=0
41 22 0:53 / /tmp/with\\040space rw - tmpfs tmpfs rw
42 40 0:54 / /run/gpupm/dev rw - fuse.gpupm-node gpupm-node rw,user_id=0
";

    #[test]
    fn mountinfo_lookup_takes_the_topmost_mount_and_unescapes_paths() {
        let top = find_mount(INFO, Path::new("/run/gpupm/dev")).unwrap();
        assert_eq!(top.dev, 54);
        assert_eq!(top.fstype, "fuse.gpupm-node");
        assert!(top.is_fuse());
        let spaced = find_mount(INFO, Path::new("/tmp/with space")).unwrap();
        assert_eq!((spaced.dev, spaced.is_fuse()), (53, false));
        assert_eq!(find_mount(INFO, Path::new("/run/gpupm")), None);
    }

    #[test]
    fn mount_data_carries_every_option() {
        let mut o = MountOptions::new("gpupm");
        assert_eq!(
            o.data(7),
            "fd=7,rootmode=40755,user_id=0,group_id=0,allow_other,default_permissions"
        );
        o.mode = 0o700;
        o.user_id = 5;
        o.group_id = 6;
        o.allow_other = false;
        o.default_permissions = false;
        assert_eq!(o.data(3), "fd=3,rootmode=40700,user_id=5,group_id=6");
    }

    #[test]
    fn nothing_is_mounted_under_a_missing_parent() {
        let dir = Path::new("/nonexistent-gpupm-parent/dir");
        assert_eq!(mount_at(dir).unwrap(), None);
        assert!(detach(dir).unwrap().is_none());
        recover_stale_mount(dir).unwrap();
    }
}
