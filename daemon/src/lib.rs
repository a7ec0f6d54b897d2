//! gpupmd: the privileged gpupm daemon, as a library so its parts can be
//! tested on their own. The binary (`src/main.rs`) wires them together.

pub mod affinity;
pub mod config;
pub mod config_access;
pub mod engine;
pub mod feed;
pub mod health;
pub mod kernel_pmu;
pub mod metrics;
pub mod mirror;
pub mod pages;
pub mod planes;
pub mod ranges;
pub mod ri;
pub mod sampling;
pub mod stop_signals;
pub mod store;
pub mod tenant;
pub mod view;
pub mod worker;
