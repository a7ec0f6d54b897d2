//! The metrics tests' fixture: a small in-process [`CounterView`] and
//! steady self-metrics.

use std::collections::BTreeMap;

use gpupm_uapi::events::{by_name, MAX_EVENTS};
use gpupmd::feed::FeedReceiver;
use gpupmd::view::{
    CounterView, CtxId, CtxInfo, CtxState, DeltaSample, HealthSnapshot, HealthSource, Scope,
    Totals, VmId,
};

/// The value the fixture reports for `sm_inst_executed` of VM 1.
pub const VM1_SM_INST_EXECUTED: u64 = 123_456;

/// One fixture context.
#[derive(Clone, Debug)]
pub struct FxCtx {
    pub info: CtxInfo,
    pub counters: [u64; MAX_EVENTS],
}

/// A fixed device: VM 1 (context 1 in two instances, one retired, and
/// context 2, retired), VM 2 (confidential, one context), VM 3
/// (`vm3_contexts` contexts with distinct created cycles). A VM block holds
/// the sum of its instances plus what pruned instances counted (as on the
/// device: every event once in its context's block and once in its VM's).
#[derive(Debug)]
pub struct FixtureView {
    pub vms: BTreeMap<VmId, Option<[u64; MAX_EVENTS]>>,
    pub contexts: Vec<FxCtx>,
    pub system: [u64; MAX_EVENTS],
}

fn counters(seed: u64) -> [u64; MAX_EVENTS] {
    let mut c = [0u64; MAX_EVENTS];
    for (i, v) in c.iter_mut().enumerate() {
        *v = seed * 1000 + u64::try_from(i).unwrap() * 7;
    }
    c
}

fn event(name: &str) -> usize {
    usize::from(by_name(name).unwrap().id)
}

impl FixtureView {
    pub fn new(vm3_contexts: u32) -> Self {
        let mut contexts = Vec::new();
        let mut add = |ctx: CtxId, vm: VmId, created_cycle: u64, state: CtxState| {
            contexts.push(FxCtx {
                info: CtxInfo {
                    ctx,
                    vm,
                    created_cycle,
                    state,
                },
                counters: counters(u64::from(ctx) + created_cycle % 7 + 10),
            });
        };
        add(1, 1, 50, CtxState::Retired);
        add(1, 1, 100, CtxState::Active);
        add(2, 1, 200, CtxState::Retired);
        add(30, 2, 300, CtxState::Active);
        for i in 0..vm3_contexts {
            // Created cycles not in id order, so "newest" differs from "highest id".
            add(
                100 + i,
                3,
                1_000 + u64::from((i * 7) % vm3_contexts),
                CtxState::Active,
            );
        }
        let sum_of = |vm: VmId, pruned: u64| {
            let mut total = counters(pruned);
            for c in contexts.iter().filter(|c| c.info.vm == vm) {
                for (t, v) in total.iter_mut().zip(c.counters) {
                    *t += v;
                }
            }
            total
        };
        let mut vm1 = sum_of(1, 5);
        let inst = event("sm_inst_executed");
        vm1[inst] = VM1_SM_INST_EXECUTED;
        let vm3 = sum_of(3, 6);
        let mut vms = BTreeMap::new();
        vms.insert(1, Some(vm1));
        vms.insert(2, None);
        vms.insert(3, Some(vm3));
        let mut system = counters(9);
        system[event("nvlink_rx_flits")] = 4242;
        Self {
            vms,
            contexts,
            system,
        }
    }

    /// The fixture's instance (ctx, created cycle).
    pub fn instance(&self, ctx: CtxId, created_cycle: u64) -> Option<&FxCtx> {
        self.contexts
            .iter()
            .find(|c| c.info.ctx == ctx && c.info.created_cycle == created_cycle)
    }
}

impl CounterView for FixtureView {
    fn vms(&self) -> Vec<VmId> {
        self.vms.keys().copied().collect()
    }
    fn vm_partition(&self, vm: VmId) -> Option<u32> {
        self.vms.contains_key(&vm).then_some(vm)
    }
    fn contexts(&self, vm: VmId) -> Option<Vec<CtxInfo>> {
        self.vms.contains_key(&vm).then(|| {
            self.contexts
                .iter()
                .filter(|c| c.info.vm == vm)
                .map(|c| c.info)
                .collect()
        })
    }
    fn ctx_vm(&self, ctx: CtxId) -> Option<VmId> {
        self.contexts
            .iter()
            .find(|c| c.info.ctx == ctx)
            .map(|c| c.info.vm)
    }
    fn totals(&self, scope: Scope) -> Option<Totals> {
        let plain = |counters| Totals::Plain {
            counters,
            commit_seq: 1,
            cycle: 10,
        };
        match scope {
            Scope::System => Some(plain(self.system)),
            Scope::Vm(vm) => Some(match self.vms.get(&vm)? {
                Some(c) => plain(*c),
                None => Totals::Sealed(vec![0xa5; 64]),
            }),
            Scope::Ctx(ctx) => {
                let latest = self.latest_instance(ctx)?;
                self.instance_totals(ctx, latest.created_cycle)
            }
        }
    }
    fn instance_totals(&self, ctx: CtxId, created_cycle: u64) -> Option<Totals> {
        let c = self.instance(ctx, created_cycle)?;
        Some(match self.vms.get(&c.info.vm)? {
            Some(_) => Totals::Plain {
                counters: c.counters,
                commit_seq: 1,
                cycle: 10,
            },
            None => Totals::Sealed(vec![0x5a; 64]),
        })
    }
    fn recent(&self, _scope: Scope, _max: usize) -> Option<Vec<DeltaSample>> {
        None
    }
    fn subscribe(&self, _scope: Scope) -> Option<FeedReceiver<DeltaSample>> {
        None
    }
    fn clock_khz(&self) -> u32 {
        1_000_000
    }
}

/// Self-metrics that are the same on every call ([`steady_health`]).
#[derive(Debug)]
pub struct SteadyHealth;

impl HealthSource for SteadyHealth {
    fn snapshot(&self) -> HealthSnapshot {
        steady_health()
    }
}

/// The metrics fixture's self-metrics (the same on every call, with three
/// latency samples each time).
pub fn steady_health() -> HealthSnapshot {
    HealthSnapshot {
        uptime_s: 42.5,
        handshakes: 1000,
        handshake_latency_ns: vec![20_000, 40_000, 900_000],
        fallbacks: 3,
        lost_records: 4,
        drained_records: 5000,
        mirrored_records: 4990,
        mirror_fallbacks: 2,
        drain_lag_records: 6,
        handshake_response_max_ns: 1_250_000,
        // 0.25 s at the device's 1.98 GHz.
        device: gpupmd::view::DeviceIdentity {
            clock_khz: 1_980_000,
            ..Default::default()
        },
        clock_lag_cycles: 495_000_000,
        contexts_active: 12,
        contexts_retired: 7,
        tenant_requests: 800,
        tenant_errors: 9,
        ..HealthSnapshot::default()
    }
}
