//! The daemon's CPU time and the machine's load, from `/proc`, for the
//! benches.

use std::fs;
use std::time::Instant;

/// utime + stime of `pid` in clock ticks.
pub fn cpu_ticks(pid: i32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/pid/stat");
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).expect("stat format");
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

/// Clock ticks per second.
#[allow(clippy::cast_precision_loss)] // a small integer
pub fn ticks_per_s() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// CPU % of one core `pid` used while `f` ran, and the wall seconds.
#[allow(clippy::cast_precision_loss)]
pub fn cpu_during(pid: i32, tck: f64, f: impl FnOnce()) -> (f64, f64) {
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    f();
    let (wall, c1) = (t0.elapsed().as_secs_f64(), cpu_ticks(pid));
    ((c1 - c0) as f64 / tck / wall * 100.0, wall)
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
