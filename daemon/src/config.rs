//! The daemon's configuration file, `gpupmd.toml`: its format, checks and
//! defaults are [`gpupm_client::config`], shared with the admin tools that
//! read the same file to find the daemon.

pub use gpupm_client::config::{
    load, parse, ConfigError, Programming, Settings, DEFAULT_PATH, MAX_TENANT_THREADS,
};

#[cfg(test)]
mod tests {
    use std::path::Path;

    use gpupm_client::config::DEFAULT_MAX_CONTEXTS;

    use super::*;

    #[test]
    fn full_example_file_parses() {
        let text = include_str!("../gpupmd.toml");
        let s = parse(Path::new("gpupmd.toml"), text).unwrap();
        assert_eq!(s.program.masks.len(), 1);
        assert_eq!(s.retention.max_contexts, DEFAULT_MAX_CONTEXTS);
        // The example states every limit at its default.
        assert_eq!(s.limits, gpupm_client::config::Limits::default());
    }
}
