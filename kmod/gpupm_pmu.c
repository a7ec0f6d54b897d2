// SPDX-License-Identifier: GPL-2.0
/*
 * gpupm_pmu: a perf PMU for the gpupm device's counters.
 *
 * The device's committed totals live in memory blocks that only gpupmd
 * reads. The daemon publishes them through the misc device /dev/gpupm_pmu
 * (root only, GPUPM_PMU_IOC_PUBLISH); this module keeps the last published
 * total of every (scope, event) and serves them to perf as free-running
 * counters of an uncore-style PMU named "gpupm": system-wide counting only,
 * one designated CPU, no sampling, no per-task events.
 *
 * A counter's value is base + last: 0 when the module first sees a scope,
 * then advancing with every publication and never going back (a device
 * reset or a new context instance moves the last total into the base).
 * Publications and perf reads meet under a latch (seqcount_latch_t, two
 * copies of every slot): the writer runs here, in the ioctl, and updates
 * one copy while readers use the other, so a reader never waits for the
 * writer, even one it interrupted on the same CPU (an NMI, or a BPF
 * program in a kprobe). A reader retries at most GPUPM_READ_TRIES times
 * (only a writer that completes a whole update during each try can make
 * it retry) and then keeps the event's last good value (stale_reads).
 *
 * The CPU-hotplug state is installed after perf_pmu_register and removed
 * before perf_pmu_unregister, as Intel's uncore driver orders them: the
 * offline callback migrates events with perf_pmu_migrate_context, which
 * must never see an unregistered PMU. The designated CPU is chosen, the
 * PMU registered and the callback installed under cpus_read_lock, so no
 * CPU goes offline in between.
 *
 * The event catalogue, the config fields and the publication structs come
 * from gpupm_events.h, generated from the gpupm-uapi crate.
 */

#include <linux/atomic.h>
#include <linux/capability.h>
#include <linux/cpu.h>
#include <linux/cpuhotplug.h>
#include <linux/cpumask.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/perf_event.h>
#include <linux/seqlock.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "gpupm_events.h"

/* Slot 0 is the system, 1..MAX_VMS-1 the VMs, MAX_VMS + c context c. */
#define GPUPM_SLOTS (GPUPM_MAX_VMS + GPUPM_MAX_CONTEXTS)
#define GPUPM_CTX_SLOT(c) (GPUPM_MAX_VMS + (c))

/* Consistent reads of one slot in a few tries: see gpupm_value(). */
#define GPUPM_READ_TRIES 8
/* hw_perf_event.flags: the event's start found no consistent value. */
#define GPUPM_BASELINE_PENDING 0x1

/* One copy of a slot's totals. */
struct gpupm_totals {
	bool seen;
	u64 generation;
	u64 last[GPUPM_MAX_EVENTS];
	u64 base[GPUPM_MAX_EVENTS];
};

/* The latch's two copies: readers use copy[seq & 1]. */
struct gpupm_slot {
	struct gpupm_totals copy[2];
};

struct gpupm_state {
	struct pmu pmu;
	/* Designated CPU of every event; changes only on hotplug. */
	unsigned int cpu;
	int hp_state;
	/* Readers pick a copy by its low bit; publishers flip it twice. */
	seqcount_latch_t latch;
	/* Serialises publishers: the latch has one writer at a time. */
	struct mutex publish_mutex;
	/* Allocated on first publication, freed at unload. */
	struct gpupm_slot *slots[GPUPM_SLOTS];
	/* Open events per context id: what the daemon must publish. */
	atomic_t ctx_events[GPUPM_MAX_CONTEXTS];
	atomic64_t opened;
	/* Reads that found no consistent copy in GPUPM_READ_TRIES tries. */
	atomic64_t stale_reads;
};

static struct gpupm_state gpupm;

/* Indexed by id: the generated list is in id order. */
#define GPUPM_DEVICE_ONLY_ENTRY(id, name, device_only) device_only,
static const bool gpupm_device_only[GPUPM_EVENT_COUNT] = {
	GPUPM_EVENT_LIST(GPUPM_DEVICE_ONLY_ENTRY)
};

static u64 gpupm_field(const struct perf_event_attr *attr, unsigned int word,
		       unsigned int shift, unsigned int bits)
{
	u64 v = word ? attr->config1 : attr->config;

	return (v >> shift) & GENMASK_ULL(bits - 1, 0);
}

#define GPUPM_FIELD(attr, f) \
	gpupm_field(attr, GPUPM_##f##_WORD, GPUPM_##f##_SHIFT, GPUPM_##f##_BITS)

/* The slot an event config names, or a negative errno. */
static int gpupm_config_slot(const struct perf_event_attr *attr)
{
	u64 event = GPUPM_FIELD(attr, EVENT);
	u64 scope = GPUPM_FIELD(attr, SCOPE);
	u64 vm = GPUPM_FIELD(attr, VM);
	u64 ctx = GPUPM_FIELD(attr, CTX);

	if ((attr->config & ~GPUPM_CONFIG_USED) ||
	    (attr->config1 & ~GPUPM_CONFIG1_USED) || attr->config2)
		return -EINVAL;
	if (event >= GPUPM_EVENT_COUNT)
		return -EINVAL;
	if (scope == GPUPM_SCOPE_IMPLIED)
		scope = ctx ? GPUPM_SCOPE_CONTEXT :
			vm ? GPUPM_SCOPE_VM : GPUPM_SCOPE_SYSTEM;
	if (scope != GPUPM_SCOPE_SYSTEM && gpupm_device_only[event])
		return -EINVAL;
	switch (scope) {
	case GPUPM_SCOPE_SYSTEM:
		return vm || ctx ? -EINVAL : 0;
	case GPUPM_SCOPE_VM:
		return ctx || !vm || vm >= GPUPM_MAX_VMS ? -EINVAL : (int)vm;
	case GPUPM_SCOPE_CONTEXT:
		if (vm || !ctx || ctx >= GPUPM_MAX_CONTEXTS)
			return -EINVAL;
		return GPUPM_CTX_SLOT((int)ctx);
	default:
		return -EINVAL;
	}
}

/*
 * The value of (slot, event) now, in *v; false when no consistent copy was
 * read in GPUPM_READ_TRIES tries (the caller keeps its last good value).
 * The copy a reader uses is never the one being written, so a try fails
 * only when the writer moved on to the other copy during it: a reader
 * that interrupted the writer on its own CPU always succeeds, and a
 * reader on another CPU fails only against publications completing within
 * its few loads. Runs in any context, NMI included: no lock, no wait.
 */
static bool gpupm_value(int slot, unsigned int event, u64 *v)
{
	const struct gpupm_slot *s;
	const struct gpupm_totals *t;
	unsigned int seq, tries;
	u64 val;

	for (tries = 0; tries < GPUPM_READ_TRIES; tries++) {
		seq = raw_read_seqcount_latch(&gpupm.latch);
		s = READ_ONCE(gpupm.slots[slot]);
		t = s ? &s->copy[seq & 1] : NULL;
		val = t && t->seen ? t->base[event] + t->last[event] : 0;
		if (!raw_read_seqcount_latch_retry(&gpupm.latch, seq)) {
			*v = val;
			return true;
		}
	}
	atomic64_inc(&gpupm.stale_reads);
	return false;
}

/*
 * Adds what the counter advanced since the last good reading. Without a
 * consistent value it changes nothing: the next good reading adds the
 * whole difference, so nothing is lost. An event whose start found no
 * value takes its baseline at its first good reading.
 */
static void gpupm_event_update(struct perf_event *event)
{
	struct hw_perf_event *hwc = &event->hw;
	u64 prev, now;

	if (READ_ONCE(hwc->flags) & GPUPM_BASELINE_PENDING) {
		if (!gpupm_value(hwc->idx, hwc->config, &now))
			return;
		local64_set(&hwc->prev_count, now);
		WRITE_ONCE(hwc->flags, 0);
		return;
	}
	/* An NMI may update between our read and the exchange: read again. */
	do {
		prev = local64_read(&hwc->prev_count);
		if (!gpupm_value(hwc->idx, hwc->config, &now))
			return;
	} while (local64_cmpxchg(&hwc->prev_count, prev, now) != prev);
	local64_add(now - prev, &event->count);
}

static void gpupm_event_destroy(struct perf_event *event)
{
	int slot = event->hw.idx;

	if (slot >= GPUPM_MAX_VMS)
		atomic_dec(&gpupm.ctx_events[slot - GPUPM_MAX_VMS]);
}

/* Siblings may be software events or other gpupm events. */
static bool gpupm_group_valid(struct perf_event *event)
{
	struct perf_event *leader = event->group_leader;
	struct perf_event *sibling;

	if (leader != event && leader->pmu != event->pmu &&
	    !is_software_event(leader))
		return false;
	for_each_sibling_event(sibling, leader) {
		if (sibling->pmu != event->pmu && !is_software_event(sibling))
			return false;
	}
	return true;
}

static int gpupm_event_init(struct perf_event *event)
{
	struct hw_perf_event *hwc = &event->hw;
	int slot;

	if (event->attr.type != event->pmu->type)
		return -ENOENT;
	/* Every tenant's counters: for perfmon-capable callers only. */
	if (!perfmon_capable())
		return -EACCES;
	if (is_sampling_event(event))
		return -EOPNOTSUPP;
	/* A device counter, not a task's: system-wide (per-CPU) events only. */
	if (event->cpu < 0 || (event->attach_state & PERF_ATTACH_TASK))
		return -EINVAL;
	slot = gpupm_config_slot(&event->attr);
	if (slot < 0)
		return slot;
	if (!gpupm_group_valid(event))
		return -EINVAL;

	/* One CPU counts for all: perf opens one event per CPU in cpumask. */
	event->cpu = READ_ONCE(gpupm.cpu);
	hwc->idx = slot;
	hwc->config = GPUPM_FIELD(&event->attr, EVENT);
	if (slot >= GPUPM_MAX_VMS)
		atomic_inc(&gpupm.ctx_events[slot - GPUPM_MAX_VMS]);
	atomic64_inc(&gpupm.opened);
	event->destroy = gpupm_event_destroy;
	return 0;
}

static void gpupm_event_start(struct perf_event *event, int flags)
{
	struct hw_perf_event *hwc = &event->hw;
	u64 now;

	if (gpupm_value(hwc->idx, hwc->config, &now)) {
		local64_set(&hwc->prev_count, now);
		WRITE_ONCE(hwc->flags, 0);
	} else {
		WRITE_ONCE(hwc->flags, GPUPM_BASELINE_PENDING);
	}
	hwc->state = 0;
}

static void gpupm_event_stop(struct perf_event *event, int flags)
{
	struct hw_perf_event *hwc = &event->hw;

	if (hwc->state & PERF_HES_STOPPED)
		return;
	gpupm_event_update(event);
	hwc->state |= PERF_HES_STOPPED | PERF_HES_UPTODATE;
}

static int gpupm_event_add(struct perf_event *event, int flags)
{
	event->hw.state = PERF_HES_STOPPED | PERF_HES_UPTODATE;
	if (flags & PERF_EF_START)
		gpupm_event_start(event, flags);
	return 0;
}

static void gpupm_event_del(struct perf_event *event, int flags)
{
	gpupm_event_stop(event, PERF_EF_UPDATE);
}

static void gpupm_event_read(struct perf_event *event)
{
	gpupm_event_update(event);
}

/* sysfs: format/, events/, cpumask */

#define GPUPM_FORMAT_ATTR(name, NAME) PMU_FORMAT_ATTR(name, GPUPM_##NAME##_FORMAT)
GPUPM_FORMAT_ATTR(event, EVENT);
GPUPM_FORMAT_ATTR(scope, SCOPE);
GPUPM_FORMAT_ATTR(vm, VM);
GPUPM_FORMAT_ATTR(ctx, CTX);

static struct attribute *gpupm_format_attrs[] = {
	&format_attr_event.attr,
	&format_attr_scope.attr,
	&format_attr_vm.attr,
	&format_attr_ctx.attr,
	NULL,
};

static const struct attribute_group gpupm_format_group = {
	.name = "format",
	.attrs = gpupm_format_attrs,
};

#define GPUPM_EVENT_ATTR(id, name, device_only) \
	PMU_EVENT_ATTR_STRING(name, gpupm_event_attr_##name, "event=" #id)
GPUPM_EVENT_LIST(GPUPM_EVENT_ATTR)

#define GPUPM_EVENT_ATTR_PTR(id, name, device_only) \
	(&gpupm_event_attr_##name.attr.attr),
static struct attribute *gpupm_event_attrs[] = {
	GPUPM_EVENT_LIST(GPUPM_EVENT_ATTR_PTR)
	NULL,
};

static const struct attribute_group gpupm_events_group = {
	.name = "events",
	.attrs = gpupm_event_attrs,
};

static ssize_t cpumask_show(struct device *dev, struct device_attribute *attr,
			    char *buf)
{
	return cpumap_print_to_pagebuf(true, buf, cpumask_of(READ_ONCE(gpupm.cpu)));
}
static DEVICE_ATTR_RO(cpumask);

static ssize_t stale_reads_show(struct device *dev,
				struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&gpupm.stale_reads));
}
static DEVICE_ATTR_RO(stale_reads);

static struct attribute *gpupm_cpumask_attrs[] = {
	&dev_attr_cpumask.attr,
	&dev_attr_stale_reads.attr,
	NULL,
};

static const struct attribute_group gpupm_cpumask_group = {
	.attrs = gpupm_cpumask_attrs,
};

static const struct attribute_group *gpupm_attr_groups[] = {
	&gpupm_format_group,
	&gpupm_events_group,
	&gpupm_cpumask_group,
	NULL,
};

/* Publication: /dev/gpupm_pmu */

/* The slot a published entry names, or a negative errno. */
static int gpupm_entry_slot(const struct gpupm_pmu_scope_totals *e)
{
	unsigned int i;

	for (i = GPUPM_EVENT_COUNT; i < GPUPM_MAX_EVENTS; i++)
		if (e->counters[i])
			return -EINVAL;
	switch (e->scope) {
	case GPUPM_SCOPE_SYSTEM:
		return e->id || e->generation ? -EINVAL : 0;
	case GPUPM_SCOPE_VM:
		if (!e->id || e->id >= GPUPM_MAX_VMS || e->generation)
			return -EINVAL;
		return e->id;
	case GPUPM_SCOPE_CONTEXT:
		if (!e->id || e->id >= GPUPM_MAX_CONTEXTS)
			return -EINVAL;
		return GPUPM_CTX_SLOT(e->id);
	default:
		return -EINVAL;
	}
}

static void gpupm_apply(struct gpupm_totals *t,
			const struct gpupm_pmu_scope_totals *e)
{
	unsigned int i;
	bool new_instance = t->seen && e->generation != t->generation;

	for (i = 0; i < GPUPM_EVENT_COUNT; i++) {
		u64 total = e->counters[i];

		if (!t->seen)
			t->base[i] = -total;
		else if (new_instance || total < t->last[i])
			t->base[i] += t->last[i];
		t->last[i] = total;
	}
	t->seen = true;
	t->generation = e->generation;
}

/*
 * Applies a checked request to copy `which` of its slots. Both copies
 * receive the same requests in the same order, so they stay equal.
 * Out of line so that the kernel lane can put a kprobe inside the write
 * section (the reader it runs there stands for an NMI; docs/kernel.md).
 */
static noinline __noclone void
gpupm_apply_copy(unsigned int which, const struct gpupm_pmu_publish *req,
		 const int *slots)
{
	unsigned int i;

	for (i = 0; i < req->count; i++)
		gpupm_apply(&gpupm.slots[slots[i]]->copy[which], &req->entries[i]);
}

static long gpupm_publish(struct gpupm_pmu_publish *req)
{
	struct gpupm_slot *fresh[GPUPM_PMU_PUBLISH_BATCH] = { NULL };
	int slots[GPUPM_PMU_PUBLISH_BATCH];
	unsigned int i, j;
	long ret = 0;

	if (req->version != GPUPM_PMU_STRUCT_VERSION || !req->count ||
	    req->count > GPUPM_PMU_PUBLISH_BATCH)
		return -EINVAL;
	if (memchr_inv(&req->entries[req->count], 0,
		       (GPUPM_PMU_PUBLISH_BATCH - req->count) *
		       sizeof(req->entries[0])))
		return -EINVAL;
	for (i = 0; i < req->count; i++) {
		slots[i] = gpupm_entry_slot(&req->entries[i]);
		if (slots[i] < 0)
			return slots[i];
	}

	mutex_lock(&gpupm.publish_mutex);
	for (i = 0; i < req->count; i++) {
		if (gpupm.slots[slots[i]])
			continue;
		for (j = 0; j < i && slots[j] != slots[i]; j++)
			;
		if (j < i)
			continue;
		fresh[i] = kzalloc(sizeof(*fresh[i]), GFP_KERNEL);
		if (!fresh[i]) {
			ret = -ENOMEM;
			goto out;
		}
	}
	/* A new slot reads 0 in both copies until its first update. */
	for (i = 0; i < req->count; i++) {
		if (fresh[i]) {
			/* Zeroed before seen: pairs with gpupm_value()'s dependent load. */
			smp_store_release(&gpupm.slots[slots[i]], fresh[i]);
			fresh[i] = NULL;
		}
	}
	/* Readers on copy 1 while copy 0 changes, then the other way. */
	raw_write_seqcount_latch(&gpupm.latch);
	gpupm_apply_copy(0, req, slots);
	raw_write_seqcount_latch(&gpupm.latch);
	gpupm_apply_copy(1, req, slots);
out:
	mutex_unlock(&gpupm.publish_mutex);
	for (i = 0; i < req->count; i++)
		kfree(fresh[i]);
	return ret;
}

static long gpupm_wanted(struct gpupm_pmu_wanted __user *arg)
{
	struct gpupm_pmu_wanted *w;
	unsigned int c;
	long ret = 0;

	w = memdup_user(arg, sizeof(*w));
	if (IS_ERR(w))
		return PTR_ERR(w);
	if (w->version != GPUPM_PMU_STRUCT_VERSION || w->reserved) {
		ret = -EINVAL;
		goto out;
	}
	w->opened = atomic64_read(&gpupm.opened);
	memset(w->contexts, 0, sizeof(w->contexts));
	for (c = 1; c < GPUPM_MAX_CONTEXTS; c++)
		if (atomic_read(&gpupm.ctx_events[c]))
			w->contexts[c / 64] |= 1ULL << (c % 64);
	if (copy_to_user(arg, w, sizeof(*w)))
		ret = -EFAULT;
out:
	kfree(w);
	return ret;
}

static long gpupm_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct gpupm_pmu_publish *req;
	long ret;

	switch (cmd) {
	case GPUPM_PMU_IOC_PUBLISH:
		req = memdup_user((void __user *)arg, sizeof(*req));
		if (IS_ERR(req))
			return PTR_ERR(req);
		ret = gpupm_publish(req);
		kfree(req);
		return ret;
	case GPUPM_PMU_IOC_WANTED:
		return gpupm_wanted((struct gpupm_pmu_wanted __user *)arg);
	default:
		return -ENOTTY;
	}
}

static int gpupm_open(struct inode *inode, struct file *file)
{
	return capable(CAP_SYS_ADMIN) ? 0 : -EPERM;
}

static const struct file_operations gpupm_fops = {
	.owner = THIS_MODULE,
	.open = gpupm_open,
	.unlocked_ioctl = gpupm_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice gpupm_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = GPUPM_PMU_DEVICE_NAME,
	.fops = &gpupm_fops,
	.mode = 0600,
};

/* The designated CPU going offline hands its events to another one. */
static int gpupm_cpu_offline(unsigned int cpu)
{
	unsigned int target;

	if (cpu != gpupm.cpu)
		return 0;
	target = cpumask_any_but(cpu_online_mask, cpu);
	if (target >= nr_cpu_ids)
		return 0;
	perf_pmu_migrate_context(&gpupm.pmu, cpu, target);
	WRITE_ONCE(gpupm.cpu, target);
	return 0;
}

static int __init gpupm_init(void)
{
	int ret;

	seqcount_latch_init(&gpupm.latch);
	mutex_init(&gpupm.publish_mutex);
	gpupm.pmu = (struct pmu) {
		.module = THIS_MODULE,
		.task_ctx_nr = perf_invalid_context,
		.capabilities = PERF_PMU_CAP_NO_EXCLUDE | PERF_PMU_CAP_NO_INTERRUPT,
		.attr_groups = gpupm_attr_groups,
		.event_init = gpupm_event_init,
		.add = gpupm_event_add,
		.del = gpupm_event_del,
		.start = gpupm_event_start,
		.stop = gpupm_event_stop,
		.read = gpupm_event_read,
	};

	/*
	 * The CPU loading the module counts (as arm-ccn and the SMMUv3 PMU
	 * choose theirs): online, and kept online by the lock until the
	 * offline callback that moves its events is installed.
	 */
	cpus_read_lock();
	gpupm.cpu = raw_smp_processor_id();
	ret = perf_pmu_register(&gpupm.pmu, GPUPM_PMU_NAME, -1);
	if (ret) {
		cpus_read_unlock();
		return ret;
	}
	ret = cpuhp_setup_state_nocalls_cpuslocked(CPUHP_AP_ONLINE_DYN,
						   "perf/gpupm:online", NULL,
						   gpupm_cpu_offline);
	cpus_read_unlock();
	if (ret < 0)
		goto err_pmu;
	gpupm.hp_state = ret;

	ret = misc_register(&gpupm_misc);
	if (ret)
		goto err_hp;
	pr_info("gpupm_pmu: PMU %s (type %d) on CPU %u, publication device /dev/%s\n",
		GPUPM_PMU_NAME, gpupm.pmu.type, gpupm.cpu, GPUPM_PMU_DEVICE_NAME);
	return 0;

err_hp:
	cpuhp_remove_state_nocalls(gpupm.hp_state);
err_pmu:
	perf_pmu_unregister(&gpupm.pmu);
	return ret;
}

/*
 * Every open event holds a module reference (pmu.module) and so does every
 * open publication file (fops.owner): exit runs with neither. The hotplug
 * callback goes before the PMU, so no migration can run on a PMU being
 * unregistered.
 */
static void __exit gpupm_exit(void)
{
	unsigned int i;

	misc_deregister(&gpupm_misc);
	cpuhp_remove_state_nocalls(gpupm.hp_state);
	perf_pmu_unregister(&gpupm.pmu);
	for (i = 0; i < GPUPM_SLOTS; i++)
		kfree(gpupm.slots[i]);
}

module_init(gpupm_init);
module_exit(gpupm_exit);

MODULE_DESCRIPTION("perf PMU for the gpupm GPU performance-monitoring device");
MODULE_LICENSE("GPL");
