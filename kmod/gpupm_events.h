/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gpupm_pmu: the event catalogue, the perf config fields and the
 * publication ABI, generated from the gpupm-uapi crate by
 * `cargo run -p gpupm-uapi --example gen_kmod`; do not edit.
 * uapi/src/pmu.rs and uapi/src/events.rs document every item.
 */
#ifndef GPUPM_EVENTS_H
#define GPUPM_EVENTS_H

#include <linux/build_bug.h>
#include <linux/ioctl.h>
#include <linux/stddef.h>
#include <linux/types.h>

#define GPUPM_PMU_NAME "gpupm"
#define GPUPM_PMU_DEVICE_NAME "gpupm_pmu"
#define GPUPM_MAX_EVENTS 64
#define GPUPM_EVENT_COUNT 39
#define GPUPM_MAX_VMS 64
#define GPUPM_MAX_CONTEXTS 4096

/* perf config fields: GPUPM_<NAME>_WORD (0 = config, 1 = config1), _SHIFT, _BITS, _FORMAT. */
#define GPUPM_EVENT_WORD 0
#define GPUPM_EVENT_SHIFT 0
#define GPUPM_EVENT_BITS 16
#define GPUPM_EVENT_FORMAT "config:0-15"
#define GPUPM_SCOPE_WORD 0
#define GPUPM_SCOPE_SHIFT 16
#define GPUPM_SCOPE_BITS 4
#define GPUPM_SCOPE_FORMAT "config:16-19"
#define GPUPM_VM_WORD 1
#define GPUPM_VM_SHIFT 0
#define GPUPM_VM_BITS 16
#define GPUPM_VM_FORMAT "config1:0-15"
#define GPUPM_CTX_WORD 1
#define GPUPM_CTX_SHIFT 16
#define GPUPM_CTX_BITS 16
#define GPUPM_CTX_FORMAT "config1:16-31"
#define GPUPM_CONFIG_USED 0xfffffULL
#define GPUPM_CONFIG1_USED 0xffffffffULL

/* Values of the scope field. */
#define GPUPM_SCOPE_IMPLIED 0
#define GPUPM_SCOPE_CONTEXT 1
#define GPUPM_SCOPE_VM 2
#define GPUPM_SCOPE_SYSTEM 3

/*
 * Every catalogue event: X(id, name, device_only). A device-only event
 * (NVLink) is counted in the system block alone.
 */
#define GPUPM_EVENT_LIST(X) \
	X(0, sm_cycles_elapsed, 0) \
	X(1, sm_cycles_active, 0) \
	X(2, sm_issue_active, 0) \
	X(3, sm_inst_executed, 0) \
	X(4, sm_threads_active, 0) \
	X(5, sm_warps_active, 0) \
	X(6, sm_warps_launched, 0) \
	X(7, sm_inst_fp32, 0) \
	X(8, sm_inst_fp64, 0) \
	X(9, sm_tensor_active, 0) \
	X(10, sm_ld_global, 0) \
	X(11, sm_st_global, 0) \
	X(12, sm_ld_shared, 0) \
	X(13, sm_st_shared, 0) \
	X(14, sm_l1_hit, 0) \
	X(15, sm_l1_miss, 0) \
	X(16, sm_branch, 0) \
	X(17, sm_branch_divergent, 0) \
	X(18, sm_stall_memory, 0) \
	X(19, sm_stall_sync, 0) \
	X(20, sm_atomic, 0) \
	X(21, l2_read_req, 0) \
	X(22, l2_write_req, 0) \
	X(23, l2_hit, 0) \
	X(24, l2_miss, 0) \
	X(25, l2_cycles_active, 0) \
	X(26, l2_atomic, 0) \
	X(27, fb_read_sectors, 0) \
	X(28, fb_write_sectors, 0) \
	X(29, fb_cycles_active, 0) \
	X(30, fb_bytes, 0) \
	X(31, ce_cycles_active, 0) \
	X(32, ce_bytes, 0) \
	X(33, pcie_rx_bytes, 0) \
	X(34, pcie_tx_bytes, 0) \
	X(35, pcie_cycles_active, 0) \
	X(36, nvlink_rx_flits, 1) \
	X(37, nvlink_tx_flits, 1) \
	X(38, nvlink_cycles_active, 1)

/* The publication device's ioctls. */
#define GPUPM_PMU_IOC_MAGIC 0x50
#define GPUPM_PMU_STRUCT_VERSION 1
#define GPUPM_PMU_PUBLISH_BATCH 16
#define GPUPM_PMU_WANTED_WORDS 64

struct gpupm_pmu_scope_totals {
	__u32 scope;
	__u32 id;
	__u64 generation;
	__u64 counters[GPUPM_MAX_EVENTS];
};

struct gpupm_pmu_publish {
	__u32 version;
	__u32 count;
	struct gpupm_pmu_scope_totals entries[GPUPM_PMU_PUBLISH_BATCH];
};

struct gpupm_pmu_wanted {
	__u32 version;
	__u32 reserved;
	__u64 opened;
	__u64 contexts[GPUPM_PMU_WANTED_WORDS];
};

#define GPUPM_PMU_IOC_PUBLISH _IOW(GPUPM_PMU_IOC_MAGIC, 0x00, struct gpupm_pmu_publish)
#define GPUPM_PMU_IOC_WANTED _IOWR(GPUPM_PMU_IOC_MAGIC, 0x01, struct gpupm_pmu_wanted)

/* Sizes, offsets and ioctl numbers as Rust computes them. */
static_assert(sizeof(struct gpupm_pmu_scope_totals) == 528);
static_assert(offsetof(struct gpupm_pmu_scope_totals, generation) == 8);
static_assert(offsetof(struct gpupm_pmu_scope_totals, counters) == 16);
static_assert(sizeof(struct gpupm_pmu_publish) == 8456);
static_assert(offsetof(struct gpupm_pmu_publish, entries) == 8);
static_assert(sizeof(struct gpupm_pmu_wanted) == 528);
static_assert(offsetof(struct gpupm_pmu_wanted, opened) == 8);
static_assert(offsetof(struct gpupm_pmu_wanted, contexts) == 16);
static_assert(GPUPM_PMU_IOC_PUBLISH == 0x61085000U);
static_assert(GPUPM_PMU_IOC_WANTED == 0xc2105001U);

#endif /* GPUPM_EVENTS_H */
