//! The daemon's CPU time and the machine's load, from `/proc`, for the
//! benches.

use std::collections::BTreeMap;
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

/// Nanoseconds each thread of `pid` has run so far, summed by thread
/// name (`/proc/<pid>/task/*/schedstat`: the scheduler's own accounting,
/// to the nanosecond, where `stat`'s ticks are 10 ms). A thread that
/// exits between two calls is missing from the second.
pub fn thread_run_ns(pid: i32) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let comm = fs::read_to_string(path.join("comm")).unwrap_or_default();
        let run = fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
        if let Some(ns) = run {
            *out.entry(comm.trim().to_owned()).or_insert(0) += ns;
        }
    }
    out
}

/// Each thread name's CPU % of one core between two [`thread_run_ns`]
/// snapshots `wall` seconds apart, busiest first.
#[allow(clippy::cast_precision_loss)]
pub fn thread_cpu_pct(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    wall: f64,
) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = after
        .iter()
        .map(|(name, &ns)| {
            let ran = ns.saturating_sub(before.get(name).copied().unwrap_or(0));
            (name.clone(), ran as f64 / 1e9 / wall * 100.0)
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// The state letters of `pid`'s threads.
pub fn thread_states(pid: i32) -> Vec<String> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let s = fs::read_to_string(task.path().join("stat")).ok()?;
            let (head, rest) = s.rsplit_once(')')?;
            let name = head.split_once('(').map_or("", |(_, n)| n);
            Some(format!("{name}:{}", rest.split_whitespace().next()?))
        })
        .collect()
}

/// Waits, at most `within`, until process `pid` sleeps in a FUSE request
/// (its `wchan`), as a reader parked on a node does; panics otherwise.
pub fn wait_blocked_in_fuse(pid: i32, within: std::time::Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let wchan = fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        if wchan.contains("fuse") || wchan.contains("request_wait") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} never blocked in a FUSE request (wchan {wchan:?})"
        );
        std::thread::yield_now();
    }
}

/// Whether every thread of `pid` is stopped (state `T` in
/// `/proc/<pid>/task/*/stat`) or blocked in the kernel (`D`: a FUSE
/// request, which only a fatal signal interrupts; the thread stops on its
/// way back to user space and runs no code of its own before it).
/// `kill(SIGSTOP)` returns before the group stop is complete: a thread
/// running on another CPU may still act until it next enters the kernel,
/// so a test that needs the process frozen waits for this.
pub fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|s| {
                let (_, rest) = s.rsplit_once(')')?;
                rest.split_whitespace()
                    .next()
                    .map(|state| state == "T" || state == "D")
            })
            .unwrap_or(false)
    })
}
