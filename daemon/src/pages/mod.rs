//! Tenant counter pages (`gpupm_uapi::page`, docs/pages.md): for every VM
//! and live context instance a tenant asked for, a 4 KiB page in a file on
//! a tmpfs that the daemon rewrites under a sequence lock whenever the
//! scope's device block changes, and that tenants map read-only.
//!
//! - [`Pages`] (this file): the page table, the daemon generation, the
//!   hooks the store calls when contexts change state and the device is
//!   reset, and what a restart finds of the previous daemon's pages;
//! - `events`: the hooks that mark the pages an event can have changed
//!   (drained commits, a switch's commit) and wake the refresher;
//! - `refresh`: the thread that reads the blocks of the marked pages (of
//!   every page, every backstop period) and rewrites those that changed;
//! - `commits`: the thread that follows the periodic commits of moving
//!   pages with the device's `GPUPM_IOC_WAIT_COMMIT`;
//! - `server`: the page socket (who may have which page, `SCM_RIGHTS`);
//! - `files`: the pages directory; `table`: entries and block decoding;
//!   `sys`: the module's `unsafe` (accepted descriptors, peer groups).
//!
//! # Lifecycle
//! A page is created on its first request (a VM's, or a live context
//! instance's) and then kept current. A destroyed context's page shows
//! [`page_state::DESTROYED`] and, once it is retired, its final persisted
//! totals with [`page_state::RETIRED`]; then the file is removed (mappings
//! stay readable). A scope that vanishes otherwise (a device reset) gets
//! [`page_state::WITHDRAWN`]. Memory is bounded by the device's tables: at
//! most `MAX_VMS - 1` VM pages and `MAX_CONTEXTS - 1` context pages (live
//! instances only), 4 KiB each.
//!
//! # Generations
//! Each daemon start takes a new generation (persisted in the store), and
//! a device reset takes another; pages are only ever written with the
//! current one, and within one generation no value decreases. A restarted
//! daemon adopts the previous daemon's files whose scope still exists and
//! whose audience (who may see the VM) is unchanged, so existing mappings
//! see the new generation at the first refresh; the rest are withdrawn
//! (or, for a context retired meanwhile, finished with its final totals).

mod applied;
mod commits;
mod conns;
mod events;
mod files;
mod mirror;
mod refresh;
mod server;
mod sys;
mod table;
mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use gpupm_client::config::TenantPolicy;
use gpupm_client::page::WritablePage;
use gpupm_client::DevNode;
use gpupm_uapi::layout::BlockSlot;
use gpupm_uapi::page::{page_state, PageData, PageHeader, PAGE_MAGIC, PAGE_SIZE, PAGE_VERSION};
use gpupm_uapi::tenant::scope;
use zerocopy::FromZeros;

pub use self::files::{DirError, PageDir};
pub use self::refresh::{Refresher, State};
pub use self::server::{PageServer, ServerError};
pub use self::table::Key;
use self::table::{Entry, Table};
use crate::store::events::TableEvents;
pub use crate::view::{BlockSource, PageSource};
use crate::view::{CtxId, PageStats, VmId};

/// Fingerprint of who may see VM `vm` under `policy` (FNV-1a over the
/// admin group and the VM's tenant entries, sorted): a page made for one
/// audience is never written again for another.
pub fn audience(policy: &TenantPolicy, vm: VmId) -> u64 {
    let mut entries: Vec<(u64, u64)> = policy
        .tenants
        .iter()
        .filter(|t| t.vm == vm)
        .map(|t| {
            let id = |v: Option<u32>| v.map_or(u64::MAX, u64::from);
            (id(t.uid), id(t.gid))
        })
        .collect();
    entries.sort_unstable();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |v: u64| {
        for b in v.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(policy.admin_gid.map_or(u64::MAX, u64::from));
    for (uid, gid) in entries {
        eat(uid);
        eat(gid);
    }
    h
}

#[derive(Debug, Default)]
struct Counters {
    updates: AtomicU64,
    refreshes: AtomicU64,
    requests: AtomicU64,
    request_errors: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    generation: u64,
    table: Table,
    /// A previous daemon's pages, until [`Pages::adopt`] decides.
    orphans: BTreeMap<Key, WritablePage>,
    /// What the hooks asked of the refresher since it last looked.
    wake: events::Wake,
    /// The context each partition's last switch brought in.
    running: BTreeMap<u32, CtxId>,
    /// Some page may have been marked since the commit waiter last looked
    /// through every page: set with every mark (they all go through
    /// [`Pages::wake`], [`Pages::remark`] or `adopt`), so that the
    /// waiter, once per commit, walks the whole table only when there is
    /// something to find.
    marks: bool,
}

/// The daemon's pages.
#[derive(Debug)]
pub struct Pages {
    dir: PageDir,
    dev: Arc<DevNode>,
    /// The device's commit mirror, shared with the drains.
    mirror: Arc<crate::mirror::DeviceMirror>,
    policy: TenantPolicy,
    clock_khz: u32,
    inner: Mutex<Inner>,
    /// Switches the interrupt thread left for the refresher.
    switches: events::Switches,
    /// The refresher thread, unparked when a hook marks pages.
    refresher: OnceLock<std::thread::Thread>,
    /// The commit waiter follows the periodic commits: its next wait (at
    /// most a period away) carries the pages hooks mark meanwhile, so they
    /// need not wake the refresher.
    following: AtomicBool,
    /// Periodic triggers are on (`TRIG_CTRL`, read at every full refresh):
    /// only then are commits followed.
    periodic: AtomicBool,
    /// The node answers `GPUPM_IOC_WAIT_COMMIT` (cleared at its ENOTTY).
    commit_wait: AtomicBool,
    /// The pages the commit waiter follows ([`commits`]).
    followed: Mutex<commits::Followed>,
    /// The commit waiter thread, unparked when pages start moving.
    waiter: OnceLock<std::thread::Thread>,
    /// What ends the commit waiter's untimed sleep on the mirror when the
    /// commits stop ([`watch`]).
    watch: watch::CommitWatch,
    /// Held across a refresh's device read and its application, and across
    /// applying a commit wait's reply: refreshes are applied in the order
    /// they read (a block gone backwards then means a device reset).
    reading: Mutex<()>,
    counters: Counters,
}

impl Pages {
    /// Opens the pages directory `dir`, takes the next generation and
    /// maps what a previous daemon left there.
    pub fn open(
        dir: PathBuf,
        dev: Arc<DevNode>,
        mirror: Arc<crate::mirror::DeviceMirror>,
        policy: TenantPolicy,
        clock_khz: u32,
    ) -> Result<Arc<Pages>, DirError> {
        let dir = PageDir::open(&dir)?;
        let generation = dir.next_generation()?;
        let orphans = dir.scan()?.into_iter().collect();
        Ok(Arc::new(Pages {
            dir,
            dev,
            mirror,
            policy,
            clock_khz,
            inner: Mutex::new(Inner {
                generation,
                table: Table::default(),
                orphans,
                wake: events::Wake::default(),
                running: BTreeMap::new(),
                marks: false,
            }),
            switches: events::Switches::default(),
            refresher: OnceLock::new(),
            following: AtomicBool::new(false),
            periodic: AtomicBool::new(false),
            commit_wait: AtomicBool::new(true),
            followed: Mutex::default(),
            waiter: OnceLock::new(),
            watch: watch::CommitWatch::default(),
            reading: Mutex::new(()),
            counters: Counters::default(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves the table consistent; a panic elsewhere must
        // not stop the pages.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_reading(&self) -> MutexGuard<'_, ()> {
        self.reading.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pages directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.root()
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Counts for the health snapshot and the metrics.
    pub fn stats(&self) -> PageStats {
        let (vm, ctx) = {
            let i = self.lock();
            let ctx = i.table.ctx_count();
            (i.table.pages.len() - ctx, ctx)
        };
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PageStats {
            vm_pages: vm as u64,
            ctx_pages: ctx as u64,
            updates: get(&self.counters.updates),
            refreshes: get(&self.counters.refreshes),
            requests: get(&self.counters.requests),
            request_errors: get(&self.counters.request_errors),
        }
    }

    fn header(&self, key: Key, vm: VmId) -> PageHeader {
        let (kind, id, created_cycle) = match key {
            Key::Vm(vm) => (scope::VM, vm, 0),
            Key::Ctx(ctx, created) => (scope::CONTEXT, ctx, created),
        };
        PageHeader {
            magic: PAGE_MAGIC,
            version: PAGE_VERSION,
            size: u32::try_from(PAGE_SIZE).unwrap_or(u32::MAX),
            scope: kind,
            id,
            vm,
            created_cycle,
            audience: audience(&self.policy, vm),
            reserved: [0; 3],
        }
    }

    /// Publishes `next` on entry `e` with the current generation, if it
    /// differs from what the page shows.
    fn show(&self, generation: u64, e: &mut Entry, mut next: PageData) {
        next.counters.generation = generation;
        next.counters.state = e.state;
        next.counters.clock_khz = self.clock_khz;
        if next != *e.shown {
            e.page.publish(&next);
            *e.shown = next;
            self.counters.updates.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// [`Self::show`] for counters already folded into `e.shown` (by
    /// [`table::next_of`], which found them changed): stamps and
    /// republishes them alone.
    fn show_counters(&self, generation: u64, e: &mut Entry) {
        let c = &mut e.shown.counters;
        c.generation = generation;
        c.state = e.state;
        c.clock_khz = self.clock_khz;
        e.page.publish_counters(c);
        self.counters.updates.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes `state` with the page's current values.
    fn set_state(&self, generation: u64, e: &mut Entry, state: u32) {
        e.state = state;
        let shown = *e.shown;
        self.show(generation, e, shown);
    }

    /// Gives up `key`'s page: `state` (RETIRED or WITHDRAWN) is its last
    /// publication, then the file goes (mappings keep the page).
    fn remove(&self, inner: &mut Inner, key: Key, state: u32) {
        if let Some(mut e) = inner.table.pages.remove(&key) {
            self.set_state(inner.generation, &mut e, state);
            self.dir.remove(key);
        }
    }

    /// Store hook: the VM table was (re)read from the device. Pages of VMs
    /// that are gone, or whose block, partition or confidentiality changed,
    /// are withdrawn (a new request makes a new page).
    pub fn vms_changed(&self, vms: &BTreeMap<VmId, BlockSource>) {
        let mut inner = self.lock();
        let stale: Vec<Key> = inner
            .table
            .pages
            .iter()
            .filter(|(k, e)| match k {
                Key::Vm(vm) => vms.get(vm) != Some(&e.source),
                Key::Ctx(..) => !vms.contains_key(&e.source.vm),
            })
            .map(|(k, _)| *k)
            .collect();
        for key in stale {
            self.remove(&mut inner, key, page_state::WITHDRAWN);
        }
    }

    /// Store hook: the context table was (re)read from the device; `live`
    /// holds every instance it has, by id: (created cycle, destroyed).
    pub fn live_changed(&self, live: &BTreeMap<CtxId, (u64, bool)>) {
        let mut inner = self.lock();
        let generation = inner.generation;
        let mut gone = Vec::new();
        for (key, e) in inner.table.pages.iter_mut() {
            if let Key::Ctx(ctx, created) = *key {
                match live.get(&ctx) {
                    Some(&(c, destroyed)) if c == created => {
                        if destroyed && e.state == page_state::ACTIVE {
                            self.set_state(generation, e, page_state::DESTROYED);
                        }
                    }
                    _ => gone.push(*key),
                }
            }
        }
        for key in gone {
            self.remove(&mut inner, key, page_state::WITHDRAWN);
        }
    }

    /// Store hook: a context instance was destroyed.
    pub fn ctx_destroyed(&self, ctx: CtxId, created_cycle: u64) {
        let mut inner = self.lock();
        let generation = inner.generation;
        if let Some(e) = inner.table.pages.get_mut(&Key::Ctx(ctx, created_cycle)) {
            e.dirty = true;
            if e.state == page_state::ACTIVE {
                self.set_state(generation, e, page_state::DESTROYED);
            }
            self.wake(&mut inner);
        }
    }

    /// Store hook: a context instance was persisted and is about to be
    /// released: its page shows the final totals (`final_slot`, the
    /// persisted block) as RETIRED, and is removed.
    pub fn ctx_retired(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        final_slot: impl FnOnce() -> Option<BlockSlot>,
    ) {
        let key = Key::Ctx(ctx, created_cycle);
        let mut inner = self.lock();
        let generation = inner.generation;
        let Some(e) = inner.table.pages.get_mut(&key) else {
            return;
        };
        if let Some(slot) = final_slot() {
            if let Ok(next) = table::with_slot(key, &e.source, &e.shown, &slot) {
                self.show(generation, e, next);
            }
        }
        self.remove(&mut inner, key, page_state::RETIRED);
    }

    /// After the engine has rebuilt the tables at start: adopts the
    /// previous daemon's pages whose scope still exists for the same
    /// audience (they are rewritten, with this daemon's generation, at the
    /// first refresh), finishes those of contexts retired meanwhile with
    /// their final totals, and withdraws the rest.
    pub fn adopt(&self, source: &dyn PageSource) {
        let mut inner = self.lock();
        let generation = inner.generation;
        let orphans = std::mem::take(&mut inner.orphans);
        let (mut adopted, mut finished, mut withdrawn) = (0usize, 0usize, 0usize);
        for (key, page) in orphans {
            let header = page.header();
            let live = match key {
                Key::Vm(vm) => source.vm_source(vm).map(|s| (s, false)),
                Key::Ctx(ctx, created) => source
                    .live_ctx(ctx)
                    .filter(|(c, _, _)| *c == created)
                    .map(|(_, s, destroyed)| (s, destroyed)),
            };
            if let Some((s, destroyed)) = live.filter(|(s, _)| header == self.header(key, s.vm)) {
                // Shown as nothing: the first refresh writes the page
                // afresh, never under this generation with the previous
                // daemon's values (which may exceed the device's after a
                // reset in between).
                inner.table.pages.insert(
                    key,
                    Entry {
                        page,
                        source: s,
                        state: if destroyed {
                            page_state::DESTROYED
                        } else {
                            page_state::ACTIVE
                        },
                        shown: Box::new(PageData::new_zeroed()),
                        dirty: true,
                        rate: None,
                        sealed_rate: None,
                    },
                );
                adopted += 1;
                continue;
            }
            let mut last = *page
                .read()
                .unwrap_or_else(|_| Box::new(PageData::new_zeroed()));
            let retired = match key {
                Key::Ctx(ctx, created) => source.retired_slot(ctx, created),
                Key::Vm(_) => None,
            };
            let origin = BlockSource {
                vm: header.vm,
                partition: 0,
                block_offset: 0,
                confidential: false,
            };
            last.counters.state = match retired.and_then(|slot| {
                table::with_slot(key, &origin, &PageData::new_zeroed(), &slot).ok()
            }) {
                Some(done) => {
                    last = done;
                    finished += 1;
                    page_state::RETIRED
                }
                None => {
                    withdrawn += 1;
                    page_state::WITHDRAWN
                }
            };
            last.counters.generation = generation;
            last.counters.clock_khz = self.clock_khz;
            page.publish(&last);
            self.dir.remove(key);
        }
        inner.marks |= adopted > 0;
        tracing::info!(
            adopted,
            finished,
            withdrawn,
            generation,
            dir = %self.dir.root().display(),
            "tenant pages of the previous daemon taken over"
        );
    }

    /// Device reset: a new generation (persisted), every page re-read at
    /// once; context pages are withdrawn (their instances are
    /// gone; a request for a new instance makes a new page).
    pub fn device_reset(&self) {
        let mut inner = self.lock();
        inner.generation += 1;
        if let Err(e) = self.dir.store_generation(inner.generation) {
            tracing::warn!(
                error = gpupm_fusemount::logging::one_line(e),
                "cannot persist the page generation"
            );
        }
        let ctx: Vec<Key> = inner
            .table
            .pages
            .keys()
            .filter(|k| matches!(k, Key::Ctx(..)))
            .copied()
            .collect();
        for key in ctx {
            self.remove(&mut inner, key, page_state::WITHDRAWN);
        }
        for e in inner.table.pages.values_mut() {
            e.dirty = true;
            // Pre-reset values are no floor for the new generation.
            *e.shown = PageData::new_zeroed();
        }
        inner.running.clear();
        self.wake(&mut inner);
        tracing::info!(
            generation = inner.generation,
            "device reset: tenant pages start a new generation"
        );
    }
}

/// The pages follow the store's tables.
impl TableEvents for Pages {
    fn vms_changed(&self, vms: &BTreeMap<VmId, BlockSource>) {
        Pages::vms_changed(self, vms);
    }
    fn live_changed(&self, live: &BTreeMap<CtxId, (u64, bool)>) {
        Pages::live_changed(self, live);
    }
    fn ctx_destroyed(&self, ctx: CtxId, created_cycle: u64) {
        Pages::ctx_destroyed(self, ctx, created_cycle);
    }
    fn ctx_retired(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        final_slot: &dyn Fn() -> Option<BlockSlot>,
    ) {
        Pages::ctx_retired(self, ctx, created_cycle, final_slot);
    }
    fn switched(&self, p: u32, incoming: Option<CtxId>) {
        Pages::switched(self, p, incoming);
    }
    fn device_reset(&self) {
        Pages::device_reset(self);
    }
    fn resynced(&self) {
        self.refresh_all();
    }
    fn samples(&self, samples: &[crate::view::DeltaSample]) {
        Pages::samples(self, samples);
    }
}
