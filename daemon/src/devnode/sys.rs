//! The ioctls of the device node and of the tenant node: the only `unsafe`
//! of the daemon. Each wrapper takes a borrowed descriptor and a reference
//! to an argument struct whose size is the size encoded in the request
//! number, so the kernel reads and writes exactly that struct.

use std::os::fd::{AsRawFd, BorrowedFd};

use gpupm_uapi::ioctl::{
    Advance, Identity, LedgerQuery, RegBatch, Reset, GPUPM_IOC_ADVANCE, GPUPM_IOC_IDENTITY,
    GPUPM_IOC_LEDGER, GPUPM_IOC_REG_BATCH, GPUPM_IOC_RESET,
};
use gpupm_uapi::tenant::{
    EventInfo, ListContexts, OpenStream, ReadCounters, ReadRates, Whoami, TENANT_IOC_EVENT_INFO,
    TENANT_IOC_LIST_CONTEXTS, TENANT_IOC_OPEN_STREAM, TENANT_IOC_READ_COUNTERS,
    TENANT_IOC_READ_RATES, TENANT_IOC_WHOAMI,
};

mod raw {
    use super::{
        Advance, EventInfo, Identity, LedgerQuery, ListContexts, OpenStream, ReadCounters,
        ReadRates, RegBatch, Reset, Whoami, GPUPM_IOC_ADVANCE, GPUPM_IOC_IDENTITY,
        GPUPM_IOC_LEDGER, GPUPM_IOC_REG_BATCH, GPUPM_IOC_RESET, TENANT_IOC_EVENT_INFO,
        TENANT_IOC_LIST_CONTEXTS, TENANT_IOC_OPEN_STREAM, TENANT_IOC_READ_COUNTERS,
        TENANT_IOC_READ_RATES, TENANT_IOC_WHOAMI,
    };

    nix::ioctl_readwrite_bad!(identity, GPUPM_IOC_IDENTITY, Identity);
    nix::ioctl_readwrite_bad!(reg_batch, GPUPM_IOC_REG_BATCH, RegBatch);
    nix::ioctl_readwrite_bad!(advance, GPUPM_IOC_ADVANCE, Advance);
    nix::ioctl_readwrite_bad!(ledger, GPUPM_IOC_LEDGER, LedgerQuery);
    nix::ioctl_write_ptr_bad!(reset, GPUPM_IOC_RESET, Reset);
    nix::ioctl_readwrite_bad!(whoami, TENANT_IOC_WHOAMI, Whoami);
    nix::ioctl_readwrite_bad!(list_contexts, TENANT_IOC_LIST_CONTEXTS, ListContexts);
    nix::ioctl_readwrite_bad!(read_counters, TENANT_IOC_READ_COUNTERS, ReadCounters);
    nix::ioctl_readwrite_bad!(read_rates, TENANT_IOC_READ_RATES, ReadRates);
    nix::ioctl_write_ptr_bad!(open_stream, TENANT_IOC_OPEN_STREAM, OpenStream);
    nix::ioctl_readwrite_bad!(event_info, TENANT_IOC_EVENT_INFO, EventInfo);
}

/// Size encoded in a Linux ioctl request number.
const fn ioc_size(cmd: u32) -> usize {
    ((cmd >> 16) & 0x3fff) as usize
}

macro_rules! safe_ioctl {
    ($( $(#[$m:meta])* $name:ident($cmd:ident, $ty:ty, $argty:ty); )*) => {
        $(
            const _: () = assert!(ioc_size($cmd) == core::mem::size_of::<$ty>());
            $(#[$m])*
            pub fn $name(fd: BorrowedFd<'_>, arg: $argty) -> nix::Result<i32> {
                let fd = fd.as_raw_fd();
                // SAFETY: `fd` is borrowed, so it stays open for the call;
                // the argument is a live, exclusively or shared borrowed
                // `#[repr(C)]` struct whose size equals `_IOC_SIZE(cmd)`
                // (asserted above), which is all the kernel copies in or
                // out for this restricted-mode ioctl; every bit pattern is
                // a valid value of the struct (zerocopy `FromBytes`).
                unsafe { raw::$name(fd, arg) }
            }
        )*
    };
}

safe_ioctl! {
    /// `GPUPM_IOC_IDENTITY`.
    identity(GPUPM_IOC_IDENTITY, Identity, &mut Identity);
    /// `GPUPM_IOC_REG_BATCH`.
    reg_batch(GPUPM_IOC_REG_BATCH, RegBatch, &mut RegBatch);
    /// `GPUPM_IOC_ADVANCE`.
    advance(GPUPM_IOC_ADVANCE, Advance, &mut Advance);
    /// `GPUPM_IOC_LEDGER`.
    ledger(GPUPM_IOC_LEDGER, LedgerQuery, &mut LedgerQuery);
    /// `GPUPM_IOC_RESET`.
    reset(GPUPM_IOC_RESET, Reset, &Reset);
    /// `TENANT_IOC_WHOAMI`.
    whoami(TENANT_IOC_WHOAMI, Whoami, &mut Whoami);
    /// `TENANT_IOC_LIST_CONTEXTS`.
    list_contexts(TENANT_IOC_LIST_CONTEXTS, ListContexts, &mut ListContexts);
    /// `TENANT_IOC_READ_COUNTERS`.
    read_counters(TENANT_IOC_READ_COUNTERS, ReadCounters, &mut ReadCounters);
    /// `TENANT_IOC_READ_RATES`.
    read_rates(TENANT_IOC_READ_RATES, ReadRates, &mut ReadRates);
    /// `TENANT_IOC_OPEN_STREAM`.
    open_stream(TENANT_IOC_OPEN_STREAM, OpenStream, &OpenStream);
    /// `TENANT_IOC_EVENT_INFO`.
    event_info(TENANT_IOC_EVENT_INFO, EventInfo, &mut EventInfo);
}
