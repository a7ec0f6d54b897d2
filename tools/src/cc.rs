//! `gpupm cc`: a confidential VM's session, from the tenant tool inside the
//! VM (`docs/confidential.md`).
//!
//! `gpupm cc establish` runs the key exchange with the device through
//! gpupmd: the device's certificate is checked against the vendor root
//! this tool ships with, its signature over the exchange and its verify
//! data against this tool's own ephemeral key, and only then is FINISH
//! sent. The session's key never leaves this process but into the session
//! file (mode 0600, [`crate::ccsession`]). `gpupm cc status` compares the
//! device's session and key epoch with the file's and fails loudly when
//! either went backwards or away. `gpupm cc rekey` replaces the session's
//! key with a fresh random one sealed under the current one.
//!
//! # JSON (stable)
//! [`StatusJson`] for `status`, [`EstablishJson`] for `establish`,
//! [`RekeyJson`] for `rekey`: one object each.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpupm_cc::{Agreed, Key, RekeyBlob, Requester};
use gpupm_client::Scope;
use gpupm_uapi::cc::CC_VENDOR_ROOT_KEY;
use gpupm_uapi::tenant::{key_flags, KeyState};
use nix::errno::Errno;
use schemars::JsonSchema;
use serde::Serialize;
use zeroize::Zeroizing;

use crate::ccsession::{self, Pending, SessionFile};
use crate::error::{CliError, CliResult};
use crate::node::{Global, Node};
use crate::output::{emit, json_line};

/// Arguments of `gpupm cc`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// The VM's session on the device beside the one you keep; exit 1 if
    /// they disagree (a session gone, replaced, or an epoch that moved).
    Status(VmArgs),
    /// Establish the VM's session with the device (the key exchange).
    Establish(EstablishArgs),
    /// Replace the session's key with a fresh one, proving the current one.
    Rekey(VmArgs),
}

/// Arguments naming a VM and its session file.
#[derive(clap::Args, Debug)]
pub struct VmArgs {
    /// The confidential VM.
    #[arg(long, value_name = "N")]
    vm: u32,
    /// The session file (default: in your state directory,
    /// `$XDG_STATE_HOME/gpupm/cc/NODE/vm-N.json`).
    #[arg(long, value_name = "FILE")]
    session_file: Option<PathBuf>,
    /// JSON (the schema is below).
    #[arg(long)]
    json: bool,
}

/// Arguments of `gpupm cc establish`.
#[derive(clap::Args, Debug)]
pub struct EstablishArgs {
    #[command(flatten)]
    vm: VmArgs,
    /// Accept a device whose identity differs from the one your last
    /// session was established with (a replaced or re-provisioned device).
    #[arg(long)]
    new_device: bool,
}

/// How the device's session relates to the tenant's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SessionState {
    /// The VM is not confidential.
    NotConfidential,
    /// Neither the device nor you have a session.
    None,
    /// The device has your session at your epoch.
    Ok,
    /// You had a session; the device has none (reset or restart).
    Gone,
    /// The device has a session you do not hold.
    NotYours,
    /// Same session, the device's epoch is below yours.
    EpochBackwards,
    /// Same session, the device's epoch is above yours.
    EpochAhead,
}

/// The tenant's side in [`StatusJson`].
#[derive(Debug, Serialize, JsonSchema)]
pub struct LocalJson {
    /// The session file.
    pub file: String,
    /// Its session id.
    pub session: u64,
    /// Its key epoch.
    pub key_epoch: u32,
    /// The device serial it was established with (hex).
    pub device_serial: String,
}

/// `gpupm cc status --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StatusJson {
    /// The VM.
    pub vm: u32,
    /// Whether the VM is confidential.
    pub confidential: bool,
    /// Whether the device has a session for it.
    pub established: bool,
    /// The device's key epoch (0 without a session).
    pub key_epoch: u32,
    /// The device's session id (0 without a session).
    pub session: u64,
    /// Your session (null: you keep none for the VM).
    pub local: Option<LocalJson>,
    /// How the two relate; anything but `ok`, `none` and
    /// `not-confidential` exits 1.
    pub state: SessionState,
}

/// `gpupm cc establish --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EstablishJson {
    /// The VM.
    pub vm: u32,
    /// The new session's id.
    pub session: u64,
    /// Its key epoch (1).
    pub key_epoch: u32,
    /// The session it replaced (null: none).
    pub replaced: Option<u64>,
    /// The device's serial, from its certificate (hex).
    pub device_serial: String,
    /// Where the session is kept.
    pub session_file: String,
}

/// `gpupm cc rekey --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RekeyJson {
    /// The VM.
    pub vm: u32,
    /// Key epoch before the rekey (the old key's).
    pub old_epoch: u32,
    /// Key epoch now (the new key's).
    pub new_epoch: u32,
    /// The session.
    pub session: u64,
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let node = Node::open(&g.tenant_node)?;
    match &args.command {
        Command::Status(a) => status(&node, a),
        Command::Establish(a) => establish(&node, a),
        Command::Rekey(a) => rekey(&node, a),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn session_path(node: &Node, a: &VmArgs) -> CliResult<PathBuf> {
    match &a.session_file {
        Some(p) => Ok(p.clone()),
        None => ccsession::default_path(&node.path, a.vm),
    }
}

fn not_confidential(vm: u32) -> CliError {
    CliError::usage(format!(
        "no confidential VM {vm} of yours (it does not exist, is not yours, or is not confidential)"
    ))
}

/// The device's key state of a VM that must be confidential.
fn confidential_state(node: &Node, vm: u32) -> CliResult<KeyState> {
    let st = node.key_state(vm)?;
    if st.flags & key_flags::CONFIDENTIAL == 0 {
        return Err(not_confidential(vm));
    }
    Ok(st)
}

/// The tenant's session file, settled against `st` (saved if that changed
/// it).
fn load_settled(path: &Path, st: &KeyState) -> CliResult<Option<SessionFile>> {
    let Some(mut file) = SessionFile::load_if_present(path)? else {
        return Ok(None);
    };
    if file.settle(st) {
        if file.session == 0 {
            // Only a pending first session that the device never made.
            std::fs::remove_file(path)
                .map_err(|e| CliError::runtime(format!("cannot remove {}: {e}", path.display())))?;
            return Ok(None);
        }
        file.save(path)?;
    }
    Ok(Some(file))
}

fn state_of(st: &KeyState, local: Option<&SessionFile>) -> SessionState {
    let established = st.flags & key_flags::SESSION != 0;
    match (st.flags & key_flags::CONFIDENTIAL != 0, established, local) {
        (false, _, _) => SessionState::NotConfidential,
        (true, false, None) => SessionState::None,
        (true, false, Some(_)) => SessionState::Gone,
        (true, true, None) => SessionState::NotYours,
        (true, true, Some(f)) if f.session != st.session => SessionState::NotYours,
        (true, true, Some(f)) if st.key_epoch < f.epoch => SessionState::EpochBackwards,
        (true, true, Some(f)) if st.key_epoch > f.epoch => SessionState::EpochAhead,
        (true, true, Some(_)) => SessionState::Ok,
    }
}

fn status(node: &Node, a: &VmArgs) -> CliResult<ExitCode> {
    let st = node.key_state(a.vm)?;
    let path = session_path(node, a)?;
    let local = if st.flags & key_flags::CONFIDENTIAL != 0 {
        load_settled(&path, &st)?
    } else {
        SessionFile::load_if_present(&path)?
    };
    let state = state_of(&st, local.as_ref());
    let json = StatusJson {
        vm: a.vm,
        confidential: st.flags & key_flags::CONFIDENTIAL != 0,
        established: st.flags & key_flags::SESSION != 0,
        key_epoch: st.key_epoch,
        session: st.session,
        local: local.as_ref().map(|f| LocalJson {
            file: path.display().to_string(),
            session: f.session,
            key_epoch: f.epoch,
            device_serial: hex(&f.device_serial),
        }),
        state,
    };
    let problem = match (state, &local) {
        (SessionState::NotYours, None) => Some(CliError::runtime(format!(
            "VM {} has a session ({:#018x}) that you keep no file for: someone else established \
             it, or you lost your session file; its counts are readable only by its holder",
            a.vm, st.session
        ))),
        (SessionState::Ok | SessionState::None | SessionState::NotConfidential, _) => None,
        (_, Some(f)) => f.check(&st).err(),
        (_, None) => None,
    };
    let text = if a.json {
        json_line(&json)?
    } else {
        match state {
            SessionState::NotConfidential => {
                format!("VM {}: not confidential (no session)\n", a.vm)
            }
            SessionState::None => format!(
                "VM {}: confidential, no session: its counts are withheld until you run \
                 `gpupm cc establish --vm {}`\n",
                a.vm, a.vm
            ),
            SessionState::Ok => format!(
                "VM {}: confidential, your session {:#018x}, key epoch {} (kept in {})\n",
                a.vm,
                st.session,
                st.key_epoch,
                path.display()
            ),
            _ => format!(
                "VM {}: confidential, device session {:#018x} epoch {}; yours: {}\n",
                a.vm,
                st.session,
                st.key_epoch,
                local.as_ref().map_or("none".to_string(), |f| format!(
                    "{:#018x} epoch {}",
                    f.session, f.epoch
                ))
            ),
        }
    };
    emit(&text)?;
    match problem {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// A failed key-exchange message as one line.
fn exchange_failure(node: &Node, vm: u32, e: gpupm_client::ClientError) -> CliError {
    match e.errno() {
        Some(Errno::EACCES | Errno::ENOENT) => not_confidential(vm),
        Some(Errno::EOPNOTSUPP) => CliError::runtime(
            "the device has no identity (its driver runs without --identity): no session can be \
             established",
        ),
        Some(Errno::EAGAIN) => CliError::runtime(format!(
            "too many key exchanges for VM {vm} just now: try again in a second"
        )),
        Some(Errno::ENOTTY) => CliError::usage(format!(
            "the gpupmd serving {} cannot establish sessions (it predates ABI 1.11)",
            node.path.display()
        )),
        _ => node.fail(e, Some(Scope::Vm(vm))),
    }
}

fn establish(node: &Node, a: &EstablishArgs) -> CliResult<ExitCode> {
    let vm = a.vm.vm;
    let path = session_path(node, &a.vm)?;
    ccsession::prepare_dir(&path)?;
    let st = confidential_state(node, vm)?;
    let existing = load_settled(&path, &st)?;
    // The exchange: everything the relay returns is checked here.
    let req = Requester::new(vm).map_err(|e| CliError::runtime(e.to_string()))?;
    let mut msg = req.request();
    node.client()
        .cc_key_exchange(&mut msg)
        .map_err(|e| exchange_failure(node, vm, e))?;
    let agreed = req.check(&msg, &CC_VENDOR_ROOT_KEY).map_err(|e| {
        CliError::runtime(format!(
            "the key exchange for VM {vm} did not come from a genuine device unaltered: {e}; \
             nothing was established"
        ))
    })?;
    let cert = *agreed.cert();
    if let Some(f) = existing
        .as_ref()
        .filter(|f| f.device_key != cert.device_key)
    {
        if !a.new_device {
            return Err(CliError::runtime(format!(
                "the device's identity changed since your last session (serial {} -> {}): a \
                 different or re-provisioned device; pass --new-device if you expected that",
                hex(&f.device_serial),
                hex(&cert.serial)
            )));
        }
    }
    let replacing = existing
        .as_ref()
        .filter(|f| st.flags & key_flags::SESSION != 0 && f.session == st.session)
        .and_then(|f| {
            f.current_key()
                .map(|k| (Zeroizing::new(*k), f.session, f.epoch))
        });
    // Kept before FINISH: a tool that dies after the device installed the
    // session still has its key.
    let mut file = existing.unwrap_or_else(|| SessionFile {
        vm,
        node: node.path.display().to_string(),
        device_serial: cert.serial,
        device_key: cert.device_key,
        session: 0,
        epoch: 0,
        keys: Vec::new(),
        pending: None,
        established_unix: 0,
    });
    file.pending = Some(Pending {
        session: agreed.session(),
        epoch: 1,
        key: Zeroizing::new(*agreed.vm_key()),
    });
    file.save(&path)?;
    let finished = finish(
        node,
        &agreed,
        replacing.as_ref().map(|(k, s, e)| (&**k, *s, *e)),
    );
    let now = node.key_state(vm)?;
    let replaced = replacing.as_ref().map(|(_, s, _)| *s);
    if file.settle(&now) && file.session == agreed.session() {
        file.device_serial = cert.serial;
        file.device_key = cert.device_key;
        file.node = node.path.display().to_string();
        file.established_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
    }
    if file.session == 0 {
        std::fs::remove_file(&path)
            .map_err(|e| CliError::runtime(format!("cannot remove {}: {e}", path.display())))?;
    } else {
        file.save(&path)?;
    }
    finished.map_err(|e| match e.errno() {
        Some(Errno::EBUSY) => CliError::runtime(format!(
            "VM {vm} already has a session ({:#018x}) that you do not hold: someone else \
             established it after the device's last reset, and its counts are readable by \
             whoever holds it; ask the operator to reset the device, then establish again",
            now.session
        )),
        Some(Errno::EINVAL) => CliError::runtime(format!(
            "the device refused to finish VM {vm}'s exchange (it was superseded by another \
             exchange, or altered on the way): run again"
        )),
        _ => exchange_failure(node, vm, e),
    })?;
    file.check(&now)?;
    let json = EstablishJson {
        vm,
        session: file.session,
        key_epoch: file.epoch,
        replaced,
        device_serial: hex(&cert.serial),
        session_file: path.display().to_string(),
    };
    let text = if a.vm.json {
        json_line(&json)?
    } else {
        format!(
            "VM {vm}: session {:#018x} established with device {} (key epoch {}); kept in {}\n",
            json.session,
            json.device_serial,
            json.key_epoch,
            path.display()
        )
    };
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Sends FINISH (proving `replacing`, the current session, if any).
fn finish(
    node: &Node,
    agreed: &Agreed,
    replacing: Option<(&Key, u64, u32)>,
) -> Result<(), gpupm_client::ClientError> {
    let mut fin = agreed.finish_request(replacing);
    node.client().cc_finish(&mut fin)
}

fn rekey(node: &Node, a: &VmArgs) -> CliResult<ExitCode> {
    let path = session_path(node, a)?;
    let st = confidential_state(node, a.vm)?;
    let mut file = load_settled(&path, &st)?.ok_or_else(|| {
        CliError::usage(format!(
            "you keep no session of VM {} ({}): run `gpupm cc establish --vm {}` first",
            a.vm,
            path.display(),
            a.vm
        ))
    })?;
    file.check(&st)?;
    let current = file
        .current_key()
        .map(|k| Zeroizing::new(*k))
        .ok_or_else(|| CliError::runtime("the session file lacks its current key"))?;
    let mut new = Zeroizing::new([0u8; 32]);
    let mut nonce_tail = [0u8; 8];
    getrandom::getrandom(new.as_mut_slice())
        .and_then(|()| getrandom::getrandom(&mut nonce_tail))
        .map_err(|e| CliError::runtime(format!("no randomness from the OS: {e}")))?;
    let blob = RekeyBlob::seal(&current, a.vm, st.key_epoch, st.session, &new, nonce_tail);
    file.pending = Some(Pending {
        session: st.session,
        epoch: st.key_epoch + 1,
        key: new,
    });
    file.save(&path)?;
    let sent = node.client().rekey(a.vm, &blob.to_words());
    let now = node.key_state(a.vm)?;
    file.settle(&now);
    file.save(&path)?;
    sent.map_err(|e| match e.errno() {
        Some(Errno::EACCES | Errno::ENOENT) => not_confidential(a.vm),
        Some(Errno::EINVAL) => CliError::runtime(format!(
            "the device refused the new key of VM {} (the session changed meanwhile): run \
             `gpupm cc status --vm {}`",
            a.vm, a.vm
        )),
        Some(Errno::ENOTTY) => CliError::usage(format!(
            "the gpupmd serving {} cannot rekey (it predates ABI 1.5)",
            node.path.display()
        )),
        _ => node.fail(e, Some(Scope::Vm(a.vm))),
    })?;
    file.check(&now)?;
    let json = RekeyJson {
        vm: a.vm,
        old_epoch: st.key_epoch,
        new_epoch: now.key_epoch,
        session: st.session,
    };
    let text = if a.json {
        json_line(&json)?
    } else {
        format!(
            "VM {}: key replaced (epoch {} -> {}); the new key is kept in {}\n",
            json.vm,
            json.old_epoch,
            json.new_epoch,
            path.display()
        )
    };
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}
