//! A confidential VM's session as its tenant keeps it: the session file in
//! the tenant's state directory (`$XDG_STATE_HOME/gpupm/cc/NODE/vm-N.json`,
//! else `~/.local/state/gpupm/…`), mode 0600 in a 0700 directory, written
//! atomically. It holds the session's id, its current key epoch and the
//! keys of its epochs, the device identity it was established with, and a
//! *pending* change (a session being established, a key being installed)
//! written before the device is asked, so that a tool that dies in between
//! loses nothing: the next run finds which of the two the device has.
//!
//! It is also the tenant's memory of the VM's last session and epoch: a
//! device that answers another session, no session, or an epoch other
//! than the file's is reported loudly ([`SessionFile::check`]), never
//! trusted.
//!
//! # Format (stable)
//! One JSON object: `format` ("gpupm-cc-session/1"), `vm`, `node` (the
//! tenant node), `device_serial`, `device_key` (hex), `session`, `epoch`,
//! `keys` (`[{"epoch": E, "key": "64 hex digits"}]`, the newest
//! [`KEPT_EPOCHS`]), `pending` (null or `{"session", "epoch", "key"}`),
//! `established_unix`.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use gpupm_cc::{secret_file, Key};
use gpupm_uapi::tenant::{key_flags, KeyState};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::error::{CliError, CliResult};

/// The `format` of a session file.
pub const FORMAT: &str = "gpupm-cc-session/1";
/// Epoch keys a session file keeps (records still in flight may be sealed
/// under the epoch before the current one).
pub const KEPT_EPOCHS: usize = 4;
/// A session file is never larger than this.
const MAX_LEN: usize = 16 * 1024;

#[derive(Serialize, Deserialize)]
struct EpochKeyJson {
    epoch: u32,
    key: Zeroizing<String>,
}

#[derive(Serialize, Deserialize)]
struct PendingJson {
    session: u64,
    epoch: u32,
    key: Zeroizing<String>,
}

#[derive(Serialize, Deserialize)]
struct FileJson {
    format: String,
    vm: u32,
    node: String,
    device_serial: String,
    device_key: String,
    session: u64,
    epoch: u32,
    keys: Vec<EpochKeyJson>,
    pending: Option<PendingJson>,
    established_unix: u64,
}

/// A change the device may or may not have made when the tool stopped.
#[derive(Clone, PartialEq, Eq)]
pub struct Pending {
    /// The session it belongs to.
    pub session: u64,
    /// The epoch the key gets.
    pub epoch: u32,
    /// The key.
    pub key: Zeroizing<Key>,
}

/// A tenant's session of one confidential VM.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionFile {
    /// The VM.
    pub vm: u32,
    /// The tenant node it was established through.
    pub node: String,
    /// The device's serial (from its certificate).
    pub device_serial: [u8; 16],
    /// The device's identity key (from its certificate).
    pub device_key: [u8; 32],
    /// The session id (0 while only `pending` exists).
    pub session: u64,
    /// The current key epoch.
    pub epoch: u32,
    /// Keys by epoch, oldest first.
    pub keys: Vec<(u32, Zeroizing<Key>)>,
    /// A change in flight.
    pub pending: Option<Pending>,
    /// When the session was established (seconds since the epoch).
    pub established_unix: u64,
}

impl std::fmt::Debug for SessionFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionFile")
            .field("vm", &self.vm)
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

fn secret_key(text: &str) -> Option<Zeroizing<Key>> {
    unhex::<32>(text).map(Zeroizing::new)
}

impl SessionFile {
    /// The key of `epoch`, if the file has it.
    pub fn key(&self, epoch: u32) -> Option<&Key> {
        self.keys
            .iter()
            .find(|(e, _)| *e == epoch)
            .map(|(_, k)| &**k)
    }

    /// The current epoch's key.
    pub fn current_key(&self) -> Option<&Key> {
        self.key(self.epoch)
    }

    /// Adds `key` as epoch `epoch`'s and makes it current, keeping the
    /// newest [`KEPT_EPOCHS`].
    pub fn install(&mut self, epoch: u32, key: Zeroizing<Key>) {
        self.keys.retain(|(e, _)| *e != epoch);
        self.keys.push((epoch, key));
        self.keys.sort_by_key(|(e, _)| *e);
        let excess = self.keys.len().saturating_sub(KEPT_EPOCHS);
        self.keys.drain(..excess);
        self.epoch = epoch;
    }

    /// Parses a session file's bytes (`what` names it in errors).
    pub fn parse(bytes: &[u8], what: &str) -> CliResult<SessionFile> {
        let bad = |why: &str| CliError::usage(format!("{what} is not a session file: {why}"));
        let j: FileJson = serde_json::from_slice(bytes).map_err(|e| bad(&e.to_string()))?;
        if j.format != FORMAT {
            return Err(bad(&format!("format {:?}, expected {FORMAT:?}", j.format)));
        }
        let mut keys = Vec::new();
        for k in &j.keys {
            keys.push((
                k.epoch,
                secret_key(&k.key).ok_or_else(|| bad("a key is not 64 hex digits"))?,
            ));
        }
        let pending = match &j.pending {
            None => None,
            Some(p) => Some(Pending {
                session: p.session,
                epoch: p.epoch,
                key: secret_key(&p.key).ok_or_else(|| bad("a key is not 64 hex digits"))?,
            }),
        };
        Ok(SessionFile {
            vm: j.vm,
            node: j.node,
            device_serial: unhex(&j.device_serial).ok_or_else(|| bad("device_serial"))?,
            device_key: unhex(&j.device_key).ok_or_else(|| bad("device_key"))?,
            session: j.session,
            epoch: j.epoch,
            keys,
            pending,
            established_unix: j.established_unix,
        })
    }

    /// The file's bytes.
    fn to_bytes(&self) -> CliResult<Zeroizing<Vec<u8>>> {
        let j = FileJson {
            format: FORMAT.into(),
            vm: self.vm,
            node: self.node.clone(),
            device_serial: hex(&self.device_serial),
            device_key: hex(&self.device_key),
            session: self.session,
            epoch: self.epoch,
            keys: self
                .keys
                .iter()
                .map(|(e, k)| EpochKeyJson {
                    epoch: *e,
                    key: Zeroizing::new(hex(&**k)),
                })
                .collect(),
            pending: self.pending.as_ref().map(|p| PendingJson {
                session: p.session,
                epoch: p.epoch,
                key: Zeroizing::new(hex(&*p.key)),
            }),
            established_unix: self.established_unix,
        };
        let mut out = Zeroizing::new(Vec::new());
        serde_json::to_writer_pretty(&mut *out, &j)
            .map_err(|e| CliError::runtime(format!("cannot encode the session file: {e}")))?;
        out.push(b'\n');
        Ok(out)
    }

    /// Reads the session file `path` (owner-only, regular, not a link).
    pub fn load(path: &Path) -> CliResult<SessionFile> {
        let bytes = secret_file::read(path, MAX_LEN)
            .map_err(|e| CliError::usage(format!("the session file: {e}")))?;
        Self::parse(&bytes, &path.display().to_string())
    }

    /// Reads the session file `path` if it exists (a state directory this
    /// user cannot search holds none of its sessions).
    pub fn load_if_present(path: &Path) -> CliResult<Option<SessionFile>> {
        match path.symlink_metadata() {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                ) =>
            {
                Ok(None)
            }
            _ => Self::load(path).map(Some),
        }
    }

    /// Writes the file to `path` atomically (mode 0600).
    pub fn save(&self, path: &Path) -> CliResult<()> {
        secret_file::write(path, &self.to_bytes()?)
            .map_err(|e| CliError::runtime(format!("cannot save the session: {e}")))
    }

    /// Settles a pending change against what the device says (`st`): the
    /// device made it (it is installed) or did not (it is dropped).
    /// Whether the file changed.
    pub fn settle(&mut self, st: &KeyState) -> bool {
        let Some(p) = self.pending.take() else {
            return false;
        };
        if st.flags & key_flags::SESSION != 0 && st.session == p.session && st.key_epoch == p.epoch
        {
            if p.session != self.session {
                self.keys.clear();
                self.session = p.session;
            }
            self.install(p.epoch, p.key);
        }
        true
    }

    /// Checks the device's answer `st` for the VM against the file: the
    /// same session at the same epoch, or a loud error naming what went
    /// backwards or away (exit 1).
    pub fn check(&self, st: &KeyState) -> CliResult<()> {
        let vm = self.vm;
        let establish = format!("run `gpupm cc establish --vm {vm}`");
        if st.flags & key_flags::CONFIDENTIAL == 0 {
            return Err(CliError::runtime(format!(
                "VM {vm} is no longer confidential on this device, but you hold a session for it: \
                 refusing to read it"
            )));
        }
        if st.flags & key_flags::SESSION == 0 {
            return Err(CliError::runtime(format!(
                "your session {:#018x} of VM {vm} is gone (the device was reset or its driver \
                 restarted): the VM's counts are held in the device, unreadable to everyone, \
                 until you {establish}",
                self.session
            )));
        }
        if st.session != self.session {
            return Err(CliError::runtime(format!(
                "VM {vm}'s session changed from yours ({:#018x}) to {:#018x}, which you did not \
                 establish: after a device reset someone else established it, and its counts \
                 since then may be readable by whoever holds it; {establish} once the operator \
                 has reset the device",
                self.session, st.session
            )));
        }
        if st.key_epoch < self.epoch {
            return Err(CliError::runtime(format!(
                "VM {vm}'s key epoch went backwards in session {:#018x} (yours is {}, the device \
                 says {}): refusing it",
                self.session, self.epoch, st.key_epoch
            )));
        }
        if st.key_epoch > self.epoch {
            return Err(CliError::runtime(format!(
                "VM {vm}'s key epoch moved ahead without you in session {:#018x} (yours is {}, \
                 the device says {}): refusing it",
                self.session, self.epoch, st.key_epoch
            )));
        }
        Ok(())
    }
}

/// The tenant's state directory for confidential sessions:
/// `$XDG_STATE_HOME/gpupm/cc`, else `$HOME/.local/state/gpupm/cc`.
fn cc_dir() -> CliResult<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local").join("state"),
            None => {
                return Err(CliError::usage(
                    "no state directory for the session (set XDG_STATE_HOME or HOME)",
                ))
            }
        },
    };
    Ok(base.join("gpupm").join("cc"))
}

/// A directory name for the tenant node `node`: its canonical path with
/// `/` as `_` (sessions of different devices stay apart).
fn node_dir_name(node: &Path) -> String {
    let canon = std::fs::canonicalize(node).unwrap_or_else(|_| node.to_path_buf());
    canon
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Where the session of VM `vm` reached through tenant node `node` is kept.
pub fn default_path(node: &Path, vm: u32) -> CliResult<PathBuf> {
    Ok(cc_dir()?
        .join(node_dir_name(node))
        .join(format!("vm-{vm}.json")))
}

/// Creates the directory of `path` (mode 0700) and checks that only this
/// process's user may enter it, as ssh checks `~/.ssh`.
pub fn prepare_dir(path: &Path) -> CliResult<()> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| CliError::usage(format!("cannot create {}: {e}", dir.display())))?;
    let meta = std::fs::metadata(dir)
        .map_err(|e| CliError::usage(format!("cannot stat {}: {e}", dir.display())))?;
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid || meta.mode() & 0o077 != 0 {
        return Err(CliError::usage(format!(
            "{} must belong to you (uid {euid}) and be closed to others (mode 0700); it is \
             uid {} mode {:03o}",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SessionFile {
        SessionFile {
            vm: 4,
            node: "/run/gpupm/tenant/node".into(),
            device_serial: [1; 16],
            device_key: [2; 32],
            session: 0x1234,
            epoch: 1,
            keys: vec![(1, Zeroizing::new([3; 32]))],
            pending: Some(Pending {
                session: 0x1234,
                epoch: 2,
                key: Zeroizing::new([4; 32]),
            }),
            established_unix: 99,
        }
    }

    #[test]
    fn a_session_file_round_trips_and_settles_its_pending_change() {
        let s = sample();
        let bytes = s.to_bytes().unwrap();
        assert_eq!(SessionFile::parse(&bytes, "t").unwrap(), s);
        let st = |flags, session, key_epoch| KeyState {
            flags,
            session,
            key_epoch,
            ..KeyState::default()
        };
        let both = key_flags::CONFIDENTIAL | key_flags::SESSION;
        let mut refused = s.clone();
        assert!(refused.settle(&st(both, 0x1234, 1)));
        assert_eq!((refused.epoch, refused.pending.is_none()), (1, true));
        refused.check(&st(both, 0x1234, 1)).unwrap();
        let mut made = s.clone();
        assert!(made.settle(&st(both, 0x1234, 2)));
        assert_eq!(made.current_key(), Some(&[4; 32]));
        assert_eq!(made.key(1), Some(&[3; 32]), "the older epoch is kept");
        for (state, needle) in [
            (st(key_flags::CONFIDENTIAL, 0, 0), "is gone"),
            (st(both, 0x9999, 1), "which you did not establish"),
            (st(both, 0x1234, 1), "went backwards"),
            (st(both, 0x1234, 3), "moved ahead"),
            (st(0, 0, 0), "no longer confidential"),
        ] {
            let e = made.check(&state).unwrap_err();
            assert_eq!(e.code, 1);
            assert!(e.msg.contains(needle), "{}", e.msg);
        }
        for e in 2..10 {
            made.install(e, Zeroizing::new([e.to_le_bytes()[0]; 32]));
        }
        assert_eq!(made.keys.len(), KEPT_EPOCHS);
        assert_eq!(made.keys[0].0, 10 - u32::try_from(KEPT_EPOCHS).unwrap());
    }
}
