//! The perf software-counter baseline of the node benchmarks: a
//! `PERF_COUNT_SW_TASK_CLOCK` read is the cheapest system call that returns
//! a counter.

use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;

use perf_event_open_sys as sys;

/// Opens `PERF_COUNT_SW_TASK_CLOCK` for this thread, counting user time.
pub fn task_clock() -> io::Result<File> {
    let mut attr = sys::bindings::perf_event_attr {
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        size: u32::try_from(std::mem::size_of::<sys::bindings::perf_event_attr>())
            .expect("attr size fits"),
        config: u64::from(sys::bindings::PERF_COUNT_SW_TASK_CLOCK),
        ..Default::default()
    };
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    // SAFETY: `attr` is a fully initialised perf_event_attr whose `size`
    // field is its own size; it asks for a software counter on the calling
    // thread (pid 0, any cpu, no group), which has no side effects.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            0,
            -1,
            -1,
            libc::c_ulong::from(sys::bindings::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor returned by perf_event_open that
    // nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}
