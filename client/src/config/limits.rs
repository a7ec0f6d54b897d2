//! `[limits]`: what one tenant, and all of them together, can make the
//! daemon hold (docs/isolation.md). Every key has a default that suits
//! one node; each is checked against a range and refused where written.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

/// One `[limits]` key: its name, default and allowed range.
struct Key {
    name: &'static str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
}

macro_rules! limits {
    ($( $(#[$doc:meta])* $field:ident = $default:expr, $lo:expr, $hi:expr; )*) => {
        /// Defaults of the `[limits]` keys, named as the keys.
        #[allow(non_upper_case_globals)]
        pub mod default {
            $( $(#[$doc])* pub const $field: u64 = $default; )*
        }

        const KEYS: &[Key] = &[
            $( Key { name: stringify!($field), default: $default, range: $lo..=$hi }, )*
        ];

        /// `[limits]` as written.
        #[derive(Clone, Debug, Deserialize, PartialEq)]
        #[serde(default, deny_unknown_fields)]
        pub struct LimitsSection {
            $( $(#[$doc])* pub $field: Spanned<u64>, )*
        }

        impl Default for LimitsSection {
            fn default() -> Self {
                LimitsSection { $( $field: Spanned::new(0..0, $default), )* }
            }
        }

        /// `[limits]`, checked (see [`default`] for each key's meaning).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Limits {
            $( $(#[$doc])* pub $field: u64, )*
        }

        impl Default for Limits {
            fn default() -> Self {
                Limits { $( $field: $default, )* }
            }
        }

        impl LimitsSection {
            /// The checked limits, or the span and reason of the bad value.
            pub fn resolve(&self) -> Result<Limits, (Range<usize>, String)> {
                $(
                    check(stringify!($field), &self.$field)?;
                )*
                Ok(Limits { $( $field: *self.$field.get_ref(), )* })
            }
        }
    };
}

limits! {
    /// Tenant-node handles (`open()`s) one uid may hold; past it `open()`
    /// fails with EMFILE.
    handles_per_uid = 256, 1, 1 << 20;
    /// Tenant-node handles of everyone together; past it ENFILE.
    handles_total = 8192, 1, 1 << 24;
    /// Stream sessions one uid may hold; past it ENOSPC.
    stream_sessions_per_uid = 64, 0, 1 << 20;
    /// Sampling sessions one uid may hold; past it ENOSPC.
    sampling_sessions_per_uid = 16, 0, 1 << 16;
    /// Runtime-instrumentation sessions one uid may hold; past it ENOSPC.
    ri_sessions_per_uid = 8, 0, 64;
    /// Sessions of every kind of everyone together; past it ENOSPC.
    sessions_total = 4096, 1, 1 << 24;
    /// Marked ranges the contexts of one VM may hold at once; past it ENOSPC.
    ranges_per_vm = 64, 1, 1 << 16;
    /// Blocking `read()`s one uid may have waiting; past it EBUSY.
    parked_reads_per_uid = 64, 1, 1 << 16;
    /// Blocking `read()`s of everyone together; past it EBUSY.
    parked_reads_total = 1024, 1, 1 << 20;
    /// MiB of session queues (stream, sampling, RI) one uid may reserve.
    queued_mib_per_uid = 128, 1, 1 << 20;
    /// MiB of session queues of everyone together; each VM's tenants and
    /// the admin get an equal share of it.
    queued_mib_total = 512, 1, 1 << 20;
    /// Page-socket connections of one tenant (the callers mapped to the
    /// same VMs) or of the admin; past it the connection is refused with
    /// EMFILE.
    page_connections_per_tenant = 32, 1, 1 << 16;
    /// Page-socket connections of all tenants together; past it ENFILE.
    page_connections_total = 512, 1, 1 << 20;
    /// Requests that read the device one tenant uid may make per second
    /// (a bucket of as many tokens, refilled continuously; one refused
    /// for its shape or scope costs nothing); past it EAGAIN.
    device_reads_per_s = 2000, 1, 1_000_000;
    /// Shortest cycle-sample period P a tenant's sampling session gets
    /// (the admin is not bound): a shorter request is raised to it, and
    /// the answer's `device_period` says so. What one tenant's samplers
    /// cost the device and the daemon is what another partition's tenant
    /// waits behind.
    tenant_min_sample_period = 4096, 256, 1 << 30;
    /// Fewest taken branches N per branch stack a tenant's sampling
    /// session gets (the admin is not bound): a smaller request is raised
    /// to it, and the answer's `device_branch_every` says so.
    tenant_min_branch_every = 64, 1, 1 << 20;
}

fn check(name: &str, value: &Spanned<u64>) -> Result<(), (Range<usize>, String)> {
    let key = KEYS
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| (value.span(), format!("unknown limit {name}")))?;
    if key.range.contains(value.get_ref()) {
        return Ok(());
    }
    Err((
        value.span(),
        format!(
            "{} must lie in {}..={} (default {})",
            key.name,
            key.range.start(),
            key.range.end(),
            key.default
        ),
    ))
}

impl Limits {
    /// Bytes of session queues one uid may reserve.
    pub fn queued_bytes_per_uid(&self) -> u64 {
        self.queued_mib_per_uid << 20
    }

    /// Bytes of session queues of everyone together.
    pub fn queued_bytes_total(&self) -> u64 {
        self.queued_mib_total << 20
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Limits, (Range<usize>, String)> {
        #[derive(Deserialize)]
        struct File {
            limits: LimitsSection,
        }
        let f: File = toml::from_str(text).map_err(|e| (0..0, e.message().to_string()))?;
        f.limits.resolve()
    }

    #[test]
    fn defaults_and_set_values() {
        assert_eq!(parse("[limits]\n").unwrap(), Limits::default());
        let l = parse("[limits]\nhandles_per_uid = 3\nqueued_mib_total = 64\n").unwrap();
        assert_eq!((l.handles_per_uid, l.queued_bytes_total()), (3, 64 << 20));
        assert_eq!(l.parked_reads_total, default::parked_reads_total);
    }

    /// Every key refuses the value just outside each end of its range and
    /// takes both ends (the keys added later as much as the first ones).
    #[test]
    fn every_key_holds_both_ends_of_its_range() {
        for key in KEYS {
            let at = |v: u64| parse(&format!("[limits]\n{} = {v}\n", key.name));
            for v in [*key.range.start(), *key.range.end()] {
                assert!(at(v).is_ok(), "{} = {v}", key.name);
            }
            if let Some(below) = key.range.start().checked_sub(1) {
                assert!(at(below).is_err(), "{} = {below}", key.name);
            }
            let above = key.range.end() + 1;
            let (_, reason) = at(above).unwrap_err();
            assert!(
                reason.contains(key.name),
                "{} = {above}: {reason}",
                key.name
            );
        }
    }

    #[test]
    fn out_of_range_values_point_at_the_value() {
        let text = "[limits]\nhandles_per_uid = 0\n";
        let (span, reason) = parse(text).unwrap_err();
        assert_eq!(&text[span], "0");
        assert!(
            reason.contains("handles_per_uid must lie in 1..="),
            "{reason}"
        );
        assert!(parse("[limits]\nri_sessions_per_uid = 65\n").is_err());
        assert!(parse("[limits]\nsampling_sessions_per_uid = 0\n").is_ok());
        let (_, reason) = parse("[limits]\nhandles = 3\n").unwrap_err();
        assert!(reason.contains("unknown field"), "{reason}");
    }
}
