//! The Debian package as `scripts/build-deb` makes it, taken apart with
//! `dpkg-deb`, and what `lintian` says about it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{repo, require_tool};
use gpupm_test_support::Scratch;

/// The package's Debian version: the workspace version, revision 1.
pub fn deb_version() -> String {
    format!("{}-1", env!("CARGO_PKG_VERSION"))
}

/// A built package.
#[derive(Debug)]
pub struct Package {
    /// The `.deb`.
    pub path: PathBuf,
    /// How long `scripts/build-deb` took (a no-op build when up to date).
    pub build_time: Duration,
}

/// Builds the package once per test process with `scripts/build-deb`.
pub fn build() -> &'static Package {
    static PKG: OnceLock<Package> = OnceLock::new();
    PKG.get_or_init(|| {
        require_tool(
            "cargo-deb",
            "cargo-deb (cargo install, see scripts/test-all)",
        );
        require_tool("help2man", "help2man");
        let t0 = Instant::now();
        let out = Command::new(repo().join("scripts/build-deb"))
            .current_dir(repo())
            .output()
            .expect("run scripts/build-deb");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "scripts/build-deb: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        let want = format!("gpupm_{}_amd64.deb", deb_version());
        assert!(
            path.is_file() && path.file_name().is_some_and(|n| n == want.as_str()),
            "scripts/build-deb did not print the path of {want}: {stdout}"
        );
        Package {
            path,
            build_time: t0.elapsed(),
        }
    })
}

/// `dpkg-deb ARGS` that must succeed; stdout.
pub fn dpkg_deb(args: &[&str]) -> String {
    let out = Command::new(require_tool("dpkg-deb", "dpkg"))
        .args(args)
        .output()
        .expect("run dpkg-deb");
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The package unpacked: its file tree and its control files.
#[derive(Debug)]
pub struct Unpacked {
    dir: Scratch,
}

impl Unpacked {
    /// Unpacks `deb` (`dpkg-deb -x` and `-e`).
    pub fn new(deb: &Path) -> Unpacked {
        let dir = Scratch::new("deb");
        let deb = deb.to_str().expect("a UTF-8 path");
        dpkg_deb(&["-x", deb, dir.join("root").to_str().expect("UTF-8")]);
        dpkg_deb(&["-e", deb, dir.join("DEBIAN").to_str().expect("UTF-8")]);
        Unpacked { dir }
    }

    /// A file of the tree (`path` absolute as installed).
    pub fn file(&self, path: &str) -> PathBuf {
        self.dir.join("root").join(path.trim_start_matches('/'))
    }

    /// A control file (`control`, `conffiles`, `postinst`, …) as text.
    pub fn control(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join("DEBIAN").join(name))
            .unwrap_or_else(|e| panic!("control file {name}: {e}"))
    }

    /// The path of a control file.
    pub fn control_path(&self, name: &str) -> PathBuf {
        self.dir.join("DEBIAN").join(name)
    }

    /// Every regular file of the tree, as installed paths.
    pub fn files(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        collect(&self.dir.join("root"), "", &mut out);
        out
    }
}

fn collect(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    for entry in fs::read_dir(dir).expect("read the unpacked tree").flatten() {
        let name = format!("{prefix}/{}", entry.file_name().to_string_lossy());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect(&entry.path(), &name, out);
        } else {
            out.insert(name);
        }
    }
}

/// One lintian finding: severity letter, tag, context.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// `E`, `W`, `I`, `P`, `X` or `O`.
    pub severity: char,
    /// The tag.
    pub tag: String,
    /// What it is about (may be empty).
    pub context: String,
}

/// Runs lintian on `deb` at every display level: (findings, full output).
pub fn lintian(deb: &Path) -> (Vec<Finding>, String) {
    let out = Command::new(require_tool("lintian", "lintian"))
        .arg("--display-level")
        .arg(">=pedantic")
        .arg(deb)
        .output()
        .expect("run lintian");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // Exit status 1 only means "some tag at error level or above": the
    // findings say which.
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "lintian failed: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let findings = text
        .lines()
        .filter_map(|l| {
            let (sev, rest) = l.split_once(": ")?;
            let rest = rest.strip_prefix("gpupm: ")?;
            let (tag, context) = rest.split_once(' ').unwrap_or((rest, ""));
            Some(Finding {
                severity: sev.chars().next()?,
                tag: tag.to_owned(),
                context: context.to_owned(),
            })
        })
        .collect();
    (findings, text)
}

/// The lintian warnings `docs/operations.md` lists as staying: the first
/// column (a `tag`) of the table under the heading "Lintian warnings".
pub fn documented_lintian_warnings() -> BTreeSet<String> {
    let doc = fs::read_to_string(repo().join("docs/operations.md")).expect("docs/operations.md");
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Lintian warnings"))
        .expect("docs/operations.md has a \"Lintian warnings\" section");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`'))
        .map(|(tag, _)| tag.to_owned())
        .collect()
}
