//! Confidential computing: the copy engine's encryption of a confidential
//! VM's blocks and stream records on their way to host-visible memory,
//! its sessions, and rekeying — the device's state of it.
//!
//! Threat model (`docs/confidential.md`): the host, the daemon and the BMC
//! are untrusted for a confidential VM's counters; the VM's own tenant tool
//! holds the VM's key and is trusted. Files: [`identity`] is the device's
//! certified identity key; [`exchange`] is the device's side of the key
//! exchange that establishes a VM's session; [`session`] is a VM's
//! sessions and nonce counter, and seals slots; [`rekey`] is the rekey
//! staging registers.
//!
//! The cryptography the tenant shares — the envelope's sealing and
//! opening, session keys, the rekey blob, the key schedule, certificates
//! — is `gpupm-cc`; the items of it that this module's API speaks in
//! ([`Key`], [`open`], [`open_ledger`], [`RekeyBlob`], …) are re-exported
//! here.
//!
//! Registers, per VM entry: `VM_FLAGS`, `VM_KEY_COMMIT`, `VM_KEY_EPOCH`,
//! `VM_KEY_SESSION` (a [`KeySlot`] inside the VM table); the staging block
//! `REKEY_NONCE`, `REKEY_KEY`, `REKEY_TAG` ([`rekey::RekeyStaging`]).

pub mod boot;
pub mod exchange;
pub mod identity;
pub mod rekey;
pub mod session;

pub use gpupm_cc::{open, open_ledger, session_key, Key, OpenError, RekeyBlob};
use gpupm_uapi::ioctl::LedgerQuery;
use gpupm_uapi::regs::{self as r, vm_flags};
use zeroize::Zeroizing;

pub use self::boot::{BootIds, EntropyError};
pub use self::exchange::{Established, ExchangeError, Responder};
pub use self::identity::{DeviceIdentity, IdentityError};
pub use self::rekey::RekeyStaging;
pub use self::session::{seal, seal_into_slot, Origin, VmCipher};
use super::access::{r32, r64, RegValue, Reject};

/// A VM's key registers: the cipher of a confidential VM.
#[derive(Debug, Default)]
pub struct KeySlot {
    cipher: Option<VmCipher>,
}

/// A checked write to a VM's key registers.
#[derive(Clone)]
pub enum KeyWrite {
    /// Install `key`, which the staged blob carried.
    Commit {
        /// The opened new key.
        key: Zeroizing<Key>,
    },
}

impl std::fmt::Debug for KeyWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyWrite::Commit { .. } => f.write_str("Commit { .. }"),
        }
    }
}

impl KeySlot {
    /// The key slot of VM `vm`: plaintext, or confidential — with a session
    /// under `key` (id `session`) when the scenario gives one, without a
    /// session otherwise.
    pub fn new(vm: u32, confidential: bool, key: Option<&Key>, session: u64) -> Self {
        let cipher = match (confidential, key) {
            (_, Some(k)) => Some(VmCipher::with_key(vm, k, session)),
            (true, None) => Some(VmCipher::without_session(vm)),
            (false, None) => None,
        };
        KeySlot { cipher }
    }

    /// The cipher, for a confidential VM.
    #[inline]
    pub fn cipher(&mut self) -> Option<&mut VmCipher> {
        self.cipher.as_mut()
    }

    /// The cipher, for a confidential VM (read only).
    #[inline]
    pub fn cipher_ref(&self) -> Option<&VmCipher> {
        self.cipher.as_ref()
    }

    /// Whether the VM is confidential.
    pub fn confidential(&self) -> bool {
        self.cipher.is_some()
    }

    /// Moves a confidential VM's cipher to a new session (device reset).
    pub fn start_session(&mut self, session: u64) {
        if let Some(c) = self.cipher.as_mut() {
            c.start_session(session);
        }
    }

    /// Whether `offset` (inside a VM entry) is one of the key registers.
    pub fn owns(offset: u64) -> bool {
        matches!(
            offset,
            r::VM_FLAGS | r::VM_KEY_COMMIT | r::VM_KEY_EPOCH | r::VM_KEY_SESSION
        )
    }

    /// Reads a key register (the commit register reads as 0).
    pub fn read(&self, offset: u64) -> Option<RegValue> {
        let c = self.cipher.as_ref();
        match offset {
            r::VM_FLAGS => r32(match c {
                Some(c) if c.has_session() => vm_flags::CONFIDENTIAL | vm_flags::SESSION,
                Some(_) => vm_flags::CONFIDENTIAL,
                None => 0,
            }),
            r::VM_KEY_COMMIT => r32(0),
            r::VM_KEY_EPOCH => r32(c.map_or(0, VmCipher::key_epoch)),
            r::VM_KEY_SESSION => r64(c.map_or(0, VmCipher::session)),
            _ => None,
        }
    }

    /// Checks a write of `v` to a key register: a commit must open the
    /// blob in `staged` (the batch's view of the staging registers) under
    /// the current session key; a commit that passes clears `staged`.
    pub fn check_write(
        &self,
        offset: u64,
        v: u32,
        staged: &mut RekeyStaging,
    ) -> Result<KeyWrite, Reject> {
        match (offset, self.cipher.as_ref()) {
            (r::VM_KEY_COMMIT, Some(c)) if v == 1 => {
                let key = c.open_rekey(&staged.blob()).map_err(|_| {
                    Reject::BadValue("the staged rekey blob does not open under the current key")
                })?;
                staged.clear();
                Ok(KeyWrite::Commit { key })
            }
            (r::VM_KEY_COMMIT, _) => Err(Reject::BadValue(
                "keys exist only for confidential VMs; commit with 1",
            )),
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked write.
    pub fn apply(&mut self, w: KeyWrite) {
        match w {
            KeyWrite::Commit { key } => {
                if let Some(c) = self.cipher.as_mut() {
                    c.rekey(&key);
                }
            }
        }
    }
}

/// Seals a ledger answer's counts in place with `cipher` (the answer for a
/// confidential VM or one of its contexts; the format is
/// [`gpupm_cc::seal_ledger`]'s).
pub fn seal_ledger(q: &mut LedgerQuery, cipher: &mut VmCipher) {
    gpupm_cc::seal_ledger(q, |payload| cipher.seal(payload));
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::ioctl::{ledger_flags, IOCTL_STRUCT_VERSION};
    use zerocopy::FromZeros;

    use super::*;

    #[test]
    fn a_commit_installs_only_a_key_sealed_under_the_current_one() {
        let mut slot = KeySlot::new(4, true, Some(&[1; 32]), 99);
        let mut staged = RekeyStaging::default();
        // Nothing staged: the zero blob does not open.
        assert!(matches!(
            slot.check_write(r::VM_KEY_COMMIT, 1, &mut staged),
            Err(Reject::BadValue(_))
        ));
        let blob = RekeyBlob::seal(&[1; 32], 4, 1, 99, &[2; 32], [5; 8]);
        let mut shadow = staged;
        for (offset, v) in blob.register_writes(4).into_iter().take(14) {
            let w = RekeyStaging::check_write(offset, v, &mut shadow).unwrap();
            staged.apply(w);
        }
        let commit = slot.check_write(r::VM_KEY_COMMIT, 1, &mut shadow).unwrap();
        assert_eq!(
            shadow,
            RekeyStaging::default(),
            "a commit clears the staging"
        );
        slot.apply(commit);
        assert_eq!(slot.read(r::VM_KEY_EPOCH), r32(2));
        assert_eq!(slot.read(r::VM_KEY_SESSION), r64(99));
        assert_eq!(
            slot.read(r::VM_FLAGS),
            r32(vm_flags::CONFIDENTIAL | vm_flags::SESSION)
        );
        // The same blob again is a replay: the epoch moved on.
        assert!(slot.check_write(r::VM_KEY_COMMIT, 1, &mut staged).is_err());
        let mut buf = [9u8; 16];
        let (env, tag) = slot.cipher().unwrap().seal(&mut buf);
        open(&[2; 32], &env, &mut buf, &tag).unwrap();
        assert_eq!(buf, [9u8; 16]);
        let plain = KeySlot::new(5, false, None, 99);
        assert!(matches!(
            plain.check_write(r::VM_KEY_COMMIT, 1, &mut staged),
            Err(Reject::BadValue(_))
        ));
        assert_eq!(
            plain.check_write(r::VM_KEY_EPOCH, 1, &mut staged).err(),
            Some(Reject::ReadOnly)
        );
        assert_eq!(plain.read(r::VM_FLAGS), r32(0));
        assert_eq!(plain.read(r::VM_KEY_SESSION), r64(0));
        let waiting = KeySlot::new(6, true, None, 99);
        assert_eq!(waiting.read(r::VM_FLAGS), r32(vm_flags::CONFIDENTIAL));
        assert_eq!(waiting.read(r::VM_KEY_EPOCH), r32(0));
        assert_eq!(waiting.read(r::VM_KEY_SESSION), r64(0));
        assert!(
            waiting
                .check_write(r::VM_KEY_COMMIT, 1, &mut staged)
                .is_err(),
            "no rekey without a session"
        );
    }

    #[test]
    fn a_sealed_ledger_answer_opens_with_the_vm_key_only() {
        let mut q = LedgerQuery::new_zeroed();
        q.version = IOCTL_STRUCT_VERSION;
        q.generated[3] = 77;
        q.masked[5] = 6;
        q.remainder[63] = 31;
        let plain = q;
        let mut cipher = VmCipher::with_key(2, &[8; 32], 1);
        seal_ledger(&mut q, &mut cipher);
        assert_ne!(q.flags & ledger_flags::SEALED, 0);
        assert_ne!(q.generated, plain.generated);
        let mut wrong = q;
        assert!(open_ledger(&mut wrong, &[0; 32]).is_err());
        open_ledger(&mut q, &[8; 32]).unwrap();
        assert_eq!(
            (q.generated, q.masked, q.remainder, q.flags),
            (plain.generated, plain.masked, plain.remainder, 0)
        );
    }
}
