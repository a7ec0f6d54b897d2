//! Per-context attribution of a range register's counts.
//!
//! A range register counts every context of its program that runs on the
//! partition. The daemon reads it together with the partition's switch
//! count (`PART_SWITCHES`), its running context (`PART_CUR_CTX`) and
//! whether that context is paused (`PART_STATUS` past `REQUESTED`), in
//! one atomic register batch — a [`Snapshot`]. Between two snapshots the
//! counts grew by the difference, and that growth belongs to exactly one
//! context when the partition switched contexts at most once, while paused
//! right after the earlier snapshot:
//!
//! - no switch in between (`switches` equal): the running context ran
//!   throughout;
//! - one switch, and the earlier snapshot saw the outgoing context paused
//!   (the daemon reads right after it paused it for the handshake): nothing
//!   counted from that snapshot until the switch completed, and from then
//!   the incoming context — the one running now — ran.
//!
//! Anything else (a switch the device's fallback completed unseen) is
//! booked as unattributed, never guessed.

use std::collections::BTreeMap;

/// The partition's state in one register batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartState {
    /// `PART_SWITCHES`.
    pub switches: u64,
    /// `PART_CUR_CTX`.
    pub ctx: u32,
    /// The running context was paused (a handshake past step 1).
    pub paused: bool,
}

/// Entries and count of one register.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `RANGE_ENTRIES`.
    pub entries: u64,
    /// `RANGE_COUNT`.
    pub count: u64,
}

impl Counts {
    fn add(&mut self, d: Counts) {
        self.entries = self.entries.saturating_add(d.entries);
        self.count = self.count.saturating_add(d.count);
    }
}

/// A register read with its partition's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The partition.
    pub part: PartState,
    /// The register.
    pub counts: Counts,
}

/// Whom the growth between `prev` and `now` belongs to (None: nobody
/// can tell).
pub fn owner(prev: &PartState, now: &PartState) -> Option<u32> {
    let switched = now.switches.wrapping_sub(prev.switches);
    let one_ctx = switched == 0 || (switched == 1 && prev.paused);
    (one_ctx && now.ctx != 0).then_some(now.ctx)
}

/// The attributed totals of one armed register since it was armed.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    last: Snapshot,
    by_ctx: BTreeMap<u32, Counts>,
    unattributed: Counts,
}

impl Ledger {
    /// A register armed at `at` (its counts 0 then).
    pub fn armed(at: PartState) -> Ledger {
        Ledger {
            last: Snapshot {
                part: at,
                counts: Counts::default(),
            },
            ..Ledger::default()
        }
    }

    /// Books the growth up to `now`.
    pub fn fold(&mut self, now: Snapshot) {
        let d = Counts {
            entries: now.counts.entries.saturating_sub(self.last.counts.entries),
            count: now.counts.count.saturating_sub(self.last.counts.count),
        };
        if d != Counts::default() {
            match owner(&self.last.part, &now.part) {
                Some(ctx) => self.by_ctx.entry(ctx).or_default().add(d),
                None => self.unattributed.add(d),
            }
        }
        self.last = now;
    }

    /// Context `ctx`'s share so far.
    pub fn of(&self, ctx: u32) -> Counts {
        self.by_ctx.get(&ctx).copied().unwrap_or_default()
    }

    /// What no context could be given.
    pub fn unattributed(&self) -> Counts {
        self.unattributed
    }

    /// Forgets context `ctx` (destroyed: its id may be reused).
    pub fn forget(&mut self, ctx: u32) {
        self.by_ctx.remove(&ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(switches: u64, ctx: u32, paused: bool) -> PartState {
        PartState {
            switches,
            ctx,
            paused,
        }
    }

    fn snap(p: PartState, entries: u64, count: u64) -> Snapshot {
        Snapshot {
            part: p,
            counts: Counts { entries, count },
        }
    }

    #[test]
    fn growth_goes_to_the_one_context_that_can_have_run() {
        let mut l = Ledger::armed(part(4, 1, false));
        l.fold(snap(part(4, 1, true), 2, 100)); // paused for a switch
        l.fold(snap(part(5, 2, false), 3, 130)); // 2 runs after it
        l.fold(snap(part(5, 2, true), 5, 170));
        l.fold(snap(part(6, 1, true), 6, 180)); // back to 1, paused again
        assert_eq!(
            l.of(1),
            Counts {
                entries: 3,
                count: 110
            }
        );
        assert_eq!(
            l.of(2),
            Counts {
                entries: 3,
                count: 70
            }
        );
        assert_eq!(l.unattributed(), Counts::default());
    }

    #[test]
    fn a_switch_not_seen_paused_is_unattributed() {
        let mut l = Ledger::armed(part(4, 1, false));
        l.fold(snap(part(5, 2, false), 2, 40)); // fallback switch
        l.fold(snap(part(7, 1, false), 3, 50)); // two switches
        l.fold(snap(part(7, 1, false), 3, 50)); // nothing grew
        assert_eq!(l.of(1), Counts::default());
        assert_eq!(l.of(2), Counts::default());
        assert_eq!(
            l.unattributed(),
            Counts {
                entries: 3,
                count: 50
            }
        );
    }
}
