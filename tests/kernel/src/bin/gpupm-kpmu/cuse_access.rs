//! Who may use `/dev/gpupm0`: the node is root's and the admin group's
//! (0660); the kernel refuses other openers, and the driver refuses them
//! again on `open` (the node made 0666 for a moment) and on every later
//! request (a descriptor opened by root, used after dropping to an
//! unprivileged uid).

use std::fs::{self, Permissions};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use gpupm_client::sys;
use gpupm_uapi::ioctl::{
    Identity, Reset, GPUPM_IOC_IDENTITY, GPUPM_IOC_REG_READ, GPUPM_IOC_REG_WRITE, GPUPM_IOC_RESET,
    IOCTL_STRUCT_VERSION,
};
use gpupm_uapi::regs as r;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::unistd::{setgid, setgroups, setuid, Gid, Uid};

use crate::cuse::{access, open, open_file, reg_ioctl, window};

/// Runs this helper's `args` as `uid`:`gid` (std drops the groups).
fn run_as(uid: u32, gid: u32, args: &[&str]) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let st = Command::new(me)
        .args(args)
        .uid(uid)
        .gid(gid)
        .status()
        .map_err(|e| e.to_string())?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{args:?} as {uid}:{gid}: {st}"))
    }
}

/// `cuse-open-ok NODE`: the caller may open the node and read `ID`.
pub fn open_ok(node: &Path) -> Result<(), String> {
    let dev = open(node)?;
    match dev.read32(r::ID) {
        Ok(id) if id == r::DEVICE_MAGIC => Ok(()),
        other => Err(format!(
            "ID as uid {} gid {}: {other:?}",
            nix::unistd::getuid(),
            nix::unistd::getgid()
        )),
    }
}

fn expect_eacces(what: &str, res: Result<(), Errno>) -> Result<(), String> {
    match res {
        Err(Errno::EACCES) => Ok(()),
        other => Err(format!(
            "{what} as an unprivileged uid: {other:?}, expected EACCES"
        )),
    }
}

/// With root's descriptor, after dropping to `nobody`: every request is
/// refused.
fn every_request_refused(node: &Path, nobody: u32) -> Result<(), String> {
    let file = open_file(node)?;
    setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    setgid(Gid::from_raw(nobody)).map_err(|e| format!("setgid: {e}"))?;
    setuid(Uid::from_raw(nobody)).map_err(|e| format!("setuid: {e}"))?;
    let fd = file.as_fd();
    let timeout = r::part(1, r::PART_SWITCH_TIMEOUT);
    expect_eacces(
        "REG_READ",
        reg_ioctl(&file, GPUPM_IOC_REG_READ, &mut access(r::ID, 4, 0)),
    )?;
    expect_eacces(
        "REG_WRITE",
        reg_ioctl(&file, GPUPM_IOC_REG_WRITE, &mut access(timeout, 4, 9_000)),
    )?;
    let mut id = Identity {
        version: IOCTL_STRUCT_VERSION,
        ..Identity::default()
    };
    expect_eacces(
        "IDENTITY",
        sys::call(fd, GPUPM_IOC_IDENTITY, &mut id).map(drop),
    )?;
    let mut reset = Reset {
        version: IOCTL_STRUCT_VERSION,
        magic: r::RESET_MAGIC,
    };
    expect_eacces(
        "RESET",
        sys::call(fd, GPUPM_IOC_RESET, &mut reset).map(drop),
    )?;
    expect_eacces("WINDOW_READ", window(&file, 0, 64).map(drop))?;
    let errno = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(0));
    let mut f = &file;
    expect_eacces("read()", f.read(&mut [0u8; 4096]).map(drop).map_err(errno))?;
    expect_eacces("write()", f.write(&[0u8; 4]).map(drop).map_err(errno))?;
    // A poll request the driver refuses reaches the caller as POLLERR.
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let n = nix::poll::poll(&mut fds, PollTimeout::ZERO).map_err(|e| format!("poll: {e}"))?;
    let revents = fds[0].revents().unwrap_or(PollFlags::empty());
    if n != 1 || !revents.contains(PollFlags::POLLERR) {
        return Err(format!(
            "poll as an unprivileged uid: {n} {revents:?}, expected POLLERR"
        ));
    }
    Ok(())
}

/// `cuse-access NODE NOBODY ADMIN_GID`: owner, mode and every refusal.
/// Drops this process's privileges at the end: run it in its own process.
pub fn run(node: &Path, nobody: u32, admin_gid: u32) -> Result<(), String> {
    let meta = fs::metadata(node).map_err(|e| format!("{}: {e}", node.display()))?;
    let mode = meta.mode() & 0o7777;
    let dev = meta.rdev();
    println!(
        "@@gpupm metric cuse_node=char {}:{} mode {mode:o} uid {} gid {}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev),
        meta.uid(),
        meta.gid()
    );
    if !meta.file_type().is_char_device() || (mode, meta.uid(), meta.gid()) != (0o660, 0, admin_gid)
    {
        return Err(format!(
            "{} is not a root:{admin_gid} 0660 character device",
            node.display()
        ));
    }
    let path = node.to_str().ok_or("node path is not UTF-8")?;
    run_as(nobody, nobody, &["open-denied", path])?;
    run_as(nobody, admin_gid, &["cuse-open-ok", path])?;
    // The driver checks the caller itself: a mode mistake exposes nothing.
    fs::set_permissions(node, Permissions::from_mode(0o666)).map_err(|e| e.to_string())?;
    let denied = run_as(nobody, nobody, &["open-denied", path]);
    fs::set_permissions(node, Permissions::from_mode(0o660)).map_err(|e| e.to_string())?;
    denied.map_err(|e| format!("with mode 0666, the driver must refuse: {e}"))?;
    every_request_refused(node, nobody)
}
