//! Every syscall of the guest helper that needs `unsafe`: perf_event_open,
//! the publication device's ioctls (also malformed ones), the tenant
//! node's counter read and delete_module.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use gpupm_uapi::pmu::{Publish, Wanted, GPUPM_PMU_IOC_PUBLISH, GPUPM_PMU_IOC_WANTED};
use gpupm_uapi::tenant::{ReadCounters, TENANT_IOC_READ_COUNTERS};
use nix::errno::Errno;
use perf_event_open_sys::bindings::perf_event_attr;

/// Size of `perf_event_attr` as this binary knows it.
pub fn attr_size() -> u32 {
    u32::try_from(std::mem::size_of::<perf_event_attr>()).expect("attr size fits")
}

/// `perf_event_open(attr, pid, cpu, -1, flags)`.
pub fn perf_open(attr: &perf_event_attr, pid: i32, cpu: i32, flags: u64) -> Result<OwnedFd, Errno> {
    let mut attr = *attr;
    attr.size = clamp_size(attr.size);
    // SAFETY: the kernel reads at most `attr.size` bytes from the pointer,
    // which `clamp_size` keeps within this local struct (smaller sizes are
    // refused before any read), and may write the struct's own size back
    // into it (E2BIG); pid, cpu and flags are plain integers.
    let fd = unsafe { perf_event_open_sys::perf_event_open(&mut attr, pid, cpu, -1, flags) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `attr.size` capped so the kernel never reads past the struct.
pub fn clamp_size(size: u32) -> u32 {
    size.min(attr_size())
}

/// The sample period (or frequency) word of `attr`.
pub fn sample_period(attr: &perf_event_attr) -> u64 {
    // SAFETY: both members of the union are u64, so any bits are a valid
    // `sample_period`.
    unsafe { attr.__bindgen_anon_1.sample_period }
}

/// `config1` of `attr`.
pub fn config1(attr: &perf_event_attr) -> u64 {
    // SAFETY: every member of the union is a u64.
    unsafe { attr.__bindgen_anon_3.config1 }
}

/// `config2` of `attr`.
pub fn config2(attr: &perf_event_attr) -> u64 {
    // SAFETY: every member of the union is a u64.
    unsafe { attr.__bindgen_anon_4.config2 }
}

/// Reads a counter's value.
pub fn read_count(fd: &OwnedFd) -> std::io::Result<u64> {
    let mut file = File::from(fd.try_clone()?);
    let mut buf = [0u8; 8];
    file.read_exact(&mut buf)?;
    Ok(u64::from_ne_bytes(buf))
}

/// Reads a counter's value into `buf` without allocating (the benchmark).
pub fn read_raw(fd: &OwnedFd, buf: &mut [u8; 8]) -> Result<(), Errno> {
    let n = nix::unistd::read(fd.as_raw_fd(), buf)?;
    if n == 8 {
        Ok(())
    } else {
        Err(Errno::EIO)
    }
}

mod raw {
    use super::{
        Publish, ReadCounters, Wanted, GPUPM_PMU_IOC_PUBLISH, GPUPM_PMU_IOC_WANTED,
        TENANT_IOC_READ_COUNTERS,
    };

    nix::ioctl_write_ptr_bad!(publish, GPUPM_PMU_IOC_PUBLISH, Publish);
    nix::ioctl_readwrite_bad!(wanted, GPUPM_PMU_IOC_WANTED, Wanted);
    nix::ioctl_readwrite_bad!(read_counters, TENANT_IOC_READ_COUNTERS, ReadCounters);
}

/// `GPUPM_PMU_IOC_PUBLISH`.
pub fn publish(fd: &File, req: &Publish) -> Result<(), Errno> {
    // SAFETY: `fd` is open for the call; `req` is a live `#[repr(C)]` struct
    // of exactly the size the request number encodes.
    unsafe { raw::publish(fd.as_raw_fd(), req) }.map(drop)
}

/// `GPUPM_PMU_IOC_WANTED`.
pub fn wanted(fd: &File, req: &mut Wanted) -> Result<(), Errno> {
    // SAFETY: as for `publish`; the kernel writes back at most the struct's
    // size into the exclusive borrow, and any bytes are a valid `Wanted`.
    unsafe { raw::wanted(fd.as_raw_fd(), req) }.map(drop)
}

/// An ioctl with request `cmd` and a zeroed 16 KiB argument (unknown
/// requests, wrong sizes).
pub fn ioctl_zeroed(fd: &File, cmd: u32) -> Result<(), Errno> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: the argument points at a live 16 KiB buffer, as large as any
    // size an ioctl number can encode (14 bits), so whatever the kernel
    // copies in or out stays inside it.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::c_ulong::from(cmd), buf.as_mut_ptr()) };
    Errno::result(r).map(drop)
}

/// `TENANT_IOC_READ_COUNTERS`.
pub fn read_counters(fd: &File, req: &mut ReadCounters) -> Result<(), Errno> {
    // SAFETY: as for `wanted`, for the tenant node's struct.
    unsafe { raw::read_counters(fd.as_raw_fd(), req) }.map(drop)
}

/// `delete_module(name, O_NONBLOCK)`: what `rmmod` does.
pub fn delete_module(name: &str) -> Result<(), Errno> {
    let name = CString::new(name).map_err(|_| Errno::EINVAL)?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call; the
    // flags are plain integers.
    let r = unsafe { libc::syscall(libc::SYS_delete_module, name.as_ptr(), libc::O_NONBLOCK) };
    Errno::result(r).map(drop)
}
