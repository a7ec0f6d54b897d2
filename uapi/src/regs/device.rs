//! Identity, topology and clock registers; the interrupt registers.

use crate::regdef::register_block;

// ---------------------------------------------------------------------------
// Identity, topology, clock (0x0000..0x0100)
// ---------------------------------------------------------------------------

/// Value of the `ID` register: ASCII "gPMU" little-endian.
pub const DEVICE_MAGIC: u32 = u32::from_le_bytes(*b"gPMU");

register_block! {
    /// Identity, topology and clock registers.
    pub const IDENTITY_REGS = Identity "IDENTITY" in "regs",
        fixed 0x0000..0x0100;
    registers {
        /// [`DEVICE_MAGIC`].
        ID = 0x0000, ro;
        /// [`crate::ABI_VERSION`] of the device.
        ABI_VERSION = 0x0004, ro;
        /// number of GPCs.
        TOPO_GPCS = 0x0008, ro;
        /// number of SMs.
        TOPO_SMS = 0x000C, ro;
        /// number of L2 slices.
        TOPO_L2_SLICES = 0x0010, ro;
        /// number of frame-buffer partitions.
        TOPO_FB_PARTITIONS = 0x0014, ro;
        /// number of NVLinks.
        TOPO_NVLINKS = 0x0018, ro;
        /// number of copy engines.
        TOPO_COPY_ENGINES = 0x001C, ro;
        /// number of CCUs.
        TOPO_CCUS = 0x0020, ro;
        /// number of partition slots (RC1..RCn); RC0 is the system channel.
        TOPO_PARTITIONS = 0x0024, ro;
        /// number of events in the catalogue ([`crate::events::EVENT_COUNT`]).
        TOPO_EVENTS = 0x0028, ro;
        /// number of memory slices.
        TOPO_MEMORY_SLICES = 0x002C, ro;
        /// nominal clock frequency in kHz.
        CLOCK_KHZ = 0x0030, ro;
        /// current clock capability, see [`clock_cap`].
        CLOCK_CAP = 0x0034, ro;
        /// current device cycle.
        CYCLE = 0x0038, ro64;
        /// device status bits, see [`device_status`].
        DEVICE_STATUS = 0x0040, ro;
        /// write [`RESET_MAGIC`] to reset counters, blocks and rings.
        RESET = 0x0044, wo;
        /// number of VM table entries.
        TOPO_VMS = 0x0048, ro;
        /// number of context table entries.
        TOPO_CONTEXTS = 0x004C, ro;
        /// CCU counter wraps ever observed (must stay 0; a model self-check).
        CCU_WRAPS = 0x0050, ro64;
        /// device cycles a real-time clock dropped since it started:
        /// wall time it could not run (the device ran slower than the wall clock,
        /// or was not ticked for longer than 1 ms). [`CYCLE`] plus this is the
        /// wall time since the clock started, in cycles; 0 on a step clock. Not
        /// cleared by [`RESET`] (ABI 1.11).
        CLOCK_LAG = 0x0058, ro64;
        /// the device's index on its host (0 for the first GPU), as the
        /// host numbers its devices; set by the scenario, stable across
        /// restarts (ABI 1.12).
        GPU_INDEX = 0x0060, ro;
        /// PCI address, shown `DDDD:BB:dd.f` in hexadecimal: domain in
        /// bits 31..16, bus 15..8, device 7..3, function 2..0 (ABI 1.12).
        PCI_ADDRESS = 0x0064, ro;
        /// four words: the device's UUID, bytes 0..16 in RFC 9562 order,
        /// word `i` holding bytes `4i..4i+4` little-endian; shown as
        /// `GPU-` and the 8-4-4-4-12 hex groups (ABI 1.12).
        UUID = 0x0068, ro words UUID_WORDS;
        /// four words: the board serial number, ASCII, NUL-padded to 16
        /// bytes, packed like [`UUID`] (ABI 1.12).
        SERIAL = 0x0078, ro words SERIAL_WORDS;
        /// eight words: the model name, ASCII, NUL-padded to 32 bytes,
        /// packed like [`UUID`] (ABI 1.12).
        MODEL_NAME = 0x0088, ro words MODEL_NAME_WORDS;
    }
}

/// Words of [`UUID`].
pub const UUID_WORDS: usize = 4;
/// Words of [`SERIAL`].
pub const SERIAL_WORDS: usize = 4;
/// Words of [`MODEL_NAME`].
pub const MODEL_NAME_WORDS: usize = 8;

/// Value that must be written to [`RESET`].
pub const RESET_MAGIC: u32 = 0x5245_5345; // "ESER"

/// Bits of [`CLOCK_CAP`].
pub mod clock_cap {
    /// Running at primary (boost) capability.
    pub const PRIMARY: u32 = 0;
    /// Running at secondary (throttled) capability.
    pub const SECONDARY: u32 = 1;
}

/// Bits of [`DEVICE_STATUS`].
pub mod device_status {
    /// The clock runs in step mode (advanced only by the host).
    pub const STEP_CLOCK: u32 = 1 << 0;
    /// At least one switch was completed by the device's fallback.
    pub const FALLBACK_SEEN: u32 = 1 << 1;
}

// ---------------------------------------------------------------------------
// Interrupts (0x0200..0x0300)
// ---------------------------------------------------------------------------

register_block! {
    /// The interrupt controller.
    pub const INTERRUPT_REGS = Interrupts "INTR" in "regs",
        fixed 0x0200..0x0300;
    registers {
        /// latched interrupt sources, bits in [`crate::intr::source`].
        INTR_STATUS = 0x0200, ro;
        /// 1 = source masked (does not wake, no records delivered).
        INTR_MASK = 0x0204, rw;
        /// acknowledges latched sources.
        INTR_ACK = 0x0208, w1c;
        /// `INTR_STATUS & !INTR_MASK`.
        INTR_PENDING = 0x020C, ro;
        /// the `seq` the next interrupt record will get, which is the
        /// number of records raised so far (a masked source raises none); the
        /// last record raised has `INTR_SEQ - 1`.
        INTR_SEQ = 0x0210, ro64;
    }
}
