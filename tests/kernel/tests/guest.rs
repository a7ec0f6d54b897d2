//! The kernel lane: `gpupm_pmu.ko`, built against Debian's headers with
//! `W=1`, and the real `gpupm-driver`, `gpupmd`, `gpupm` and `perf`,
//! checked inside Debian's kernel booted under QEMU (this host's kernel
//! cannot load modules and has no CUSE); then the driver's CUSE transport,
//! `/dev/gpupm0`, with `gpupmd` running against it. Fails with the guest's
//! whole console log when a check fails, the guest hangs, or it never
//! reports.
//!
//! Timings and the figures the checks measure are printed (run with
//! `--nocapture`) and written to `target/kernel-lane/report.txt`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use gpupm_kernel_tests::initramfs::Initramfs;
use gpupm_kernel_tests::qemu::{self, Accel, Deadlines};
use gpupm_kernel_tests::report::Report;
use gpupm_kernel_tests::{kbuild, workspace, GuestKernel, Lane};
use gpupm_uapi::events::EVENT_COUNT;

/// Milliseconds between the daemon's publications in the guest.
const INTERVAL_MS: u32 = 20;
/// The guest's `gpupm-admin` group: the device nodes' group.
const ADMIN_GID: u32 = 990;

fn gpupmd_toml() -> String {
    format!(
        "node_dir = \"/run/gpupm/dev\"\ntenant_dir = \"/run/gpupm/tenant\"\nstate_dir = \"/var/lib/gpupm\"\n\
         [health]\njournal_socket = \"/run/no-journal\"\n\
         [kernel_pmu]\nenabled = true\ndevice = \"/dev/gpupm_pmu\"\ninterval_ms = {INTERVAL_MS}\n"
    )
}

/// The daemon's configuration against the CUSE character device.
fn gpupmd_cuse_toml() -> String {
    format!(
        "node_dir = \"/dev/gpupm0\"\ntenant_dir = \"/run/gpupm/tenant-cuse\"\nstate_dir = \"/var/lib/gpupm-cuse\"\n\
         [health]\njournal_socket = \"/run/no-journal\"\n\
         [kernel_pmu]\nenabled = true\ndevice = \"/dev/gpupm_pmu\"\ninterval_ms = {INTERVAL_MS}\n"
    )
}

/// The PMU lane's checks, then the CUSE checks (after `unload` has stopped
/// the FUSE services), then CPU hotplug and the in-section reader (with no
/// daemon publishing), before `dmesg` looks at everything, in order.
fn pmu_and_cuse_lane() -> Lane {
    [
        "module",
        "perf_list",
        "abi",
        "refusals",
        "fuzz",
        "services",
        "perf_stat",
        "restart",
        "read_bench",
        "unload",
        "cuse_node",
        "cuse_daemon",
        "cuse_bench",
        "hotplug",
        "nmi_read",
        "dmesg",
    ]
    .iter()
    .fold(Lane::default(), |lane, c| lane.check(c))
}

fn base_image(root: &Path) -> Initramfs {
    let mut fs = Initramfs::new(root).expect("staging directory");
    fs.file(Path::new("/bin/busybox"), "/bin/busybox", 0o755)
        .expect("busybox-static (/bin/busybox; scripts/test-all installs it)");
    fs
}

/// A tiny image whose init only says it started: the KVM probe.
fn probe_image(work: &Path) -> std::path::PathBuf {
    let mut fs = base_image(&work.join("probe-root"));
    fs.text(
        "/init",
        "#!/bin/busybox sh\n/bin/busybox mount -t proc proc /proc\necho \"@@gpupm boot uptime=$(/bin/busybox cut -d' ' -f1 /proc/uptime)\"\n/bin/busybox poweroff -f\n",
        0o755,
    )
    .expect("probe init");
    let out = work.join("probe.cpio");
    fs.pack(&out).expect("pack the probe image");
    out
}

#[test]
fn gpupm_pmu_and_the_cuse_node_in_a_booted_debian_guest() {
    let lane_start = Instant::now();
    assert!(nix::unistd::geteuid().is_root(), "the kernel lane must run as root (it reads the unpacked kernel and builds with its headers)");
    let kernel = GuestKernel::locate().unwrap_or_else(|e| panic!("{e}"));
    let work = workspace::profile_dir()
        .expect("target dir")
        .join("../kernel-lane");
    std::fs::create_dir_all(&work).expect("lane work dir");

    let built = kbuild::build(&kernel, &work.join("kbuild")).unwrap_or_else(|e| panic!("{e}"));
    let bins = workspace::binaries(&[
        ("gpupm-driver", "gpupm-driver"),
        ("gpupmd", "gpupmd"),
        ("gpupm", "gpupm"),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let prepared = lane_start.elapsed();

    let lane = pmu_and_cuse_lane();
    let mut fs = base_image(&work.join("root"));
    for bin in &bins {
        let name = bin
            .file_name()
            .and_then(|n| n.to_str())
            .expect("binary name");
        fs.program(bin, &format!("/usr/bin/{name}"))
            .expect("workspace binary");
    }
    fs.program(
        Path::new(env!("CARGO_BIN_EXE_gpupm-kpmu")),
        "/usr/bin/gpupm-kpmu",
    )
    .expect("helper");
    fs.program(Path::new("/usr/bin/perf"), "/usr/bin/perf")
        .expect("perf (Debian's linux-perf)");
    fs.file(&built.ko, "/lib/modules/gpupm_pmu.ko", 0o644)
        .expect("module");
    let modules = fs
        .modules(&kernel.modules, &["fuse", "cuse"])
        .expect("fuse.ko and cuse.ko from the image");
    fs.text(
        "/etc/passwd",
        "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
        0o644,
    )
    .expect("passwd");
    fs.text(
        "/etc/group",
        &format!("root:x:0:\nnogroup:x:65534:\ngpupm-admin:x:{ADMIN_GID}:\n"),
        0o644,
    )
    .expect("group");
    fs.text("/etc/gpupm/gpupmd.toml", &gpupmd_toml(), 0o644)
        .expect("gpupmd.toml");
    fs.text("/etc/gpupm/gpupmd-cuse.toml", &gpupmd_cuse_toml(), 0o644)
        .expect("gpupmd-cuse.toml");
    fs.file(
        &gpupm_kernel_tests::guest_dir().join("scenarios/cuse-switching.toml"),
        "/etc/gpupm/cuse-switching.toml",
        0o644,
    )
    .expect("the CUSE checks' scenario");
    fs.text(
        "/etc/gpupm-lane.env",
        &format!(
            "GPUPM_MODULES=\"{}\"\nGPUPM_EVENT_COUNT={EVENT_COUNT}\nGPUPM_INTERVAL_MS={INTERVAL_MS}\nGPUPM_ADMIN_GID={ADMIN_GID}\n",
            modules.join(" ")
        ),
        0o644,
    )
    .expect("lane env");
    lane.install(&mut fs).expect("checks");
    let image = work.join("initramfs.cpio");
    let image_bytes = fs.pack(&image).expect("pack the image");
    let packed = lane_start.elapsed();

    let (kvm, why) = qemu::kvm_boots(&kernel, &probe_image(&work), Duration::from_secs(20));
    let accel = if kvm { Accel::Kvm } else { Accel::Tcg };
    let limits = Deadlines {
        total: Duration::from_secs(15 * 60),
        quiet: Duration::from_secs(5 * 60),
    };
    let run = qemu::boot(&kernel, &image, accel, limits).unwrap_or_else(|e| panic!("{e}"));
    let report = Report::parse(&run.log);

    let mut summary = String::new();
    writeln!(summary, "kernel {} ({accel:?}; {why})", kernel.release).unwrap();
    writeln!(
        summary,
        "module built and binaries ready: {:.1} s; image {:.1} MiB packed at {:.1} s",
        prepared.as_secs_f64(),
        image_bytes as f64 / 1048576.0,
        packed.as_secs_f64()
    )
    .unwrap();
    writeln!(
        summary,
        "qemu start -> init: {:.1} s (guest uptime at init {:?} s)",
        run.to_init.map_or(f64::NAN, |d| d.as_secs_f64()),
        report.boot_uptime
    )
    .unwrap();
    if let (Some(b), Some(d)) = (report.boot_uptime, report.done_uptime) {
        writeln!(summary, "checks: {:.1} s of guest time", d - b).unwrap();
    }
    for c in &report.checks {
        writeln!(
            summary,
            "  {:<12} {} {:.1} s",
            c.name,
            if c.passed { "pass" } else { "FAIL" },
            c.secs
        )
        .unwrap();
    }
    for (k, v) in &report.metrics {
        writeln!(summary, "  {k} = {v}").unwrap();
    }
    writeln!(
        summary,
        "guest run {:.1} s; lane wall time {:.1} s",
        run.wall.as_secs_f64(),
        lane_start.elapsed().as_secs_f64()
    )
    .unwrap();
    println!("{summary}");
    std::fs::write(work.join("report.txt"), &summary).expect("report");
    std::fs::write(work.join("console.log"), &run.log).expect("console log");

    let mut problems = report.problems(lane.checks());
    if let Some(why) = run.killed {
        problems.insert(0, format!("the guest was killed: {why}"));
    }
    assert!(
        problems.is_empty(),
        "{problems:?}\n--- guest console ---\n{}\n--- summary ---\n{summary}",
        run.log
    );
}
