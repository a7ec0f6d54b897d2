//! A context's call graph, built from the call stacks of its crossing
//! records.
//!
//! Every crossing record carries the device-side call stack (outermost
//! call first; the last callee is the kernel the crossing happened in).
//! For each record: every call of its stack adds 1 to that call site's
//! edge (caller kernel, call block, callee); the innermost kernel gets a
//! *self* sample; every kernel on the stack gets one *inclusive* sample
//! (once per record, however often it appears); the stack's kernel path
//! adds 1 to its row of the folded profile.
//!
//! Memory is bounded: edges by the program's call sites, kernels by its
//! kernels (both ≤ 65,536 by their 16-bit indices, and in practice the
//! program's size), distinct stacks by `MAX_GRAPH_STACKS` per context —
//! a record whose stack is new once the table is full still counts in
//! edges and samples and is counted in `stacks_dropped`.

use std::collections::BTreeMap;

use gpupm_uapi::ranges::{RangeRecord, RANGE_STACK_DEPTH};
use gpupm_uapi::tenant::ranges::MAX_GRAPH_STACKS;

/// Why a record's stack cannot be a call path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadStack {
    /// `depth` is larger than the stack.
    #[error("stack depth {0} exceeds the record's stack")]
    TooDeep(u32),
    /// A call's callee is not the next call's caller, or the last callee
    /// is not the record's kernel.
    #[error("stack frames do not chain")]
    Broken,
}

/// The kernels of `rec`'s stack, outermost first, ending with the kernel
/// the crossing happened in.
pub fn frames(rec: &RangeRecord) -> Result<Vec<u16>, BadStack> {
    let depth = usize::try_from(rec.depth).unwrap_or(usize::MAX);
    if depth > RANGE_STACK_DEPTH {
        return Err(BadStack::TooDeep(rec.depth));
    }
    let calls = &rec.stack[..depth];
    let mut out = Vec::with_capacity(depth + 1);
    for (i, c) in calls.iter().enumerate() {
        if i > 0 && calls[i - 1].callee != c.kernel {
            return Err(BadStack::Broken);
        }
        out.push(c.kernel);
    }
    match calls.last() {
        Some(c) if c.callee != rec.kernel => return Err(BadStack::Broken),
        _ => out.push(rec.kernel),
    }
    Ok(out)
}

/// A context's call graph: built record by record ([`CallGraphData::add`],
/// the daemon) or read from the tenant node with every page
/// ([`TenantClient::call_graph`](crate::tenant::TenantClient::call_graph)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallGraphData {
    /// Crossing records in the graph.
    pub crossings: u64,
    /// Crossings whose record the device lost.
    pub lost: u64,
    /// Crossings whose stack is not in `stacks`.
    pub stacks_dropped: u64,
    /// (kernel, call block, callee) → records whose stack holds the call.
    pub edges: BTreeMap<(u16, u16, u16), u64>,
    /// kernel → (self, inclusive).
    pub kernels: BTreeMap<u16, (u64, u64)>,
    /// Kernel path (outermost first) → records.
    pub stacks: BTreeMap<Vec<u16>, u64>,
}

impl CallGraphData {
    /// Adds one record.
    pub fn add(&mut self, rec: &RangeRecord) -> Result<(), BadStack> {
        let path = frames(rec)?;
        self.crossings += 1;
        let depth = path.len() - 1;
        for c in &rec.stack[..depth] {
            *self
                .edges
                .entry((c.kernel, c.call_block, c.callee))
                .or_default() += 1;
        }
        let mut seen: Vec<u16> = path.clone();
        seen.sort_unstable();
        seen.dedup();
        for k in seen {
            self.kernels.entry(k).or_default().1 += 1;
        }
        self.kernels.entry(rec.kernel).or_default().0 += 1;
        let room = self.stacks.len() < MAX_GRAPH_STACKS as usize;
        match self.stacks.get_mut(&path) {
            Some(n) => *n += 1,
            None if room => {
                self.stacks.insert(path, 1);
            }
            None => self.stacks_dropped += 1,
        }
        Ok(())
    }

    /// The folded-stack profile flame-graph tools read: one
    /// `k0;k1;…;kn COUNT` line per stack, kernels named by `name`.
    pub fn folded(&self, name: impl Fn(u16) -> String) -> String {
        let mut out = String::new();
        for (path, count) in &self.stacks {
            let names: Vec<String> = path.iter().map(|&k| name(k)).collect();
            out.push_str(&names.join(";"));
            out.push(' ');
            out.push_str(&count.to_string());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::ranges::StackEntry;
    use zerocopy::FromZeros;

    use super::*;

    fn rec(kernel: u16, calls: &[(u16, u16, u16)]) -> RangeRecord {
        let mut r = RangeRecord::new_zeroed();
        r.kernel = kernel;
        r.depth = u32::try_from(calls.len()).unwrap();
        for (slot, &(k, b, callee)) in r.stack.iter_mut().zip(calls) {
            *slot = StackEntry {
                kernel: k,
                call_block: b,
                return_block: b + 1,
                callee,
            };
        }
        r
    }

    #[test]
    fn edges_self_and_inclusive_follow_the_stacks() {
        let mut g = CallGraphData::default();
        g.add(&rec(2, &[(0, 1, 1), (1, 0, 2)])).unwrap();
        g.add(&rec(1, &[(0, 1, 1)])).unwrap();
        g.add(&rec(0, &[])).unwrap();
        // Recursion: kernel 1 twice on one stack is one inclusive sample.
        g.add(&rec(1, &[(0, 1, 1), (1, 3, 1)])).unwrap();
        assert_eq!(g.crossings, 4);
        assert_eq!(g.edges[&(0, 1, 1)], 3);
        assert_eq!(g.edges[&(1, 0, 2)], 1);
        assert_eq!(g.edges[&(1, 3, 1)], 1);
        assert_eq!(g.kernels[&0], (1, 4));
        assert_eq!(g.kernels[&1], (2, 3));
        assert_eq!(g.kernels[&2], (1, 1));
        assert_eq!(g.stacks[&vec![0, 1, 2]], 1);
        assert_eq!(g.stacks[&vec![0]], 1);
    }

    #[test]
    fn broken_stacks_are_refused_and_change_nothing() {
        let mut g = CallGraphData::default();
        assert_eq!(g.add(&rec(3, &[(0, 1, 1)])), Err(BadStack::Broken));
        assert_eq!(
            g.add(&rec(2, &[(0, 1, 1), (2, 0, 2)])),
            Err(BadStack::Broken)
        );
        let mut deep = rec(0, &[]);
        deep.depth = 17;
        assert_eq!(g.add(&deep), Err(BadStack::TooDeep(17)));
        assert_eq!(g.crossings, 0);
        assert!(g.edges.is_empty() && g.kernels.is_empty() && g.stacks.is_empty());
    }
}
