//! gpupm driver: the device as a node served to the daemon and tools.

pub mod node;
pub mod service;
