//! The device's identity as its registers carry it (`GPU_INDEX`,
//! `PCI_ADDRESS`, `UUID`, `SERIAL`, `MODEL_NAME`): the encodings, shared
//! by the device model that writes them and every client that reads them.
//!
//! Byte strings travel in consecutive 32-bit registers, word `i` holding
//! bytes `4i..4i+4` little-endian ([`bytes_to_words`],
//! [`words_to_bytes`]); text fields are ASCII, NUL-padded.

use core::fmt;

use crate::regs::{MODEL_NAME_WORDS, SERIAL_WORDS, UUID_WORDS};

/// Bytes of the `SERIAL` field.
pub const SERIAL_BYTES: usize = SERIAL_WORDS * 4;
/// Bytes of the `MODEL_NAME` field.
pub const MODEL_NAME_BYTES: usize = MODEL_NAME_WORDS * 4;

/// A PCI address: `DDDD:BB:dd.f`, as `lspci -D` and `nvidia-smi` print it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u16,
    /// Bus.
    pub bus: u8,
    /// Device, 0..32.
    pub device: u8,
    /// Function, 0..8.
    pub function: u8,
}

impl PciAddress {
    /// The `PCI_ADDRESS` register value: domain in bits 31..16, bus
    /// 15..8, device 7..3, function 2..0 (device and function masked to
    /// their widths).
    pub const fn to_register(self) -> u32 {
        ((self.domain as u32) << 16)
            | ((self.bus as u32) << 8)
            | (((self.device & 0x1f) as u32) << 3)
            | (self.function & 0x7) as u32
    }

    /// The address a `PCI_ADDRESS` value carries.
    pub const fn from_register(v: u32) -> PciAddress {
        let [function_device, bus, domain_lo, domain_hi] = v.to_le_bytes();
        PciAddress {
            domain: u16::from_le_bytes([domain_lo, domain_hi]),
            bus,
            device: function_device >> 3,
            function: function_device & 0x7,
        }
    }

    /// Parses `DDDD:BB:dd.f` (hexadecimal; the domain may be left out,
    /// meaning 0, as `lspci` without `-D` prints it).
    pub fn parse(s: &str) -> Option<PciAddress> {
        let (rest, function) = s.rsplit_once('.')?;
        let mut parts = rest.rsplitn(3, ':');
        let device = parts.next()?;
        let bus = parts.next()?;
        let domain = parts.next().unwrap_or("0");
        let hex = |t: &str, digits: usize| {
            (!t.is_empty() && t.len() <= digits && t.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(t, 16).ok())
                .flatten()
        };
        let addr = PciAddress {
            domain: u16::try_from(hex(domain, 4)?).ok()?,
            bus: u8::try_from(hex(bus, 2)?).ok()?,
            device: u8::try_from(hex(device, 2)?).ok().filter(|&d| d < 32)?,
            function: u8::try_from(hex(function, 1)?).ok().filter(|&f| f < 8)?,
        };
        Some(addr)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// A device UUID (16 bytes, RFC 9562 byte order). Shown as GPU fleets
/// show one, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceUuid(pub [u8; 16]);

/// The prefix of a [`DeviceUuid`]'s text form.
const UUID_PREFIX: &str = "GPU-";

impl DeviceUuid {
    /// The UUID the `UUID` words carry.
    pub fn from_words(words: &[u32; UUID_WORDS]) -> DeviceUuid {
        let mut b = [0; 16];
        words_to_bytes(words, &mut b);
        DeviceUuid(b)
    }

    /// The `UUID` words.
    pub fn to_words(self) -> [u32; UUID_WORDS] {
        let mut w = [0; UUID_WORDS];
        bytes_to_words(&self.0, &mut w);
        w
    }

    /// Parses the text form, with or without [`UUID_PREFIX`] (any case).
    pub fn parse(s: &str) -> Option<DeviceUuid> {
        let s = s.strip_prefix(UUID_PREFIX).unwrap_or(s);
        let groups: [usize; 5] = [8, 4, 4, 4, 12];
        let mut parts = s.split('-');
        let mut hex = [0u8; 32];
        let mut n = 0;
        for len in groups {
            let part = parts.next()?;
            if part.len() != len || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            hex[n..n + len].copy_from_slice(part.as_bytes());
            n += len;
        }
        if parts.next().is_some() {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, byte) in out.iter_mut().enumerate() {
            let pair = core::str::from_utf8(&hex[2 * i..2 * i + 2]).ok()?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(DeviceUuid(out))
    }
}

impl fmt::Display for DeviceUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(UUID_PREFIX)?;
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Packs `bytes` into `words`, word `i` holding bytes `4i..4i+4`
/// little-endian; bytes beyond `words` are dropped, missing ones are 0.
pub fn bytes_to_words(bytes: &[u8], words: &mut [u32]) {
    for (i, w) in words.iter_mut().enumerate() {
        let mut quad = [0u8; 4];
        for (j, q) in quad.iter_mut().enumerate() {
            *q = bytes.get(4 * i + j).copied().unwrap_or(0);
        }
        *w = u32::from_le_bytes(quad);
    }
}

/// Unpacks `words` into `bytes` (the inverse of [`bytes_to_words`]).
pub fn words_to_bytes(words: &[u32], bytes: &mut [u8]) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = words.get(i / 4).map_or(0, |w| w.to_le_bytes()[i % 4]);
    }
}

/// The text of a NUL-padded ASCII field: up to the first NUL, with any
/// byte that is not printable ASCII shown as `?` (a device's words are
/// input from outside).
pub fn ascii_field(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            }
        })
        .collect()
}

/// Whether `s` fits a text field of `max` bytes: printable ASCII (spaces
/// allowed), not empty, at most `max` bytes.
pub fn fits_ascii_field(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_round_trip_through_text_and_register() {
        let a = PciAddress::parse("0000:18:00.0").unwrap();
        assert_eq!(a.to_string(), "0000:18:00.0");
        assert_eq!(a.to_register(), 0x0000_1800);
        let b = PciAddress::parse("1:db:1f.7").unwrap();
        assert_eq!(b.to_string(), "0001:db:1f.7");
        assert_eq!(PciAddress::from_register(b.to_register()), b);
        assert_eq!(PciAddress::parse("9a:00.0").unwrap().bus, 0x9a);
        for bad in [
            "",
            "18:00",
            "0000:18:20.0",
            "0000:18:00.8",
            "x:18:00.0",
            "00000:18:00.0",
            "0:0:0:0.0",
            "0000:180:00.0",
        ] {
            assert_eq!(PciAddress::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn uuids_round_trip_through_text_and_words() {
        let text = "GPU-3b2a9c4e-1f00-8d21-a5b6-0c7d8e9fa0b1";
        let u = DeviceUuid::parse(text).unwrap();
        assert_eq!(u.to_string(), text);
        assert_eq!(u.0[0], 0x3b);
        assert_eq!(u.to_words()[0], 0x4e9c_2a3b);
        assert_eq!(DeviceUuid::from_words(&u.to_words()), u);
        assert_eq!(DeviceUuid::parse(&text[4..].to_uppercase()), Some(u));
        for bad in [
            "",
            "GPU-",
            "3b2a9c4e-1f00-8d21-a5b6-0c7d8e9fa0b",
            "3b2a9c4e-1f00-8d21-a5b6-0c7d8e9fa0b1-00",
            "3b2a9c4e1f00-8d21-a5b6-0c7d8e9fa0b1-",
            "zz2a9c4e-1f00-8d21-a5b6-0c7d8e9fa0b1",
        ] {
            assert_eq!(DeviceUuid::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn text_fields_stop_at_the_first_nul_and_show_no_control_bytes() {
        let mut words = [0u32; MODEL_NAME_WORDS];
        bytes_to_words(b"H100 SXM5", &mut words);
        let mut bytes = [0u8; MODEL_NAME_BYTES];
        words_to_bytes(&words, &mut bytes);
        assert_eq!(ascii_field(&bytes), "H100 SXM5");
        assert_eq!(ascii_field(b"a\x1bb\0c"), "a?b");
        assert!(fits_ascii_field("1650923012345", SERIAL_BYTES));
        assert!(!fits_ascii_field("", SERIAL_BYTES));
        assert!(!fits_ascii_field("é", SERIAL_BYTES));
        assert!(!fits_ascii_field(&"x".repeat(17), SERIAL_BYTES));
    }
}
