//! The gpupm PMU as perf sees it, and the tenant node's totals.

use std::fs::{self, File, OpenOptions};
use std::os::fd::OwnedFd;
use std::path::Path;

use gpupm_uapi::events;
use gpupm_uapi::pmu::{FIELD_CTX, FIELD_EVENT, FIELD_SCOPE, FIELD_VM};
use gpupm_uapi::tenant::{scope, ReadCounters, TENANT_STRUCT_VERSION};
use perf_event_open_sys::bindings::{
    perf_event_attr, perf_event_attr__bindgen_ty_3, PERF_FLAG_FD_CLOEXEC,
};
use zerocopy::FromZeros;

use crate::sys;

/// Where the PMU shows itself.
pub const SYSFS: &str = "/sys/bus/event_source/devices/gpupm";

/// The PMU's perf type and designated CPU.
#[derive(Clone, Copy, Debug)]
pub struct Pmu {
    pub kind: u32,
    pub cpu: i32,
}

impl Pmu {
    /// Reads `type` and `cpumask` from sysfs.
    pub fn find() -> Result<Pmu, String> {
        let read = |f: &str| {
            fs::read_to_string(Path::new(SYSFS).join(f))
                .map(|s| s.trim().to_string())
                .map_err(|e| format!("{SYSFS}/{f}: {e}"))
        };
        let kind = read("type")?.parse().map_err(|e| format!("type: {e}"))?;
        let cpu = read("cpumask")?;
        let cpu = cpu
            .split([',', '-'])
            .next()
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("cpumask {cpu:?}"))?;
        Ok(Pmu { kind, cpu })
    }

    /// A counting attr for `event` in the scope given by `vm`/`ctx`.
    pub fn attr(&self, event: &str, vm: u32, ctx: u32) -> Result<perf_event_attr, String> {
        let id = events::by_name(event)
            .ok_or_else(|| format!("no event {event}"))?
            .id;
        Ok(perf_event_attr {
            type_: self.kind,
            size: sys::attr_size(),
            config: FIELD_EVENT.put(u64::from(id)) | FIELD_SCOPE.put(0),
            __bindgen_anon_3: perf_event_attr__bindgen_ty_3 {
                config1: FIELD_VM.put(u64::from(vm)) | FIELD_CTX.put(u64::from(ctx)),
            },
            ..Default::default()
        })
    }

    /// Opens `attr` system-wide on the designated CPU.
    pub fn open(&self, attr: &perf_event_attr) -> Result<OwnedFd, String> {
        sys::perf_open(attr, -1, self.cpu, u64::from(PERF_FLAG_FD_CLOEXEC))
            .map_err(|e| format!("perf_event_open: {e}"))
    }
}

/// Reads a counter, failing with the reason.
pub fn count(fd: &OwnedFd) -> Result<u64, String> {
    sys::read_count(fd).map_err(|e| format!("read: {e}"))
}

/// The tenant node.
pub struct Tenant(File);

impl Tenant {
    /// Opens `node`.
    pub fn open(node: &Path) -> Result<Tenant, String> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(node)
            .map(Tenant)
            .map_err(|e| format!("{}: {e}", node.display()))
    }

    /// The cumulative total of `event` for VM `vm` (0 = the system).
    pub fn total(&self, event: &str, vm: u32) -> Result<u64, String> {
        let id = events::by_name(event)
            .ok_or_else(|| format!("no event {event}"))?
            .id;
        let mut req = ReadCounters::new_zeroed();
        req.version = TENANT_STRUCT_VERSION;
        (req.scope, req.id) = if vm == 0 {
            (scope::SYSTEM, 0)
        } else {
            (scope::VM, vm)
        };
        req.n_events = 1;
        req.events[0] = id;
        sys::read_counters(&self.0, &mut req).map_err(|e| format!("READ_COUNTERS: {e}"))?;
        Ok(req.values[0])
    }
}
