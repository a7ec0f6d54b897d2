//! A device's identity as the command line shows it: in every `--json`
//! that reads the device node (`gpu`), and as the heading line of tables.

use gpupm_client::identity::{read_identity, GpuIdentity};
use gpupm_client::{DevError, DevNode};
use schemars::JsonSchema;
use serde::Serialize;

/// Who the device is on its host (from its identity registers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct GpuJson {
    /// Index on the host (0 for the first GPU).
    pub index: u32,
    /// UUID, `GPU-` and 8-4-4-4-12 hex digits.
    pub uuid: String,
    /// PCI address, `DDDD:BB:dd.f`.
    pub pci_address: String,
    /// Model name.
    pub model: String,
    /// Serial number.
    pub serial: String,
}

impl From<GpuIdentity> for GpuJson {
    fn from(id: GpuIdentity) -> GpuJson {
        GpuJson {
            index: id.index,
            uuid: id.uuid.to_string(),
            pci_address: id.pci.to_string(),
            model: id.model,
            serial: id.serial,
        }
    }
}

impl GpuJson {
    /// One line, as `nvidia-smi -L` names a GPU.
    pub fn line(&self) -> String {
        format!(
            "GPU {}: {} (UUID: {}, PCI {}, serial {})",
            self.index, self.model, self.uuid, self.pci_address, self.serial
        )
    }
}

/// The identity of the device behind `dev` (None for a device of an ABI
/// before the identity registers).
pub fn identity(dev: &DevNode) -> Result<Option<GpuJson>, DevError> {
    Ok(read_identity(dev)?.map(GpuJson::from))
}
