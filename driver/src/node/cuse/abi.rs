//! The kernel's FUSE wire format, as much of it as a CUSE server sees
//! (`include/uapi/linux/fuse.h`, protocol 7.38; every layout has been
//! stable since 7.23 and the ones CUSE uses since 7.11).
//!
//! Every request starts with an [`InHeader`] followed by the opcode's
//! argument struct and, for `WRITE` and `IOCTL`, the payload; every reply
//! is an [`OutHeader`] followed by the opcode's reply struct and data. The
//! structs are the kernel's, field for field, with the sizes
//! `linux/fuse.h` gives (asserted below). Requests come from the kernel,
//! but their payloads from whoever opened the device, so they are decoded
//! with [`split`], which refuses a short or misaligned buffer instead of
//! panicking.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Ref};

/// `FUSE_KERNEL_VERSION`: the protocol's major version.
pub const KERNEL_VERSION: u32 = 7;
/// The minor version whose layouts this module defines; the init reply
/// offers the lower of this and the kernel's.
pub const KERNEL_MINOR: u32 = 38;
/// The oldest minor version with CUSE, restricted ioctls and poll.
pub const OLDEST_MINOR: u32 = 11;
/// `FUSE_MIN_READ_BUFFER`: the smallest buffer the kernel reads requests into.
pub const MIN_READ_BUFFER: usize = 8192;
/// `CUSE_INIT_INFO_MAX`: most bytes of device info after the init reply.
pub const INIT_INFO_MAX: usize = 4096;
/// `FUSE_INT_REQ_BIT`: set in the unique id of an interrupt request.
pub const INT_REQ_BIT: u64 = 1;

/// Request opcodes (`enum fuse_opcode`) a CUSE server receives.
pub mod opcode {
    /// Open the device.
    pub const OPEN: u32 = 14;
    /// `read()`.
    pub const READ: u32 = 15;
    /// `write()`.
    pub const WRITE: u32 = 16;
    /// Last close of an open file.
    pub const RELEASE: u32 = 18;
    /// `fsync()` (the character device has none; answered anyway).
    pub const FSYNC: u32 = 20;
    /// `close()` of one descriptor (the character device has none).
    pub const FLUSH: u32 = 25;
    /// A caller waiting on an earlier request took a signal.
    pub const INTERRUPT: u32 = 36;
    /// `ioctl()`.
    pub const IOCTL: u32 = 39;
    /// `poll()`.
    pub const POLL: u32 = 40;
    /// The first request on `/dev/cuse`.
    pub const CUSE_INIT: u32 = 4096;
}

/// `FUSE_NOTIFY_POLL`: the notification code that wakes a poller.
pub const NOTIFY_POLL: i32 = 1;
/// `CUSE_UNRESTRICTED_IOCTL`: the init flag this server leaves clear.
pub const CUSE_UNRESTRICTED_IOCTL: u32 = 1 << 0;
/// `FUSE_IOCTL_UNRESTRICTED` in [`IoctlIn::flags`].
pub const IOCTL_UNRESTRICTED: u32 = 1 << 1;
/// `FUSE_POLL_SCHEDULE_NOTIFY` in [`PollIn::flags`].
pub const POLL_SCHEDULE_NOTIFY: u32 = 1 << 0;

/// `struct fuse_in_header`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct InHeader {
    /// Bytes of the whole request.
    pub len: u32,
    /// One of [`opcode`].
    pub opcode: u32,
    /// Request id the reply names.
    pub unique: u64,
    /// Always 0 on CUSE.
    pub nodeid: u64,
    /// Caller's fsuid (in the server's user namespace).
    pub uid: u32,
    /// Caller's fsgid.
    pub gid: u32,
    /// Caller's thread id.
    pub pid: u32,
    /// Extension length (never negotiated by CUSE).
    pub total_extlen: u16,
    /// Padding.
    pub padding: u16,
}
const _: () = assert!(core::mem::size_of::<InHeader>() == 40);

/// `struct fuse_out_header`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct OutHeader {
    /// Bytes of the whole reply.
    pub len: u32,
    /// 0, `-errno`, or a notification code when `unique` is 0.
    pub error: i32,
    /// The request's `unique`.
    pub unique: u64,
}
const _: () = assert!(core::mem::size_of::<OutHeader>() == 16);

/// `struct cuse_init_in`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct CuseInitIn {
    /// Kernel's major version.
    pub major: u32,
    /// Kernel's minor version.
    pub minor: u32,
    /// Unused.
    pub unused: u32,
    /// Flags the kernel allows (`CUSE_UNRESTRICTED_IOCTL`).
    pub flags: u32,
}
const _: () = assert!(core::mem::size_of::<CuseInitIn>() == 16);

/// `struct cuse_init_out`, followed by `KEY=VALUE\0` device info.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct CuseInitOut {
    /// [`KERNEL_VERSION`].
    pub major: u32,
    /// The minor version both sides speak.
    pub minor: u32,
    /// Unused.
    pub unused: u32,
    /// Flags the server wants.
    pub flags: u32,
    /// Largest `READ` (at least 4096).
    pub max_read: u32,
    /// Largest `WRITE` (at least 4096).
    pub max_write: u32,
    /// Character-device major (0: allocate one).
    pub dev_major: u32,
    /// Character-device minor.
    pub dev_minor: u32,
    /// Spare.
    pub spare: [u32; 10],
}
const _: () = assert!(core::mem::size_of::<CuseInitOut>() == 72);

/// `struct fuse_open_in`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct OpenIn {
    /// `open(2)` flags.
    pub flags: u32,
    /// `FUSE_OPEN_*` flags.
    pub open_flags: u32,
}
const _: () = assert!(core::mem::size_of::<OpenIn>() == 8);

/// `struct fuse_open_out`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct OpenOut {
    /// The file handle later requests carry.
    pub fh: u64,
    /// `FOPEN_*` flags.
    pub open_flags: u32,
    /// Padding.
    pub padding: u32,
}
const _: () = assert!(core::mem::size_of::<OpenOut>() == 16);

/// `struct fuse_read_in`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadIn {
    /// File handle.
    pub fh: u64,
    /// Always 0 on CUSE: a character device has no file position.
    pub offset: u64,
    /// Bytes asked for.
    pub size: u32,
    /// `FUSE_READ_*` flags.
    pub read_flags: u32,
    /// Lock owner.
    pub lock_owner: u64,
    /// The file's `open(2)` flags (`O_NONBLOCK`).
    pub flags: u32,
    /// Padding.
    pub padding: u32,
}
const _: () = assert!(core::mem::size_of::<ReadIn>() == 40);

/// `struct fuse_write_in`, followed by the data.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct WriteIn {
    /// File handle.
    pub fh: u64,
    /// Always 0 on CUSE.
    pub offset: u64,
    /// Bytes of data.
    pub size: u32,
    /// `FUSE_WRITE_*` flags.
    pub write_flags: u32,
    /// Lock owner.
    pub lock_owner: u64,
    /// The file's `open(2)` flags.
    pub flags: u32,
    /// Padding.
    pub padding: u32,
}
const _: () = assert!(core::mem::size_of::<WriteIn>() == 40);

/// `struct fuse_release_in`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReleaseIn {
    /// File handle.
    pub fh: u64,
    /// The file's `open(2)` flags.
    pub flags: u32,
    /// `FUSE_RELEASE_*` flags.
    pub release_flags: u32,
    /// Lock owner.
    pub lock_owner: u64,
}
const _: () = assert!(core::mem::size_of::<ReleaseIn>() == 24);

/// `struct fuse_interrupt_in`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct InterruptIn {
    /// `unique` of the interrupted request.
    pub unique: u64,
}
const _: () = assert!(core::mem::size_of::<InterruptIn>() == 8);

/// `struct fuse_ioctl_in`, followed by `in_size` bytes of argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct IoctlIn {
    /// File handle.
    pub fh: u64,
    /// `FUSE_IOCTL_*` flags.
    pub flags: u32,
    /// Request number.
    pub cmd: u32,
    /// The caller's argument pointer (unused in restricted mode).
    pub arg: u64,
    /// Bytes of argument copied in.
    pub in_size: u32,
    /// Most bytes the kernel copies back.
    pub out_size: u32,
}
const _: () = assert!(core::mem::size_of::<IoctlIn>() == 32);

/// `struct fuse_ioctl_out`, followed by the bytes to copy back.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct IoctlOut {
    /// The ioctl's return value.
    pub result: i32,
    /// `FUSE_IOCTL_*` flags (none in restricted mode).
    pub flags: u32,
    /// Input iovecs of a retry (none).
    pub in_iovs: u32,
    /// Output iovecs of a retry (none).
    pub out_iovs: u32,
}
const _: () = assert!(core::mem::size_of::<IoctlOut>() == 16);

/// `struct fuse_poll_in`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PollIn {
    /// File handle.
    pub fh: u64,
    /// Kernel handle to name in a wake-up notification.
    pub kh: u64,
    /// [`POLL_SCHEDULE_NOTIFY`].
    pub flags: u32,
    /// Events asked for.
    pub events: u32,
}
const _: () = assert!(core::mem::size_of::<PollIn>() == 24);

/// `struct fuse_poll_out`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PollOut {
    /// Ready events.
    pub revents: u32,
    /// Padding.
    pub padding: u32,
}
const _: () = assert!(core::mem::size_of::<PollOut>() == 8);

/// `struct fuse_notify_poll_wakeup_out`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NotifyPollWakeup {
    /// The poller's kernel handle.
    pub kh: u64,
}
const _: () = assert!(core::mem::size_of::<NotifyPollWakeup>() == 8);

/// Why request bytes did not decode.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {len} bytes do not hold a {size}-byte argument")]
pub struct ShortRequest {
    /// The struct expected.
    pub what: &'static str,
    /// Bytes available.
    pub len: usize,
    /// Bytes needed.
    pub size: usize,
}

/// Splits a `T` off the front of `bytes`, without copying: an error when
/// `bytes` is too short or not aligned for `T` (the serving loop's buffer
/// is 8-byte aligned and every argument starts at a multiple of 8).
pub fn split<T: FromBytes + KnownLayout + Immutable>(
    bytes: &[u8],
) -> Result<(&T, &[u8]), ShortRequest> {
    match Ref::<&[u8], T>::from_prefix(bytes) {
        Ok((value, rest)) => Ok((Ref::into_ref(value), rest)),
        Err(_) => Err(ShortRequest {
            what: core::any::type_name::<T>(),
            len: bytes.len(),
            size: core::mem::size_of::<T>(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use zerocopy::FromZeros;

    use super::*;

    #[test]
    fn split_refuses_short_and_misaligned_buffers() {
        let words = [0u64; 8];
        let bytes = words.as_bytes();
        let (header, rest) = split::<InHeader>(bytes).expect("aligned, long enough");
        assert_eq!((header.len, rest.len()), (0, 24));
        assert!(split::<InHeader>(&bytes[..39]).is_err());
        assert!(split::<InHeader>(&bytes[4..]).is_err());
        assert!(split::<OpenIn>(&[]).is_err());
    }

    #[test]
    fn a_request_round_trips_through_the_header() {
        let mut header = InHeader::new_zeroed();
        header.opcode = opcode::IOCTL;
        header.unique = 42;
        let mut buf = [0u64; 5];
        buf.as_mut_bytes().copy_from_slice(header.as_bytes());
        let (back, _) = split::<InHeader>(buf.as_bytes()).expect("decodes");
        assert_eq!((back.opcode, back.unique), (opcode::IOCTL, 42));
    }
}
