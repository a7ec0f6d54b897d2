//! The guest's root file system: a staging directory packed by Debian's
//! `cpio` (`-H newc`, owner forced to root), uncompressed — the kernel
//! unpacks it as is, and compression would only cost time on both sides.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// An image being assembled.
#[derive(Debug)]
pub struct Initramfs {
    root: PathBuf,
    libs: BTreeSet<PathBuf>,
}

fn io(what: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", what.display())
}

impl Initramfs {
    /// Starts an empty image under `root` (removed first).
    pub fn new(root: &Path) -> Result<Initramfs, String> {
        if root.exists() {
            fs::remove_dir_all(root).map_err(|e| io(root, e))?;
        }
        for d in [
            "bin",
            "sbin",
            "usr/bin",
            "etc",
            "proc",
            "sys",
            "dev",
            "run",
            "tmp",
            "var/lib/gpupm",
            "lib/modules",
        ] {
            fs::create_dir_all(root.join(d)).map_err(|e| io(root, e))?;
        }
        Ok(Initramfs {
            root: root.to_path_buf(),
            libs: BTreeSet::new(),
        })
    }

    fn dest(&self, at: &str) -> Result<PathBuf, String> {
        let dest = self.root.join(at.trim_start_matches('/'));
        if let Some(dir) = dest.parent() {
            fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        Ok(dest)
    }

    /// Copies `src` to `at` with `mode`.
    pub fn file(&mut self, src: &Path, at: &str, mode: u32) -> Result<(), String> {
        let dest = self.dest(at)?;
        fs::copy(src, &dest).map_err(|e| io(src, e))?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(mode)).map_err(|e| io(&dest, e))
    }

    /// Writes `text` to `at` with `mode`.
    pub fn text(&mut self, at: &str, text: &str, mode: u32) -> Result<(), String> {
        let dest = self.dest(at)?;
        fs::write(&dest, text).map_err(|e| io(&dest, e))?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(mode)).map_err(|e| io(&dest, e))
    }

    /// Copies a dynamically linked program to `at`, with every shared
    /// library `ldd` resolves for it (at the same paths) and its loader.
    pub fn program(&mut self, src: &Path, at: &str) -> Result<(), String> {
        self.file(src, at, 0o755)?;
        let out = Command::new("ldd")
            .arg(src)
            .output()
            .map_err(|e| format!("ldd: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() && !text.contains("not a dynamic executable") {
            return Err(format!("ldd {} failed: {text}", src.display()));
        }
        for line in text.lines() {
            if line.contains("not found") {
                return Err(format!("{}: a library is missing: {line}", src.display()));
            }
            // "libx.so => /lib/.../libx.so (0x…)" or "/lib64/ld-linux….so.2 (0x…)"
            let path = line
                .split("=>")
                .last()
                .and_then(|p| p.split_whitespace().next())
                .filter(|p| p.starts_with('/'));
            if let Some(p) = path {
                self.libs.insert(PathBuf::from(p));
            }
        }
        Ok(())
    }

    /// Copies kernel modules (with what `modules.dep` says they need, in
    /// load order) from `modules_dir`; returns their image paths in the
    /// order to `insmod` them.
    pub fn modules(&mut self, modules_dir: &Path, names: &[&str]) -> Result<Vec<String>, String> {
        let dep_file = modules_dir.join("modules.dep");
        let deps = fs::read_to_string(&dep_file).map_err(|e| io(&dep_file, e))?;
        let mut order = Vec::new();
        for name in names {
            let want = format!("/{name}.ko");
            let line = deps
                .lines()
                .find(|l| l.split(':').next().is_some_and(|m| m.ends_with(&want)))
                .ok_or_else(|| format!("{name}.ko is not in {}", dep_file.display()))?;
            let (module, needs) = line.split_once(':').unwrap_or((line, ""));
            // modules.dep lists dependencies deepest last: load them reversed.
            for m in needs.split_whitespace().rev().chain([module]) {
                let at = format!("/lib/modules/{m}");
                if !order.contains(&at) {
                    self.file(&modules_dir.join(m), &at, 0o644)?;
                    order.push(at);
                }
            }
        }
        Ok(order)
    }

    /// Packs the image into `out`.
    pub fn pack(mut self, out: &Path) -> Result<u64, String> {
        for lib in std::mem::take(&mut self.libs) {
            let real = fs::canonicalize(&lib).map_err(|e| io(&lib, e))?;
            self.file(&real, &lib.to_string_lossy(), 0o755)?;
        }
        let mut list = Vec::new();
        collect(&self.root, &self.root, &mut list)?;
        list.sort();
        let file = fs::File::create(out).map_err(|e| io(out, e))?;
        let mut cpio = Command::new("cpio")
            .args(["-o", "-H", "newc", "--quiet", "-R", "0:0"])
            .current_dir(&self.root)
            .stdin(Stdio::piped())
            .stdout(file)
            .spawn()
            .map_err(|e| format!("cpio (install Debian's cpio): {e}"))?;
        {
            use std::io::Write;
            let mut stdin = cpio.stdin.take().ok_or("cpio stdin")?;
            stdin
                .write_all((list.join("\n") + "\n").as_bytes())
                .map_err(|e| format!("cpio: {e}"))?;
        }
        let st = cpio.wait().map_err(|e| format!("cpio: {e}"))?;
        if !st.success() {
            return Err(format!("cpio failed: {st}"));
        }
        fs::metadata(out).map(|m| m.len()).map_err(|e| io(out, e))
    }
}

/// Every path under `dir`, relative to `root`, directories first.
fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), String> {
    for entry in fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        let rel = path.strip_prefix(root).map_err(|e| e.to_string())?;
        out.push(rel.to_string_lossy().into_owned());
        if path.is_dir() && !path.is_symlink() {
            collect(root, &path, out)?;
        }
    }
    Ok(())
}
