//! gpupm-driver: the emulated perfmon device model and its kernel-style driver.

pub mod host;
pub mod model;
pub mod scenario;
