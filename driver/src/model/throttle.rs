//! Clock capability over time: primary (boost) outside the scenario's
//! throttle windows, secondary (throttled) inside them.

use crate::scenario::ThrottleWindow;

/// Whether cycle `t` runs at secondary capability.
pub fn secondary_at(windows: &[ThrottleWindow], t: u64) -> bool {
    windows.iter().any(|w| (w.start..w.end).contains(&t))
}
