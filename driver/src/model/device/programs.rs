//! Programs and sampling in the device: which program a context runs, the
//! lane that lets the counting engines run it while counting a partition,
//! the sampling units watching that walk, their interrupts, their window
//! region and the per-block ground truth.

use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::{BlockLedgerQuery, BLOCK_LEDGER_ROWS, IOCTL_STRUCT_VERSION};
use gpupm_uapi::regs::{ctx_state, MAX_PARTITION_SLOTS};
use gpupm_uapi::sampling::{sample_span_offset, SAMPLE_REGION, SAMPLE_SPAN};
use zerocopy::{FromZeros, IntoBytes};

use super::api::DeviceError;
use super::lane::{blank_env, ProgLane};
use super::Device;
use crate::model::cc::VmCipher;
use crate::model::ccu::bank::RATE_ONE_Q16;
use crate::model::ccu::{EngineKind, CYCLES_EVENT, INST_EVENT};
use crate::model::memory::WindowError;
use crate::model::program::run::ProgramRun;
use crate::model::ranges::watch::RangeWatcher;
use crate::model::rc::SystemPath;
use crate::model::ri::watch::RiWatcher;
use crate::model::sampling::buffer::BufEvent;
use crate::model::sampling::Watcher;
use crate::model::topology::Topology;

impl Device {
    /// Counts partition `p` up to now, running its context's program (and
    /// the sampling unit watching it) over the same cycles.
    pub(super) fn sync(&mut self, p: u32) {
        self.count(p, None);
    }

    /// Counts partition `p` up to now, running its context's program and
    /// what watches it; with `fused` (where the drained banks go beside the
    /// partition's RC) the batched engine triggers the partition's CCUs in
    /// the same pass. Returns whether it did (the cycle-level engine only
    /// counts).
    pub(super) fn count(&mut self, p: u32, fused: Option<SystemPath>) -> bool {
        let fused = self.count_or_walk(p, fused, false);
        // The counters as the device asked for them: the base of the next
        // threshold check (a catch-up count of `walk` is not).
        self.ccu.counted(p);
        fused
    }

    /// Brings partition `p`'s running program, and what watches it, up to
    /// now without counting (the batched engine counts the span later from
    /// what the walk recorded, [`ProgLane`]); the cycle-level engine, which
    /// needs every cycle's instructions as they happen, counts, but its
    /// threshold checks stay where the batched engine's are
    /// ([`crate::model::ccu::Counting::counted`]).
    fn walk(&mut self, p: u32) {
        let batched = self.ccu.kind() == EngineKind::Batched;
        self.count_or_walk(p, None, batched);
    }

    fn count_or_walk(&mut self, p: u32, fused: Option<SystemPath>, walk_only: bool) -> bool {
        let thr = Some(self.trig.threshold());
        let now = self.clock.now();
        let ctx = self.ccu.owner(p).ctx;
        let c = self.ctxs.get(ctx);
        let leak = self.leaks_confidential_ranges();
        let batched = self.ccu.kind() == EngineKind::Batched;
        let drain = match fused {
            Some(path) if batched => Some(self.rc.drain(p, path)),
            _ => None,
        };
        let fused = drain.is_some();
        if !fused && self.ccu.synced_to(p) >= now {
            return false;
        }
        if walk_only && !self.ccu.generating(p) {
            return false;
        }
        let run = self.runs.get_mut(ctx as usize).and_then(Option::as_mut);
        let prog = run.as_ref().and_then(|r| self.programs.get(r.program));
        let (Some(run), Some(prog), true) = (run, prog, p != 0 && ctx != 0) else {
            if walk_only {
                return false;
            }
            match drain {
                Some(d) => {
                    self.ccu
                        .sync_and_trigger(&self.topo, &mut self.ledger, p, now, d, None);
                }
                None => self
                    .ccu
                    .sync(&self.topo, &mut self.ledger, p, now, thr, None),
            }
            self.deliver_sample_events(p);
            return fused;
        };
        let ri = self.ri.watching(ctx).map(|session| RiWatcher {
            session,
            partition: p,
            env: blank_env(),
        });
        let confidential = self.vms.confidential(c.vm);
        let program = u32::try_from(run.program + 1).unwrap_or(0);
        let branches = run.branches();
        // A range counts no confidential VM's context (docs/confidential.md).
        let counted = !confidential || leak;
        let ranges = (self.ranges[p as usize].armed() && counted).then(|| {
            let ids = (ctx, c.vm, c.serial, program);
            RangeWatcher::new(&mut self.ranges[p as usize], ids, blank_env(), confidential)
        });
        let sampler = &mut self.samplers[p as usize];
        let watcher = sampler.armed().then(|| Watcher {
            unit: sampler,
            ctx,
            vm: c.vm,
            serial: c.serial,
            env: blank_env(),
            confidential,
            branches,
            cipher: self.vms.cipher(c.vm).map(|k: &mut VmCipher| k),
        });
        let mut lane = ProgLane::new(
            run,
            prog,
            self.ccu.synced_to(p),
            (
                self.phases[p as usize],
                &self.scenario.throttle,
                self.scenario.seed,
            ),
            (watcher, ri, ranges),
        );
        if walk_only {
            lane.walk_to(now);
        } else {
            match drain {
                Some(d) => {
                    self.ccu.sync_and_trigger(
                        &self.topo,
                        &mut self.ledger,
                        p,
                        now,
                        d,
                        Some(&mut lane),
                    );
                }
                None => self
                    .ccu
                    .sync(&self.topo, &mut self.ledger, p, now, thr, Some(&mut lane)),
            }
        }
        let watched_ranges = lane.ranges.is_some();
        lane.finish();
        self.deliver_sample_events(p);
        self.deliver_ri_events();
        if watched_ranges {
            self.deliver_range_events(p, c.vm);
        }
        fused
    }

    /// Raises the interrupts partition `p`'s sampling unit produced.
    fn deliver_sample_events(&mut self, p: u32) {
        for (kind, ev, cycle) in std::mem::take(&mut self.samplers[p as usize].events) {
            match ev {
                BufEvent::Watermark(fill) => {
                    self.intr
                        .raise(source::SAMPLE_WATERMARK, p, fill, kind, cycle);
                }
                BufEvent::Overflow(lost) => {
                    let lost = u32::try_from(lost).unwrap_or(u32::MAX);
                    self.intr
                        .raise(source::SAMPLE_OVERFLOW, p, lost, kind, cycle);
                }
            }
        }
    }

    /// Brings every partition with an armed sampler, range or RI session
    /// up to now, so that its records are in the window when time stops.
    pub(super) fn sync_sampled(&mut self) {
        for p in 1..MAX_PARTITION_SLOTS {
            let ri = self.ri.armed() && self.ri.block_of(self.ccu.owner(p).ctx).is_some();
            let watched =
                self.samplers[p as usize].armed() || self.ranges[p as usize].armed() || ri;
            if watched && self.ccu.generating(p) {
                self.walk(p);
            }
        }
    }

    /// Starts context `id`'s program (table index `program`), if any.
    pub(super) fn assign_program(&mut self, id: u32, program: Option<usize>) {
        let serial = self.ctxs.get(id).serial;
        let run = program.and_then(|i| Some(ProgramRun::new(i, self.programs.get(i)?, serial)));
        self.ctxs.entry(id).program = match &run {
            Some(r) => u32::try_from(r.program + 1).unwrap_or(0),
            None => 0,
        };
        self.runs[id as usize] = run;
    }

    /// The rate of counter `j` for a context running a program: its
    /// instructions come from the program, its SMs are clocked every cycle.
    pub(super) fn program_rate(topo: &Topology, j: usize, rate: u32) -> u32 {
        match topo.counter_event[j] {
            INST_EVENT => 0,
            CYCLES_EVENT => RATE_ONE_Q16,
            _ => rate,
        }
    }

    /// Whether context `ctx` runs a program.
    pub(super) fn runs_program(&self, ctx: u32) -> bool {
        self.runs.get(ctx as usize).is_some_and(Option::is_some)
    }

    /// Clears every program's per-block ledger (device reset).
    pub(super) fn clear_program_truth(&mut self) {
        for run in self.runs.iter_mut().flatten() {
            run.clear_truth();
        }
        for s in &mut self.samplers {
            s.reset();
        }
        self.ri.reset();
        for r in &mut self.ranges {
            r.reset();
        }
    }

    /// The per-block ground truth of context `ctx`'s program from row
    /// `first` (debug ledger), sealed for a confidential VM's context.
    pub fn ledger_blocks(&mut self, ctx: u32, first: u32) -> Result<BlockLedgerQuery, DeviceError> {
        let c = self.ctxs.get(ctx);
        if ctx == 0 || c.state == ctx_state::FREE {
            return Err(DeviceError::BadLedgerScope { scope: 0, id: ctx });
        }
        let p = self.vms.partition(c.vm);
        if self.ccu.owner(p).ctx == ctx {
            self.sync(p);
        }
        let mut q = BlockLedgerQuery::new_zeroed();
        q.version = IOCTL_STRUCT_VERSION;
        q.ctx = ctx;
        q.first = first;
        if let Some(run) = self.runs[ctx as usize].as_ref() {
            let prog = self
                .programs
                .get(run.program)
                .ok_or(DeviceError::BadLedgerScope { scope: 0, id: ctx })?;
            let rows = run.truth(prog);
            q.total = u32::try_from(rows.len()).unwrap_or(u32::MAX);
            q.ctx_cycles = run.ctx_cycles();
            let start = usize::try_from(first).unwrap_or(usize::MAX);
            if start > rows.len() {
                return Err(DeviceError::BadLedgerScope { scope: 0, id: ctx });
            }
            let page = &rows[start..rows.len().min(start + BLOCK_LEDGER_ROWS)];
            q.rows[..page.len()].copy_from_slice(page);
            q.count = u32::try_from(page.len()).unwrap_or(0);
        } else if first != 0 {
            return Err(DeviceError::BadLedgerScope { scope: 0, id: ctx });
        }
        if let Some(cipher) = self.vms.cipher(c.vm) {
            let mut payload = q.rows.as_bytes().to_vec();
            let (envelope, tag) = cipher.seal(&mut payload);
            zerocopy::FromBytes::read_from_bytes(&payload[..])
                .map(|rows| q.rows = rows)
                .map_err(|_| DeviceError::BadLedgerScope { scope: 0, id: ctx })?;
            q.envelope = envelope;
            q.tag = tag;
            q.flags |= gpupm_uapi::ioctl::ledger_flags::SEALED;
        }
        Ok(q)
    }

    /// Copies sample-region bytes at window `offset` into `buf`.
    pub(super) fn read_sample_window(
        &self,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), WindowError> {
        let len = buf.len();
        let err = WindowError::OutOfRange { offset, len };
        let rel = offset.checked_sub(SAMPLE_REGION).ok_or(err.clone())?;
        let p = u32::try_from(rel / SAMPLE_SPAN).map_err(|_| err.clone())?;
        let unit = self.samplers.get(p as usize).ok_or(err.clone())?;
        unit.read_buffer(offset - sample_span_offset(p), buf)
            .ok_or(err)
    }
}
