# Generated from the gpupm-uapi crate by
# `cargo run -p gpupm-uapi --example gen_py_tenant > examples/python/gpupm_tenant.py`;
# do not edit. The tenant-node ABI (uapi/src/tenant.rs): ioctl numbers,
# struct sizes and field offsets (all fields little-endian).

ABI_VERSION = 0x10001
TENANT_STRUCT_VERSION = 0x1
TENANT_IOC_WHOAMI = 0xc1105400
TENANT_IOC_LIST_CONTEXTS = 0xd0185401
TENANT_IOC_READ_COUNTERS = 0xc4f85402
TENANT_IOC_READ_RATES = 0xe1a05403
TENANT_IOC_OPEN_STREAM = 0x40105404
TENANT_IOC_EVENT_INFO = 0xc0a05405
SCOPE_CONTEXT = 0x1
SCOPE_VM = 0x2
SCOPE_SYSTEM = 0x3
CTX_STATE_ACTIVE = 0x1
CTX_STATE_DESTROYED = 0x2
CTX_STATE_RETIRED = 0x3
COUNTER_FLAGS_SEALED = 0x1
MAX_EVENTS = 64
EVENT_COUNT = 39
MAX_CALLER_VMS = 64
LIST_PAGE = 256
RATE_SAMPLES = 16

# Event names indexed by id (the names `gpupm stat -e` takes).
EVENT_NAMES = (
    "sm_cycles_elapsed",
    "sm_cycles_active",
    "sm_issue_active",
    "sm_inst_executed",
    "sm_threads_active",
    "sm_warps_active",
    "sm_warps_launched",
    "sm_inst_fp32",
    "sm_inst_fp64",
    "sm_tensor_active",
    "sm_ld_global",
    "sm_st_global",
    "sm_ld_shared",
    "sm_st_shared",
    "sm_l1_hit",
    "sm_l1_miss",
    "sm_branch",
    "sm_branch_divergent",
    "sm_stall_memory",
    "sm_stall_sync",
    "sm_atomic",
    "l2_read_req",
    "l2_write_req",
    "l2_hit",
    "l2_miss",
    "l2_cycles_active",
    "l2_atomic",
    "fb_read_sectors",
    "fb_write_sectors",
    "fb_cycles_active",
    "fb_bytes",
    "ce_cycles_active",
    "ce_bytes",
    "pcie_rx_bytes",
    "pcie_tx_bytes",
    "pcie_cycles_active",
    "nvlink_rx_flits",
    "nvlink_tx_flits",
    "nvlink_cycles_active",
)

SIZEOF_WHOAMI = 272
OFF_WHOAMI_VERSION = 0
OFF_WHOAMI_ADMIN = 4
OFF_WHOAMI_UID = 8
OFF_WHOAMI_N_VMS = 12
OFF_WHOAMI_VMS = 16
SIZEOF_CTX_ENTRY = 16
OFF_CTX_ENTRY_CTX = 0
OFF_CTX_ENTRY_STATE = 4
OFF_CTX_ENTRY_CREATED_CYCLE = 8
SIZEOF_LIST_CONTEXTS = 4120
OFF_LIST_CONTEXTS_VERSION = 0
OFF_LIST_CONTEXTS_VM = 4
OFF_LIST_CONTEXTS_OFFSET = 8
OFF_LIST_CONTEXTS_COUNT = 12
OFF_LIST_CONTEXTS_TOTAL = 16
OFF_LIST_CONTEXTS_RESERVED = 20
OFF_LIST_CONTEXTS_CTXS = 24
SIZEOF_READ_COUNTERS = 1272
OFF_READ_COUNTERS_VERSION = 0
OFF_READ_COUNTERS_SCOPE = 4
OFF_READ_COUNTERS_ID = 8
OFF_READ_COUNTERS_N_EVENTS = 12
OFF_READ_COUNTERS_EVENTS = 16
OFF_READ_COUNTERS_FLAGS = 144
OFF_READ_COUNTERS_RESERVED = 148
OFF_READ_COUNTERS_COMMIT_SEQ = 152
OFF_READ_COUNTERS_CYCLE = 160
OFF_READ_COUNTERS_VALUES = 168
OFF_READ_COUNTERS_SEALED = 680
SIZEOF_RATE_SAMPLE = 536
OFF_RATE_SAMPLE_START_CYCLE = 0
OFF_RATE_SAMPLE_END_CYCLE = 8
OFF_RATE_SAMPLE_FLAGS = 16
OFF_RATE_SAMPLE_CTX = 20
OFF_RATE_SAMPLE_DELTAS = 24
SIZEOF_READ_RATES = 8608
OFF_READ_RATES_VERSION = 0
OFF_READ_RATES_SCOPE = 4
OFF_READ_RATES_ID = 8
OFF_READ_RATES_MAX = 12
OFF_READ_RATES_COUNT = 16
OFF_READ_RATES_FLAGS = 20
OFF_READ_RATES_CLOCK_KHZ = 24
OFF_READ_RATES_RESERVED = 28
OFF_READ_RATES_SAMPLES = 32
SIZEOF_OPEN_STREAM = 16
OFF_OPEN_STREAM_VERSION = 0
OFF_OPEN_STREAM_SCOPE = 4
OFF_OPEN_STREAM_ID = 8
OFF_OPEN_STREAM_FLAGS = 12
SIZEOF_TENANT_DELTA = 624
OFF_TENANT_DELTA_SEQ = 0
OFF_TENANT_DELTA_LOST_BEFORE = 8
OFF_TENANT_DELTA_SLOT = 16
SIZEOF_EVENT_INFO = 160
OFF_EVENT_INFO_VERSION = 0
OFF_EVENT_INFO_ID = 4
OFF_EVENT_INFO_UNIT_TYPE = 8
OFF_EVENT_INFO_MULTIBIT = 9
OFF_EVENT_INFO_SCOPE = 10
OFF_EVENT_INFO_RESERVED = 11
OFF_EVENT_INFO_RESERVED2 = 12
OFF_EVENT_INFO_NAME = 16
OFF_EVENT_INFO_MEASURE = 48
OFF_EVENT_INFO_DESCRIPTION = 64
