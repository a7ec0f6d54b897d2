//! The page table: which pages exist, where their blocks are on the
//! device, and what each page holds; turning a block slot read from the
//! device into page data.

use core::mem::{offset_of, size_of};
use std::collections::BTreeMap;

use gpupm_client::page::WritablePage;
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::layout::{block_kind, envelope_flags, Block, BlockSlot, StreamSlot, BLOCK_MAGIC};
use gpupm_uapi::page::{page_flags, PageCounters, PageData};
use gpupm_uapi::tenant::RateSample;
use zerocopy::FromZeros;

use crate::view::{BlockSource, CtxId, VmId};

/// Names a page: a VM, or a context instance (id, created cycle).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A VM's page.
    Vm(VmId),
    /// A context instance's page.
    Ctx(CtxId, u64),
}

impl Key {
    /// The page file's name in the store directory.
    pub fn file_name(self) -> String {
        match self {
            Key::Vm(vm) => format!("vm-{vm}"),
            Key::Ctx(ctx, created) => format!("ctx-{ctx}-{created}"),
        }
    }

    /// The key a page file's name stands for.
    pub fn parse(name: &str) -> Option<Key> {
        if let Some(vm) = name.strip_prefix("vm-") {
            return vm.parse().ok().map(Key::Vm);
        }
        let (ctx, created) = name.strip_prefix("ctx-")?.split_once('-')?;
        Some(Key::Ctx(ctx.parse().ok()?, created.parse().ok()?))
    }

    /// The kind of block behind the page.
    pub fn block_kind(self) -> u16 {
        match self {
            Key::Vm(_) => block_kind::VM,
            Key::Ctx(..) => block_kind::CONTEXT,
        }
    }

    /// The id the block header carries.
    pub fn block_id(self) -> u32 {
        match self {
            Key::Vm(vm) => vm,
            Key::Ctx(ctx, _) => ctx,
        }
    }
}

/// One published page.
#[derive(Debug)]
pub struct Entry {
    /// The daemon's writable mapping.
    pub page: WritablePage,
    /// Where its numbers come from.
    pub source: BlockSource,
    /// `page_state` of the page.
    pub state: u32,
    /// What the page holds (the last publication).
    pub shown: Box<PageData>,
    /// Marked by a hook: read the block at the refresher's next wake-up.
    pub dirty: bool,
    /// A drained sample not yet published.
    pub rate: Option<RateSample>,
    /// A drained sealed stream slot not yet published.
    pub sealed_rate: Option<StreamSlot>,
}

/// Every page the daemon keeps.
#[derive(Debug, Default)]
pub struct Table {
    /// Pages by key.
    pub pages: BTreeMap<Key, Entry>,
}

impl Table {
    /// Pages of contexts (the rest are VM pages).
    pub fn ctx_count(&self) -> usize {
        self.pages
            .keys()
            .filter(|k| matches!(k, Key::Ctx(..)))
            .count()
    }
}

/// Why a block slot read for a page cannot update it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stale {
    /// The slot holds another scope's block (released and reused) or none.
    NotThisScope,
    /// The block's commit count went down: a device reset, or a slot now
    /// holding a newer instance of the same id.
    Backwards,
}

/// `shown` updated with the block in `slot` (the rest — generation,
/// state, rate — is the caller's).
pub fn with_slot(
    key: Key,
    source: &BlockSource,
    shown: &PageData,
    slot: &BlockSlot,
) -> Result<PageData, Stale> {
    let mut next = *shown;
    if source.confidential || slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
        if slot.envelope.flags & envelope_flags::VALID == 0 || slot.envelope.vm != source.vm {
            return Err(Stale::NotThisScope);
        }
        let c = &mut next.counters;
        c.flags |= page_flags::SEALED;
        c.totals = [0; MAX_EVENTS];
        c.commit_seq = 0;
        c.cycle = 0;
        next.sealed = *slot;
        return Ok(next);
    }
    fold_plain(key, source, &mut next.counters, slot)?;
    next.sealed = BlockSlot::new_zeroed();
    Ok(next)
}

/// What a block slot changes on a page.
#[derive(Debug)]
pub enum Next {
    /// Only the counters, already folded into the entry's shown page:
    /// a plaintext block on a plaintext page with no rate sample pending
    /// — what every periodic commit brings — so only these 552 bytes are
    /// rewritten and republished, in place, not the whole page.
    Counters,
    /// The whole page.
    Page(Box<PageData>),
}

/// What `slot` changes on the page `e`, its pending rate samples folded
/// in: the counters are folded into `e.shown` at once ([`Next::Counters`];
/// `e.shown` is untouched on an error), the whole page returned
/// otherwise.
pub fn next_of(key: Key, e: &mut Entry, slot: &BlockSlot) -> Result<Next, Stale> {
    let pending = e.rate.is_some() || e.sealed_rate.is_some();
    let sealed = e.source.confidential
        || slot.envelope.flags & envelope_flags::ENCRYPTED != 0
        || e.shown.counters.flags & page_flags::SEALED != 0;
    if pending || sealed {
        let next = with_slot(key, &e.source, &e.shown, slot)?;
        return Ok(Next::Page(Box::new(with_rates(next, e))));
    }
    fold_plain(key, &e.source, &mut e.shown.counters, slot)?;
    Ok(Next::Counters)
}

/// Folds a plaintext `slot` into `shown` where it lies (no copy of the
/// block or of the counters); `shown` is untouched on an error.
fn fold_plain(
    key: Key,
    source: &BlockSource,
    shown: &mut PageCounters,
    slot: &BlockSlot,
) -> Result<(), Stale> {
    let block = PlainView::of(slot).ok_or(Stale::NotThisScope)?;
    if !block.is_of(key, source) {
        return Err(Stale::NotThisScope);
    }
    if block.commit_seq < shown.commit_seq {
        return Err(Stale::Backwards);
    }
    shown.flags &= !page_flags::SEALED;
    shown.commit_seq = block.commit_seq;
    shown.cycle = block.cycle;
    for (total, bytes) in shown.totals.iter_mut().zip(block.counters.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(bytes);
        *total = u64::from_ne_bytes(word);
    }
    Ok(())
}

/// A plaintext slot's block header and counter bytes, read where they lie
/// in the slot (whose payload is only 4-aligned, so no `&Block`), as
/// [`BlockSlot::plain_block`] would copy them.
struct PlainView<'a> {
    kind: u16,
    id: u32,
    vm: u32,
    commit_seq: u64,
    cycle: u64,
    counters: &'a [u8],
}

impl<'a> PlainView<'a> {
    /// `None` when the slot is encrypted, empty or corrupt.
    fn of(slot: &'a BlockSlot) -> Option<Self> {
        if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
            return None;
        }
        let p = &slot.payload;
        let bytes = |at: usize, n: usize| p.get(at..at + n);
        let u16_at = |at| bytes(at, 2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
        let u32_at = |at| bytes(at, 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        let u64_at = |at| {
            bytes(at, 8).map(|b| {
                let mut w = [0u8; 8];
                w.copy_from_slice(b);
                u64::from_ne_bytes(w)
            })
        };
        if u32_at(offset_of!(Block, magic))? != BLOCK_MAGIC {
            return None;
        }
        Some(PlainView {
            kind: u16_at(offset_of!(Block, kind))?,
            id: u32_at(offset_of!(Block, id))?,
            vm: u32_at(offset_of!(Block, vm))?,
            commit_seq: u64_at(offset_of!(Block, commit_seq))?,
            cycle: u64_at(offset_of!(Block, last_commit_cycle))?,
            counters: bytes(offset_of!(Block, counters), size_of::<[u64; MAX_EVENTS]>())?,
        })
    }

    /// Whether the block is `key`'s, of `source`'s VM.
    fn is_of(&self, key: Key, source: &BlockSource) -> bool {
        self.kind == key.block_kind() && self.id == key.block_id() && self.vm == source.vm
    }
}

/// Whether the page already shows `slot` under `generation` (a cheap
/// check of the block header, or of the sealed bytes, before
/// [`with_slot`] builds a new page).
pub fn shows(
    key: Key,
    source: &BlockSource,
    shown: &PageData,
    generation: u64,
    slot: &BlockSlot,
) -> bool {
    let c = &shown.counters;
    if c.generation != generation {
        return false;
    }
    if source.confidential || slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
        return c.flags & page_flags::SEALED != 0 && shown.sealed == *slot;
    }
    PlainView::of(slot).is_some_and(|b| {
        b.is_of(key, source)
            && b.commit_seq == c.commit_seq
            && b.cycle == c.cycle
            && c.flags & page_flags::SEALED == 0
    })
}

/// `next` with the entry's pending rate samples folded in.
pub fn with_rates(mut next: PageData, e: &Entry) -> PageData {
    if let Some(r) = e.rate {
        next.rate = r;
        next.counters.flags |= page_flags::RATE;
    }
    if let Some(s) = e.sealed_rate {
        next.sealed_rate = s;
        next.counters.flags |= page_flags::SEALED_RATE;
    }
    next
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::layout::{Block, BLOCK_MAGIC};
    use zerocopy::IntoBytes;

    use super::*;

    fn slot(kind: u16, id: u32, vm: u32, commit_seq: u64) -> BlockSlot {
        let mut b = Block::new_zeroed();
        b.magic = BLOCK_MAGIC;
        b.kind = kind;
        b.id = id;
        b.vm = vm;
        b.commit_seq = commit_seq;
        b.last_commit_cycle = commit_seq * 10;
        for (i, c) in (1u64..).zip(b.counters.iter_mut()) {
            *c = commit_seq * i;
        }
        b.counters[3] = commit_seq * 7;
        let mut s = BlockSlot::new_zeroed();
        s.envelope.flags = envelope_flags::VALID;
        s.envelope.vm = vm;
        s.payload.copy_from_slice(b.as_bytes());
        s
    }

    const SRC: BlockSource = BlockSource {
        vm: 2,
        partition: 1,
        block_offset: 0,
        confidential: false,
    };

    #[test]
    fn file_names_round_trip() {
        for k in [Key::Vm(7), Key::Ctx(12, 40960), Key::Ctx(4095, u64::MAX)] {
            assert_eq!(Key::parse(&k.file_name()), Some(k));
        }
        for bad in [
            "vm-",
            "vm-x",
            "ctx-1",
            "ctx-1-",
            "ctx--5",
            "generation",
            ".new-vm-1",
        ] {
            assert_eq!(Key::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_block_of_the_scope_updates_the_counters_and_nothing_else_does() {
        let shown = PageData::new_zeroed();
        let key = Key::Ctx(5, 100);
        let next = with_slot(key, &SRC, &shown, &slot(block_kind::CONTEXT, 5, 2, 4)).unwrap();
        assert_eq!(next.counters.commit_seq, 4);
        assert_eq!(next.counters.cycle, 40);
        assert_eq!(next.counters.totals[3], 28);
        for wrong in [
            slot(block_kind::CONTEXT, 6, 2, 9),
            slot(block_kind::CONTEXT, 5, 3, 9),
            slot(block_kind::VM, 5, 2, 9),
            BlockSlot::new_zeroed(),
        ] {
            assert_eq!(
                with_slot(key, &SRC, &next, &wrong),
                Err(Stale::NotThisScope)
            );
        }
        assert_eq!(
            with_slot(key, &SRC, &next, &slot(block_kind::CONTEXT, 5, 2, 3)),
            Err(Stale::Backwards)
        );
    }

    #[test]
    fn a_page_shows_a_block_it_was_made_from_and_no_other() {
        let key = Key::Ctx(5, 100);
        let s4 = slot(block_kind::CONTEXT, 5, 2, 4);
        let mut next = with_slot(key, &SRC, &PageData::new_zeroed(), &s4).unwrap();
        next.counters.generation = 9;
        assert!(shows(key, &SRC, &next, 9, &s4));
        assert!(!shows(key, &SRC, &next, 10, &s4), "another generation");
        assert!(!shows(
            key,
            &SRC,
            &next,
            9,
            &slot(block_kind::CONTEXT, 5, 2, 5)
        ));
        assert!(!shows(
            key,
            &SRC,
            &next,
            9,
            &slot(block_kind::CONTEXT, 6, 2, 4)
        ));
        assert!(!shows(key, &SRC, &next, 9, &slot(block_kind::VM, 5, 2, 4)));
    }

    /// An entry showing `shown`, on a page file that is unlinked at once.
    fn entry(shown: PageData) -> Entry {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("gpupmd-table-{}-{n}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file.set_len(gpupm_uapi::page::PAGE_SIZE as u64).unwrap();
        Entry {
            page: WritablePage::map(std::os::fd::AsFd::as_fd(&file)).unwrap(),
            source: SRC,
            state: 0,
            shown: Box::new(shown),
            dirty: false,
            rate: None,
            sealed_rate: None,
        }
    }

    /// The page a commit leaves on `e`, however `next_of` says to publish
    /// it (`None`: its error, `e` checked unchanged).
    fn applied(key: Key, e: &mut Entry, slot: &BlockSlot) -> Result<(PageData, bool), Stale> {
        let before = *e.shown;
        match next_of(key, e, slot) {
            Ok(Next::Counters) => Ok((*e.shown, true)),
            Ok(Next::Page(p)) => {
                assert_eq!(*e.shown, before, "a whole page is published by the caller");
                Ok((*p, false))
            }
            Err(err) => {
                assert_eq!(*e.shown, before, "{err:?} changed the page");
                Err(err)
            }
        }
    }

    #[test]
    fn a_commit_republishes_only_the_counters_exactly_when_nothing_else_changes() {
        let key = Key::Ctx(5, 100);
        let s4 = slot(block_kind::CONTEXT, 5, 2, 4);
        let s5 = slot(block_kind::CONTEXT, 5, 2, 5);
        let mut shown = with_slot(key, &SRC, &PageData::new_zeroed(), &s4).unwrap();
        shown.counters.flags |= page_flags::RATE;
        shown.rate.deltas[1] = 11;
        let mut e = entry(shown);
        let whole = with_slot(key, &SRC, &e.shown, &s5).unwrap();
        assert_eq!(whole.counters.totals[63], 5 * 64, "every total is taken");
        assert_eq!(whole.rate, shown.rate, "the shown rate stays");

        for wrong in [
            slot(block_kind::CONTEXT, 6, 2, 9),
            slot(block_kind::CONTEXT, 5, 3, 9),
            slot(block_kind::VM, 5, 2, 9),
            BlockSlot::new_zeroed(),
        ] {
            assert_eq!(applied(key, &mut e, &wrong), Err(Stale::NotThisScope));
        }
        let old = slot(block_kind::CONTEXT, 5, 2, 3);
        assert_eq!(applied(key, &mut e, &old), Err(Stale::Backwards));
        assert_eq!(
            applied(key, &mut e, &s5),
            Ok((whole, true)),
            "a plain commit: the counters alone, as a whole rebuild makes them"
        );

        let mut rate = shown.rate;
        rate.deltas[1] = 12;
        e.rate = Some(rate);
        let s6 = slot(block_kind::CONTEXT, 5, 2, 6);
        let whole = with_rates(with_slot(key, &SRC, &e.shown, &s6).unwrap(), &e);
        assert_eq!(whole.rate.deltas[1], 12);
        assert_eq!(
            applied(key, &mut e, &s6),
            Ok((whole, false)),
            "a pending rate: the whole page"
        );
    }

    #[test]
    fn a_page_that_shows_or_gets_a_sealed_slot_is_rewritten_whole() {
        let key = Key::Vm(2);
        let plain = slot(block_kind::VM, 2, 2, 4);
        let mut sealed = slot(block_kind::VM, 2, 2, 4);
        sealed.envelope.flags |= envelope_flags::ENCRYPTED;
        let mut e = entry(PageData::new_zeroed());
        let (now_sealed, counters_only) = applied(key, &mut e, &sealed).unwrap();
        assert!(!counters_only);
        assert_eq!(now_sealed.sealed, sealed);

        let mut e = entry(now_sealed);
        let (back, counters_only) = applied(key, &mut e, &plain).unwrap();
        assert!(!counters_only, "the sealed bytes must go");
        assert_eq!(back.counters.flags & page_flags::SEALED, 0);
        assert_eq!(back.sealed, BlockSlot::new_zeroed());
        assert_eq!(back.counters.commit_seq, 4);
        assert_eq!(back.counters.totals[9], 40);
    }

    #[test]
    fn a_confidential_scope_shows_the_slot_and_no_plaintext() {
        let src = BlockSource {
            confidential: true,
            ..SRC
        };
        let mut s = slot(block_kind::VM, 2, 2, 4);
        s.envelope.flags |= envelope_flags::ENCRYPTED;
        let next = with_slot(Key::Vm(2), &src, &PageData::new_zeroed(), &s).unwrap();
        assert_eq!(next.counters.flags & page_flags::SEALED, page_flags::SEALED);
        assert_eq!(next.counters.totals, [0; 64]);
        assert_eq!(next.sealed, s);
    }
}
