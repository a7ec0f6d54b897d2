//! What the device knows of its host driver, for the BMC
//! (`OOB_HOST_STATE`): whether the host's node is served at all, how many
//! host handles are open on it, whether a host reader waits on it, and
//! when the host last made a request. The driver layer reports these as
//! [`HostEvent`]s (`Device::host_event`); the device keeps the time in its
//! own cycles, and the timeout is the scenario's (`[oob] host_timeout`).

use gpupm_uapi::regs::oob_host_state;

/// Something the driver layer saw on the host's node (`card0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostEvent {
    /// The host's node started (true) or stopped (false) being served.
    Attached(bool),
    /// This many handles are open on the host's node now.
    Handles(u32),
    /// This many host readers are blocked waiting on the node's interrupt
    /// stream now: while one waits, the host counts as responding.
    Waiting(u32),
    /// The host made a request (a register access, an ioctl, a read).
    Request,
}

/// The host link's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLink {
    attached: bool,
    handles: u32,
    waiting: u32,
    /// Cycle of the host's last request; `None` before the first.
    last_request: Option<u64>,
    /// Cycles of silence after which an open host is not responding.
    timeout: u64,
}

/// The host driver as [`HostLink::state`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostState {
    /// [`oob_host_state`].
    pub state: u64,
    /// Cycles since the last request (`u64::MAX`: never; 0 while a reader
    /// waits).
    pub since_request: u64,
    /// Open host handles.
    pub handles: u32,
    /// The timeout, in cycles.
    pub timeout: u64,
}

impl HostLink {
    /// A link that has seen nothing yet (unloaded), with `timeout` cycles.
    pub fn new(timeout: u64) -> Self {
        HostLink {
            attached: false,
            handles: 0,
            waiting: 0,
            last_request: None,
            timeout,
        }
    }

    /// Applies `event`, seen at cycle `now`.
    pub fn apply(&mut self, event: HostEvent, now: u64) {
        match event {
            HostEvent::Attached(on) => {
                self.attached = on;
                if on {
                    // A freshly served node counts as just used.
                    self.last_request = Some(now);
                }
            }
            HostEvent::Handles(n) => self.handles = n,
            HostEvent::Waiting(n) => {
                if self.waiting != 0 && n == 0 {
                    // The wait ended now: the host was there until now.
                    self.last_request = Some(now);
                }
                self.waiting = n;
            }
            HostEvent::Request => self.last_request = Some(now),
        }
    }

    /// The state at cycle `now`.
    pub fn state(&self, now: u64) -> HostState {
        let since_request = if self.waiting != 0 {
            0
        } else {
            self.last_request
                .map_or(u64::MAX, |t| now.saturating_sub(t))
        };
        let state = if !self.attached || self.handles == 0 {
            oob_host_state::UNLOADED
        } else if since_request > self.timeout {
            oob_host_state::NOT_RESPONDING
        } else {
            oob_host_state::LOADED
        };
        HostState {
            state,
            since_request,
            handles: self.handles,
            timeout: self.timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unloaded_until_served_and_open_then_loaded_until_the_timeout_passes() {
        let timeout = 1_000;
        let mut link = HostLink::new(timeout);
        assert_eq!(link.state(0).state, oob_host_state::UNLOADED);
        assert_eq!(link.state(0).since_request, u64::MAX);
        link.apply(HostEvent::Attached(true), 100);
        assert_eq!(
            link.state(100).state,
            oob_host_state::UNLOADED,
            "no handle open"
        );
        link.apply(HostEvent::Handles(1), 100);
        assert_eq!(link.state(100).state, oob_host_state::LOADED);
        let late = 100 + timeout;
        assert_eq!(link.state(late).state, oob_host_state::LOADED);
        assert_eq!(link.state(late + 1).state, oob_host_state::NOT_RESPONDING);
        link.apply(HostEvent::Request, late + 1);
        assert_eq!(link.state(late + 1).state, oob_host_state::LOADED);
        link.apply(HostEvent::Waiting(1), late + 2);
        let waiting = link.state(late + 10 * timeout);
        assert_eq!(
            (waiting.state, waiting.since_request),
            (oob_host_state::LOADED, 0),
            "a waiting reader is a responding host"
        );
        link.apply(HostEvent::Waiting(0), late + 10 * timeout);
        assert_eq!(
            link.state(late + 11 * timeout).state,
            oob_host_state::LOADED
        );
        assert_eq!(
            link.state(late + 11 * timeout + 1).state,
            oob_host_state::NOT_RESPONDING
        );
        link.apply(HostEvent::Handles(0), late + 12 * timeout);
        assert_eq!(
            link.state(late + 12 * timeout).state,
            oob_host_state::UNLOADED
        );
        link.apply(HostEvent::Handles(2), late + 13 * timeout);
        link.apply(HostEvent::Attached(false), late + 13 * timeout);
        assert_eq!(
            link.state(late + 13 * timeout).state,
            oob_host_state::UNLOADED
        );
    }
}
