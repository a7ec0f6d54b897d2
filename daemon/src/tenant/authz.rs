//! Authorisation and resolution of the scopes named in requests.
//!
//! For a tenant, a scope is checked against the caller's own VMs before
//! anything that depends on its existence is looked up, and a context is
//! searched among the caller's own VMs' contexts only: what is not theirs
//! and what does not exist take the same path to the same EACCES.

use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};
use gpupm_uapi::tenant::scope;

use super::error::RequestError;
use super::policy::Identity;
use crate::view::{CounterView, CtxId, Scope, VmId};

pub(super) fn check_vm_id(vm: u32) -> Result<VmId, RequestError> {
    if (1..MAX_VMS).contains(&vm) {
        Ok(vm)
    } else {
        Err(RequestError::Invalid("VM id out of range"))
    }
}

pub(super) fn check_ctx_id(ctx: u32) -> Result<CtxId, RequestError> {
    if (1..MAX_CONTEXTS).contains(&ctx) {
        Ok(ctx)
    } else {
        Err(RequestError::Invalid("context id out of range"))
    }
}

/// The error for a scope that turned out not to exist: the admin may learn
/// that; a tenant gets the same answer as for someone else's scope.
pub(super) fn missing(identity: &Identity) -> RequestError {
    if identity.is_admin() {
        RequestError::NotFound
    } else {
        RequestError::Denied
    }
}

/// A scope the caller may see and that existed when it was resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Resolved {
    /// The scope.
    pub(super) scope: Scope,
    /// Owning VM (none for the system scope).
    pub(super) vm: Option<VmId>,
}

/// Validates, authorises and resolves a (kind, id) pair.
pub(super) fn resolve(
    view: &dyn CounterView,
    identity: &Identity,
    kind: u32,
    id: u32,
    allow_system: bool,
) -> Result<Resolved, RequestError> {
    match kind {
        scope::SYSTEM => {
            if !allow_system {
                return Err(RequestError::Invalid(
                    "the system scope is not allowed here",
                ));
            }
            if id != 0 {
                return Err(RequestError::Invalid("the system scope takes id 0"));
            }
            if !identity.is_admin() {
                return Err(RequestError::Denied);
            }
            Ok(Resolved {
                scope: Scope::System,
                vm: None,
            })
        }
        scope::VM => {
            let vm = check_vm_id(id)?;
            if !identity.may_see_vm(vm) {
                return Err(RequestError::Denied);
            }
            if !view.vms().contains(&vm) {
                return Err(missing(identity));
            }
            Ok(Resolved {
                scope: Scope::Vm(vm),
                vm: Some(vm),
            })
        }
        scope::CONTEXT => {
            let ctx = check_ctx_id(id)?;
            let vm = match identity {
                Identity::Admin => view.ctx_vm(ctx).ok_or(RequestError::NotFound)?,
                Identity::Tenant(vms) => own_ctx_vm(view, vms, ctx)?,
            };
            Ok(Resolved {
                scope: Scope::Ctx(ctx),
                vm: Some(vm),
            })
        }
        _ => Err(RequestError::Invalid("unknown scope kind")),
    }
}

/// Finds `ctx` among the tenant's own VMs' contexts only, so that neither
/// the answer nor the work done depends on other tenants' contexts; then
/// checks that the context id's current instance is still the tenant's
/// (ids are reused after release).
fn own_ctx_vm(view: &dyn CounterView, vms: &[VmId], ctx: CtxId) -> Result<VmId, RequestError> {
    let owner = vms
        .iter()
        .copied()
        .find(|&vm| {
            view.contexts(vm)
                .is_some_and(|cs| cs.iter().any(|c| c.ctx == ctx))
        })
        .ok_or(RequestError::Denied)?;
    if view.ctx_vm(ctx) == Some(owner) {
        Ok(owner)
    } else {
        Err(RequestError::Denied)
    }
}

/// After reading a context's data: the id must still name the same VM's
/// context, or the data may be another tenant's.
pub(super) fn recheck(
    view: &dyn CounterView,
    identity: &Identity,
    r: Resolved,
) -> Result<(), RequestError> {
    match r.scope {
        Scope::Ctx(ctx) if !identity.is_admin() && view.ctx_vm(ctx) != r.vm => {
            Err(RequestError::Denied)
        }
        _ => Ok(()),
    }
}
