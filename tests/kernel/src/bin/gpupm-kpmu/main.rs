//! The kernel lane's helper inside the guest: the checks that need exact
//! syscalls and errnos (the shell scripts in `tests/kernel/guest/checks`
//! call it). Prints `@@gpupm metric NAME=VALUE` lines; on failure prints
//! the reason to stderr and exits 1.
//!
//! ```text
//! gpupm-kpmu abi
//! gpupm-kpmu fuzz N SEED [unprivileged]
//! gpupm-kpmu as-user UID -- SUBCOMMAND…     run a subcommand as UID:UID (std drops the groups)
//! gpupm-kpmu open-denied PATH               opening PATH must fail with EACCES
//! gpupm-kpmu perf-stat EVENT VM SECS NODE INTERVAL_MS [NAME]
//! gpupm-kpmu window EVENT VM SECS NODE OUT  (run by perf-stat under perf)
//! gpupm-kpmu restart EVENT VM NODE PIDFILE INTERVAL_MS -- DAEMON…
//! gpupm-kpmu bench ROUNDS
//! gpupm-kpmu unload KO
//! gpupm-kpmu hotplug CPU OTHER              events follow the designated CPU going offline
//! gpupm-kpmu nmi-read ROUNDS                a reader inside the write section (kprobe + BPF)
//! gpupm-kpmu cuse-node NODE                 identity, registers, refusals on /dev/gpupm0
//! gpupm-kpmu cuse-handshake NODE N          N switches through the node, then conservation
//! gpupm-kpmu cuse-access NODE NOBODY GID    owner, mode, EACCES (drops privileges)
//! gpupm-kpmu cuse-open-ok NODE              the caller may open NODE and read ID
//! gpupm-kpmu cuse-digest NODE               prints a digest of registers and window
//! gpupm-kpmu cuse-monotonic NODE SECS       CYCLE by 8-byte ioctl never goes back
//! gpupm-kpmu cuse-bench NODE FUSE_DIR ROUNDS
//! ```

mod abi;
mod bench;
mod bpf_sys;
mod compare;
mod cuse;
mod cuse_access;
mod cuse_bench;
mod cuse_handshake;
mod fuzz;
mod hotplug;
mod nmi_read;
mod pmu;
mod sys;
mod unload;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Duration;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, String> {
    args.get(i)
        .ok_or_else(|| format!("missing {what}"))?
        .parse()
        .map_err(|_| format!("bad {what}: {:?}", args[i]))
}

fn node(args: &[String]) -> Result<&Path, String> {
    args.first()
        .map(Path::new)
        .ok_or_else(|| "missing node".into())
}

fn ms(args: &[String], i: usize) -> Result<Duration, String> {
    arg::<u64>(args, i, "interval_ms").map(Duration::from_millis)
}

fn as_user(args: &[String]) -> Result<(), String> {
    let uid: u32 = arg(args, 0, "uid")?;
    let rest = args
        .get(2..)
        .filter(|_| args.get(1).is_some_and(|a| a == "--"))
        .ok_or("as-user UID -- …")?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let st = Command::new(me)
        .args(rest)
        .uid(uid)
        .gid(uid)
        .status()
        .map_err(|e| e.to_string())?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{rest:?} as uid {uid}: {st}"))
    }
}

fn open_denied(path: &str) -> Result<(), String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => Ok(()),
        other => Err(format!(
            "open {path} as uid {}: {other:?}, expected EACCES",
            nix::unistd::getuid()
        )),
    }
}

fn dispatch(args: &[String]) -> Result<(), String> {
    let (cmd, a) = args.split_first().ok_or("no subcommand")?;
    match cmd.as_str() {
        "abi" => abi::run(),
        "fuzz" => fuzz::run(
            arg(a, 0, "cases")?,
            arg(a, 1, "seed")?,
            a.get(2).is_some_and(|s| s == "unprivileged"),
        ),
        "as-user" => as_user(a),
        "open-denied" => open_denied(a.first().ok_or("path")?),
        "perf-stat" => compare::perf_stat(
            a.first().ok_or("event")?,
            arg(a, 1, "vm")?,
            arg(a, 2, "secs")?,
            Path::new(a.get(3).ok_or("node")?),
            ms(a, 4)?,
            a.get(5).map_or("perf_stat", String::as_str),
        ),
        "window" => compare::window(
            a.first().ok_or("event")?,
            arg(a, 1, "vm")?,
            arg(a, 2, "secs")?,
            Path::new(a.get(3).ok_or("node")?),
            Path::new(a.get(4).ok_or("out")?),
        ),
        "restart" => {
            let daemon = a
                .get(6..)
                .filter(|_| a.get(5).is_some_and(|s| s == "--"))
                .ok_or("restart … -- DAEMON…")?;
            compare::restart(
                a.first().ok_or("event")?,
                arg(a, 1, "vm")?,
                Path::new(a.get(2).ok_or("node")?),
                Path::new(a.get(3).ok_or("pidfile")?),
                daemon,
                ms(a, 4)?,
            )
        }
        "bench" => bench::run(arg(a, 0, "rounds")?),
        "unload" => unload::run(Path::new(a.first().ok_or("ko")?)),
        "hotplug" => hotplug::run(arg(a, 0, "cpu")?, arg(a, 1, "other cpu")?),
        "nmi-read" => nmi_read::run(arg(a, 0, "rounds")?),
        "cuse-node" => cuse::run(node(a)?),
        "cuse-digest" => cuse::print_digest(node(a)?),
        "cuse-monotonic" => cuse::monotonic(node(a)?, arg(a, 1, "secs")?),
        "cuse-open-ok" => cuse_access::open_ok(node(a)?),
        "cuse-access" => cuse_access::run(node(a)?, arg(a, 1, "uid")?, arg(a, 2, "gid")?),
        "cuse-handshake" => cuse_handshake::run(node(a)?, arg(a, 1, "handshakes")?),
        "cuse-bench" => cuse_bench::run(
            node(a)?,
            Path::new(a.get(1).ok_or("fuse node dir")?),
            arg(a, 2, "rounds")?,
        ),
        other => Err(format!("unknown subcommand {other:?}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpupm-kpmu {}: {e}", args.join(" "));
            ExitCode::FAILURE
        }
    }
}
