//! Partitions (GPU slices): per-partition control state ([`state`]), the
//! scheduler that decides when a partition switches context or VM
//! ([`schedule`]), the switch handshake's state machine ([`handshake`])
//! and the partition register block ([`regs`]).
//!
//! The device wires the handshake steps to the other units (counting, RCs,
//! interrupts); this unit owns the state the steps move through and decides
//! which register writes are legal in which state.
//!
//! Registers, per partition slot (`PART_BASE + p * PART_STRIDE`):
//! `PART_CTRL`, `PART_STATUS`, `PART_CUR_*`, `PART_NEXT_*`,
//! `PART_CCU_ASSIGNED`, `PART_CCU_ACKED`, `PART_RC_CMD`, `PART_RC_BIND_*`,
//! `PART_SWITCH_TIMEOUT`, `PART_FALLBACKS`, `PART_SWITCHES`,
//! `PART_TIMESLICE_*`, `PART_GPC_MASK`, `PART_MEM_MASK`,
//! `PART_SWITCH_REQ_CYCLE`. The stream-ring registers of the block belong
//! to the ring, `PART_COMMIT_SEQ` to the RC.

pub mod handshake;
pub mod regs;
pub mod schedule;
pub mod state;

pub use regs::{PartShadow, PartWrite, MIN_TIMING_CYCLES};
pub use state::{Partition, Partitions};
