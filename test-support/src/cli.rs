//! The CLI tests' fixture: the real `gpupm-driver` (step clock, built-in
//! scenario) and the real `gpupmd` (a private config mapping two numeric
//! tenant uids to VMs) on a private directory, each started with a
//! `NOTIFY_SOCKET` the test owns; `gpupm` runs as a process, as root or as
//! a tenant through `setpriv`.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use gpupm_client::DevNode;

use crate::device::ledger_ri;
use crate::process::Proc;
use crate::scratch::Scratch;
use crate::users::{Cred, Run};
use crate::{bin, device};

/// Tenant uid mapped to VM [`VM_A`].
pub const UID_A: u32 = 47001;
/// Tenant uid mapped to VM [`VM_B`].
pub const UID_B: u32 = 47002;
/// A uid mapped to nothing.
pub const UID_NOBODY: u32 = 47009;
/// VM of tenant A (built-in scenario).
pub const VM_A: u32 = 2;
/// VM of tenant B.
pub const VM_B: u32 = 5;
/// Tenant uid mapped to VM 1 (alone on partition 1) by
/// [`Fixture::start_with_tenants`].
pub const UID_VM1: u32 = 47003;
/// Tenant uid mapped to VM 3 (time-sliced with VM 2 on partition 2) by
/// [`Fixture::start_with_tenants`].
pub const UID_VM3: u32 = 47005;
/// Tenant uid mapped to VM 4 (confidential, alone on partition 3) by
/// [`Fixture::start_with_tenants`].
pub const UID_VM4: u32 = 47004;

/// A VM's device counts by event name as `gpupm stat --json` prints
/// them: in each event's unit (a multi-bit event's count times its scale,
/// `gpupm events`), device-level events left out (`<not supported>` for a
/// VM).
pub fn vm_events_as_stat_prints(counts: &[u64]) -> std::collections::BTreeMap<String, u64> {
    use gpupm_uapi::events::{Scope, CATALOGUE};
    CATALOGUE
        .iter()
        .filter(|e| e.unit.scope() != Scope::Device)
        .map(|e| {
            let count = counts.get(usize::from(e.id)).copied().unwrap_or(0);
            (e.name.to_string(), count * e.scale())
        })
        .collect()
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Driver + daemon with two tenants.
#[derive(Debug)]
pub struct Fixture {
    /// The daemon (dropped first).
    pub daemon: Proc,
    /// The driver.
    pub driver: Proc,
    /// The device node.
    pub dev: DevNode,
    /// Configured partitions.
    pub parts: Vec<u32>,
    /// Daemon config path.
    pub config: PathBuf,
    /// Metrics port.
    pub metrics_port: u16,
    /// Scratch directory (dropped last).
    pub tmp: Scratch,
}

impl Fixture {
    /// Starts both processes.
    pub fn start(tag: &str) -> Fixture {
        Fixture::start_with(tag, &[])
    }

    /// Like [`Fixture::start`], with further `gpupm-driver` arguments
    /// (e.g. `--debug-ledger`).
    pub fn start_with(tag: &str, driver_args: &[&str]) -> Fixture {
        Fixture::start_with_tenants(tag, driver_args, &[])
    }

    /// Like [`Fixture::start_with`], mapping further `(vm, uid)` tenants.
    pub fn start_with_tenants(tag: &str, driver_args: &[&str], more: &[(u32, u32)]) -> Fixture {
        crate::require_root_and_fuse("the gpupm CLI tests");
        let tmp = Scratch::world_writable(&format!("cli-{tag}"));
        // The device has an identity, as an installed one does: its
        // confidential VMs' tenants can establish sessions.
        let identity = tmp.join("device-identity");
        crate::cc::provision_identity(&identity);
        let mut cmd = Command::new(bin!(Driver));
        cmd.args(["--clock", "step", "--node-dir"])
            .arg(tmp.join("dev"))
            .arg("--identity")
            .arg(&identity)
            .args(driver_args);
        let driver = Proc::start("driver", cmd, tmp.path());
        let metrics_port = free_port();
        let config = tmp.join("gpupmd.toml");
        let more: String = more
            .iter()
            .map(|(vm, uid)| format!("[[tenant]]\nvm = {vm}\nuid = {uid}\n"))
            .collect();
        fs::write(
            &config,
            format!(
                "node_dir = {:?}\ntenant_dir = {:?}\nstate_dir = {:?}\n\
                 [[tenant]]\nvm = {VM_A}\nuid = {UID_A}\n[[tenant]]\nvm = {VM_B}\nuid = {UID_B}\n{more}\
                 [stream]\nwatermark = 16\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n[health]\njournal_socket = {:?}\n\
                 [pages]\ndir = {:?}\n",
                tmp.join("dev"),
                tmp.join("tenant"),
                tmp.join("state"),
                tmp.join("no-journal"),
                tmp.join("pages")
            ),
        )
        .expect("config");
        let mut cmd = Command::new(bin!(Daemon));
        cmd.arg("--config").arg(&config);
        let daemon = Proc::start("gpupmd", cmd, tmp.path());
        let dev = DevNode::open(&tmp.join("dev")).expect("card0");
        let parts = device::partitions(&dev);
        Fixture {
            daemon,
            driver,
            dev,
            parts,
            config,
            metrics_port,
            tmp,
        }
    }

    /// Tenant node path.
    pub fn node(&self) -> String {
        self.tmp.join("tenant/node").display().to_string()
    }

    /// Node directory.
    pub fn node_dir(&self) -> String {
        self.tmp.join("dev").display().to_string()
    }

    /// The daemon's page socket.
    pub fn pages_socket(&self) -> String {
        self.tmp.join("pages/socket").display().to_string()
    }

    /// Advances device time by `ms` in 1 ms chunks, letting the daemon
    /// finish every handshake after each chunk.
    pub fn advance_ms(&mut self, ms: u64) {
        for _ in 0..ms {
            self.dev.advance(1_980_000).expect("advance");
            self.wait_idle();
        }
    }

    /// An active context of VM `vm` that runs a program (panics if none).
    pub fn program_context(&self, vm: u32) -> u32 {
        use gpupm_uapi::regs as r;
        (1..r::MAX_CONTEXTS)
            .find(|&c| {
                let reg = |x| self.dev.read32(r::ctx(c, x)).unwrap_or(0);
                reg(r::CTX_VM) == vm
                    && reg(r::CTX_STATE) == r::ctx_state::ACTIVE
                    && reg(r::CTX_PROGRAM) != 0
            })
            .unwrap_or_else(|| panic!("no context of VM {vm} runs a program"))
    }

    /// A read-write handle on the device node `card0` (for ioctls).
    pub fn card(&self) -> fs::File {
        fs::File::options()
            .read(true)
            .write(true)
            .open(self.tmp.join("dev/card0"))
            .expect("card0")
    }

    /// Runs `gpupm ri --ctx CTX ARGS --tenant-node NODE` as tenant `uid`
    /// and advances the clock 1 ms at a time until a runtime-instrumentation
    /// block bound to `ctx` has stored `groups` groups (the device's RI
    /// ledger says so) while that `gpupm ri` keeps running; answers its run
    /// and the block's ledger once the clock stopped. Needs
    /// `--debug-ledger`; `ARGS` ends the run (`--duration`).
    pub fn ri_until_stored(
        &mut self,
        uid: u32,
        ctx: u32,
        args: &[&str],
        groups: u64,
    ) -> (Run, gpupm_uapi::ioctl::RiLedgerQuery) {
        let card = self.card();
        let ctx_arg = ctx.to_string();
        let node = self.node();
        let mut argv: Vec<String> = ["ri", "--ctx", &ctx_arg].map(String::from).to_vec();
        argv.extend(args.iter().map(|a| a.to_string()));
        argv.extend(["--tenant-node".to_string(), node]);
        let mut child = spawn_as(Some(uid), &argv);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let block = loop {
            assert!(
                std::time::Instant::now() < deadline,
                "no session stored {groups} groups"
            );
            assert!(
                child.try_wait().expect("try_wait").is_none(),
                "gpupm ri exited early"
            );
            if let Some(b) = (0..gpupm_uapi::ri::RI_BLOCKS).find(|&b| {
                let q = ledger_ri(&card, b);
                q.ctx == ctx && q.stored >= groups
            }) {
                break b;
            }
            self.advance_ms(1);
        };
        let truth = ledger_ri(&card, block);
        (finish(child), truth)
    }

    /// Waits until every partition's handshake is idle.
    pub fn wait_idle(&mut self) {
        let daemon = &mut self.daemon;
        assert!(
            device::wait_idle(&self.dev, || !daemon.alive()),
            "gpupmd died:\n{}",
            daemon.log()
        );
    }

    /// `gpupm ARGS` as root with the fixture's node paths.
    pub fn gpupm(&self, args: &[&str]) -> Run {
        run_as(None, &self.with_nodes(args))
    }

    /// `gpupm ARGS` as `uid` (gid = uid, no supplementary groups).
    pub fn gpupm_as(&self, uid: u32, args: &[&str]) -> Run {
        run_as(Some(uid), &self.with_nodes(args))
    }

    /// The node options go before the subcommand: there `gpupm` takes them
    /// for every subcommand, while after it only the subcommands that open
    /// a node accept them (`report`, `events` refuse them).
    fn with_nodes(&self, args: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = vec![
            "--tenant-node".into(),
            self.node(),
            "--node-dir".into(),
            self.node_dir(),
            "--pages-socket".into(),
            self.pages_socket(),
        ];
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }

    /// Stops the daemon and the driver, asserting clean exits.
    pub fn stop(mut self) {
        self.daemon.stop();
        self.driver.stop();
    }
}

/// `gpupm ARGS` as root, or as `uid` (gid = uid, no supplementary groups).
fn command_as(uid: Option<u32>) -> Command {
    match uid {
        Some(u) => Cred::user(u).command(bin!(Cli)),
        None => Command::new(bin!(Cli)),
    }
}

/// Runs `gpupm ARGS`, as root or as `uid` through `setpriv`.
pub fn run_as(uid: Option<u32>, args: &[String]) -> Run {
    let mut cmd = command_as(uid);
    cmd.args(args).stdin(Stdio::null());
    Run::from(cmd.output().expect("run gpupm"))
}

/// Starts `gpupm ARGS` (as `uid`) without waiting.
pub fn spawn_as(uid: Option<u32>, args: &[String]) -> Child {
    let mut cmd = command_as(uid);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn gpupm")
}

/// [`spawn_as`] with the tenant's state directory `state`
/// (`XDG_STATE_HOME`: where `gpupm cc` keeps its sessions).
pub fn spawn_as_in(uid: Option<u32>, state: &Path, args: &[String]) -> Child {
    let mut cmd = command_as(uid);
    cmd.env("XDG_STATE_HOME", state)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn gpupm")
}

/// Waits for a spawned run.
pub fn finish(c: Child) -> Run {
    Run::from(c.wait_with_output().expect("wait gpupm"))
}

/// `gpupm ARGS --tenant-node NODE` as `uid` (through `setpriv`): (exit
/// code, stdout, stderr).
pub fn gpupm_as(uid: u32, node: &Path, args: &[&str]) -> (i32, String, String) {
    gpupm_as_in(uid, node, None, args)
}

/// [`gpupm_as`] with the tenant's state directory `state`
/// (`XDG_STATE_HOME`: where `gpupm cc` keeps its sessions).
pub fn gpupm_as_in(
    uid: u32,
    node: &Path,
    state: Option<&Path>,
    args: &[&str],
) -> (i32, String, String) {
    let mut cmd = Command::new("setpriv");
    if let Some(dir) = state {
        cmd.env("XDG_STATE_HOME", dir);
    }
    let out = cmd
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(bin!(Cli))
        .args(args)
        .arg("--tenant-node")
        .arg(node)
        .output()
        .expect("setpriv (util-linux) runs gpupm");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
