/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant_ranges: a marked code range (docs/ranges.md) on one of the
 * caller's contexts and the context's call graph, with the ioctls of
 * <gpupm/gpupm_uapi.h>.
 *
 * Usage: tenant_ranges CTX KERNEL:FIRST-LAST EVENT THRESHOLD CROSSINGS [NODE]
 *        EVENT: instructions | cycles | memory
 *        NODE: /run/gpupm/tenant/node
 *
 * TENANT_IOC_ADD_RANGE adds a code range over blocks FIRST..=LAST of
 * kernel KERNEL of the context's program, counting EVENT, with a count
 * threshold: every THRESHOLD events inside the range the device records
 * the call stack. The example lets the context run, polling
 * TENANT_IOC_READ_RANGES every 10 ms until CROSSINGS threshold crossings
 * arrived (as records or counted lost), then reads the call graph page by
 * page (TENANT_IOC_READ_CALL_EDGES, _KERNELS, _STACKS, `first += count`
 * until `first == total`), prints it and removes the range
 * (TENANT_IOC_REMOVE_RANGE). Output:
 *   "range <handle> register <r> entries <e> count <c> crossings <x> lost <l> flags <f>"
 *   "graph crossings <x> lost <l> stacks_dropped <d>"
 *   "edge <kernel>:<call_block> <callee> <count>"      ascending
 *   "kernel <k> self <s> inclusive <i>"                ascending
 *   "k0;k1;... <count>"    one folded stack per line, outermost kernel
 *                          first: `grep '^k'` feeds flamegraph.pl
 *   "removed <handle>"
 * Exit status: 0 ok, 1 an error (one line on stderr), 2 bad usage.
 *
 * Build: make -C examples/c tenant_ranges
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <gpupm/gpupm_uapi.h>

#define DEFAULT_NODE "/run/gpupm/tenant/node"

static int fail(const char *what)
{
	fprintf(stderr, "tenant_ranges: %s: %s\n", what, strerror(errno));
	return -1;
}

/* The row of range `handle` of `ctx`, polled until it saw `want` crossings. */
static int wait_for_crossings(int fd, uint32_t ctx, uint32_t handle, uint64_t want,
			      struct gpupm_tenant_range_row *out)
{
	const struct timespec poll_interval = { 0, 10 * 1000 * 1000 };
	for (;;) {
		struct gpupm_tenant_read_ranges req;
		memset(&req, 0, sizeof req);
		req.version = GPUPM_TENANT_STRUCT_VERSION;
		req.ctx = ctx;
		if (ioctl(fd, TENANT_IOC_READ_RANGES, &req) != 0)
			return fail("TENANT_IOC_READ_RANGES");
		uint32_t i = 0;
		while (i < req.count && req.rows[i].handle != handle)
			i++;
		if (i == req.count) {
			fprintf(stderr, "tenant_ranges: the range is gone (its context ended)\n");
			return -1;
		}
		*out = req.rows[i];
		if (out->crossings + out->lost >= want)
			return 0;
		nanosleep(&poll_interval, NULL);
	}
}

/*
 * One page of a graph read: `page` is a struct gpupm_tenant_read_call_*,
 * whose first member is the header.
 */
static int read_page(int fd, unsigned long cmd, void *page, size_t size, uint32_t ctx,
		     uint32_t first)
{
	memset(page, 0, size);
	struct gpupm_tenant_graph_header *head = page;
	head->version = GPUPM_TENANT_STRUCT_VERSION;
	head->ctx = ctx;
	head->first = first;
	return ioctl(fd, cmd, page) == 0 ? 0 : fail("reading the call graph");
}

static int print_graph(int fd, uint32_t ctx)
{
	static struct gpupm_tenant_read_call_edges e;
	static struct gpupm_tenant_read_call_kernels k;
	static struct gpupm_tenant_read_call_stacks s;
	uint32_t first = 0;
	do {
		if (read_page(fd, TENANT_IOC_READ_CALL_EDGES, &e, sizeof e, ctx, first))
			return -1;
		if (first == 0)
			printf("graph crossings %" PRIu64 " lost %" PRIu64 " stacks_dropped %" PRIu64 "\n",
			       e.head.crossings, e.head.lost, e.head.stacks_dropped);
		for (uint32_t i = 0; i < e.head.count; i++)
			printf("edge %u:%u %u %" PRIu64 "\n", e.rows[i].kernel, e.rows[i].call_block,
			       e.rows[i].callee, e.rows[i].count);
		first += e.head.count;
	} while (first < e.head.total);
	first = 0;
	do {
		if (read_page(fd, TENANT_IOC_READ_CALL_KERNELS, &k, sizeof k, ctx, first))
			return -1;
		for (uint32_t i = 0; i < k.head.count; i++)
			printf("kernel %u self %" PRIu64 " inclusive %" PRIu64 "\n", k.rows[i].kernel,
			       k.rows[i].self_samples, k.rows[i].inclusive);
		first += k.head.count;
	} while (first < k.head.total);
	first = 0;
	do {
		if (read_page(fd, TENANT_IOC_READ_CALL_STACKS, &s, sizeof s, ctx, first))
			return -1;
		for (uint32_t i = 0; i < s.head.count; i++) {
			for (uint32_t f = 0; f < s.rows[i].frames_len; f++)
				printf("%sk%u", f ? ";" : "", s.rows[i].frames[f]);
			printf(" %" PRIu64 "\n", s.rows[i].count);
		}
		first += s.head.count;
	} while (first < s.head.total);
	return 0;
}

static int parse_request(char **argv, struct gpupm_tenant_add_range *req, uint64_t *want)
{
	char *end;
	memset(req, 0, sizeof *req);
	req->version = GPUPM_TENANT_STRUCT_VERSION;
	req->kind = GPUPM_TENANT_RANGE_KIND_CODE;
	req->trigger = GPUPM_TENANT_RANGE_TRIGGER_COUNT;
	unsigned long ctx = strtoul(argv[1], &end, 10);
	if (*end)
		return -1;
	unsigned kernel, first, last;
	int used = 0;
	if (sscanf(argv[2], "%u:%u-%u%n", &kernel, &first, &last, &used) != 3 || argv[2][used])
		return -1;
	req->event = !strcmp(argv[3], "instructions") ? GPUPM_RANGE_EVENT_INSTRUCTIONS
		     : !strcmp(argv[3], "cycles")     ? GPUPM_RANGE_EVENT_CYCLES
		     : !strcmp(argv[3], "memory")     ? GPUPM_RANGE_EVENT_MEMORY
						      : UINT32_MAX;
	unsigned long threshold = strtoul(argv[4], &end, 10);
	if (*end || req->event == UINT32_MAX || threshold == 0 || threshold > UINT32_MAX ||
	    ctx > UINT32_MAX)
		return -1;
	*want = strtoull(argv[5], &end, 10);
	if (*end)
		return -1;
	req->ctx = (uint32_t)ctx;
	req->kernel = kernel;
	req->first = first;
	req->last = last;
	req->threshold = (uint32_t)threshold;
	return 0;
}

int main(int argc, char **argv)
{
	struct gpupm_tenant_add_range add;
	uint64_t want;
	if (argc < 6 || argc > 7 || parse_request(argv, &add, &want) != 0) {
		fprintf(stderr,
			"usage: %s CTX KERNEL:FIRST-LAST instructions|cycles|memory THRESHOLD CROSSINGS [NODE]\n",
			argv[0]);
		return 2;
	}
	const char *node = argc == 7 ? argv[6] : DEFAULT_NODE;
	int fd = open(node, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "tenant_ranges: cannot open %s: %s\n", node, strerror(errno));
		return 1;
	}
	if (ioctl(fd, TENANT_IOC_ADD_RANGE, &add) != 0) {
		fail("TENANT_IOC_ADD_RANGE");
		return 1;
	}
	struct gpupm_tenant_range_row row;
	memset(&row, 0, sizeof row);
	if (wait_for_crossings(fd, add.ctx, add.handle, want, &row) != 0)
		return 1;
	printf("range %u register %u entries %" PRIu64 " count %" PRIu64 " crossings %" PRIu64
	       " lost %" PRIu64 " flags %u\n",
	       row.handle, row.register_, row.entries, row.count, row.crossings, row.lost, row.flags);
	if (print_graph(fd, add.ctx) != 0)
		return 1;
	struct gpupm_tenant_remove_range rm = { .version = GPUPM_TENANT_STRUCT_VERSION,
						.ctx = add.ctx,
						.handle = add.handle };
	if (ioctl(fd, TENANT_IOC_REMOVE_RANGE, &rm) != 0) {
		fail("TENANT_IOC_REMOVE_RANGE");
		return 1;
	}
	printf("removed %u\n", add.handle);
	close(fd);
	return 0;
}
