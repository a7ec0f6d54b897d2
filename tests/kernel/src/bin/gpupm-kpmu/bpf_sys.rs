//! The `bpf(2)` calls of the `nmi-read` check, which neither nix nor libc
//! wrap: creating the two maps, loading the kprobe program, updating and
//! looking up map elements, and attaching the program to a kprobe perf
//! event. Attributes are laid out as `union bpf_attr` has them.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;

/// `BPF_MAP_TYPE_ARRAY`.
pub const MAP_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_PERF_EVENT_ARRAY`.
pub const MAP_PERF_EVENT_ARRAY: u32 = 4;
/// `BPF_PROG_TYPE_KPROBE`.
const PROG_KPROBE: u32 = 2;

/// `union bpf_attr`, as wide as this check needs and zero elsewhere.
type Attr = [u64; 16];

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> Result<libc::c_long, Errno> {
    // SAFETY: `attr` is a live, zero-padded buffer of the size passed, of
    // which the kernel reads at most that many bytes (and writes none for
    // the commands used here); every pointer the callers put in it points
    // to a buffer that outlives the call and is as large as what the
    // kernel reads or writes through it (a key, a value, the program, the
    // licence string, the log).
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of::<Attr>(),
        )
    };
    Errno::result(r)
}

fn fd_of(r: libc::c_long) -> Result<OwnedFd, Errno> {
    let fd = i32::try_from(r).map_err(|_| Errno::EBADF)?;
    // SAFETY: a successful `bpf` map or program command returns a fresh
    // descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `BPF_MAP_CREATE` (key and value sizes in bytes).
pub fn map_create(kind: u32, key: u32, value: u32, entries: u32) -> Result<OwnedFd, Errno> {
    let mut a: Attr = [0; 16];
    a[0] = u64::from(kind) | u64::from(key) << 32;
    a[1] = u64::from(value) | u64::from(entries) << 32;
    fd_of(bpf(BPF_MAP_CREATE, &mut a)?)
}

/// `BPF_MAP_UPDATE_ELEM` of a 4-byte key and a 4-byte value.
pub fn map_update_u32(map: &OwnedFd, key: u32, value: u32) -> Result<(), Errno> {
    let (k, v) = (key, value);
    let mut a: Attr = [0; 16];
    a[0] = u64::try_from(map.as_raw_fd()).map_err(|_| Errno::EBADF)?;
    a[1] = std::ptr::addr_of!(k) as u64;
    a[2] = std::ptr::addr_of!(v) as u64;
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
}

/// `BPF_MAP_LOOKUP_ELEM` of a 4-byte key into `out` (the map's value size).
pub fn map_lookup(map: &OwnedFd, key: u32, out: &mut [u64]) -> Result<(), Errno> {
    let k = key;
    let mut a: Attr = [0; 16];
    a[0] = u64::try_from(map.as_raw_fd()).map_err(|_| Errno::EBADF)?;
    a[1] = std::ptr::addr_of!(k) as u64;
    a[2] = out.as_mut_ptr() as u64;
    // The kernel copies the map's value size into `out`: the caller's
    // slice is that long (the map was created with it).
    bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map(drop)
}

/// `BPF_PROG_LOAD` of a kprobe program (`insns`, 8 bytes each) under the
/// GPL; the verifier's log on failure.
pub fn prog_load_kprobe(insns: &[u64]) -> Result<OwnedFd, String> {
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let load = |log: Option<&mut Vec<u8>>| {
        let mut a: Attr = [0; 16];
        a[0] = u64::from(PROG_KPROBE) | (insns.len() as u64) << 32;
        a[1] = insns.as_ptr() as u64;
        a[2] = license.as_ptr() as u64;
        if let Some(log) = log {
            a[3] = 1 | (log.len() as u64) << 32;
            a[4] = log.as_mut_ptr() as u64;
        }
        bpf(BPF_PROG_LOAD, &mut a)
    };
    match load(None) {
        Ok(r) => fd_of(r).map_err(|e| e.to_string()),
        Err(e) => {
            // Again with the verifier's log, to say why.
            if let Ok(r) = load(Some(&mut log)) {
                drop(fd_of(r));
            }
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(format!(
                "BPF_PROG_LOAD: {e}; verifier: {}",
                String::from_utf8_lossy(&log[..end])
            ))
        }
    }
}

/// Attaches `prog` to the kprobe perf event `event` and enables it.
pub fn attach(event: &OwnedFd, prog: &OwnedFd) -> Result<(), Errno> {
    let prog = u32::try_from(prog.as_raw_fd()).map_err(|_| Errno::EBADF)?;
    // SAFETY: both are open descriptors; SET_BPF takes the program's
    // descriptor as a plain integer and ENABLE takes no argument.
    Errno::result(unsafe { perf_event_open_sys::ioctls::SET_BPF(event.as_raw_fd(), prog) })?;
    // SAFETY: as above.
    Errno::result(unsafe { perf_event_open_sys::ioctls::ENABLE(event.as_raw_fd(), 0) }).map(drop)
}
