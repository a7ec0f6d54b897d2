//! What `/proc/<pid>/status` says about the process behind a FUSE request.
//!
//! The kernel sends a request's uid, gid and thread-group id, but not the
//! caller's supplementary groups, and a reader parked in a blocking read
//! is not told when it is killed. Both are read from procfs; a process that
//! is gone or unreadable has no supplementary groups (which can only take
//! rights away) and counts as killed.

use std::fs;

/// Credentials of one FUSE request, as the kernel supplied them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Thread-group id of the caller (0 when the kernel sent the request on
    /// its own behalf).
    pub pid: u32,
}

impl Caller {
    /// The credentials the kernel sent with `req`.
    pub fn of(req: &fuser::Request) -> Caller {
        Caller {
            uid: req.uid(),
            gid: req.gid(),
            pid: req.pid(),
        }
    }
}

/// Supplementary groups of process `pid` (`Groups:`); empty when the
/// process is gone, unreadable, or `pid` is 0 (a request the kernel sent on
/// its own behalf).
pub fn supplementary_groups(pid: u32) -> Vec<u32> {
    status(pid).map_or_else(Vec::new, |s| groups_of(&s))
}

/// Whether process `pid` has SIGKILL pending (`SigPnd:` or `ShdPnd:`) or is
/// gone. Always false for `pid` 0.
pub fn fatal_signal_pending(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    status(pid).is_none_or(|s| sigkill_pending(&s))
}

fn status(pid: u32) -> Option<String> {
    if pid == 0 {
        return None;
    }
    fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

fn groups_of(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn sigkill_pending(status: &str) -> bool {
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("SigPnd:")
                .or_else(|| l.strip_prefix("ShdPnd:"))
        })
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .any(|mask| mask & SIGKILL_BIT != 0)
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn groups_and_pending_sigkill_are_read_from_status_text() {
        let status =
            "Name:\tcat\nGroups:\t4 24 27 \nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n";
        assert_eq!(groups_of(status), vec![4, 24, 27]);
        assert!(sigkill_pending(status));
        assert!(!sigkill_pending("SigPnd:\t0000000000000002\nShdPnd:\t0\n"));
        assert!(groups_of("Groups:\t\n").is_empty());
    }

    #[test]
    fn this_process_is_alive_and_pid_zero_is_nobody() {
        assert!(!fatal_signal_pending(std::process::id()));
        assert!(!fatal_signal_pending(0));
        assert!(supplementary_groups(0).is_empty());
        assert!(fatal_signal_pending(u32::MAX));
    }
}
