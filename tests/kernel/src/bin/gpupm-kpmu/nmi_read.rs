//! A reader inside the write section: a BPF program on a kprobe at the
//! module's `gpupm_apply_copy` (called twice per publication, inside the
//! latch's write section, on the publishing CPU) reads a gpupm event with
//! `bpf_perf_event_read_value`, which calls the PMU's `read` right there,
//! with interrupts off, as an NMI that interrupted the writer would. The
//! publications run pinned to the PMU's CPU (the event's own CPU, where
//! the read happens), in a thread the check waits for with a deadline: a
//! reader that waited for the writer would never return (the CPU spins
//! with interrupts off). The program keeps, per hit, the value read; the
//! first hit of a publication must read the old value (the copy not being
//! written), the second the new one, and no read may fail.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::Duration;

use gpupm_uapi::pmu::scope;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use perf_event_open_sys::bindings::{
    perf_event_attr, perf_event_attr__bindgen_ty_1, perf_event_attr__bindgen_ty_3,
    PERF_FLAG_FD_CLOEXEC, PERF_SAMPLE_RAW,
};

use crate::abi::{entry, request, EVENT};
use crate::bpf_sys::{self, MAP_ARRAY, MAP_PERF_EVENT_ARRAY};
use crate::pmu::{count, Pmu, SYSFS};
use crate::sys;

const VM: u32 = 61;
/// What each publication adds to the VM's total.
const STEP: u64 = 1_000;
/// How long a publication may take before the check calls it hung.
const HUNG: Duration = Duration::from_secs(20);
/// The kprobe's function: the module's write section, once per copy.
const PROBED: &str = "gpupm_apply_copy";
/// The results map's value: hits, last failed read's code, the value read
/// at even hits (first of a publication), at odd hits (second).
const RESULT_WORDS: usize = 4;
const RESULT_BYTES: u32 = 32;
const _: () = assert!(RESULT_BYTES as usize == 8 * RESULT_WORDS);

/// Program registers and the instruction encoding (`struct bpf_insn`).
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R7: u8 = 7;
const FP: u8 = 10;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | u64::from(dst | src << 4) << 8
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// `BPF_LD_IMM64` of a map descriptor: two instruction slots.
fn ld_map_fd(dst: u8, fd: i32) -> [u64; 2] {
    [insn(0x18, dst, 1, 0, fd), 0]
}

/// The program: `bpf_perf_event_read_value(events, BPF_F_CURRENT_CPU)`,
/// then in `results[0]`: hits += 1 (atomic, fetching the old count), the
/// code if it failed, and the value read into word 2 + (old count & 1).
fn program(events: i32, results: i32) -> Vec<u64> {
    let mut p = Vec::new();
    p.extend(ld_map_fd(R1, events));
    p.push(insn(0xb4, R2, 0, 0, -1)); // w2 = BPF_F_CURRENT_CPU
    p.push(insn(0xbf, R3, FP, 0, 0)); // r3 = fp
    p.push(insn(0x07, R3, 0, 0, -24)); // r3 -= 24: struct bpf_perf_event_value
    p.push(insn(0xb7, R4, 0, 0, 24)); // r4 = its size
    p.push(insn(0x85, 0, 0, 0, 55)); // call bpf_perf_event_read_value
    p.push(insn(0xbf, R7, R0, 0, 0)); // r7 = its code
    p.push(insn(0x62, FP, 0, -28, 0)); // key = 0
    p.extend(ld_map_fd(R1, results));
    p.push(insn(0xbf, R2, FP, 0, 0));
    p.push(insn(0x07, R2, 0, 0, -28)); // r2 = &key
    p.push(insn(0x85, 0, 0, 0, 1)); // call bpf_map_lookup_elem
    p.push(insn(0x15, R0, 0, 9, 0)); // if r0 == 0 goto out
    p.push(insn(0xb7, R1, 0, 0, 1));
    p.push(insn(0xdb, R0, R1, 0, 1)); // r1 = atomic_fetch_add(hits, 1)
    p.push(insn(0x15, R7, 0, 1, 0)); // if r7 == 0 skip the next
    p.push(insn(0x7b, R0, R7, 8, 0)); // results[1] = code
    p.push(insn(0x57, R1, 0, 0, 1)); // r1 &= 1
    p.push(insn(0x67, R1, 0, 0, 3)); // r1 <<= 3
    p.push(insn(0x0f, R0, R1, 0, 0)); // r0 += r1
    p.push(insn(0x79, R2, FP, -24, 0)); // r2 = value.counter
    p.push(insn(0x7b, R0, R2, 16, 0)); // results[2 + parity] = r2
    p.push(insn(0xb7, R0, 0, 0, 0)); // out: return 0
    p.push(insn(0x95, 0, 0, 0, 0));
    p
}

fn kprobe_type() -> Result<u32, String> {
    let path = "/sys/bus/event_source/devices/kprobe/type";
    std::fs::read_to_string(path)
        .map_err(|e| format!("{path}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{path}: {e}"))
}

/// `rounds` publications with the reader in their write sections.
pub fn run(rounds: u64) -> Result<(), String> {
    let pmu = Pmu::find()?;
    let cpu = u32::try_from(pmu.cpu).map_err(|_| "cpumask")?;
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/gpupm_pmu")
        .map_err(|e| format!("/dev/gpupm_pmu: {e}"))?;
    let event = pmu.open(&pmu.attr(EVENT, VM, 0)?)?;
    let base = 40_000;
    sys::publish(&dev, &request(&[entry(scope::VM, VM, 0, base)]))
        .map_err(|e| format!("publish: {e}"))?;

    let events = bpf_sys::map_create(MAP_PERF_EVENT_ARRAY, 4, 4, cpu + 1)
        .map_err(|e| format!("perf event array: {e}"))?;
    let results = bpf_sys::map_create(MAP_ARRAY, 4, RESULT_BYTES, 1)
        .map_err(|e| format!("results map: {e}"))?;
    let event_fd = u32::try_from(event.as_raw_fd()).map_err(|_| "fd")?;
    bpf_sys::map_update_u32(&events, cpu, event_fd)
        .map_err(|e| format!("the gpupm event into the perf event array: {e}"))?;
    let prog = bpf_sys::prog_load_kprobe(&program(events.as_raw_fd(), results.as_raw_fd()))?;
    let func = CString::new(PROBED).map_err(|e| e.to_string())?;
    let attr = perf_event_attr {
        type_: kprobe_type()?,
        size: sys::attr_size(),
        sample_type: u64::from(PERF_SAMPLE_RAW),
        __bindgen_anon_1: perf_event_attr__bindgen_ty_1 { sample_period: 1 },
        __bindgen_anon_3: perf_event_attr__bindgen_ty_3 {
            kprobe_func: func.as_ptr() as u64,
        },
        ..Default::default()
    };
    let probe = sys::perf_open(&attr, -1, 0, u64::from(PERF_FLAG_FD_CLOEXEC))
        .map_err(|e| format!("kprobe on {PROBED}: {e}"))?;
    bpf_sys::attach(&probe, &prog).map_err(|e| format!("attach the program: {e}"))?;

    // The publisher, on the event's CPU, publishes when told to; the main
    // thread waits for each publication, then checks what the reads saw.
    let (go_tx, go_rx) = mpsc::channel::<u64>();
    let (done_tx, done_rx) = mpsc::channel();
    let publisher = std::thread::spawn(move || -> Result<(), String> {
        let mut set = CpuSet::new();
        set.set(cpu as usize).map_err(|e| e.to_string())?;
        sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("pin: {e}"))?;
        while let Ok(k) = go_rx.recv() {
            sys::publish(&dev, &request(&[entry(scope::VM, VM, 0, base + k * STEP)]))
                .map_err(|e| format!("publication {k}: {e}"))?;
            if done_tx.send(k).is_err() {
                break;
            }
        }
        Ok(())
    });
    let mut words = [0u64; RESULT_WORDS];
    for k in 1..=rounds {
        go_tx
            .send(k)
            .map_err(|_| "the publisher stopped".to_string())?;
        match done_rx.recv_timeout(HUNG) {
            Ok(got) if got == k => {}
            Ok(got) => return Err(format!("publication {got} reported before {k}")),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The thread is stuck in the kernel: the check cannot end it.
                return Err(format!(
                    "publication {k} did not return within {HUNG:?}: the read inside the \
                     write section waited for the writer"
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        bpf_sys::map_lookup(&results, 0, &mut words).map_err(|e| format!("results: {e}"))?;
        let [hits, code, old, new] = words;
        let want = (2 * k, 0, (k - 1) * STEP, k * STEP);
        if (hits, code, old, new) != want {
            return Err(format!(
                "after publication {k}: (hits, failed read's code, value at the first hit, \
                 at the second) = {:?}, expected {want:?}",
                (hits, code as i64, old, new)
            ));
        }
        let read = count(&event)?;
        if read != k * STEP {
            return Err(format!(
                "after publication {k}: read() gives {read}, expected {}",
                k * STEP
            ));
        }
    }
    drop(go_tx);
    publisher
        .join()
        .map_err(|_| "the publisher panicked".to_string())??;
    let stale = std::fs::read_to_string(format!("{SYSFS}/stale_reads"))
        .map_err(|e| format!("stale_reads: {e}"))?;
    println!("@@gpupm metric nmi_read_hits={}", words[0]);
    println!("@@gpupm metric nmi_read_stale_reads={}", stale.trim());
    Ok(())
}
