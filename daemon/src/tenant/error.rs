//! Errors of tenant requests, and the one place they become errnos.

/// Why a request failed; [`RequestError::errno`] is the one place that
/// turns it into the errno the caller sees.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    /// Not a tenant-node ioctl.
    #[error("unknown ioctl")]
    UnknownIoctl,
    /// The argument is malformed.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// Not the caller's (or, for a tenant, does not exist).
    #[error("not visible to the caller")]
    Denied,
    /// Does not exist (admin only).
    #[error("no such scope")]
    NotFound,
    /// Nothing to read on a non-blocking handle.
    #[error("no record queued")]
    WouldBlock,
    /// The handle was closed or the reader killed while a read waited.
    #[error("interrupted")]
    Interrupted,
    /// The handle is not open.
    #[error("unknown file handle")]
    BadHandle,
    /// The node is shutting down.
    #[error("the tenant node is shutting down")]
    ShuttingDown,
    /// The handle already holds a session of another kind.
    #[error("the handle already holds a session")]
    Busy,
    /// No room: every range register of the partition is busy, or the
    /// context holds its most ranges.
    #[error("no room for another range")]
    NoSpace,
    /// The device refused or failed a request the daemon made for the caller.
    #[error("the device failed")]
    Device,
    /// The request is well formed but not offered for this scope.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// Every device resource the request needs is in use.
    #[error("no free device resource")]
    Exhausted,
    /// The daemon's own data is inconsistent.
    #[error("internal error: {0}")]
    Internal(&'static str),
    /// The caller's uid holds the most handles it may (`handles_per_uid`).
    #[error("the caller holds the most handles it may")]
    TooManyHandles,
    /// The node holds the most handles it may (`handles_total`).
    #[error("the node holds the most handles it may")]
    NodeFull,
    /// A cap of `[limits]` on sessions, ranges or queued bytes.
    #[error("over a limit: {0}")]
    OverQuota(&'static str),
    /// As many reads of the caller (or of everyone) wait as may
    /// (`parked_reads_per_uid`, `parked_reads_total`).
    #[error("too many reads are waiting")]
    TooManyWaiting,
    /// The caller's bucket of device reads is empty (`device_reads_per_s`).
    #[error("too many device reads; try again")]
    RateLimited,
}

impl RequestError {
    /// The errno for the caller.
    pub fn errno(&self) -> i32 {
        match self {
            RequestError::UnknownIoctl => libc::ENOTTY,
            RequestError::Invalid(_) => libc::EINVAL,
            RequestError::Denied => libc::EACCES,
            RequestError::NotFound => libc::ENOENT,
            RequestError::WouldBlock => libc::EAGAIN,
            RequestError::Interrupted => libc::EINTR,
            RequestError::BadHandle => libc::EBADF,
            RequestError::ShuttingDown => libc::ENODEV,
            RequestError::Busy => libc::EBUSY,
            RequestError::Unsupported(_) => libc::EOPNOTSUPP,
            RequestError::Exhausted => libc::EAGAIN,
            RequestError::NoSpace => libc::ENOSPC,
            RequestError::Device | RequestError::Internal(_) => libc::EIO,
            RequestError::TooManyHandles => libc::EMFILE,
            RequestError::NodeFull => libc::ENFILE,
            RequestError::OverQuota(_) => libc::ENOSPC,
            RequestError::TooManyWaiting => libc::EBUSY,
            RequestError::RateLimited => libc::EAGAIN,
        }
    }
}
