/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant_sample: a minimal sampling session on one of the caller's
 * contexts, with the ioctls and records of <gpupm/gpupm_uapi.h>.
 *
 * Usage: tenant_sample CTX COUNT [NODE]     (NODE: /run/gpupm/tenant/node)
 *
 * TENANT_IOC_OPEN_SAMPLING asks for cycle samples every 4096 + U(0..=255)
 * cycles on context CTX; read() then returns whole records, each a
 * struct gpupm_tenant_sample_header followed by the device's record. The
 * example reads exactly COUNT cycle samples and prints, per (kernel, block), the
 * samples and the cycles they stand for:
 *   "block <kernel> <block> <samples> <cycles>"  (ascending), then
 *   "lost <n>"
 * A confidential VM's records arrive sealed; they are counted as "sealed <n>".
 * Exit status: 0 ok, 1 an error (one line on stderr), 2 bad usage.
 *
 * Build: make -C examples/c tenant_sample
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
#define MAX_BLOCKS 4096

struct tally {
	uint16_t kernel, block;
	uint64_t samples, cycles;
};

static struct tally blocks[MAX_BLOCKS];
static size_t n_blocks;

static void count(const struct gpupm_pc_record *pc)
{
	for (size_t i = 0; i < n_blocks; i++) {
		if (blocks[i].kernel == pc->kernel && blocks[i].block == pc->block) {
			blocks[i].samples++;
			blocks[i].cycles += pc->interval;
			return;
		}
	}
	if (n_blocks < MAX_BLOCKS)
		blocks[n_blocks++] = (struct tally){ pc->kernel, pc->block, 1, pc->interval };
}

static int cmp_block(const void *a, const void *b)
{
	const struct tally *x = a, *y = b;
	uint32_t kx = (uint32_t)x->kernel << 16 | x->block, ky = (uint32_t)y->kernel << 16 | y->block;
	return (kx > ky) - (kx < ky);
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: %s CTX COUNT [NODE]\n", argv[0]);
		return 2;
	}
	uint32_t ctx = (uint32_t)strtoul(argv[1], NULL, 10);
	uint64_t want = strtoull(argv[2], NULL, 10);
	const char *node = argc == 4 ? argv[3] : DEFAULT_NODE;

	int fd = open(node, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "tenant_sample: cannot open %s: %s\n", node, strerror(errno));
		return 1;
	}
	struct gpupm_tenant_open_sampling req;
	memset(&req, 0, sizeof req);
	req.version = GPUPM_TENANT_STRUCT_VERSION;
	req.scope = GPUPM_TENANT_SCOPE_CONTEXT;
	req.id = ctx;
	req.kinds = GPUPM_TENANT_SAMPLE_KIND_CYCLE;
	req.period = 4096;
	req.dither = 255;
	if (ioctl(fd, TENANT_IOC_OPEN_SAMPLING, &req) != 0) {
		fprintf(stderr, "tenant_sample: TENANT_IOC_OPEN_SAMPLING: %s\n", strerror(errno));
		return 1;
	}
	static unsigned char buf[1 << 18];
	uint64_t got = 0, lost = 0, sealed = 0;
	while (got + sealed < want) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0) {
			fprintf(stderr, "tenant_sample: read: %s\n", n ? strerror(errno) : "end of session");
			return 1;
		}
		for (ssize_t at = 0; at < n && got + sealed < want;) {
			struct gpupm_tenant_sample_header h;
			memcpy(&h, buf + at, sizeof h);
			lost += h.lost_before;
			if (h.flags & GPUPM_TENANT_SAMPLE_FLAGS_SEALED) {
				sealed++;
			} else if (h.kind == GPUPM_TENANT_SAMPLE_KIND_CYCLE) {
				struct gpupm_pc_record pc;
				memcpy(&pc, buf + at + sizeof h, sizeof pc);
				count(&pc);
				got++;
			}
			at += h.size;
		}
	}
	close(fd); /* ends the session: the daemon withdraws its demand */
	qsort(blocks, n_blocks, sizeof blocks[0], cmp_block);
	for (size_t i = 0; i < n_blocks; i++)
		printf("block %u %u %" PRIu64 " %" PRIu64 "\n", blocks[i].kernel, blocks[i].block,
		       blocks[i].samples, blocks[i].cycles);
	if (sealed)
		printf("sealed %" PRIu64 "\n", sealed);
	printf("lost %" PRIu64 "\n", lost);
	return 0;
}
