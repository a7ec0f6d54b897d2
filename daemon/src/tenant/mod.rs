//! The tenant node: a FUSE-mounted directory (default `/run/gpupm/tenant`,
//! mode 0755) with one file, `node`, mode 0666, answering the ioctls of
//! [`gpupm_uapi::tenant`] for each caller according to [`TenantPolicy`].
//!
//! # Who sees what
//! Every ioctl, `read()` and `poll()` is authorised from the uid/gid the
//! kernel supplied with that request (plus the supplementary groups of the
//! calling process, from `/proc/<pid>/status`): root and members of the
//! admin group see everything, including the system scope; a tenant sees
//! the VMs its [`TenantMap`] entries name and those VMs' contexts. A
//! caller no entry names (and not the admin) is no tenant: its `open()`
//! fails with EACCES, and so does every request it makes on a handle
//! someone else opened — `WHOAMI` and the event catalogue included — as
//! on the device node.
//!
//! One rule for what does not exist: the admin may learn existence, a
//! tenant never. For a tenant, a scope that is not theirs and a scope that
//! does not exist fail identically with EACCES on the same code path: the
//! check runs against the caller's own VMs before anything else is looked
//! up, and a context is found by searching the caller's own VMs only. The
//! admin, who may see everything, gets ENOENT for a scope that does not
//! exist.
//!
//! # Stream sessions
//! `TENANT_IOC_OPEN_STREAM` turns a file handle into a session fed by
//! [`CounterView::subscribe`]; `read()` returns whole
//! [`TenantDelta`](gpupm_uapi::tenant::TenantDelta) records, blocking until
//! one is queued (or EAGAIN with `O_NONBLOCK`), `poll()` reports `POLLIN`
//! while records are queued. Each session queues at most
//! [`SESSION_QUEUE`] records; records it had to drop are counted in the
//! next record's `lost_before`. A `read()` on a handle without a session
//! fails with EINVAL; once the daemon's feed ends, queued records are still
//! returned and then `read()` returns 0 (end of file).
//!
//! # Mounting under systemd
//! The sandboxed `gpupmd.service` cannot make a mount the host sees, so its
//! `ExecStartPre=+gpupm-mount --dir /run/gpupm/tenant --fdname tenant`
//! mounts `/dev/fuse` there and stores the descriptor; systemd passes it to
//! gpupmd, which serves it with [`TenantNode::serve_fd`] and leaves the
//! mount in place when it exits (`ExecStopPost=` removes it). Outside
//! systemd, [`TenantNode::mount`] mounts (as root) and unmounts on drop:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use gpupmd::tenant::{TenantNode, TenantPolicy, DEFAULT_TENANT_DIR, TENANT_FDNAME};
//! # use gpupmd::tenant::bounds::Bounds;
//! # use gpupmd::tenant::Served;
//! # fn start(served: Served, policy: TenantPolicy)
//! #     -> Result<TenantNode, gpupmd::tenant::TenantError> {
//! // What tenants may hold (`[limits]`), charged as they hold it:
//! let bounds = Bounds::new(gpupm_client::config::Limits::default(), &policy);
//! // Early in main, before any thread (it reads and unsets LISTEN_*):
//! let inherited = gpupm_fusemount::inherited_fd(TENANT_FDNAME);
//! // ... later:
//! let dir = std::path::Path::new(DEFAULT_TENANT_DIR);
//! let threads = gpupmd::tenant::DEFAULT_THREADS;
//! let node = match inherited {
//!     Some(fd) => TenantNode::serve_fd(dir, fd, served, policy, bounds, threads)?,
//!     None => TenantNode::mount(dir, served, policy, bounds, threads)?,
//! };
//! # Ok(node) }
//! ```
//!
//! # Bounds
//! What a caller can make the node hold — handles, sessions of each kind,
//! bytes of session queues, parked reads — and how fast it may read the
//! device are capped per uid and in all by `[limits]` ([`bounds`],
//! `docs/isolation.md`); a request past a cap fails at once with its
//! errno and never waits. Answers describe the caller's own view only:
//! session ids count per uid, range handles and register and RI block
//! numbers per VM.
//!
//! Files: [`policy`] (caller → identity), `authz` (scope authorisation),
//! [`requests`] (ioctl decoding and answers), `instance` (reads of one
//! context instance by (id, created cycle)), `keys` (key state and
//! rekeying of confidential VMs), `error` (errnos), [`bounds`] (the caps
//! and what is charged against them), [`bounds_metrics`] (their metrics),
//! [`session`] (handles, sessions, parked reads, the reaper of killed
//! readers), `pump` (the feed worker and the reaper), `files` (what
//! `node` does: the [`gpupm_fusemount::node`] kit serves it, mounting it
//! or serving a passed descriptor). The typed client is
//! `gpupm_client::TenantClient`.

mod answer;
mod authz;
pub mod bounds;
pub mod bounds_metrics;
mod error;
mod files;
mod instance;
mod keys;
pub mod policy;
mod pump;
pub mod ranges;
pub mod requests;
pub mod ri;
pub mod sampling;
pub mod session;

use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use gpupm_fusemount::node::{NodeMount, ServeError};

use self::bounds::Bounds;
use crate::planes::Features;
use crate::view::CounterView;

/// The configured policy (who may see what) and the default number of
/// serving threads, from the configuration file's format.
pub use gpupm_client::config::{
    TenantMap, TenantPolicy, DEFAULT_TENANT_THREADS as DEFAULT_THREADS,
};
/// The node's well-known paths and names: its default directory, its
/// file name, and the name of its descriptor in the service's descriptor
/// store (`gpupm-mount --fdname tenant`; look it up with
/// [`gpupm_fusemount::inherited_fd`]).
pub use gpupm_client::paths::{DEFAULT_TENANT_DIR, TENANT_FDNAME, TENANT_NODE_NAME as NODE_NAME};
/// Most records one stream session queues before it drops (and counts) new ones.
pub const SESSION_QUEUE: usize = 256;
/// Source and subtype of the mount (`fuse.gpupm-tenant`).
const FS_NAME: &str = "gpupm-tenant";

/// The node's request counters (kept in [`crate::view`], where the
/// health snapshot reads them).
pub use crate::view::TenantStats;

/// Why the tenant node could not be served.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// Mounting failed.
    #[error("cannot mount the tenant node at {path}: {reason}")]
    Mount {
        /// Mount point.
        path: String,
        /// Why.
        reason: String,
    },
}

impl TenantError {
    fn mount(dir: &Path, reason: impl std::fmt::Display) -> Self {
        TenantError::Mount {
            path: dir.display().to_string(),
            reason: reason.to_string(),
        }
    }
}

/// What a tenant node serves: the counter view and the device features
/// besides counters (a missing feature is answered `ENOTTY`).
#[derive(Clone)]
pub struct Served {
    /// Tables, counters and history.
    pub view: Arc<dyn CounterView>,
    /// Sampling, runtime instrumentation, marked ranges.
    pub features: Features,
}

impl Served {
    /// `view` alone, without sampling, RI or ranges.
    pub fn counters(view: Arc<dyn CounterView>) -> Served {
        Served {
            view,
            features: Features::default(),
        }
    }
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

/// A served tenant node; unmounts when dropped if it mounted itself.
#[derive(Debug)]
pub struct TenantNode {
    stats: Arc<TenantStats>,
    sessions: Arc<session::Sessions>,
    pump: Option<pump::Pump>,
    mount: NodeMount,
}

impl TenantNode {
    /// Mounts the node at `dir` (as root, recovering a stale mount and
    /// refusing a live one) and serves it from `threads` threads of its
    /// own; dropping the node unmounts it.
    pub fn mount(
        dir: &Path,
        served: Served,
        policy: TenantPolicy,
        bounds: Arc<Bounds>,
        threads: NonZeroUsize,
    ) -> Result<TenantNode, TenantError> {
        TenantNode::start(
            NodeMount::new(dir, FS_NAME),
            served,
            policy,
            bounds,
            threads,
        )
    }

    /// Serves the node from `threads` threads on `fd`, a `/dev/fuse`
    /// descriptor already mounted at `dir` by someone else (`gpupm-mount`,
    /// passed by systemd under [`TENANT_FDNAME`]). Needs no privilege.
    /// Returns once the node answers. Dropping the node stops the sessions
    /// but leaves the mount: its owner removes it (`gpupm-mount
    /// --unmount`), and until then (or until the process exits) the
    /// session threads keep answering.
    pub fn serve_fd(
        dir: &Path,
        fd: OwnedFd,
        served: Served,
        policy: TenantPolicy,
        bounds: Arc<Bounds>,
        threads: NonZeroUsize,
    ) -> Result<TenantNode, TenantError> {
        let mount = NodeMount::inherited(dir, FS_NAME, fd);
        TenantNode::start(mount, served, policy, bounds, threads)
    }

    fn start(
        mut mount: NodeMount,
        served: Served,
        policy: TenantPolicy,
        bounds: Arc<Bounds>,
        threads: NonZeroUsize,
    ) -> Result<TenantNode, TenantError> {
        let dir = mount.dir().to_owned();
        let stats = Arc::new(TenantStats::default());
        let sessions = session::Sessions::new(Arc::clone(&stats), bounds);
        let pump =
            pump::Pump::start(Arc::clone(&sessions)).map_err(|e| TenantError::mount(&dir, e))?;
        let files = files::TenantFiles::new(
            served,
            policy::Policy::new(policy),
            Arc::clone(&sessions),
            Arc::clone(&stats),
        );
        let probe = |dir: &Path| std::fs::metadata(dir.join(NODE_NAME)).map(drop);
        let served = mount
            .mount()
            .map_err(ServeError::from)
            .and_then(|()| mount.serve(files, threads, probe));
        served.map_err(|e| TenantError::mount(&dir, gpupm_fusemount::logging::one_line(e)))?;
        if mount.mounts_itself() {
            tracing::info!(dir = %dir.display(), "tenant node mounted");
        } else {
            tracing::info!(dir = %dir.display(), "serving the tenant node descriptor passed in");
        }
        Ok(TenantNode {
            stats,
            sessions,
            pump: Some(pump),
            mount,
        })
    }

    /// Request counters.
    pub fn stats(&self) -> Arc<TenantStats> {
        Arc::clone(&self.stats)
    }

    /// The node directory.
    pub fn dir(&self) -> &Path {
        self.mount.dir()
    }
}

impl Drop for TenantNode {
    fn drop(&mut self) {
        // Refuse new sessions and fail parked reads so their callers return,
        // stop the feeds, then take the mount away.
        self.sessions.shutdown();
        drop(self.pump.take());
        match self.mount.unmount() {
            Ok(true) => tracing::info!(dir = %self.dir().display(), "tenant node unmounted"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(dir = %self.dir().display(), error = %e, "could not unmount the tenant node");
            }
        }
    }
}
