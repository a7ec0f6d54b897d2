//! The VM table: which partition each VM is bound to, its key registers
//! (the confidential envelope's [`KeySlot`]), and its runnable contexts.
//!
//! Registers, per VM entry (`VM_BASE + vm * VM_STRIDE`): `VM_PARTITION`,
//! `VM_BLOCK`, and the key registers `VM_FLAGS`, `VM_KEY_*` owned by the
//! entry's [`KeySlot`]. Entry 0 does not exist (VM ids start at 1).

use std::collections::BTreeSet;

use gpupm_uapi::layout;
use gpupm_uapi::regs::{self as r, MAX_VMS};

use super::access::{r32, r64, RegValue, Reject};
use super::cc::{KeySlot, KeyWrite, RekeyStaging, VmCipher};
use crate::scenario::VmSpec;

/// A VM table entry.
#[derive(Debug, Default)]
struct VmEntry {
    /// Partition slot the VM is bound to (0 = entry unused).
    partition: u32,
    keys: KeySlot,
    /// Runnable contexts (active, not exiting), ordered by id.
    runnable: BTreeSet<u32>,
}

/// The VM table (index = VM id).
#[derive(Debug)]
pub struct VmTable {
    entries: Vec<VmEntry>,
}

impl Default for VmTable {
    fn default() -> Self {
        VmTable {
            entries: (0..MAX_VMS).map(|_| VmEntry::default()).collect(),
        }
    }
}

impl VmTable {
    /// Binds VM `spec.id` to its partition with its key, sealing in
    /// device session `session`. The id must be in `1..MAX_VMS` (the
    /// caller checks).
    pub fn configure(&mut self, spec: &VmSpec, session: u64) {
        let e = &mut self.entries[spec.id as usize];
        e.partition = spec.partition;
        e.keys = KeySlot::new(
            spec.id,
            spec.is_confidential(),
            spec.confidential_key.as_ref(),
            session,
        );
    }

    /// Moves every confidential VM to device session `session` (reset).
    pub fn start_session(&mut self, session: u64) {
        for e in &mut self.entries {
            e.keys.start_session(session);
        }
    }

    /// Whether VM `vm` is confidential.
    #[inline]
    pub fn confidential(&self, vm: u32) -> bool {
        self.entries
            .get(vm as usize)
            .is_some_and(|e| e.keys.confidential())
    }

    /// Partition slot VM `vm` is bound to; 0 for an unused entry or an id
    /// out of range.
    #[inline]
    pub fn partition(&self, vm: u32) -> u32 {
        self.entries.get(vm as usize).map_or(0, |e| e.partition)
    }

    /// Re-binds VM `vm` (an existing entry) to slot `p` (a migration).
    pub fn set_partition(&mut self, vm: u32, p: u32) {
        if let Some(e) = self
            .entries
            .get_mut(vm as usize)
            .filter(|e| e.partition != 0)
        {
            e.partition = p;
        }
    }

    /// The cipher of VM `vm`, if it is confidential.
    #[inline]
    pub fn cipher(&mut self, vm: u32) -> Option<&mut VmCipher> {
        self.entries.get_mut(vm as usize)?.keys.cipher()
    }

    /// The cipher of VM `vm`, if it is confidential (read only).
    #[inline]
    pub fn cipher_ref(&self, vm: u32) -> Option<&VmCipher> {
        self.entries.get(vm as usize)?.keys.cipher_ref()
    }

    /// Runnable contexts of VM `vm`, in id order.
    #[inline]
    pub fn runnable(&self, vm: u32) -> &BTreeSet<u32> {
        &self.entries[vm as usize].runnable
    }

    /// Marks context `ctx` of VM `vm` runnable or not.
    pub fn set_runnable(&mut self, vm: u32, ctx: u32, runnable: bool) {
        let set = &mut self.entries[vm as usize].runnable;
        if runnable {
            set.insert(ctx);
        } else {
            set.remove(&ctx);
        }
    }

    /// Reads register `offset` of entry `vm`.
    pub fn read(&self, vm: u32, offset: u64) -> Option<RegValue> {
        if vm == 0 {
            return None;
        }
        let e = self.entries.get(vm as usize)?;
        match offset {
            r::VM_PARTITION => r32(e.partition),
            r::VM_BLOCK => r64(if e.partition == 0 {
                0
            } else {
                layout::block_slot_offset(vm)
            }),
            o if KeySlot::owns(o) => e.keys.read(o),
            _ => None,
        }
    }

    /// Checks a write of `v` to register `offset` of entry `vm`; `staged`
    /// is the batch's view of the rekey staging registers.
    pub fn check_write(
        &self,
        vm: u32,
        offset: u64,
        v: u32,
        staged: &mut RekeyStaging,
    ) -> Result<KeyWrite, Reject> {
        match self.entries.get(vm as usize) {
            Some(e) if KeySlot::owns(offset) => e.keys.check_write(offset, v, staged),
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked write to entry `vm`.
    pub fn apply(&mut self, vm: u32, w: KeyWrite) {
        if let Some(e) = self.entries.get_mut(vm as usize) {
            e.keys.apply(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_report_binding_and_block_and_refuse_binding_writes() {
        let mut t = VmTable::default();
        t.configure(
            &VmSpec {
                id: 3,
                partition: 2,
                confidential: false,
                confidential_key: None,
            },
            1,
        );
        assert_eq!(t.read(3, r::VM_PARTITION), r32(2));
        assert_eq!(t.read(3, r::VM_BLOCK), r64(layout::block_slot_offset(3)));
        assert_eq!(t.read(4, r::VM_BLOCK), r64(0));
        assert_eq!(t.read(0, r::VM_PARTITION), None);
        assert_eq!(
            t.check_write(3, r::VM_PARTITION, 1, &mut RekeyStaging::default())
                .err(),
            Some(Reject::ReadOnly)
        );
        t.set_runnable(3, 9, true);
        t.set_runnable(3, 5, true);
        t.set_runnable(3, 9, false);
        assert_eq!(t.runnable(3).iter().copied().collect::<Vec<_>>(), vec![5]);
    }
}
