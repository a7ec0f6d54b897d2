//! The device's identity (`GPU_INDEX`, `PCI_ADDRESS`, `UUID`, `SERIAL`,
//! `MODEL_NAME`), read in one register batch.

use gpupm_uapi::identity::{
    ascii_field, words_to_bytes, DeviceUuid, PciAddress, MODEL_NAME_BYTES, SERIAL_BYTES,
};
use gpupm_uapi::regs::{self as r, MODEL_NAME_WORDS, SERIAL_WORDS, UUID_WORDS};
use gpupm_uapi::{split_abi_version, ABI_MAJOR};

use crate::ops::reg32;
use crate::{DevError, DevNode};

/// Who a device is on its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuIdentity {
    /// Index on the host (0 for the first GPU).
    pub index: u32,
    /// PCI address.
    pub pci: PciAddress,
    /// UUID.
    pub uuid: DeviceUuid,
    /// Serial number.
    pub serial: String,
    /// Model name.
    pub model: String,
}

/// The first ABI minor (of major 1) with the identity registers.
pub const IDENTITY_SINCE_MINOR: u16 = 12;

/// The identity of the device behind `dev`; None for a device of an ABI
/// before the identity registers.
pub fn read_identity(dev: &DevNode) -> Result<Option<GpuIdentity>, DevError> {
    let (major, minor) = split_abi_version(dev.read32(r::ABI_VERSION)?);
    if major == ABI_MAJOR && minor < IDENTITY_SINCE_MINOR {
        return Ok(None);
    }
    let words = |base: u64, n: usize| (0..n as u64).map(move |i| base + 4 * i);
    let offsets: Vec<u64> = [r::GPU_INDEX, r::PCI_ADDRESS]
        .into_iter()
        .chain(words(r::UUID, UUID_WORDS))
        .chain(words(r::SERIAL, SERIAL_WORDS))
        .chain(words(r::MODEL_NAME, MODEL_NAME_WORDS))
        .collect();
    let v: Vec<u32> = dev.read_many(&offsets)?.into_iter().map(reg32).collect();
    let (head, rest) = v.split_at(2);
    let (uuid, rest) = rest.split_at(UUID_WORDS);
    let (serial, model) = rest.split_at(SERIAL_WORDS);
    let mut uuid_words = [0u32; UUID_WORDS];
    uuid_words.copy_from_slice(uuid);
    let mut serial_bytes = [0u8; SERIAL_BYTES];
    words_to_bytes(serial, &mut serial_bytes);
    let mut model_bytes = [0u8; MODEL_NAME_BYTES];
    words_to_bytes(model, &mut model_bytes);
    Ok(Some(GpuIdentity {
        index: head[0],
        pci: PciAddress::from_register(head[1]),
        uuid: DeviceUuid::from_words(&uuid_words),
        serial: ascii_field(&serial_bytes),
        model: ascii_field(&model_bytes),
    }))
}
