//! The context table.

use crate::regdef::register_block;

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

register_block! {
    /// One context table entry.
    pub const CTX_REGS = Ctx "CTX" in "regs",
        array CTX_BASE, stride CTX_STRIDE, count MAX_CONTEXTS;
    registers {
        /// VM owning the context.
        CTX_VM = 0x00, ro;
        /// lifecycle state, see [`ctx_state`].
        CTX_STATE = 0x04, ro;
        /// memory-window offset of the context block slot.
        CTX_BLOCK = 0x08, ro64;
        /// context command, see [`ctx_cmd`].
        CTX_CMD = 0x10, wo;
        /// program the context runs: 0 = none (it counts by its profile's
        /// rates alone), else 1 + its index in the scenario's program table
        /// (`Scenario::programs`: the `[[program]]` entries in file order, then the
        /// programs generated for churn contexts), see `docs/sampling.md`.
        CTX_PROGRAM = 0x14, ro;
        /// cycle at which the context was created. Context ids are
        /// reused after release; (id, created cycle) names one context instance.
        CTX_CREATED_CYCLE = 0x18, ro64;
    }
}

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
