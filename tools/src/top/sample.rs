//! Sampling for `top`, `dmon` and the demo's live view: totals of every
//! visible VM and its active contexts, and rates from the deltas between
//! two samples over device time.

use std::collections::HashMap;

use gpupm_client::{Scope, WhoamiExt};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::tenant::ctx_state;

use crate::derived::{self, Metric};
use crate::error::CliResult;
use crate::node::{self, Node, Target};

/// Frames between refreshes of the context lists.
const LIST_EVERY: u32 = 5;

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

/// Keeps the previous totals of every scope.
#[derive(Debug)]
pub struct Sampler {
    node: Node,
    clock_khz: u32,
    vms: Vec<u32>,
    ctxs: HashMap<u32, Vec<u32>>,
    prev: HashMap<Scope, [u64; MAX_EVENTS]>,
    prev_now: u64,
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
            frames: 0,
        })
    }

    /// Reads every VM (and with `contexts`, their active contexts) and
    /// returns rows with rates over the time since the previous sample.
    pub fn sample(&mut self, contexts: bool) -> CliResult<(u64, Vec<Row>)> {
        if contexts && self.frames.is_multiple_of(LIST_EVERY) {
            for &vm in &self.vms {
                let list = self
                    .node
                    .client()
                    .list_contexts(vm)
                    .map_err(|e| self.node.fail(e, Some(Scope::Vm(vm))))?;
                self.ctxs.insert(
                    vm,
                    list.iter()
                        .filter(|c| c.state == ctx_state::ACTIVE)
                        .map(|c| c.ctx)
                        .collect(),
                );
            }
        }
        self.frames += 1;
        let mut read = Vec::new();
        for &vm in &self.vms {
            read.push((vm, None, self.node.read(Target::Scope(Scope::Vm(vm)))?));
            if contexts {
                for &c in self.ctxs.get(&vm).map(Vec::as_slice).unwrap_or_default() {
                    // A context may end between the list and the read.
                    if let Ok(t) = self.node.read(Target::Scope(Scope::Ctx(c))) {
                        read.push((vm, Some(c), t));
                    }
                }
            }
        }
        let now = read.iter().map(|r| r.2.cycle).max().unwrap_or(0);
        let span = now.saturating_sub(self.prev_now);
        let mut rows = Vec::with_capacity(read.len());
        let mut next = HashMap::with_capacity(read.len());
        for (vm, ctx, t) in read {
            let scope = ctx.map_or(Scope::Vm(vm), Scope::Ctx);
            let d = self
                .prev
                .get(&scope)
                .map_or(t.values, |p| node::delta(&t.values, p));
            let span = if self.prev.contains_key(&scope) {
                span
            } else {
                t.cycle
            };
            let metrics = derived::compute(&d, span, self.clock_khz);
            let inst = d[3] as f64;
            let secs = span as f64 / (f64::from(self.clock_khz) * 1000.0);
            rows.push(Row {
                vm,
                ctx,
                sealed: t.sealed,
                metrics,
                inst_per_s: if secs > 0.0 { inst / secs } else { 0.0 },
                inst_total: t.values[3],
            });
            next.insert(scope, t.values);
        }
        self.prev = next;
        self.prev_now = now;
        Ok((now, rows))
    }
}
