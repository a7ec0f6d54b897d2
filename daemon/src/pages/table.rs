//! The page table: which pages exist, where their blocks are on the
//! device, and what each page holds; turning a block slot read from the
//! device into page data.

use std::collections::BTreeMap;

use gpupm_client::page::WritablePage;
use gpupm_uapi::layout::{block_kind, envelope_flags, BlockSlot, StreamSlot};
use gpupm_uapi::page::{page_flags, PageCounters, PageData};
use gpupm_uapi::tenant::RateSample;
use zerocopy::FromZeros;

use crate::view::{CtxId, VmId};

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

/// Where a page's numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The VM (itself, or the context's owner).
    pub vm: VmId,
    /// Partition slot of the VM.
    pub partition: u32,
    /// Window offset of the block slot.
    pub block_offset: u64,
    /// Confidential: the page holds ciphertext only.
    pub confidential: bool,
}

/// One published page.
#[derive(Debug)]
pub struct Entry {
    /// The daemon's writable mapping.
    pub page: WritablePage,
    /// Where its numbers come from.
    pub source: Source,
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
    source: &Source,
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
        c.totals = [0; gpupm_uapi::events::MAX_EVENTS];
        c.commit_seq = 0;
        c.cycle = 0;
        next.sealed = *slot;
        return Ok(next);
    }
    next.counters = plain_counters(key, source, &shown.counters, slot)?;
    next.sealed = BlockSlot::new_zeroed();
    Ok(next)
}

/// The counters a plaintext `slot` gives a page that shows `shown`.
fn plain_counters(
    key: Key,
    source: &Source,
    shown: &PageCounters,
    slot: &BlockSlot,
) -> Result<PageCounters, Stale> {
    let block = slot.plain_block().ok_or(Stale::NotThisScope)?;
    if block.kind != key.block_kind() || block.id != key.block_id() || block.vm != source.vm {
        return Err(Stale::NotThisScope);
    }
    if block.commit_seq < shown.commit_seq {
        return Err(Stale::Backwards);
    }
    let mut c = *shown;
    c.flags &= !page_flags::SEALED;
    c.totals = block.counters;
    c.commit_seq = block.commit_seq;
    c.cycle = block.last_commit_cycle;
    Ok(c)
}

/// What a block slot changes on a page.
// The counters stay inline: a `Next` lives on the stack for one page, and
// boxing them would allocate at every periodic commit of every page.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Next {
    /// Only the counters: a plaintext block on a plaintext page with no
    /// rate sample pending — what every periodic commit brings, so only
    /// these 552 bytes are rebuilt and republished, not the whole page.
    Counters(PageCounters),
    /// The whole page.
    Page(Box<PageData>),
}

impl Next {
    /// The commit count the page shows next.
    pub fn commit_seq(&self) -> u64 {
        match self {
            Next::Counters(c) => c.commit_seq,
            Next::Page(p) => p.counters.commit_seq,
        }
    }
}

/// What `slot` changes on the page `e`, its pending rate samples folded in.
pub fn next_of(key: Key, e: &Entry, slot: &BlockSlot) -> Result<Next, Stale> {
    let pending = e.rate.is_some() || e.sealed_rate.is_some();
    let sealed = e.source.confidential
        || slot.envelope.flags & envelope_flags::ENCRYPTED != 0
        || e.shown.counters.flags & page_flags::SEALED != 0;
    if pending || sealed {
        let next = with_slot(key, &e.source, &e.shown, slot)?;
        return Ok(Next::Page(Box::new(with_rates(next, e))));
    }
    plain_counters(key, &e.source, &e.shown.counters, slot).map(Next::Counters)
}

/// Whether the page already shows `slot` under `generation` (a cheap
/// check of the block header, or of the sealed bytes, before
/// [`with_slot`] builds a new page).
pub fn shows(
    key: Key,
    source: &Source,
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
    let p = &slot.payload;
    let u32_at = |at: usize| {
        p.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        p.get(at..at + 8).map(|b| {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            u64::from_le_bytes(w)
        })
    };
    // Block header: magic, kind (u16) and version (u16), id, vm,
    // commit_seq, last_commit_cycle (uapi::layout::Block).
    let kind = p.get(4..6).map(|b| u16::from_le_bytes([b[0], b[1]]));
    u32_at(0) == Some(gpupm_uapi::layout::BLOCK_MAGIC)
        && kind == Some(key.block_kind())
        && u32_at(8) == Some(key.block_id())
        && u32_at(12) == Some(source.vm)
        && u64_at(16) == Some(c.commit_seq)
        && u64_at(24) == Some(c.cycle)
        && c.flags & page_flags::SEALED == 0
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
        b.counters[3] = commit_seq * 7;
        let mut s = BlockSlot::new_zeroed();
        s.envelope.flags = envelope_flags::VALID;
        s.envelope.vm = vm;
        s.payload.copy_from_slice(b.as_bytes());
        s
    }

    const SRC: Source = Source {
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

    /// The page a commit leaves, however `next_of` says to publish it.
    fn applied(shown: &PageData, next: Next) -> PageData {
        match next {
            Next::Counters(c) => PageData {
                counters: c,
                ..*shown
            },
            Next::Page(p) => *p,
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

        let next = next_of(key, &e, &s5).unwrap();
        assert!(
            matches!(next, Next::Counters(_)),
            "a plain commit: counters only"
        );
        assert_eq!(
            applied(&e.shown, next),
            whole,
            "the same page as a whole rebuild"
        );
        assert_eq!(whole.rate, shown.rate, "the shown rate stays");
        assert!(matches!(next_of(key, &e, &s4), Ok(Next::Counters(_))));
        assert_eq!(
            next_of(key, &e, &slot(block_kind::CONTEXT, 5, 2, 3)).map(|_| ()),
            Err(Stale::Backwards)
        );
        assert_eq!(
            next_of(key, &e, &slot(block_kind::CONTEXT, 6, 2, 9)).map(|_| ()),
            Err(Stale::NotThisScope)
        );

        let mut rate = shown.rate;
        rate.deltas[1] = 12;
        e.rate = Some(rate);
        let next = next_of(key, &e, &s5).unwrap();
        assert!(
            matches!(next, Next::Page(_)),
            "a pending rate: the whole page"
        );
        let page = applied(&e.shown, next);
        assert_eq!(page, with_rates(whole, &e));
        assert_eq!(page.rate.deltas[1], 12);
    }

    #[test]
    fn a_page_that_shows_or_gets_a_sealed_slot_is_rewritten_whole() {
        let key = Key::Vm(2);
        let plain = slot(block_kind::VM, 2, 2, 4);
        let mut sealed = slot(block_kind::VM, 2, 2, 4);
        sealed.envelope.flags |= envelope_flags::ENCRYPTED;
        let e = entry(PageData::new_zeroed());
        let next = next_of(key, &e, &sealed).unwrap();
        assert!(matches!(next, Next::Page(_)));
        let now_sealed = applied(&e.shown, next);
        assert_eq!(now_sealed.sealed, sealed);

        let e = entry(now_sealed);
        let next = next_of(key, &e, &plain).unwrap();
        assert!(matches!(next, Next::Page(_)), "the sealed bytes must go");
        let back = applied(&e.shown, next);
        assert_eq!(back.counters.flags & page_flags::SEALED, 0);
        assert_eq!(back.sealed, BlockSlot::new_zeroed());
        assert_eq!(back.counters.commit_seq, 4);
    }

    #[test]
    fn a_confidential_scope_shows_the_slot_and_no_plaintext() {
        let src = Source {
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
