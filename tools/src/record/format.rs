//! The `gpupm record` file format, versions 1 and 2.
//!
//! ```text
//! offset 0            FileHeader (64 bytes, little-endian)
//! version 1:
//! offset header_size  record 0 ─┐ `record_size` bytes each: a TenantDelta
//!                     record 1  │ (gpupm_uapi::tenant) exactly as the
//!                     …        ─┘ tenant node's stream session returned it
//! version 2:
//! offset header_size  frame 0 ─┐ FrameHeader (8 bytes: kind u16, flags u16,
//!                     frame 1  │ size u32) + `size` bytes of body + zero
//!                     …       ─┘ padding to a multiple of 8
//! ```
//!
//! Version 2 frames carry one record each, tagged with its type
//! ([`frame_kind`]), in the order the recorder received them:
//! - [`frame_kind::COUNTER_DELTA`]: a `TenantDelta` (624 bytes), as version
//!   1's records;
//! - [`frame_kind::BRANCH_STACK`], [`frame_kind::PC_SAMPLE`]: one record of
//!   the tenant's sampling session exactly as `read()` returned it — the
//!   24-byte `SampleHeader` and the device's record (or, flagged
//!   `SEALED`, the confidential VM's whole sealed slot);
//! - [`frame_kind::RI_GROUP`]: one entry of a runtime-instrumentation
//!   session (`gpupm ri -o`) exactly as `read()` returned it — the 32-byte
//!   `RiGroupHeader` and, for a group, its 2^(RGS+1) records of 16 bytes;
//!   a halt marker is the header alone (`docs/ri.md`);
//! - [`frame_kind::SAMPLING_SESSION`]: metadata, not a trace record: the
//!   session's `OpenSampling` answer (80 bytes: what the device runs).
//!
//! A frame kind this reader does not know is skipped whole (its size says
//! how far) and counted, so a later record type does not break older
//! readers.
//!
//! Invariants:
//! - `magic` is `b"GPUPMREC"`; readers refuse other magics and versions they
//!   do not know; version 1 has `record_size == 624`, version 2
//!   `record_size == 0` (frames are self-sized).
//! - `lost` is the sum of the records' `lost_before`; in version 2
//!   `records` counts the frames, and `reserved` holds the record types the
//!   recording asked for (bit `1 << kind`).
//! - `records == u64::MAX` marks a recording that did not finish (the
//!   recorder was killed): what follows the last whole record or frame is
//!   ignored. In a finished recording every byte belongs to a whole frame
//!   and the frame count equals `records`; anything else is corruption.
//! - The file never holds plaintext of a sealed (confidential) VM.

use gpupm_uapi::tenant::TenantDelta;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// File magic.
pub const MAGIC: [u8; 8] = *b"GPUPMREC";
/// Version 1: counter deltas only, fixed-size records.
pub const VERSION_1: u32 = 1;
/// Current format version: typed frames.
pub const VERSION: u32 = 2;
/// Size of one version 1 record.
pub const RECORD_SIZE: usize = size_of::<TenantDelta>();
/// `records` of a recording that did not end cleanly.
pub const UNFINISHED: u64 = u64::MAX;
/// Largest frame body a reader accepts (a sealed branch slot and its
/// header are 632 bytes; room for later types).
pub const MAX_FRAME_BODY: u32 = 1 << 20;

/// Frame kinds (record types) of version 2.
pub mod frame_kind {
    /// A counter delta of the stream session (`TenantDelta`).
    pub const COUNTER_DELTA: u16 = 1;
    /// A branch-stack record of the sampling session.
    pub const BRANCH_STACK: u16 = 2;
    /// A PC (cycle) sample of the sampling session.
    pub const PC_SAMPLE: u16 = 3;
    /// A runtime-instrumentation entry: a report group or a halt marker.
    pub const RI_GROUP: u16 = 4;
    /// The sampling session's `OpenSampling` answer (metadata).
    pub const SAMPLING_SESSION: u16 = 16;
}

/// The file header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct FileHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`] (or [`VERSION_1`]).
    pub version: u32,
    /// Bytes before the first record (64).
    pub header_size: u32,
    /// Bytes per record: [`RECORD_SIZE`] in version 1, 0 in version 2.
    pub record_size: u32,
    /// Nominal device clock in kHz, to turn cycles into seconds.
    pub clock_khz: u32,
    /// `gpupm_uapi::tenant::scope` kind of the recorded session(s).
    pub scope: u32,
    /// VM or context id.
    pub id: u32,
    /// Wall-clock start, ns since the Unix epoch.
    pub started_unix_ns: u64,
    /// Records (version 1) or frames (version 2) in the file, or
    /// [`UNFINISHED`].
    pub records: u64,
    /// Sum of `lost_before` over the records.
    pub lost: u64,
    /// Version 1: 0. Version 2: the record types asked for, bit
    /// `1 << frame_kind`.
    pub reserved: u64,
}
const _: () = assert!(size_of::<FileHeader>() == 64);
const _: () = assert!(RECORD_SIZE == 624);

/// The header of one version 2 frame.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct FrameHeader {
    /// One of [`frame_kind`].
    pub kind: u16,
    /// Reserved, 0.
    pub flags: u16,
    /// Bytes of the body (before padding).
    pub size: u32,
}
const _: () = assert!(size_of::<FrameHeader>() == 8);

/// Bytes a frame with a `size`-byte body takes in the file.
pub fn frame_len(size: u32) -> u64 {
    size_of::<FrameHeader>() as u64 + u64::from(size).next_multiple_of(8)
}

/// Encodes one frame (header, body, padding) onto `out`.
pub fn encode_frame(out: &mut Vec<u8>, kind: u16, body: &[u8]) {
    let size = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(
        FrameHeader {
            kind,
            flags: 0,
            size,
        }
        .as_bytes(),
    );
    out.extend_from_slice(body);
    out.resize(out.len() + (body.len().next_multiple_of(8) - body.len()), 0);
}

/// Why a file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Shorter than a header.
    #[error("too short for a gpupm recording")]
    Short,
    /// Wrong magic.
    #[error("not a gpupm recording (bad magic)")]
    Magic,
    /// Unknown version or geometry.
    #[error("unsupported recording version {version} (record size {record_size}); this gpupm reads versions 1 and 2")]
    Version {
        /// Version in the file.
        version: u32,
        /// Record size in the file.
        record_size: u32,
    },
    /// A finished recording ends inside a frame.
    #[error("truncated: the frame at byte {offset} runs past the end of the file")]
    Truncated {
        /// File offset of the frame.
        offset: u64,
    },
    /// A frame that cannot be valid.
    #[error("corrupt frame at byte {offset}: {why}")]
    Frame {
        /// File offset of the frame.
        offset: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A finished recording whose frame count is not its header's.
    #[error("corrupt: the header says {said} records, the file holds {found}")]
    Count {
        /// The header's `records`.
        said: u64,
        /// Whole records or frames found.
        found: u64,
    },
}

/// One frame of a version 2 file, borrowed from the file's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// [`frame_kind`].
    pub kind: u16,
    /// The body (without padding).
    pub body: &'a [u8],
    /// File offset of the frame header.
    pub offset: u64,
}

/// A decoded file.
#[derive(Debug)]
pub struct Decoded<'a> {
    /// The header.
    pub header: FileHeader,
    /// The frames in file order (version 1 records become
    /// [`frame_kind::COUNTER_DELTA`] frames).
    pub frames: Vec<Frame<'a>>,
    /// Whether the recording finished cleanly.
    pub finished: bool,
}

/// Decodes a whole file: its header and frames. Never panics on any input.
pub fn decode(bytes: &[u8]) -> Result<Decoded<'_>, FormatError> {
    let (h, _) = FileHeader::read_from_prefix(bytes).map_err(|_| FormatError::Short)?;
    if h.magic != MAGIC {
        return Err(FormatError::Magic);
    }
    let geometry_ok = match h.version {
        VERSION_1 => h.record_size as usize == RECORD_SIZE,
        VERSION => h.record_size == 0,
        _ => false,
    };
    if !geometry_ok || (h.header_size as usize) < size_of::<FileHeader>() {
        return Err(FormatError::Version {
            version: h.version,
            record_size: h.record_size,
        });
    }
    let start = h.header_size as usize;
    let body = bytes.get(start..).unwrap_or_default();
    let finished = h.records != UNFINISHED;
    let frames = if h.version == VERSION_1 {
        decode_v1(body, start, finished)?
    } else {
        decode_v2(body, start, finished)?
    };
    let found = frames.len() as u64;
    if finished && found != h.records {
        return Err(FormatError::Count {
            said: h.records,
            found,
        });
    }
    Ok(Decoded {
        header: h,
        frames,
        finished,
    })
}

fn decode_v1(body: &[u8], start: usize, finished: bool) -> Result<Vec<Frame<'_>>, FormatError> {
    if finished && !body.len().is_multiple_of(RECORD_SIZE) {
        let whole = body.len() / RECORD_SIZE * RECORD_SIZE;
        return Err(FormatError::Truncated {
            offset: (start + whole) as u64,
        });
    }
    Ok(body
        .chunks_exact(RECORD_SIZE)
        .enumerate()
        .map(|(i, rec)| Frame {
            kind: frame_kind::COUNTER_DELTA,
            body: rec,
            offset: (start + i * RECORD_SIZE) as u64,
        })
        .collect())
}

fn decode_v2(mut rest: &[u8], start: usize, finished: bool) -> Result<Vec<Frame<'_>>, FormatError> {
    let mut frames = Vec::new();
    let mut offset = start as u64;
    while !rest.is_empty() {
        let truncated = || {
            if finished {
                Err(FormatError::Truncated { offset })
            } else {
                Ok(())
            }
        };
        let Ok((fh, after)) = FrameHeader::read_from_prefix(rest) else {
            truncated()?;
            break;
        };
        if fh.size > MAX_FRAME_BODY {
            return Err(FormatError::Frame {
                offset,
                why: "body larger than any record type",
            });
        }
        if fh.flags != 0 {
            return Err(FormatError::Frame {
                offset,
                why: "reserved flags set",
            });
        }
        // Both fit a usize: `size` is at most MAX_FRAME_BODY.
        let len = usize::try_from(frame_len(fh.size)).unwrap_or(usize::MAX);
        let padded = len - size_of::<FrameHeader>();
        let (Some(body), Some(next)) = (after.get(..fh.size as usize), rest.get(len..)) else {
            truncated()?;
            break;
        };
        if after[fh.size as usize..padded].iter().any(|&b| b != 0) {
            return Err(FormatError::Frame {
                offset,
                why: "non-zero padding",
            });
        }
        frames.push(Frame {
            kind: fh.kind,
            body,
            offset,
        });
        offset += len as u64;
        rest = next;
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use zerocopy::FromZeros;

    use super::*;

    fn header(version: u32, records: u64) -> FileHeader {
        let mut h = FileHeader::new_zeroed();
        h.magic = MAGIC;
        h.version = version;
        h.header_size = 64;
        h.record_size = if version == VERSION_1 {
            u32::try_from(RECORD_SIZE).unwrap()
        } else {
            0
        };
        h.records = records;
        h
    }

    #[test]
    fn version_1_still_reads_and_refuses_bad_magic_version_and_a_torn_finished_file() {
        let mut bytes = header(VERSION_1, UNFINISHED).as_bytes().to_vec();
        bytes.extend(TenantDelta::new_zeroed().as_bytes());
        bytes.extend([0u8; 10]);
        let d = decode(&bytes).unwrap();
        assert_eq!(d.frames.len(), 1);
        assert_eq!(d.frames[0].kind, frame_kind::COUNTER_DELTA);
        bytes[40..48].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(
            decode(&bytes).unwrap_err(),
            FormatError::Truncated { offset: 64 + 624 }
        );
        bytes[0] = b'X';
        assert_eq!(decode(&bytes).unwrap_err(), FormatError::Magic);
        bytes[0] = b'G';
        bytes[8] = 3;
        assert!(matches!(decode(&bytes), Err(FormatError::Version { .. })));
        assert_eq!(decode(&bytes[..10]).unwrap_err(), FormatError::Short);
    }

    #[test]
    fn version_2_frames_round_trip_and_unknown_kinds_are_kept_for_the_caller() {
        let mut bytes = header(VERSION, 3).as_bytes().to_vec();
        encode_frame(&mut bytes, frame_kind::PC_SAMPLE, &[1, 2, 3]);
        encode_frame(&mut bytes, 9, &[9; 16]);
        encode_frame(&mut bytes, frame_kind::BRANCH_STACK, &[]);
        let d = decode(&bytes).unwrap();
        let kinds: Vec<(u16, &[u8])> = d.frames.iter().map(|f| (f.kind, f.body)).collect();
        assert_eq!(
            kinds,
            [
                (frame_kind::PC_SAMPLE, &[1u8, 2, 3][..]),
                (9, &[9u8; 16][..]),
                (frame_kind::BRANCH_STACK, &[][..])
            ]
        );
        assert_eq!(d.frames[1].offset, 64 + 16);
        // One frame missing at the end of a finished file.
        let short = &bytes[..bytes.len() - 8];
        assert_eq!(
            decode(short).unwrap_err(),
            FormatError::Count { said: 3, found: 2 }
        );
        let torn = &bytes[..bytes.len() - 20];
        assert!(matches!(decode(torn), Err(FormatError::Truncated { .. })));
    }

    fn valid_file(frames: &[(u16, Vec<u8>)], finished: bool) -> Vec<u8> {
        let records = if finished {
            frames.len() as u64
        } else {
            UNFINISHED
        };
        let mut bytes = header(VERSION, records).as_bytes().to_vec();
        for (k, body) in frames {
            encode_frame(&mut bytes, *k, body);
        }
        bytes
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any prefix of a valid file, and any file with bytes flipped,
        /// decodes or gives an error: never a panic, never a frame that
        /// runs outside the file.
        #[test]
        fn the_reader_never_panics_on_torn_or_corrupt_files(
            frames in prop::collection::vec((1u16..6, prop::collection::vec(any::<u8>(), 0..700)), 0..6),
            finished in any::<bool>(),
            cut in any::<prop::sample::Index>(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        ) {
            let bytes = valid_file(&frames, finished);
            let whole = decode(&bytes).expect("a valid file decodes");
            prop_assert_eq!(whole.frames.len(), frames.len());
            let prefix = &bytes[..cut.index(bytes.len() + 1)];
            match decode(prefix) {
                Ok(d) => {
                    prop_assert!(d.frames.len() <= frames.len());
                    // A finished file decodes only whole.
                    prop_assert!(!finished || d.frames.len() == frames.len());
                    for (f, (k, body)) in d.frames.iter().zip(&frames) {
                        prop_assert_eq!(f.kind, *k);
                        prop_assert_eq!(f.body, &body[..]);
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            let mut corrupt = bytes.clone();
            for (at, v) in &flips {
                let i = at.index(corrupt.len());
                corrupt[i] = *v;
            }
            if let Ok(d) = decode(&corrupt) {
                for f in &d.frames {
                    let end = f.offset + frame_len(u32::try_from(f.body.len()).unwrap());
                    prop_assert!(end <= corrupt.len() as u64);
                }
            }
        }
    }
}
