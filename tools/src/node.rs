//! Access to the tenant node for every subcommand: opening it with the
//! documented one-line errors, the scope options, event-name parsing with
//! "did you mean", and reading totals.

use std::path::{Path, PathBuf};

use gpupm_uapi::events::{self, CATALOGUE, MAX_EVENTS};
use gpupm_uapi::tenant::{counter_flags, ReadCounters, Whoami};
use gpupmd::tenant::client::{ClientError, TenantClient, WhoamiExt};
use gpupmd::view::Scope;
use nix::errno::Errno;

use crate::error::{CliError, CliResult};

/// Default path of the tenant node.
pub const DEFAULT_TENANT_NODE: &str = "/run/gpupm/tenant/node";
/// Default device node directory.
pub const DEFAULT_NODE_DIR: &str = "/run/gpupm/dev";

/// Options every subcommand shares.
#[derive(clap::Args, Debug, Clone)]
pub struct Global {
    /// Tenant node served by gpupmd.
    #[arg(long, global = true, default_value = DEFAULT_TENANT_NODE, value_name = "PATH")]
    pub tenant_node: PathBuf,
    /// Directory of the device nodes (card0, card0-oob).
    #[arg(long, global = true, default_value = DEFAULT_NODE_DIR, value_name = "DIR")]
    pub node_dir: PathBuf,
}

/// `--vm N | --ctx N | --system`.
#[derive(clap::Args, Debug, Clone, Copy)]
#[group(multiple = false)]
pub struct ScopeArgs {
    /// A VM.
    #[arg(long, value_name = "N")]
    pub vm: Option<u32>,
    /// A context.
    #[arg(long, value_name = "N")]
    pub ctx: Option<u32>,
    /// The whole device (admin only).
    #[arg(long)]
    pub system: bool,
}

impl ScopeArgs {
    /// The scope asked for; without an option, the caller's only VM.
    pub fn resolve(&self, node: &Node) -> CliResult<Scope> {
        match (self.vm, self.ctx, self.system) {
            (Some(vm), _, _) => Ok(Scope::Vm(vm)),
            (_, Some(ctx), _) => Ok(Scope::Ctx(ctx)),
            (_, _, true) => Ok(Scope::System),
            _ => {
                let vms = node.whoami()?.visible_vms();
                match vms.as_slice() {
                    [vm] => Ok(Scope::Vm(*vm)),
                    _ => Err(CliError::usage("name a scope: --vm N, --ctx N or --system")),
                }
            }
        }
    }
}

/// `"vm"`, `"ctx"` or `"system"` and the id.
pub fn scope_name(s: Scope) -> (&'static str, u32) {
    match s {
        Scope::System => ("system", 0),
        Scope::Vm(v) => ("vm", v),
        Scope::Ctx(c) => ("ctx", c),
    }
}

/// The one message for a scope that is not the caller's or does not exist.
pub fn not_visible(s: Scope) -> CliError {
    match s {
        Scope::System => CliError::usage(
            "the system scope is for the admin only (root or the gpupm-admin group)",
        ),
        Scope::Vm(v) => CliError::usage(format!(
            "no VM {v} visible to you (it does not exist or is not yours)"
        )),
        Scope::Ctx(c) => CliError::usage(format!(
            "no context {c} visible to you (it does not exist or is not yours)"
        )),
    }
}

/// An open tenant node.
#[derive(Debug)]
pub struct Node {
    /// The client.
    pub client: TenantClient,
    /// Its path.
    pub path: PathBuf,
}

impl Node {
    /// Opens the node, mapping failures to the documented messages.
    pub fn open(path: &Path) -> CliResult<Node> {
        match TenantClient::open(path) {
            Ok(client) => Ok(Node {
                client,
                path: path.to_owned(),
            }),
            Err(e) => Err(open_error(path, &e)),
        }
    }

    /// A client error as one line.
    pub fn fail(&self, e: &ClientError, s: Option<Scope>) -> CliError {
        match (e.errno(), s) {
            (Some(Errno::EACCES | Errno::EPERM | Errno::ENOENT), Some(s)) => not_visible(s),
            (Some(Errno::EACCES | Errno::EPERM), None) => denied(&self.path),
            (Some(Errno::ENOTCONN | Errno::ECONNABORTED), _) => CliError::usage(format!(
                "no gpupmd: {} is not served (daemon stopped?)",
                self.path.display()
            )),
            (Some(Errno::EINVAL), Some(s)) => {
                let (kind, id) = scope_name(s);
                CliError::usage(format!("invalid {kind} id {id}"))
            }
            _ => CliError::runtime(format!("{}: {}", self.path.display(), chain(e))),
        }
    }

    /// What the caller may see; a caller mapped to nothing gets the
    /// permission message.
    pub fn whoami(&self) -> CliResult<Whoami> {
        let w = self.client.whoami().map_err(|e| self.fail(&e, None))?;
        if w.admin == 0 && w.n_vms == 0 {
            return Err(denied(&self.path));
        }
        Ok(w)
    }

    /// Every event's total of `s`.
    pub fn totals(&self, s: Scope) -> CliResult<Box<ReadCounters>> {
        self.client
            .read_counters(s, &[])
            .map_err(|e| self.fail(&e, Some(s)))
    }

    /// Nominal device clock in kHz (from a rate query on a visible VM).
    pub fn clock_khz(&self, w: &Whoami) -> CliResult<u32> {
        let vm = w
            .visible_vms()
            .first()
            .copied()
            .ok_or_else(|| denied(&self.path))?;
        let r = self
            .client
            .read_rates(Scope::Vm(vm), 1)
            .map_err(|e| self.fail(&e, Some(Scope::Vm(vm))))?;
        Ok(r.clock_khz.max(1))
    }
}

/// Whether a [`ReadCounters`] answer is sealed (confidential VM).
pub fn sealed(rc: &ReadCounters) -> bool {
    rc.flags & counter_flags::SEALED != 0
}

fn denied(path: &Path) -> CliError {
    CliError::usage(format!(
        "permission denied on {} (are you mapped to a VM in gpupmd.toml?)",
        path.display()
    ))
}

fn open_error(path: &Path, e: &ClientError) -> CliError {
    match e.errno() {
        Some(Errno::ENOENT | Errno::ENOTDIR) => {
            CliError::usage(format!("no gpupmd: {} does not exist", path.display()))
        }
        Some(Errno::EACCES | Errno::EPERM) => denied(path),
        Some(Errno::ENOTCONN | Errno::ECONNABORTED) => CliError::usage(format!(
            "no gpupmd: {} is not served (daemon stopped?)",
            path.display()
        )),
        _ => CliError::usage(chain(e)),
    }
}

/// An error and its sources on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s += ": ";
        s += &c.to_string();
        cur = c.source();
    }
    s
}

/// Parses `a,b,c` into event ids; an unknown name names the closest one.
pub fn parse_events(list: &str) -> CliResult<Vec<u16>> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match events::by_name(name) {
            Some(e) if !out.contains(&e.id) => out.push(e.id),
            Some(_) => {}
            None => {
                let best = CATALOGUE
                    .iter()
                    .min_by_key(|e| distance(name, e.name))
                    .map_or("", |e| e.name);
                return Err(CliError::usage(format!(
                    "unknown event \"{name}\" (did you mean \"{best}\"?)"
                )));
            }
        }
    }
    if out.is_empty() {
        return Err(CliError::usage("no events named (see `gpupm events`)"));
    }
    Ok(out)
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Element-wise `a - b` (saturating: a reset reads as zero).
pub fn delta(a: &[u64; MAX_EVENTS], b: &[u64; MAX_EVENTS]) -> [u64; MAX_EVENTS] {
    let mut out = [0; MAX_EVENTS];
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
        *o = x.saturating_sub(*y);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_event_names_the_closest_valid_one() {
        let e = parse_events("sm_inst_executed,l2_hti").unwrap_err();
        assert_eq!(e.msg, "unknown event \"l2_hti\" (did you mean \"l2_hit\"?)");
        assert_eq!(e.code, 2);
        assert_eq!(parse_events("l2_hit, l2_miss").unwrap(), vec![23, 24]);
    }
}
