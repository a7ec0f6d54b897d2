//! Confidential sessions on an in-process device: a device with an
//! identity, the tenant's side of the key exchange relayed by a host that
//! keeps every byte it relays, and rekeying through the staging registers.

use gpupm_cc::{schedule, Requester};
use gpupm_driver::model::cc::{identity::test_identity, RekeyBlob};
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::Scenario;
use gpupm_uapi::cc::{KeyExchange, CC_VENDOR_ROOT_KEY};
use gpupm_uapi::ioctl::{reg_op, RegOp};
use gpupm_uapi::regs as r;
use zerocopy::IntoBytes;

/// A tenant's established session: its id, current epoch and the key of
/// each epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantSession {
    /// The VM.
    pub vm: u32,
    /// The session id.
    pub id: u64,
    /// The current epoch.
    pub epoch: u32,
    /// Keys by epoch.
    pub keys: Vec<(u32, [u8; 32])>,
}

impl TenantSession {
    /// The current epoch's `K_vm`.
    pub fn key(&self) -> [u8; 32] {
        self.key_of(self.epoch)
    }

    /// `K_vm` of `epoch`.
    pub fn key_of(&self, epoch: u32) -> [u8; 32] {
        self.keys
            .iter()
            .find(|(e, _)| *e == epoch)
            .map(|(_, k)| *k)
            .expect("a key of that epoch")
    }

    /// The current session key (what seals the VM's slots).
    pub fn session_key(&self) -> [u8; 32] {
        *schedule::session_key(&self.key(), self.vm, self.id, self.epoch)
    }
}

/// `s` with every VM that has a scenario key made confidential without one
/// (its tenant establishes its session).
pub fn keyless(mut s: Scenario) -> Scenario {
    for v in &mut s.vms {
        if v.confidential_key.take().is_some() {
            v.confidential = true;
        }
    }
    s
}

/// The key [`keyed`] gives confidential VMs.
pub const TEST_VM_KEY: [u8; 32] = [0x44; 32];

/// `s` with [`TEST_VM_KEY`] as the scenario key of every confidential VM
/// without one (the built-in scenario's VM 4 has none), for tests whose
/// subject is not the key's origin.
pub fn keyed(mut s: Scenario) -> Scenario {
    for v in &mut s.vms {
        if v.confidential && v.confidential_key.is_none() {
            v.confidential_key = Some(TEST_VM_KEY);
        }
    }
    s
}

/// A step-clock device for `s` with a test identity.
pub fn device_with_identity(s: &Scenario) -> Device {
    let mut dev = super::device(s, EngineKind::Batched);
    dev.install_identity(test_identity());
    dev
}

/// Establishes VM `vm`'s session as its tenant through `dev`, appending
/// every byte the host relays (both messages, both ways) to `relay`.
/// `replacing` is the tenant's current session, if the VM has one.
pub fn establish(
    dev: &mut Device,
    vm: u32,
    replacing: Option<&TenantSession>,
    relay: &mut Vec<u8>,
) -> TenantSession {
    establish_seen(dev, vm, replacing, relay).0
}

/// [`establish`], also returning the device's KEY_EXCHANGE reply as the
/// host saw it.
pub fn establish_seen(
    dev: &mut Device,
    vm: u32,
    replacing: Option<&TenantSession>,
    relay: &mut Vec<u8>,
) -> (TenantSession, KeyExchange) {
    let req = Requester::new(vm).expect("a requester");
    let mut msg = req.request();
    relay.extend_from_slice(msg.as_bytes());
    dev.cc_key_exchange(&mut msg).expect("KEY_EXCHANGE");
    relay.extend_from_slice(msg.as_bytes());
    let agreed = req
        .check(&msg, &CC_VENDOR_ROOT_KEY)
        .expect("the device's reply checks");
    let current = replacing.map(|t| (t.key(), t.id, t.epoch));
    let mut fin = agreed.finish_request(current.as_ref().map(|(k, s, e)| (k, *s, *e)));
    relay.extend_from_slice(fin.as_bytes());
    dev.cc_finish(&mut fin).expect("FINISH");
    relay.extend_from_slice(fin.as_bytes());
    let session = TenantSession {
        vm,
        id: agreed.session(),
        epoch: fin.key_epoch,
        keys: vec![(fin.key_epoch, *agreed.vm_key())],
    };
    (session, msg)
}

/// Replaces the session's key with `new_key` through the staging registers
/// (one batch), appending the words the host writes to `relay`.
pub fn rekey(dev: &mut Device, t: &mut TenantSession, new_key: [u8; 32], relay: &mut Vec<u8>) {
    let blob = RekeyBlob::seal(
        &t.key(),
        t.vm,
        t.epoch,
        t.id,
        &new_key,
        [t.epoch.to_le_bytes()[0]; 8],
    );
    let mut ops: Vec<RegOp> = blob
        .register_writes(t.vm)
        .into_iter()
        .map(|(offset, v)| RegOp {
            op: reg_op::WRITE,
            width: 4,
            offset,
            value: u64::from(v),
        })
        .collect();
    for op in &ops {
        relay.extend_from_slice(&op.value.to_le_bytes());
    }
    dev.batch(&mut ops).expect("the rekey commits");
    t.epoch += 1;
    t.keys.push((t.epoch, new_key));
    assert_eq!(
        dev.read_reg(r::vm(t.vm, r::VM_KEY_EPOCH), 4).ok(),
        Some(u64::from(t.epoch))
    );
}
