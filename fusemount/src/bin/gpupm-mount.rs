//! `gpupm-mount`: mounts a FUSE node directory in the host mount namespace
//! for a sandboxed systemd service and hands the `/dev/fuse` descriptor to
//! the service's descriptor store; or takes such a mount away.
//!
//! ```text
//! ExecStartPre=+/usr/local/bin/gpupm-mount --mount-namespace /proc/1/ns/mnt --dir /run/gpupm/dev --fdname node
//! ExecStopPost=+/usr/local/bin/gpupm-mount --mount-namespace /proc/1/ns/mnt --unmount --dir /run/gpupm/dev --fdname node
//! ```
//!
//! `--mount-namespace` is needed under systemd: even a `+` command runs in
//! the unit's own mount namespace, and a mount made there vanishes when
//! the helper exits (see `gpupm_fusemount::namespace`). `--fdname` with
//! `--unmount` also has the manager close the stored descriptor, which
//! aborts the connection of a server that is gone (see
//! `gpupm_fusemount::systemd`); without `NOTIFY_SOCKET` (by hand) that step
//! is skipped.
//!
//! Exit status: 0 done; 1 joining the namespace, mounting or unmounting
//! failed; 2 the descriptor could not be stored (no `NOTIFY_SOCKET`, or the
//! manager did not take it), in which case nothing stays mounted, or the
//! manager did not confirm dropping it. Errors are one line on stderr.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use gpupm_fusemount::{MountError, MountOptions, NamespaceError, StoreError};

/// Mount a FUSE node for a systemd service (descriptor to its fd store),
/// or unmount it.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Mount (or unmount) in this mount namespace, e.g. /proc/1/ns/mnt for
    /// the service manager's; default: the helper's own.
    #[arg(long, value_name = "FILE")]
    mount_namespace: Option<PathBuf>,
    /// The node directory (created if missing; resolved in the namespace
    /// joined).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Name to store the descriptor under (`FDNAME=`); the service asks
    /// for it by this name. With --unmount: the stored descriptor to drop.
    #[arg(long, value_name = "NAME", required_unless_present = "unmount")]
    fdname: Option<String>,
    /// Permission bits of the mounted directory, in octal.
    #[arg(long, value_name = "MODE", default_value = "0755", value_parser = octal_mode, conflicts_with = "unmount")]
    mode: u32,
    /// Owner uid of the mount (`user_id=`).
    #[arg(
        long,
        value_name = "UID",
        default_value_t = 0,
        conflicts_with = "unmount"
    )]
    uid: u32,
    /// Owner gid of the mount (`group_id=`).
    #[arg(
        long,
        value_name = "GID",
        default_value_t = 0,
        conflicts_with = "unmount"
    )]
    gid: u32,
    /// Unmount DIR (lazily, aborting its FUSE connection) instead; nothing
    /// mounted there is not an error.
    #[arg(long)]
    unmount: bool,
}

fn octal_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode like 0755"))
}

/// Why the helper failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Namespace(#[from] NamespaceError),
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error("nothing mounted at {dir}: its descriptor could not be stored")]
    NoManager {
        dir: PathBuf,
        #[source]
        source: StoreError,
    },
    #[error("could not store the descriptor of {dir} as {name:?}; unmounted it")]
    Store {
        dir: PathBuf,
        name: String,
        #[source]
        source: StoreError,
    },
    #[error("the service manager did not drop the stored descriptor {name:?}")]
    Drop {
        name: String,
        #[source]
        source: StoreError,
    },
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Namespace(_) | Failure::Mount(_) => 1,
            Failure::NoManager { .. } | Failure::Store { .. } | Failure::Drop { .. } => 2,
        }
    }
}

use gpupm_fusemount::logging::one_line;

fn run(args: &Args) -> Result<String, Failure> {
    // First: setns refuses a process with more than one thread.
    if let Some(ns) = &args.mount_namespace {
        gpupm_fusemount::join_mount_namespace(ns)?;
    }
    // Without --unmount, clap requires --fdname.
    let Some(name) = args.fdname.as_deref().filter(|_| !args.unmount) else {
        return unmount(&args.dir, args.fdname.as_deref());
    };
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return Err(Failure::NoManager {
            dir: args.dir.clone(),
            source: StoreError::NoSocket,
        });
    }
    let mut opts = MountOptions::new(&format!("gpupm-{name}"));
    opts.mode = args.mode;
    opts.user_id = args.uid;
    opts.group_id = args.gid;
    let fd = gpupm_fusemount::mount(&args.dir, &opts)?;
    if let Err(source) = gpupm_fusemount::store_fd(name, fd.as_fd()) {
        drop(fd);
        if let Err(e) = gpupm_fusemount::unmount(&args.dir) {
            eprintln!("gpupm-mount: {}", one_line(e));
        }
        return Err(Failure::Store {
            dir: args.dir.clone(),
            name: name.to_owned(),
            source,
        });
    }
    Ok(format!(
        "mounted {} and stored its descriptor as {name:?}",
        args.dir.display()
    ))
}

/// Detaches the mount at `dir`, then has the manager drop the descriptor
/// stored as `name` (when run by one).
fn unmount(dir: &std::path::Path, name: Option<&str>) -> Result<String, Failure> {
    let mut done = match gpupm_fusemount::unmount(dir)? {
        true => format!("unmounted {}", dir.display()),
        false => format!("nothing mounted at {}", dir.display()),
    };
    if let Some(name) = name.filter(|_| std::env::var_os("NOTIFY_SOCKET").is_some()) {
        gpupm_fusemount::remove_stored_fd(name).map_err(|source| Failure::Drop {
            name: name.to_owned(),
            source,
        })?;
        done.push_str(&format!(" and dropped the stored descriptor {name:?}"));
    }
    Ok(done)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(done) => {
            eprintln!("gpupm-mount: {done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let code = e.exit_code();
            eprintln!("gpupm-mount: {}", one_line(e));
            ExitCode::from(code)
        }
    }
}
