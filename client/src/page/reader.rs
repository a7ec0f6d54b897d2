//! Reading a scope's totals through its page when the daemon offers one,
//! through the tenant node's ioctl otherwise.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::page::{page_flags, page_state, PageCounters};
use gpupm_uapi::tenant::counter_flags;
use zerocopy::FromZeros;

use super::{MappedPage, PageClient, PageError};
use crate::tenant::{ClientError, CtxId, Scope, TenantClient};

/// How long a refused page, or an unreachable socket, is not asked for
/// again: a reader polling every interval should not ask the daemon for
/// something it just refused.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A scope: a VM, a context id's newest instance, or the system
    /// (which has no page).
    Scope(Scope),
    /// The context instance (id, created cycle).
    Instance {
        /// Context id.
        ctx: CtxId,
        /// Created cycle.
        created_cycle: u64,
    },
}

/// Where a [`Reading`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The scope's page (no system call).
    Page,
    /// `TENANT_IOC_READ_COUNTERS` / `TENANT_IOC_READ_INSTANCE`.
    Ioctl,
}

/// Cumulative totals of a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Totals by event id (zero when sealed).
    pub values: [u64; MAX_EVENTS],
    /// Commits folded in (0 when sealed).
    pub commit_seq: u64,
    /// Device cycle of the last commit folded in (0 when sealed).
    pub cycle: u64,
    /// A confidential VM's scope: the values are sealed.
    pub sealed: bool,
    /// The page's generation (page readings only).
    pub generation: Option<u64>,
    /// Where the values came from.
    pub source: Source,
}

impl Reading {
    fn of_page(c: &PageCounters) -> Reading {
        Reading {
            values: c.totals,
            commit_seq: c.commit_seq,
            cycle: c.cycle,
            sealed: c.flags & page_flags::SEALED != 0,
            generation: Some(c.generation),
            source: Source::Page,
        }
    }
}

/// Reads targets through their pages, falling back to the tenant node.
#[derive(Debug)]
pub struct CounterReader {
    node: TenantClient,
    socket: Option<PathBuf>,
    pages: Option<PageClient>,
    unreachable_since: Option<Instant>,
    mapped: HashMap<Target, MappedPage>,
    refused: HashMap<Target, Instant>,
    scratch: PageCounters,
}

impl CounterReader {
    /// A reader over `node`, using the page socket at `socket` (`None`:
    /// the ioctl only).
    pub fn new(node: TenantClient, socket: Option<PathBuf>) -> CounterReader {
        CounterReader {
            node,
            socket,
            pages: None,
            unreachable_since: None,
            mapped: HashMap::new(),
            refused: HashMap::new(),
            scratch: PageCounters::new_zeroed(),
        }
    }

    /// The tenant node client (listing, rates, anything pages do not hold).
    pub fn node(&self) -> &TenantClient {
        &self.node
    }

    /// Totals of `target`: from its page when one is offered and readable,
    /// else from the tenant node (whose errors are returned).
    pub fn read(&mut self, target: Target) -> Result<Reading, ClientError> {
        if let Some(r) = self.read_page(target) {
            return Ok(r);
        }
        self.read_ioctl(target)
    }

    /// Totals of `target` through the tenant node only.
    pub fn read_ioctl(&self, target: Target) -> Result<Reading, ClientError> {
        let (values, commit_seq, cycle, flags) = match target {
            Target::Scope(s) => {
                let rc = self.node.read_counters(s, &[])?;
                (rc.values, rc.commit_seq, rc.cycle, rc.flags)
            }
            Target::Instance { ctx, created_cycle } => {
                let ri = self.node.read_instance(ctx, created_cycle, &[])?;
                (ri.values, ri.commit_seq, ri.cycle, ri.out_flags)
            }
        };
        Ok(Reading {
            values,
            commit_seq,
            cycle,
            sealed: flags & counter_flags::SEALED != 0,
            generation: None,
            source: Source::Ioctl,
        })
    }

    /// The page reading of `target`, or `None` when it has no usable page.
    pub fn read_page(&mut self, target: Target) -> Option<Reading> {
        if matches!(target, Target::Scope(Scope::System)) {
            return None;
        }
        if !self.mapped.contains_key(&target) {
            let page = self.map(target)?;
            self.mapped.insert(target, page);
        }
        let page = self.mapped.get(&target)?;
        page.read_counters_into(&mut self.scratch).ok()?;
        match self.scratch.state {
            page_state::ACTIVE | page_state::DESTROYED => Some(Reading::of_page(&self.scratch)),
            // Retired or withdrawn: the daemon writes it no more; a newer
            // page (or the ioctl) answers from now on.
            _ => {
                self.mapped.remove(&target);
                None
            }
        }
    }

    fn map(&mut self, target: Target) -> Option<MappedPage> {
        let now = Instant::now();
        if self
            .refused
            .get(&target)
            .is_some_and(|t| now.duration_since(*t) < RETRY_AFTER)
        {
            return None;
        }
        let client = self.client(now)?;
        let result = match target {
            Target::Scope(Scope::Vm(vm)) => client.map_vm(vm),
            Target::Scope(Scope::Ctx(ctx)) => client.map_ctx(ctx),
            Target::Instance { ctx, created_cycle } => client.map_instance(ctx, created_cycle),
            Target::Scope(Scope::System) => return None,
        };
        match result {
            Ok(page) => {
                self.refused.remove(&target);
                Some(page)
            }
            Err(e) => {
                if matches!(
                    e,
                    PageError::Socket(_) | PageError::Closed | PageError::Protocol(_)
                ) {
                    // The connection is gone (a daemon restart): reconnect
                    // on a later read.
                    self.pages = None;
                    self.unreachable_since = Some(now);
                }
                self.refused.insert(target, now);
                None
            }
        }
    }

    fn client(&mut self, now: Instant) -> Option<&PageClient> {
        if self.pages.is_none() {
            let path = self.socket.as_ref()?;
            if self
                .unreachable_since
                .is_some_and(|t| now.duration_since(t) < RETRY_AFTER)
            {
                return None;
            }
            match PageClient::connect(path) {
                Ok(c) => {
                    self.pages = Some(c);
                    self.unreachable_since = None;
                }
                Err(_) => {
                    self.unreachable_since = Some(now);
                    return None;
                }
            }
        }
        self.pages.as_ref()
    }
}
