//! Prints the Python constants module of the device-node ABI:
//! `cargo run -p gpupm-uapi --example gen_py > tests/clients/gpupm_uapi.py`.
//! `uapi/tests/py_consts.rs` checks that the committed file matches.

use std::fmt::Write;
use std::mem::size_of;

use gpupm_uapi::intr::{self, InterruptRecord};
use gpupm_uapi::ioctl::{
    self, Advance, Identity, LedgerQuery, RegAccess, RegBatch, RegOp, Reset, WindowRead,
};
use gpupm_uapi::{layout, map, regs, sampling};

/// The generated module's text.
pub fn render() -> String {
    let mut s = String::from(
        "# Generated from the gpupm-uapi crate by\n\
         # `cargo run -p gpupm-uapi --example gen_py`; do not edit.\n\n",
    );
    let mut c = |name: &str, v: u64| writeln!(s, "{name} = {v:#x}").expect("write to String");
    c("ABI_VERSION", u64::from(gpupm_uapi::ABI_VERSION));
    c(
        "IOCTL_STRUCT_VERSION",
        u64::from(ioctl::IOCTL_STRUCT_VERSION),
    );
    c("MAX_BATCH_OPS", ioctl::MAX_BATCH_OPS as u64);
    c("WINDOW_READ_MAX", ioctl::WINDOW_READ_MAX as u64);
    // GPUPM_IOC_WINDOW_READ(len) = this | (SIZEOF_WINDOW_READ + len) << 16
    c(
        "GPUPM_IOC_WINDOW_READ_BASE",
        u64::from(ioctl::window_read_cmd(0) & !(0x3fff << 16)),
    );
    for &(name, cmd) in ioctl::DEVICE_IOCTLS {
        c(name, u64::from(cmd));
    }
    c("REG_OP_READ", u64::from(ioctl::reg_op::READ));
    c("REG_OP_WRITE", u64::from(ioctl::reg_op::WRITE));
    c("MEM_WINDOW_OFFSET", layout::MEM_WINDOW_OFFSET);
    c("BAR0_SIZE", regs::BAR0_SIZE);
    c("DEVICE_MAGIC", u64::from(regs::DEVICE_MAGIC));
    c("RESET_MAGIC", u64::from(regs::RESET_MAGIC));
    for (name, value) in register_values() {
        c(&name, value);
    }
    c("TRIG_CMD_TRIGGER", u64::from(regs::trig_cmd::TRIGGER));
    c("MBOX_OP_GET_CAPS", u64::from(regs::mbox_op::GET_CAPS));
    for (bit, name) in intr::SOURCE_NAMES.iter().enumerate() {
        c(&format!("INTR_{}", name.to_uppercase()), 1 << bit);
    }
    for (name, size) in [
        ("SIZEOF_IDENTITY", size_of::<Identity>()),
        ("SIZEOF_REG_OP", size_of::<RegOp>()),
        ("SIZEOF_REG_BATCH", size_of::<RegBatch>()),
        ("SIZEOF_ADVANCE", size_of::<Advance>()),
        ("SIZEOF_LEDGER_QUERY", size_of::<LedgerQuery>()),
        ("SIZEOF_RESET", size_of::<Reset>()),
        ("SIZEOF_REG_ACCESS", size_of::<RegAccess>()),
        ("SIZEOF_WINDOW_READ", size_of::<WindowRead>()),
        ("SIZEOF_INTERRUPT_RECORD", size_of::<InterruptRecord>()),
        (
            "SIZEOF_CC_KEY_EXCHANGE",
            size_of::<gpupm_uapi::cc::KeyExchange>(),
        ),
        ("SIZEOF_CC_FINISH", size_of::<gpupm_uapi::cc::Finish>()),
    ] {
        writeln!(s, "{name} = {size}").expect("write to String");
    }
    s.push_str(
        "\n# struct formats (little-endian, no implicit padding)\n\
         FMT_IDENTITY = '<10IQ'\n\
         FMT_REG_OP = '<QQII'\n\
         FMT_REG_BATCH_HEAD = '<4I'\n\
         FMT_ADVANCE = '<IIQQ'\n\
         FMT_RESET = '<II'\n\
         FMT_REG_ACCESS = '<IIQQII'\n\
         FMT_WINDOW_READ = '<IIQ'\n\
         FMT_INTERRUPT_RECORD = '<QQIIII'\n",
    );
    s
}

/// Every register of the map as `REG_<name>` (its offset as declared:
/// absolute for a fixed block, inside the instance for an array), then
/// the layout offsets, bits, limits and sizes the Python clients use.
fn register_values() -> Vec<(String, u64)> {
    let mut values: Vec<(String, u64)> = map::BLOCKS
        .iter()
        .flat_map(|block| {
            block
                .regs
                .iter()
                .chain(block.sets.iter().flat_map(|set| set.regs))
        })
        .map(|reg| (format!("REG_{}", reg.name), reg.offset))
        .collect();
    values.extend(others().into_iter().map(|(name, v)| (name.to_string(), v)));
    values
}

/// Values beside the registers, in the module's order.
fn others() -> Vec<(&'static str, u64)> {
    vec![
        ("REG_PART_BASE", regs::PART_BASE),
        ("REG_PART_STRIDE", regs::PART_STRIDE),
        ("MAX_PARTITION_SLOTS", u64::from(regs::MAX_PARTITION_SLOTS)),
        (
            "PART_STATUS_CONFIGURED",
            u64::from(regs::part_status::CONFIGURED),
        ),
        ("TRIG_CMD_FLUSH_ULC", u64::from(regs::trig_cmd::FLUSH_ULC)),
        (
            "LEDGER_SCOPE_SYSTEM",
            u64::from(ioctl::ledger_scope::SYSTEM),
        ),
        ("MAX_EVENTS", gpupm_uapi::events::MAX_EVENTS as u64),
        ("SIZEOF_ENVELOPE", size_of::<layout::Envelope>() as u64),
        ("SIZEOF_BLOCK_SLOT", size_of::<layout::BlockSlot>() as u64),
        ("SAMP_BASE", sampling::SAMP_BASE),
        ("SAMP_STRIDE", sampling::SAMP_STRIDE),
        ("REG_SAMP_BUF_BRANCH", sampling::SAMP_BUF_BRANCH),
        ("REG_SAMP_BUF_PC", sampling::SAMP_BUF_PC),
        ("SAMPLE_REGION", sampling::SAMPLE_REGION),
        ("SAMPLE_SPAN", sampling::SAMPLE_SPAN),
        (
            "SAMP_CTRL_BRANCH_ENABLE",
            u64::from(sampling::samp_ctrl::BRANCH_ENABLE),
        ),
        (
            "SAMP_CTRL_CYCLE_ENABLE",
            u64::from(sampling::samp_ctrl::CYCLE_ENABLE),
        ),
        (
            "SIZEOF_BRANCH_SLOT",
            size_of::<sampling::BranchSlot>() as u64,
        ),
        ("SIZEOF_PC_SLOT", size_of::<sampling::PcSlot>() as u64),
    ]
}
