//! The tenant node: a FUSE-mounted directory (default `/run/gpupm/tenant`,
//! mode 0755) with one file, `node`, mode 0666, answering the ioctls of
//! [`gpupm_uapi::tenant`] for each caller according to [`TenantPolicy`].
//!
//! # Who sees what
//! Every ioctl, `read()` and `poll()` is authorised from the uid/gid the
//! kernel supplied with that request (plus the supplementary groups of the
//! calling process, from `/proc/<pid>/status`): root and members of the
//! admin group see everything, including the system scope; a tenant sees
//! the VMs its [`TenantMap`] entries name and those VMs' contexts; anyone
//! else sees nothing but the event catalogue.
//!
//! For a tenant, a scope that is not theirs and a scope that does not
//! exist fail identically with EACCES on the same code path: the check runs
//! against the caller's own VMs before anything else is looked up, and a
//! context is found by searching the caller's own VMs only. The admin gets
//! ENOENT for scopes that do not exist.
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
//! Files: [`policy`] (caller → identity), `authz` (scope authorisation),
//! [`requests`] (ioctl decoding and answers), `error` (errnos),
//! [`session`] (handles, sessions, parked reads), `pump` (the feed thread),
//! `fs` (the FUSE filesystem), `mount` (mounting), [`client`] (a typed
//! client).

mod authz;
pub mod client;
mod error;
mod fs;
mod mount;
pub mod policy;
mod pump;
pub mod requests;
pub mod session;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::view::{CounterView, VmId};

/// Default directory of the tenant node.
pub const DEFAULT_TENANT_DIR: &str = "/run/gpupm/tenant";
/// File name of the node inside the directory.
pub const NODE_NAME: &str = "node";
/// Most records one stream session queues before it drops (and counts) new ones.
pub const SESSION_QUEUE: usize = 256;

/// Who may see what.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantPolicy {
    /// Members of this group (primary or supplementary) are admins, like root.
    pub admin_gid: Option<u32>,
    /// VM → tenant mapping.
    pub tenants: Vec<TenantMap>,
}

/// One VM's tenant: a uid, a gid, or both (either matching grants access).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantMap {
    /// The VM.
    pub vm: VmId,
    /// Tenant user.
    pub uid: Option<u32>,
    /// Tenant group.
    pub gid: Option<u32>,
}

/// Request counters of the tenant node.
///
/// `requests` counts ioctls and reads; `errors` those answered with an
/// errno other than EAGAIN. `open_handles` and `open_sessions` are gauges.
#[derive(Debug, Default)]
pub struct TenantStats {
    /// Requests served.
    pub requests: AtomicU64,
    /// Requests answered with an error.
    pub errors: AtomicU64,
    /// File handles currently open on the node.
    pub open_handles: AtomicU64,
    /// Stream sessions currently open.
    pub open_sessions: AtomicU64,
    /// Records stream sessions dropped because their queue was full.
    pub session_drops: AtomicU64,
}

impl TenantStats {
    /// Loads one counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

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

/// A mounted tenant node; unmounts when dropped.
#[derive(Debug)]
pub struct TenantNode {
    stats: Arc<TenantStats>,
    dir: PathBuf,
    sessions: Arc<session::Sessions>,
    pump: Option<pump::Pump>,
    mounted: Option<mount::Mounted>,
}

impl TenantNode {
    /// Mounts the node at `dir` and serves it on its own thread.
    pub fn mount(
        dir: &Path,
        view: Arc<dyn CounterView>,
        policy: TenantPolicy,
    ) -> Result<TenantNode, TenantError> {
        let stats = Arc::new(TenantStats::default());
        let sessions = session::Sessions::new(Arc::clone(&stats));
        let pump =
            pump::Pump::start(Arc::clone(&sessions)).map_err(|e| TenantError::mount(dir, e))?;
        let fs = fs::TenantFs::new(
            view,
            policy::Policy::new(policy),
            Arc::clone(&sessions),
            pump.handle(),
            Arc::clone(&stats),
        );
        let mounted =
            mount::Mounted::mount(dir, fs).map_err(|e| TenantError::mount(dir, e.describe()))?;
        tracing::info!(dir = %dir.display(), "tenant node mounted");
        Ok(TenantNode {
            stats,
            dir: dir.to_owned(),
            sessions,
            pump: Some(pump),
            mounted: Some(mounted),
        })
    }

    /// Request counters.
    pub fn stats(&self) -> Arc<TenantStats> {
        Arc::clone(&self.stats)
    }

    /// The mounted directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TenantNode {
    fn drop(&mut self) {
        // Refuse new sessions and fail parked reads so their callers return,
        // stop the feeds, then take the mount away.
        self.sessions.shutdown();
        drop(self.pump.take());
        if let Some(m) = self.mounted.take() {
            m.unmount();
            tracing::info!(dir = %self.dir.display(), "tenant node unmounted");
        }
    }
}
