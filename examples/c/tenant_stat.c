/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant_stat: the cumulative counter totals of every VM the caller may see,
 * read from the VM's tenant page when gpupmd offers one and from the gpupm
 * tenant node otherwise, with the ABI of <gpupm/gpupm_uapi.h>.
 *
 * Usage: tenant_stat [--json] [--pages SOCKET | --no-pages] [-v] [NODE]
 *        (NODE: /run/gpupm/tenant/node, SOCKET: /run/gpupm/pages/socket)
 *
 * TENANT_IOC_WHOAMI names the VMs the caller may see (a tenant: its own;
 * the admin: all). For each, one request on the page socket (SOCK_SEQPACKET)
 * returns a read-only descriptor of the VM's page (SCM_RIGHTS), which is
 * mapped and read under its sequence lock with gpupm_page_read_counters()
 * from the header: no system call per read. When there is no page (no
 * socket, a refusal, a page the daemon no longer keeps, or one that stays
 * busy), TENANT_IOC_READ_COUNTERS reads the VM's totals instead. -v says on
 * stderr which way each VM was read ("vm <id> page" or "vm <id> ioctl").
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
#define _GNU_SOURCE /* SOCK_CLOEXEC, MSG_CMSG_CLOEXEC */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gpupm/gpupm_uapi.h>

#define DEFAULT_NODE "/run/gpupm/tenant/node"

/* Totals of one VM, from wherever they were read. */
struct totals {
	uint64_t cycle;
	int sealed;
	uint64_t values[GPUPM_MAX_EVENTS];
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static void print_vm(const struct totals *t, uint32_t vm, int json)
{
	if (json) {
		printf("{\"scope\":\"vm\",\"id\":%" PRIu32 ",\"cycle\":%" PRIu64 ",\"events\":{",
		       vm, t->cycle);
		for (int e = 0; !t->sealed && e < GPUPM_EVENT_COUNT; e++)
			printf("%s\"%s\":%" PRIu64, e ? "," : "", gpupm_event_names[e], t->values[e]);
		printf("}%s}\n", t->sealed ? ",\"sealed\":true" : "");
	} else if (t->sealed) {
		printf("vm %" PRIu32 " sealed\n", vm);
	} else {
		for (int e = 0; e < GPUPM_EVENT_COUNT; e++)
			printf("vm %" PRIu32 " %s %" PRIu64 "\n", vm, gpupm_event_names[e], t->values[e]);
	}
}

/* A connection to the page socket, or -1. */
static int connect_pages(const char *path)
{
	struct sockaddr_un addr;
	if (strlen(path) >= sizeof(addr.sun_path))
		return -1;
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strcpy(addr.sun_path, path);
	if (connect(s, (const struct sockaddr *)&addr, sizeof(addr)) < 0) {
		close(s);
		return -1;
	}
	return s;
}

/* VM `vm`'s page mapped read-only, or NULL. */
static const struct gpupm_page *map_vm_page(int sock, uint32_t vm)
{
	struct gpupm_page_request req;
	struct gpupm_page_reply reply;
	memset(&req, 0, sizeof(req));
	req.version = GPUPM_PAGE_STRUCT_VERSION;
	req.scope = GPUPM_TENANT_SCOPE_VM;
	req.id = vm;
	if (send(sock, &req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req))
		return NULL;

	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = { .iov_base = &reply, .iov_len = sizeof(reply) };
	struct msghdr msg;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control.buf;
	msg.msg_controllen = sizeof(control.buf);
	if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(reply))
		return NULL;
	int fd = -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(fd));
	if (reply.version != GPUPM_PAGE_STRUCT_VERSION || reply.status != 0 || fd < 0) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	void *page = mmap(NULL, GPUPM_PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (page == MAP_FAILED)
		return NULL;
	const struct gpupm_page *p = page;
	if (p->header.magic != GPUPM_PAGE_MAGIC || p->header.version != GPUPM_PAGE_VERSION) {
		munmap(page, GPUPM_PAGE_SIZE);
		return NULL;
	}
	return p;
}

/* VM `vm`'s totals from its page: 0, or -1 when there is no usable page. */
static int read_page(int sock, uint32_t vm, struct totals *t)
{
	if (sock < 0)
		return -1;
	const struct gpupm_page *page = map_vm_page(sock, vm);
	if (!page)
		return -1;
	struct gpupm_page_counters c;
	int ok = gpupm_page_read_counters(page, &c) == 0 &&
		 (c.state == GPUPM_PAGE_STATE_ACTIVE || c.state == GPUPM_PAGE_STATE_DESTROYED);
	if (ok) {
		t->cycle = c.cycle;
		t->sealed = (c.flags & GPUPM_PAGE_FLAGS_SEALED) != 0;
		memcpy(t->values, c.totals, sizeof(t->values));
	}
	munmap((void *)(uintptr_t)page, GPUPM_PAGE_SIZE);
	return ok ? 0 : -1;
}

/* VM `vm`'s totals through the tenant node. */
static int read_ioctl(int fd, uint32_t vm, struct totals *t)
{
	struct gpupm_tenant_read_counters rc;
	memset(&rc, 0, sizeof(rc));
	rc.version = GPUPM_TENANT_STRUCT_VERSION;
	rc.scope = GPUPM_TENANT_SCOPE_VM;
	rc.id = vm;
	rc.n_events = 0; /* all events: values[e] answers event e */
	if (ioctl(fd, TENANT_IOC_READ_COUNTERS, &rc) < 0)
		return -1;
	t->cycle = rc.cycle;
	t->sealed = (rc.flags & GPUPM_TENANT_COUNTER_FLAGS_SEALED) != 0;
	memcpy(t->values, rc.values, sizeof(t->values));
	return 0;
}

int main(int argc, char **argv)
{
	const char *node = DEFAULT_NODE, *pages = GPUPM_DEFAULT_PAGES_SOCKET;
	int json = 0, have_node = 0, verbose = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "--pages") == 0 && i + 1 < argc) {
			pages = argv[++i];
		} else if (strcmp(argv[i], "--no-pages") == 0) {
			pages = NULL;
		} else if (strcmp(argv[i], "-v") == 0) {
			verbose = 1;
		} else if (argv[i][0] != '-' && !have_node) {
			node = argv[i];
			have_node = 1;
		} else {
			fprintf(stderr, "usage: %s [--json] [--pages SOCKET | --no-pages] [-v] [NODE]\n",
				argv[0]);
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

	int sock = pages ? connect_pages(pages) : -1;
	for (uint32_t i = 0; i < n; i++) {
		struct totals t;
		memset(&t, 0, sizeof(t));
		int paged = read_page(sock, who.vms[i], &t) == 0;
		if (!paged && read_ioctl(fd, who.vms[i], &t) < 0) {
			fprintf(stderr, "tenant_stat: TENANT_IOC_READ_COUNTERS of VM %" PRIu32 ": %s\n",
				who.vms[i], strerror(errno));
			return 1;
		}
		if (verbose)
			fprintf(stderr, "vm %" PRIu32 " %s\n", who.vms[i], paged ? "page" : "ioctl");
		print_vm(&t, who.vms[i], json);
	}
	if (sock >= 0)
		close(sock);
	close(fd);
	return fflush(stdout) == 0 ? 0 : 1;
}
