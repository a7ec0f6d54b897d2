//! The designated CPU goes offline and comes back with events open: the
//! module's offline callback moves them (`perf_pmu_migrate_context`) to
//! another CPU, `cpumask` follows, and every counter keeps counting
//! exactly what is published, before, during and after; an event opened
//! while the CPU is away, and one opened after it is back, count too. The
//! check is run with the module loaded on CPU `cpu` (`taskset -c CPU
//! insmod`), on scopes no daemon publishes (VM 62, context 4001).

use std::fs::{self, File, OpenOptions};
use std::os::fd::OwnedFd;

use gpupm_uapi::pmu::scope;

use crate::abi::{entry, request, EVENT};
use crate::pmu::{count, Pmu, SYSFS};
use crate::sys;

const VM: u32 = 62;
const CTX: u32 = 4001;
/// The context instance's generation (its created cycle).
const GENERATION: u64 = 11;

/// A counter with the value it should read.
struct Counter {
    what: &'static str,
    fd: OwnedFd,
    expected: u64,
}

struct Hotplug {
    dev: File,
    pmu: Pmu,
    counters: Vec<Counter>,
    /// Totals published so far (VM, context).
    totals: (u64, u64),
}

impl Hotplug {
    /// Publishes `vm` and `ctx` more than the last totals; each counter
    /// (VM or context, by its name) expects that much more.
    fn publish(&mut self, vm: u64, ctx: u64) -> Result<(), String> {
        self.totals = (self.totals.0 + vm, self.totals.1 + ctx);
        let req = request(&[
            entry(scope::VM, VM, 0, self.totals.0),
            entry(scope::CONTEXT, CTX, GENERATION, self.totals.1),
        ]);
        sys::publish(&self.dev, &req).map_err(|e| format!("publish: {e}"))?;
        for c in &mut self.counters {
            c.expected += if c.what.starts_with("vm") { vm } else { ctx };
        }
        Ok(())
    }

    /// Every counter reads what it should.
    fn expect(&self, when: &str) -> Result<(), String> {
        for c in &self.counters {
            let got = count(&c.fd)?;
            if got != c.expected {
                return Err(format!(
                    "{when}: {} reads {got}, expected {}",
                    c.what, c.expected
                ));
            }
        }
        Ok(())
    }

    fn open(&mut self, what: &'static str) -> Result<(), String> {
        let (vm, ctx) = if what.starts_with("vm") {
            (VM, 0)
        } else {
            (0, CTX)
        };
        // The PMU's CPU now: perf opens uncore events on the cpumask.
        self.pmu = Pmu::find()?;
        let fd = self.pmu.open(&self.pmu.attr(EVENT, vm, ctx)?)?;
        self.counters.push(Counter {
            what,
            fd,
            expected: 0,
        });
        Ok(())
    }
}

fn set_online(cpu: i32, online: bool) -> Result<(), String> {
    let path = format!("/sys/devices/system/cpu/cpu{cpu}/online");
    fs::write(&path, if online { "1" } else { "0" }).map_err(|e| format!("{path}: {e}"))
}

fn cpumask() -> Result<String, String> {
    fs::read_to_string(format!("{SYSFS}/cpumask"))
        .map(|s| s.trim().to_owned())
        .map_err(|e| format!("cpumask: {e}"))
}

fn expect_cpumask(want: i32, when: &str) -> Result<(), String> {
    let got = cpumask()?;
    if got != want.to_string() {
        return Err(format!("{when}: cpumask is {got}, expected {want}"));
    }
    Ok(())
}

/// `cpu`: the CPU the module was loaded on (not 0: CPU 0 of an x86 guest
/// cannot go offline); `other`: where its events must move.
pub fn run(cpu: i32, other: i32) -> Result<(), String> {
    expect_cpumask(cpu, "after loading")?;
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/gpupm_pmu")
        .map_err(|e| format!("/dev/gpupm_pmu: {e}"))?;
    let mut h = Hotplug {
        dev,
        pmu: Pmu::find()?,
        counters: Vec::new(),
        totals: (5_000, 700),
    };
    h.open("vm, opened on the designated CPU")?;
    h.open("context, opened on the designated CPU")?;
    h.publish(0, 0)?;
    h.expect("first publication")?;
    h.publish(1_000, 30)?;
    h.expect("before the hotplug")?;

    set_online(cpu, false)?;
    expect_cpumask(other, "with the designated CPU offline")?;
    h.expect("right after the CPU went offline")?;
    h.publish(2_000, 40)?;
    h.expect("while the CPU is offline")?;
    h.open("vm, opened while the CPU is offline")?;
    h.publish(3_000, 50)?;
    h.expect("a second publication while the CPU is offline")?;

    set_online(cpu, true)?;
    // The events stay where they moved: nothing migrates back.
    expect_cpumask(other, "with the CPU back online")?;
    h.publish(4_000, 60)?;
    h.expect("after the CPU came back")?;
    h.open("context, opened after the CPU came back")?;
    // A CPU that does not count going offline moves nothing.
    set_online(cpu, false)?;
    set_online(cpu, true)?;
    expect_cpumask(other, "after the other CPU went and came back")?;
    h.publish(5_000, 70)?;
    h.expect("after the second hotplug")?;
    println!("@@gpupm metric hotplug_counters={}", h.counters.len());
    Ok(())
}
