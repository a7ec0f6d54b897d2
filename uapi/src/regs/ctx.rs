//! The context table.

// ---------------------------------------------------------------------------
// Context table (0x8000..0x28000)
// ---------------------------------------------------------------------------

/// Base of the context table; context ids start at 1.
pub const CTX_BASE: u64 = 0x8000;
/// Stride between context entries.
pub const CTX_STRIDE: u64 = 0x20;
/// Largest context id + 1.
pub const MAX_CONTEXTS: u32 = 4096;

/// Offset of register `reg` of context `c`.
pub const fn ctx(c: u32, reg: u64) -> u64 {
    CTX_BASE + c as u64 * CTX_STRIDE + reg
}

/// RO: VM owning the context.
pub const CTX_VM: u64 = 0x00;
/// RO: lifecycle state, see [`ctx_state`].
pub const CTX_STATE: u64 = 0x04;
/// RO 64-bit: memory-window offset of the context block slot.
pub const CTX_BLOCK: u64 = 0x08;
/// WO: context command, see [`ctx_cmd`].
pub const CTX_CMD: u64 = 0x10;
/// RO: program the context runs: 0 = none (it counts by its profile's
/// rates alone), else 1 + its index in the scenario's program table
/// (`Scenario::programs`: the `[[program]]` entries in file order, then the
/// programs generated for churn contexts), see `docs/sampling.md`.
pub const CTX_PROGRAM: u64 = 0x14;
/// RO 64-bit: cycle at which the context was created. Context ids are
/// reused after release; (id, created cycle) names one context instance.
pub const CTX_CREATED_CYCLE: u64 = 0x18;

/// Values of [`CTX_STATE`].
pub mod ctx_state {
    /// Entry unused.
    pub const FREE: u32 = 0;
    /// Context exists and may be scheduled.
    pub const ACTIVE: u32 = 1;
    /// Context was destroyed; its block stays readable until released.
    pub const DESTROYED: u32 = 2;
}

/// Values of [`CTX_CMD`].
pub mod ctx_cmd {
    /// Release a destroyed context's block; the entry becomes free.
    pub const RELEASE: u32 = 1;
}
