//! Which bytes of a wrapping program buffer hold the groups a drain has
//! not seen yet, and how many of them the buffer no longer holds.
//!
//! The daemon runs every block in `WRAP` mode with the buffer at
//! `[0, cap · group)`: the device stores group `n` (1-based, NRG) at slot
//! `(n − 1) mod cap` of the lap — except that a lap starts whenever a
//! group does not fit, so with `cap` whole groups the slot of group `n` is
//! exactly `(n − 1) mod cap`, and RCA is `(NRG mod cap) · group` (or a
//! full lap's end, which the device wraps on the next store). Of the
//! groups stored since the last drain only the newest `cap` are still in
//! the buffer; the rest were overwritten and are lost.

/// What one drain reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Groups overwritten before this drain (lost).
    pub lost: u64,
    /// Number of the first group read (1-based).
    pub first: u64,
    /// Byte ranges `(offset, len)` in the buffer, oldest group first.
    pub ranges: Vec<(u64, u64)>,
}

impl Plan {
    /// Groups the ranges hold.
    pub fn groups(&self, group_bytes: u64) -> u64 {
        self.ranges.iter().map(|&(_, len)| len / group_bytes).sum()
    }
}

/// The plan for a drain that saw `seen` groups last time and finds NRG =
/// `groups` now, in a buffer of `cap` groups of `group_bytes`.
pub fn plan(seen: u64, groups: u64, cap: u64, group_bytes: u64) -> Plan {
    let new = groups.saturating_sub(seen);
    let available = new.min(cap);
    let first = groups - available + 1;
    let mut ranges = Vec::new();
    if available > 0 {
        // Slots of groups first..=groups, as at most two runs.
        let start = (first - 1) % cap;
        let head = available.min(cap - start);
        ranges.push((start * group_bytes, head * group_bytes));
        if head < available {
            ranges.push((0, (available - head) * group_bytes));
        }
    }
    Plan {
        lost: new - available,
        first,
        ranges,
    }
}

/// Of `read` groups read (oldest first) after a snapshot at NRG `groups`,
/// how many of the oldest may have been overwritten while they were read,
/// now that NRG is `later`: the device stored `later − groups` more, into
/// the `cap − read` free slots first.
pub fn torn(read: u64, groups: u64, later: u64, cap: u64) -> u64 {
    later
        .saturating_sub(groups)
        .saturating_sub(cap - read.min(cap))
        .min(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates the device: slot of every group number stored.
    fn slots(groups: u64, cap: u64) -> Vec<Option<u64>> {
        let mut buf = vec![None; usize::try_from(cap).unwrap()];
        for n in 1..=groups {
            buf[usize::try_from((n - 1) % cap).unwrap()] = Some(n);
        }
        buf
    }

    #[test]
    fn every_plan_reads_exactly_the_newest_unseen_groups_in_order() {
        for cap in 1..6u64 {
            for seen in 0..14u64 {
                for groups in seen..seen + 14 {
                    let p = plan(seen, groups, cap, 32);
                    let buf = slots(groups, cap);
                    let got: Vec<u64> = p
                        .ranges
                        .iter()
                        .flat_map(|&(off, len)| off / 32..(off + len) / 32)
                        .map(|s| buf[usize::try_from(s).unwrap()].unwrap())
                        .collect();
                    let want: Vec<u64> = (seen + 1 + p.lost..=groups).collect();
                    assert_eq!(got, want, "cap {cap} seen {seen} groups {groups}");
                    assert_eq!(p.lost + p.groups(32), groups - seen);
                    assert_eq!(p.first, seen + 1 + p.lost);
                }
            }
        }
    }

    #[test]
    fn groups_stored_during_a_read_tear_only_past_the_free_slots() {
        assert_eq!(torn(3, 10, 10, 8), 0);
        assert_eq!(torn(3, 10, 15, 8), 0);
        assert_eq!(torn(3, 10, 16, 8), 1);
        assert_eq!(torn(8, 10, 11, 8), 1);
        assert_eq!(torn(3, 10, 100, 8), 3);
    }
}
