//! The device's feature planes — sampling, runtime instrumentation, marked
//! ranges — and the commit mirror: each owns one device feature and knows
//! only the device client and the shared types. `main` makes them once and
//! hands each to whoever needs it: the engine drives them (drains,
//! interrupts, reprogramming), the tenant node serves them
//! ([`Planes::features`]), the pages and the drains read the mirror, the
//! health report reads their counts.

use std::sync::Arc;

use gpupm_client::DevNode;

use crate::mirror::DeviceMirror;
use crate::ranges::RangeBook;
use crate::ri::RiUnit;
use crate::sampling::drain::DevSampler;
use crate::sampling::{Plane, SamplerDevice};

/// The planes of one device.
#[derive(Debug, Clone)]
pub struct Planes {
    /// The device's samplers (programmed and drained by the engine).
    pub sampler: Arc<DevSampler>,
    /// Tenants' sampling sessions and the routing of drained records.
    pub sampling: Arc<Plane>,
    /// The runtime-instrumentation control blocks and their sessions.
    pub ri: Arc<RiUnit>,
    /// Tenants' marked ranges and call graphs.
    pub ranges: Arc<RangeBook>,
    /// The device's commit mirror, mapped once for the pages and the drains.
    pub mirror: Arc<DeviceMirror>,
}

impl Planes {
    /// The planes of `dev`, whose clock runs at `clock_khz`.
    pub fn new(dev: &Arc<DevNode>, clock_khz: u32) -> Planes {
        let sampler = Arc::new(DevSampler::new(Arc::clone(dev), clock_khz));
        let device: Arc<dyn SamplerDevice> = sampler.clone();
        Planes {
            sampling: Plane::new(device, clock_khz),
            sampler,
            ri: RiUnit::new(Arc::clone(dev)),
            ranges: Arc::new(RangeBook::new(Arc::clone(dev))),
            mirror: Arc::new(DeviceMirror::new(Arc::clone(dev))),
        }
    }

    /// What the tenant node serves besides counters.
    pub fn features(&self) -> Features {
        Features {
            sampling: Some(Arc::clone(&self.sampling)),
            ri: Some(Arc::clone(&self.ri)),
            ranges: Some(Arc::clone(&self.ranges)),
        }
    }
}

/// The device features a tenant node serves besides counters; a missing
/// one is answered as a daemon without it would (`ENOTTY`).
#[derive(Debug, Clone, Default)]
pub struct Features {
    /// Sampling sessions (`TENANT_IOC_OPEN_SAMPLING`).
    pub sampling: Option<Arc<Plane>>,
    /// Runtime-instrumentation sessions (`TENANT_IOC_OPEN_RI` and its kin).
    pub ri: Option<Arc<RiUnit>>,
    /// Marked ranges and call graphs.
    pub ranges: Option<Arc<RangeBook>>,
}
