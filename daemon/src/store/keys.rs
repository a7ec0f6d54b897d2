//! The device's key registers of confidential VMs, as the tenant node's
//! key-state and rekey requests reach them ([`VmKeys`] for [`Store`]).

use gpupm_client::{ops, DevError};
use gpupm_uapi::regs::{self, vm_flags};
use nix::errno::Errno;

use super::Store;
use crate::view::{KeyError, KeyStatus, RekeyWords, VmId, VmKeys};

impl VmKeys for Store {
    fn key_status(&self, vm: VmId) -> Result<KeyStatus, KeyError> {
        let mut batch = [
            ops::read32(regs::vm(vm, regs::VM_FLAGS)),
            ops::read32(regs::vm(vm, regs::VM_KEY_EPOCH)),
            ops::read64(regs::vm(vm, regs::VM_KEY_SESSION)),
        ];
        self.dev.batch(&mut batch)?;
        Ok(KeyStatus {
            confidential: ops::reg32(batch[0].value) & vm_flags::CONFIDENTIAL != 0,
            epoch: ops::reg32(batch[1].value),
            session: batch[2].value,
        })
    }

    fn commit_rekey(&self, vm: VmId, blob: &RekeyWords) -> Result<(), KeyError> {
        match self.dev.batch(&mut ops::rekey_writes(vm, blob)) {
            Ok(()) => Ok(()),
            Err(DevError::Ioctl {
                source: Errno::EINVAL,
                ..
            }) => Err(KeyError::Refused),
            Err(e) => Err(e.into()),
        }
    }
}
