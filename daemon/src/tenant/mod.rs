//! The tenant node (being built on branch daemon-tenant): a FUSE-mounted
//! directory (default `/run/gpupm/tenant`) with one file, `node`, mode
//! 0666, answering the ioctls of `gpupm_uapi::tenant` for each caller
//! according to [`TenantPolicy`].

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::view::{CounterView, VmId};

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
#[derive(Debug, Default)]
pub struct TenantStats {
    /// Requests served.
    pub requests: AtomicU64,
    /// Requests answered with an error.
    pub errors: AtomicU64,
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

/// A mounted tenant node; unmounts when dropped.
#[derive(Debug)]
pub struct TenantNode {
    stats: Arc<TenantStats>,
}

impl TenantNode {
    /// Mounts the node at `dir` and serves it on its own thread.
    pub fn mount(
        dir: &Path,
        view: Arc<dyn CounterView>,
        policy: TenantPolicy,
    ) -> Result<TenantNode, TenantError> {
        let _unused = (view, policy);
        Err(TenantError::Mount {
            path: dir.display().to_string(),
            reason: "not built yet".into(),
        })
    }

    /// Request counters.
    pub fn stats(&self) -> Arc<TenantStats> {
        Arc::clone(&self.stats)
    }
}
