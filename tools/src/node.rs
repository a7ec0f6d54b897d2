//! Access to the tenant node for every subcommand: opening it with the
//! documented one-line errors, the scope options, event-name parsing with
//! "did you mean", and reading totals — through the scope's tenant page
//! when the daemon offers one (docs/pages.md), through the node otherwise.

use std::cell::{Ref, RefCell};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use gpupm_client::page::{self, CounterReader};
use gpupm_client::{ClientError, Scope, TenantClient, WhoamiExt};
use gpupm_uapi::events::{self, CATALOGUE, MAX_EVENTS};
use gpupm_uapi::tenant::{counter_flags, ReadCounters, Whoami};
use nix::errno::Errno;

use crate::error::{one_line, CliError, CliResult};
use crate::keyfile::{KeySource, SessionHost};

pub use gpupm_client::paths::{DEFAULT_NODE_DIR, DEFAULT_PAGES_SOCKET, DEFAULT_TENANT_NODE};

/// The help heading of the options every subcommand shares.
const GLOBAL: &str = "Global options";

/// Options every subcommand shares.
#[derive(clap::Args, Debug, Clone)]
pub struct Global {
    /// Tenant node served by gpupmd.
    #[arg(long, global = true, help_heading = GLOBAL, default_value = DEFAULT_TENANT_NODE, value_name = "PATH")]
    pub tenant_node: PathBuf,
    /// Directory of the device nodes (card0, card0-oob).
    #[arg(long, global = true, help_heading = GLOBAL, default_value = DEFAULT_NODE_DIR, value_name = "DIR")]
    pub node_dir: PathBuf,
    /// gpupmd's page socket: totals are read from a scope's shared page
    /// when the daemon offers one, from the tenant node otherwise.
    #[arg(long, global = true, help_heading = GLOBAL, default_value = DEFAULT_PAGES_SOCKET, value_name = "PATH")]
    pub pages_socket: PathBuf,
    /// Read totals through the tenant node only (no pages).
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub no_pages: bool,
}

impl Global {
    /// The page socket to use, if pages are wanted.
    pub fn pages(&self) -> Option<PathBuf> {
        (!self.no_pages).then(|| self.pages_socket.clone())
    }

    /// Opens the tenant node, reading totals through pages if wanted.
    pub fn node(&self) -> CliResult<Node> {
        Node::open_with_pages(&self.tenant_node, self.pages())
    }
}

/// `--ctx ID` (the id's newest context) or `--ctx ID@CYCLE` (the context
/// instance created at CYCLE, as `gpupm list --all` shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtxArg {
    /// Context id.
    pub ctx: u32,
    /// Created cycle of the instance.
    pub created_cycle: Option<u64>,
}

impl FromStr for CtxArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("\"{s}\" is not a context: give ID or ID@CREATED_CYCLE");
        let (id, cycle) = match s.split_once('@') {
            Some((id, cycle)) => (id, Some(cycle.parse().map_err(|_| bad())?)),
            None => (s, None),
        };
        Ok(CtxArg {
            ctx: id.parse().map_err(|_| bad())?,
            created_cycle: cycle,
        })
    }
}

/// What a reading command reads: a scope, or one context instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A VM, a context id (its newest instance) or the device.
    Scope(Scope),
    /// The context instance (id, created cycle).
    Instance {
        /// Context id.
        ctx: u32,
        /// Created cycle.
        created_cycle: u64,
    },
}

impl fmt::Display for Target {
    /// `vm 3`, `ctx 12`, `ctx 12@40960`, `system 0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Target::Scope(s) => {
                let (kind, id) = scope_name(s);
                write!(f, "{kind} {id}")
            }
            Target::Instance { ctx, created_cycle } => write!(f, "ctx {ctx}@{created_cycle}"),
        }
    }
}

/// A reading of a [`Target`]'s cumulative totals (from its page or the node).
pub use gpupm_client::page::Reading;

impl Target {
    /// The client's name of the same target.
    fn page_target(self) -> page::Target {
        match self {
            Target::Scope(s) => page::Target::Scope(s),
            Target::Instance { ctx, created_cycle } => {
                page::Target::Instance { ctx, created_cycle }
            }
        }
    }
}

/// `--vm N | --ctx ID[@CYCLE] | --system`.
#[derive(clap::Args, Debug, Clone, Copy)]
#[group(multiple = false)]
pub struct ScopeArgs {
    /// A VM.
    #[arg(long, value_name = "N")]
    pub vm: Option<u32>,
    /// A context: ID is the id's newest context, ID@CYCLE the instance
    /// created at CYCLE (any instance `gpupm list --all` shows, retired
    /// ones included; not for `record`).
    #[arg(long, value_name = "ID[@CYCLE]")]
    pub ctx: Option<CtxArg>,
    /// The whole device (admin only).
    #[arg(long)]
    pub system: bool,
}

impl ScopeArgs {
    /// What to read; without an option, the caller's only VM.
    pub fn resolve_target(&self, node: &Node) -> CliResult<Target> {
        match self.ctx {
            Some(CtxArg {
                ctx,
                created_cycle: Some(created_cycle),
            }) => Ok(Target::Instance { ctx, created_cycle }),
            _ => self.resolve(node).map(Target::Scope),
        }
    }

    /// The scope asked for; without an option, the caller's only VM. A
    /// context instance (`--ctx ID@CYCLE`) is refused: a scope follows
    /// the id's newest context.
    pub fn resolve(&self, node: &Node) -> CliResult<Scope> {
        match (self.vm, self.ctx, self.system) {
            (Some(vm), _, _) => Ok(Scope::Vm(vm)),
            (
                _,
                Some(CtxArg {
                    created_cycle: Some(_),
                    ..
                }),
                _,
            ) => Err(CliError::usage(
                "this command follows a context id's live context: give --ctx ID without @CYCLE",
            )),
            (_, Some(CtxArg { ctx, .. }), _) => Ok(Scope::Ctx(ctx)),
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

/// An open tenant node, and the pages read through it.
#[derive(Debug)]
pub struct Node {
    reader: RefCell<CounterReader>,
    /// Its path.
    pub path: PathBuf,
    pages: Option<PathBuf>,
}

/// Why a live view got no reading.
#[derive(Debug)]
pub enum Missing {
    /// gpupmd does not answer (stopped, restarting, or its node is gone):
    /// the interval has no data. Why, in a few words.
    Gone(String),
    /// Any other failure: the command ends with it.
    Failed(CliError),
}

impl From<CliError> for Missing {
    fn from(e: CliError) -> Missing {
        Missing::Failed(e)
    }
}

/// Whether a failed request means the daemon is not serving the node:
/// a FUSE connection whose server went away, or a node that is gone.
fn daemon_gone(e: &ClientError) -> bool {
    matches!(
        e.errno(),
        Some(
            Errno::ENOTCONN
                | Errno::ECONNABORTED
                | Errno::ENOENT
                | Errno::ENODEV
                | Errno::ENXIO
                | Errno::ESHUTDOWN
                | Errno::EIO
        )
    )
}

impl Node {
    /// Opens the node (totals through the node only), mapping failures to
    /// the documented messages.
    pub fn open(path: &Path) -> CliResult<Node> {
        Node::open_with_pages(path, None)
    }

    /// Opens the node; totals are read through pages from `pages` (a page
    /// socket) when the daemon offers them.
    pub fn open_with_pages(path: &Path, pages: Option<PathBuf>) -> CliResult<Node> {
        match TenantClient::open(path) {
            Ok(client) => Ok(Node {
                reader: RefCell::new(CounterReader::new(client, pages.clone())),
                path: path.to_owned(),
                pages,
            }),
            Err(e) => Err(open_error(path, e)),
        }
    }

    /// Opens the node again (after a daemon restart the old descriptor
    /// is dead): `Gone` while it cannot be opened.
    pub fn reopen(&mut self) -> Result<(), Missing> {
        match TenantClient::open(&self.path) {
            Ok(client) => {
                self.reader = RefCell::new(CounterReader::new(client, self.pages.clone()));
                Ok(())
            }
            Err(e) if daemon_gone(&e) || e.errno() == Some(Errno::ENOTDIR) => Err(Missing::Gone(
                format!("{}: {}", self.path.display(), one_line(e)),
            )),
            Err(e) => Err(Missing::Failed(open_error(&self.path, e))),
        }
    }

    /// Whether gpupmd serves the node now (a page can be read while the
    /// daemon is down: it shows the last totals it wrote).
    pub fn alive(&self) -> Result<(), Missing> {
        match self.client().whoami() {
            Ok(_) => Ok(()),
            Err(e) if daemon_gone(&e) => Err(Missing::Gone(format!(
                "gpupmd does not answer on {} ({})",
                self.path.display(),
                e.errno()
                    .map_or_else(|| one_line(e), |n| n.desc().to_lowercase())
            ))),
            Err(e) => Err(Missing::Failed(self.fail(e, None))),
        }
    }

    /// [`Node::read_opened`] for a live view: a daemon that does not
    /// answer is `Gone`, and so is a page the daemon no longer writes.
    /// Without `keys` a sealed reading stays sealed (`top` shows every VM;
    /// a [`KeySource`] opens one VM's).
    pub fn read_live(&self, t: Target, keys: Option<&KeySource>) -> Result<Reading, Missing> {
        self.alive()?;
        let reading = self.read(t).or_else(|e| {
            // The read's own failure, unless the daemon went in between.
            self.alive()?;
            Err(Missing::Failed(e))
        })?;
        match keys {
            Some(keys) => Ok(self.open_sealed(t, reading, keys)?),
            None => Ok(reading),
        }
    }

    /// The tenant node client.
    pub fn client(&self) -> Ref<'_, TenantClient> {
        Ref::map(self.reader.borrow(), CounterReader::node)
    }

    /// A client error as one line.
    pub fn fail(&self, e: ClientError, s: Option<Scope>) -> CliError {
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
            _ => CliError::runtime(format!("{}: {}", self.path.display(), one_line(e))),
        }
    }

    /// What the caller may see; a caller mapped to nothing gets the
    /// permission message.
    pub fn whoami(&self) -> CliResult<Whoami> {
        let w = self.client().whoami().map_err(|e| self.fail(e, None))?;
        if w.admin == 0 && w.n_vms == 0 {
            return Err(denied(&self.path));
        }
        Ok(w)
    }

    /// Every event's total of `s`.
    pub fn totals(&self, s: Scope) -> CliResult<Box<ReadCounters>> {
        self.client()
            .read_counters(s, &[])
            .map_err(|e| self.fail(e, Some(s)))
    }

    /// Every event's total of a scope or a context instance: from its
    /// page when the daemon offers one, else from the node.
    pub fn read(&self, t: Target) -> CliResult<Reading> {
        self.reader
            .borrow_mut()
            .read(t.page_target())
            .map_err(|e| match t {
                Target::Scope(s) => self.fail(e, Some(s)),
                Target::Instance { .. } => self.fail_instance(e, t),
            })
    }

    /// A VM's key state (`TENANT_IOC_KEY_STATE`).
    pub fn key_state(&self, vm: u32) -> CliResult<gpupm_uapi::tenant::KeyState> {
        self.client().key_state(vm).map_err(|e| match e.errno() {
            Some(Errno::ENOTTY) => CliError::usage(format!(
                "the gpupmd serving {} has no key requests (it predates ABI 1.5)",
                self.path.display()
            )),
            _ => self.fail(e, Some(Scope::Vm(vm))),
        })
    }

    /// [`Node::read`], with a sealed reading opened by the VM's keys
    /// (`--key-file`, or the tenant's session of the VM): the sealed block
    /// slot comes from the node (a page carries the same ciphertext) and
    /// the key opens it here.
    pub fn read_opened(&self, t: Target, keys: &KeySource) -> CliResult<Reading> {
        let reading = self.read(t)?;
        self.open_sealed(t, reading, keys)
    }

    /// `reading` of `t`, opened by the VM's keys if it is sealed and the
    /// caller has them; as it is otherwise.
    fn open_sealed(&self, t: Target, reading: Reading, keys: &KeySource) -> CliResult<Reading> {
        if !reading.sealed {
            return Ok(reading);
        }
        let slot = match t {
            Target::Scope(s) => self.totals(s)?.sealed,
            Target::Instance { ctx, created_cycle } => {
                self.client()
                    .read_instance(ctx, created_cycle, &[])
                    .map_err(|e| self.fail_instance(e, t))?
                    .sealed
            }
        };
        let Some(key) = keys.for_vm(self, slot.envelope.vm)? else {
            return Ok(reading);
        };
        let block = crate::keyfile::open_slot(&slot, key)?;
        Ok(Reading {
            values: block.counters,
            commit_seq: block.commit_seq,
            cycle: block.last_commit_cycle,
            sealed: false,
            generation: None,
            source: page::Source::Ioctl,
        })
    }

    /// A failed instance read as one line; the same message for someone
    /// else's instance as for one that does not exist.
    fn fail_instance(&self, e: ClientError, t: Target) -> CliError {
        match e.errno() {
            Some(Errno::EACCES | Errno::EPERM | Errno::ENOENT) => CliError::usage(format!(
                "no {t} visible to you (it does not exist, was pruned, or is not yours)"
            )),
            Some(Errno::EINVAL) => CliError::usage(format!("invalid context instance {t}")),
            Some(Errno::ENOTTY) => CliError::usage(format!(
                "the gpupmd serving {} cannot read context instances (it predates ABI 1.2)",
                self.path.display()
            )),
            _ => self.fail(e, None),
        }
    }

    /// Nominal device clock in kHz (from a rate query on a visible VM).
    pub fn clock_khz(&self, w: &Whoami) -> CliResult<u32> {
        let vm = w
            .visible_vms()
            .first()
            .copied()
            .ok_or_else(|| denied(&self.path))?;
        let r = self
            .client()
            .read_rates(Scope::Vm(vm), 1)
            .map_err(|e| self.fail(e, Some(Scope::Vm(vm))))?;
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

fn open_error(path: &Path, e: ClientError) -> CliError {
    match e.errno() {
        Some(Errno::ENOENT | Errno::ENOTDIR) => {
            CliError::usage(format!("no gpupmd: {} does not exist", path.display()))
        }
        Some(Errno::EACCES | Errno::EPERM) => denied(path),
        Some(Errno::ENOTCONN | Errno::ECONNABORTED) => CliError::usage(format!(
            "no gpupmd: {} is not served (daemon stopped?)",
            path.display()
        )),
        _ => CliError::usage(one_line(e)),
    }
}

/// Parses `a,b,c` into event ids; an unknown name names the closest one.
pub fn parse_events(list: &str) -> CliResult<Vec<u16>> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match events::by_name(name) {
            Some(e) if !out.contains(&e.id) => out.push(e.id),
            Some(_) => {}
            None => return Err(CliError::usage(unknown_event(name))),
        }
    }
    if out.is_empty() {
        return Err(CliError::usage("no events named (see `gpupm events`)"));
    }
    Ok(out)
}

/// The message for an unknown event name: the events whose names contain
/// it (`cycles`: every `*_cycles_*` event), else the closest name.
fn unknown_event(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let containing: Vec<&str> = CATALOGUE
        .iter()
        .filter(|e| !lower.is_empty() && e.name.contains(lower.as_str()))
        .map(|e| e.name)
        .collect();
    match containing.as_slice() {
        [] => {
            let best = CATALOGUE
                .iter()
                .min_by_key(|e| strsim::levenshtein(name, e.name))
                .map_or("", |e| e.name);
            format!("unknown event \"{name}\" (did you mean \"{best}\"?)")
        }
        [one] => format!("unknown event \"{name}\" (did you mean \"{one}\"?)"),
        many => format!(
            "unknown event \"{name}\" (did you mean one of {}? `gpupm events` lists them all)",
            many.join(", ")
        ),
    }
}

/// Element-wise `a - b` (saturating: a reset reads as zero).
pub fn delta(a: &[u64; MAX_EVENTS], b: &[u64; MAX_EVENTS]) -> [u64; MAX_EVENTS] {
    let mut out = [0; MAX_EVENTS];
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
        *o = x.saturating_sub(*y);
    }
    out
}

impl SessionHost for Node {
    fn node_path(&self) -> &std::path::Path {
        &self.path
    }

    fn key_state(&self, vm: u32) -> CliResult<gpupm_uapi::tenant::KeyState> {
        Node::key_state(self, vm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctx_takes_an_id_or_an_instance() {
        assert_eq!(
            "12".parse(),
            Ok(CtxArg {
                ctx: 12,
                created_cycle: None
            })
        );
        assert_eq!(
            "12@40960".parse(),
            Ok(CtxArg {
                ctx: 12,
                created_cycle: Some(40960)
            })
        );
        for bad in ["", "@5", "12@", "12@x", "x@5", "1@2@3", "-1"] {
            assert!(bad.parse::<CtxArg>().is_err(), "{bad}");
        }
        let t = Target::Instance {
            ctx: 12,
            created_cycle: 40960,
        };
        assert_eq!(t.to_string(), "ctx 12@40960");
        assert_eq!(Target::Scope(Scope::Vm(3)).to_string(), "vm 3");
    }

    #[test]
    fn unknown_event_names_the_closest_valid_one() {
        let e = parse_events("sm_inst_executed,l2_hti").unwrap_err();
        assert_eq!(e.msg, "unknown event \"l2_hti\" (did you mean \"l2_hit\"?)");
        assert_eq!(e.code, 2);
        assert_eq!(parse_events("l2_hit, l2_miss").unwrap(), vec![23, 24]);
        let e = parse_events("cycles").unwrap_err();
        assert!(
            e.msg.starts_with(
                "unknown event \"cycles\" (did you mean one of sm_cycles_elapsed, sm_cycles_active,"
            ),
            "{}",
            e.msg
        );
        assert!(!e.msg.contains("ce_bytes"), "{}", e.msg);
    }
}
