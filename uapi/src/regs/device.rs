//! Identity, topology and clock registers; the interrupt registers.

// ---------------------------------------------------------------------------
// Identity, topology, clock (0x0000..0x0100)
// ---------------------------------------------------------------------------

/// Value of the `ID` register: ASCII "gPMU" little-endian.
pub const DEVICE_MAGIC: u32 = u32::from_le_bytes(*b"gPMU");

/// RO: [`DEVICE_MAGIC`].
pub const ID: u64 = 0x0000;
/// RO: [`crate::ABI_VERSION`] of the device.
pub const ABI_VERSION: u64 = 0x0004;
/// RO: number of GPCs.
pub const TOPO_GPCS: u64 = 0x0008;
/// RO: number of SMs.
pub const TOPO_SMS: u64 = 0x000C;
/// RO: number of L2 slices.
pub const TOPO_L2_SLICES: u64 = 0x0010;
/// RO: number of frame-buffer partitions.
pub const TOPO_FB_PARTITIONS: u64 = 0x0014;
/// RO: number of NVLinks.
pub const TOPO_NVLINKS: u64 = 0x0018;
/// RO: number of copy engines.
pub const TOPO_COPY_ENGINES: u64 = 0x001C;
/// RO: number of CCUs.
pub const TOPO_CCUS: u64 = 0x0020;
/// RO: number of partition slots (RC1..RCn); RC0 is the system channel.
pub const TOPO_PARTITIONS: u64 = 0x0024;
/// RO: number of events in the catalogue ([`crate::events::EVENT_COUNT`]).
pub const TOPO_EVENTS: u64 = 0x0028;
/// RO: number of memory slices.
pub const TOPO_MEMORY_SLICES: u64 = 0x002C;
/// RO: nominal clock frequency in kHz.
pub const CLOCK_KHZ: u64 = 0x0030;
/// RO: current clock capability, see [`clock_cap`].
pub const CLOCK_CAP: u64 = 0x0034;
/// RO 64-bit: current device cycle.
pub const CYCLE: u64 = 0x0038;
/// RO: device status bits, see [`device_status`].
pub const DEVICE_STATUS: u64 = 0x0040;
/// WO: write [`RESET_MAGIC`] to reset counters, blocks and rings.
pub const RESET: u64 = 0x0044;
/// RO: number of VM table entries.
pub const TOPO_VMS: u64 = 0x0048;
/// RO: number of context table entries.
pub const TOPO_CONTEXTS: u64 = 0x004C;
/// RO 64-bit: CCU counter wraps ever observed (must stay 0; a model self-check).
pub const CCU_WRAPS: u64 = 0x0050;
/// RO 64-bit: device cycles a real-time clock dropped since it started:
/// wall time it could not run (the device ran slower than the wall clock,
/// or was not ticked for longer than 1 ms). [`CYCLE`] plus this is the
/// wall time since the clock started, in cycles; 0 on a step clock. Not
/// cleared by [`RESET`] (ABI 1.11).
pub const CLOCK_LAG: u64 = 0x0058;

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

/// RO: latched interrupt sources, bits in [`crate::intr::source`].
pub const INTR_STATUS: u64 = 0x0200;
/// RW: 1 = source masked (does not wake, no records delivered).
pub const INTR_MASK: u64 = 0x0204;
/// W1C: acknowledges latched sources.
pub const INTR_ACK: u64 = 0x0208;
/// RO: `INTR_STATUS & !INTR_MASK`.
pub const INTR_PENDING: u64 = 0x020C;
/// RO 64-bit: the `seq` the next interrupt record will get, which is the
/// number of records raised so far (a masked source raises none); the
/// last record raised has `INTR_SEQ - 1`.
pub const INTR_SEQ: u64 = 0x0210;
