//! The service manager's end of `$NOTIFY_SOCKET`, for whoever starts
//! `gpupm-driver` or `gpupmd` itself (`gpupm demo`, the tests): receives
//! notifications with their descriptors and answers `BARRIER=1` as systemd
//! does, by closing the barrier descriptor.

use std::fs;
use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

use crate::sys;

/// One notification datagram.
#[derive(Debug)]
pub struct Notification {
    /// The text (`KEY=value` lines).
    pub text: String,
    /// Descriptors that came with it (`SCM_RIGHTS`), owned here.
    pub fds: Vec<OwnedFd>,
}

impl Notification {
    /// Whether one of its lines is exactly `line`.
    pub fn has(&self, line: &str) -> bool {
        self.text.lines().any(|l| l == line)
    }

    /// The value of `key=` if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    }
}

/// A bound notification socket.
#[derive(Debug)]
pub struct NotifyListener {
    socket: UnixDatagram,
    path: PathBuf,
}

impl NotifyListener {
    /// Binds a datagram socket at `path` (replacing a leftover socket file).
    pub fn bind(path: impl Into<PathBuf>) -> io::Result<NotifyListener> {
        let path = path.into();
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let socket = UnixDatagram::bind(&path)?;
        Ok(NotifyListener { socket, path })
    }

    /// The socket's path, for `NOTIFY_SOCKET`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Receives one datagram, waiting at most `timeout` (then `TimedOut`
    /// or `WouldBlock`).
    pub fn recv(&self, timeout: Duration) -> io::Result<Notification> {
        self.socket
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut buf = [0u8; 4096];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([RawFd; 16]);
        let (bytes, raw) = {
            let msg = recvmsg::<()>(
                self.socket.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
            let mut raw = Vec::new();
            for c in msg
                .cmsgs()
                .map_err(|e| io::Error::from_raw_os_error(e as i32))?
            {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    raw.extend(fds);
                }
            }
            (msg.bytes, raw)
        };
        let fds = raw
            .into_iter()
            .map(sys::adopt_received)
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Notification {
            text: String::from_utf8_lossy(&buf[..bytes]).into_owned(),
            fds,
        })
    }

    /// One datagram if one comes within 200 ms, `None` if none does (the
    /// waits around it check their deadline and the sender in between).
    fn poll_once(&self) -> io::Result<Option<Notification>> {
        match self.recv(Duration::from_millis(200)) {
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Receives until a notification has line `line`, answering barriers on
    /// the way; gives up after `timeout` or when `alive` says the sender is
    /// gone.
    pub fn wait_for(
        &self,
        line: &str,
        timeout: Duration,
        alive: impl FnMut() -> bool,
    ) -> io::Result<Notification> {
        self.wait_until(
            &format!("a notification with {line}"),
            timeout,
            alive,
            |n| n.has(line),
        )
    }

    /// Receives until `done` accepts a notification (it sees every one,
    /// barriers excepted, which are answered), then returns that one;
    /// gives up after `timeout` or when `alive` says the sender is gone.
    /// `what` names the awaited notification in the error.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut alive: impl FnMut() -> bool,
        mut done: impl FnMut(&Notification) -> bool,
    ) -> io::Result<Notification> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.poll_once()? {
                // Dropping the barrier's descriptor is the answer.
                Some(n) if n.has("BARRIER=1") => {}
                Some(n) if done(&n) => return Ok(n),
                _ => {}
            }
            if !alive() {
                return Err(io::Error::other(format!("the sender ended before {what}")));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no {what} within {timeout:?}"),
                ));
            }
        }
    }

    #[cfg(feature = "test-utils")]
    /// Receives a descriptor store as [`crate::store_fd`] sends it: the
    /// `FDSTORE=1` message (returning its `FDNAME` and descriptor), then
    /// answers the barrier that follows. Other messages are skipped.
    pub fn recv_stored(
        &self,
        timeout: Duration,
        mut alive: impl FnMut() -> bool,
    ) -> io::Result<(String, OwnedFd)> {
        let mut stored = self.wait_for("FDSTORE=1", timeout, &mut alive)?;
        let name = stored.get("FDNAME").unwrap_or("stored").to_owned();
        if stored.fds.len() != 1 {
            return Err(io::Error::other(format!(
                "FDSTORE=1 with {} descriptors",
                stored.fds.len()
            )));
        }
        let fd = stored.fds.remove(0);
        let deadline = Instant::now() + timeout;
        loop {
            if self.poll_once()?.is_some_and(|n| n.has("BARRIER=1")) {
                return Ok((name, fd));
            }
            if !alive() || Instant::now() >= deadline {
                return Err(io::Error::other("no BARRIER=1 after FDSTORE=1"));
            }
        }
    }
}

impl Drop for NotifyListener {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.path) {
            tracing::debug!(path = %self.path.display(), error = %e, "notify socket left behind");
        }
    }
}
