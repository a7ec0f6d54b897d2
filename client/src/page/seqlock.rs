//! Both halves of the page's sequence lock, over a page's words as
//! [`PageWords`]: the reader every client uses and the writer `gpupmd`
//! uses, so that the protocol exists once and the torn-read test runs the
//! real code on both sides.
//!
//! # Ordering (docs/pages.md has the full argument)
//! Writer: `seq ← s+1` (relaxed), release fence, data words (relaxed),
//! `seq ← s+2` (release). Reader: `s1 ← seq` (relaxed), acquire fence,
//! retry if odd; data words (relaxed); acquire fence; `s2 ← seq`
//! (relaxed); consistent iff `s1 == s2`.
//!
//! - If `s1` was written by a writer's final release store, the acquire
//!   fence after it synchronises with that store, so every data word the
//!   reader loads is that write's value or a later one.
//! - If any loaded word is a later write's value, that word was stored
//!   after the later writer's release fence and loaded before the reader's
//!   second acquire fence, so the two fences synchronise: the later
//!   writer's odd `seq` store happens before the reader's second load of
//!   `seq`, which therefore returns that odd value or a newer one — never
//!   `s1`. A torn copy is always detected.
//!
//! Every access to the page is a 64-bit atomic: a plain (or volatile) read
//! racing with the other process's store would be a data race, undefined
//! behaviour under the Rust and C11 memory models however the result is
//! later checked. Relaxed 64-bit atomic loads compile to plain loads on
//! x86-64 and AArch64 and are the loads Rust guarantees on read-only
//! mappings (`core::sync::atomic`, "Atomic accesses to read-only memory"),
//! which is why the reader's acquire ordering comes from fences rather
//! than from acquire loads.

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use gpupm_uapi::page::{PAGE_BUSY_MS, PAGE_DATA_OFFSET, PAGE_READ_SPINS, PAGE_SEQ_OFFSET};
use zerocopy::{FromBytes, Immutable, IntoBytes};

use super::mapping::PageWords;
use crate::patience::Patience;

/// Word index of the sequence counter.
const SEQ: usize = PAGE_SEQ_OFFSET / 8;
/// Word index of the first protected word.
const DATA: usize = PAGE_DATA_OFFSET / 8;

/// The page stayed locked (odd) or kept changing for [`PAGE_BUSY_MS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the page kept changing or stayed locked for {PAGE_BUSY_MS} ms (its writer may have died mid-update)")]
pub struct Busy;

/// Words `first..first + out.len() / 8` of the protected data, copied
/// consistently into `out` (whose size is a multiple of 8 bytes, checked
/// by the callers' types). Returns the even sequence value the copy
/// belongs to.
pub fn read<T: FromBytes + IntoBytes>(
    page: &PageWords,
    first: usize,
    out: &mut T,
) -> Result<u64, Busy> {
    let dst = out.as_mut_bytes();
    let words = page
        .get(DATA + first..DATA + first + dst.len() / 8)
        .ok_or(Busy)?;
    let mut patience = Patience::new(
        PAGE_READ_SPINS,
        Duration::from_millis(u64::from(PAGE_BUSY_MS)),
    );
    loop {
        let s1 = page[SEQ].load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if s1 & 1 == 0 {
            for (d, w) in dst.chunks_exact_mut(8).zip(words) {
                d.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
            }
            fence(Ordering::Acquire);
            if page[SEQ].load(Ordering::Relaxed) == s1 {
                return Ok(s1);
            }
        }
        if !patience.wait() {
            return Err(Busy);
        }
    }
}

/// The current sequence value (odd while a write is in progress).
pub fn seq(page: &PageWords) -> u64 {
    page[SEQ].load(Ordering::Relaxed)
}

/// Writes `data` into the protected words under the lock. The page has
/// one writer at a time (the caller's lock); a previous writer that died
/// mid-update left `seq` odd, and the next write moves past it.
pub fn write<T: IntoBytes + Immutable>(page: &PageWords, first: usize, data: &T) -> u64 {
    let src = data.as_bytes();
    let Some(words) = page.get(DATA + first..DATA + first + src.len() / 8) else {
        return seq(page);
    };
    let s = page[SEQ].load(Ordering::Relaxed);
    let odd = if s & 1 == 0 { s + 1 } else { s + 2 };
    page[SEQ].store(odd, Ordering::Relaxed);
    fence(Ordering::Release);
    for (w, b) in words.iter().zip(src.chunks_exact(8)) {
        let mut v = [0u8; 8];
        v.copy_from_slice(b);
        w.store(u64::from_ne_bytes(v), Ordering::Relaxed);
    }
    page[SEQ].store(odd + 1, Ordering::Release);
    odd + 1
}

/// Writes `bytes` at byte `offset` of the page outside the lock: only for
/// the immutable header of a page no reader has yet.
pub fn write_unlocked(page: &PageWords, offset: usize, bytes: &[u8]) {
    let first = offset / 8;
    for (w, b) in page.iter().skip(first).zip(bytes.chunks_exact(8)) {
        let mut v = [0u8; 8];
        v.copy_from_slice(b);
        w.store(u64::from_ne_bytes(v), Ordering::Relaxed);
    }
}

/// `out.len()` bytes from byte `offset`, word by word, outside the lock:
/// for the immutable header.
pub fn read_unlocked(page: &PageWords, offset: usize, out: &mut [u8]) {
    for (d, w) in out.chunks_exact_mut(8).zip(page.iter().skip(offset / 8)) {
        d.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use gpupm_uapi::page::{PageCounters, PAGE_SIZE};
    use zerocopy::FromZeros;

    use super::*;

    fn page() -> Box<PageWords> {
        Box::new(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    #[test]
    fn a_write_is_read_back_whole_and_moves_seq_by_two() {
        let p = page();
        let mut c = PageCounters::new_zeroed();
        c.generation = 7;
        c.totals[5] = 99;
        assert_eq!(write(&p, 0, &c), 2);
        let mut back = PageCounters::new_zeroed();
        assert_eq!(read(&p, 0, &mut back), Ok(2));
        assert_eq!(back, c);
        assert_eq!(write(&p, 0, &c), 4);
        assert_eq!(PAGE_SIZE / 8, p.len());
    }

    /// A writer preempted between its two `seq` stores on a loaded host
    /// (the CI failure this guards against: 65,536 spins ran out while the
    /// daemon's writer waited for a core) is waited out, not reported busy.
    #[test]
    fn a_reader_waits_out_a_writer_preempted_mid_update() {
        let p = std::sync::Arc::new(page());
        p[SEQ].store(5, Ordering::Relaxed);
        let (started_tx, started) = std::sync::mpsc::channel();
        let reader = {
            let p = std::sync::Arc::clone(&p);
            std::thread::spawn(move || {
                started_tx.send(()).unwrap();
                let mut back = PageCounters::new_zeroed();
                read(&p, 0, &mut back).map(|seq| (seq, back.generation))
            })
        };
        started.recv().unwrap();
        // The preemption being modelled: far longer than any spin budget.
        std::thread::sleep(Duration::from_millis(200));
        let mut c = PageCounters::new_zeroed();
        c.generation = 3;
        assert_eq!(write(&p, 0, &c), 8);
        assert_eq!(reader.join().unwrap(), Ok((8, 3)));
    }

    #[test]
    fn an_odd_seq_left_by_a_dead_writer_reads_busy_until_the_next_write() {
        let p = page();
        p[SEQ].store(9, Ordering::Relaxed);
        let mut back = PageCounters::new_zeroed();
        assert_eq!(read(&p, 0, &mut back), Err(Busy));
        let c = PageCounters::new_zeroed();
        assert_eq!(write(&p, 0, &c), 12);
        assert_eq!(read(&p, 0, &mut back), Ok(12));
    }
}
