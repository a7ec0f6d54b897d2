//! The C and Python tenant examples (`examples/c/tenant_stat.c`,
//! `examples/python/tenant_stat.py`) against a live daemon: `gpupm-driver`
//! on a step clock with context churn, `gpupmd` driving every switch, then
//! both examples run as the admin (root: every VM) and as a real
//! unprivileged tenant uid (only its VM), through the tenant pages and
//! through the node (`--no-pages`), and print exactly the same bytes, equal
//! to the ledger and to what `TenantClient` reads.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpupm_client::Scope;
use gpupm_client::{TenantClient, WhoamiExt};
use gpupm_test_support::cli::vm_events_as_stat_prints;
use gpupm_test_support::device::{self, flush, step, wait_none_destroyed};
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::events::{CATALOGUE, MAX_EVENTS};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::regs as r;
use nix::sys::signal::Signal;
use serde_json::Value;

/// The tenant's uid (and gid); no passwd entry is needed.
const TENANT_UID: u32 = 61101;
/// The tenant's VM.
const TENANT_VM: u32 = 1;
/// Clock steps the daemon handles before the examples run (with churn).
const STEPS: u32 = 192;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Builds the C example with the generated header into `dir`.
fn build_c(dir: &Path) -> PathBuf {
    let exe = dir.join("tenant_stat");
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(Path::new(ROOT).join("include"))
        .arg(Path::new(ROOT).join("examples/c/tenant_stat.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("this test needs a C compiler as `cc` (gcc or clang)");
    assert!(
        out.status.success(),
        "building examples/c/tenant_stat.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Copies the Python example and its generated module into `dir`, where
/// any uid may read them.
fn stage_python(dir: &Path) -> PathBuf {
    for f in ["tenant_stat.py", "gpupm_tenant.py"] {
        fs::copy(Path::new(ROOT).join("examples/python").join(f), dir.join(f))
            .unwrap_or_else(|e| panic!("copy examples/python/{f}: {e}"));
    }
    dir.join("tenant_stat.py")
}

/// A Python 3 any uid can run (pyenv shims under /root are not).
fn python() -> PathBuf {
    let system = PathBuf::from("/usr/bin/python3");
    assert!(
        system.exists(),
        "this test runs the Python example as an unprivileged uid and needs /usr/bin/python3"
    );
    system
}

/// Runs `argv`, as `uid` through `setpriv` when given; returns stdout.
fn run(argv: &[&Path], extra: &[&str], uid: Option<u32>, cwd: &Path) -> String {
    run_both(argv, extra, uid, cwd).0
}

/// Runs `argv` like [`run`]; returns stdout and stderr.
fn run_both(argv: &[&Path], extra: &[&str], uid: Option<u32>, cwd: &Path) -> (String, String) {
    let mut cmd = match uid {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .arg("--clear-groups")
                .args(argv);
            c
        }
        None => {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    cmd.args(extra)
        .current_dir(cwd)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("run {argv:?} (setpriv from util-linux is needed): {e}"));
    assert!(
        out.status.success(),
        "{argv:?} {extra:?} as {uid:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).expect("UTF-8 output"),
        String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    )
}

/// Parses the text format: `vm <id> <event_name> <value>` lines.
fn parse_text(text: &str) -> BTreeMap<u32, BTreeMap<String, u64>> {
    let mut out: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert!(f.len() == 4 && f[0] == "vm", "bad line {line:?}");
        let vm = f[1].parse().expect("vm id");
        let value = f[3].parse().expect("value");
        assert!(
            out.entry(vm)
                .or_default()
                .insert(f[2].to_string(), value)
                .is_none(),
            "duplicate line {line:?}"
        );
    }
    out
}

/// The text format the examples document, from per-VM totals.
fn expected_text(totals: &BTreeMap<u32, [u64; MAX_EVENTS]>) -> String {
    let mut s = String::new();
    for (vm, values) in totals {
        for e in CATALOGUE {
            s += &format!("vm {vm} {} {}\n", e.name, values[usize::from(e.id)]);
        }
    }
    s
}

/// Checks the `--json` lines against `totals` and the node's commit cycles.
fn check_json(json: &str, totals: &BTreeMap<u32, [u64; MAX_EVENTS]>, cycles: &BTreeMap<u32, u64>) {
    let objs: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
    let vms: Vec<u32> = objs
        .iter()
        .map(|o| u32::try_from(o["id"].as_u64().unwrap()).unwrap())
        .collect();
    assert_eq!(vms, totals.keys().copied().collect::<Vec<_>>(), "{json}");
    for o in objs {
        let vm = u32::try_from(o["id"].as_u64().unwrap()).unwrap();
        assert_eq!(o["scope"], "vm");
        assert_eq!(
            o["cycle"].as_u64(),
            cycles.get(&vm).copied(),
            "VM {vm} cycle"
        );
        assert!(o.get("sealed").is_none(), "VM {vm} sealed");
        let events = o["events"].as_object().expect("events object");
        assert_eq!(events.len(), CATALOGUE.len());
        for e in CATALOGUE {
            assert_eq!(
                events[e.name].as_u64(),
                Some(totals[&vm][usize::from(e.id)]),
                "VM {vm} {}",
                e.name
            );
        }
    }
}

#[test]
fn c_and_python_examples_print_the_ledger_totals_for_admin_and_tenant() {
    let t0 = Instant::now();
    let tmp = Scratch::new("abi-examples");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let config = daemon_config(
        &tmp,
        &format!("[[tenant]]\nvm = {TENANT_VM}\nuid = {TENANT_UID}\n"),
    );
    let mut daemon = spawn_daemon(&tmp, &config, &[], &[]);
    daemon.wait_for("READY=1");

    for _ in 0..STEPS {
        step(&dev, STEP, &mut daemon);
    }
    assert_eq!(
        device::part_sum(&dev, r::PART_FALLBACKS),
        0,
        "a handshake fell back"
    );
    assert!(
        device::part_sum(&dev, r::PART_SWITCHES) > 0,
        "no switches ran"
    );
    flush(&dev);
    wait_none_destroyed(&dev);

    // Ledger-derived totals of every VM, and the daemon's view through
    // the Rust client once it has taken in the flush.
    let node_path = tmp.join("tenant").join("node");
    let client = TenantClient::open(&node_path).expect("open the tenant node");
    let all_vms = client.whoami().expect("whoami").visible_vms();
    assert!(
        all_vms.len() >= 2 && all_vms.contains(&TENANT_VM),
        "{all_vms:?}"
    );
    let mut expected = BTreeMap::new();
    let mut cycles = BTreeMap::new();
    for &vm in &all_vms {
        let want = device::expected(&dev.ledger(ledger_scope::VM, vm).expect("ledger"));
        let deadline = Instant::now() + Duration::from_secs(30);
        let rc = loop {
            let rc = client.read_counters(Scope::Vm(vm), &[]).expect("read VM");
            if rc.values == want {
                break rc;
            }
            assert!(
                Instant::now() < deadline,
                "VM {vm}: the node never showed the ledger totals:\nnode   {:?}\nledger {want:?}",
                rc.values
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(want.iter().any(|&v| v > 0), "VM {vm} counted nothing");
        expected.insert(vm, want);
        cycles.insert(vm, rc.cycle);
    }

    let work = Scratch::new("abi-examples-bin");
    let c = build_c(work.path());
    let py_script = stage_python(work.path());
    let py = python();
    let node = node_path.as_path();
    let c_argv: Vec<&Path> = vec![&c, node];
    let py_argv: Vec<&Path> = vec![&py, Path::new("-Es"), &py_script, node];
    let tenant_expected: BTreeMap<u32, [u64; MAX_EVENTS]> = expected
        .iter()
        .filter(|(&vm, _)| vm == TENANT_VM)
        .map(|(k, v)| (*k, *v))
        .collect();

    // The pages have taken in the flush too.
    let pages_socket = tmp.join("pages").join("socket");
    let pages = gpupm_client::page::PageClient::connect(&pages_socket).expect("page socket");
    for &vm in &all_vms {
        let page = pages.map_vm(vm).expect("map a VM page");
        let deadline = Instant::now() + Duration::from_secs(30);
        while page.read_counters().expect("read a page").totals != expected[&vm] {
            assert!(
                Instant::now() < deadline,
                "VM {vm}: the page never showed the ledger totals"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let socket_arg = pages_socket.to_str().expect("UTF-8 path");

    for (who, uid, want) in [
        ("admin", None, &expected),
        ("tenant", Some(TENANT_UID), &tenant_expected),
    ] {
        let paged = ["--pages", socket_arg, "-v"];
        let (c_text, c_how) = run_both(&c_argv, &paged, uid, work.path());
        let (py_text, py_how) = run_both(&py_argv, &paged, uid, work.path());
        let all_paged: String = want.keys().map(|vm| format!("vm {vm} page\n")).collect();
        assert_eq!(
            c_how, all_paged,
            "{who}: the C example read through the pages"
        );
        assert_eq!(
            py_how, all_paged,
            "{who}: the Python example read through the pages"
        );
        assert_eq!(c_text, py_text, "{who}: C and Python text differ");
        let unpaged = ["--no-pages", "-v"];
        let (c_node, c_how) = run_both(&c_argv, &unpaged, uid, work.path());
        let (py_node, py_how) = run_both(&py_argv, &unpaged, uid, work.path());
        let all_ioctl: String = want.keys().map(|vm| format!("vm {vm} ioctl\n")).collect();
        assert_eq!(
            (c_how, py_how),
            (all_ioctl.clone(), all_ioctl),
            "{who}: --no-pages"
        );
        assert_eq!(
            (&c_node, &py_node),
            (&c_text, &c_text),
            "{who}: pages and the node differ"
        );
        assert_eq!(
            c_text,
            expected_text(want),
            "{who}: text differs from the ledger"
        );
        assert_eq!(
            parse_text(&c_text).keys().copied().collect::<Vec<_>>(),
            want.keys().copied().collect::<Vec<_>>(),
            "{who}: VMs shown"
        );
        let c_json = run(
            &c_argv,
            &["--json", "--pages", socket_arg],
            uid,
            work.path(),
        );
        let py_json = run(
            &py_argv,
            &["--json", "--pages", socket_arg],
            uid,
            work.path(),
        );
        assert_eq!(c_json, py_json, "{who}: C and Python JSON differ");
        check_json(&c_json, want, &cycles);
        // `gpupm stat --json` reads the same totals as the examples.
        let all_events: Vec<&str> = CATALOGUE.iter().map(|e| e.name).collect();
        let events_arg = all_events.join(",");
        for &vm in want.keys() {
            let vm_arg = vm.to_string();
            let stat = run(
                &[&gpupm_binary()],
                &[
                    "--tenant-node",
                    node.to_str().unwrap(),
                    "--pages-socket",
                    socket_arg,
                    "stat",
                    "--json",
                    "--vm",
                    &vm_arg,
                    "-e",
                    &events_arg,
                ],
                uid,
                work.path(),
            );
            let doc: serde_json::Value =
                serde_json::from_str(stat.trim()).expect("gpupm stat --json");
            let c_line = c_json
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("C --json line"))
                .find(|o| o["id"] == vm)
                .expect("the C example shows the VM");
            // The C example prints device counts; gpupm stat prints them
            // in the events' units, without the device-level events.
            let mut c_counts = [0u64; MAX_EVENTS];
            for e in CATALOGUE {
                c_counts[usize::from(e.id)] = c_line["events"][e.name].as_u64().unwrap_or(0);
            }
            let stat_events: BTreeMap<String, u64> =
                serde_json::from_value(doc["events"].clone()).expect("stat events");
            assert_eq!(
                stat_events,
                vm_events_as_stat_prints(&c_counts),
                "{who}: gpupm stat and the C example differ on VM {vm}"
            );
        }
    }
    eprintln!(
        "{} VMs, {} switches, examples agree with the ledger and TenantClient, {:.1} s",
        all_vms.len(),
        device::part_sum(&dev, r::PART_SWITCHES),
        t0.elapsed().as_secs_f64()
    );

    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    driver.stop();
}

/// The `gpupm` binary, built beside `gpupm-driver` (same target directory
/// and profile) if it is not there yet.
fn gpupm_binary() -> PathBuf {
    let dir = gpupm_test_support::bin!(Driver)
        .parent()
        .expect("target/<profile>")
        .to_path_buf();
    let bin = dir.join("gpupm");
    if !bin.exists() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let ok = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "gpupm",
                "--bin",
                "gpupm",
                "--profile",
                "test",
            ])
            .env("CARGO_TARGET_DIR", dir.parent().expect("target dir"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok && bin.exists(),
            "{} is missing: `cargo build -p gpupm`",
            bin.display()
        );
    }
    bin
}
