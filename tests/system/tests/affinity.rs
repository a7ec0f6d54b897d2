//! Pinning the device and the threads it wakes: `gpupm-driver --cpus`
//! restricts every driver thread, gpupmd's `device_cpus` restricts its
//! interrupt and commit threads and no other; a CPU the process may not
//! run on is refused at start, before anything is touched.

use std::fs;
use std::process::Command;

use gpupm_client::cpus::current_thread_cpus;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{bin, Driver, DriverOptions, Proc, Scratch};
use nix::sched::CpuSet;
use nix::unistd::Pid;

/// One partition, one VM, one context; periodic triggers every 1 ms.
const SCENARIO: &str = "name = \"affinity\"\nseed = 5\n[trigger]\nperiod_us = 1000\n\
    [[profile]]\nname = \"idle\"\n[[profile.phase]]\nduration_cycles = 16777216\n[profile.phase.rates]\n\
    [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\nctx_timeslice_cycles = 0\nvm_timeslice_cycles = 0\n\
    [[vm]]\nid = 1\npartition = 1\n[[context]]\nvm = 1\nprofile = \"idle\"\n";

/// `Cpus_allowed_list` of every thread of `pid`, by thread name.
fn threads_cpus(pid: Pid) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task")).expect("list the threads") {
        let dir = task.expect("a thread").path();
        let (Ok(comm), Ok(status)) = (
            fs::read_to_string(dir.join("comm")),
            fs::read_to_string(dir.join("status")),
        ) else {
            continue; // the thread ended meanwhile
        };
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list in status")
            .trim()
            .to_owned();
        out.push((comm.trim().to_owned(), cpus));
    }
    out
}

/// A CPU number no test machine has: the largest a CPU set can hold.
fn missing_cpu() -> usize {
    let cpu = CpuSet::count() - 1;
    let ours = current_thread_cpus().expect("our affinity");
    assert!(!ours.cpus().contains(&cpu), "this machine has a CPU {cpu}");
    cpu
}

#[test]
fn the_device_and_the_threads_it_wakes_run_on_the_cpus_given_and_no_others() {
    let allowed = current_thread_cpus().expect("our affinity");
    let allowed = allowed.cpus();
    // The last CPU: a pin to it differs from the default CPU 0 and, with
    // two CPUs or more, from the unpinned threads' list.
    let cpu = allowed.last().expect("a CPU").to_string();
    let tmp = Scratch::new("affinity");
    let driver = Driver::start_in(
        &tmp,
        DriverOptions {
            clock: "realtime",
            args: vec!["--cpus".into(), cpu.clone()],
            ..DriverOptions::system(SCENARIO)
        },
    );
    let driver_threads = threads_cpus(driver.pid());
    assert!(driver_threads.len() > 1, "{driver_threads:?}");
    for (name, cpus) in &driver_threads {
        assert_eq!(cpus, &cpu, "driver thread {name}");
    }

    let config = daemon_config(&tmp, &format!("device_cpus = \"{cpu}\"\n"));
    let mut daemon = spawn_daemon(&tmp, &config, &[], &[]);
    daemon.wait_for("READY=1");
    // A thread takes its name when it first runs (the spawning thread's
    // until then): read the list until every thread named below has run.
    let names = [
        "gpupmd-irq",
        "gpupmd-commits",
        "gpupmd-work",
        "gpupmd-samples",
        "gpupmd-metrics",
        "fuser-0",
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let threads = loop {
        let threads = threads_cpus(daemon.pid());
        if names.iter().all(|n| threads.iter().any(|(t, _)| t == n)) {
            break threads;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not every thread named within 10 s: {threads:?}"
        );
        std::thread::yield_now();
    };
    let of = |name: &str| -> Vec<&String> {
        threads
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, c)| c)
            .collect()
    };
    for pinned in ["gpupmd-irq", "gpupmd-commits"] {
        assert_eq!(of(pinned), [&cpu], "{pinned}: {threads:?}");
    }
    let everywhere = current_thread_cpus().expect("our affinity").to_string();
    for free in ["gpupmd-work", "gpupmd-samples", "gpupmd-metrics", "fuser-0"] {
        let found = of(free);
        assert!(!found.is_empty(), "no {free}: {threads:?}");
        assert!(
            found.iter().all(|c| **c == everywhere),
            "{free}: {threads:?}"
        );
    }
    let log = daemon.log();
    assert_eq!(
        log.matches("pinned to the device's CPUs").count(),
        2,
        "one line per pinned thread:\n{log}"
    );
    daemon.stop();
    driver.stop();
}

#[test]
fn a_cpu_the_daemon_may_not_use_is_refused_before_it_touches_the_device() {
    let beyond = missing_cpu().to_string();
    let tmp = Scratch::new("affinity-refused");
    let driver = Driver::start_in(&tmp, DriverOptions::system(SCENARIO));
    let dev = driver.node();
    let period = || {
        dev.read32(gpupm_uapi::regs::TRIG_PERIOD)
            .expect("TRIG_PERIOD")
    };
    let before = period();
    // Started, this configuration would set the trigger's period.
    let config = daemon_config(
        &tmp,
        &format!("device_cpus = \"0,{beyond}\"\n[trigger]\nperiod_us = 500\n"),
    );
    let mut daemon = spawn_daemon(&tmp, &config, &[], &[]);
    let exit = daemon.wait_exit();
    let log = daemon.log();
    assert_eq!(exit.code(), Some(2), "{log}");
    assert!(
        log.contains("device_cpus") && log.contains(&beyond),
        "{log}"
    );
    assert!(!log.contains("device programmed"), "{log}");
    assert_eq!(period(), before, "the trigger's period was programmed");
    assert!(!tmp.join("pages").join("socket").exists(), "pages offered");
    let config = daemon_config(&tmp, "[trigger]\nperiod_us = 500\n");
    let mut daemon = spawn_daemon(&tmp, &config, &[], &[]);
    daemon.wait_for("READY=1");
    assert_ne!(
        period(),
        before,
        "without device_cpus the same configuration programs the period"
    );
    daemon.stop();
    driver.stop();
}

#[test]
fn the_driver_refuses_a_cpu_it_may_not_use_and_serves_nothing() {
    let beyond = missing_cpu().to_string();
    let tmp = Scratch::new("affinity-driver");
    let dir = tmp.join("dev");
    let mut cmd = Command::new(bin!(Driver));
    cmd.args(["--clock", "step", "--cpus", &beyond, "--node-dir"])
        .arg(&dir);
    let mut driver = Proc::spawn(
        "gpupm-driver",
        cmd,
        &tmp.join("driver.sock"),
        &tmp.join("driver.log"),
    );
    let exit = driver.wait_exit();
    let log = driver.log();
    assert_eq!(exit.code(), Some(2), "{log}");
    assert!(log.contains("--cpus") && log.contains(&beyond), "{log}");
    assert!(!dir.join("card0").exists(), "the node was served:\n{log}");
}
