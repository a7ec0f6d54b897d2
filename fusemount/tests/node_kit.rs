//! The node kit mounted for real (as root, on `/dev/fuse`) around a tiny
//! node, a doorbell: a write of eight bytes rings every handle; a read
//! returns the oldest ring not read yet, parking until one comes; the
//! `WAIT` ioctl parks until the next ring; `poll` says `POLLIN` while a
//! ring is unread. Every errno a caller sees is the node's or the kit's.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use fuser::{Errno, INodeNo, PollEvents};
use gpupm_fusemount::node::{
    FileAccess, FileRequest, IoctlReply, NodeMount, NodeService, PollWake, ReadReply, ServeError,
};
use gpupm_fusemount::Caller;
use gpupm_uapi::ioc;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

const BELL: INodeNo = INodeNo(2);
const SEALED: INodeNo = INodeNo(3);
/// The one uid the node refuses.
const STRANGER: u32 = 4242;
/// Parks until the next ring, and returns it.
const WAIT: u32 = ioc::read(b'k', 1, 8);
/// A number the node does not know.
const UNKNOWN: u32 = ioc::read(b'k', 9, 8);
const THREADS: NonZeroUsize = NonZeroUsize::MIN.saturating_add(1);

#[derive(Default)]
struct Handle {
    rings: VecDeque<u64>,
    readers: Vec<ReadReply>,
    waits: Vec<IoctlReply>,
    wake: Option<PollWake>,
}

#[derive(Default)]
struct State {
    next_fh: u64,
    handles: BTreeMap<u64, Handle>,
    released: Vec<u64>,
}

/// The doorbell node; the test keeps a second reference to its state.
#[derive(Clone, Default)]
struct Doorbell(Arc<Mutex<State>>);

impl Doorbell {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn parked(&self) -> (usize, usize) {
        let s = self.state();
        let readers = s.handles.values().map(|h| h.readers.len()).sum();
        let waits = s.handles.values().map(|h| h.waits.len()).sum();
        (readers, waits)
    }

    /// Waits until `want` (readers, waits) are parked.
    fn wait_parked(&self, want: (usize, usize)) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.parked() != want {
            assert!(Instant::now() < deadline, "never parked: {want:?}");
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl NodeService for Doorbell {
    const FILES: &'static [(INodeNo, &'static str)] = &[(BELL, "bell"), (SEALED, "sealed")];

    fn access(&self) -> FileAccess {
        FileAccess {
            perm: 0o666,
            gid: 0,
        }
    }

    fn admit(&self, caller: Caller) -> Result<(), Errno> {
        if caller.uid == STRANGER {
            return Err(Errno::EACCES);
        }
        Ok(())
    }

    fn open(&self, _caller: Caller, ino: INodeNo) -> Result<u64, Errno> {
        if ino == SEALED {
            return Err(Errno::EPERM);
        }
        let mut s = self.state();
        s.next_fh += 1;
        let fh = s.next_fh;
        s.handles.insert(fh, Handle::default());
        Ok(fh)
    }

    fn read(&self, file: FileRequest, _offset: u64, size: u32, nonblock: bool, reply: ReadReply) {
        if size < 8 {
            return reply.error(Errno::EINVAL);
        }
        let mut s = self.state();
        let Some(h) = s.handles.get_mut(&file.fh) else {
            return reply.error(Errno::EBADF);
        };
        match h.rings.pop_front() {
            Some(ring) => reply.data(&ring.to_le_bytes()),
            None if nonblock => reply.error(Errno::EAGAIN),
            None => h.readers.push(reply),
        }
    }

    fn write(&self, _file: FileRequest, _offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let ring = u64::from_le_bytes(data.try_into().map_err(|_| Errno::EINVAL)?);
        let mut s = self.state();
        for h in s.handles.values_mut() {
            for w in h.waits.drain(..) {
                w.ioctl(0, &ring.to_le_bytes());
            }
            match h.readers.pop() {
                Some(r) => r.data(&ring.to_le_bytes()),
                None => h.rings.push_back(ring),
            }
            if let Some(wake) = h.wake.take() {
                wake();
            }
        }
        Ok(8)
    }

    fn ioctl(&self, file: FileRequest, cmd: u32, _input: &[u8], _out: u32, reply: IoctlReply) {
        if cmd != WAIT {
            return reply.error(Errno::ENOTTY);
        }
        match self.state().handles.get_mut(&file.fh) {
            Some(h) => h.waits.push(reply),
            None => reply.error(Errno::EBADF),
        }
    }

    fn poll(
        &self,
        file: FileRequest,
        _events: PollEvents,
        wake: Option<PollWake>,
    ) -> Result<PollEvents, Errno> {
        let mut s = self.state();
        let h = s.handles.get_mut(&file.fh).ok_or(Errno::EBADF)?;
        if !h.rings.is_empty() {
            return Ok(PollEvents::POLLIN);
        }
        h.wake = wake;
        Ok(PollEvents::empty())
    }

    fn release(&self, fh: u64) {
        let mut s = self.state();
        if let Some(h) = s.handles.remove(&fh) {
            for r in h.readers {
                r.error(Errno::EINTR);
            }
            for w in h.waits {
                w.error(Errno::EINTR);
            }
        }
        s.released.push(fh);
    }
}

fn errno_of(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
}

fn serve(dir: &Path, node: &Doorbell) -> NodeMount {
    let mut mount = NodeMount::new(dir, "gpupm-kit-test");
    mount.mount().expect("mount /dev/fuse (needs root)");
    mount
        .serve(node.clone(), THREADS, |dir| {
            fs::metadata(dir.join("bell")).map(drop)
        })
        .expect("serve the doorbell");
    mount
}

fn open_bell(dir: &Path, flags: i32) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(dir.join("bell"))
        .expect("open bell")
}

fn wait_ioctl(file: &File) -> Result<u64, nix::errno::Errno> {
    let mut buf = [0u8; 8];
    gpupm_client::sys::call_bytes(file.as_fd(), WAIT, &mut buf)?;
    Ok(u64::from_le_bytes(buf))
}

#[test]
fn each_request_gets_the_node_s_answer_or_the_kit_s_errno() {
    let scratch = tempfile::tempdir().unwrap();
    // Other users must reach the mount for the node to refuse them.
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let dir = scratch.path().join("node");
    let node = Doorbell::default();
    let mut mount = serve(&dir, &node);
    assert!(mount.is_serving());

    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["bell", "sealed"]);
    let meta = fs::metadata(dir.join("bell")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);

    let refused = File::open(dir.join("sealed")).unwrap_err();
    assert_eq!(errno_of(&refused), Some(libc::EPERM));
    let missing = File::open(dir.join("nothing")).unwrap_err();
    assert_eq!(errno_of(&missing), Some(libc::ENOENT));

    let mut bell = open_bell(&dir, libc::O_NONBLOCK);
    let bell_fh = node.state().next_fh;
    let mut buf = [0u8; 8];
    assert_eq!(
        errno_of(&bell.read(&mut buf).unwrap_err()),
        Some(libc::EAGAIN)
    );
    assert_eq!(
        errno_of(&bell.read(&mut buf[..4]).unwrap_err()),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno_of(&bell.write(&[1, 2, 3]).unwrap_err()),
        Some(libc::EINVAL)
    );
    let mut out = [0u8; 8];
    assert_eq!(
        gpupm_client::sys::call_bytes(bell.as_fd(), UNKNOWN, &mut out),
        Err(nix::errno::Errno::ENOTTY)
    );
    let mut fds = [PollFd::new(bell.as_fd(), PollFlags::POLLIN)];
    assert_eq!(poll(&mut fds, PollTimeout::ZERO), Ok(0));

    bell.write_all(&7u64.to_le_bytes()).unwrap();
    let mut fds = [PollFd::new(bell.as_fd(), PollFlags::POLLIN)];
    assert_eq!(poll(&mut fds, PollTimeout::ZERO), Ok(1));
    bell.read_exact(&mut buf).unwrap();
    assert_eq!(u64::from_le_bytes(buf), 7);

    // The kernel's own mode check (0666) lets any user through to the
    // node (an open always reaches it), which refuses this one uid.
    let open_as = |uid: &str| {
        std::process::Command::new("setpriv")
            .args(["--reuid", uid, "--regid", uid, "--clear-groups"])
            .args(["head", "-c", "0"])
            .arg(dir.join("bell"))
            .output()
            .expect("run setpriv")
    };
    assert!(open_as("4243").status.success());
    let stranger = open_as(&STRANGER.to_string());
    let said = String::from_utf8_lossy(&stranger.stderr);
    assert!(said.contains("Permission denied"), "{said}");

    drop(bell);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !node.state().released.contains(&bell_fh) {
        assert!(Instant::now() < deadline, "handle {bell_fh} never released");
        thread::sleep(Duration::from_millis(5));
    }

    assert!(mount.unmount().unwrap());
    assert!(!mount.is_serving());
    assert!(!gpupm_fusemount::is_mounted(&dir).unwrap());
}

#[test]
fn parked_reads_waits_and_polls_are_answered_by_a_later_ring() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("node");
    let node = Doorbell::default();
    let mut mount = serve(&dir, &node);

    let reader = {
        let mut file = open_bell(&dir, 0);
        thread::spawn(move || {
            let mut buf = [0u8; 8];
            file.read_exact(&mut buf).map(|()| u64::from_le_bytes(buf))
        })
    };
    let waiter = {
        let file = open_bell(&dir, 0);
        thread::spawn(move || wait_ioctl(&file))
    };
    node.wait_parked((1, 1));
    let poller = {
        let file = open_bell(&dir, 0);
        thread::spawn(move || {
            let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::from(10_000u16)).map(|n| (n, fds[0].revents()))
        })
    };
    // Both requests are parked, and no serving thread waits for them: the
    // node still answers.
    thread::sleep(Duration::from_millis(50));
    assert!(fs::metadata(dir.join("bell")).is_ok());

    open_bell(&dir, 0).write_all(&42u64.to_le_bytes()).unwrap();
    assert_eq!(reader.join().unwrap().unwrap(), 42);
    assert_eq!(waiter.join().unwrap(), Ok(42));
    let (n, revents) = poller.join().unwrap().unwrap();
    assert_eq!((n, revents), (1, Some(PollFlags::POLLIN)));

    assert!(mount.unmount().unwrap());
}

#[test]
fn a_node_that_fails_its_probe_is_taken_away_and_an_inherited_one_stays() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("node");

    let mut mount = NodeMount::new(&dir, "gpupm-kit-test");
    mount.mount().expect("mount /dev/fuse (needs root)");
    let refused = mount.serve(Doorbell::default(), THREADS, |_| {
        Err(io::Error::other("no answer"))
    });
    assert!(matches!(refused, Err(ServeError::Probe(_))), "{refused:?}");
    assert!(!gpupm_fusemount::is_mounted(&dir).unwrap());
    assert!(matches!(
        mount.serve(Doorbell::default(), THREADS, |_| Ok(())),
        Err(ServeError::NotMounted)
    ));

    // Mounted by someone else: served, never taken away by the node.
    let fd = gpupm_fusemount::mount(&dir, &gpupm_fusemount::MountOptions::new("gpupm-kit-test"))
        .expect("mount /dev/fuse (needs root)");
    let mut inherited = NodeMount::inherited(&dir, "gpupm-kit-test", fd);
    inherited.mount().unwrap();
    inherited
        .serve(Doorbell::default(), THREADS, |dir| {
            fs::metadata(dir.join("bell")).map(drop)
        })
        .unwrap();
    assert!(!inherited.unmount().unwrap());
    assert!(gpupm_fusemount::is_mounted(&dir).unwrap());
    assert!(inherited.is_serving());
    assert!(gpupm_fusemount::unmount(&dir).unwrap());
}
