//! Linux ioctl request numbers: the `_IOC` encoding of
//! `include/uapi/asm-generic/ioctl.h` and its `_IOC_DIR`, `_IOC_TYPE`,
//! `_IOC_NR` and `_IOC_SIZE` decoders, as `const fn`s so that request
//! numbers are constants and sizes can be checked at compile time.
//!
//! Layout of a request number (32 bits):
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 31..30 | dir | [`Dir`] |
//! | 29..16 | size | bytes of the argument struct (at most 16383) |
//! | 15..8 | type | the driver's magic byte |
//! | 7..0 | nr | the command within the driver |
//!
//! Every Linux architecture this project targets uses this generic layout.

/// Direction of the argument's transfer (`_IOC_DIR`), from user space's
/// point of view.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// No argument (`_IOC_NONE`).
    None = 0,
    /// User space writes the argument (`_IOC_WRITE`).
    Write = 1,
    /// User space reads the argument (`_IOC_READ`).
    Read = 2,
    /// Both (`_IOC_READ | _IOC_WRITE`).
    ReadWrite = 3,
}

/// Largest encodable argument size (14 bits).
const SIZE_MAX: usize = (1 << SIZE_BITS) - 1;

const TYPE_SHIFT: u32 = 8;
const SIZE_SHIFT: u32 = 16;
const DIR_SHIFT: u32 = 30;
const SIZE_BITS: u32 = 14;

/// `_IOC(dir, ty, nr, size)`. A size above 16383 bytes fails to compile
/// where the number is a constant.
pub const fn encode(dir: Dir, ty: u8, nr: u8, size: usize) -> u32 {
    assert!(size <= SIZE_MAX, "an ioctl argument is at most 16383 bytes");
    // Lossless: `size` fits in 14 bits (asserted above).
    #[allow(clippy::cast_possible_truncation)]
    let size = size as u32;
    ((dir as u32) << DIR_SHIFT) | (size << SIZE_SHIFT) | ((ty as u32) << TYPE_SHIFT) | nr as u32
}

/// `_IOWR(ty, nr, size)`: the argument goes in and comes back.
pub const fn read_write(ty: u8, nr: u8, size: usize) -> u32 {
    encode(Dir::ReadWrite, ty, nr, size)
}

/// `_IOW(ty, nr, size)`: the argument only goes in.
pub const fn write(ty: u8, nr: u8, size: usize) -> u32 {
    encode(Dir::Write, ty, nr, size)
}

/// `_IOR(ty, nr, size)`: the argument only comes back.
pub const fn read(ty: u8, nr: u8, size: usize) -> u32 {
    encode(Dir::Read, ty, nr, size)
}

/// `_IOC_DIR(cmd)`.
pub const fn dir(cmd: u32) -> Dir {
    match cmd >> DIR_SHIFT {
        0 => Dir::None,
        1 => Dir::Write,
        2 => Dir::Read,
        _ => Dir::ReadWrite,
    }
}

/// `_IOC_TYPE(cmd)`.
pub const fn ty(cmd: u32) -> u8 {
    cmd.to_le_bytes()[1]
}

/// `_IOC_NR(cmd)`.
pub const fn nr(cmd: u32) -> u8 {
    cmd.to_le_bytes()[0]
}

/// `_IOC_SIZE(cmd)`.
pub const fn size(cmd: u32) -> usize {
    ((cmd >> SIZE_SHIFT) as usize) & SIZE_MAX
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ioctl::DEVICE_IOCTLS;
    use crate::tenant::TENANT_IOCTLS;

    /// Linux's own macros, as the `nix` crate implements them for this
    /// platform, give the same numbers.
    #[test]
    fn encoding_matches_the_platform_macros() {
        for (nr, size) in [(0u8, 0usize), (1, 4), (0x54, 1552), (0xff, SIZE_MAX)] {
            let cast = |c: nix::sys::ioctl::ioctl_num_type| u32::try_from(c).unwrap();
            assert_eq!(
                read_write(b'G', nr, size),
                cast(nix::request_code_readwrite!(b'G', nr, size))
            );
            assert_eq!(
                write(b'T', nr, size),
                cast(nix::request_code_write!(b'T', nr, size))
            );
            assert_eq!(
                read(0x94, nr, size),
                cast(nix::request_code_read!(0x94, nr, size))
            );
            assert_eq!(
                encode(Dir::None, 0, nr, 0),
                cast(nix::request_code_none!(0, nr))
            );
        }
    }

    #[test]
    fn decoding_inverts_encoding() {
        for &(name, cmd) in DEVICE_IOCTLS.iter().chain(TENANT_IOCTLS) {
            let again = encode(dir(cmd), ty(cmd), nr(cmd), size(cmd));
            assert_eq!(again, cmd, "{name}");
            assert!(
                matches!(dir(cmd), Dir::Write | Dir::ReadWrite),
                "{name}: every command passes an argument in"
            );
        }
        assert_eq!(
            (
                dir(0xc018_4701),
                ty(0xc018_4701),
                nr(0xc018_4701),
                size(0xc018_4701)
            ),
            (Dir::ReadWrite, b'G', 1, 0x18)
        );
    }
}
