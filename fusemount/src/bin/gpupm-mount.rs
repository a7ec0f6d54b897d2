//! `gpupm-mount`: mounts a FUSE node directory in the host mount namespace
//! for a sandboxed systemd service and hands the `/dev/fuse` descriptor to
//! the service's descriptor store; or takes such a mount away.
//!
//! ```text
//! ExecStartPre=+/usr/local/bin/gpupm-mount --dir /run/gpupm/dev --fdname node
//! ExecStopPost=+/usr/local/bin/gpupm-mount --unmount --dir /run/gpupm/dev
//! ```
//!
//! Exit status: 0 done; 1 mounting or unmounting failed; 2 the descriptor
//! could not be stored (no `NOTIFY_SOCKET`, or the manager did not take
//! it), in which case nothing stays mounted. Errors are one line on stderr.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use gpupm_fusemount::{MountError, MountOptions, StoreError};

/// Mount a FUSE node for a systemd service (descriptor to its fd store),
/// or unmount it.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The node directory (created if missing).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Name to store the descriptor under (`FDNAME=`); the service asks
    /// for it by this name.
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
    #[arg(long, conflicts_with = "fdname")]
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
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Mount(_) => 1,
            Failure::NoManager { .. } | Failure::Store { .. } => 2,
        }
    }
}

/// The error with its causes, on one line.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg.replace('\n', " ")
}

fn run(args: &Args) -> Result<String, Failure> {
    let Some(name) = args.fdname.as_deref().filter(|_| !args.unmount) else {
        return Ok(match gpupm_fusemount::unmount(&args.dir)? {
            true => format!("unmounted {}", args.dir.display()),
            false => format!("nothing mounted at {}", args.dir.display()),
        });
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
            eprintln!("gpupm-mount: {}", one_line(&e));
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

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(done) => {
            eprintln!("gpupm-mount: {done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupm-mount: {}", one_line(&e));
            ExitCode::from(e.exit_code())
        }
    }
}
