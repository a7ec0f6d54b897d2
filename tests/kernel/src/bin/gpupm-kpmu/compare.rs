//! perf counts against the tenant API over the same interval.
//!
//! The module's value of a scope is the daemon's last publication, which
//! read the device at most `interval + pass` before; with `pass` (one
//! publication pass) taken as at most one interval, a perf reading lags the
//! device by at most `L = 2 × interval`. So for a perf window that contains
//! a tenant window `[t0, t1]` of delta `D` (rate `r = D / (t1 − t0)`), the
//! perf count `C` lies within `r × (slack + L)` of `D`, `slack` being the
//! perf window's excess over the tenant window (measured: the wall time of
//! the `perf stat` process minus the tenant window), and a daemon restart
//! adds nothing: `|C − D| ≤ r × (slack + L)` is the bound checked.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pmu::{count, Pmu, Tenant};

/// What one comparison saw.
struct Seen {
    perf: u64,
    tenant: u64,
    tenant_secs: f64,
    slack_secs: f64,
}

impl Seen {
    fn check(&self, name: &str, interval: Duration) -> Result<(), String> {
        let lag = 2.0 * interval.as_secs_f64();
        let rate = self.tenant as f64 / self.tenant_secs;
        let bound = rate * (self.slack_secs + lag);
        let diff = self.perf.abs_diff(self.tenant) as f64;
        println!("@@gpupm metric {name}_perf={}", self.perf);
        println!("@@gpupm metric {name}_tenant={}", self.tenant);
        println!("@@gpupm metric {name}_diff={diff}");
        println!("@@gpupm metric {name}_bound={bound:.0}");
        println!("@@gpupm metric {name}_slack_ms={:.1}", self.slack_secs * 1e3);
        println!("@@gpupm metric {name}_ratio={:.5}", self.perf as f64 / self.tenant.max(1) as f64);
        if self.tenant == 0 || self.perf == 0 {
            return Err(format!("{name}: nothing counted (perf {}, tenant {})", self.perf, self.tenant));
        }
        if diff > bound {
            return Err(format!(
                "{name}: perf counted {} and the tenant API {}: |diff| {diff} exceeds the bound {bound:.0} \
                 (rate {rate:.0}/s × (slack {:.3} s + lag {lag:.3} s))",
                self.perf, self.tenant, self.slack_secs
            ));
        }
        Ok(())
    }
}

/// `perf stat -a -e gpupm/EVENT,vm=VM/ -- gpupm-kpmu window …`: the
/// count perf prints against the tenant delta the window measured.
pub fn perf_stat(event: &str, vm: u32, secs: f64, node: &Path, interval: Duration) -> Result<(), String> {
    let window_out = "/tmp/gpupm-kpmu-window";
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let spec = format!("gpupm/{event},vm={vm}/");
    let started = Instant::now();
    let out = Command::new("perf")
        .args(["stat", "-a", "-x", ",", "-e", &spec, "--"])
        .arg(&me)
        .args(["window", event, &vm.to_string(), &secs.to_string()])
        .arg(node)
        .arg(window_out)
        .stdout(Stdio::inherit())
        .output()
        .map_err(|e| format!("perf: {e}"))?;
    let perf_secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("perf stat printed: {}", stderr.trim());
    if !out.status.success() {
        return Err(format!("perf stat failed ({}): {stderr}", out.status));
    }
    let perf = stderr
        .lines()
        .find(|l| l.contains(&spec))
        .and_then(|l| l.split(',').next())
        .and_then(|c| c.trim().parse::<u64>().ok())
        .ok_or_else(|| format!("no count for {spec} in: {stderr}"))?;
    let window = std::fs::read_to_string(window_out).map_err(|e| format!("{window_out}: {e}"))?;
    let mut f = window.split_whitespace().map(str::parse::<f64>);
    let (Some(Ok(tenant)), Some(Ok(tenant_secs))) = (f.next(), f.next()) else {
        return Err(format!("bad window file: {window:?}"));
    };
    Seen {
        perf,
        tenant: tenant as u64,
        tenant_secs,
        slack_secs: (perf_secs - tenant_secs).max(0.0),
    }
    .check("perf_stat", interval)
}

/// The tenant window run under perf: delta and duration to `out`.
pub fn window(event: &str, vm: u32, secs: f64, node: &Path, out: &Path) -> Result<(), String> {
    let tenant = Tenant::open(node)?;
    let t0 = tenant.total(event, vm)?;
    let start = Instant::now();
    // The measured workload is "one second of the device", like `sleep 1`.
    std::thread::sleep(Duration::from_secs_f64(secs));
    let t1 = tenant.total(event, vm)?;
    let took = start.elapsed().as_secs_f64();
    std::fs::write(out, format!("{} {took}\n", t1 - t0)).map_err(|e| e.to_string())
}

/// A daemon restart under an open perf counter: readings never go back,
/// and over the whole restart the counter advances by the tenant delta
/// within the bound (no jump when the new daemon republishes).
pub fn restart(event: &str, vm: u32, node: &Path, pidfile: &Path, daemon: &[String], interval: Duration) -> Result<(), String> {
    let pmu = Pmu::find()?;
    let fd = pmu.open(&pmu.attr(event, vm, 0)?)?;
    let tenant = Tenant::open(node)?;
    let (p0, t0, start) = (count(&fd)?, tenant.total(event, vm)?, Instant::now());
    let mut last = p0;
    let mut watch = |what: &str| -> Result<u64, String> {
        let v = count(&fd)?;
        if v < last {
            return Err(format!("{what}: the counter went back from {last} to {v}"));
        }
        last = v;
        Ok(v)
    };
    let old: i32 = std::fs::read_to_string(pidfile)
        .map_err(|e| format!("{}: {e}", pidfile.display()))?
        .trim()
        .parse()
        .map_err(|e| format!("pid: {e}"))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old), nix::sys::signal::Signal::SIGTERM)
        .map_err(|e| format!("SIGTERM gpupmd: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while alive(old) {
        watch("while gpupmd stopped")?;
        if Instant::now() > deadline {
            return Err("gpupmd did not stop within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let stopped = watch("gpupmd stopped")?;
    let child = spawn(daemon)?;
    std::fs::write(pidfile, child.id().to_string()).map_err(|e| e.to_string())?;
    // The new daemon has published once the counter moves again.
    while watch("gpupmd restarting")? == stopped {
        if Instant::now() > deadline {
            return Err("no publication within 60 s of the restart".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (p1, t1) = (watch("after the restart")?, tenant.total(event, vm)?);
    let secs = start.elapsed().as_secs_f64();
    println!("@@gpupm metric restart_secs={secs:.2}");
    Seen {
        perf: p1 - p0,
        tenant: t1 - t0,
        tenant_secs: secs,
        slack_secs: 0.0,
    }
    .check("restart", interval)
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

fn spawn(cmd: &[String]) -> Result<Child, String> {
    let (prog, args) = cmd.split_first().ok_or("no daemon command")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("/tmp/gpupmd.log")
        .map_err(|e| e.to_string())?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{prog}: {e}"))
}
