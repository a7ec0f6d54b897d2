//! Key files of confidential VMs: 32 raw bytes, or 64 hexadecimal digits
//! (one optional trailing newline). Like ssh with a private key, a key
//! file that anyone but its owner may read, write or search is refused:
//! the key is the VM's whole confidentiality. [`open_slot`] is how the
//! commands (`gpupm stat --key-file`) read a sealed block slot with it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use gpupm_client::sampling::session::SampleBody;
use gpupm_driver::model::cc::{open, Key};
use gpupm_uapi::layout::RECORD_MAGIC;
use gpupm_uapi::layout::{Block, BlockSlot, Envelope, StreamRecord, StreamSlot, BLOCK_MAGIC};
use gpupm_uapi::sampling::{BranchSlot, BranchStackRecord, PcRecord, PcSlot};
use gpupm_uapi::sampling::{BRANCH_RECORD_MAGIC, PC_RECORD_MAGIC};
use gpupm_uapi::tenant::sampling::sample_kind;
use zerocopy::FromBytes;

use crate::error::{CliError, CliResult};

/// Permission bits a key file must not have (group and other).
const FOREIGN_ACCESS: u32 = 0o077;
/// A key file is never larger than this (64 hex digits and a CR LF).
const MAX_LEN: u64 = 66;

/// Reads the key in `path`.
pub fn load(path: &Path) -> CliResult<Key> {
    let shown = path.display();
    let file = File::open(path)
        .map_err(|e| CliError::usage(format!("cannot open the key file {shown}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| CliError::usage(format!("cannot stat the key file {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(CliError::usage(format!(
            "the key file {shown} is not a regular file"
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & FOREIGN_ACCESS != 0 {
        return Err(CliError::usage(format!(
            "the key file {shown} is accessible by others (mode {mode:03o}): \
             refusing it; run `chmod 600 {shown}`"
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::usage(format!("cannot read the key file {shown}: {e}")))?;
    parse(&bytes).ok_or_else(|| {
        CliError::usage(format!(
            "the key file {shown} holds neither 32 raw bytes nor 64 hexadecimal digits"
        ))
    })
}

/// A key from a key file's bytes.
fn parse(bytes: &[u8]) -> Option<Key> {
    let mut key = [0u8; 32];
    if bytes.len() == key.len() {
        key.copy_from_slice(bytes);
        return Some(key);
    }
    let text = bytes
        .strip_suffix(b"\n")
        .map_or(bytes, |t| t.strip_suffix(b"\r").unwrap_or(t));
    if text.len() != 2 * key.len() {
        return None;
    }
    for (k, pair) in key.iter_mut().zip(text.chunks_exact(2)) {
        let digits = std::str::from_utf8(pair).ok()?;
        *k = u8::from_str_radix(digits, 16).ok()?;
    }
    Some(key)
}

/// The block a sealed slot holds, opened with the VM's `key` (the key of
/// the slot's epoch).
pub fn open_slot(slot: &BlockSlot, key: &Key) -> CliResult<Block> {
    let mut payload = slot.payload;
    open(key, &slot.envelope, &mut payload, &slot.tag).map_err(|_| {
        CliError::usage(format!(
            "the key does not open VM {}'s counters (sealed under its key epoch {})",
            slot.envelope.vm, slot.envelope.key_epoch
        ))
    })?;
    Block::read_from_bytes(&payload)
        .ok()
        .filter(|b| b.magic == BLOCK_MAGIC)
        .ok_or_else(|| CliError::runtime("an opened block has no block magic"))
}

/// The error of a sealed record the key does not open: authentication
/// failed, nothing of the plaintext is guessed.
fn wrong_key(what: &str, envelope: &Envelope) -> CliError {
    CliError::usage(format!(
        "the key does not open VM {}'s {what} (authentication failed; sealed under its key epoch {})",
        envelope.vm, envelope.key_epoch
    ))
}

/// The record a sealed sample slot holds (a session record's payload with
/// `SEALED`: envelope, ciphertext, tag), opened with the VM's `key`.
pub fn open_sample(kind: u16, slot: &[u8], key: &Key) -> CliResult<SampleBody> {
    let malformed = || CliError::runtime("a sealed sample slot has the wrong size");
    let (envelope, _) = Envelope::read_from_prefix(slot).map_err(|_| malformed())?;
    match kind {
        sample_kind::CYCLE => {
            let mut s = PcSlot::read_from_bytes(slot).map_err(|_| malformed())?;
            open(key, &s.envelope, &mut s.payload, &s.tag)
                .map_err(|_| wrong_key("samples", &envelope))?;
            PcRecord::read_from_bytes(&s.payload)
                .ok()
                .filter(|r| r.magic == PC_RECORD_MAGIC)
                .map(SampleBody::Cycle)
                .ok_or_else(|| CliError::runtime("an opened PC sample has no record magic"))
        }
        sample_kind::BRANCH_STACK => {
            let mut s = BranchSlot::read_from_bytes(slot).map_err(|_| malformed())?;
            open(key, &s.envelope, &mut s.payload, &s.tag)
                .map_err(|_| wrong_key("samples", &envelope))?;
            BranchStackRecord::read_from_bytes(&s.payload)
                .ok()
                .filter(|r| r.magic == BRANCH_RECORD_MAGIC)
                .map(|r| SampleBody::Branch(Box::new(r)))
                .ok_or_else(|| CliError::runtime("an opened branch stack has no record magic"))
        }
        _ => Err(CliError::runtime("a sealed sample of an unknown kind")),
    }
}

/// The record a sealed stream slot holds, opened with the VM's `key`.
pub fn open_stream(slot: &StreamSlot, key: &Key) -> CliResult<StreamRecord> {
    let mut payload = slot.payload;
    open(key, &slot.envelope, &mut payload, &slot.tag)
        .map_err(|_| wrong_key("counter deltas", &slot.envelope))?;
    StreamRecord::read_from_bytes(&payload)
        .ok()
        .filter(|r| r.magic == RECORD_MAGIC)
        .ok_or_else(|| CliError::runtime("an opened stream record has no record magic"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn raw_and_hex_keys_parse_and_nothing_else() {
        let raw: Vec<u8> = (0u8..32).collect();
        assert_eq!(parse(&raw).map(|k| k.to_vec()), Some(raw.clone()));
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parse(hex.as_bytes()), parse(&raw));
        assert_eq!(parse(format!("{hex}\n").as_bytes()), parse(&raw));
        assert_eq!(
            parse(hex.to_uppercase().as_bytes()),
            parse(&raw),
            "upper-case digits"
        );
        assert_eq!(parse(&hex.as_bytes()[..63]), None);
        assert_eq!(parse(format!("{}zz", &hex[..62]).as_bytes()), None);
        assert_eq!(parse(&raw[..31]), None);
        assert_eq!(parse(b""), None);
    }

    #[test]
    fn a_key_file_others_may_access_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("key");
        std::fs::write(&path, [7u8; 32]).expect("write key");
        for mode in [0o644, 0o640, 0o604, 0o610, 0o601] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let err = load(&path).expect_err("mode {mode:o} must be refused");
            assert!(err.msg.contains("accessible by others"), "{}", err.msg);
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            assert_eq!(load(&path), Ok([7u8; 32]));
        }
    }
}
