//! Torn reads: one writer rewrites a page as fast as it can (the daemon's
//! writer, `WritablePage::publish`) while reader threads in this process
//! (`MappedPage`) and a separate process (the C header's static inline
//! reader) read it for at least 10 s and check an invariant that any torn
//! copy breaks: every word of an update is derived from the update's
//! number. No consistent read may break it. A control reader in the same
//! C process, copying the same words without the sequence check, must
//! break it — which shows the invariant catches tearing at this rate.

use std::fs::OpenOptions;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_client::page::{MappedPage, WritablePage};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::page::{
    page_flags, page_state, PageData, PageHeader, PAGE_MAGIC, PAGE_SIZE, PAGE_VERSION,
};
use gpupm_uapi::tenant::scope;
use zerocopy::FromZeros;

/// How long the consistent readers read.
const READ_FOR: Duration = Duration::from_secs(10);
/// How long the control reader reads.
const CONTROL_FOR: Duration = Duration::from_secs(2);
/// Mixes event ids into the rate deltas.
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// The data of update `k`: every word a function of `k`.
fn update(k: u64) -> PageData {
    let mut d = PageData::new_zeroed();
    let c = &mut d.counters;
    c.generation = 7;
    c.state = page_state::ACTIVE;
    c.flags = page_flags::RATE | page_flags::SEALED | page_flags::SEALED_RATE;
    c.commit_seq = k;
    c.cycle = k.wrapping_mul(3);
    c.clock_khz = 1_980_000;
    for (i, t) in c.totals.iter_mut().enumerate() {
        *t = k.wrapping_mul(i as u64 + 1);
    }
    d.rate.start_cycle = k;
    d.rate.end_cycle = k + 1;
    for (i, v) in d.rate.deltas.iter_mut().enumerate() {
        *v = k ^ (i as u64).wrapping_mul(MIX);
    }
    let low = k.to_le_bytes()[0];
    d.sealed.payload.fill(low);
    d.sealed_rate.payload.fill(low.wrapping_add(1));
    d
}

/// The reader in C: `torn_reader PAGE SECONDS MODE` with MODE `locked`
/// (the header's `gpupm_page_read`) or `unlocked` (the same words without
/// the sequence check); prints `reads=N violations=V busy=B`.
const C_READER: &str = r#"#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <gpupm/gpupm_uapi.h>

static int broken(const struct gpupm_page_data *d)
{
	uint64_t k = d->counters.commit_seq;
	if (d->counters.cycle != k * 3 || d->rate.start_cycle != k || d->rate.end_cycle != k + 1)
		return 1;
	for (int i = 0; i < GPUPM_MAX_EVENTS; i++)
		if (d->counters.totals[i] != k * (uint64_t)(i + 1) ||
		    d->rate.deltas[i] != (k ^ ((uint64_t)i * 0x9e3779b97f4a7c15ULL)))
			return 1;
	for (size_t i = 0; i < sizeof(d->sealed.payload); i++)
		if (d->sealed.payload[i] != (uint8_t)k)
			return 1;
	for (size_t i = 0; i < sizeof(d->sealed_rate.payload); i++)
		if (d->sealed_rate.payload[i] != (uint8_t)(k + 1))
			return 1;
	return 0;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 3;
	const struct gpupm_page *page = mmap(NULL, GPUPM_PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (page == MAP_FAILED)
		return 4;
	int locked = strcmp(argv[3], "locked") == 0;
	double end = now() + atof(argv[2]);
	unsigned long long reads = 0, violations = 0, busy = 0;
	static struct gpupm_page_data d;
	while (now() < end) {
		for (int n = 0; n < 64; n++) {
			if (locked) {
				if (gpupm_page_read(page, &d) != 0) {
					busy++;
					continue;
				}
			} else {
				const uint64_t *src = (const uint64_t *)(const void *)&page->data;
				for (size_t i = 0; i < sizeof(d) / 8; i++) {
					uint64_t v = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
					memcpy((char *)&d + 8 * i, &v, 8);
				}
			}
			reads++;
			violations += (unsigned long long)broken(&d);
		}
	}
	printf("reads=%llu violations=%llu busy=%llu\n", reads, violations, busy);
	return 0;
}
"#;

fn compile_reader(dir: &Path) -> PathBuf {
    let src = dir.join("torn_reader.c");
    let exe = dir.join("torn_reader");
    std::fs::write(&src, C_READER).expect("write the C reader");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include");
    let out = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("the torn-read test needs a C compiler as `cc`");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `key=value` fields of the C reader's output line.
fn field(out: &str, key: &str) -> u64 {
    out.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {out:?}"))
}

#[derive(Debug, Default)]
struct Tally {
    reads: AtomicU64,
    violations: AtomicU64,
    busy: AtomicU64,
}

#[test]
fn no_reader_thread_or_process_ever_sees_a_torn_page_in_10_s_of_writes_at_full_speed() {
    let dir = std::env::temp_dir().join(format!("gpupm-page-torn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("page");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(PAGE_SIZE as u64).unwrap();
    let writer = WritablePage::map(file.as_fd()).expect("map writable");
    writer.init_header(&PageHeader {
        magic: PAGE_MAGIC,
        version: PAGE_VERSION,
        size: u32::try_from(PAGE_SIZE).unwrap(),
        scope: scope::VM,
        id: 1,
        vm: 1,
        ..PageHeader::default()
    });
    writer.publish(&update(1));
    let exe = compile_reader(&dir);

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer_thread = {
        let (stop, writes) = (Arc::clone(&stop), Arc::clone(&writes));
        std::thread::spawn(move || {
            let mut k = 1;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                writer.publish(&update(k));
                writes.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let tally = Arc::new(Tally::default());
    let readers: Vec<_> = (0..3)
        .map(|i| {
            let (stop, tally) = (Arc::clone(&stop), Arc::clone(&tally));
            let page = MappedPage::from_fd(file.as_fd()).expect("map read-only");
            std::thread::spawn(move || {
                let mut last = 0;
                while !stop.load(Ordering::Relaxed) {
                    let ok = if i == 0 {
                        page.read_counters().map(|c| {
                            let k = c.commit_seq;
                            assert!(k >= last, "an older update after a newer one");
                            last = k;
                            c == update(k).counters
                        })
                    } else {
                        page.read().map(|d| {
                            let k = d.counters.commit_seq;
                            assert!(k >= last, "an older update after a newer one");
                            last = k;
                            *d == update(k)
                        })
                    };
                    match ok {
                        Ok(true) => {}
                        Ok(false) => {
                            tally.violations.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            tally.busy.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tally.reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    let c_locked = Command::new(&exe)
        .arg(&path)
        .arg(READ_FOR.as_secs_f64().to_string())
        .arg("locked")
        .output()
        .expect("run the C reader");
    let c_control = Command::new(&exe)
        .arg(&path)
        .arg(CONTROL_FOR.as_secs_f64().to_string())
        .arg("unlocked")
        .output()
        .expect("run the C control reader");
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    writer_thread.join().expect("writer");
    for r in readers {
        r.join().expect("a reader thread saw updates go backwards");
    }
    std::fs::remove_dir_all(&dir).unwrap();

    let locked = String::from_utf8_lossy(&c_locked.stdout).into_owned();
    let control = String::from_utf8_lossy(&c_control.stdout).into_owned();
    assert!(
        c_locked.status.success() && c_control.status.success(),
        "{locked} {control}"
    );
    let writes = writes.load(Ordering::Relaxed);
    let (reads, violations, busy) = (
        tally.reads.load(Ordering::Relaxed),
        tally.violations.load(Ordering::Relaxed),
        tally.busy.load(Ordering::Relaxed),
    );
    eprintln!(
        "{:.1} s: {writes} writes ({:.0}/s); Rust readers {reads} reads, {violations} torn, {busy} busy; \
         C process (locked) {locked}; C control (no lock) {control}",
        elapsed.as_secs_f64(),
        writes as f64 / elapsed.as_secs_f64()
    );
    assert!(elapsed >= READ_FOR);
    assert!(writes > 100_000, "the writer barely ran: {writes}");
    assert!(reads > 100_000, "the readers barely ran: {reads}");
    assert_eq!(violations, 0, "a Rust reader saw a torn page");
    assert!(field(&locked, "reads") > 100_000, "{locked}");
    assert_eq!(
        field(&locked, "violations"),
        0,
        "the C reader saw a torn page: {locked}"
    );
    assert!(
        field(&control, "violations") > 0,
        "the control reader never saw a torn page, so the invariant proves nothing: {control}"
    );
    assert_eq!(MAX_EVENTS, 64);
}
