//! `[identity]`: who the device is on its host — index, PCI address, UUID,
//! serial and model name (the `GPU_INDEX` … `MODEL_NAME` registers).
//!
//! Every field has a default derived from the scenario alone (its name,
//! seed and the index), so a device keeps its identity across restarts of
//! the driver and two devices of one host scenario differ.

use gpupm_splitmix::mix;
use gpupm_uapi::identity::{
    fits_ascii_field, DeviceUuid, PciAddress, MODEL_NAME_BYTES, SERIAL_BYTES,
};
use toml::Spanned;

use super::error::SpanError;
use super::raw::RawIdentity;
use super::spec::IdentitySpec;

/// Most devices one host scenario may number (indices `0..MAX_DEVICES`).
pub const MAX_DEVICES: u32 = 64;
/// The model name of a device whose scenario names none.
pub const DEFAULT_MODEL: &str = "gpupm H100-class (emulated)";
/// The PCI buses of an 8-GPU HGX H100 board's GPUs, in index order; the
/// default address of device `i` is bus `BUSES[i % 8]` in domain `i / 8`.
const BUSES: [u8; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

/// Resolves `[identity]` (absent: every default) for scenario `name`.
pub(super) fn identity(
    raw: Option<&RawIdentity>,
    name: &str,
    seed: u64,
) -> Result<IdentitySpec, SpanError> {
    let index = match raw.and_then(|r| r.index.as_ref()) {
        None => 0,
        Some(i) if *i.get_ref() < MAX_DEVICES => *i.get_ref(),
        Some(i) => {
            return Err(SpanError::new(
                i.span(),
                format!(
                    "index {} is out of range; it must lie in 0..{MAX_DEVICES}",
                    i.get_ref()
                ),
            ))
        }
    };
    let derived = IdentitySpec::derived(name, seed, index);
    let pci = match raw.and_then(|r| r.pci_address.as_ref()) {
        None => derived.pci,
        Some(s) => PciAddress::parse(s.get_ref()).ok_or_else(|| {
            SpanError::new(
                s.span(),
                format!(
                    "pci_address {:?} is not a PCI address DDDD:BB:dd.f",
                    s.get_ref()
                ),
            )
        })?,
    };
    let uuid = match raw.and_then(|r| r.uuid.as_ref()) {
        None => derived.uuid,
        Some(s) => DeviceUuid::parse(s.get_ref()).ok_or_else(|| {
            SpanError::new(
                s.span(),
                format!(
                    "uuid {:?} is not a UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
                    s.get_ref()
                ),
            )
        })?,
    };
    let serial = text(
        raw.and_then(|r| r.serial.as_ref()),
        "serial",
        SERIAL_BYTES,
        || derived.serial.clone(),
    )?;
    let model = text(
        raw.and_then(|r| r.model.as_ref()),
        "model",
        MODEL_NAME_BYTES,
        || derived.model.clone(),
    )?;
    Ok(IdentitySpec {
        index,
        pci,
        uuid,
        serial,
        model,
    })
}

impl IdentitySpec {
    /// The identity of device `index` of scenario `name` with `seed` when
    /// `[identity]` sets nothing but the index.
    pub fn derived(name: &str, seed: u64, index: u32) -> IdentitySpec {
        let stem = stem(name, seed, index);
        IdentitySpec {
            index,
            pci: default_pci(index),
            uuid: default_uuid(stem),
            serial: format!("{:013}", mix(stem ^ 0x5e) % 10_000_000_000_000),
            model: DEFAULT_MODEL.to_owned(),
        }
    }
}

/// What the defaults of one device are drawn from.
fn stem(name: &str, seed: u64, index: u32) -> u64 {
    let named = name.bytes().fold(mix(seed), |h, b| mix(h ^ u64::from(b)));
    mix(named ^ u64::from(index))
}

fn default_pci(index: u32) -> PciAddress {
    PciAddress {
        domain: u16::try_from(index / 8).unwrap_or(u16::MAX),
        bus: BUSES[(index % 8) as usize],
        device: 0,
        function: 0,
    }
}

/// A version-8 (vendor-defined, RFC 9562) UUID drawn from `stem`.
fn default_uuid(stem: u64) -> DeviceUuid {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&mix(stem ^ 0x1d).to_be_bytes());
    b[8..].copy_from_slice(&mix(stem ^ 0x2d).to_be_bytes());
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    DeviceUuid(b)
}

/// A text field: printable ASCII of at most `max` bytes, or the default.
fn text(
    raw: Option<&Spanned<String>>,
    key: &str,
    max: usize,
    default: impl FnOnce() -> String,
) -> Result<String, SpanError> {
    match raw {
        None => Ok(default()),
        Some(s) if fits_ascii_field(s.get_ref(), max) => Ok(s.get_ref().clone()),
        Some(s) => Err(SpanError::new(
            s.span(),
            format!("{key} must be 1 to {max} bytes of printable ASCII"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawIdentity {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn defaults_are_stable_and_differ_between_devices_of_one_host() {
        let a = identity(None, "host", 1).unwrap();
        assert_eq!(a, identity(None, "host", 1).unwrap());
        assert_eq!((a.index, a.pci.to_string()), (0, "0000:18:00.0".into()));
        assert_eq!(a.model, DEFAULT_MODEL);
        assert_eq!(a.serial.len(), 13);
        assert_eq!(a.uuid.0[6] >> 4, 8, "version 8");
        assert_eq!(a.uuid.0[8] >> 6, 2, "RFC 9562 variant");
        let b = identity(Some(&raw("index = 9")), "host", 1).unwrap();
        assert_eq!(b.pci.to_string(), "0001:2a:00.0");
        assert_ne!((a.uuid, &a.serial), (b.uuid, &b.serial));
        assert_ne!(a.uuid, identity(None, "other", 1).unwrap().uuid);
    }

    #[test]
    fn given_fields_are_kept_and_bad_ones_point_at_their_value() {
        let given = raw(
            "index = 3\npci_address = \"0000:5d:00.0\"\nuuid = \"GPU-3b2a9c4e-1f00-8d21-a5b6-0c7d8e9fa0b1\"\nserial = \"1650923012345\"\nmodel = \"H100 SXM5 80GB\"\n",
        );
        let id = identity(Some(&given), "x", 0).unwrap();
        assert_eq!(
            (
                id.index,
                id.pci.bus,
                id.uuid.to_string(),
                id.serial.as_str(),
                id.model.as_str()
            ),
            (
                3,
                0x5d,
                "GPU-3b2a9c4e-1f00-8d21-a5b6-0c7d8e9fa0b1".into(),
                "1650923012345",
                "H100 SXM5 80GB"
            )
        );
        for (bad, says) in [
            ("index = 64", "index 64 is out of range"),
            ("pci_address = \"0000:5d:20.0\"", "not a PCI address"),
            ("uuid = \"GPU-123\"", "not a UUID"),
            ("serial = \"\"", "serial must be 1 to 16 bytes"),
            ("model = \"é\"", "model must be 1 to 32 bytes"),
        ] {
            let e = identity(Some(&raw(bad)), "x", 0).unwrap_err();
            assert!(e.reason.contains(says), "{bad}: {}", e.reason);
            assert!(!e.span.is_empty(), "{bad}: no span");
        }
    }
}
