//! Branch outcomes, 64 visits at a time.
//!
//! Visit `v` (0-based, over the context's life) of a branch block with
//! ledger row `row` draws a uniform 32-bit number: its bit `k` is bit
//! `v mod 64` of word `31 - k` of the SplitMix64 stream started from
//! `hash(seed, [BRANCH_DOMAIN, serial, row, v / 64])` ([`rng::nth`]).
//! The visit takes the first edge whose cumulative threshold (`p × 2^32`,
//! [`crate::model::program::CompiledExit::Branch`]) lies above the draw
//! and falls through if none does — exactly the program's probabilities,
//! independently for every visit.
//!
//! The 64 visits of a batch are compared with a threshold at once, one
//! bit position at a time from the most significant, stopping when every
//! lane is decided (about 8 of the 32 positions on average). An outcome
//! depends only on the seed, the context's serial, the row and the visit's
//! ordinal, never on the order in which outcomes are asked for: the walk
//! block by block and the walk in aggregate read the same outcomes.

use crate::model::rng;

/// Random-draw domain of branch decisions.
const BRANCH_DOMAIN: u64 = 0x4252_414E;

/// Visits per batch.
pub(super) const LANES: u64 = 64;
/// [`LANES`] as an array length.
#[allow(clippy::cast_possible_truncation)] // 64
pub(super) const LANE_SLOTS: usize = LANES as usize;

/// One batch's lanes per edge (lanes in none fall through).
#[derive(Clone, Debug, Default)]
struct Batch {
    /// Batch number + 1 (0: empty).
    tag: u64,
    edges: Vec<u64>,
}

/// A branch row's draws: the hash of its key prefix and the two batches
/// used last.
#[derive(Clone, Debug, Default)]
struct Row {
    /// `hash(seed, [BRANCH_DOMAIN, serial, row])` (0: not made yet).
    key: u64,
    batches: [Batch; 2],
}

/// The draws of a context's branch rows.
#[derive(Clone, Debug, Default)]
pub(super) struct Draws {
    rows: Vec<Row>,
}

/// Lanes whose draw lies below `thr`, with no other threshold to share
/// the words with.
fn below_once(thr: u64, prefix: u64) -> u64 {
    if thr >= 1 << 32 {
        return !0;
    }
    let (mut undecided, mut lt) = (!0u64, 0u64);
    for i in 0..32 {
        let w = rng::nth(prefix, i);
        if thr >> (31 - i) & 1 == 1 {
            lt |= undecided & !w;
            undecided &= w;
        } else {
            undecided &= !w;
        }
        if undecided == 0 {
            break;
        }
    }
    lt
}

/// Lanes whose draw lies below `thr` (bit-sliced comparison, most
/// significant bit first; `words[i]` is bit `31 - i` of every lane, made
/// on demand).
fn below(thr: u64, prefix: u64, words: &mut [u64; 32], made: &mut usize) -> u64 {
    if thr >= 1 << 32 {
        return !0;
    }
    let (mut undecided, mut lt) = (!0u64, 0u64);
    for (i, word) in words.iter_mut().enumerate() {
        if i == *made {
            *word = rng::nth(prefix, i as u64);
            *made += 1;
        }
        let w = *word;
        if thr >> (31 - i) & 1 == 1 {
            lt |= undecided & !w;
            undecided &= w;
        } else {
            undecided &= !w;
        }
        if undecided == 0 {
            break;
        }
    }
    lt
}

impl Draws {
    /// Batch `batch` of row `row` (edges `thr`: target, cumulative
    /// threshold) for `key` = (scenario seed, context serial).
    fn batch(&mut self, key: (u64, u64), row: usize, batch: u64, thr: &[(u16, u64)]) -> &[u64] {
        if self.rows.len() <= row {
            self.rows.resize_with(row + 1, Default::default);
        }
        let r = &mut self.rows[row];
        let tag = batch + 1;
        let i = match r.batches.iter().position(|s| s.tag == tag) {
            Some(i) => i,
            None => {
                // Walks move forward: replace the older batch.
                let i = usize::from(r.batches[0].tag > r.batches[1].tag);
                if r.key == 0 {
                    let (seed, serial) = key;
                    r.key = rng::hash(seed, &[BRANCH_DOMAIN, serial, row as u64]);
                }
                let prefix = rng::then(r.key, batch);
                let s = &mut r.batches[i];
                s.tag = tag;
                s.edges.clear();
                if let [(_, t)] = thr {
                    s.edges.push(below_once(*t, prefix));
                } else {
                    let (mut words, mut made) = ([0u64; 32], 0);
                    let mut prev = 0;
                    for &(_, t) in thr {
                        let lt = below(t, prefix, &mut words, &mut made);
                        s.edges.push(lt & !prev);
                        prev = lt;
                    }
                }
                i
            }
        };
        &self.rows[row].batches[i].edges
    }

    /// The edge visit `visit` of row `row` takes, or `None` (falls through).
    pub(super) fn outcome(
        &mut self,
        key: (u64, u64),
        row: usize,
        visit: u64,
        thr: &[(u16, u64)],
    ) -> Option<usize> {
        let lane = 1u64 << (visit % LANES);
        self.batch(key, row, visit / LANES, thr)
            .iter()
            .position(|&m| m & lane != 0)
    }

    /// Per edge, the lanes of visits `first..first + 64` of row `row` that
    /// take it (bit `i` for visit `first + i`), into `out[..thr.len()]`.
    pub(super) fn window(
        &mut self,
        key: (u64, u64),
        row: usize,
        first: u64,
        thr: &[(u16, u64)],
        out: &mut [u64],
    ) {
        let (b, s) = (first / LANES, first % LANES);
        let lo = self.batch(key, row, b, thr);
        out[..thr.len()].copy_from_slice(lo);
        if s == 0 {
            return;
        }
        for m in &mut out[..thr.len()] {
            *m >>= s;
        }
        let hi = self.batch(key, row, b + 1, thr);
        for (m, h) in out.iter_mut().zip(hi) {
            *m |= h << (LANES - s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The draw of one lane assembled bit by bit, as the definition says.
    fn draw(key: (u64, u64), row: usize, visit: u64) -> u64 {
        let prefix = rng::hash(key.0, &[BRANCH_DOMAIN, key.1, row as u64, visit / LANES]);
        (0..32).fold(0, |d, k| {
            d | (rng::nth(prefix, 31 - k) >> (visit % LANES) & 1) << k
        })
    }

    #[test]
    fn outcomes_follow_the_definition_in_any_order_and_windows_agree() {
        let thr = [(0, 1 << 30), (1, 3 << 30), (2, 1 << 32)];
        let key = (9, 4);
        let mut fwd = Draws::default();
        let mut back = Draws::default();
        let want = |v: u64| thr.iter().position(|&(_, t)| draw(key, 3, v) < t);
        for v in 0..300 {
            assert_eq!(fwd.outcome(key, 3, v, &thr), want(v), "visit {v}");
        }
        for v in (0..300).rev() {
            assert_eq!(back.outcome(key, 3, v, &thr), want(v), "visit {v}");
        }
        let mut out = [0u64; 3];
        for first in [0, 1, 63, 64, 100] {
            fwd.window(key, 3, first, &thr, &mut out);
            for i in 0..64 {
                let got = out.iter().position(|m| m >> i & 1 == 1);
                assert_eq!(got, want(first + i), "lane {i} of {first}");
            }
        }
    }

    #[test]
    fn thresholds_at_the_ends_are_exact() {
        let mut d = Draws::default();
        for v in 0..200 {
            assert_eq!(d.outcome((1, 1), 0, v, &[(0, 0)]), None);
            assert_eq!(d.outcome((1, 1), 1, v, &[(0, 1 << 32)]), Some(0));
        }
    }
}
