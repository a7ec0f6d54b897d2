//! Authorisation and resolution of the scopes named in requests.
//!
//! For a tenant, a scope is checked against the caller's own VMs before
//! anything that depends on its existence is looked up, and a context is
//! searched among the caller's own VMs' contexts only: what is not theirs
//! and what does not exist take the same path to the same EACCES.

use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};
use gpupm_uapi::tenant::{instance_flags, scope};

use super::error::RequestError;
use super::policy::Identity;
use crate::view::{CounterView, CtxId, CtxInfo, CtxState, Scope, VmId};

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

/// Whether a tenant may see instance `c` of one of its VMs: not a
/// retired instance of the VM's earlier tenants (the admin sees all).
pub(super) fn shown(view: &dyn CounterView, identity: &Identity, c: &CtxInfo) -> bool {
    identity.is_admin()
        || c.state != CtxState::Retired
        || !view.earlier_tenancy(c.ctx, c.created_cycle)
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
                Identity::Tenant(vms) => own_ctx_vm(view, identity, vms, ctx)?,
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
fn own_ctx_vm(
    view: &dyn CounterView,
    identity: &Identity,
    vms: &[VmId],
    ctx: CtxId,
) -> Result<VmId, RequestError> {
    let owner = vms
        .iter()
        .copied()
        .find(|&vm| {
            view.contexts(vm)
                .is_some_and(|cs| cs.iter().any(|c| c.ctx == ctx && shown(view, identity, c)))
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

/// Validates, authorises and resolves a context instance: `(kind, id)`
/// must name a context, `flags` only [`instance_flags`] bits; with
/// [`instance_flags::LATEST`] the id's newest instance is taken and
/// `created_cycle` ignored.
///
/// An instance is looked up by its full name, one table lookup whether it
/// exists or not, and only then is its VM compared with the caller's: for a
/// tenant, someone else's instance and a missing one take the same path to
/// the same EACCES. Unlike a bare context id, an instance never changes
/// owner (ids are reused, (id, created cycle) is not), so no recheck is
/// needed after its data is read.
pub(super) fn resolve_instance(
    view: &dyn CounterView,
    identity: &Identity,
    kind: u32,
    id: u32,
    flags: u32,
    created_cycle: u64,
) -> Result<CtxInfo, RequestError> {
    if flags & !instance_flags::ALL != 0 {
        return Err(RequestError::Invalid("unknown flags"));
    }
    if kind != scope::CONTEXT {
        return Err(RequestError::Invalid("only context scopes have instances"));
    }
    let ctx = check_ctx_id(id)?;
    if let Identity::Tenant(vms) = identity {
        if vms.is_empty() {
            return Err(RequestError::Denied);
        }
    }
    let found = if flags & instance_flags::LATEST != 0 {
        view.latest_instance(ctx)
    } else {
        view.instance(ctx, created_cycle)
    };
    match found {
        Some(info) if identity.may_see_vm(info.vm) && shown(view, identity, &info) => Ok(info),
        _ => Err(missing(identity)),
    }
}
