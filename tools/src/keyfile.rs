//! Opening a confidential VM's sealed slots as its tenant: with its
//! established session (the session file `gpupm cc establish` keeps, see
//! [`crate::ccsession`]) or, for a VM whose key a test or `gpupm demo`
//! wrote into the scenario, with a raw key file — 32 raw bytes, or 64
//! hexadecimal digits (one optional trailing newline).
//!
//! Like ssh with a private key, a key or session file that is not a
//! regular file, is a symbolic link, belongs to someone else or that
//! anyone but its owner may read, write or search is refused (a FIFO
//! does not block the open). [`Keyring::key_for`] picks the key of a slot's
//! envelope — from a session, only for that session, and only by epoch.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use gpupm_cc::{open, secret_file, Key, OpenError};
use gpupm_client::sampling::session::SampleBody;
use gpupm_uapi::layout::{envelope_flags, RECORD_MAGIC};
use gpupm_uapi::layout::{Block, BlockSlot, Envelope, StreamRecord, StreamSlot, BLOCK_MAGIC};
use gpupm_uapi::sampling::{BranchSlot, BranchStackRecord, PcRecord, PcSlot};
use gpupm_uapi::sampling::{BRANCH_RECORD_MAGIC, PC_RECORD_MAGIC};
use gpupm_uapi::tenant::sampling::sample_kind;
use zerocopy::FromBytes;
use zeroize::Zeroizing;

use crate::ccsession::{self, SessionFile};
use crate::error::{CliError, CliResult};

/// What checking a session needs of the tenant node it was established
/// through (the node, `crate::node::Node`, implements it; keys know
/// nothing else of it).
pub trait SessionHost {
    /// The tenant node's path (session files are kept per node).
    fn node_path(&self) -> &Path;
    /// The device's key state of VM `vm`, through the node.
    fn key_state(&self, vm: u32) -> CliResult<gpupm_uapi::tenant::KeyState>;
}

/// A raw key file is never larger than this (64 hex digits and a CR LF).
const MAX_LEN: usize = 66;
/// A session file is never larger than this.
const MAX_SESSION_LEN: usize = 16 * 1024;

/// What opens a VM's sealed slots.
pub enum Keyring {
    /// A raw key (a scenario's key: tests and the demo), for any session
    /// and epoch.
    Raw(Zeroizing<Key>),
    /// The tenant's session: only its own session's slots, by epoch.
    Session {
        /// The session.
        file: Box<SessionFile>,
        /// Where it is kept.
        path: PathBuf,
    },
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Keyring::Raw(_) => f.write_str("Keyring::Raw(..)"),
            Keyring::Session { file, path } => f
                .debug_struct("Keyring::Session")
                .field("file", file)
                .field("path", path)
                .finish(),
        }
    }
}

#[cfg(test)]
impl PartialEq<Key> for Keyring {
    fn eq(&self, other: &Key) -> bool {
        matches!(self, Keyring::Raw(k) if **k == *other)
    }
}

impl Keyring {
    /// The key that opens a slot with `envelope`, or why there is none.
    pub fn key_for(&self, envelope: &Envelope) -> CliResult<&Key> {
        let vm = envelope.vm;
        if envelope.flags & envelope_flags::WITHHELD != 0 {
            return Err(withheld(vm));
        }
        match self {
            Keyring::Raw(k) => Ok(k),
            Keyring::Session { file: s, .. } => {
                if s.vm != vm {
                    return Err(CliError::usage(format!(
                        "the session is VM {}'s, not VM {vm}'s",
                        s.vm
                    )));
                }
                if envelope.session() != s.session {
                    return Err(CliError::runtime(format!(
                        "VM {vm}'s counters are sealed in session {:#018x}, not in yours \
                         ({:#018x}): run `gpupm cc status --vm {vm}`",
                        envelope.session(),
                        s.session
                    )));
                }
                s.key(envelope.key_epoch).ok_or_else(|| {
                    CliError::runtime(format!(
                        "VM {vm}'s counters are sealed under key epoch {} of your session, whose \
                         key you no longer keep (yours is epoch {})",
                        envelope.key_epoch, s.epoch
                    ))
                })
            }
        }
    }

    /// Settles a session's pending change against the device and checks
    /// that the device still has this session at this epoch (a loud error
    /// otherwise: [`SessionFile::check`]). A raw key is not checked.
    pub fn check_live(&mut self, node: &dyn SessionHost, vm: u32) -> CliResult<()> {
        let Keyring::Session { file, path } = self else {
            return Ok(());
        };
        let st = node.key_state(vm)?;
        if file.settle(&st) {
            file.save(path)?;
        }
        file.check(&st)
    }
}

/// Where a command's keys come from: `--key-file` (a session file or a
/// raw key), else the tenant's own session file of the VM a sealed slot
/// names (`gpupm cc establish` keeps it), found and checked against the
/// device on first use.
#[derive(Debug)]
pub struct KeySource {
    explicit: Option<Keyring>,
    checked: OnceCell<Option<Keyring>>,
}

impl KeySource {
    /// Keys from `key_file` if given, else from the session files.
    pub fn new(key_file: Option<&Path>) -> CliResult<Self> {
        Ok(KeySource {
            explicit: key_file.map(load).transpose()?,
            checked: OnceCell::new(),
        })
    }

    /// The keys for VM `vm`'s sealed slots read through `node`: checked
    /// once against the device. `None`: the caller gave none and keeps no
    /// session of the VM.
    pub fn for_vm(&self, node: &dyn SessionHost, vm: u32) -> CliResult<Option<&Keyring>> {
        if let Some(k) = self.checked.get() {
            return Ok(k.as_ref());
        }
        let mut keys = match &self.explicit {
            Some(Keyring::Raw(k)) => Some(Keyring::Raw(k.clone())),
            Some(Keyring::Session { file, path }) => Some(Keyring::Session {
                file: file.clone(),
                path: path.clone(),
            }),
            None => {
                let path = ccsession::default_path(node.node_path(), vm)?;
                SessionFile::load_if_present(&path)?.map(|f| Keyring::Session {
                    file: Box::new(f),
                    path,
                })
            }
        };
        if let Some(k) = keys.as_mut() {
            k.check_live(node, vm)?;
        }
        Ok(self.checked.get_or_init(|| keys).as_ref())
    }

    /// The keys given with `--key-file` (offline use: no device to check).
    pub fn explicit(&self) -> Option<&Keyring> {
        self.explicit.as_ref()
    }
}

/// The error of a withheld slot.
fn withheld(vm: u32) -> CliError {
    CliError::runtime(format!(
        "VM {vm} has no session: its counts are held inside the device, unreadable to \
         everyone, until its tenant runs `gpupm cc establish --vm {vm}`"
    ))
}

/// Reads the key or session file in `path`.
pub fn load(path: &Path) -> CliResult<Keyring> {
    let shown = path.display();
    let bytes = secret_file::read(path, MAX_SESSION_LEN)
        .map_err(|e| CliError::usage(format!("the key file: {e}")))?;
    if bytes.first() == Some(&b'{') {
        return SessionFile::parse(&bytes, &shown.to_string()).map(|f| Keyring::Session {
            file: Box::new(f),
            path: path.to_path_buf(),
        });
    }
    if bytes.len() > MAX_LEN {
        return Err(CliError::usage(format!(
            "the key file {shown} holds neither 32 raw bytes nor 64 hexadecimal digits"
        )));
    }
    parse(&bytes).map(Keyring::Raw).ok_or_else(|| {
        CliError::usage(format!(
            "the key file {shown} holds neither 32 raw bytes nor 64 hexadecimal digits"
        ))
    })
}

/// A key from a key file's bytes.
fn parse(bytes: &[u8]) -> Option<Zeroizing<Key>> {
    let mut key = Zeroizing::new([0u8; 32]);
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

/// Opens `payload` with `keys` (the envelope's key), mapping a failure to
/// one line naming `what`.
fn open_with(
    keys: &Keyring,
    what: &str,
    envelope: &Envelope,
    payload: &mut [u8],
    tag: &[u8; 16],
) -> CliResult<()> {
    let key = keys.key_for(envelope)?;
    open(key, envelope, payload, tag).map_err(|e| match e {
        OpenError::Withheld => withheld(envelope.vm),
        _ => wrong_key(what, envelope),
    })
}

/// The block a sealed slot holds, opened with the VM's `keys`.
pub fn open_slot(slot: &BlockSlot, keys: &Keyring) -> CliResult<Block> {
    let mut payload = slot.payload;
    open_with(keys, "counters", &slot.envelope, &mut payload, &slot.tag)?;
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
/// `SEALED`: envelope, ciphertext, tag), opened with the VM's `keys`.
pub fn open_sample(kind: u16, slot: &[u8], keys: &Keyring) -> CliResult<SampleBody> {
    let malformed = || CliError::runtime("a sealed sample slot has the wrong size");
    match kind {
        sample_kind::CYCLE => {
            let mut s = PcSlot::read_from_bytes(slot).map_err(|_| malformed())?;
            open_with(keys, "samples", &s.envelope, &mut s.payload, &s.tag)?;
            PcRecord::read_from_bytes(&s.payload)
                .ok()
                .filter(|r| r.magic == PC_RECORD_MAGIC)
                .map(SampleBody::Cycle)
                .ok_or_else(|| CliError::runtime("an opened PC sample has no record magic"))
        }
        sample_kind::BRANCH_STACK => {
            let mut s = BranchSlot::read_from_bytes(slot).map_err(|_| malformed())?;
            open_with(keys, "samples", &s.envelope, &mut s.payload, &s.tag)?;
            BranchStackRecord::read_from_bytes(&s.payload)
                .ok()
                .filter(|r| r.magic == BRANCH_RECORD_MAGIC)
                .map(|r| SampleBody::Branch(Box::new(r)))
                .ok_or_else(|| CliError::runtime("an opened branch stack has no record magic"))
        }
        _ => Err(CliError::runtime("a sealed sample of an unknown kind")),
    }
}

/// The record a sealed stream slot holds, opened with the VM's `keys`.
pub fn open_stream(slot: &StreamSlot, keys: &Keyring) -> CliResult<StreamRecord> {
    let mut payload = slot.payload;
    open_with(
        keys,
        "counter deltas",
        &slot.envelope,
        &mut payload,
        &slot.tag,
    )?;
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
        let parse = |b: &[u8]| parse(b).map(|k| *k);
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parse(hex.as_bytes()), parse(&raw[..]));
        assert_eq!(parse(format!("{hex}\n").as_bytes()), parse(&raw[..]));
        assert_eq!(
            parse(hex.to_uppercase().as_bytes()),
            parse(&raw[..]),
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
            assert_eq!(load(&path).expect("an owner-only key loads"), [7u8; 32]);
        }
    }

    #[test]
    fn a_fifo_a_link_or_another_users_key_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        let err = load(&fifo).expect_err("a FIFO is no key file");
        assert!(err.msg.contains("not a regular file"), "{}", err.msg);
        let key = dir.path().join("key");
        std::fs::write(&key, [7u8; 32]).expect("write key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&key, &link).expect("symlink");
        assert!(load(&link).is_err(), "a symbolic link is refused");
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&key, Some(12345.into()), None).expect("chown");
            let err = load(&key).expect_err("another user's key");
            assert!(err.msg.contains("belongs to uid 12345"), "{}", err.msg);
        }
    }
}
