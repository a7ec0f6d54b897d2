/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant_stat: the cumulative counter totals of every VM the caller may see,
 * read from the gpupm tenant node with the ioctls of <gpupm/gpupm_uapi.h>.
 *
 * Usage: tenant_stat [--json] [NODE]     (NODE: /run/gpupm/tenant/node)
 *
 * TENANT_IOC_WHOAMI names the VMs the caller may see (a tenant: its own;
 * the admin: all), then TENANT_IOC_READ_COUNTERS reads each VM's totals of
 * every event.
 *
 * Output (stable; examples/python/tenant_stat.py prints the same bytes):
 *   text    one line per VM and event, "vm <id> <event_name> <value>",
 *           VMs by ascending id, events by id (catalogue order); a
 *           confidential VM, whose totals are sealed, prints "vm <id> sealed".
 *   --json  one JSON object per line per VM, in the same order, with the
 *           keys of `gpupm stat --json`:
 *           {"scope":"vm","id":ID,"cycle":C,"events":{NAME:VALUE,...}}
 *           where "cycle" is the device cycle of the VM's last commit; a
 *           sealed VM has "events":{} and "sealed":true.
 * Exit status: 0 ok, 1 the node could not be opened or an ioctl failed
 * (one line on stderr naming the cause), 2 bad usage.
 *
 * Build: make -C examples/c   (or: cc -std=c11 -Iinclude examples/c/tenant_stat.c)
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

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static void print_vm(const struct gpupm_tenant_read_counters *rc, uint32_t vm, int json)
{
	int sealed = (rc->flags & GPUPM_TENANT_COUNTER_FLAGS_SEALED) != 0;

	if (json) {
		printf("{\"scope\":\"vm\",\"id\":%" PRIu32 ",\"cycle\":%" PRIu64 ",\"events\":{",
		       vm, rc->cycle);
		for (int e = 0; !sealed && e < GPUPM_EVENT_COUNT; e++)
			printf("%s\"%s\":%" PRIu64, e ? "," : "", gpupm_event_names[e], rc->values[e]);
		printf("}%s}\n", sealed ? ",\"sealed\":true" : "");
	} else if (sealed) {
		printf("vm %" PRIu32 " sealed\n", vm);
	} else {
		for (int e = 0; e < GPUPM_EVENT_COUNT; e++)
			printf("vm %" PRIu32 " %s %" PRIu64 "\n", vm, gpupm_event_names[e], rc->values[e]);
	}
}

int main(int argc, char **argv)
{
	const char *node = DEFAULT_NODE;
	int json = 0, have_node = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (argv[i][0] != '-' && !have_node) {
			node = argv[i];
			have_node = 1;
		} else {
			fprintf(stderr, "usage: %s [--json] [NODE]\n", argv[0]);
			return 2;
		}
	}

	int fd = open(node, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "tenant_stat: cannot open %s: %s\n", node, strerror(errno));
		return 1;
	}

	struct gpupm_tenant_whoami who;
	memset(&who, 0, sizeof(who));
	who.version = GPUPM_TENANT_STRUCT_VERSION;
	if (ioctl(fd, TENANT_IOC_WHOAMI, &who) < 0) {
		fprintf(stderr, "tenant_stat: TENANT_IOC_WHOAMI on %s: %s\n", node, strerror(errno));
		return 1;
	}
	uint32_t n = who.n_vms < GPUPM_TENANT_MAX_CALLER_VMS ? who.n_vms : GPUPM_TENANT_MAX_CALLER_VMS;
	qsort(who.vms, n, sizeof(who.vms[0]), cmp_u32);

	for (uint32_t i = 0; i < n; i++) {
		struct gpupm_tenant_read_counters rc;
		memset(&rc, 0, sizeof(rc));
		rc.version = GPUPM_TENANT_STRUCT_VERSION;
		rc.scope = GPUPM_TENANT_SCOPE_VM;
		rc.id = who.vms[i];
		rc.n_events = 0; /* all events: values[e] answers event e */
		if (ioctl(fd, TENANT_IOC_READ_COUNTERS, &rc) < 0) {
			fprintf(stderr, "tenant_stat: TENANT_IOC_READ_COUNTERS of VM %" PRIu32 ": %s\n",
				who.vms[i], strerror(errno));
			return 1;
		}
		print_vm(&rc, who.vms[i], json);
	}
	close(fd);
	return fflush(stdout) == 0 ? 0 : 1;
}
