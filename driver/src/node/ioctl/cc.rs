//! The confidential key exchange's two ioctls: every input check runs
//! before the device sees the message (output fields, flags and reserved
//! fields must be 0), so a malformed one changes nothing.

use gpupm_uapi::cc::{finish_flags, Finish, KeyExchange};
use zerocopy::FromZeros;

use super::{check_flags, check_version, IoctlReply};
use crate::node::backend::DeviceBackend;
use crate::node::error::{malformed, NodeError};

/// `GPUPM_IOC_CC_KEY_EXCHANGE`.
pub(super) fn key_exchange(
    backend: &mut dyn DeviceBackend,
    mut arg: KeyExchange,
) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    let mut outputs = KeyExchange::new_zeroed();
    outputs.session = arg.session;
    outputs.responder_nonce = arg.responder_nonce;
    outputs.responder_share = arg.responder_share;
    outputs.cert = arg.cert;
    outputs.signature = arg.signature;
    outputs.responder_verify = arg.responder_verify;
    if arg.reserved != 0 || outputs != KeyExchange::new_zeroed() {
        return Err(malformed(
            "key exchange with a reserved or output field set",
        ));
    }
    backend.cc_key_exchange(&mut arg)?;
    Ok(IoctlReply::ok(&arg))
}

/// `GPUPM_IOC_CC_FINISH`.
pub(super) fn finish(
    backend: &mut dyn DeviceBackend,
    mut arg: Finish,
) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    if arg.flags & !finish_flags::REPLACE != 0 {
        return Err(malformed(format!("unknown flags {:#x}", arg.flags)));
    }
    if arg.reserved != 0 || arg.key_epoch != 0 || arg.reserved2 != 0 {
        return Err(malformed("finish with a reserved or output field set"));
    }
    backend.cc_finish(&mut arg)?;
    Ok(IoctlReply::ok(&arg))
}
