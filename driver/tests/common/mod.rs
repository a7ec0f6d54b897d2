//! Shared helpers for the model tests: small scenarios built in code, a
//! digest of everything host-visible, and ledger checks.

#![allow(dead_code, clippy::cast_possible_truncation)]

pub mod gen;
pub mod ri;
pub mod sampling;

use gpupm_driver::model::cc::BootIds;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::*;
use gpupm_uapi::events::{self, UnitType, MAX_EVENTS};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::{
    self, Block, BlockSlot, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE, SYSTEM_BLOCK_SLOT,
};
use gpupm_uapi::regs::{self as r, ctx_state};
use zerocopy::FromBytes;

pub fn ev(name: &str) -> u16 {
    events::by_name(name)
        .unwrap_or_else(|| panic!("no event {name}"))
        .id
}

/// A profile giving every event of the listed unit types rate `scale` times
/// a per-event factor, so all counters are active.
pub fn busy_profile(name: &str, scale: f64, types: &[UnitType]) -> ProfileSpec {
    let rates = events::CATALOGUE
        .iter()
        .filter(|e| types.contains(&e.unit))
        .map(|e| {
            let base = if e.multibit { 20.0 } else { 0.6 };
            let f = 0.3 + 0.7 * ((e.id as f64 * 0.37).fract());
            (
                e.id,
                (base * f * scale).min(if e.multibit { 32.0 } else { 1.0 }),
            )
        })
        .collect();
    ProfileSpec {
        program: None,
        name: name.into(),
        phases: vec![PhaseSpec {
            duration_cycles: 3_000_000,
            rates,
        }],
    }
}

pub const CONTEXT_TYPES: [UnitType; 5] = [
    UnitType::Sm,
    UnitType::L2Slice,
    UnitType::FbPartition,
    UnitType::CopyEngine,
    UnitType::Pcie,
];

/// A small two-partition scenario: partition 1 time-slices VMs 1 and 2,
/// partition 2 runs VM 3 (confidential).
pub fn small_scenario() -> Scenario {
    Scenario {
        programs: Vec::new(),
        name: "small".into(),
        seed: 11,
        clock: ClockSpec {
            khz: 1_980_000,
            secondary_khz: 990_000,
        },
        topology: TopologySpec {
            sms_per_gpc: vec![3, 2],
            memory_slices: 2,
            l2_per_slice: 2,
            fb_per_slice: 1,
            ce_per_slice: 1,
            nvlinks: 2,
            pcie: true,
        },
        trigger: TriggerSpec {
            period_cycles: 20_000,
            dither: true,
            threshold: r::TRIG_THRESHOLD_MAX,
        },
        stream: StreamSpec {
            ring_records: 64,
            watermark: 32,
        },
        switch_timeout_cycles: 50_000,
        partitions: vec![
            PartitionSpec {
                slot: 1,
                gpcs: vec![0],
                memory_slices: vec![0],
                ctx_timeslice_cycles: 30_000,
                vm_timeslice_cycles: 70_000,
                ri_version: 1,
                ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
            },
            PartitionSpec {
                slot: 2,
                gpcs: vec![1],
                memory_slices: vec![1],
                ctx_timeslice_cycles: 25_000,
                vm_timeslice_cycles: 0,
                ri_version: 1,
                ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
            },
        ],
        vms: vec![
            VmSpec {
                id: 1,
                partition: 1,
                confidential_key: None,
            },
            VmSpec {
                id: 2,
                partition: 1,
                confidential_key: None,
            },
            VmSpec {
                id: 3,
                partition: 2,
                confidential_key: Some([0x5A; 32]),
            },
        ],
        profiles: vec![
            busy_profile("busy", 1.0, &CONTEXT_TYPES),
            busy_profile("light", 0.2, &CONTEXT_TYPES),
            busy_profile("nvlink", 0.5, &[UnitType::Nvlink]),
        ],
        device_profile: Some(2),
        contexts: vec![
            ContextSpec {
                vm: 1,
                profile: 0,
                create_at: 0,
                destroy_at: None,
            },
            ContextSpec {
                vm: 1,
                profile: 1,
                create_at: 5_000,
                destroy_at: Some(150_000),
            },
            ContextSpec {
                vm: 2,
                profile: 0,
                create_at: 1_000,
                destroy_at: None,
            },
            ContextSpec {
                vm: 3,
                profile: 0,
                create_at: 0,
                destroy_at: None,
            },
            ContextSpec {
                vm: 3,
                profile: 1,
                create_at: 0,
                destroy_at: None,
            },
        ],
        churn: vec![ChurnSpec {
            vm: 2,
            profiles: vec![0, 1],
            start_at: 10_000,
            every_cycles: 40_000,
            lifetime_cycles: 60_000,
            stop_at: None,
        }],
        throttle: vec![ThrottleWindow {
            start: 100_000,
            end: 200_000,
        }],
    }
}

/// A step-clock device whose session ids are pinned to the scenario's
/// seed, so that two devices built alike seal alike (the determinism and
/// engine comparisons compare ciphertext too).
pub fn device(s: &Scenario, engine: EngineKind) -> Device {
    Device::with_boot_ids(s, engine, true, BootIds::Pinned(s.seed)).expect("scenario builds")
}

/// Everything host-visible: every readable register and the whole memory window.
pub fn digest(dev: &Device) -> Vec<u8> {
    let mut out = Vec::new();
    let mut off = 0u64;
    while off < r::BAR0_SIZE {
        if let Ok(v) = dev.read_reg(off, 4) {
            out.extend_from_slice(&off.to_le_bytes());
            out.extend_from_slice(&(v as u32).to_le_bytes());
        }
        off += 4;
    }
    let blocks =
        (CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) as usize * layout::BLOCK_SLOT_SIZE as usize;
    let mut buf = vec![0u8; blocks];
    dev.read_window(0, &mut buf).unwrap();
    out.extend_from_slice(&buf);
    for p in 0..r::MAX_PARTITION_SLOTS {
        let Ok(cap) = dev.read_reg(r::part(p, r::PART_STREAM_CAP), 4) else {
            continue;
        };
        if cap == 0 {
            continue;
        }
        let mut ring = vec![0u8; cap as usize * layout::STREAM_SLOT_SIZE as usize];
        if dev
            .read_window(layout::stream_slot_offset(p, 0), &mut ring)
            .is_ok()
        {
            out.extend_from_slice(&ring);
        }
    }
    out
}

/// Host-visible block at `slot`, decrypted with `key` when encrypted.
pub fn host_block(dev: &Device, slot: u32, key: Option<&[u8; 32]>) -> Block {
    let mut buf = vec![0u8; layout::BLOCK_SLOT_SIZE as usize];
    dev.read_window(layout::block_slot_offset(slot), &mut buf)
        .unwrap();
    let mut s = BlockSlot::read_from_bytes(&buf).unwrap();
    if let Some(k) = key {
        gpupm_driver::model::cc::open(k, &s.envelope, &mut s.payload, &s.tag).expect("decrypts");
    }
    Block::read_from_bytes(&s.payload).unwrap()
}

/// Asserts every context block, VM block and the system block equal what
/// the ledger says they must hold (call after a full flush).
pub fn assert_blocks_match_ledger(dev: &mut Device, s: &Scenario) {
    let ctxs: Vec<(u32, u32, u32)> = dev.contexts().collect();
    for (id, vm, state) in ctxs {
        assert!(state == ctx_state::ACTIVE || state == ctx_state::DESTROYED);
        let expect = dev
            .ledger_totals(ledger_scope::CONTEXT, id)
            .unwrap()
            .expected_committed();
        let slot = dev.ctx_slot(id).unwrap();
        let key = s
            .vms
            .iter()
            .find(|v| v.id == vm)
            .and_then(|v| v.confidential_key);
        let host = host_block(dev, slot, key.as_ref());
        assert_eq!(
            &host,
            dev.block(slot),
            "host-visible block of ctx {id} differs from the device's"
        );
        assert_eq!(
            host.counters, expect,
            "context {id} (vm {vm}) block != ledger"
        );
    }
    for v in &s.vms {
        let expect = dev
            .ledger_totals(ledger_scope::VM, v.id)
            .unwrap()
            .expected_committed();
        let host = host_block(dev, v.id, v.confidential_key.as_ref());
        assert_eq!(host.counters, expect, "VM {} block != ledger", v.id);
    }
    let expect = dev
        .ledger_totals(ledger_scope::SYSTEM, 0)
        .unwrap()
        .expected_committed();
    assert_eq!(
        dev.block(SYSTEM_BLOCK_SLOT).counters,
        expect,
        "system block != ledger"
    );
    assert_eq!(
        dev.self_check_failures(),
        (0, 0),
        "a CCU counter wrapped or a threshold was missed"
    );
}

pub fn sum(a: &[u64; MAX_EVENTS]) -> u64 {
    a.iter().sum()
}
