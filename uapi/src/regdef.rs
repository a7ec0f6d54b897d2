//! The vocabulary of the register map: what a register and a block of
//! registers are, and [`register_block!`], the one place each block's
//! registers are declared (name, offset, width, access, documentation).
//!
//! A declaration makes the register's `pub const` offset (what every
//! caller uses) and a [`Block`] table entry; [`crate::map`] gathers the
//! tables into the BAR0 map that the device model routes by, that says a
//! register's width, and that the C header, the Python constants and
//! `docs/registers.md` are generated from. This module depends on nothing
//! else in the crate, so every unit can use it.

/// Who may do what to a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read-only: writes fail.
    Ro,
    /// Read/write.
    Rw,
    /// Write-only command register: reads return 0.
    Wo,
    /// Write one to clear.
    W1c,
}

impl Access {
    /// The short name the documentation uses (`RO`, `RW`, `WO`, `W1C`).
    pub const fn label(self) -> &'static str {
        match self {
            Access::Ro => "RO",
            Access::Rw => "RW",
            Access::Wo => "WO",
            Access::W1c => "W1C",
        }
    }

    /// Whether a write can succeed at all.
    pub const fn writable(self) -> bool {
        !matches!(self, Access::Ro)
    }
}

/// How wide a register is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// 32 bits.
    W32,
    /// 64 bits, read atomically with one 8-byte access (or a half at a
    /// time with 4-byte accesses); never writable.
    W64,
}

impl Width {
    /// Bytes of the register.
    pub const fn bytes(self) -> u64 {
        match self {
            Width::W32 => 4,
            Width::W64 => 8,
        }
    }
}

/// One register (or an array of consecutive 32-bit words that share a
/// name, such as the 8 words of a staged key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    /// The name of its constant (and of `GPUPM_REG_<name>` in C).
    pub name: &'static str,
    /// Its offset: absolute for a block at a fixed place, inside one
    /// instance (or one register set) for an array of blocks.
    pub offset: u64,
    /// Its width.
    pub width: Width,
    /// Its access.
    pub access: Access,
    /// 32-bit words under the one name (1 for a single register).
    pub words: u32,
    /// Its documentation: the doc comment of its declaration.
    pub doc: &'static str,
}

impl Reg {
    /// Bytes the register (all its words) occupies.
    pub const fn bytes(&self) -> u64 {
        self.width.bytes() * self.words as u64
    }

    /// Its access and width as the documentation writes them (`RW`,
    /// `RO 64-bit`).
    pub const fn label(&self) -> &'static str {
        match self.width {
            Width::W64 => "RO 64-bit",
            Width::W32 => self.access.label(),
        }
    }

    /// Whether `offset` (in the same frame as [`Reg::offset`]) is inside it.
    pub const fn covers(&self, offset: u64) -> bool {
        offset >= self.offset && offset < self.offset + self.bytes()
    }
}

/// Registers repeated inside each instance of a block: `count` copies,
/// `stride` bytes apart, the first at `base` (offsets in the block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegSet {
    /// Name of the set (`BUF`, `RANGE`).
    pub name: &'static str,
    /// Offset of the first copy inside the block.
    pub base: u64,
    /// Bytes between two copies.
    pub stride: u64,
    /// Copies.
    pub count: u32,
    /// The registers of one copy, offsets inside the copy.
    pub regs: &'static [Reg],
}

impl RegSet {
    /// Bytes of all copies.
    pub const fn span(&self) -> u64 {
        self.stride * self.count as u64
    }
}

/// Which block: what the device routes an access to. One per block of
/// the map; adding a block adds a variant, and every `match` on it (the
/// device's routing) must then say who serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockId {
    /// Identity, topology and clock.
    Identity,
    /// The trigger block.
    Trigger,
    /// The reduction-channel buffer's device-wide registers.
    RcBuffer,
    /// The interrupt controller.
    Interrupts,
    /// The host's mailbox.
    Mailbox,
    /// The out-of-band mailbox.
    OobMailbox,
    /// The confidential rekey staging registers.
    Rekey,
    /// The runtime-instrumentation unit's device-wide registers.
    RiGlobal,
    /// The marked-range record rings' registers, one set per partition slot.
    RangeRing,
    /// Partition blocks (control, handshake, RC, stream ring).
    Partition,
    /// Sampling blocks, one per partition slot.
    Sampling,
    /// The CCU array.
    Ccu,
    /// Runtime-instrumentation control blocks.
    Ri,
    /// Marked-range blocks, one per partition slot.
    Range,
    /// The VM table.
    Vm,
    /// The context table.
    Ctx,
}

/// Where a block lies in BAR0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One block at `start..end`; its registers' offsets are absolute.
    Fixed {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// `count` instances, `stride` bytes apart, from `base`; register
    /// offsets are inside one instance.
    Array {
        /// Offset of instance 0.
        base: u64,
        /// Bytes between instances.
        stride: u64,
        /// Instances.
        count: u32,
    },
}

/// A block of registers: the unit of the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Which block.
    pub id: BlockId,
    /// Its name in the C header's array macro (`PART` for `GPUPM_PART(i,
    /// reg)`) and in the documentation.
    pub name: &'static str,
    /// The `gpupm_uapi` module its constants are in (`regs`, `sampling`).
    pub module: &'static str,
    /// Its documentation.
    pub doc: &'static str,
    /// Where it lies.
    pub placement: Placement,
    /// Its registers.
    pub regs: &'static [Reg],
    /// Its repeated register sets.
    pub sets: &'static [RegSet],
}

impl Block {
    /// The bytes of BAR0 the block (all instances) occupies.
    pub const fn range(&self) -> (u64, u64) {
        match self.placement {
            Placement::Fixed { start, end } => (start, end),
            Placement::Array {
                base,
                stride,
                count,
            } => (base, base + stride * count as u64),
        }
    }

    /// Bytes one instance may use: registers must lie below this (in the
    /// block's own frame for an array; `end` for a fixed block).
    const fn frame(&self) -> (u64, u64) {
        match self.placement {
            Placement::Fixed { start, end } => (start, end),
            Placement::Array { stride, .. } => (0, stride),
        }
    }

    /// Checks, at compile time when used in a `const`, that every register
    /// and set lies inside the block's frame and that none overlap.
    pub const fn check(&self) {
        let (lo, hi) = self.frame();
        check_registers(self.regs, lo, hi);
        let mut s = 0;
        while s < self.sets.len() {
            let set = &self.sets[s];
            assert!(
                set.base >= lo && set.base + set.span() <= hi,
                "set outside its block"
            );
            check_registers(set.regs, 0, set.stride);
            let mut i = 0;
            while i < self.regs.len() {
                let r = &self.regs[i];
                assert!(
                    r.offset + r.bytes() <= set.base || set.base + set.span() <= r.offset,
                    "a register overlaps a register set"
                );
                i += 1;
            }
            let mut t = s + 1;
            while t < self.sets.len() {
                let u = &self.sets[t];
                assert!(
                    set.base + set.span() <= u.base || u.base + u.span() <= set.base,
                    "two register sets overlap"
                );
                t += 1;
            }
            s += 1;
        }
    }

    /// The register (or set register) at `offset` in the block's frame
    /// (absolute for a fixed block, inside the instance for an array),
    /// with the offset of its first byte in that frame.
    pub fn register_at(&self, offset: u64) -> Option<(&'static Reg, u64)> {
        if let Some(r) = self.regs.iter().find(|r| r.covers(offset)) {
            return Some((r, r.offset));
        }
        for set in self.sets {
            if offset < set.base || offset >= set.base + set.span() {
                continue;
            }
            let copy = set.base + (offset - set.base) / set.stride * set.stride;
            let r = set.regs.iter().find(|r| r.covers(offset - copy))?;
            return Some((r, copy + r.offset));
        }
        None
    }
}

/// Checks that `regs` lie in `lo..hi`, naturally aligned, without
/// overlapping, and that no 64-bit register is writable or has words.
const fn check_registers(regs: &[Reg], lo: u64, hi: u64) {
    let mut i = 0;
    while i < regs.len() {
        let r = &regs[i];
        assert!(
            r.offset >= lo && r.offset + r.bytes() <= hi,
            "register outside its block"
        );
        assert!(
            r.offset.is_multiple_of(r.width.bytes()),
            "register not naturally aligned"
        );
        assert!(
            r.width.bytes() == 4 || r.words == 1,
            "a 64-bit register with words"
        );
        assert!(
            !matches!(r.width, Width::W64) || matches!(r.access, Access::Ro),
            "a writable 64-bit register"
        );
        let mut j = i + 1;
        while j < regs.len() {
            let q = &regs[j];
            assert!(
                q.offset + q.bytes() <= r.offset || r.offset + r.bytes() <= q.offset,
                "two registers overlap"
            );
            j += 1;
        }
        i += 1;
    }
}

/// `n` words as a [`Reg::words`]; a register of 2^32 words or more
/// cannot be declared.
pub const fn words(n: usize) -> u32 {
    assert!(
        n > 0 && n <= u32::MAX as usize,
        "a register's words out of range"
    );
    // Checked just above.
    #[allow(clippy::cast_possible_truncation)]
    let w = n as u32;
    w
}

/// Declares one block of registers, once: each register's offset constant
/// with its documentation, and the block's [`Block`] table entry.
///
/// ```ignore
/// register_block! {
///     /// The trigger block.
///     pub const TRIGGER_REGS = Trigger "TRIG" in "regs",
///         fixed 0x0100..0x0130;
///     registers {
///         /// Periodic trigger period in cycles.
///         TRIG_PERIOD = 0x0100, rw;
///         /// Periodic triggers delivered.
///         TRIG_COUNT_PERIODIC = 0x0118, ro64;
///     }
/// }
/// ```
///
/// Access is `ro`, `rw`, `wo` or `w1c` (32-bit) or `ro64` (64-bit, always
/// read-only); `wo words N` declares N consecutive 32-bit words under one
/// name. An array of blocks says `array BASE, stride STRIDE, count COUNT`
/// and may add `set NAME(at BASE, stride STRIDE, count COUNT) { … }` for
/// registers repeated inside each instance. The generated constant's doc
/// comment starts with the access and width, so the prose need not.
macro_rules! register_block {
    (
        $(#[doc = $bdoc:literal])*
        $vis:vis const $block:ident = $id:ident $cname:literal in $module:literal,
        fixed $start:literal .. $end:literal;
        $($rest:tt)*
    ) => {
        $crate::regdef::register_block!(@body [$(#[doc = $bdoc])*] [$vis $block $id $cname $module]
            [$crate::regdef::Placement::Fixed { start: $start, end: $end }] $($rest)*);
    };
    (
        $(#[doc = $bdoc:literal])*
        $vis:vis const $block:ident = $id:ident $cname:literal in $module:literal,
        array $base:expr, stride $stride:expr, count $count:expr;
        $($rest:tt)*
    ) => {
        $crate::regdef::register_block!(@body [$(#[doc = $bdoc])*] [$vis $block $id $cname $module]
            [$crate::regdef::Placement::Array { base: $base, stride: $stride, count: $count }] $($rest)*);
    };
    (@body [$(#[doc = $bdoc:literal])*] [$vis:vis $block:ident $id:ident $cname:literal $module:literal] [$place:expr]
        registers {
            $(
                $(#[doc = $doc:literal])*
                $name:ident = $off:expr, $acc:ident $(words $words:expr)?;
            )*
        }
        $(
            set $set:ident(at $sbase:expr, stride $sstride:expr, count $scount:expr) {
                $(
                    $(#[doc = $sdoc:literal])*
                    $sname:ident = $soff:expr, $sacc:ident;
                )*
            }
        )*
    ) => {
        $(
            #[doc = concat!($crate::regdef::register_block!(@label $acc), ":")]
            $(#[doc = $doc])*
            pub const $name: u64 = $off;
        )*
        $($(
            #[doc = concat!($crate::regdef::register_block!(@label $sacc), ":")]
            $(#[doc = $sdoc])*
            pub const $sname: u64 = $soff;
        )*)*

        $(#[doc = $bdoc])*
        $vis const $block: $crate::regdef::Block = $crate::regdef::Block {
            id: $crate::regdef::BlockId::$id,
            name: $cname,
            module: $module,
            doc: concat!($($bdoc, "\n"),*),
            placement: $place,
            regs: &[$(
                $crate::regdef::Reg {
                    name: stringify!($name),
                    offset: $name,
                    width: $crate::regdef::register_block!(@width $acc),
                    access: $crate::regdef::register_block!(@access $acc),
                    words: $crate::regdef::words($crate::regdef::register_block!(@words $($words)?)),
                    doc: concat!($($doc, "\n"),*),
                },
            )*],
            sets: &[$(
                $crate::regdef::RegSet {
                    name: stringify!($set),
                    base: $sbase,
                    stride: $sstride,
                    count: $scount,
                    regs: &[$(
                        $crate::regdef::Reg {
                            name: stringify!($sname),
                            offset: $sname,
                            width: $crate::regdef::register_block!(@width $sacc),
                            access: $crate::regdef::register_block!(@access $sacc),
                            words: 1,
                            doc: concat!($($sdoc, "\n"),*),
                        },
                    )*],
                },
            )*],
        };
        const _: () = $block.check();
    };
    (@words) => { 1 };
    (@words $n:expr) => { $n };
    (@width ro64) => { $crate::regdef::Width::W64 };
    (@width $other:ident) => { $crate::regdef::Width::W32 };
    (@access ro) => { $crate::regdef::Access::Ro };
    (@access ro64) => { $crate::regdef::Access::Ro };
    (@access rw) => { $crate::regdef::Access::Rw };
    (@access wo) => { $crate::regdef::Access::Wo };
    (@access w1c) => { $crate::regdef::Access::W1c };
    (@label ro) => { "RO" };
    (@label ro64) => { "RO 64-bit" };
    (@label rw) => { "RW" };
    (@label wo) => { "WO" };
    (@label w1c) => { "W1C" };
}
pub(crate) use register_block;

#[cfg(test)]
mod tests {
    use super::*;

    const fn reg(name: &'static str, offset: u64, width: Width, access: Access) -> Reg {
        Reg {
            name,
            offset,
            width,
            access,
            words: 1,
            doc: "",
        }
    }

    fn array_of(regs: &'static [Reg], sets: &'static [RegSet]) -> Block {
        Block {
            id: BlockId::Ccu,
            name: "TEST",
            module: "test",
            doc: "",
            placement: Placement::Array {
                base: 0x1000,
                stride: 0x40,
                count: 4,
            },
            regs,
            sets,
        }
    }

    #[test]
    fn a_well_formed_block_passes_and_finds_its_registers() {
        static REGS: [Reg; 2] = [
            reg("A", 0x00, Width::W32, Access::Rw),
            reg("B", 0x08, Width::W64, Access::Ro),
        ];
        static SET_REGS: [Reg; 1] = [reg("S", 0x04, Width::W32, Access::Wo)];
        static SETS: [RegSet; 1] = [RegSet {
            name: "SET",
            base: 0x20,
            stride: 0x10,
            count: 2,
            regs: &SET_REGS,
        }];
        let block = array_of(&REGS, &SETS);
        block.check();
        assert_eq!(
            block.register_at(0x0C).map(|(r, at)| (r.name, at)),
            Some(("B", 0x08))
        );
        assert_eq!(
            block.register_at(0x34).map(|(r, at)| (r.name, at)),
            Some(("S", 0x34))
        );
        assert_eq!(block.register_at(0x30), None);
        assert_eq!(block.range(), (0x1000, 0x1100));
    }

    #[test]
    #[should_panic(expected = "two registers overlap")]
    fn overlapping_registers_are_refused() {
        static REGS: [Reg; 2] = [
            reg("A", 0x08, Width::W64, Access::Ro),
            reg("B", 0x0C, Width::W32, Access::Rw),
        ];
        array_of(&REGS, &[]).check();
    }

    #[test]
    #[should_panic(expected = "a writable 64-bit register")]
    fn a_writable_64_bit_register_is_refused() {
        static REGS: [Reg; 1] = [reg("A", 0x08, Width::W64, Access::Rw)];
        array_of(&REGS, &[]).check();
    }

    #[test]
    #[should_panic(expected = "register outside its block")]
    fn a_register_past_the_stride_is_refused() {
        static REGS: [Reg; 1] = [reg("A", 0x40, Width::W32, Access::Rw)];
        array_of(&REGS, &[]).check();
    }

    #[test]
    #[should_panic(expected = "a register overlaps a register set")]
    fn a_register_inside_a_set_is_refused() {
        static REGS: [Reg; 1] = [reg("A", 0x30, Width::W32, Access::Rw)];
        static SETS: [RegSet; 1] = [RegSet {
            name: "SET",
            base: 0x20,
            stride: 0x10,
            count: 2,
            regs: &[],
        }];
        array_of(&REGS, &SETS).check();
    }
}
