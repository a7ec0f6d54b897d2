//! `[pages]`: tenant counter pages (docs/pages.md).

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::paths::DEFAULT_PAGES_DIR;

/// Default time between page refreshes.
pub const DEFAULT_REFRESH_US: u64 = 1_000;
/// Shortest time between page refreshes.
pub const MIN_REFRESH_US: u64 = 100;
/// Longest time between page refreshes.
pub const MAX_REFRESH_US: u64 = 10_000_000;

/// `[pages]` as written.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PagesSection {
    /// Offer pages.
    pub enabled: bool,
    /// Directory of the page socket and the page files.
    pub dir: PathBuf,
    /// Microseconds between refreshes.
    pub refresh_us: Spanned<u64>,
}

impl Default for PagesSection {
    fn default() -> Self {
        PagesSection {
            enabled: true,
            dir: PathBuf::from(DEFAULT_PAGES_DIR),
            refresh_us: Spanned::new(0..0, DEFAULT_REFRESH_US),
        }
    }
}

/// `[pages]`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagesConfig {
    /// Offer pages.
    pub enabled: bool,
    /// Directory of the page socket and the page files.
    pub dir: PathBuf,
    /// Time between refreshes.
    pub refresh: Duration,
}

impl Default for PagesConfig {
    fn default() -> Self {
        PagesConfig {
            enabled: true,
            dir: PathBuf::from(DEFAULT_PAGES_DIR),
            refresh: Duration::from_micros(DEFAULT_REFRESH_US),
        }
    }
}

impl PagesSection {
    /// The checked settings, or the span and reason of the bad value.
    pub fn resolve(&self) -> Result<PagesConfig, (Range<usize>, String)> {
        let us = *self.refresh_us.get_ref();
        if !(MIN_REFRESH_US..=MAX_REFRESH_US).contains(&us) {
            return Err((
                self.refresh_us.span(),
                format!("refresh_us must lie in {MIN_REFRESH_US}..={MAX_REFRESH_US}"),
            ));
        }
        Ok(PagesConfig {
            enabled: self.enabled,
            dir: self.dir.clone(),
            refresh: Duration::from_micros(us),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PagesConfig, (Range<usize>, String)> {
        #[derive(Deserialize)]
        struct File {
            pages: PagesSection,
        }
        let f: File = toml::from_str(text).map_err(|e| (0..0, e.message().to_string()))?;
        f.pages.resolve()
    }

    #[test]
    fn defaults_are_on_in_run_gpupm_pages() {
        let c = parse("[pages]\n").unwrap();
        assert_eq!(c, PagesConfig::default());
        assert!(c.enabled);
        assert_eq!(c.dir, PathBuf::from("/run/gpupm/pages"));
    }

    #[test]
    fn refresh_out_of_range_points_at_the_value() {
        let text = "[pages]\nrefresh_us = 99\n";
        let (span, reason) = parse(text).unwrap_err();
        assert_eq!(&text[span], "99");
        assert!(reason.contains("refresh_us"), "{reason}");
        assert!(parse("[pages]\nrefresh_us = 10000001\n").is_err());
        let ok = parse("[pages]\nenabled = false\ndir = \"/x\"\nrefresh_us = 500\n").unwrap();
        assert_eq!(ok.refresh, Duration::from_micros(500));
        assert!(!ok.enabled);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let (_, reason) = parse("[pages]\nrefresh = 5\n").unwrap_err();
        assert!(reason.contains("unknown field"), "{reason}");
    }
}
