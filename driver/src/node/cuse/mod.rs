//! The CUSE transport: the device as a real character device,
//! `/dev/gpupm0`, with a major and minor of its own, served from a
//! `/dev/cuse` descriptor by the same [`NodeCore`] as the FUSE `card0`.
//!
//! No maintained crate speaks CUSE (`fuser` parses `CUSE_INIT` but has no
//! way to answer it; `polyfuse` has no CUSE session), and the protocol a
//! character device needs is small, so it is written here: [`abi`] has
//! the wire structs, [`session`] the request loop.
//!
//! # Creating the device ([`Transport::mount`])
//! Opening `/dev/cuse` queues a `CUSE_INIT` request; the reply names the
//! device (`DEVNAME=gpupm0`), asks for a dynamically allocated major, and
//! leaves unrestricted ioctls off (every gpupm ioctl is flat, its size in
//! its number). The kernel creates the device while it processes that
//! reply: the node appears in devtmpfs as root:root 0600 (the `cuse` class
//! has no `devnode` callback and the init reply carries no owner or mode),
//! so the transport then gives it the node's owner and mode itself —
//! root and the admin group, 0660 (0600 without an admin group) — and
//! checks that `/dev/NAME` is the character device `/sys/class/cuse/NAME/dev`
//! names. Until then the node is stricter than intended, never looser.
//!
//! # Serving ([`Transport::serve`])
//! `/dev/cuse` cannot be cloned (`FUSE_DEV_IOC_CLONE` is disabled for it),
//! so the serving threads each read from a duplicate of the one
//! descriptor, which the kernel serves concurrently. The caller of every
//! request but `release` is checked against the access policy, as on
//! `card0`.
//!
//! # Removing it ([`Transport::unmount`])
//! Writing to `/sys/class/cuse/NAME/abort` aborts the connection: requests
//! in flight fail, the serving threads' reads return ENODEV and they end;
//! closing the last descriptor then makes the kernel remove the device.

pub mod abi;
pub mod session;
#[cfg(test)]
mod tests;

use std::fs::{self, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::num::NonZeroUsize;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use gpupm_client::DevNode;
use gpupm_uapi::regs;
use zerocopy::{FromZeros, IntoBytes};

use self::abi::{opcode, CuseInitIn, CuseInitOut, InHeader};
use self::session::{Channel, Session, REQUEST_BUFFER};
use super::device::NodeCore;
use super::{Transport, TransportError, DEFAULT_THREADS};

/// The CUSE channel device.
pub const CUSE_CHANNEL: &str = "/dev/cuse";
/// Largest `read()` the kernel forwards in one request: 4,096 interrupt
/// records.
const MAX_READ: u32 = 128 * 1024;
/// Largest `write()` (the kernel's minimum; writes are refused anyway).
const MAX_WRITE: u32 = 4096;
/// How long the device node may take to appear (devtmpfs creates it while
/// the init reply is processed; a udev-managed `/dev` may lag).
const NODE_WAIT: Duration = Duration::from_secs(5);
/// How long `unmount` waits for the serving threads after the abort.
const SESSION_END_WAIT: Duration = Duration::from_secs(2);

/// The CUSE transport.
#[derive(Debug)]
pub struct CuseTransport {
    name: String,
    core: Arc<NodeCore>,
    threads: NonZeroUsize,
    channel: Option<Arc<Channel>>,
    workers: Vec<JoinHandle<io::Result<()>>>,
}

impl CuseTransport {
    /// A transport that will create `/dev/NAME` and serve `core` on it.
    pub fn new(name: impl Into<String>, core: Arc<NodeCore>) -> Self {
        CuseTransport {
            name: name.into(),
            core,
            threads: DEFAULT_THREADS,
            channel: None,
            workers: Vec::new(),
        }
    }

    /// Serves requests from `threads` threads.
    pub fn with_threads(mut self, threads: NonZeroUsize) -> Self {
        self.threads = threads;
        self
    }

    /// The device node, `/dev/NAME`.
    pub fn device_path(&self) -> PathBuf {
        Path::new("/dev").join(&self.name)
    }

    fn sysfs_dir(&self) -> PathBuf {
        Path::new("/sys/class/cuse").join(&self.name)
    }

    fn error(&self, op: &'static str, path: &Path, source: io::Error) -> TransportError {
        TransportError::Cuse {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Answers the `CUSE_INIT` the kernel queued when `channel` was opened.
    fn init(&self, channel: &Channel) -> Result<(), TransportError> {
        let cuse = Path::new(CUSE_CHANNEL);
        let mut buf = vec![0u64; REQUEST_BUFFER / 8];
        let n = channel
            .reader()
            .and_then(|mut r| r.read(buf.as_mut_bytes()))
            .map_err(|e| self.error("read CUSE_INIT from", cuse, e))?;
        let request = buf.as_bytes().get(..n).unwrap_or_default();
        let bad = |why: String| self.error("answer CUSE_INIT on", cuse, io::Error::other(why));
        let (header, body) = abi::split::<InHeader>(request).map_err(|e| bad(e.to_string()))?;
        let (init, _) = abi::split::<CuseInitIn>(body).map_err(|e| bad(e.to_string()))?;
        if header.opcode != opcode::CUSE_INIT {
            return Err(bad(format!(
                "opcode {} instead of CUSE_INIT",
                header.opcode
            )));
        }
        if init.major != abi::KERNEL_VERSION || init.minor < abi::OLDEST_MINOR {
            return Err(bad(format!(
                "the kernel speaks FUSE {}.{}, this server 7.{}..7.{}",
                init.major,
                init.minor,
                abi::OLDEST_MINOR,
                abi::KERNEL_MINOR
            )));
        }
        let mut out = CuseInitOut::new_zeroed();
        out.major = abi::KERNEL_VERSION;
        out.minor = init.minor.min(abi::KERNEL_MINOR);
        out.max_read = MAX_READ;
        out.max_write = MAX_WRITE;
        let info = format!("DEVNAME={}\0", self.name);
        channel
            .send(header.unique, 0, &[out.as_bytes(), info.as_bytes()])
            .map_err(|e| self.error("answer CUSE_INIT on", cuse, e))
    }

    /// Waits for `/dev/NAME` to be the character device sysfs names and
    /// gives it the node's owner and mode.
    fn own_node(&self) -> Result<(), TransportError> {
        let dev_file = self.sysfs_dir().join("dev");
        let node = self.device_path();
        let deadline = Instant::now() + NODE_WAIT;
        let rdev = loop {
            if let Some(rdev) = node_rdev(&dev_file, &node) {
                break rdev;
            }
            if Instant::now() >= deadline {
                return Err(self.error(
                    "find the created character device",
                    &node,
                    io::Error::other(
                        "the kernel did not create it (see dmesg: CUSE refuses a name in use)",
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(5));
        };
        let policy = self.core.policy();
        std::os::unix::fs::chown(&node, Some(0), Some(policy.admin_gid().unwrap_or(0)))
            .map_err(|e| self.error("chown", &node, e))?;
        fs::set_permissions(&node, Permissions::from_mode(policy.file_mode().into()))
            .map_err(|e| self.error("chmod", &node, e))?;
        tracing::info!(
            node = %node.display(),
            major = nix::sys::stat::major(rdev),
            minor = nix::sys::stat::minor(rdev),
            admin_gid = policy.admin_gid(),
            mode = format_args!("{:o}", policy.file_mode()),
            "character device created"
        );
        Ok(())
    }

    fn probe(&self) -> Result<(), TransportError> {
        let node = self.device_path();
        let err = |source| TransportError::Probe {
            dir: node.clone(),
            source,
        };
        let dev = DevNode::open(&node).map_err(|e| err(io::Error::other(e.to_string())))?;
        let id = dev
            .read32(regs::ID)
            .map_err(|e| err(io::Error::other(e.to_string())))?;
        if id != regs::DEVICE_MAGIC {
            return Err(err(io::Error::other(
                "ID register does not read DEVICE_MAGIC",
            )));
        }
        Ok(())
    }

    fn spawn_workers(&mut self, session: &Arc<Session>) -> Result<(), TransportError> {
        let channel = self.channel.as_ref().ok_or(TransportError::NotMounted)?;
        for i in 0..self.threads.get() {
            let reader = channel
                .reader()
                .map_err(|e| self.error("duplicate the channel", Path::new(CUSE_CHANNEL), e))?;
            let session = Arc::clone(session);
            let worker = thread::Builder::new()
                .name(format!("gpupm-cuse-{i}"))
                .spawn(move || session.serve(reader))
                .map_err(|e| self.error("spawn a serving thread", Path::new(CUSE_CHANNEL), e))?;
            self.workers.push(worker);
        }
        Ok(())
    }
}

/// The device number of `node` when it is the character device `dev_file`
/// (`MAJOR:MINOR`) names.
fn node_rdev(dev_file: &Path, node: &Path) -> Option<u64> {
    let text = fs::read_to_string(dev_file).ok()?;
    let (major, minor) = text.trim().split_once(':')?;
    let want = nix::sys::stat::makedev(major.parse().ok()?, minor.parse().ok()?);
    let meta = fs::metadata(node).ok()?;
    (meta.file_type().is_char_device() && meta.rdev() == want).then_some(want)
}

impl Transport for CuseTransport {
    fn mount(&mut self) -> Result<(), TransportError> {
        let cuse = Path::new(CUSE_CHANNEL);
        if !cuse.exists() {
            return Err(TransportError::CuseAbsent(cuse.to_path_buf()));
        }
        if self.sysfs_dir().exists() {
            return Err(TransportError::DeviceExists(self.device_path()));
        }
        let channel = OpenOptions::new()
            .read(true)
            .write(true)
            .open(cuse)
            .map_err(|e| self.error("open", cuse, e))?;
        let channel = Arc::new(Channel::new(channel));
        self.init(&channel)?;
        self.channel = Some(channel);
        if let Err(e) = self.own_node() {
            // Closing the channel removes whatever the kernel created.
            self.channel.take();
            return Err(e);
        }
        Ok(())
    }

    fn serve(&mut self) -> Result<(), TransportError> {
        let channel = self.channel.clone().ok_or(TransportError::NotMounted)?;
        let session = Arc::new(Session::new(Arc::clone(&self.core), channel));
        self.spawn_workers(&session)?;
        tracing::info!(
            threads = self.threads.get(),
            node = %self.device_path().display(),
            "serving the character device"
        );
        self.probe()?;
        self.core.host_attached(true);
        Ok(())
    }

    fn is_serving(&self) -> bool {
        !self.workers.is_empty() && self.workers.iter().all(|w| !w.is_finished())
    }

    fn unmount(&mut self) -> Result<(), TransportError> {
        let Some(channel) = self.channel.take() else {
            return Ok(());
        };
        self.core.host_attached(false);
        let abort = self.sysfs_dir().join("abort");
        let aborted = OpenOptions::new()
            .write(true)
            .open(&abort)
            .and_then(|mut f| f.write_all(b"1"));
        if let Err(e) = aborted {
            tracing::warn!(path = %abort.display(), error = %e, "cannot abort the CUSE connection");
        }
        let deadline = Instant::now() + SESSION_END_WAIT;
        for worker in self.workers.drain(..) {
            while !worker.is_finished() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
            if !worker.is_finished() {
                tracing::warn!(
                    "a CUSE serving thread is still busy; the device goes with the process"
                );
                continue;
            }
            match worker.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "a CUSE serving thread failed"),
                Err(_) => tracing::error!("a CUSE serving thread panicked"),
            }
        }
        channel.close();
        tracing::info!(node = %self.device_path().display(), "character device removed");
        Ok(())
    }
}
