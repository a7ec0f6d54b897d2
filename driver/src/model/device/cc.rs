//! The device's confidential-session surface: its identity, the two
//! messages of the key exchange, and republishing a VM's blocks when its
//! session or key changes (`docs/confidential.md`).

use gpupm_uapi::cc::{Finish, KeyExchange};

use super::Device;
use crate::model::cc::{DeviceIdentity, ExchangeError};

impl Device {
    /// Gives the device its certified identity (the driver's
    /// `--identity`); without one, key exchanges fail.
    pub fn install_identity(&mut self, identity: DeviceIdentity) {
        self.responder.set_identity(identity);
    }

    /// Whether the device has an identity.
    pub fn has_identity(&self) -> bool {
        self.responder.has_identity()
    }

    /// `GPUPM_IOC_CC_KEY_EXCHANGE`: answers the tenant's half in `msg`.
    pub fn cc_key_exchange(&mut self, msg: &mut KeyExchange) -> Result<(), ExchangeError> {
        let cipher = self.vms.cipher_ref(msg.vm);
        self.responder.key_exchange(msg, cipher)
    }

    /// `GPUPM_IOC_CC_FINISH`: on success the exchange's session becomes
    /// the VM's (key epoch 1, answered in `msg.key_epoch`) and every block
    /// of the VM is republished under it.
    pub fn cc_finish(&mut self, msg: &mut Finish) -> Result<(), ExchangeError> {
        let vm = msg.vm;
        let established = self.responder.finish(msg, self.vms.cipher_ref(vm))?;
        if let Some(cipher) = self.vms.cipher(vm) {
            cipher.establish(established.session, &established.vm_key);
            msg.key_epoch = cipher.key_epoch();
        }
        self.republish_vm(vm);
        Ok(())
    }

    /// Republishes every block of VM `vm` (its VM block and its contexts')
    /// through its cipher: what the device held while the VM had no
    /// session, or sealed under its previous key, appears under the
    /// current one.
    pub(super) fn republish_vm(&mut self, vm: u32) {
        if !self.vms.confidential(vm) {
            return;
        }
        for slot in self.mem.slots_of_vm(vm) {
            self.mem.publish(slot, self.vms.cipher(vm));
        }
    }
}
