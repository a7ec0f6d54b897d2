//! The publication device's ABI, driven directly (before gpupmd runs, on
//! scopes no daemon publishes: VM 63 and context 4000): a counter starts
//! at 0 when its scope is first published, advances by the published
//! differences, absorbs a device reset and a new context instance without
//! going back, and every malformed request is refused with EINVAL (unknown
//! ones with ENOTTY) and changes nothing.

use std::fs::{File, OpenOptions};
use std::os::fd::OwnedFd;

use gpupm_uapi::events::{self, EVENT_COUNT, MAX_EVENTS};
use gpupm_uapi::pmu::{scope, Publish, ScopeTotals, Wanted, PUBLISH_BATCH};
use nix::errno::Errno;

use crate::pmu::{count, Pmu};
use crate::sys;

const VM: u32 = 63;
const CTX: u32 = 4000;
/// The event every publication check counts.
pub const EVENT: &str = "sm_inst_executed";

/// A publication entry with `total` for [`EVENT`] (0 for the others).
pub fn entry(kind: u32, id: u32, generation: u64, total: u64) -> ScopeTotals {
    let mut e = ScopeTotals {
        scope: kind,
        id,
        generation,
        ..Default::default()
    };
    let ev = events::by_name(EVENT).map_or(0, |e| usize::from(e.id));
    e.counters[ev] = total;
    e
}

/// A request publishing `entries`.
pub fn request(entries: &[ScopeTotals]) -> Publish {
    let mut req = Publish {
        count: u32::try_from(entries.len()).unwrap_or(u32::MAX),
        ..Default::default()
    };
    req.entries[..entries.len()].copy_from_slice(entries);
    req
}

struct Probe {
    dev: File,
    vm_fd: OwnedFd,
    ctx_fd: OwnedFd,
    vm_last: u64,
    ctx_last: u64,
}

impl Probe {
    fn publish(&self, entries: &[ScopeTotals]) -> Result<(), String> {
        sys::publish(&self.dev, &request(entries)).map_err(|e| format!("publish {entries:?}: {e}"))
    }

    /// Both counters advanced by exactly `vm` and `ctx` since the last call.
    fn expect(&mut self, what: &str, vm: u64, ctx: u64) -> Result<(), String> {
        let (v, c) = (count(&self.vm_fd)?, count(&self.ctx_fd)?);
        let got = (v.wrapping_sub(self.vm_last), c.wrapping_sub(self.ctx_last));
        if got != (vm, ctx) {
            return Err(format!(
                "{what}: counters advanced by {got:?}, expected {:?}",
                (vm, ctx)
            ));
        }
        (self.vm_last, self.ctx_last) = (v, c);
        Ok(())
    }
}

/// Runs the ABI checks; `Err` names the first failure.
pub fn run() -> Result<(), String> {
    let pmu = Pmu::find()?;
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/gpupm_pmu")
        .map_err(|e| format!("/dev/gpupm_pmu: {e}"))?;
    let mut wanted = Wanted::default();
    sys::wanted(&dev, &mut wanted).map_err(|e| format!("WANTED: {e}"))?;
    if wanted.context_ids().any(|c| c == CTX) {
        return Err("context 4000 wanted before any event was opened".into());
    }
    let vm_fd = pmu.open(&pmu.attr(EVENT, VM, 0)?)?;
    let ctx_fd = pmu.open(&pmu.attr(EVENT, 0, CTX)?)?;
    sys::wanted(&dev, &mut wanted).map_err(|e| format!("WANTED: {e}"))?;
    if !wanted.context_ids().any(|c| c == CTX) || wanted.opened < 2 {
        return Err(format!(
            "WANTED does not show context {CTX} (opened {})",
            wanted.opened
        ));
    }
    let mut p = Probe {
        dev,
        vm_fd,
        ctx_fd,
        vm_last: 0,
        ctx_last: 0,
    };
    p.expect("before any publication", 0, 0)?;
    p.publish(&[
        entry(scope::VM, VM, 0, 1_000),
        entry(scope::CONTEXT, CTX, 7, 500),
    ])?;
    p.expect("first publication (history is not counted)", 0, 0)?;
    p.publish(&[
        entry(scope::VM, VM, 0, 1_250),
        entry(scope::CONTEXT, CTX, 7, 540),
    ])?;
    p.expect("second publication", 250, 40)?;
    p.publish(&[
        entry(scope::VM, VM, 0, 1_250),
        entry(scope::CONTEXT, CTX, 7, 540),
    ])?;
    p.expect("the same totals again (a restarted daemon)", 0, 0)?;
    p.publish(&[
        entry(scope::VM, VM, 0, 30),
        entry(scope::CONTEXT, CTX, 9, 15),
    ])?;
    p.expect("device reset / new context instance", 30, 15)?;
    refusals(&mut p)?;
    p.publish(&[
        entry(scope::VM, VM, 0, 45),
        entry(scope::CONTEXT, CTX, 9, 16),
    ])?;
    p.expect("after the refused requests", 15, 1)?;
    let Probe { dev, ctx_fd, .. } = p;
    drop(ctx_fd);
    sys::wanted(&dev, &mut wanted).map_err(|e| format!("WANTED: {e}"))?;
    if wanted.context_ids().any(|c| c == CTX) {
        return Err("context 4000 still wanted after its event was closed".into());
    }
    println!("@@gpupm metric abi_refusals_checked=ok");
    Ok(())
}

/// Every malformed request fails as documented and moves no counter.
fn refusals(p: &mut Probe) -> Result<(), String> {
    let good = entry(scope::VM, VM, 0, 10_000);
    let mut cases: Vec<(&str, Publish)> = Vec::new();
    let mut r = request(&[good]);
    r.version = 2;
    cases.push(("wrong version", r));
    let mut r = request(&[good]);
    r.count = 0;
    cases.push(("count 0", r));
    let mut r = request(&[good]);
    r.count = u32::try_from(PUBLISH_BATCH + 1).unwrap_or(u32::MAX);
    cases.push(("count past the batch", r));
    let mut r = request(&[good]);
    r.entries[1] = good;
    cases.push(("an entry past count", r));
    for (what, e) in [
        ("scope 0", entry(0, VM, 0, 1)),
        ("scope 4", entry(4, VM, 0, 1)),
        ("system with an id", entry(scope::SYSTEM, 1, 0, 1)),
        ("VM 0", entry(scope::VM, 0, 0, 1)),
        ("VM 64", entry(scope::VM, 64, 0, 1)),
        ("VM with a generation", entry(scope::VM, VM, 3, 1)),
        ("context 0", entry(scope::CONTEXT, 0, 0, 1)),
        ("context 4096", entry(scope::CONTEXT, 4096, 0, 1)),
    ] {
        // The good entry first: a refused request must not apply it either.
        cases.push((what, request(&[good, e])));
    }
    let mut bad_slot = good;
    bad_slot.counters[EVENT_COUNT] = 1;
    cases.push(("a counter past the catalogue", request(&[good, bad_slot])));
    for (what, req) in cases {
        match sys::publish(&p.dev, &req) {
            Err(Errno::EINVAL) => {}
            other => return Err(format!("{what}: got {other:?}, expected EINVAL")),
        }
        p.expect(what, 0, 0)?;
    }
    let mut w = Wanted {
        version: 0,
        ..Default::default()
    };
    match sys::wanted(&p.dev, &mut w) {
        Err(Errno::EINVAL) => {}
        other => return Err(format!("WANTED version 0: got {other:?}, expected EINVAL")),
    }
    let unknown = gpupm_uapi::pmu::GPUPM_PMU_IOC_WANTED + 0x10;
    match sys::ioctl_zeroed(&p.dev, unknown) {
        Err(Errno::ENOTTY) => {}
        other => return Err(format!("unknown ioctl: got {other:?}, expected ENOTTY")),
    }
    p.expect("unknown ioctl", 0, 0)?;
    const _: () = assert!(EVENT_COUNT < MAX_EVENTS);
    Ok(())
}
