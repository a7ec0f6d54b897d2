//! The device's address map as a whole: every register block of BAR0
//! (each declared once, with [`crate::regdef::register_block!`], by the
//! unit it belongs to) and every region of the memory window, in one table
//! each, checked at compile time to lie inside their space without
//! overlapping.
//!
//! Everything that needs to know where registers are is derived from
//! [`BLOCKS`]: the device model's routing, the width of any register
//! ([`is_64bit`]), the C header, the Python constants and
//! `docs/registers.md`. It depends on every unit and none depends on it,
//! so the units need not know each other.

use crate::regdef::{Block, Placement, Reg, Width};
use crate::{layout, ranges, regs, ri, sampling};

/// Every register block of BAR0, in address order.
pub const BLOCKS: [&Block; 16] = [
    &regs::IDENTITY_REGS,
    &regs::TRIGGER_REGS,
    &regs::RC_BUFFER_REGS,
    &regs::INTERRUPT_REGS,
    &regs::MAILBOX_REGS,
    &regs::OOB_MAILBOX_REGS,
    &regs::REKEY_REGS,
    &ri::RI_GLOBAL_REGS,
    &ranges::RRING_REGS,
    &regs::PART_REGS,
    &sampling::SAMP_REGS,
    &regs::CCU_REGS,
    &regs::VM_REGS,
    &ri::RI_REGS,
    &ranges::RANGE_REGS,
    &regs::CTX_REGS,
];

/// Checks that the blocks lie in BAR0, in address order, without overlapping.
const fn check_blocks(blocks: &[&Block]) {
    let mut end = 0;
    let mut i = 0;
    while i < blocks.len() {
        let (start, stop) = blocks[i].range();
        assert!(start >= end, "register blocks overlap or are out of order");
        assert!(stop > start, "an empty register block");
        end = stop;
        i += 1;
    }
    assert!(end <= regs::BAR0_SIZE, "a register block outside BAR0");
}
const _: () = check_blocks(&BLOCKS);

/// A region of the memory window: `count` spans of `span` bytes from `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// What it holds.
    pub name: &'static str,
    /// Window offset of its first span.
    pub base: u64,
    /// Bytes of one span.
    pub span: u64,
    /// Spans.
    pub count: u64,
    /// What its base is a multiple of.
    pub align: u64,
}

impl Region {
    /// One past its last byte.
    pub const fn end(&self) -> u64 {
        self.base + self.span * self.count
    }
}

/// The memory window's regions, in order.
pub const WINDOW: [Region; 5] = [
    Region {
        name: "block slots",
        base: 0,
        span: layout::BLOCK_SLOT_SIZE,
        count: (layout::CTX_BLOCK_SLOT_BASE + layout::CTX_BLOCK_SLOTS) as u64,
        align: 1,
    },
    Region {
        name: "stream rings",
        base: layout::STREAM_REGION,
        span: layout::STREAM_RING_SPAN,
        count: regs::MAX_PARTITION_SLOTS as u64,
        align: 1,
    },
    Region {
        name: "sample spans",
        base: sampling::SAMPLE_REGION,
        span: sampling::SAMPLE_SPAN,
        count: regs::MAX_PARTITION_SLOTS as u64,
        align: sampling::BUF_ALIGN,
    },
    Region {
        name: "RI program-buffer spans",
        base: ri::RI_REGION,
        span: ri::RI_SPAN,
        count: ri::RI_BLOCKS as u64,
        align: ri::RI_ALIGN,
    },
    Region {
        name: "range-record rings",
        base: ranges::RANGE_REGION,
        span: ranges::RANGE_SPAN,
        count: regs::MAX_PARTITION_SLOTS as u64,
        align: 4096,
    },
];

/// Checks that the window's regions follow each other without overlapping,
/// each at its alignment.
const fn check_window(regions: &[Region]) {
    let mut end = 0;
    let mut i = 0;
    while i < regions.len() {
        let r = &regions[i];
        assert!(r.base >= end, "window regions overlap or are out of order");
        assert!(
            r.base.is_multiple_of(r.align),
            "a window region not at its alignment"
        );
        end = r.end();
        i += 1;
    }
}
const _: () = check_window(&WINDOW);

/// Where an offset of BAR0 lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// The block.
    pub block: &'static Block,
    /// The instance of an array (0 for a fixed block).
    pub instance: u32,
    /// The offset in the block's frame: inside the instance for an array,
    /// the absolute offset for a fixed block (as its constants are).
    pub offset: u64,
}

impl Location {
    /// The register the offset falls in, with its first byte's offset in
    /// the same frame as [`Location::offset`].
    pub fn register(&self) -> Option<(&'static Reg, u64)> {
        self.block.register_at(self.offset)
    }
}

/// The block (and instance) that `offset` falls in, if any.
pub fn locate(offset: u64) -> Option<Location> {
    // The blocks are in address order (checked at compile time): the one
    // that may hold `offset` is the last that starts at or before it.
    let index = BLOCKS.partition_point(|b| b.range().0 <= offset);
    let block = *BLOCKS.get(index.checked_sub(1)?)?;
    let (_, end) = block.range();
    if offset >= end {
        return None;
    }
    Some(match block.placement {
        Placement::Fixed { .. } => Location {
            block,
            instance: 0,
            offset,
        },
        Placement::Array { base, stride, .. } => Location {
            block,
            instance: u32::try_from((offset - base) / stride).ok()?,
            offset: (offset - base) % stride,
        },
    })
}

/// The register declared at exactly `offset` (its first byte, or any word
/// of a multi-word register), if any.
pub fn register(offset: u64) -> Option<&'static Reg> {
    locate(offset)?.register().map(|(reg, _)| reg)
}

/// Whether `offset` names a 64-bit register (readable with one 8-byte access).
pub fn is_64bit(offset: u64) -> bool {
    locate(offset)
        .and_then(|at| at.register().map(|(reg, first)| (reg, first == at.offset)))
        .is_some_and(|(reg, at_start)| at_start && reg.width == Width::W64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regdef::{Access, BlockId};

    #[test]
    fn every_declared_register_is_found_where_it_is_declared() {
        let mut seen = 0;
        for block in BLOCKS {
            let instances = match block.placement {
                Placement::Fixed { .. } => vec![(0, 0)],
                Placement::Array {
                    base,
                    stride,
                    count,
                } => vec![(base, 0), (base + stride * u64::from(count - 1), count - 1)],
            };
            for (at, instance) in instances {
                for reg in block.regs {
                    let found = locate(at + reg.offset).expect("declared register");
                    assert_eq!((found.block.id, found.instance), (block.id, instance));
                    assert_eq!(register(at + reg.offset), Some(reg), "{}", reg.name);
                    seen += 1;
                }
                for set in block.sets {
                    for copy in 0..u64::from(set.count) {
                        for reg in set.regs {
                            let offset = at + set.base + copy * set.stride + reg.offset;
                            assert_eq!(register(offset), Some(reg), "{}", reg.name);
                        }
                    }
                }
            }
        }
        assert!(seen > 100, "{seen}");
    }

    #[test]
    #[should_panic(expected = "register blocks overlap")]
    fn overlapping_blocks_are_refused() {
        check_blocks(&[&regs::PART_REGS, &regs::PART_REGS]);
    }

    #[test]
    #[should_panic(expected = "window regions overlap")]
    fn overlapping_window_regions_are_refused() {
        let mut regions = WINDOW;
        regions[2].base = regions[1].base;
        check_window(&regions);
    }

    #[test]
    fn widths_and_halves() {
        assert!(is_64bit(regs::CYCLE));
        assert!(
            !is_64bit(regs::CYCLE + 4),
            "the high half is not a register of its own"
        );
        assert!(!is_64bit(regs::CLOCK_CAP));
        assert!(is_64bit(regs::part(3, regs::PART_STREAM_LOST)));
        assert!(is_64bit(regs::OOB_MBOX_DATA));
        assert!(is_64bit(regs::ccu(63, regs::CCU_RECORDS)));
        assert!(is_64bit(regs::ctx(4095, regs::CTX_CREATED_CYCLE)));
        assert!(!is_64bit(regs::BAR0_SIZE));
    }

    #[test]
    fn word_arrays_answer_at_every_word() {
        for p in 0..regs::MAX_PARTITION_SLOTS {
            let reg = register(ri::ri_part_max_rgs(p)).expect("a word of the array");
            assert_eq!(reg.name, "RI_PART_MAX_RGS");
        }
        let key = register(regs::REKEY_KEY + 28).expect("the last key word");
        assert_eq!((key.name, key.access), ("REKEY_KEY", Access::Wo));
        assert_eq!(register(regs::REKEY_TAG + 16), None);
    }

    #[test]
    fn holes_and_the_space_between_blocks_hold_no_register() {
        assert_eq!(
            register(regs::part(0, regs::PART_SWITCH_REQ_CYCLE + 8)),
            None
        );
        assert_eq!(locate(0x0800), None);
        let at = locate(regs::OOB_MBOX_SEQ).expect("the OOB mailbox");
        assert_eq!(at.block.id, BlockId::OobMailbox);
    }
}
