//! `clone_device`: a clone of a mounted `/dev/fuse` descriptor reads the
//! connection's requests (here the `FUSE_INIT` the kernel queued at mount
//! time), closing a trial clone leaves the connection alive, and a
//! descriptor that is not a FUSE connection cannot be cloned.
//!
//! Needs root and `/dev/fuse`; without them the test fails with the reason.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use gpupm_fusemount::MountOptions;
use nix::fcntl::{fcntl, FcntlArg, OFlag};

/// `FUSE_INIT` in `fuse_in_header.opcode` (linux/fuse.h).
const FUSE_INIT: u32 = 26;

fn read_opcode(fd: OwnedFd) -> u32 {
    // Non-blocking: an empty queue fails the test instead of hanging it.
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
    // Large enough for any request the kernel may queue (max_write + header).
    let mut buf = vec![0u8; 1 << 21];
    let n = std::fs::File::from(fd)
        .read(&mut buf)
        .expect("a request is queued on the connection");
    assert!(n >= 8, "short request of {n} bytes");
    u32::from_ne_bytes(buf[4..8].try_into().unwrap())
}

#[test]
fn a_clone_reads_the_connections_requests_and_a_dropped_clone_leaves_it_alive() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the clone test must run as root (it mounts FUSE)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "the clone test needs /dev/fuse"
    );
    let dir = std::env::temp_dir().join(format!("gpupm-clone-{}", std::process::id()));
    let fd = gpupm_fusemount::mount(&dir.join("mnt"), &MountOptions::new("gpupm-clone")).unwrap();

    let trial = gpupm_fusemount::clone_device(fd.as_fd()).expect("clone a mounted descriptor");
    drop(trial);
    let clone = gpupm_fusemount::clone_device(fd.as_fd()).expect("clone again");
    assert_eq!(
        read_opcode(clone),
        FUSE_INIT,
        "the clone reads the queued INIT"
    );

    let (pipe, _w) = nix::unistd::pipe().unwrap();
    let err = gpupm_fusemount::clone_device(pipe.as_fd()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");

    assert!(gpupm_fusemount::unmount(&dir.join("mnt")).unwrap());
    drop(fd);
    std::fs::remove_dir_all(&dir).unwrap();
}
