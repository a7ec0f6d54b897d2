//! The package in a clean Debian container booted with systemd: install,
//! serve, restart without loss, remove, purge.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use gpupm_deploy_tests::container::Container;
use gpupm_deploy_tests::device::{ledger_scope, Counts, Device};
use gpupm_uapi::events::{Scope, CATALOGUE, MAX_EVENTS};
use serde_json::Value;

const UNITS: [&str; 2] = ["gpupm-driver.service", "gpupmd.service"];
/// Cycles per step of the step clock: below the built-in scenario's 2 ms
/// switch timeout (3.96 M cycles), so the daemon, not the device's
/// fallback, finishes every switch.
const STEP_CYCLES: u64 = 1_000_000;
/// The tenant the test maps to VM 1.
const TENANT: &str = "alice";
/// The tenant the test maps to the built-in scenario's confidential VM 4.
const CC_TENANT: &str = "bob";

/// Runs a host binary; stdout (it must succeed).
pub fn run_ok(binary: &Path, args: &[&str]) -> String {
    let out = Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    assert!(
        out.status.success(),
        "{} {args:?}: {out:?}",
        binary.display()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Boots the container, copies `deb` in and runs every phase.
pub fn run(deb: &Path) {
    let t0 = Instant::now();
    let c = Container::boot();
    let booted = t0.elapsed();
    let name = deb
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a .deb name");
    let inside = format!("/root/{name}");
    c.copy_in(deb, &inside);

    let install_start = Instant::now();
    c.ok(&[
        "apt-get",
        "install",
        "-y",
        "--no-install-recommends",
        &inside,
    ]);
    c.wait_running(UNITS[0], 0);
    let daemon = c.wait_running(UNITS[1], 0);
    let install_to_ready = install_start.elapsed();

    check_installed(&c);
    check_admin_view(&c);
    configure_tenant(&c, daemon.main_pid);
    check_confidential_session(&c);
    let (before, after) = counts_survive_a_daemon_restart(&c);
    // dpkg unpacks the conffile again and keeps the override's owner and mode.
    c.ok(&[
        "apt-get",
        "install",
        "-y",
        "--reinstall",
        "--no-install-recommends",
        &inside,
    ]);
    check_conffile_access(&c);
    remove_then_purge(&c);
    eprintln!(
        "container booted in {:.2} s; apt-get install to both units ready: {:.2} s; \
         system sm_inst_executed {before} before and {after} after the last steps; \
         whole test {:.1} s",
        booted.as_secs_f64(),
        install_to_ready.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// dpkg's status, enabled units, users, group, state directory, mounts.
fn check_installed(c: &Container) {
    let status = c.ok(&["dpkg-query", "-W", "-f", "${Status} ${Version}", "gpupm"]);
    assert_eq!(
        status,
        format!(
            "install ok installed {}",
            gpupm_deploy_tests::package::deb_version()
        )
    );
    let enabled = c.ok(&["systemctl", "is-enabled", UNITS[0], UNITS[1]]);
    assert_eq!(enabled, "enabled\nenabled\n");
    c.ok(&["getent", "passwd", "gpupm", "gpupm-driver"]);
    let admin = c.ok(&["getent", "group", "gpupm-admin"]);
    let members: Vec<&str> = admin
        .trim()
        .rsplit(':')
        .next()
        .unwrap_or("")
        .split(',')
        .collect();
    assert_eq!(members, ["gpupm", "gpupm-driver"], "{admin}");
    assert_eq!(
        c.ok(&["stat", "-c", "%U %a", "/var/lib/gpupm"]).trim(),
        "gpupm 700"
    );
    check_conffile_access(c);
    // The emulated factory provisioned the device's identity before the
    // driver's first start (docs/confidential.md).
    assert_eq!(
        c.ok(&["stat", "-c", "%U %a", "/var/lib/gpupm-driver/identity"])
            .trim(),
        "gpupm-driver 600"
    );
    assert_eq!(
        gpupm_mounts(c),
        [
            ("/run/gpupm/dev".to_owned(), "fuse.gpupm-node".to_owned()),
            (
                "/run/gpupm/tenant".to_owned(),
                "fuse.gpupm-tenant".to_owned()
            ),
        ]
    );
}

/// The conffile (the tenant map) is root:gpupm-admin 0640 by a
/// dpkg-statoverride: a local user who is not an admin cannot read it,
/// gpupmd (through gpupm-admin) can, and it did not warn about it.
fn check_conffile_access(c: &Container) {
    let conf = "/etc/gpupm/gpupmd.toml";
    assert_eq!(
        c.ok(&["stat", "-c", "%U %G %a", conf]).trim(),
        "root gpupm-admin 640"
    );
    assert_eq!(
        c.ok(&["dpkg-statoverride", "--list", conf]).trim(),
        format!("root gpupm-admin 640 {conf}")
    );
    let out = c.run(&["runuser", "-u", "nobody", "--", "cat", conf]);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "nobody reads the tenant map: {out:?}"
    );
    let warned = c.ok(&[
        "journalctl",
        "--no-pager",
        "-u",
        UNITS[1],
        "MESSAGE_ID=4dba9beedd1e4d469e86773a08059a95",
    ]);
    assert!(
        !warned.contains("may be read by every local user"),
        "gpupmd warned about the packaged conffile: {warned}"
    );
}

/// The container's PID 1 mount table: fstype at each mount under /run/gpupm.
fn gpupm_mounts(c: &Container) -> Vec<(String, String)> {
    c.ok(&["cat", "/proc/1/mountinfo"])
        .lines()
        .filter_map(|l| {
            let point = l.split(' ').nth(4)?;
            let fstype = l.split(" - ").nth(1)?.split(' ').next()?;
            point
                .starts_with("/run/gpupm")
                .then(|| (point.to_owned(), fstype.to_owned()))
        })
        .collect()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The VM ids of a `gpupm list --json` answer.
fn listed_vms(list: &Value) -> Vec<u64> {
    list["vms"]
        .as_array()
        .expect("vms")
        .iter()
        .filter_map(|v| v["vm"].as_u64())
        .collect()
}

/// `gpupm list` and `gpupm stat` as root, an admin.
fn check_admin_view(c: &Container) {
    let list = json(&c.ok(&["gpupm", "list", "--json"]));
    assert_eq!(list["admin"], true, "{list}");
    let vms = listed_vms(&list);
    assert_eq!(
        vms,
        [1, 2, 3, 4, 5, 6],
        "the built-in scenario's VMs: {list}"
    );
    assert_eq!(
        list["partitions"].as_array().map(Vec::len),
        Some(4),
        "{list}"
    );
    let stat = json(&c.ok(&[
        "gpupm",
        "stat",
        "--system",
        "-e",
        "sm_inst_executed",
        "--json",
    ]));
    assert!(
        stat["events"]["sm_inst_executed"].as_u64().unwrap_or(0) > 0,
        "the real-time device counted nothing: {stat}"
    );
}

/// `gpupm ARGS` as the tenant.
fn as_tenant(c: &Container, args: &[&str]) -> std::process::Output {
    let mut all = vec!["runuser", "-u", TENANT, "--", "gpupm"];
    all.extend_from_slice(args);
    c.run(&all)
}

/// Maps `alice` to VM 1 in the conffile, restarts gpupmd; alice sees VM 1
/// only, and VM 2 fails exactly like a VM that does not exist.
fn configure_tenant(c: &Container, daemon_pid: u32) {
    c.ok(&["useradd", "--no-create-home", TENANT]);
    c.ok(&["useradd", "--no-create-home", CC_TENANT]);
    let mut conf = fs::OpenOptions::new()
        .append(true)
        .open(c.host_path("/etc/gpupm/gpupmd.toml"))
        .expect("open the conffile");
    writeln!(conf, "\n[[tenant]]\nvm = 1\nuser = \"{TENANT}\"").expect("append a tenant");
    writeln!(conf, "\n[[tenant]]\nvm = 4\nuser = \"{CC_TENANT}\"").expect("append a tenant");
    drop(conf);
    c.ok(&["systemctl", "restart", UNITS[1]]);
    c.wait_running(UNITS[1], daemon_pid);

    let out = as_tenant(c, &["list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let list = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(list["admin"], false, "{list}");
    assert!(list.get("partitions").is_none(), "{list}");
    let vms = listed_vms(&list);
    assert_eq!(vms, [1], "{list}");
    let out = as_tenant(
        c,
        &["stat", "--vm", "1", "-e", "sm_inst_executed", "--json"],
    );
    assert!(out.status.success(), "{out:?}");
    let stat = json(&String::from_utf8_lossy(&out.stdout));
    assert!(
        stat["events"]["sm_inst_executed"].as_u64().unwrap_or(0) > 0,
        "{stat}"
    );

    let other = as_tenant(c, &["stat", "--vm", "2", "-e", "sm_inst_executed"]);
    let missing = as_tenant(c, &["stat", "--vm", "63", "-e", "sm_inst_executed"]);
    assert_eq!(other.status.code(), Some(2), "{other:?}");
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
    assert_eq!(
        String::from_utf8_lossy(&other.stderr).replace('2', "N"),
        String::from_utf8_lossy(&missing.stderr).replace("63", "N"),
        "another tenant's VM must fail like a missing one"
    );
}

/// The confidential VM's tenant establishes its session with the installed
/// device and reads its totals through it; before, they are withheld.
fn check_confidential_session(c: &Container) {
    let as_cc = |args: &[&str]| {
        let mut all = vec![
            "runuser",
            "-u",
            CC_TENANT,
            "--",
            "env",
            "XDG_STATE_HOME=/tmp/bob-state",
            "gpupm",
        ];
        all.extend_from_slice(args);
        c.run(&all)
    };
    let status = as_cc(&["cc", "status", "--vm", "4", "--json"]);
    assert!(status.status.success(), "{status:?}");
    assert_eq!(
        json(&String::from_utf8_lossy(&status.stdout))["state"],
        "none"
    );
    let out = as_cc(&["cc", "establish", "--vm", "4", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let est = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(est["key_epoch"], 1, "{est}");
    let out = as_cc(&["stat", "--vm", "4", "-e", "sm_inst_executed", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let stat = json(&String::from_utf8_lossy(&out.stdout));
    assert!(
        stat.get("sealed").is_none(),
        "opened through the session: {stat}"
    );
}

/// Every catalogue event of `scope` (`--system` or `--vm N`) as `gpupm
/// stat` reports it, run as root or as the tenant.
fn stat(c: &Container, tenant: bool, scope: &[&str]) -> Counts {
    let names: Vec<&str> = CATALOGUE.iter().map(|e| e.name).collect();
    let list = names.join(",");
    let mut args = vec!["stat", "-e", list.as_str(), "--json"];
    args.extend_from_slice(scope);
    let text = if tenant {
        let out = as_tenant(c, &args);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        let mut all = vec!["gpupm"];
        all.extend_from_slice(&args);
        c.ok(&all)
    };
    let v = json(&text);
    let mut out = [0u64; MAX_EVENTS];
    for e in CATALOGUE {
        // `gpupm stat` prints each event in its unit (a multi-bit event's
        // count times its scale) and a device-level event of a VM as not
        // supported: back to the device's counts, which the ledger holds.
        let shown = &v["events"][e.name];
        out[usize::from(e.id)] = match shown.as_u64() {
            Some(x) => {
                assert_eq!(
                    x % e.scale(),
                    0,
                    "{}: {x} is not in units of {}",
                    e.name,
                    e.scale()
                );
                x / e.scale()
            }
            None => {
                assert!(
                    e.unit.scope() == Scope::Device && !scope.contains(&"--system"),
                    "no {} in {v}",
                    e.name
                );
                0
            }
        };
    }
    out
}

/// How long a tenant's page may take to show a quiescent point: on a step
/// clock the daemon learns of the last commits at its next drain
/// (`[stream] drain_interval_ms`, 100 ms by default) and refreshes the
/// page then (docs/pages.md).
const PAGE_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(10);

/// The tenant's `gpupm stat` (which reads its page) once it shows
/// `expected`. It never shows more than `expected` on the way, and must
/// show exactly `expected` within [`PAGE_CATCH_UP`].
fn tenant_stat_settles(c: &Container, scope: &[&str], expected: &Counts, what: &str) {
    let deadline = Instant::now() + PAGE_CATCH_UP;
    loop {
        let seen = stat(c, true, scope);
        assert!(
            seen.iter().zip(expected).all(|(s, e)| s <= e),
            "{what}: the tenant saw more than the ledger: {seen:?} vs {expected:?}"
        );
        if &seen == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the tenant's totals did not reach the ledger within {PAGE_CATCH_UP:?}: {seen:?} vs {expected:?}"
        );
        // Each poll is a whole `gpupm` process in the container, itself
        // tens of milliseconds; nothing else to wait on from outside.
    }
}

/// Switches the driver to the step clock with the debug ledger (a
/// drop-in, as an operator would), drives the device from the host
/// through the container's node to two quiescent points, and checks that
/// the daemon's totals (root's system scope, the tenant's VM) equal the
/// ledger at each, across a
/// `systemctl restart gpupmd` in between. Returns the system
/// `sm_inst_executed` at both points.
fn counts_survive_a_daemon_restart(c: &Container) -> (u64, u64) {
    let dropin = c.host_path("/etc/systemd/system/gpupm-driver.service.d");
    fs::create_dir_all(&dropin).expect("create the drop-in directory");
    // The shipped command line with a step clock and the debug ledger:
    // its mirror directory (where the instance lock lives, writable under
    // ProtectSystem=strict) and its identity stay.
    let unit = fs::read_to_string(c.host_path("/usr/lib/systemd/system/gpupm-driver.service"))
        .expect("read the installed driver unit");
    let shipped = unit
        .lines()
        .find(|l| l.starts_with("ExecStart=/usr/bin/gpupm-driver "))
        .expect("the driver unit's ExecStart=");
    assert!(shipped.contains(" --clock realtime"), "{shipped}");
    let stepped = shipped.replace(" --clock realtime", " --clock step --debug-ledger");
    fs::write(
        dropin.join("step-clock.conf"),
        format!("[Service]\nExecStart=\n{stepped}\n"),
    )
    .expect("write the drop-in");
    let old_driver = c.unit(UNITS[0]).main_pid;
    let old_daemon = c.unit(UNITS[1]).main_pid;
    c.ok(&["systemctl", "daemon-reload"]);
    c.ok(&["systemctl", "restart", UNITS[0]]);
    c.wait_running(UNITS[0], old_driver);
    let daemon = c.wait_running(UNITS[1], old_daemon);

    let dev = Device::open(&c.host_path("/run/gpupm/dev"));
    let quiesce = |steps: usize| {
        for _ in 0..steps {
            assert!(dev.step(STEP_CYCLES, || false), "switches left pending");
        }
        dev.flush();
        (
            dev.expected(ledger_scope::SYSTEM, 0),
            dev.expected(ledger_scope::VM, 1),
        )
    };
    let (sys1, vm1) = quiesce(20);
    assert_eq!(
        stat(c, false, &["--system"]),
        sys1,
        "system totals vs the ledger"
    );
    tenant_stat_settles(c, &["--vm", "1"], &vm1, "tenant VM 1 vs the ledger");

    c.ok(&["systemctl", "restart", UNITS[1]]);
    c.wait_running(UNITS[1], daemon.main_pid);
    assert_eq!(
        stat(c, false, &["--system"]),
        sys1,
        "system totals after restarting gpupmd"
    );
    tenant_stat_settles(c, &["--vm", "1"], &vm1, "VM 1 after restarting gpupmd");

    let (sys2, vm2) = quiesce(10);
    assert!(
        sys2.iter().zip(&sys1).all(|(a, b)| a >= b) && sys2 != sys1,
        "the ledger grows monotonically"
    );
    assert_eq!(
        stat(c, false, &["--system"]),
        sys2,
        "system totals, second point"
    );
    tenant_stat_settles(c, &["--vm", "1"], &vm2, "VM 1, second point");
    let inst = gpupm_deploy_tests::device::event_id("sm_inst_executed");
    fs::remove_dir_all(&dropin).expect("remove the drop-in");
    c.ok(&["systemctl", "daemon-reload"]);
    (sys1[inst], sys2[inst])
}

/// Processes of `user` in the container (none when the user is gone).
fn processes_of(c: &Container, user: &str) -> Vec<String> {
    let id = c.run(&["id", "-u", user]);
    let Ok(uid) = String::from_utf8_lossy(&id.stdout).trim().parse::<u32>() else {
        return Vec::new();
    };
    let all = c.ok(&["sh", "-c", "grep -H '^Uid:' /proc/[0-9]*/status || true"]);
    all.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(&uid.to_string()))
        .map(str::to_owned)
        .collect()
}

/// `apt-get remove` stops the services and removes the units (debhelper
/// masks them until purge, so that no leftover enablement starts them)
/// but keeps configuration, state and users (Debian's remove); `apt-get
/// purge` removes those too, and the masks.
fn remove_then_purge(c: &Container) {
    c.ok(&["apt-get", "remove", "-y", "gpupm"]);
    for unit in UNITS {
        let s = c.unit(unit);
        assert_eq!(
            (s.load.as_str(), s.active.as_str()),
            ("masked", "inactive"),
            "{unit}"
        );
    }
    for user in ["gpupm", "gpupm-driver"] {
        assert_eq!(
            processes_of(c, user),
            Vec::<String>::new(),
            "{user}'s processes"
        );
    }
    assert_eq!(gpupm_mounts(c), [], "mounts after remove");
    assert_eq!(
        c.ok(&["dpkg-query", "-W", "-f", "${Status}", "gpupm"]),
        "deinstall ok config-files"
    );
    c.ok(&["test", "-f", "/etc/gpupm/gpupmd.toml"]);
    c.ok(&["test", "-d", "/var/lib/gpupm"]);
    c.ok(&["getent", "passwd", "gpupm"]);

    c.ok(&["apt-get", "purge", "-y", "gpupm"]);
    let status = c.run(&["dpkg-query", "-W", "gpupm"]);
    assert!(
        !status.status.success(),
        "dpkg still knows gpupm: {status:?}"
    );
    for user in ["gpupm", "gpupm-driver"] {
        assert!(
            !c.run(&["getent", "passwd", user]).status.success(),
            "user {user} left"
        );
    }
    for group in ["gpupm-admin", "gpupm", "gpupm-driver"] {
        assert!(
            !c.run(&["getent", "group", group]).status.success(),
            "group {group} left"
        );
    }
    assert!(
        !c.run(&["dpkg-statoverride", "--list", "/etc/gpupm/gpupmd.toml"])
            .status
            .success(),
        "the conffile's override outlived the purge"
    );
    for path in [
        "/etc/gpupm",
        "/var/lib/gpupm",
        "/var/lib/gpupm-driver",
        "/run/gpupm",
    ] {
        assert!(
            !c.run(&["test", "-e", path]).status.success(),
            "{path} left"
        );
    }
    let leftovers = c.ok(&[
        "sh",
        "-c",
        "ls -d /etc/systemd/system/*/gpupm* /etc/systemd/system/gpupm* \
         /usr/lib/systemd/system/gpupm* /var/lib/systemd/deb-systemd-helper-*/*gpupm* \
         /var/lib/systemd/deb-systemd-helper-*/*/*gpupm* 2>/dev/null || true",
    ]);
    assert_eq!(leftovers, "", "unit files or enablement state left");
    let units = c.ok(&["systemctl", "list-units", "--all", "--no-legend", "gpupm*"]);
    assert_eq!(units.trim(), "", "units left");
    for unit in UNITS {
        assert_eq!(c.unit(unit).load, "not-found", "{unit} after purge");
    }
    assert_eq!(gpupm_mounts(c), [], "mounts after purge");
}
