//! Private scratch directories, removed with whatever FUSE node a crashed
//! process left mounted inside.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use nix::mount::{umount2, MntFlags};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A new empty directory under the system temp dir; removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new directory named after `tag`, this process and a counter.
    pub fn new(tag: &str) -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gpupm-{tag}-{}-{n}", std::process::id()));
        if dir.exists() {
            unmount_below(&dir);
            fs::remove_dir_all(&dir).expect("remove an old scratch dir");
        }
        fs::create_dir_all(&dir).expect("create a scratch dir");
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        unmount_below(&self.0);
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("leaving {}: {e}", self.0.display());
        }
    }
}

/// Lazily unmounts every mount point at or below `dir` (deepest first).
pub fn unmount_below(dir: &Path) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        if let Err(e) = umount2(&p, MntFlags::MNT_DETACH) {
            eprintln!("unmounting {}: {e}", p.display());
        }
    }
}
