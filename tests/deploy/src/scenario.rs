//! The scenario of the fleet and dashboard tests' nodes
//! ([`gpupm_test_support::scenario::fleet`]), under the names the tests use.

pub use gpupm_test_support::scenario::{
    fleet as scenario, FLEET_CONFIDENTIAL_VM as CONFIDENTIAL_VM, FLEET_PLAIN_VMS as PLAIN_VMS,
    STEP, SYSTEM_SWITCH_TIMEOUT as SWITCH_TIMEOUT,
};
