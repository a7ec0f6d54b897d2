/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant_ri: a runtime-instrumentation session (docs/ri.md) on one of the
 * caller's contexts, with the ioctls and records of <gpupm/gpupm_uapi.h>.
 *
 * Usage: tenant_ri CTX MODE INTERVAL RGS GROUPS [NODE]
 *        MODE: cycle | instr | directed (INTERVAL, the SF, must be 0 then)
 *        NODE: /run/gpupm/tenant/node
 *
 * TENANT_IOC_OPEN_RI opens the session with emit records on (E);
 * TENANT_IOC_RI_EMIT then inserts three markers, 0x51000001..0x51000003,
 * which arrive as emit records (source "register") in the next group.
 * read() returns whole entries, each a struct gpupm_tenant_ri_group_header
 * and, for a group, its 2^(RGS+1) records of 16 bytes. The example reads
 * until it has GROUPS groups (delivered or lost) or the session halted
 * (its VM moved to an incompatible partition), and checks every group:
 *   - size 32 + 2^(RGS+1) * 16 and the session's RGS;
 *   - numbered one after the other (gaps only where lost_before says);
 *   - a begin record first (its RGS the session's) or a timestamp record
 *     naming the group's number;
 *   - then emit / abort records, then fill records only;
 *   - an instruction record last;
 *   - our markers at most once each, in order (exactly once unless a
 *     group was lost).
 * Then it prints one line:
 *   "block <b> groups <n> records <r> emits <e> markers <m> lost <l>
 *    first_cycle <c0> last_cycle <c1>[ halt <reason>]"
 * (groups and records delivered; emits: the markers seen; markers: emit
 * records of the program's marker blocks; first/last_cycle: the context
 * cycle of the first and last instruction record; halt: 1 version, 2 RGS
 * limit, only if the session halted).
 * Exit status: 0 ok, 1 an error or a malformed group (one line on stderr),
 * 2 bad usage.
 *
 * Build: make -C examples/c tenant_ri
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <gpupm/gpupm_uapi.h>

#define DEFAULT_NODE "/run/gpupm/tenant/node"
#define MARKERS 3u
#define MARKER_BASE 0x51000000u

struct tally {
	uint32_t rgs;
	uint64_t want, groups, records, lost, last_group;
	uint64_t emits, markers, first_cycle, last_cycle;
	uint32_t last_emit;
	unsigned halt;
};

static int fail(const char *what, uint64_t group)
{
	fprintf(stderr, "tenant_ri: group %" PRIu64 ": %s\n", group, what);
	return -1;
}

/* Checks the records of group `h->group` and counts what they carry. */
static int check_group(struct tally *t, const struct gpupm_tenant_ri_group_header *h,
		       const unsigned char *recs)
{
	size_t n = (size_t)2 << t->rgs;
	if (h->rgs != t->rgs || h->size != sizeof *h + GPUPM_RI_GROUP_BYTES(t->rgs))
		return fail("wrong RGS or size", h->group);
	if (h->group != t->last_group + 1 + h->lost_before)
		return fail("out of sequence", h->group);
	if (recs[0] == GPUPM_RI_RECORD_BEGIN) {
		struct gpupm_ri_begin_record b;
		memcpy(&b, recs, sizeof b);
		if (b.rgs != t->rgs)
			return fail("begin record with another RGS", h->group);
	} else if (recs[0] == GPUPM_RI_RECORD_TIMESTAMP) {
		struct gpupm_ri_timestamp_record ts;
		memcpy(&ts, recs, sizeof ts);
		if (ts.group != h->group)
			return fail("timestamp record names another group", h->group);
	} else {
		return fail("neither begin nor timestamp first", h->group);
	}
	int filling = 0;
	for (size_t i = 1; i + 1 < n; i++) {
		const unsigned char *r = recs + i * GPUPM_RI_RECORD_SIZE;
		if (r[0] == GPUPM_RI_RECORD_FILL) {
			filling = 1;
		} else if (filling || (r[0] != GPUPM_RI_RECORD_EMIT && r[0] != GPUPM_RI_RECORD_ABORT)) {
			return fail("an extra record out of place", h->group);
		} else if (r[0] == GPUPM_RI_RECORD_EMIT) {
			struct gpupm_ri_emit_record e;
			memcpy(&e, r, sizeof e);
			if (e.source == GPUPM_RI_EMIT_SOURCE_MARKER) {
				t->markers++;
			} else if (e.data > MARKER_BASE + t->last_emit && e.data <= MARKER_BASE + MARKERS) {
				t->last_emit = (uint32_t)(e.data - MARKER_BASE);
				t->emits++;
			} else {
				return fail("an emit record we did not emit, or out of order", h->group);
			}
		}
	}
	struct gpupm_ri_instruction_record last;
	memcpy(&last, recs + (n - 1) * GPUPM_RI_RECORD_SIZE, sizeof last);
	if (last.kind != GPUPM_RI_RECORD_INSTRUCTION)
		return fail("no instruction record last", h->group);
	if (t->groups == 0)
		t->first_cycle = last.ctx_cycle;
	t->last_cycle = last.ctx_cycle;
	t->groups++;
	t->records += n;
	t->lost += h->lost_before;
	t->last_group = h->group;
	return 0;
}

/* Reads entries until the tally has what it wants; -1 on an error. */
static int read_groups(int fd, struct tally *t)
{
	static unsigned char buf[1 << 18];
	while (t->groups + t->lost < t->want && !t->halt) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0) {
			fprintf(stderr, "tenant_ri: read: %s\n", n ? strerror(errno) : "end of session");
			return -1;
		}
		for (ssize_t at = 0; at < n && t->groups + t->lost < t->want && !t->halt;) {
			struct gpupm_tenant_ri_group_header h;
			memcpy(&h, buf + at, sizeof h);
			if (h.kind == GPUPM_TENANT_RI_ENTRY_HALT) {
				t->lost += h.lost_before;
				t->halt = h.halt_reason;
			} else if (check_group(t, &h, buf + at + sizeof h) != 0) {
				return -1;
			}
			at += h.size;
		}
	}
	return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *s == '\0' || *end != '\0' || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

int main(int argc, char **argv)
{
	struct gpupm_tenant_open_ri req;
	memset(&req, 0, sizeof req);
	uint32_t want;
	const char *mode = argc > 2 ? argv[2] : "";
	req.mode = !strcmp(mode, "cycle")      ? GPUPM_TENANT_RI_MODE_CYCLE
		   : !strcmp(mode, "instr")    ? GPUPM_TENANT_RI_MODE_INSTRUCTION
		   : !strcmp(mode, "directed") ? GPUPM_TENANT_RI_MODE_DIRECTED
					       : 0;
	if (argc < 6 || argc > 7 || req.mode == 0 || parse_u32(argv[1], &req.ctx) ||
	    parse_u32(argv[3], &req.sf) || parse_u32(argv[4], &req.rgs) || parse_u32(argv[5], &want) ||
	    req.rgs > GPUPM_TENANT_RI_RGS_MAX) {
		fprintf(stderr, "usage: %s CTX cycle|instr|directed INTERVAL RGS GROUPS [NODE]\n", argv[0]);
		return 2;
	}
	const char *node = argc == 7 ? argv[6] : DEFAULT_NODE;
	int fd = open(node, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "tenant_ri: cannot open %s: %s\n", node, strerror(errno));
		return 1;
	}
	req.version = GPUPM_TENANT_STRUCT_VERSION;
	req.controls = GPUPM_TENANT_RI_CONTROLS_EMIT;
	if (ioctl(fd, TENANT_IOC_OPEN_RI, &req) != 0) {
		fprintf(stderr, "tenant_ri: TENANT_IOC_OPEN_RI: %s\n", strerror(errno));
		return 1;
	}
	for (uint32_t i = 1; i <= MARKERS; i++) {
		struct gpupm_tenant_ri_emit emit = { .version = GPUPM_TENANT_STRUCT_VERSION,
						     .value = MARKER_BASE + i };
		if (ioctl(fd, TENANT_IOC_RI_EMIT, &emit) != 0) {
			fprintf(stderr, "tenant_ri: TENANT_IOC_RI_EMIT: %s\n", strerror(errno));
			return 1;
		}
	}
	struct tally t = { .rgs = req.rgs, .want = want };
	if (read_groups(fd, &t) != 0)
		return 1;
	close(fd); /* ends the session: gpupmd disables and frees the block */
	printf("block %" PRIu32 " groups %" PRIu64 " records %" PRIu64 " emits %" PRIu64
	       " markers %" PRIu64 " lost %" PRIu64 " first_cycle %" PRIu64 " last_cycle %" PRIu64,
	       req.block, t.groups, t.records, t.emits, t.markers, t.lost, t.first_cycle, t.last_cycle);
	if (t.halt)
		printf(" halt %u", t.halt);
	printf("\n");
	return 0;
}
