//! Errors of node requests and their errno: the one place where device and
//! transport errors become what a caller of `pread`/`ioctl`/`read` sees.

use super::backend::BackendError;

/// Why a node request failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The device refused the request.
    #[error("device refused the request")]
    Backend(#[from] BackendError),
    /// The caller is neither the admin uid nor in the admin group.
    #[error("uid {uid} gid {gid} is not allowed on the device node")]
    AccessDenied {
        /// Caller uid from the request header.
        uid: u32,
        /// Caller gid from the request header.
        gid: u32,
    },
    /// The request's shape is wrong: width, alignment, range, struct size,
    /// version, flags or reserved fields.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The ioctl number is not one of the node's.
    #[error("unknown ioctl {0:#010x}")]
    UnknownIoctl(u32),
    /// The operation does not exist on this node (e.g. ioctl on the OOB node).
    #[error("operation not available on this node: {0}")]
    NotOnThisNode(&'static str),
    /// A non-blocking read found no interrupt record.
    #[error("no interrupt record available")]
    WouldBlock,
    /// The reader was killed while waiting.
    #[error("interrupted")]
    Interrupted,
    /// Unknown inode or file handle (a transport bookkeeping error).
    #[error("no such node or handle")]
    NotFound,
    /// The device keeps no commit mirror (`GPUPM_IOC_MIRROR_INFO`).
    #[error("the device keeps no commit mirror")]
    NoMirror,
}

impl NodeError {
    /// The errno a caller sees for this error.
    pub fn errno(&self) -> i32 {
        match self {
            NodeError::Backend(BackendError::Invalid(_) | BackendError::NotSupported(_)) => {
                libc::EINVAL
            }
            NodeError::Backend(BackendError::Busy(_)) => libc::EBUSY,
            NodeError::Backend(BackendError::Fault(_)) => libc::EIO,
            NodeError::Backend(BackendError::Unavailable(_)) => libc::ENODEV,
            NodeError::AccessDenied { .. } => libc::EACCES,
            NodeError::Malformed(_) => libc::EINVAL,
            NodeError::UnknownIoctl(_) | NodeError::NotOnThisNode(_) => libc::ENOTTY,
            NodeError::WouldBlock => libc::EAGAIN,
            NodeError::Interrupted => libc::EINTR,
            NodeError::NotFound => libc::ENOENT,
            NodeError::NoMirror => libc::ENODEV,
        }
    }
}

/// Shorthand for a malformed-request error.
pub(crate) fn malformed(what: impl Into<String>) -> NodeError {
    NodeError::Malformed(what.into())
}
