//! The tenant-page part of the C header (`uapi/src/page.rs`): constants,
//! struct bodies (cbindgen, like the rest), and the `static inline`
//! sequence-lock readers, the C twin of `gpupm_client::page`.

use gpupm_uapi::page;

use super::{item_key, module_key, Header};

/// The reader functions, written out once here and compiled by the
/// header test (`uapi/tests/c_header.rs`) and the torn-read test.
const READER: &str = r#"
/*
 * Reading a page: a consistent copy of its protected words under the
 * page's sequence lock (docs/pages.md). `seq` is odd while the daemon
 * writes; a copy is consistent when `seq` was even before it and the same
 * after it. Every access to the page is a 64-bit atomic load (relaxed);
 * the ordering comes from the two acquire fences, which pair with the
 * writer's release fence and release store. GCC and Clang builtins.
 *
 * A failed attempt is retried at once GPUPM_PAGE_READ_SPINS times, then
 * after sched_yield(): a writer preempted mid-update on a loaded host
 * needs the processor back to finish. Returns 0, or -1 when the page
 * stayed locked or kept changing for GPUPM_PAGE_BUSY_MS after that (a
 * daemon that died while writing: its successor republishes). The time is
 * C11's timespec_get, read only once spinning failed.
 */
static inline int gpupm_page_copy(const struct gpupm_page *page, void *out, size_t words)
{
	const uint64_t *src = (const uint64_t *)(const void *)&page->data;
	struct timespec since = { 0, 0 };
	int yielding = 0;
	for (uint32_t attempt = 1;; attempt++) {
		uint64_t s1 = __atomic_load_n(&page->seq, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(s1 & 1)) {
			for (size_t i = 0; i < words; i++) {
				uint64_t v = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
				memcpy((char *)out + 8 * i, &v, sizeof(v));
			}
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(&page->seq, __ATOMIC_RELAXED) == s1)
				return 0;
		}
		if (!yielding && attempt < GPUPM_PAGE_READ_SPINS)
			continue;
		struct timespec now;
		timespec_get(&now, TIME_UTC);
		if (!yielding) {
			since = now;
			yielding = 1;
		} else if ((now.tv_sec - since.tv_sec) * 1000 + (now.tv_nsec - since.tv_nsec) / 1000000 >=
			   GPUPM_PAGE_BUSY_MS) {
			return -1;
		}
		sched_yield();
	}
}

/* The counters only (totals, state, generation): 552 bytes. */
static inline int gpupm_page_read_counters(const struct gpupm_page *page,
					   struct gpupm_page_counters *out)
{
	return gpupm_page_copy(page, out, sizeof(*out) / 8);
}

/* Everything the lock protects (counters, rate sample, sealed slots). */
static inline int gpupm_page_read(const struct gpupm_page *page, struct gpupm_page_data *out)
{
	return gpupm_page_copy(page, out, sizeof(*out) / 8);
}"#;

/// Constants of the page protocol.
pub fn emit_defines(h: &mut Header) {
    h.section("Tenant counter pages (uapi/src/page.rs, docs/pages.md)", "");
    group!(h, dec "GPUPM_", gpupm_uapi::page:
        PAGE_SIZE, PAGE_VERSION, PAGE_STRUCT_VERSION, PAGE_SEQ_OFFSET, PAGE_DATA_OFFSET,
        PAGE_READ_SPINS, PAGE_BUSY_MS, PAGE_TAIL);
    h.item(
        "page::PAGE_MAGIC",
        "GPUPM_PAGE_MAGIC",
        page::PAGE_MAGIC,
        true,
        "\"gPAG\"",
    );
    h.doc("page::DEFAULT_PAGES_SOCKET");
    h.line(&format!(
        "#define GPUPM_DEFAULT_PAGES_SOCKET \"{}\"",
        page::DEFAULT_PAGES_SOCKET
    ));
    h.doc("page::PAGES_SOCKET_NAME");
    h.line(&format!(
        "#define GPUPM_PAGES_SOCKET_NAME \"{}\"",
        page::PAGES_SOCKET_NAME
    ));
    group!(h, dec "GPUPM_PAGE_STATE_", gpupm_uapi::page::page_state: ACTIVE, DESTROYED, RETIRED, WITHDRAWN);
    group!(h, hex "GPUPM_PAGE_FLAGS_", gpupm_uapi::page::page_flags: SEALED, RATE, SEALED_RATE);
    group!(h, hex "GPUPM_PAGE_REQUEST_FLAGS_", gpupm_uapi::page::page_request_flags: LATEST, ALL);
}

/// Struct bodies and the readers.
pub fn emit_structs(h: &mut Header) {
    h.line("");
    h.structs_referring(
        &[
            "PageHeader",
            "PageCounters",
            "PageData",
            "Page",
            "PageRequest",
            "PageReply",
        ],
        &["RateSample"],
    );
    h.line(READER);
}

/// Offsets the header's readers rely on.
pub fn emit_asserts(h: &mut Header) {
    h.assert(&format!(
        "offsetof(struct gpupm_page, seq) == {}",
        page::PAGE_SEQ_OFFSET
    ));
    h.assert(&format!(
        "offsetof(struct gpupm_page, data) == {}",
        page::PAGE_DATA_OFFSET
    ));
    h.assert("sizeof(struct gpupm_page) == GPUPM_PAGE_SIZE");
    h.assert("sizeof(struct gpupm_page_data) % 8 == 0");
    h.assert("sizeof(struct gpupm_page_counters) % 8 == 0");
}
