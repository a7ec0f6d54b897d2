//! SIGTERM and SIGINT as readable events on the main thread: blocked in
//! every thread (the mask is taken before any thread starts, and threads
//! inherit it) and read from a signalfd, so a stop request is one more
//! thing the main loop waits for beside its watchdog period.

use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// Why the daemon's stop signals could not be taken.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op}")]
pub struct SignalError {
    op: &'static str,
    #[source]
    source: nix::Error,
}

/// The stop signals of the process, to wait for.
#[derive(Debug)]
pub struct StopSignals {
    fd: SignalFd,
}

impl StopSignals {
    /// Blocks SIGTERM and SIGINT in the calling thread and opens their
    /// signalfd. Call it before any other thread starts: a thread started
    /// earlier keeps them unblocked and may take one.
    pub fn take() -> Result<StopSignals, SignalError> {
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGTERM);
        mask.add(Signal::SIGINT);
        mask.thread_block().map_err(|source| SignalError {
            op: "block SIGTERM and SIGINT",
            source,
        })?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(|source| SignalError {
                op: "open a signalfd",
                source,
            })?;
        Ok(StopSignals { fd })
    }

    /// Waits up to `period` for a stop signal: its name, or None when the
    /// period ended first.
    pub fn wait(&self, period: Duration) -> Result<Option<&'static str>, SignalError> {
        let timeout = PollTimeout::try_from(period).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(source) => {
                return Err(SignalError {
                    op: "wait for a stop signal",
                    source,
                })
            }
        }
        match self.fd.read_signal() {
            Ok(Some(info)) => Ok(Some(if info.ssi_signo == Signal::SIGINT as u32 {
                "SIGINT"
            } else {
                "SIGTERM"
            })),
            Ok(None) | Err(nix::Error::EAGAIN) => Ok(None),
            Err(source) => Err(SignalError {
                op: "read a stop signal",
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_signal_sent_to_the_thread_is_read_not_delivered() {
        // The mask is per thread: this test's thread only.
        let signals = StopSignals::take().unwrap();
        assert_eq!(signals.wait(Duration::from_millis(1)).unwrap(), None);
        // raise(3) signals the calling thread.
        nix::sys::signal::raise(Signal::SIGINT).unwrap();
        assert_eq!(
            signals.wait(Duration::from_secs(60)).unwrap(),
            Some("SIGINT")
        );
    }
}
