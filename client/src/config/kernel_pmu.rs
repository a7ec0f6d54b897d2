//! `[kernel_pmu]`: publication of committed totals to the perf PMU module
//! `gpupm_pmu.ko` (off by default).

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

/// Default publication device.
pub const DEFAULT_DEVICE: &str = "/dev/gpupm_pmu";
/// Longest publication interval.
pub const MAX_INTERVAL_MS: u64 = 60_000;

/// `[kernel_pmu]` as written.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct KernelPmuSection {
    /// Publish to the module.
    pub enabled: bool,
    /// The module's publication device.
    pub device: PathBuf,
    /// Milliseconds between publications.
    pub interval_ms: Spanned<u64>,
}

impl Default for KernelPmuSection {
    fn default() -> Self {
        KernelPmuSection {
            enabled: false,
            device: PathBuf::from(DEFAULT_DEVICE),
            interval_ms: Spanned::new(0..0, 100),
        }
    }
}

/// `[kernel_pmu]`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelPmuConfig {
    /// Publish to the module.
    pub enabled: bool,
    /// The module's publication device.
    pub device: PathBuf,
    /// Time between publications.
    pub interval: Duration,
}

impl Default for KernelPmuConfig {
    fn default() -> Self {
        KernelPmuConfig {
            enabled: false,
            device: PathBuf::from(DEFAULT_DEVICE),
            interval: Duration::from_millis(100),
        }
    }
}

impl KernelPmuSection {
    /// The checked settings, or the span and reason of the bad value.
    pub fn resolve(&self) -> Result<KernelPmuConfig, (Range<usize>, String)> {
        let ms = *self.interval_ms.get_ref();
        if !(1..=MAX_INTERVAL_MS).contains(&ms) {
            return Err((
                self.interval_ms.span(),
                format!("interval_ms must lie in 1..={MAX_INTERVAL_MS}"),
            ));
        }
        Ok(KernelPmuConfig {
            enabled: self.enabled,
            device: self.device.clone(),
            interval: Duration::from_millis(ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<KernelPmuConfig, (Range<usize>, String)> {
        #[derive(Deserialize)]
        struct File {
            kernel_pmu: KernelPmuSection,
        }
        let f: File = toml::from_str(text).map_err(|e| (0..0, e.message().to_string()))?;
        f.kernel_pmu.resolve()
    }

    #[test]
    fn defaults_are_off_with_a_100_ms_interval() {
        let c = parse("[kernel_pmu]\n").unwrap();
        assert_eq!(c, KernelPmuConfig::default());
        assert!(!c.enabled);
    }

    #[test]
    fn interval_out_of_range_points_at_the_value() {
        let text = "[kernel_pmu]\nenabled = true\ninterval_ms = 0\n";
        let (span, reason) = parse(text).unwrap_err();
        assert_eq!(&text[span], "0");
        assert!(reason.contains("interval_ms"), "{reason}");
        assert!(parse("[kernel_pmu]\ninterval_ms = 60001\n").is_err());
        let ok =
            parse("[kernel_pmu]\nenabled = true\ndevice = \"/dev/x\"\ninterval_ms = 20\n").unwrap();
        assert_eq!(ok.interval, Duration::from_millis(20));
        assert_eq!(ok.device, PathBuf::from("/dev/x"));
    }

    #[test]
    fn unknown_keys_are_refused() {
        let (_, reason) = parse("[kernel_pmu]\nenable = true\n").unwrap_err();
        assert!(reason.contains("unknown field"), "{reason}");
    }
}
