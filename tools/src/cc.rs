//! `gpupm cc`: a confidential VM's keys, from the tenant tool inside the VM
//! (`docs/confidential.md`).
//!
//! `gpupm cc status` shows a VM's key epoch and device session (public).
//! `gpupm cc rekey` replaces the VM's key: it seals the new key under the
//! current one (the VM's session key for the current epoch and session)
//! with a fresh nonce from the operating system's random source, and sends
//! the blob to gpupmd, which hands it to the device; only the device opens
//! it. Neither key leaves this process in the clear.
//!
//! # JSON (stable)
//! [`KeyStateJson`] for `status`, [`RekeyJson`] for `rekey`: one object.

use std::path::PathBuf;
use std::process::ExitCode;

use gpupm_client::Scope;
use gpupm_driver::model::cc::RekeyBlob;
use gpupm_uapi::tenant::{key_flags, KeyState};
use nix::errno::Errno;
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::keyfile;
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
    /// A VM's key epoch and device session (what a rekey is sealed for).
    Status(StatusArgs),
    /// Replace a confidential VM's key, proving the current one.
    Rekey(RekeyArgs),
}

/// Arguments of `gpupm cc status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// The VM.
    #[arg(long, value_name = "N")]
    vm: u32,
    /// JSON (the schema is below).
    #[arg(long)]
    json: bool,
}

/// Arguments of `gpupm cc rekey`.
#[derive(clap::Args, Debug)]
pub struct RekeyArgs {
    /// The confidential VM.
    #[arg(long, value_name = "N")]
    vm: u32,
    /// The VM's current key: 32 raw bytes or 64 hex digits, readable by
    /// its owner only.
    #[arg(long, value_name = "OLD")]
    key_file: PathBuf,
    /// The new key, in the same form.
    #[arg(long, value_name = "NEW")]
    new_key_file: PathBuf,
    /// JSON (the schema is below).
    #[arg(long)]
    json: bool,
}

/// `gpupm cc status --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct KeyStateJson {
    /// The VM.
    pub vm: u32,
    /// Whether the VM is confidential (the other fields are 0 if not).
    pub confidential: bool,
    /// Key epoch: 1 = the provisioned key, +1 per rekey.
    pub key_epoch: u32,
    /// The device's current session id (new at every device start and
    /// reset).
    pub session: u64,
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
    /// The device session the blob was sealed for.
    pub session: u64,
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let node = Node::open(&g.tenant_node)?;
    match &args.command {
        Command::Status(a) => status(&node, a),
        Command::Rekey(a) => rekey(&node, a),
    }
}

fn key_state(node: &Node, vm: u32) -> CliResult<KeyState> {
    node.client().key_state(vm).map_err(|e| match e.errno() {
        Some(Errno::ENOTTY) => CliError::usage(format!(
            "the gpupmd serving {} has no key requests (it predates ABI 1.5)",
            node.path.display()
        )),
        _ => node.fail(e, Some(Scope::Vm(vm))),
    })
}

fn status(node: &Node, a: &StatusArgs) -> CliResult<ExitCode> {
    let st = key_state(node, a.vm)?;
    let json = KeyStateJson {
        vm: a.vm,
        confidential: st.flags & key_flags::CONFIDENTIAL != 0,
        key_epoch: st.key_epoch,
        session: st.session,
    };
    let text = if a.json {
        json_line(&json)?
    } else if json.confidential {
        format!(
            "VM {}: confidential, key epoch {}, device session {:#018x}\n",
            json.vm, json.key_epoch, json.session
        )
    } else {
        format!("VM {}: not confidential (no key)\n", json.vm)
    };
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn rekey(node: &Node, a: &RekeyArgs) -> CliResult<ExitCode> {
    let old = keyfile::load(&a.key_file)?;
    let new = keyfile::load(&a.new_key_file)?;
    if old == new {
        return Err(CliError::usage(
            "the new key equals the current one: nothing to replace",
        ));
    }
    let not_confidential = || {
        CliError::usage(format!(
            "no confidential VM {} of yours (it does not exist, is not yours, or is not confidential)",
            a.vm
        ))
    };
    let st = key_state(node, a.vm)?;
    if st.flags & key_flags::CONFIDENTIAL == 0 {
        return Err(not_confidential());
    }
    let mut nonce_tail = [0u8; 8];
    getrandom::getrandom(&mut nonce_tail)
        .map_err(|e| CliError::runtime(format!("no random nonce from the OS: {e}")))?;
    let blob = RekeyBlob::seal(&old, a.vm, st.key_epoch, st.session, &new, nonce_tail);
    node.client()
        .rekey(a.vm, &blob.to_words())
        .map_err(|e| match e.errno() {
            Some(Errno::EACCES | Errno::ENOENT) => not_confidential(),
            Some(Errno::EINVAL) => CliError::usage(format!(
                "the device refused the new key: {} is not VM {}'s current key \
                 (or the device was reset meanwhile; run again)",
                a.key_file.display(),
                a.vm
            )),
            Some(Errno::ENOTTY) => CliError::usage(format!(
                "the gpupmd serving {} cannot rekey (it predates ABI 1.5)",
                node.path.display()
            )),
            _ => node.fail(e, Some(Scope::Vm(a.vm))),
        })?;
    let now = key_state(node, a.vm)?;
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
            "VM {}: key replaced (epoch {} -> {}); keep {} — only it opens what the device seals from now on\n",
            json.vm,
            json.old_epoch,
            json.new_epoch,
            a.new_key_file.display()
        )
    };
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}
