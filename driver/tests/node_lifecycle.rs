//! Lifecycle and access control: SIGTERM, stale-mount recovery after a
//! crash, non-admin callers, and the Python client.

use std::path::PathBuf;
use std::process::Command;

use gpupm_test_support::rawnode::{errno, rd32, rd64};
use gpupm_test_support::{scratch::is_mounted, Driver, DriverOptions, Scratch};
use gpupm_uapi::regs;
use nix::sys::signal::Signal;

fn client() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/node_client.py")
}

fn python(args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg(client())
        .args(args)
        .output()
        .expect("python3 must be installed for the cross-language test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "node_client.py {args:?} failed:\n{text}"
    );
    text
}

#[test]
fn sigterm_unmounts_even_with_open_handles() {
    let d = Driver::start();
    let card = d.card();
    assert_eq!(rd32(&card, regs::ID).unwrap(), regs::DEVICE_MAGIC);
    let dir = d.dir.clone();
    d.stop();
    assert!(!is_mounted(&dir));
    let e = rd32(&card, regs::ID).unwrap_err();
    assert!(
        matches!(errno(&e), libc::ENOTCONN | libc::ENODEV | libc::EIO),
        "{e}"
    );
}

#[test]
fn sigint_stops_cleanly() {
    let mut d = Driver::start();
    let status = d.signal_and_wait(Signal::SIGINT);
    assert!(status.success(), "{status}\n{}", d.log());
    assert!(!is_mounted(&d.dir));
}

#[test]
fn restart_after_kill_9_recovers_the_stale_mount() {
    let mut d = Driver::start();
    let status = d.signal_and_wait(Signal::SIGKILL);
    assert!(!status.success());
    assert!(
        is_mounted(&d.dir),
        "a killed driver leaves its mount behind"
    );
    let stat = std::fs::metadata(&d.dir).unwrap_err();
    assert_eq!(errno(&stat), libc::ENOTCONN);

    let scratch = d.take_scratch();
    drop(d);
    let d = Driver::start_in(&scratch, DriverOptions::default());
    assert_eq!(rd32(&d.card(), regs::ID).unwrap(), regs::DEVICE_MAGIC);
    assert!(d.log().contains("stale mount"), "{}", d.log());
    d.stop();
}

#[test]
fn a_second_driver_refuses_a_live_node_dir() {
    let d = Driver::start();
    let out = Command::new(gpupm_test_support::bin!(Driver))
        .args(["--clock", "step", "--node-dir"])
        .arg(&d.dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    // The instance lock refuses it before it looks at the mount.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("already running as pid {} for", d.pid())),
        "{stderr}"
    );
    assert_eq!(rd32(&d.card(), regs::ID).unwrap(), regs::DEVICE_MAGIC);
    d.stop();
}

#[test]
fn bad_command_lines_exit_2_with_a_reason_and_mount_nothing() {
    let tmp = Scratch::new("badargs");
    let dir = tmp.join("dev");
    let missing = tmp.join("no-such-scenario.toml");
    let cases: [(&[&str], &str); 5] = [
        (&["--threads", "0"], "--threads"),
        (&["--threads", "65"], "--threads"),
        (&["--threads", "two"], "--threads"),
        (&["--clock", "sundial"], "--clock"),
        (
            &["--scenario", missing.to_str().unwrap()],
            "no-such-scenario",
        ),
    ];
    for (args, mentions) in cases {
        let out = Command::new(gpupm_test_support::bin!(Driver))
            .args(args)
            .arg("--node-dir")
            .arg(&dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(mentions), "{args:?}: {stderr}");
        assert!(!is_mounted(&dir), "{args:?} mounted the node");
    }
}

#[test]
fn non_admin_uid_gets_eacces_on_open_and_on_every_request() {
    let d = Driver::start();
    assert!(python(&["denied", d.dir.to_str().unwrap()]).contains("ok"));
    // Both files: the BMC's mailbox (and what it says of the host) is the
    // admin's as much as the host's node is.
    for file in [d.card_path(), d.dir.join("card0-oob")] {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
            .arg(&file)
            .output()
            .expect("setpriv (util-linux) must be installed");
        assert!(!out.status.success(), "{}", file.display());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{}",
            file.display()
        );
    }
    d.stop();
}

#[test]
fn admin_group_member_is_allowed() {
    let d = Driver::start_with(DriverOptions {
        admin_gid: Some(65534),
        ..DriverOptions::default()
    });
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "dd",
            "bs=4",
            "count=1",
            "status=none",
        ])
        .arg(format!("if={}", d.card_path().display()))
        .output()
        .expect("setpriv (util-linux) must be installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, regs::DEVICE_MAGIC.to_le_bytes());
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(d.card_path()).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o660);
    d.stop();
}

#[test]
fn python_client_speaks_the_node_abi() {
    let d = Driver::start();
    assert!(python(&["selftest", d.dir.to_str().unwrap()]).contains("ok"));
    d.stop();
}

#[test]
fn python_client_reads_what_the_rust_test_reads() {
    use gpupm_test_support::rawnode::{drain_records, expected, identity, ledger, read_block};
    use gpupm_uapi::intr::source;
    use gpupm_uapi::ioctl::ledger_scope;

    let d = Driver::start();
    let mut card = d.card_nonblock();
    let out = python(&["report", d.dir.to_str().unwrap(), "150000"]);
    let line = |name: &str| -> Vec<u64> {
        let l = out
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{out}"));
        l.split(' ')
            .skip(1)
            .map(|v| v.parse().expect("number"))
            .collect()
    };

    let id = identity(&card);
    let ids = [
        id.version,
        id.magic,
        id.abi_version,
        id.events,
        id.partitions,
        id.ccus,
        id.sms,
        id.clock_khz,
        id.step_clock,
        id.reserved,
    ];
    let mut want: Vec<u64> = ids.iter().map(|&v| u64::from(v)).collect();
    want.push(0); // the client read the identity before advancing
    assert_eq!(line("identity"), want);
    assert_eq!(line("cycle"), [150_000]);
    assert_eq!(rd64(&card, regs::CYCLE).unwrap(), 150_000);

    // Rust's handle sees the client's records and then the flush's TRIGGER_DONE.
    let recs = drain_records(&mut card);
    let (flush, advanced) = recs.split_last().expect("records");
    assert_eq!(flush.source, source::TRIGGER_DONE);
    let rust: Vec<String> = advanced
        .iter()
        .map(|r| {
            format!(
                "{}:{}:{}:{}:{}:{}",
                r.seq, r.cycle, r.source, r.partition, r.arg, r.arg2
            )
        })
        .collect();
    let l = out.lines().find(|l| l.starts_with("records")).unwrap();
    let py: Vec<&str> = l.split(' ').skip(1).collect();
    assert!(rust.len() > 5);
    assert_eq!(py, rust);

    let q = ledger(&card, ledger_scope::SYSTEM, 0).unwrap();
    assert_eq!(line("generated"), q.generated);
    assert_eq!(line("masked"), q.masked);
    assert_eq!(line("remainder"), q.remainder);
    let b = read_block(&card, 0, None);
    let mut want = vec![
        u64::from(b.magic),
        u64::from(b.kind),
        u64::from(b.version),
        u64::from(b.id),
        u64::from(b.vm),
        b.commit_seq,
        b.last_commit_cycle,
    ];
    want.extend(b.counters);
    assert_eq!(line("system_block"), want);
    assert_eq!(
        b.counters,
        expected(&q),
        "the flushed system block equals the ledger"
    );
    d.stop();
}
