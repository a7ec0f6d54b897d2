//! Descriptor passing with the service manager.
//!
//! # Storing (`gpupm-mount`)
//! [`store_fd`] sends, on `$NOTIFY_SOCKET` (a path; abstract addresses are
//! not supported by the `sd-notify` crate), three datagrams:
//! `FDSTOREREMOVE=1` + `FDNAME=<name>` (drops a descriptor a previous run
//! stored under the name: with `FileDescriptorStoreMax=1` a second one would
//! be refused), then `FDSTORE=1` + `FDNAME=<name>` carrying the descriptor
//! as `SCM_RIGHTS`, then `BARRIER=1` carrying the write end of a pipe, and
//! waits until the manager closes it (sd_notify_barrier(3)): the manager
//! has then processed the store, so the helper may exit (a message from an
//! exited control process may otherwise not be attributed to the unit).
//!
//! # Dropping (`gpupm-mount --unmount --fdname`)
//! [`remove_stored_fd`] sends `FDSTOREREMOVE=1` + `FDNAME=<name>` and a
//! barrier. Once the service has died, the manager's copy is the last open
//! `/dev/fuse` descriptor of the connection; closing it makes the kernel
//! abort the connection, so that requests the dead server had read but not
//! answered fail instead of waiting for ever. Without that, a client with
//! such a request (gpupmd reading `card0` when the driver is killed) cannot
//! even be killed, and aborting through fusectl is not always possible
//! (`/sys/fs/fuse/connections` is not mounted in a container).
//!
//! # Inheriting (the services)
//! The manager passes stored descriptors to the main process as
//! sd_listen_fds(3) describes: numbers 3, 4, ... with `LISTEN_FDS=<count>`,
//! `LISTEN_FDNAMES=<name>:<name>...` and `LISTEN_PID=<pid of the process
//! meant>`. [`inherited_fd`] reads those once, takes ownership of the
//! descriptors (close-on-exec), unsets the three variables so that children
//! do not see them, and hands out each descriptor by name once.

use std::env;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sd_notify::NotifyState;

use crate::sys;

/// First descriptor number the service manager passes.
pub const LISTEN_FDS_START: RawFd = 3;
/// How long [`store_fd`] waits for the manager to confirm.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(5);

const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
const LISTEN_PID: &str = "LISTEN_PID";
const LISTEN_FDS: &str = "LISTEN_FDS";
const LISTEN_FDNAMES: &str = "LISTEN_FDNAMES";

/// Why a descriptor could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Not started by a service manager that accepts notifications from us.
    #[error("NOTIFY_SOCKET is not set (run by systemd with NotifyAccess=exec or all)")]
    NoSocket,
    /// The name is not one systemd accepts.
    #[error("invalid descriptor name {0:?} (1 to 255 printable ASCII characters, no ':')")]
    BadName(String),
    /// Sending on the notification socket failed.
    #[error("could not send {what} to the service manager")]
    Send {
        /// The message.
        what: &'static str,
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// The manager did not confirm that it processed the store.
    #[error("the service manager did not confirm the store (BARRIER=1)")]
    Barrier(#[source] io::Error),
}

/// Hands `fd` to the service manager's descriptor store under `name`,
/// replacing one stored earlier under that name, and returns once the
/// manager has processed it. `fd` stays open here; the manager holds its
/// own copy.
pub fn store_fd(name: &str, fd: BorrowedFd<'_>) -> Result<(), StoreError> {
    if env::var_os(NOTIFY_SOCKET).is_none() {
        return Err(StoreError::NoSocket);
    }
    if !fdname_is_valid(name) {
        return Err(StoreError::BadName(name.to_owned()));
    }
    let send = |what| move |source| StoreError::Send { what, source };
    sd_notify::notify(&[NotifyState::FdStoreRemove, NotifyState::FdName(name)])
        .map_err(send("FDSTOREREMOVE=1"))?;
    sd_notify::notify_with_fds(&[NotifyState::FdStore, NotifyState::FdName(name)], &[fd])
        .map_err(send("FDSTORE=1"))?;
    barrier(BARRIER_TIMEOUT)
}

/// Asks the service manager to close the descriptor stored under `name`
/// (if any) and returns once it has processed the request.
pub fn remove_stored_fd(name: &str) -> Result<(), StoreError> {
    if env::var_os(NOTIFY_SOCKET).is_none() {
        return Err(StoreError::NoSocket);
    }
    if !fdname_is_valid(name) {
        return Err(StoreError::BadName(name.to_owned()));
    }
    sd_notify::notify(&[NotifyState::FdStoreRemove, NotifyState::FdName(name)]).map_err(
        |source| StoreError::Send {
            what: "FDSTOREREMOVE=1",
            source,
        },
    )?;
    barrier(BARRIER_TIMEOUT)
}

/// sd_notify_barrier(3): sends `BARRIER=1` with a pipe's write end and
/// waits until the manager has closed it.
fn barrier(timeout: Duration) -> Result<(), StoreError> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| StoreError::Barrier(io::Error::from_raw_os_error(e as i32)))?;
    sd_notify::notify_with_fds(&[NotifyState::Custom("BARRIER=1")], &[write.as_fd()]).map_err(
        |source| StoreError::Send {
            what: "BARRIER=1",
            source,
        },
    )?;
    drop(write);
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(read.as_fd(), PollFlags::empty())];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(0) => Err(StoreError::Barrier(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {timeout:?}"),
        ))),
        Ok(_) => Ok(()),
        Err(e) => Err(StoreError::Barrier(io::Error::from_raw_os_error(e as i32))),
    }
}

/// systemd's `fdname_is_valid`: 1 to 255 printable ASCII characters, no ':'.
fn fdname_is_valid(name: &str) -> bool {
    (1..=255).contains(&name.len())
        && name
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b':')
}

/// Descriptors inherited from the service manager and not yet handed out;
/// `None` until the environment has been read.
static INHERITED: Mutex<Option<Vec<(String, OwnedFd)>>> = Mutex::new(None);

/// The descriptor the service manager passed under `name` (`LISTEN_FDNAMES`),
/// owned and close-on-exec; `None` when there is none (not started by the
/// manager, `LISTEN_PID` names another process, no such name, or already
/// taken).
///
/// The first call reads and unsets `LISTEN_PID`, `LISTEN_FDS` and
/// `LISTEN_FDNAMES`; make it before the process starts threads (unsetting
/// variables races with other threads reading the environment).
pub fn inherited_fd(name: &str) -> Option<OwnedFd> {
    let mut table = INHERITED.lock().unwrap_or_else(PoisonError::into_inner);
    let fds = table.get_or_insert_with(take_listen_fds);
    let at = fds.iter().position(|(n, _)| n == name)?;
    Some(fds.swap_remove(at).1)
}

/// Reads, unsets and adopts what the `LISTEN_*` variables describe.
fn take_listen_fds() -> Vec<(String, OwnedFd)> {
    let vars = ListenEnv {
        pid: env::var(LISTEN_PID).ok(),
        fds: env::var(LISTEN_FDS).ok(),
        names: env::var(LISTEN_FDNAMES).ok(),
    };
    for var in [LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES] {
        env::remove_var(var);
    }
    let listed = match vars.parse(std::process::id()) {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "ignoring the descriptors the service manager passed");
            return Vec::new();
        }
    };
    listed
        .into_iter()
        .filter_map(|(name, raw)| match sys::adopt_inherited(raw) {
            Ok(fd) => Some((name, fd)),
            Err(e) => {
                tracing::warn!(fd = raw, name, error = %e, "inherited descriptor unusable");
                None
            }
        })
        .collect()
}

/// The `LISTEN_*` variables as found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ListenEnv {
    pid: Option<String>,
    fds: Option<String>,
    names: Option<String>,
}

/// Why the `LISTEN_*` variables could not be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum ListenError {
    #[error("LISTEN_PID={0:?} is not a process id")]
    Pid(String),
    #[error("LISTEN_FDS={0:?} is not a descriptor count")]
    Count(String),
    #[error("LISTEN_FDNAMES has {names} names for {fds} descriptors")]
    Names { names: usize, fds: usize },
}

impl ListenEnv {
    /// The (name, number) pairs meant for process `me`; empty when the
    /// variables are absent or name another process. Unnamed descriptors
    /// are called `unknown`, as sd_listen_fds_with_names(3) does.
    fn parse(&self, me: u32) -> Result<Vec<(String, RawFd)>, ListenError> {
        let Some(pid) = &self.pid else {
            return Ok(Vec::new());
        };
        if pid
            .parse::<u32>()
            .map_err(|_| ListenError::Pid(pid.clone()))?
            != me
        {
            return Ok(Vec::new());
        }
        let Some(count) = &self.fds else {
            return Ok(Vec::new());
        };
        let n: RawFd = count
            .parse()
            .ok()
            .filter(|n| (0..=RawFd::MAX - LISTEN_FDS_START).contains(n))
            .ok_or_else(|| ListenError::Count(count.clone()))?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let fds = LISTEN_FDS_START..LISTEN_FDS_START + n;
        let names: Vec<String> = match &self.names {
            Some(names) => names.split(':').map(str::to_owned).collect(),
            None => fds.clone().map(|_| "unknown".to_owned()).collect(),
        };
        if names.len() != fds.len() {
            return Err(ListenError::Names {
                names: names.len(),
                fds: fds.len(),
            });
        }
        Ok(names.into_iter().zip(fds).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pid: Option<&str>, fds: Option<&str>, names: Option<&str>) -> ListenEnv {
        ListenEnv {
            pid: pid.map(str::to_owned),
            fds: fds.map(str::to_owned),
            names: names.map(str::to_owned),
        }
    }

    #[test]
    fn descriptors_for_another_pid_or_without_variables_are_not_ours() {
        assert_eq!(
            vars(Some("41"), Some("1"), Some("node")).parse(42),
            Ok(vec![])
        );
        assert_eq!(vars(None, Some("1"), Some("node")).parse(42), Ok(vec![]));
        assert_eq!(vars(Some("42"), None, None).parse(42), Ok(vec![]));
        assert_eq!(vars(Some("42"), Some("0"), Some("")).parse(42), Ok(vec![]));
    }

    #[test]
    fn names_map_in_order_to_descriptors_from_three() {
        let got = vars(Some("42"), Some("3"), Some("a:node:tenant")).parse(42);
        let want = vec![
            ("a".to_owned(), 3),
            ("node".to_owned(), 4),
            ("tenant".to_owned(), 5),
        ];
        assert_eq!(got, Ok(want));
        assert_eq!(
            vars(Some("42"), Some("2"), None).parse(42),
            Ok(vec![("unknown".to_owned(), 3), ("unknown".to_owned(), 4)])
        );
    }

    #[test]
    fn malformed_variables_are_refused() {
        assert_eq!(
            vars(Some("x"), Some("1"), None).parse(42),
            Err(ListenError::Pid("x".into()))
        );
        assert_eq!(
            vars(Some("42"), Some("-1"), None).parse(42),
            Err(ListenError::Count("-1".into()))
        );
        assert_eq!(
            vars(Some("42"), Some("2"), Some("node")).parse(42),
            Err(ListenError::Names { names: 1, fds: 2 })
        );
    }

    #[test]
    fn descriptor_names_follow_systemds_rules() {
        assert!(fdname_is_valid("node"));
        assert!(!fdname_is_valid(""));
        assert!(!fdname_is_valid("a:b"));
        assert!(!fdname_is_valid("tab\there"));
        assert!(!fdname_is_valid(&"x".repeat(256)));
    }
}
