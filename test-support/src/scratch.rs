//! A test's private directory: a fresh random name (`tempfile`), removed
//! on drop after every FUSE mount a test left in it is taken away, found
//! through `gpupm-fusemount`'s mountinfo parsing (which never sends a
//! request to the mount, so a dead server cannot block the cleanup).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::mount::{umount2, MntFlags};

/// A scratch directory (mode 0755, so other users can reach the nodes in
/// it), removed on drop.
#[derive(Debug)]
pub struct Scratch(Option<tempfile::TempDir>);

impl Scratch {
    /// A new empty directory `gpupm-TAG-…` under the system temp dir.
    pub fn new(tag: &str) -> Scratch {
        Scratch::with_mode(tag, 0o755)
    }

    /// A new directory anyone may write to (sticky, `01777`): tenants run
    /// as other users write their recordings there.
    pub fn world_writable(tag: &str) -> Scratch {
        Scratch::with_mode(tag, 0o1777)
    }

    fn with_mode(tag: &str, mode: u32) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(&format!("gpupm-{tag}-"))
            .permissions(fs::Permissions::from_mode(mode))
            .tempdir()
            .expect("create a scratch dir");
        // The umask may have cleared bits of `mode`.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(mode))
            .expect("chmod the scratch dir");
        Scratch(Some(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.0.as_ref().expect("live scratch dir").path()
    }

    /// A path inside.
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path().join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let Some(dir) = self.0.take() else { return };
        unmount_below(dir.path(), 3);
        let shown = dir.path().display().to_string();
        if let Err(e) = dir.close() {
            eprintln!("leaving {shown}: {e}");
        }
    }
}

/// Unmounts every mount on a directory up to `depth` levels below `dir`
/// (the entries' types come from the directory listing, so no mount point
/// is `stat`ed).
fn unmount_below(dir: &Path, depth: u32) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        force_unmount(&path);
        if depth > 1 {
            unmount_below(&path, depth - 1);
        }
    }
}

/// Whether anything is mounted at `dir`.
pub fn is_mounted(dir: &Path) -> bool {
    gpupm_fusemount::is_mounted(dir).unwrap_or_else(|e| panic!("mountinfo: {e}"))
}

/// The file-system type of the topmost mount at `dir`, if any.
pub fn mount_type(dir: &Path) -> Option<String> {
    gpupm_fusemount::mount_type(dir).unwrap_or_else(|e| panic!("mountinfo: {e}"))
}

/// Takes every mount at `dir` away, topmost first: a FUSE mount is
/// detached and its connection aborted, any other only detached.
pub fn force_unmount(dir: &Path) {
    loop {
        let taken = match gpupm_fusemount::unmount(dir) {
            Err(gpupm_fusemount::MountError::NotFuse { .. }) => {
                umount2(dir, MntFlags::MNT_DETACH).map_err(|e| e.to_string())
            }
            Ok(true) => Ok(()),
            Ok(false) => return,
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = taken {
            eprintln!("could not unmount {}: {e}", dir.display());
            return;
        }
    }
}
