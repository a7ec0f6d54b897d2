//! The tenant-node tests' fixture: an in-process [`CounterView`], its
//! users, and the real node mounted on a temp dir. Client code runs as
//! those users in forked children ([`gpupm_test_support::users`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpupm_driver::model::cc::VmCipher;
pub use gpupm_test_support::users::{errno_of, run_as, spawn_as, Cred};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::layout::{
    block_kind, Block, BlockSlot, StreamRecord, StreamSlot, BLOCK_MAGIC, RECORD_MAGIC,
};
use gpupmd::feed::{Feed, FeedReceiver};
use gpupmd::tenant::{
    TenantMap, TenantNode, TenantPolicy, TenantStats, DEFAULT_THREADS, NODE_NAME,
};
use gpupmd::view::{CounterView, CtxId, CtxInfo, CtxState, DeltaSample, Scope, Totals, VmId};
use zerocopy::IntoBytes;

/// Tenant A: uid, owns VM 1 (by uid).
pub const UID_A: u32 = 61001;
/// Tenant B: uid, owns VM 2 (by uid).
pub const UID_B: u32 = 61002;
/// Tenant C: uid, owns confidential VM 3 through supplementary group [`GID_C`].
pub const UID_C: u32 = 61003;
/// A user mapped to nothing.
pub const UID_NOBODY: u32 = 61004;
/// An admin through supplementary membership of [`ADMIN_GID`].
pub const UID_ADMIN: u32 = 61005;
/// Group owning VM 3.
pub const GID_C: u32 = 61300;
/// The admin group.
pub const ADMIN_GID: u32 = 61900;
/// Key of confidential VM 3.
pub const KEY3: [u8; 32] = [0x3c; 32];
/// Session (boot) id the fixture's device seals VM 3's slots in.
pub const FIXTURE_SESSION: u64 = 0x5e55_1011_0000_0003;

/// The fixture's users.
pub trait FixtureUsers {
    fn tenant_a() -> Cred;
    fn tenant_b() -> Cred;
    fn tenant_c() -> Cred;
    fn nobody() -> Cred;
    fn group_admin() -> Cred;
}

impl FixtureUsers for Cred {
    fn tenant_a() -> Cred {
        Cred::user(UID_A)
    }
    fn tenant_b() -> Cred {
        Cred::user(UID_B)
    }
    fn tenant_c() -> Cred {
        Cred::with_groups(UID_C, &[GID_C])
    }
    fn nobody() -> Cred {
        Cred::user(UID_NOBODY)
    }
    fn group_admin() -> Cred {
        Cred::with_groups(UID_ADMIN, &[ADMIN_GID])
    }
}

/// The policy the tests mount with.
pub fn policy() -> TenantPolicy {
    TenantPolicy {
        admin_gid: Some(ADMIN_GID),
        tenants: vec![
            TenantMap {
                vm: 1,
                uid: Some(UID_A),
                gid: None,
            },
            TenantMap {
                vm: 2,
                uid: Some(UID_B),
                gid: None,
            },
            TenantMap {
                vm: 3,
                uid: None,
                gid: Some(GID_C),
            },
        ],
    }
}

/// The default `[limits]` over [`policy`].
pub fn bounds() -> Arc<gpupmd::tenant::bounds::Bounds> {
    gpupmd::tenant::bounds::Bounds::new(gpupm_client::config::Limits::default(), &policy())
}

/// Checks what the tenant-node tests need.
pub fn require_root_and_fuse() {
    gpupm_test_support::require_root_and_fuse("the tenant-node tests");
}

fn values(base: u64) -> [u64; MAX_EVENTS] {
    std::array::from_fn(|i| base + i as u64)
}

pub mod sampler;

/// Three VMs: 1 (contexts 11, 12), 2 (contexts 21, 22), 3 confidential
/// (context 31); feeds you push [`DeltaSample`]s into; a sampling plane
/// over a recording sampler (VM `n` on partition `n`).
pub struct Fixture {
    /// What sessions programmed.
    pub sampler: Arc<sampler::RecordingSampler>,
    /// The plane the node's sessions use.
    pub plane: Arc<gpupmd::sampling::Plane>,
    ctxs: Vec<CtxInfo>,
    totals: HashMap<Scope, Totals>,
    recent: HashMap<Scope, Vec<DeltaSample>>,
    feeds: Mutex<HashMap<Scope, Feed<DeltaSample>>>,
    cipher: Mutex<VmCipher>,
    /// Sealed bytes published for VM 3 and context 31.
    pub sealed: HashMap<Scope, Vec<u8>>,
    /// Calls into the view (to see that the node only reads).
    pub calls: AtomicU64,
}

impl Fixture {
    pub fn new() -> Arc<Self> {
        let ctx = |ctx, vm, created_cycle, state| CtxInfo {
            ctx,
            vm,
            created_cycle,
            state,
        };
        let ctxs = vec![
            ctx(11, 1, 100, CtxState::Active),
            ctx(12, 1, 200, CtxState::Retired),
            ctx(21, 2, 300, CtxState::Active),
            ctx(22, 2, 400, CtxState::Destroyed),
            ctx(31, 3, 500, CtxState::Active),
        ];
        let mut totals = HashMap::new();
        let plain = |base, seq| Totals::Plain {
            counters: values(base),
            commit_seq: seq,
            cycle: seq * 100,
        };
        totals.insert(Scope::System, plain(9000, 99));
        totals.insert(Scope::Vm(1), plain(1000, 10));
        totals.insert(Scope::Ctx(11), plain(1100, 11));
        totals.insert(Scope::Ctx(12), plain(1200, 12));
        totals.insert(Scope::Vm(2), plain(2000, 20));
        totals.insert(Scope::Ctx(21), plain(2100, 21));
        totals.insert(Scope::Ctx(22), plain(2200, 22));
        let mut cipher = VmCipher::with_key(3, &KEY3, FIXTURE_SESSION);
        let mut sealed = HashMap::new();
        for (scope, kind, id, base) in [
            (Scope::Vm(3), block_kind::VM, 3, 3000),
            (Scope::Ctx(31), block_kind::CONTEXT, 31, 3100),
        ] {
            let block = Block {
                magic: BLOCK_MAGIC,
                kind,
                version: 1,
                id,
                vm: 3,
                commit_seq: 33,
                last_commit_cycle: 3300,
                counters: values(base),
            };
            let mut payload = [0u8; size_of::<Block>()];
            payload.copy_from_slice(block.as_bytes());
            let (envelope, tag) = cipher.seal(&mut payload);
            let slot = BlockSlot {
                envelope,
                payload,
                tag,
            };
            sealed.insert(scope, slot.as_bytes().to_vec());
            totals.insert(scope, Totals::Sealed(slot.as_bytes().to_vec()));
        }
        let mut recent = HashMap::new();
        for (scope, vm, ctx) in [
            (Scope::Vm(1), 1, 11),
            (Scope::Ctx(11), 1, 11),
            (Scope::Vm(2), 2, 21),
            (Scope::Ctx(21), 2, 21),
            (Scope::Ctx(12), 1, 12),
            (Scope::Ctx(22), 2, 22),
            (Scope::System, 1, 11),
        ] {
            let samples = (1..=20).map(|i| plain_sample(vm, ctx, i)).collect();
            recent.insert(scope, samples);
        }
        let sealed_recent: Vec<DeltaSample> =
            (1..=3).map(|i| sealed_sample(&mut cipher, 31, i)).collect();
        recent.insert(Scope::Vm(3), sealed_recent.clone());
        recent.insert(Scope::Ctx(31), sealed_recent);
        let sampler = Arc::new(sampler::RecordingSampler::default());
        Arc::new(Fixture {
            plane: gpupmd::sampling::Plane::new(sampler.clone(), 1_500_000),
            sampler,
            ctxs,
            totals,
            recent,
            feeds: Mutex::new(HashMap::new()),
            cipher: Mutex::new(cipher),
            sealed,
            calls: AtomicU64::new(0),
        })
    }

    fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn exists(&self, scope: Scope) -> bool {
        match scope {
            Scope::System => true,
            Scope::Vm(vm) => (1..=3).contains(&vm),
            Scope::Ctx(c) => self.ctxs.iter().any(|x| x.ctx == c),
        }
    }

    /// Sends `s` into `scope`'s feed as it is (even if it does not belong
    /// there); nothing happens while nobody subscribed to the scope.
    pub fn push_to(&self, scope: Scope, s: DeltaSample) {
        let mut feeds = self.feeds.lock().unwrap();
        if !feeds.entry(scope).or_default().publish(Arc::new(s)) {
            feeds.remove(&scope);
        }
    }

    /// Publishes `s` to its VM's, its context's and the system feed.
    pub fn push(&self, s: DeltaSample) {
        for scope in [Scope::Vm(s.vm), Scope::Ctx(s.ctx), Scope::System] {
            self.push_to(scope, s.clone());
        }
    }

    /// A sealed stream sample of context `ctx` of VM 3.
    pub fn sealed_sample(&self, ctx: CtxId, seq: u64) -> DeltaSample {
        sealed_sample(&mut self.cipher.lock().unwrap(), ctx, seq)
    }

    /// Live subscriptions over all feeds (a session that leaked its feed
    /// task keeps one).
    pub fn subscribers(&self) -> usize {
        self.feeds
            .lock()
            .unwrap()
            .values()
            .map(|s| s.receiver_count())
            .sum()
    }
}

/// A plaintext sample of `ctx` in `vm` with recognisable deltas.
pub fn plain_sample(vm: VmId, ctx: CtxId, seq: u64) -> DeltaSample {
    DeltaSample {
        seq,
        vm,
        ctx,
        start_cycle: seq * 1000,
        end_cycle: seq * 1000 + 1000,
        flags: 0,
        lost_before: 0,
        deltas: std::array::from_fn(|i| u64::from(vm) * 1_000_000 + seq * 100 + i as u64),
        sealed: None,
    }
}

fn sealed_sample(cipher: &mut VmCipher, ctx: CtxId, seq: u64) -> DeltaSample {
    let record = StreamRecord {
        magic: RECORD_MAGIC,
        partition: 3,
        flags: 0,
        vm: 3,
        ctx,
        seq,
        start_cycle: seq * 1000,
        end_cycle: seq * 1000 + 1000,
        reserved: 0,
        deltas: std::array::from_fn(|i| 3_000_000 + seq * 100 + i as u64),
    };
    let mut payload = [0u8; size_of::<StreamRecord>()];
    payload.copy_from_slice(record.as_bytes());
    let (envelope, tag) = cipher.seal(&mut payload);
    let slot = StreamSlot {
        envelope,
        payload,
        tag,
    };
    DeltaSample {
        seq,
        vm: 3,
        ctx,
        start_cycle: record.start_cycle,
        end_cycle: record.end_cycle,
        flags: 0,
        lost_before: 0,
        deltas: [0; MAX_EVENTS],
        sealed: Some(slot.as_bytes().to_vec()),
    }
}

impl CounterView for Fixture {
    fn vms(&self) -> Vec<VmId> {
        self.call();
        vec![1, 2, 3]
    }
    fn vm_partition(&self, vm: VmId) -> Option<u32> {
        self.call();
        (1..=3).contains(&vm).then_some(vm)
    }
    fn contexts(&self, vm: VmId) -> Option<Vec<CtxInfo>> {
        self.call();
        (1..=3)
            .contains(&vm)
            .then(|| self.ctxs.iter().filter(|c| c.vm == vm).copied().collect())
    }
    fn ctx_vm(&self, ctx: CtxId) -> Option<VmId> {
        self.call();
        self.ctxs.iter().find(|c| c.ctx == ctx).map(|c| c.vm)
    }
    fn totals(&self, scope: Scope) -> Option<Totals> {
        self.call();
        self.totals.get(&scope).cloned()
    }
    fn recent(&self, scope: Scope, max: usize) -> Option<Vec<DeltaSample>> {
        self.call();
        let all = self.recent.get(&scope)?;
        Some(all[all.len().saturating_sub(max)..].to_vec())
    }
    fn subscribe(&self, scope: Scope) -> Option<FeedReceiver<DeltaSample>> {
        self.call();
        self.exists(scope).then(|| {
            self.feeds
                .lock()
                .unwrap()
                .entry(scope)
                .or_default()
                .subscribe()
        })
    }
    fn clock_khz(&self) -> u32 {
        1_500_000
    }
    fn ctx_program(&self, ctx: CtxId) -> Option<u32> {
        self.ctxs.iter().any(|c| c.ctx == ctx).then_some(1)
    }
}

/// What a node over `view` serves: its counters and its sampling plane
/// (no RI, no ranges: those requests are ENOTTY).
pub fn served(view: &Arc<Fixture>) -> gpupmd::tenant::Served {
    gpupmd::tenant::Served {
        view: Arc::clone(view) as Arc<dyn CounterView>,
        features: gpupmd::planes::Features {
            sampling: Some(Arc::clone(&view.plane)),
            ..Default::default()
        },
    }
}

static MOUNTS: AtomicU64 = AtomicU64::new(0);

/// A node mounted on a fresh temp dir.
pub struct Mounted {
    pub node: Option<TenantNode>,
    pub dir: PathBuf,
    pub path: PathBuf,
    pub view: Arc<Fixture>,
}

impl Mounted {
    pub fn new() -> Self {
        Mounted::with_limits(gpupm_client::config::Limits::default())
    }

    /// A node bounded by `limits`.
    pub fn with_limits(limits: gpupm_client::config::Limits) -> Self {
        require_root_and_fuse();
        let n = MOUNTS.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("gpupm-tenant-test-{}-{n}", std::process::id()));
        let view = Fixture::new();
        let node = TenantNode::mount(
            &dir,
            served(&view),
            policy(),
            gpupmd::tenant::bounds::Bounds::new(limits, &policy()),
            DEFAULT_THREADS,
        )
        .unwrap_or_else(|e| panic!("mounting the tenant node failed: {e}"));
        let path = dir.join(NODE_NAME);
        Mounted {
            node: Some(node),
            dir,
            path,
            view,
        }
    }

    pub fn stats(&self) -> Arc<TenantStats> {
        self.node.as_ref().expect("mounted").stats()
    }

    /// (open handles, open sessions).
    pub fn gauges(&self) -> (u64, u64) {
        let s = self.stats();
        (
            TenantStats::get(&s.open_handles),
            TenantStats::get(&s.open_sessions),
        )
    }

    /// Waits until handles and sessions are back to `want` (releases reach
    /// the node asynchronously after close()).
    pub fn wait_gauges(&self, want: (u64, u64)) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.gauges() != want {
            assert!(
                Instant::now() < deadline,
                "handles/sessions stuck at {:?}, want {want:?}",
                self.gauges()
            );
            std::thread::yield_now();
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        drop(self.node.take());
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}
