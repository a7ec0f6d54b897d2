//! `[pages]`: tenant counter pages (docs/pages.md).

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::paths::DEFAULT_PAGES_DIR;

/// Default time between backstop refreshes (every page read; events
/// refresh the pages they change at once).
pub const DEFAULT_BACKSTOP_MS: u64 = 1_000;
/// Shortest time between backstop refreshes.
pub const MIN_BACKSTOP_MS: u64 = 10;
/// Longest time between backstop refreshes (one hour).
pub const MAX_BACKSTOP_MS: u64 = 3_600_000;

/// `[pages]` as written.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PagesSection {
    /// Offer pages.
    pub enabled: bool,
    /// Directory of the page socket and the page files.
    pub dir: PathBuf,
    /// Milliseconds between backstop refreshes.
    pub backstop_ms: Spanned<u64>,
}

impl Default for PagesSection {
    fn default() -> Self {
        PagesSection {
            enabled: true,
            dir: PathBuf::from(DEFAULT_PAGES_DIR),
            backstop_ms: Spanned::new(0..0, DEFAULT_BACKSTOP_MS),
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
    /// Time between backstop refreshes.
    pub backstop: Duration,
}

impl Default for PagesConfig {
    fn default() -> Self {
        PagesConfig {
            enabled: true,
            dir: PathBuf::from(DEFAULT_PAGES_DIR),
            backstop: Duration::from_millis(DEFAULT_BACKSTOP_MS),
        }
    }
}

impl PagesSection {
    /// The checked settings, or the span and reason of the bad value.
    pub fn resolve(&self) -> Result<PagesConfig, (Range<usize>, String)> {
        let ms = *self.backstop_ms.get_ref();
        if !(MIN_BACKSTOP_MS..=MAX_BACKSTOP_MS).contains(&ms) {
            return Err((
                self.backstop_ms.span(),
                format!("backstop_ms must lie in {MIN_BACKSTOP_MS}..={MAX_BACKSTOP_MS}"),
            ));
        }
        Ok(PagesConfig {
            enabled: self.enabled,
            dir: self.dir.clone(),
            backstop: Duration::from_millis(ms),
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
    fn backstop_out_of_range_points_at_the_value() {
        let text = "[pages]\nbackstop_ms = 9\n";
        let (span, reason) = parse(text).unwrap_err();
        assert_eq!(&text[span], "9");
        assert!(reason.contains("backstop_ms"), "{reason}");
        assert!(parse("[pages]\nbackstop_ms = 3600001\n").is_err());
        let ok = parse("[pages]\nenabled = false\ndir = \"/x\"\nbackstop_ms = 500\n").unwrap();
        assert_eq!(ok.backstop, Duration::from_millis(500));
        assert!(!ok.enabled);
    }

    #[test]
    fn unknown_keys_are_refused() {
        // The fixed-period refresh of earlier builds is gone.
        let (_, reason) = parse("[pages]\nrefresh_us = 1000\n").unwrap_err();
        assert!(reason.contains("unknown field"), "{reason}");
    }
}
