//! The VM table and the rekey staging registers its key commit reads.

use crate::regdef::register_block;

// ---------------------------------------------------------------------------
// Rekey staging (0x0500..0x0600): a confidential VM's next key, sealed under
// its current session key, staged here and installed by the VM entry's
// `VM_KEY_COMMIT` (see docs/confidential.md). Write-only: reads return 0.
// A refused commit leaves them as they are; a successful one clears them.
// ---------------------------------------------------------------------------

register_block! {
    /// The confidential rekey staging registers.
    pub const REKEY_REGS = Rekey "REKEY" in "regs",
        fixed 0x0500..0x0600;
    registers {
        /// the tenant-chosen 64 bits of the rekey blob's AES-GCM nonce, two
        /// words (low word first). The nonce is [`REKEY_NONCE_DOMAIN`] (LE)
        /// followed by these 8 bytes.
        REKEY_NONCE = 0x0500, wo words REKEY_NONCE_WORDS;
        /// eight words: the new AES-256 key encrypted under the current
        /// session key (word `i` = bytes `4i..4i+4`, little-endian).
        REKEY_KEY = 0x0508, wo words REKEY_KEY_WORDS;
        /// four words: the AES-GCM tag of the sealed key.
        REKEY_TAG = 0x0528, wo words REKEY_TAG_WORDS;
    }
}

/// Words in [`REKEY_NONCE`].
pub const REKEY_NONCE_WORDS: usize = 2;
/// Words in [`REKEY_KEY`].
pub const REKEY_KEY_WORDS: usize = 8;
/// Words in [`REKEY_TAG`].
pub const REKEY_TAG_WORDS: usize = 4;
/// First four nonce bytes (LE) of every rekey blob. The device's own
/// nonces start with the VM id (below [`MAX_VMS`]), so a tenant's rekey
/// nonce can never equal a nonce the device uses under the same key.
pub const REKEY_NONCE_DOMAIN: u32 = u32::MAX;

// ---------------------------------------------------------------------------
// VM table (0x4000..0x5000)
// ---------------------------------------------------------------------------

/// Base of the VM table; VM ids start at 1, entry `v` is at `VM_BASE + v * VM_STRIDE`.
pub const VM_BASE: u64 = 0x4000;
/// Stride between VM entries.
pub const VM_STRIDE: u64 = 0x40;
/// Largest VM id + 1.
pub const MAX_VMS: u32 = 64;

/// Offset of register `reg` of VM `v`.
pub const fn vm(v: u32, reg: u64) -> u64 {
    VM_BASE + v as u64 * VM_STRIDE + reg
}

register_block! {
    /// One VM table entry.
    pub const VM_REGS = Vm "VM" in "regs",
        array VM_BASE, stride VM_STRIDE, count MAX_VMS;
    registers {
        /// partition slot the VM is bound to (0 = entry unused).
        VM_PARTITION = 0x00, ro;
        /// flags, see [`vm_flags`].
        VM_FLAGS = 0x04, ro;
        /// memory-window offset of the VM block slot.
        VM_BLOCK = 0x08, ro64;
        /// 1 = open the rekey blob staged in `REKEY_*` with this VM's current
        /// session key and, only if it opens, install the key it carries (the key
        /// epoch increments). A blob that does not open (forged, replayed, for
        /// another VM, epoch or session, or malformed) fails with EINVAL and
        /// changes nothing. Confidential VMs only.
        VM_KEY_COMMIT = 0x30, wo;
        /// key epoch within the VM's session (1 = the key the session started
        /// with, +1 per rekey); 0 while the VM has no session and for a VM that is
        /// not confidential.
        VM_KEY_EPOCH = 0x34, ro;
        /// the VM's current session id — the device's choice in the
        /// key exchange that established it (or, for a key given in the scenario
        /// under `--insecure-scenario-keys`, drawn at device start and at every
        /// reset); 0 while the VM has no session and for a VM that is not
        /// confidential.
        VM_KEY_SESSION = 0x38, ro64;
    }
}

/// Bits of [`VM_FLAGS`].
pub mod vm_flags {
    /// The VM is confidential: its blocks and stream records leave the
    /// device only as AES-256-GCM ciphertext.
    pub const CONFIDENTIAL: u32 = 1 << 0;
    /// The confidential VM has an established session (ABI 1.11): its
    /// counts are sealed under it. Without it they are withheld.
    pub const SESSION: u32 = 1 << 1;
}
