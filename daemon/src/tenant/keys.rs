//! The key-state and rekey requests of confidential VMs (ABI 1.5).
//!
//! Rekeying is the VM's own tenant's act: the tenant tool seals the next
//! key under the VM's current session key, and the daemon only moves that
//! blob to the device, which opens it or refuses it. So:
//!
//! * the admin may read a VM's key state (it is public: the registers show
//!   it) but may **not** rekey — the admin is part of the host, which the
//!   threat model does not trust with a confidential VM's key, and being
//!   refused by the daemon rather than by the device, it cannot even use
//!   the node to probe blobs;
//! * for a tenant, another tenant's VM, a missing VM and — for a rekey — a
//!   VM that is not confidential all fail alike with EACCES;
//! * a blob that does not open (sealed under another key, replayed after
//!   a commit or a reset, altered) is the device's EINVAL, passed back, and
//!   nothing changed (the batch is atomic).
//!
//! The key exchange that establishes a session (ABI 1.11) is relayed the
//! same way: the caller must be the VM's tenant (EACCES alike otherwise,
//! and always for the admin), and the daemon passes the message to the
//! device unchanged and the device's answer back. Everything in it is
//! public; the daemon keeps nothing of it. A VM's exchanges are rate
//! limited (`store::keys::ExchangeBudget`, EAGAIN beyond it).

use gpupm_uapi::cc::{Finish, KeyExchange};
use gpupm_uapi::tenant::{key_flags, scope, KeyState, Rekey};

use super::answer::{check_no_flags, check_reserved, check_version};
use super::authz::{check_vm_id, resolve};
use super::error::RequestError;
use super::policy::Identity;
use crate::view::{CounterView, KeyError, RekeyWords, VmKeys};

/// The device's key registers; a view without a device behind it (the
/// in-process test views) has no key requests: ENOTTY, as a daemon older
/// than ABI 1.5 answers.
fn device(view: &dyn CounterView) -> Result<&dyn VmKeys, RequestError> {
    view.vm_keys().ok_or(RequestError::UnknownIoctl)
}

fn device_error(e: &KeyError) -> RequestError {
    tracing::warn!(error = %e, "reading or writing a VM's key registers failed");
    RequestError::Internal("the device's key registers failed")
}

/// `TENANT_IOC_KEY_STATE`.
pub(super) fn key_state(
    view: &dyn CounterView,
    identity: &Identity,
    mut arg: Box<KeyState>,
) -> Result<Box<KeyState>, RequestError> {
    check_version(arg.version)?;
    if arg.flags != 0 {
        return Err(RequestError::Invalid("flags are output only"));
    }
    if arg.reserved != 0 {
        return Err(RequestError::Invalid("reserved fields must be 0"));
    }
    check_vm_id(arg.vm)?;
    resolve(view, identity, scope::VM, arg.vm, false)?;
    let status = device(view)?
        .key_status(arg.vm)
        .map_err(|e| device_error(&e))?;
    arg.flags = match (status.confidential, status.established) {
        (true, true) => key_flags::CONFIDENTIAL | key_flags::SESSION,
        (true, false) => key_flags::CONFIDENTIAL,
        (false, _) => 0,
    };
    arg.key_epoch = status.epoch;
    arg.session = status.session;
    Ok(arg)
}

/// `TENANT_IOC_REKEY`.
pub(super) fn rekey(
    view: &dyn CounterView,
    identity: &Identity,
    arg: &Rekey,
) -> Result<(), RequestError> {
    check_version(arg.version)?;
    check_no_flags(arg.flags)?;
    check_reserved(arg.reserved)?;
    check_vm_id(arg.vm)?;
    if identity.is_admin() {
        return Err(RequestError::Denied);
    }
    resolve(view, identity, scope::VM, arg.vm, false)?;
    let keys = device(view)?;
    let status = keys.key_status(arg.vm).map_err(|e| device_error(&e))?;
    if !status.confidential {
        return Err(RequestError::Denied);
    }
    match keys.commit_rekey(arg.vm, &words(arg)) {
        Ok(()) => {
            tracing::info!(
                vm = arg.vm,
                epoch = status.epoch.saturating_add(1),
                "a tenant replaced its confidential VM's key"
            );
            Ok(())
        }
        Err(KeyError::Refused) => Err(RequestError::Invalid(
            "the rekey blob does not open under the VM's current key",
        )),
        Err(e) => Err(device_error(&e)),
    }
}

/// Checks that the caller may run a key exchange for `vm`: its own
/// tenant (never the admin), and the VM confidential.
fn check_exchange_caller(
    view: &dyn CounterView,
    identity: &Identity,
    vm: u32,
) -> Result<(), RequestError> {
    check_vm_id(vm)?;
    if identity.is_admin() {
        return Err(RequestError::Denied);
    }
    resolve(view, identity, scope::VM, vm, false)?;
    let status = device(view)?.key_status(vm).map_err(|e| device_error(&e))?;
    if !status.confidential {
        return Err(RequestError::Denied);
    }
    Ok(())
}

/// The tenant's view of the device's refusal of an exchange message.
fn exchange_error(e: &KeyError) -> RequestError {
    match e {
        KeyError::Refused => RequestError::Invalid("the device refused the key-exchange message"),
        KeyError::SessionExists => RequestError::Busy,
        KeyError::NoIdentity => {
            RequestError::Unsupported("the device has no identity to establish a session with")
        }
        KeyError::RateLimited => RequestError::Exhausted,
        KeyError::Device(_) => device_error(e),
    }
}

/// `TENANT_IOC_CC_KEY_EXCHANGE`.
pub(super) fn key_exchange(
    view: &dyn CounterView,
    identity: &Identity,
    mut arg: Box<KeyExchange>,
) -> Result<Box<KeyExchange>, RequestError> {
    check_version(arg.version)?;
    check_no_flags(arg.flags)?;
    check_reserved(arg.reserved)?;
    check_exchange_caller(view, identity, arg.vm)?;
    device(view)?
        .key_exchange(&mut arg)
        .map_err(|e| exchange_error(&e))?;
    Ok(arg)
}

/// `TENANT_IOC_CC_FINISH`.
pub(super) fn finish(
    view: &dyn CounterView,
    identity: &Identity,
    mut arg: Box<Finish>,
) -> Result<Box<Finish>, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    check_exchange_caller(view, identity, arg.vm)?;
    device(view)?
        .finish(&mut arg)
        .map_err(|e| exchange_error(&e))?;
    tracing::info!(
        vm = arg.vm,
        session = format_args!("{:#018x}", arg.session),
        "a tenant established its confidential VM's session"
    );
    Ok(arg)
}

/// The blob's words in staging-register order.
fn words(arg: &Rekey) -> RekeyWords {
    let mut out = RekeyWords::default();
    let all = arg.nonce.iter().chain(&arg.sealed_key).chain(&arg.tag);
    for (w, &v) in out.iter_mut().zip(all) {
        *w = v;
    }
    out
}
