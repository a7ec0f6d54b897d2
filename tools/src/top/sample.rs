//! Sampling for `top`, `dmon` and the demo's live view: totals of every
//! visible VM and its active contexts, and rates from the deltas between
//! two samples over device time; each sample says what it covers
//! ([`crate::interval`]).

use std::collections::HashMap;
use std::time::Duration;

use gpupm_client::{Scope, WhoamiExt};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::tenant::ctx_state;

use crate::derived::{self, Metric};
use crate::error::CliResult;
use crate::interval::{self, Moment, Span, Status};
use crate::node::{self, Missing, Node, Target};

/// Frames between refreshes of the context lists.
const LIST_EVERY: u32 = 5;

/// Event id of `sm_inst_executed`.
const INST: usize = 3;

/// One row of the live view.
#[derive(Debug, Clone)]
pub struct Row {
    /// VM.
    pub vm: u32,
    /// Context (`None` for the VM row).
    pub ctx: Option<u32>,
    /// Confidential: nothing readable.
    pub sealed: bool,
    /// Derived metrics over the last interval.
    pub metrics: Vec<Metric>,
    /// Warp instructions per second over the last interval.
    pub inst_per_s: f64,
    /// Cumulative warp instructions.
    pub inst_total: u64,
}

/// One sample: its rows and what they cover.
#[derive(Debug)]
pub struct Frame {
    /// VM rows, each followed by its contexts' (when asked for).
    pub rows: Vec<Row>,
    /// From the previous sample (or the device's reset, for the first).
    pub span: Span,
    /// `Ok`, `CatchUp` (after a gap, or late) or `Reset` (the rows' rates
    /// are left out: the device's counts restarted).
    pub status: Status,
    /// When it was read.
    pub at: Moment,
}

/// Keeps the previous totals of every scope.
#[derive(Debug)]
pub struct Sampler {
    node: Node,
    clock_khz: u32,
    vms: Vec<u32>,
    ctxs: HashMap<u32, Vec<u32>>,
    prev: HashMap<Scope, [u64; MAX_EVENTS]>,
    prev_now: u64,
    prev_at: Option<Moment>,
    period: Option<Duration>,
    after_gap: bool,
    frames: u32,
}

impl Sampler {
    /// A sampler on an open node.
    pub fn new(node: Node) -> CliResult<Sampler> {
        let who = node.whoami()?;
        let clock_khz = node.clock_khz(&who)?;
        Ok(Sampler {
            node,
            clock_khz,
            vms: who.visible_vms(),
            ctxs: HashMap::new(),
            prev: HashMap::new(),
            prev_now: 0,
            prev_at: None,
            period: None,
            after_gap: false,
            frames: 0,
        })
    }

    /// Samples due every `period`: one later by half of it is a catch-up.
    pub fn with_period(mut self, period: Duration) -> Sampler {
        self.period = Some(period);
        self
    }

    /// The VMs sampled.
    pub fn vms(&self) -> &[u32] {
        &self.vms
    }

    /// After a sample found no daemon: opens the node again (the next
    /// sample is a catch-up).
    pub fn reopen(&mut self) -> Result<(), Missing> {
        self.after_gap = true;
        self.frames = 0;
        self.node.reopen()
    }

    fn list(&mut self) -> Result<(), Missing> {
        for &vm in &self.vms {
            let list = match self.node.client().list_contexts(vm) {
                Ok(l) => l,
                Err(e) => {
                    self.node.alive()?;
                    return Err(Missing::Failed(self.node.fail(e, Some(Scope::Vm(vm)))));
                }
            };
            self.ctxs.insert(
                vm,
                list.iter()
                    .filter(|c| c.state == ctx_state::ACTIVE)
                    .map(|c| c.ctx)
                    .collect(),
            );
        }
        Ok(())
    }

    /// Reads every VM (and with `contexts`, their active contexts) and
    /// returns rows with rates over the device time since the previous
    /// sample; `Gone` when gpupmd does not answer.
    pub fn sample(&mut self, contexts: bool) -> Result<Frame, Missing> {
        if contexts && self.frames.is_multiple_of(LIST_EVERY) {
            self.list()?;
        }
        self.frames += 1;
        let mut read = Vec::new();
        for &vm in &self.vms {
            read.push((
                vm,
                None,
                self.node.read_live(Target::Scope(Scope::Vm(vm)), None)?,
            ));
            if contexts {
                for &c in self.ctxs.get(&vm).map(Vec::as_slice).unwrap_or_default() {
                    // A context may end between the list and the read.
                    if let Ok(t) = self.node.read(Target::Scope(Scope::Ctx(c))) {
                        read.push((vm, Some(c), t));
                    }
                }
            }
        }
        let at = Moment::now();
        let now = read.iter().map(|r| r.2.cycle).max().unwrap_or(0);
        let (span, mut status) = match &self.prev_at {
            Some(p) => (
                Span::new(p, self.prev_now, &at, now, self.clock_khz),
                Status::Ok,
            ),
            None => (Span::since_reset(&at, now, self.clock_khz), Status::Ok),
        };
        if self.prev_at.is_some() && now < self.prev_now {
            status = Status::Reset;
            self.prev.clear();
        } else if std::mem::take(&mut self.after_gap)
            || self.period.is_some_and(|p| interval::late(&span, p))
        {
            status = Status::CatchUp;
        }
        let mut rows = Vec::with_capacity(read.len());
        let mut next = HashMap::with_capacity(read.len());
        for (vm, ctx, t) in read {
            let scope = ctx.map_or(Scope::Vm(vm), Scope::Ctx);
            let (d, span_cycles) = match self.prev.get(&scope) {
                Some(p) if status != Status::Reset => {
                    (node::delta(&t.values, p), now.saturating_sub(self.prev_now))
                }
                _ => (t.values, t.cycle),
            };
            let (metrics, inst_per_s) = if status == Status::Reset {
                (Vec::new(), f64::NAN)
            } else {
                #[allow(clippy::cast_precision_loss)]
                let inst = d[INST] as f64;
                #[allow(clippy::cast_precision_loss)]
                let secs = span_cycles as f64 / (f64::from(self.clock_khz) * 1000.0);
                (
                    derived::compute(&d, span_cycles, self.clock_khz),
                    if secs > 0.0 { inst / secs } else { f64::NAN },
                )
            };
            rows.push(Row {
                vm,
                ctx,
                sealed: t.sealed,
                metrics,
                inst_per_s,
                inst_total: t.values[INST],
            });
            next.insert(scope, t.values);
        }
        self.prev = next;
        self.prev_now = now;
        self.prev_at = Some(at);
        Ok(Frame {
            rows,
            span,
            status,
            at,
        })
    }
}
