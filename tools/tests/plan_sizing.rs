//! The sample-buffer plan against the device model: random scenarios (seed,
//! P, N, drain interval) with buffers sized by
//! `gpupm_client::sampling::plan` and drained once per interval lose no
//! record unless the plan says it was clamped to the sample span (then the
//! losses are exact); with the cycle buffer at half the planned record
//! bound they lose records, and per buffer the records read plus the
//! device's lost count equal the records it produced — exactly; the lost
//! records counted per context (`SAMP_LOST_SELECT`, `BUF_LOST_SELECTED`)
//! sum over the contexts to `BUF_LOST`, and so do those counted per VM.

use gpupm_client::sampling::plan::{self, RecordType, SamplerSettings};
use gpupm_driver::host::Host;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario;
use gpupm_uapi::sampling::{self as s, buf_kind, samp, samp_ctrl};
use proptest::prelude::*;

/// Per buffer: (records read, BUF_LOST, BUF_PRODUCED).
type Tally = Vec<(u64, u64, u64)>;

/// One run's outcome, per buffer in the order (partition, branch, cycle).
struct Outcome {
    tally: Tally,
    /// Σ per context and Σ per VM of the buffer's lost records.
    by_scope: Vec<(u64, u64)>,
    /// The plan could not fit the span and shrank this buffer.
    clamped: Vec<bool>,
}

/// Σ over every context, and Σ over every VM, of `BUF_LOST_SELECTED` of
/// partition `p`'s buffer `k`.
fn lost_by_scope(dev: &mut Device, p: u32, k: u32) -> (u64, u64) {
    use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};
    let mut sum = |ids: std::ops::Range<u32>, flag: u32| -> u64 {
        ids.map(|id| {
            w(dev, samp(p, s::SAMP_LOST_SELECT), u64::from(id | flag));
            r(dev, samp(p, s::buf(k, s::BUF_LOST_SELECTED)), 8)
        })
        .sum()
    };
    let ctxs = sum(0..MAX_CONTEXTS, 0);
    let vms = sum(0..MAX_VMS, s::lost_select::VM);
    (ctxs, vms)
}

fn w(dev: &mut Device, off: u64, v: u64) {
    dev.write_reg(off, 4, v)
        .unwrap_or_else(|e| panic!("write {off:#x} = {v}: {e:?}"));
}

fn r(dev: &mut Device, off: u64, width: u32) -> u64 {
    dev.read_reg(off, width).expect("read")
}

fn run(seed: u64, period: u32, n: u32, drain_us: u64, halve: bool) -> Outcome {
    let mut sc = scenario::builtin();
    sc.seed = seed;
    let mut dev = Device::new(&sc, EngineKind::Batched, true).expect("device");
    let mut host = Host::new();
    let slots: Vec<u32> = sc.partitions.iter().map(|p| p.slot).collect();
    let mut clamped = Vec::new();
    for &p in &slots {
        let settings = SamplerSettings {
            partition: p,
            clock_khz: sc.clock.khz,
            cycle_period: Some(period),
            branch_every: Some(n),
            min_branch_gap: sc.min_branch_gap(p).max(1),
        };
        let mut at = 0;
        let plans = plan::plan(&settings, drain_us, plan::DEFAULT_MARGIN_PCT);
        assert_eq!(
            plans.iter().map(|b| b.record_type).collect::<Vec<_>>(),
            [RecordType::BranchStack, RecordType::Cycle]
        );
        clamped.extend(plans.iter().map(|b| b.clamped));
        for b in plans {
            let (kind, cap) = match b.record_type {
                RecordType::BranchStack => (buf_kind::BRANCH, b.records),
                // Half the records the interval can produce, a power of two.
                RecordType::Cycle if halve => (
                    buf_kind::PC,
                    1u64 << (b.events_per_interval / 2).max(1).ilog2(),
                ),
                RecordType::Cycle => (buf_kind::PC, b.records),
            };
            w(&mut dev, samp(p, s::buf(kind, s::BUF_BASE)), at);
            w(&mut dev, samp(p, s::buf(kind, s::BUF_CAP)), cap);
            at += (cap * s::slot_size(kind)).next_multiple_of(s::BUF_ALIGN);
        }
        w(&mut dev, samp(p, s::SAMP_CYCLE_PERIOD), u64::from(period));
        w(&mut dev, samp(p, s::SAMP_BRANCH_PERIOD), u64::from(n));
        w(&mut dev, samp(p, s::SAMP_CTRL), u64::from(samp_ctrl::ALL));
    }
    let interval = u64::from(sc.clock.khz) * drain_us / 1000;
    let mut read = vec![0u64; slots.len() * 2];
    for _ in 0..4 {
        let mut left = interval;
        while left > 0 {
            let step = left.min(8192);
            dev.advance(step).expect("advance");
            host.service(&mut dev).map_err(|(_, e)| e).expect("service");
            left -= step;
        }
        for (i, &p) in slots.iter().enumerate() {
            for k in [buf_kind::BRANCH, buf_kind::PC] {
                let head = r(&mut dev, samp(p, s::buf(k, s::BUF_HEAD)), 4);
                let tail = r(&mut dev, samp(p, s::buf(k, s::BUF_TAIL)), 4);
                // Indices are 32-bit registers, modulo 2^32.
                read[i * 2 + k as usize] += head.wrapping_sub(tail) & u64::from(u32::MAX);
                w(&mut dev, samp(p, s::buf(k, s::BUF_TAIL)), head);
            }
        }
    }
    let mut out = Tally::new();
    let mut by_scope = Vec::new();
    for (i, &p) in slots.iter().enumerate() {
        for k in [buf_kind::BRANCH, buf_kind::PC] {
            let lost = r(&mut dev, samp(p, s::buf(k, s::BUF_LOST)), 8);
            let produced = r(&mut dev, samp(p, s::buf(k, s::BUF_PRODUCED)), 8);
            out.push((read[i * 2 + k as usize], lost, produced));
            by_scope.push(lost_by_scope(&mut dev, p, k));
        }
    }
    Outcome {
        tally: out,
        by_scope,
        clamped,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn planned_sizes_lose_nothing_and_half_sizes_lose_exactly(
        seed in 0u64..1_000_000,
        period in 256u32..8192,
        n in 1u32..256,
        drain_us in 300u64..1500,
    ) {
        let planned = run(seed, period, n, drain_us, false);
        for (i, &(read, lost, produced)) in planned.tally.iter().enumerate() {
            if !planned.clamped[i] {
                prop_assert_eq!(lost, 0, "buffer {} lost at the planned size", i);
            }
            prop_assert_eq!(read + lost, produced, "buffer {}", i);
            prop_assert_eq!(planned.by_scope[i], (lost, lost), "buffer {}: losses by scope", i);
        }
        let halved = run(seed, period, n, drain_us, true);
        let by_scope = halved.by_scope;
        let halved = halved.tally;
        let mut lost_total = 0;
        for (i, (&(read, lost, produced), &(per_ctx, per_vm))) in
            halved.iter().zip(&by_scope).enumerate()
        {
            prop_assert_eq!(read + lost, produced, "buffer {}: losses not exact", i);
            prop_assert_eq!(per_ctx, lost, "buffer {}: per-context losses", i);
            prop_assert_eq!(per_vm, lost, "buffer {}: per-VM losses", i);
            lost_total += lost;
        }
        prop_assert!(lost_total > 0, "half the planned cycle buffer lost nothing");
    }
}
