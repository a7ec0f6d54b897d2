//! A stream ends with its reader: `gpupm … | head -2` ends, quietly and
//! with exit status 0, as soon as `head` has gone.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpupm_test_support::cli::Fixture;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::PATIENCE;

#[test]
fn streams_end_quietly_when_their_reader_goes() {
    let f = Fixture::start("live-pipes");
    let bin = gpupm_test_support::bin!(Cli);
    for args in [
        "dmon -I 50",
        "dmon -I 50 --json",
        "dmon -I 50 --csv",
        "stat --vm 1 -I 50 --json",
        "stat --vm 1 -I 50",
        "top -b -I 50",
    ] {
        let script = format!(
            "{} {args} --tenant-node {} --pages-socket {} | head -2 >/dev/null; \
             echo \"${{PIPESTATUS[0]}}\"",
            bin.display(),
            f.node(),
            f.pages_socket()
        );
        // Its own process group: a stream that does not end is killed
        // with the shell that ran it.
        let mut child = Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("bash");
        let deadline = Instant::now() + PATIENCE;
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let pgid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
                killpg(pgid, Signal::SIGKILL).ok();
                child.wait().ok();
                panic!("`gpupm {args} | head -2` still runs after {PATIENCE:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        // The step clock stands still: the note that device and wall time
        // differ is information, not an error.
        let err: String = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| !l.starts_with("gpupm: device and wall time differ"))
            .collect();
        assert_eq!(
            (String::from_utf8_lossy(&out.stdout).trim(), err.as_str()),
            ("0", ""),
            "`gpupm {args} | head -2`: its exit status and stderr"
        );
    }
    f.stop();
}
