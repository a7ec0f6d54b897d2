//! gpupm-driver: the emulated perfmon device model, its kernel-style driver
//! layer, and the device node that serves it.

pub mod host;
pub mod model;
pub mod node;
pub mod scenario;
