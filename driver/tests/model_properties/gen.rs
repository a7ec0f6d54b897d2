#![allow(clippy::cast_possible_truncation)]
//! proptest strategies: small random scenarios and host operation sequences.

use gpupm_driver::host::Host;
use gpupm_driver::model::Device;
use gpupm_driver::scenario::*;
use gpupm_test_support::model::{configured, hs};
use gpupm_uapi::events::{self, UnitType};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::regs::{self as r, hs_state, part_ctrl, rc_cmd, trig_cmd};
use proptest::prelude::*;

fn profile(idx: usize) -> impl Strategy<Value = ProfileSpec> {
    let event_ids: Vec<u16> = events::CATALOGUE
        .iter()
        .filter(|e| e.unit != UnitType::Nvlink)
        .map(|e| e.id)
        .collect();
    // Short phases too, so that runs of a few thousand cycles cross phase
    // boundaries (which take effect at their exact cycle).
    let phase = (
        prop_oneof![1_000u64..8_000, 1_000u64..150_000],
        proptest::sample::subsequence(event_ids, 1..12),
        prop::collection::vec(0.0f64..=1.0, 12),
    )
        .prop_map(|(d, evs, fs)| PhaseSpec {
            duration_cycles: d,
            rates: evs
                .iter()
                .zip(fs)
                .map(|(&e, f)| {
                    (
                        e,
                        if events::by_id(e).unwrap().multibit {
                            f * 32.0
                        } else {
                            f
                        },
                    )
                })
                .collect(),
        });
    prop::collection::vec(phase, 1..3).prop_map(move |phases| ProfileSpec {
        program: None,
        name: format!("p{idx}"),
        phases,
    })
}

fn device_profile() -> impl Strategy<Value = ProfileSpec> {
    prop::collection::vec(0.0f64..=1.0, 3).prop_map(|fs| ProfileSpec {
        program: None,
        name: "device".into(),
        phases: vec![PhaseSpec {
            duration_cycles: 100_000,
            rates: UnitType::Nvlink.events().map(|e| e.id).zip(fs).collect(),
        }],
    })
}

/// Random small scenarios: 1-3 GPCs, 1-3 partitions, 1-4 VMs (some
/// time-sliced, some confidential), fixed contexts, churn, throttling,
/// trigger settings from very frequent threshold triggers to none, and an
/// OOB channel that commits often or never.
pub fn scenario() -> impl Strategy<Value = Scenario> {
    let topo = (
        prop::collection::vec(1u32..=3, 1..=3),
        1u32..=3,
        1u32..=2,
        0u32..=1,
        0u32..=1,
        0u32..=2,
        any::<bool>(),
    );
    (
        topo,
        any::<u64>(),
        prop::collection::vec(profile(0), 1..=3),
        prop::option::of(device_profile()),
    )
        .prop_flat_map(
            |((gpcs, mem, l2, fb, ce, nvlinks, pcie), seed, profiles, dev_prof)| {
                let n_parts = gpcs.len().min(mem as usize);
                let n_profiles = profiles.len();
                (
                    Just(TopologySpec {
                        sms_per_gpc: gpcs,
                        memory_slices: mem,
                        l2_per_slice: l2,
                        fb_per_slice: fb,
                        ce_per_slice: ce,
                        nvlinks,
                        pcie,
                    }),
                    Just(seed),
                    Just(profiles),
                    Just(dev_prof),
                    proptest::sample::subsequence((1u32..8).collect::<Vec<_>>(), n_parts..=n_parts),
                    prop::collection::vec((0..n_parts, any::<bool>()), 1..=4),
                    prop::collection::vec(
                        (
                            0usize..4,
                            0..n_profiles,
                            0u64..100_000,
                            prop::option::of(1_000u64..300_000),
                        ),
                        0..=5,
                    ),
                    prop::collection::vec(
                        (0usize..4, 0..n_profiles, 2_000u64..40_000, 5_000u64..80_000),
                        0..=2,
                    ),
                    timing(),
                    prop::option::of((0u64..300_000, 1_000u64..200_000)),
                    // The OOB channel's own period: often enough to commit
                    // several times in a run, or (its default) never.
                    prop_oneof![Just(99_000_000u64), 2_000u64..60_000],
                )
            },
        )
        .prop_map(
            |(
                topology,
                seed,
                mut profiles,
                dev_prof,
                slots,
                vm_parts,
                ctxs,
                churn,
                timing,
                throttle,
                oob_period,
            )| {
                let (period, dither, threshold, timeout, ts_ctx, ts_vm, ring) = timing;
                let partitions: Vec<PartitionSpec> = slots
                    .iter()
                    .enumerate()
                    .map(|(i, &slot)| PartitionSpec {
                        slot,
                        gpcs: vec![i as u32],
                        memory_slices: vec![i as u32],
                        ctx_timeslice_cycles: ts_ctx,
                        vm_timeslice_cycles: ts_vm,
                        ri_version: 1,
                        ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
                    })
                    .collect();
                let vms: Vec<VmSpec> = vm_parts
                    .iter()
                    .enumerate()
                    .map(|(i, &(p, cc))| VmSpec {
                        id: i as u32 + 1,
                        partition: slots[p],
                        confidential: cc,
                        confidential_key: cc.then_some([i as u8 + 1; 32]),
                    })
                    .collect();
                let n_vms = vms.len();
                for (i, p) in profiles.iter_mut().enumerate() {
                    p.name = format!("p{i}");
                }
                let device_profile = dev_prof.map(|p| {
                    profiles.push(p);
                    profiles.len() - 1
                });
                Scenario {
                    programs: Vec::new(),
                    name: "generated".into(),
                    identity: IdentitySpec::derived("generated", seed, 0),
                    seed,
                    clock: ClockSpec {
                        khz: 1_980_000,
                        secondary_khz: 990_000,
                    },
                    topology,
                    trigger: TriggerSpec {
                        period_cycles: period,
                        dither,
                        threshold,
                    },
                    stream: StreamSpec {
                        ring_records: ring,
                        watermark: ring / 2,
                    },
                    switch_timeout_cycles: timeout,
                    partitions,
                    vms,
                    profiles,
                    device_profile,
                    contexts: ctxs
                        .into_iter()
                        .map(|(vm, profile, at, life)| ContextSpec {
                            vm: (vm % n_vms) as u32 + 1,
                            profile,
                            create_at: at,
                            destroy_at: life.map(|l| at + l),
                        })
                        .collect(),
                    churn: churn
                        .into_iter()
                        .map(|(vm, profile, every, life)| ChurnSpec {
                            vm: (vm % n_vms) as u32 + 1,
                            profiles: vec![profile],
                            start_at: every / 2,
                            every_cycles: every,
                            lifetime_cycles: life,
                            stop_at: None,
                        })
                        .collect(),
                    throttle: throttle
                        .map(|(s, l)| {
                            vec![ThrottleWindow {
                                start: s,
                                end: s + l,
                            }]
                        })
                        .unwrap_or_default(),
                    migrations: Vec::new(),
                    oob: OobSpec {
                        period_cycles: oob_period,
                        host_timeout_cycles: 1_980_000_000,
                    },
                }
            },
        )
}

type Timing = (u32, bool, u32, u32, u32, u32, u32);

fn timing() -> impl Strategy<Value = Timing> {
    (
        prop_oneof![Just(0u32), 1_024u32..60_000],
        any::<bool>(),
        prop_oneof![Just(r::TRIG_THRESHOLD_MAX), 1_024u32..30_000],
        2_000u32..40_000,
        prop_oneof![Just(0u32), 2_000u32..40_000],
        prop_oneof![Just(0u32), 5_000u32..80_000],
        prop_oneof![Just(16u32), Just(64u32), Just(256u32)],
    )
}

/// One thing host software (or the test acting for it) does.
#[derive(Clone, Debug)]
pub enum Op {
    /// Let device time pass without servicing anything.
    Advance(u64),
    /// Service every pending interrupt like the daemon does.
    Service,
    /// Drive the first `steps` handshake steps of a pending switch on the
    /// `which`-th partition, then let `wait` cycles pass, checking that the
    /// paused outgoing context generates nothing meanwhile.
    PartialHandshake { which: usize, steps: u8, wait: u64 },
    /// A register-write trigger on a subset of partitions.
    Trigger { mask: u32, cmd: u32 },
    /// Program a CCU mask word.
    Mask { ccu: u32, word: u32, bits: u32 },
    /// Change the threshold.
    Threshold(u32),
    /// Change the periodic trigger period.
    Period(u32),
}

/// One host operation.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..60_000).prop_map(Op::Advance),
        4 => Just(Op::Service),
        2 => (0usize..3, 1u8..=7, 0u64..30_000).prop_map(|(which, steps, wait)| Op::PartialHandshake { which, steps, wait }),
        1 => (any::<u32>(), 1u32..8).prop_map(|(mask, cmd)| Op::Trigger { mask, cmd }),
        1 => (0u32..16, 0u32..4, any::<u32>()).prop_map(|(ccu, word, bits)| Op::Mask { ccu, word, bits }),
        1 => prop_oneof![Just(r::TRIG_THRESHOLD_MAX), 1_024u32..50_000].prop_map(Op::Threshold),
        1 => prop_oneof![Just(0u32), 1_024u32..80_000].prop_map(Op::Period),
    ]
}

pub fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..40)
}

/// Applies `op`. Invalid register values are part of the op space: the
/// device must reject them, and the test only requires that it does not
/// change anything (checked elsewhere); here we ignore the error.
pub fn apply(dev: &mut Device, host: &mut Host, op: &Op) {
    match *op {
        Op::Advance(n) => {
            dev.advance(n).unwrap();
        }
        Op::Service => {
            host.service(dev).unwrap();
        }
        Op::PartialHandshake { which, steps, wait } => {
            let parts = configured(dev);
            let p = parts[which % parts.len()];
            if hs(dev, p) != hs_state::REQUESTED {
                return;
            }
            let outgoing = dev.read_reg(r::part(p, r::PART_CUR_CTX), 4).unwrap() as u32;
            let (vm, ctx) = (
                dev.read_reg(r::part(p, r::PART_NEXT_VM), 4).unwrap(),
                dev.read_reg(r::part(p, r::PART_NEXT_CTX), 4).unwrap(),
            );
            let writes: [(u64, u64); 8] = [
                (r::part(p, r::PART_CTRL), part_ctrl::CTX_PAUSE.into()),
                (r::part(p, r::PART_CTRL), part_ctrl::ALL.into()),
                (r::TRIG_TARGET, 1 << p),
                (
                    r::TRIG_CMD,
                    (trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER).into(),
                ),
                (r::TRIG_CMD, trig_cmd::FLUSH_REQ.into()),
                (r::part(p, r::PART_RC_CMD), rc_cmd::COMMIT.into()),
                (r::part(p, r::PART_RC_BIND_VM), vm),
                (r::part(p, r::PART_RC_BIND_CTX), ctx),
            ];
            for (i, &(off, v)) in writes.iter().enumerate().take(usize::from(steps)) {
                if i == 5 {
                    // Step 5: the flush acks arrive after device time; the
                    // fallback may finish the switch meanwhile.
                    dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES)).unwrap();
                    if hs(dev, p) != hs_state::ACKED {
                        return;
                    }
                }
                dev.write_reg(off, 4, v).unwrap();
            }
            if outgoing == 0 || wait == 0 {
                return;
            }
            let timeout = dev.read_reg(r::part(p, r::PART_SWITCH_TIMEOUT), 4).unwrap();
            let req = dev
                .read_reg(r::part(p, r::PART_SWITCH_REQ_CYCLE), 8)
                .unwrap();
            let before = dev
                .ledger_totals(ledger_scope::CONTEXT, outgoing)
                .unwrap()
                .generated;
            let wait = wait
                .min((req + timeout).saturating_sub(dev.now() + 1))
                .max(1);
            dev.advance(wait).unwrap();
            let after = dev
                .ledger_totals(ledger_scope::CONTEXT, outgoing)
                .unwrap()
                .generated;
            assert_eq!(
                before, after,
                "context {outgoing} generated events inside its switch window"
            );
        }
        Op::Trigger { mask, cmd } => {
            if dev
                .write_reg(r::TRIG_TARGET, 4, u64::from(mask & 0xFF))
                .is_ok()
            {
                let _ignored = dev.write_reg(r::TRIG_CMD, 4, u64::from(cmd));
            }
        }
        Op::Mask { ccu, word, bits } => {
            if dev
                .write_reg(r::ccu(ccu, r::CCU_MASK_INDEX), 4, u64::from(word))
                .is_ok()
            {
                let n = dev.read_reg(r::ccu(ccu, r::CCU_COUNTERS), 4).unwrap() as u32;
                let valid = (n - word * 32).min(32);
                let allowed = if valid == 32 {
                    u32::MAX
                } else {
                    (1 << valid) - 1
                };
                dev.write_reg(r::ccu(ccu, r::CCU_MASK_DATA), 4, u64::from(bits & allowed))
                    .unwrap();
            }
        }
        Op::Threshold(v) => dev.write_reg(r::TRIG_THRESHOLD, 4, u64::from(v)).unwrap(),
        Op::Period(v) => dev.write_reg(r::TRIG_PERIOD, 4, u64::from(v)).unwrap(),
    }
}
