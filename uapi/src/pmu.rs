//! The perf PMU module `gpupm_pmu.ko`: how a perf event names a gpupm
//! counter, and the publication device through which `gpupmd` hands the
//! module committed totals.
//!
//! # Perf events
//! The module registers the PMU [`PMU_NAME`]
//! (`/sys/bus/event_source/devices/gpupm/`). An event's `perf_event_attr`
//! carries:
//!
//! | field | bits | meaning |
//! |---|---|---|
//! | `event` | `config:0-15` | catalogue id ([`crate::events`]) |
//! | `scope` | `config:16-19` | [`scope`]: 0 = implied by `vm`/`ctx` |
//! | `vm` | `config1:0-15` | VM id, `1..MAX_VMS` |
//! | `ctx` | `config1:16-31` | context id, `1..MAX_CONTEXTS` |
//!
//! Every other bit of `config`, `config1` and `config2` must be zero. An
//! implied scope is the system with neither id set, the VM with `vm` set,
//! the context with `ctx` set; setting both is refused. A
//! [`crate::events::Scope::Device`] event (NVLink) exists only in the
//! system scope. Anything else fails `perf_event_open` with EINVAL.
//!
//! # Publication (`/dev/gpupm_pmu`, root only)
//! The daemon writes cumulative totals read from the device's memory blocks
//! with [`GPUPM_PMU_IOC_PUBLISH`] and learns which context scopes have open
//! perf events with [`GPUPM_PMU_IOC_WANTED`]. The module keeps, per scope
//! and event, the last published total and a base, and reports
//! `base + last` — a value that starts at 0 when the module first sees the
//! scope and never goes back:
//!
//! - the same `generation` with a total not below the last one: the counter
//!   advances by the difference (a restarted daemon republishing the same
//!   device totals changes nothing);
//! - a total below the last one (the device was reset and counts from 0
//!   again): the base absorbs the last total and the counter advances by
//!   the new total;
//! - another `generation` (a context scope: the id now names a newer
//!   instance, `generation` being its created cycle): the same, for every
//!   event.
//!
//! A malformed request (version, count, scope, id, generation of a
//! non-context scope, a non-zero reserved field or counter slot beyond the
//! catalogue) fails with EINVAL and changes nothing; an unknown request
//! with ENOTTY.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::events::MAX_EVENTS;
use crate::regs::MAX_CONTEXTS;

/// Name of the perf PMU (`/sys/bus/event_source/devices/gpupm`).
pub const PMU_NAME: &str = "gpupm";
/// Name of the publication misc device (`/dev/gpupm_pmu`).
pub const PUBLISH_DEVICE: &str = "gpupm_pmu";

/// Scope values of the `scope` format field; 1..=3 equal the tenant ABI's
/// [`crate::tenant::scope`] values.
pub mod scope {
    /// Implied: system, or the VM or context whose id is set.
    pub const IMPLIED: u32 = 0;
    /// One context (`ctx`).
    pub const CONTEXT: u32 = crate::tenant::scope::CONTEXT;
    /// One VM (`vm`).
    pub const VM: u32 = crate::tenant::scope::VM;
    /// The whole device.
    pub const SYSTEM: u32 = crate::tenant::scope::SYSTEM;
}

/// One bit field of the perf config words: `(word, first bit, width)`,
/// `word` 0 = `config`, 1 = `config1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Name in `format/`.
    pub name: &'static str,
    /// 0 = `config`, 1 = `config1`.
    pub word: u32,
    /// Lowest bit.
    pub shift: u32,
    /// Width in bits.
    pub bits: u32,
}

impl Field {
    /// The sysfs `format/` text, e.g. `config:0-15`.
    pub fn sysfs(&self) -> String {
        let word = if self.word == 0 { "config" } else { "config1" };
        format!("{word}:{}-{}", self.shift, self.shift + self.bits - 1)
    }

    /// The field's value in `word`.
    pub const fn get(&self, word: u64) -> u64 {
        (word >> self.shift) & ((1u64 << self.bits) - 1)
    }

    /// `value` placed in the field.
    pub const fn put(&self, value: u64) -> u64 {
        (value & ((1u64 << self.bits) - 1)) << self.shift
    }
}

/// Catalogue id.
pub const FIELD_EVENT: Field = Field {
    name: "event",
    word: 0,
    shift: 0,
    bits: 16,
};
/// [`scope`] value.
pub const FIELD_SCOPE: Field = Field {
    name: "scope",
    word: 0,
    shift: 16,
    bits: 4,
};
/// VM id.
pub const FIELD_VM: Field = Field {
    name: "vm",
    word: 1,
    shift: 0,
    bits: 16,
};
/// Context id.
pub const FIELD_CTX: Field = Field {
    name: "ctx",
    word: 1,
    shift: 16,
    bits: 16,
};
/// Every format field, in `format/` order.
pub const FIELDS: [Field; 4] = [FIELD_EVENT, FIELD_SCOPE, FIELD_VM, FIELD_CTX];

/// Bits of `config` that some field uses; the rest must be zero.
pub const CONFIG_USED: u64 = FIELD_EVENT.put(u64::MAX) | FIELD_SCOPE.put(u64::MAX);
/// Bits of `config1` that some field uses; the rest must be zero.
pub const CONFIG1_USED: u64 = FIELD_VM.put(u64::MAX) | FIELD_CTX.put(u64::MAX);

/// ioctl "type" byte of the publication device.
pub const PMU_IOC_MAGIC: u8 = b'P';
/// Version every publication argument struct must carry.
pub const PMU_STRUCT_VERSION: u32 = 1;
/// Most scopes one [`Publish`] carries (keeps it under 16 KiB).
pub const PUBLISH_BATCH: usize = 16;
/// Words of the context bitmap of [`Wanted`].
pub const WANTED_WORDS: usize = MAX_CONTEXTS as usize / 64;

/// The cumulative totals of one scope.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ScopeTotals {
    /// [`scope::CONTEXT`], [`scope::VM`] or [`scope::SYSTEM`].
    pub scope: u32,
    /// Context or VM id; 0 for the system.
    pub id: u32,
    /// Context scope: the instance's created cycle; otherwise 0.
    pub generation: u64,
    /// Totals by event id; slots `>= EVENT_COUNT` must be 0.
    pub counters: [u64; MAX_EVENTS],
}
const _: () = assert!(core::mem::size_of::<ScopeTotals>() == 16 + 8 * MAX_EVENTS);

impl Default for ScopeTotals {
    fn default() -> Self {
        ScopeTotals {
            scope: 0,
            id: 0,
            generation: 0,
            counters: [0; MAX_EVENTS],
        }
    }
}

/// `GPUPM_PMU_IOC_PUBLISH`: the totals of `count` scopes, applied
/// atomically with respect to every perf read (all or nothing).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Publish {
    /// Must be [`PMU_STRUCT_VERSION`].
    pub version: u32,
    /// Entries used, `1..=PUBLISH_BATCH`.
    pub count: u32,
    /// The scopes; entries past `count` must be all zero.
    pub entries: [ScopeTotals; PUBLISH_BATCH],
}
const _: () = assert!(core::mem::size_of::<Publish>() == 8 + PUBLISH_BATCH * (16 + 8 * MAX_EVENTS));

impl Default for Publish {
    fn default() -> Self {
        Publish {
            version: PMU_STRUCT_VERSION,
            count: 0,
            entries: [ScopeTotals::default(); PUBLISH_BATCH],
        }
    }
}

/// `GPUPM_PMU_IOC_WANTED`: which context scopes have open perf events (the
/// system and every VM are always published).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Wanted {
    /// Must be [`PMU_STRUCT_VERSION`] on input.
    pub version: u32,
    /// Reserved, 0 on input.
    pub reserved: u32,
    /// Out: perf events of this PMU initialised since the module loaded
    /// (every open counts, so a changed number means the set may have
    /// changed).
    pub opened: u64,
    /// Out: bit `c % 64` of word `c / 64` is set while context `c` has an
    /// open event.
    pub contexts: [u64; WANTED_WORDS],
}
const _: () = assert!(core::mem::size_of::<Wanted>() == 16 + 8 * WANTED_WORDS);

impl Default for Wanted {
    fn default() -> Self {
        Wanted {
            version: PMU_STRUCT_VERSION,
            reserved: 0,
            opened: 0,
            contexts: [0; WANTED_WORDS],
        }
    }
}

impl Wanted {
    /// The context ids whose bit is set.
    pub fn context_ids(&self) -> impl Iterator<Item = u32> + '_ {
        (0..MAX_CONTEXTS).filter(|&c| self.contexts[c as usize / 64] & (1 << (c % 64)) != 0)
    }
}

macro_rules! pmu_ioctl_numbers {
    ($( $(#[$m:meta])* $name:ident = $dir:ident($nr:literal, $ty:ty); )*) => {
        $( $(#[$m])* pub const $name: u32 = crate::ioc::$dir(PMU_IOC_MAGIC, $nr, core::mem::size_of::<$ty>());
           const _: () = assert!(core::mem::size_of::<$ty>() <= crate::ioctl::MAX_IOCTL_SIZE); )*
        /// Every publication-device ioctl number with its name.
        pub const PMU_IOCTLS: &[(&str, u32)] = &[ $( (stringify!($name), $name), )* ];
    };
}

pmu_ioctl_numbers! {
    /// Publish the totals of up to [`PUBLISH_BATCH`] scopes.
    GPUPM_PMU_IOC_PUBLISH = write(0x00, Publish);
    /// Read which context scopes are wanted.
    GPUPM_PMU_IOC_WANTED = read_write(0x01, Wanted);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::MAX_VMS;

    #[test]
    fn fields_are_disjoint_and_hold_every_id() {
        assert_eq!(FIELD_EVENT.put(u64::MAX) & FIELD_SCOPE.put(u64::MAX), 0);
        assert_eq!(FIELD_VM.put(u64::MAX) & FIELD_CTX.put(u64::MAX), 0);
        assert!(1u64 << FIELD_EVENT.bits > MAX_EVENTS as u64);
        assert!(1u64 << FIELD_VM.bits >= u64::from(MAX_VMS));
        assert!(1u64 << FIELD_CTX.bits >= u64::from(MAX_CONTEXTS));
        assert_eq!(FIELD_SCOPE.sysfs(), "config:16-19");
        assert_eq!(FIELD_CTX.sysfs(), "config1:16-31");
        assert_eq!(FIELD_CTX.get(FIELD_CTX.put(4095) | FIELD_VM.put(7)), 4095);
    }

    #[test]
    fn wanted_bitmap_names_its_contexts() {
        let mut w = Wanted::default();
        w.contexts[0] = 1 << 5;
        w.contexts[WANTED_WORDS - 1] = 1 << 63;
        assert_eq!(w.context_ids().collect::<Vec<_>>(), [5, MAX_CONTEXTS - 1]);
    }
}
