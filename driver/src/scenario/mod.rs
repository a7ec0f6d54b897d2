//! Scenario files: what the emulated GPU looks like and what runs on it.
//!
//! A scenario is parsed from TOML ([`parse()`]) into the validated, resolved
//! [`Scenario`] below; every time is converted to device cycles at the
//! nominal clock, every event name to its catalogue id, every profile name to
//! an index. The device model consumes only this resolved form.
//!
//! # Format
//!
//! Every key is optional unless marked *required*; unknown keys are errors,
//! reported like every other error as `FILE:LINE:COL: REASON`
//! ([`ScenarioError`]). Times are written either as `<quantity>_us` (integer
//! microseconds, converted with the scenario's nominal clock:
//! `cycles = us * khz / 1000`) or as `<quantity>_cycles`; giving both forms
//! of one quantity is an error.
//!
//! The complete format, with every key, its default and its range
//! (`example.toml` beside this file; the built-in scenario is
//! [`BUILTIN_TOML`]):
//!
#![doc = concat!("```toml\n", include_str!("example.toml"), "```")]
//!
//! The resolved form keeps partitions, VMs, profiles, contexts and churn in
//! file order, phase rates sorted by event id, and throttle windows sorted by
//! start.

mod builtin;
mod error;
mod identity;
mod parse;
mod profiles;
pub mod program;
mod program_parse;
mod program_table;
mod raw;
mod slices;
mod spec;
pub mod synthetic;
#[cfg(test)]
mod test_support;
mod time;
mod timeline;
mod validate;

pub use builtin::{builtin, BUILTIN_TOML};
pub use error::ScenarioError;
pub use identity::{DEFAULT_MODEL, MAX_DEVICES};
pub use parse::{parse, parse_file};
pub use program::{BlockSpec, Exit, KernelSpec, ProgramSpec};
pub use spec::{
    h100_class, ChurnSpec, ClockSpec, ContextSpec, IdentitySpec, MigrationSpec, OobSpec,
    PartitionSpec, PhaseSpec, ProfileSpec, Scenario, StreamSpec, ThrottleWindow, TopologySpec,
    TriggerSpec, VmSpec, DEFAULT_OOB_HOST_TIMEOUT_MS, DEFAULT_OOB_PERIOD_MS, OOB_PERIOD_MIN,
};
