//! Boots systemd as PID 1 of a `systemd-nspawn` container, for tests of
//! the units and the package under a real service manager (the test
//! hosts' PID 1 is not systemd).
//!
//! `--register=no --keep-unit` (the host has no systemd: no machined, no
//! bus), `--private-network`, `/dev/fuse` bound in, nspawn in a cgroup of
//! its own made here (it splits its cgroup into `payload` and
//! `supervisor`) and removed after; readiness from nspawn's `READY=1`
//! (`--notify-ready=yes`: the container's systemd finished booting);
//! commands run with `nsenter` into the leader's namespaces. Which tree
//! boots, and how it is made writable, is the caller's [`Tree`].
//!
//! Needs root, `systemd-nspawn` (Debian `systemd-container`) and `nsenter`
//! (`util-linux`); without them it fails with the reason.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpupm_fusemount::notify::NotifyListener;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Longest boot.
pub const BOOT: Duration = Duration::from_secs(60);
/// Longest shutdown before the container is killed.
const SHUTDOWN: Duration = Duration::from_secs(30);

/// What the container boots.
#[derive(Clone, Debug)]
pub enum Tree {
    /// The host's own `/usr` (read-only) under a tmpfs root
    /// (`--directory=/ --volatile=yes`).
    HostUsr,
    /// A separate OS tree, read-only under a tmpfs overlay
    /// (`--volatile=overlay`): every boot starts from the same tree, and
    /// nothing a boot does reaches it.
    Overlay(PathBuf),
}

pub use gpupm_test_support::require_tool;

/// A booted container; powered off (or killed) on drop.
#[derive(Debug)]
pub struct Container {
    machine: String,
    work: PathBuf,
    nspawn: Option<Child>,
    leader: Pid,
    nsenter: PathBuf,
    /// Directories under the host's `/run/systemd` that nspawn created and
    /// does not remove (`/run` is not a tmpfs on these hosts).
    run_dirs: Vec<PathBuf>,
    // Dropped after the container is gone.
    _cgroups: Cgroups,
}

impl Container {
    /// Boots `tree` with the further nspawn arguments `extra` (binds,
    /// overlays) and returns once its systemd has finished booting. `work`
    /// (the caller's) receives nspawn's notify socket and log; `name` names
    /// the machine.
    pub fn boot(tree: &Tree, extra: &[OsString], work: &Path, name: &str) -> Container {
        assert!(
            nix::unistd::geteuid().is_root(),
            "booting a container needs root"
        );
        let nspawn = require_tool("systemd-nspawn", "systemd-container");
        let nsenter = require_tool("nsenter", "util-linux");
        let machine = format!("{name}-{}", std::process::id());
        let run_dirs: Vec<PathBuf> = [
            "/run/systemd/nspawn-root",
            "/run/systemd/nspawn/propagate",
            "/run/systemd/nspawn/locks",
            "/run/systemd/nspawn",
        ]
        .iter()
        .map(PathBuf::from)
        .filter(|d| !d.exists())
        .collect();
        let cgroups = Cgroups::create(&machine);
        let notify_path = work.join("nspawn-notify.sock");
        let notify = NotifyListener::bind(&notify_path).expect("bind the notify socket");
        let log = fs::File::create(work.join("nspawn.log")).expect("create the nspawn log");
        let root: [OsString; 2] = match tree {
            Tree::HostUsr => ["--directory=/".into(), "--volatile=yes".into()],
            Tree::Overlay(dir) => [
                format!("--directory={}", dir.display()).into(),
                "--volatile=overlay".into(),
            ],
        };
        let child = Command::new("sh")
            .arg("-c")
            .arg(cgroups.enter_then_exec())
            .arg("sh")
            .arg(nspawn)
            .arg("--quiet")
            .args(root)
            .args(["--register=no", "--keep-unit", "--private-network"])
            .arg(format!("--machine={machine}"))
            .args(["--boot", "--console=pipe", "--notify-ready=yes"])
            .arg("--bind=/dev/fuse")
            .args(extra)
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn systemd-nspawn");
        let mut c = Container {
            machine,
            work: work.to_path_buf(),
            nspawn: Some(child),
            leader: Pid::from_raw(0),
            nsenter,
            run_dirs,
            _cgroups: cgroups,
        };
        c.leader = c.wait_booted(&notify);
        c
    }

    /// Reads nspawn's notifications until `READY=1`; returns the leader's
    /// pid (`X_NSPAWN_LEADER_PID=`).
    fn wait_booted(&mut self, notify: &NotifyListener) -> Pid {
        let nspawn = &mut self.nspawn;
        let mut leader = None;
        let ready = notify.wait_until(
            "READY=1",
            BOOT,
            || {
                nspawn
                    .as_mut()
                    .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
            },
            |n| {
                if let Some(pid) = n.get("X_NSPAWN_LEADER_PID") {
                    leader = Some(Pid::from_raw(pid.parse().expect("a leader pid")));
                }
                n.has("READY=1")
            },
        );
        if let Err(e) = ready {
            panic!("the container did not boot: {e}:\n{}", self.nspawn_log());
        }
        leader.unwrap_or_else(|| panic!("READY=1 without X_NSPAWN_LEADER_PID"))
    }

    /// nspawn's output so far.
    pub fn nspawn_log(&self) -> String {
        fs::read_to_string(self.work.join("nspawn.log")).unwrap_or_default()
    }

    /// Runs `args` inside the container (its mount, pid, uts, ipc and
    /// network namespaces) as root, with a plain environment.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.nsenter)
            .arg(format!("--target={}", self.leader))
            .args(["--mount", "--pid", "--uts", "--ipc", "--net", "--"])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("SYSTEMD_PAGER", "")
            .env("SYSTEMD_COLORS", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("nsenter {args:?}: {e}"))
    }

    /// [`Container::run`] that must succeed; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        if !out.status.success() {
            // A unit that failed says why in the journal only.
            let journal = if args.first() == Some(&"systemctl") {
                let j = self.run(&[
                    "journalctl",
                    "--no-pager",
                    "-n",
                    "40",
                    "-o",
                    "short-monotonic",
                ]);
                String::from_utf8_lossy(&j.stdout).into_owned()
            } else {
                String::new()
            };
            panic!(
                "{args:?} in the container: {}\nstdout: {}\nstderr: {}\n{journal}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What `systemctl show` says of `unit`'s `properties`.
    pub fn unit_properties(&self, unit: &str, properties: &[&str]) -> UnitProperties {
        UnitProperties(self.ok(&["systemctl", "show", "-p", &properties.join(","), unit]))
    }

    /// `path` inside the container as the host reaches it (through the
    /// leader's root).
    pub fn host_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.leader)).join(path.trim_start_matches('/'))
    }

    /// Copies the host file `from` to `to` inside the container.
    pub fn copy_in(&self, from: &Path, to: &str) {
        let dest = self.host_path(to);
        fs::copy(from, &dest)
            .unwrap_or_else(|e| panic!("copy {} to {to} in the container: {e}", from.display()));
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(mut nspawn) = self.nspawn.take() {
            // SIGTERM: nspawn asks the container's systemd to power off.
            let pid = Pid::from_raw(i32::try_from(nspawn.id()).expect("a pid fits i32"));
            if let Err(e) = kill(pid, Signal::SIGTERM) {
                eprintln!("SIGTERM to systemd-nspawn {pid}: {e}");
            }
            let deadline = Instant::now() + SHUTDOWN;
            while nspawn.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if nspawn.try_wait().ok().flatten().is_none() {
                eprintln!("the container did not power off; killing it");
                // The leader is the container's PID 1: killing it ends the
                // whole pid namespace.
                if self.leader.as_raw() > 0 {
                    if let Err(e) = kill(self.leader, Signal::SIGKILL) {
                        eprintln!("SIGKILL to the container leader {}: {e}", self.leader);
                    }
                }
                if let Err(e) = nspawn.kill() {
                    eprintln!("SIGKILL to systemd-nspawn: {e}");
                }
            }
            if let Err(e) = nspawn.wait() {
                eprintln!("reaping systemd-nspawn: {e}");
            }
        }
        let propagate = Path::new("/run/systemd/nspawn/propagate").join(&self.machine);
        if let Err(e) = fs::remove_dir_all(&propagate) {
            if e.kind() != io::ErrorKind::NotFound {
                eprintln!("leaving {}: {e}", propagate.display());
            }
        }
        for d in &self.run_dirs {
            // Only when empty: another nspawn may have started meanwhile.
            match fs::remove_dir(d) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    eprintln!("leaving {}: {e}", d.display());
                }
                _ => {}
            }
        }
    }
}

/// Cgroups made for nspawn under this process's own (v2 and, on a hybrid
/// host, the `name=systemd` v1 one; nspawn splits its cgroup into
/// `payload` and `supervisor`), removed on drop with what nspawn and the
/// container's systemd left in them.
#[derive(Debug)]
struct Cgroups(Vec<PathBuf>);

impl Cgroups {
    fn create(name: &str) -> Cgroups {
        let own = fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup");
        let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let mount_of = |want: &dyn Fn(&str, &str) -> bool| {
            mounts.lines().find_map(|l| {
                let (pre, post) = l.split_once(" - ")?;
                let mut post = post.split(' ');
                let (fstype, opts) = (post.next()?, post.nth(1)?);
                want(fstype, opts).then(|| PathBuf::from(pre.split(' ').nth(4).unwrap_or("/")))
            })
        };
        let mut dirs = Vec::new();
        for line in own.lines() {
            let mut f = line.splitn(3, ':');
            let (id, ctrl, path) = (f.next(), f.next(), f.next());
            let root = match (id, ctrl) {
                (Some("0"), Some("")) => mount_of(&|t, _| t == "cgroup2"),
                (_, Some("name=systemd")) => {
                    mount_of(&|t, o| t == "cgroup" && o.split(',').any(|o| o == "name=systemd"))
                }
                _ => continue,
            };
            let root = root.unwrap_or_else(|| panic!("no mount for cgroup line {line:?}"));
            let dir = root
                .join(path.unwrap_or("/").trim_start_matches('/'))
                .join(name);
            fs::create_dir(&dir).unwrap_or_else(|e| panic!("create cgroup {}: {e}", dir.display()));
            dirs.push(dir);
        }
        assert!(!dirs.is_empty(), "no cgroup hierarchy for nspawn:\n{own}");
        Cgroups(dirs)
    }

    /// A shell script that moves the shell into every cgroup, then runs
    /// `"$@"`.
    fn enter_then_exec(&self) -> String {
        let mut sh: String = self
            .0
            .iter()
            .map(|d| format!("echo $$ > '{}/cgroup.procs' && ", d.display()))
            .collect();
        sh.push_str("exec \"$@\"");
        sh
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for dir in &self.0 {
            // Children first; a cgroup with processes left refuses (EBUSY).
            let mut all = Vec::new();
            collect_dirs(dir, &mut all);
            for d in all.iter().rev() {
                if let Err(e) = fs::remove_dir(d) {
                    eprintln!("leaving cgroup {}: {e}", d.display());
                }
            }
        }
    }
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

/// `systemctl show` output: one `Name=value` line a property.
#[derive(Debug)]
pub struct UnitProperties(String);

impl UnitProperties {
    /// The value of property `name` ("" when it was not shown).
    pub fn get(&self, name: &str) -> &str {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or("")
    }

    /// The value of numeric property `name` (0 when not shown or not a
    /// number, as systemd shows `[not set]`).
    pub fn number(&self, name: &str) -> u32 {
        self.get(name).parse().unwrap_or(0)
    }
}
