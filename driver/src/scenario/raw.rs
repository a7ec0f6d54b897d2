//! The scenario file as written: serde structs that mirror the TOML exactly.
//!
//! Every key is optional here unless serde itself can check it; semantic
//! checks (ranges, references, `_us`/`_cycles` pairs) happen in
//! [`super::validate`], which needs the [`Spanned`] positions kept below to
//! point an error at the offending value.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// A quantity of time given either in microseconds or in cycles.
pub(super) type Us = Option<Spanned<u64>>;
/// The cycle form of a time quantity.
pub(super) type Cycles = Option<Spanned<u64>>;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub name: Option<String>,
    pub seed: Option<u64>,
    pub clock: Option<RawClock>,
    pub identity: Option<RawIdentity>,
    pub topology: Option<RawTopology>,
    pub trigger: Option<RawTrigger>,
    pub stream: Option<RawStream>,
    pub oob: Option<RawOob>,
    pub switch_timeout_us: Us,
    pub switch_timeout_cycles: Cycles,
    #[serde(default)]
    pub partition: Vec<Spanned<RawPartition>>,
    #[serde(default)]
    pub vm: Vec<RawVm>,
    #[serde(default)]
    pub profile: Vec<RawProfile>,
    pub device_profile: Option<Spanned<String>>,
    #[serde(default)]
    pub context: Vec<Spanned<RawContext>>,
    #[serde(default)]
    pub churn: Vec<Spanned<RawChurn>>,
    #[serde(default)]
    pub throttle: Vec<Spanned<RawThrottle>>,
    #[serde(default)]
    pub migrate: Vec<Spanned<RawMigrate>>,
    #[serde(default)]
    pub program: Vec<Spanned<RawProgram>>,
}

/// One `[[program]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProgram {
    pub name: Spanned<String>,
    pub entry: Option<Spanned<String>>,
    #[serde(default)]
    pub kernel: Vec<Spanned<RawKernel>>,
}

/// One `[[program.kernel]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKernel {
    pub name: Spanned<String>,
    #[serde(default)]
    pub block: Vec<Spanned<RawBlock>>,
}

/// One `[[program.kernel.block]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBlock {
    pub name: Option<Spanned<String>>,
    pub instructions: Spanned<u32>,
    pub cpi: Option<Spanned<f64>>,
    pub phase_cpi: Option<Spanned<Vec<Spanned<f64>>>>,
    pub throttle: Option<Spanned<f64>>,
    pub branch: Option<Spanned<Vec<Spanned<RawEdge>>>>,
    pub jump: Option<Spanned<String>>,
    #[serde(rename = "loop")]
    pub loop_: Option<Spanned<RawLoop>>,
    pub call: Option<Spanned<String>>,
    pub ret: Option<Spanned<bool>>,
    pub marker: Option<Spanned<bool>>,
    pub data: Option<Spanned<RawData>>,
}

/// The data addresses a block touches.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawData {
    pub base: Spanned<u32>,
    pub stride: Spanned<u32>,
    pub span: Spanned<u32>,
}

/// A conditional branch edge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEdge {
    pub to: Spanned<String>,
    pub p: Spanned<f64>,
}

/// A loop back edge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLoop {
    pub to: Spanned<String>,
    pub trips: Spanned<u32>,
}

/// `[identity]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdentity {
    pub index: Option<Spanned<u32>>,
    pub pci_address: Option<Spanned<String>>,
    pub uuid: Option<Spanned<String>>,
    pub serial: Option<Spanned<String>>,
    pub model: Option<Spanned<String>>,
}

/// `[clock]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClock {
    pub mhz: Option<Spanned<u64>>,
    pub khz: Option<Spanned<u64>>,
    pub secondary_mhz: Option<Spanned<u64>>,
    pub secondary_khz: Option<Spanned<u64>>,
}

/// `[topology]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopology {
    pub sms_per_gpc: Option<Spanned<Vec<Spanned<u32>>>>,
    pub memory_slices: Option<Spanned<u32>>,
    pub l2_per_slice: Option<Spanned<u32>>,
    pub fb_per_slice: Option<Spanned<u32>>,
    pub ce_per_slice: Option<Spanned<u32>>,
    pub nvlinks: Option<Spanned<u32>>,
    pub pcie: Option<bool>,
}

/// `[trigger]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTrigger {
    pub period_us: Us,
    pub period_cycles: Cycles,
    pub dither: Option<bool>,
    pub threshold: Option<Spanned<u32>>,
}

/// `[stream]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStream {
    pub ring_records: Option<Spanned<u32>>,
    pub watermark: Option<Spanned<u32>>,
}

/// `[oob]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOob {
    pub period_us: Us,
    pub period_cycles: Cycles,
    pub host_timeout_us: Us,
    pub host_timeout_cycles: Cycles,
}

/// One `[[partition]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPartition {
    pub slot: Spanned<u32>,
    pub gpcs: Spanned<Vec<Spanned<u32>>>,
    pub memory_slices: Spanned<Vec<Spanned<u32>>>,
    pub ctx_timeslice_us: Us,
    pub ctx_timeslice_cycles: Cycles,
    pub vm_timeslice_us: Us,
    pub vm_timeslice_cycles: Cycles,
    pub ri_version: Option<Spanned<u32>>,
    pub ri_max_rgs: Option<Spanned<u32>>,
}

/// One `[[vm]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVm {
    pub id: Spanned<u32>,
    pub partition: Spanned<u32>,
    pub confidential: Option<Spanned<bool>>,
    pub confidential_key: Option<Spanned<String>>,
}

/// One `[[profile]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    pub name: Spanned<String>,
    pub program: Option<Spanned<String>>,
    #[serde(default)]
    pub phase: Vec<Spanned<RawPhase>>,
}

/// One `[[profile.phase]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPhase {
    pub duration_us: Us,
    pub duration_cycles: Cycles,
    #[serde(default)]
    pub rates: BTreeMap<Spanned<String>, Spanned<f64>>,
}

/// One `[[context]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawContext {
    pub vm: Spanned<u32>,
    pub profile: Spanned<String>,
    pub create_at_us: Us,
    pub create_at_cycles: Cycles,
    pub destroy_at_us: Us,
    pub destroy_at_cycles: Cycles,
}

/// One `[[churn]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChurn {
    pub vm: Spanned<u32>,
    pub profiles: Spanned<Vec<Spanned<String>>>,
    pub start_at_us: Us,
    pub start_at_cycles: Cycles,
    pub every_us: Us,
    pub every_cycles: Cycles,
    pub lifetime_us: Us,
    pub lifetime_cycles: Cycles,
    pub stop_at_us: Us,
    pub stop_at_cycles: Cycles,
}

/// One `[[throttle]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawThrottle {
    pub start_us: Us,
    pub start_cycles: Cycles,
    pub end_us: Us,
    pub end_cycles: Cycles,
}

/// One `[[migrate]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMigrate {
    pub at_us: Us,
    pub at_cycles: Cycles,
    pub vm: Spanned<u32>,
    pub to: Spanned<u32>,
}
