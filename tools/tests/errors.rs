//! Every CLI error path prints one line `gpupm: CAUSE` and exits with the
//! documented code (2 = usage or environment, 1 = runtime problem).

use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(gpupm_test_support::bin!(Cli))
        .args(args)
        .output()
        .expect("run gpupm");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn one_line(err: &str) {
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("gpupm: "), "{err:?}");
}

#[test]
fn no_daemon_names_the_missing_node() {
    for cmd in [
        &["list"][..],
        &["stat", "--vm", "1"],
        &["top", "--headless-frames", "1"],
        &["dmon", "--count", "1"],
        &["record", "-o", "/tmp/x", "--vm", "1"],
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--tenant-node", "/nonexistent/gpupm/node"]);
        let (code, out, err) = run(&args);
        assert_eq!((code, out.as_str()), (2, ""), "{cmd:?}");
        assert_eq!(
            err, "gpupm: no gpupmd: /nonexistent/gpupm/node does not exist\n",
            "{cmd:?}"
        );
    }
}

#[test]
fn bad_event_name_names_the_closest_valid_one() {
    let (code, _, err) = run(&[
        "stat",
        "-e",
        "sm_inst_executed,l2_hti",
        "--vm",
        "1",
        "--tenant-node",
        "/nonexistent",
    ]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "gpupm: unknown event \"l2_hti\" (did you mean \"l2_hit\"?)\n"
        )
    );
    let (code, _, err) = run(&["stat", "-e", "inst_executed"]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "gpupm: unknown event \"inst_executed\" (did you mean \"sm_inst_executed\"?)\n"
        )
    );
}

#[test]
fn bad_recordings_are_refused_with_the_reason() {
    let dir = gpupm_test_support::Scratch::world_writable("cli-errors");
    let f = dir.join("garbage");
    std::fs::write(
        &f,
        b"this is not a recording, it is long enough to hold a header........",
    )
    .unwrap();
    let (code, _, err) = run(&["report", f.to_str().unwrap()]);
    assert_eq!(
        (code, err),
        (
            2,
            format!(
                "gpupm: {}: not a gpupm recording (bad magic)\n",
                f.display()
            )
        )
    );
    let (code, _, err) = run(&["report", "/nonexistent/rec"]);
    assert_eq!(code, 2);
    one_line(&err);
    assert!(err.starts_with("gpupm: cannot read /nonexistent/rec: "));
}

#[test]
fn device_nodes_that_do_not_exist_are_named() {
    let (code, _, err) = run(&["bmc", "--node-dir", "/nonexistent/dev"]);
    assert_eq!((code, err.as_str()), (2, "gpupm: no device node: /nonexistent/dev/card0-oob does not exist (is gpupm-driver running?)\n"));
    let dir = gpupm_test_support::Scratch::world_writable("cli-errors-health");
    let cfg = dir.join("gpupmd.toml");
    let port = gpupm_test_support::cli::free_port();
    std::fs::write(
        &cfg,
        format!("node_dir = \"/nonexistent/dev\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let (code, _, err) = run(&["health", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2);
    one_line(&err);
    assert!(
        err.starts_with(&format!(
            "gpupm: no health source: metrics at 127.0.0.1:{port}: "
        )),
        "{err}"
    );
    std::fs::write(&cfg, "bogus_key = 1\n").unwrap();
    let (code, _, err) = run(&["health", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2);
    one_line(&err);
    assert!(err.contains("gpupmd.toml:1:1: "), "{err}");
}

#[test]
fn demo_without_its_binaries_says_where_it_looked() {
    let dir = gpupm_test_support::Scratch::world_writable("cli-errors-demo");
    let copy = dir.join("gpupm");
    std::fs::copy(gpupm_test_support::bin!(Cli), &copy).unwrap();
    let o = output_of_fresh_copy(
        Command::new(&copy)
            .args(["demo", "--headless"])
            .env("PATH", ""),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        err,
        format!("gpupm: cannot find gpupm-driver next to {} or on PATH (build it: cargo build -p gpupm-driver -p gpupmd)\n", dir.path().display())
    );
}

/// Runs a binary this test just wrote. Another test thread's fork can
/// briefly hold an inherited copy of the write descriptor (until that
/// child's exec closes it), and exec then fails with ETXTBSY; that window
/// closes by itself, so the spawn is retried, a bounded number of times.
fn output_of_fresh_copy(cmd: &mut Command) -> std::process::Output {
    for _ in 0..1000 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => std::thread::yield_now(),
            other => return other.unwrap(),
        }
    }
    panic!("the copied binary stayed busy (ETXTBSY) for 1000 attempts");
}

#[test]
fn usage_errors_exit_2_and_generators_work() {
    let (code, _, _) = run(&["stat", "--vm", "1", "--ctx", "2"]);
    assert_eq!(code, 2);
    let (code, _, err) = run(&["record", "-o", "/tmp/x", "--duration", "soon"]);
    assert_eq!(code, 2, "{err}");
    let (code, out, _) = run(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(out.contains("_gpupm()"));
    let (code, out, _) = run(&["man"]);
    assert_eq!(code, 0);
    assert!(out.contains(".TH gpupm"));
    let dir = gpupm_test_support::Scratch::world_writable("cli-man");
    let (code, _, _) = run(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(dir.join("gpupm-stat.1").exists());
}
