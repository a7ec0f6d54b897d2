//! The device model in process, as its tests drive it: the small scenario
//! (parsed from [`crate::scenario::small`], the file the node tests serve),
//! devices with pinned session ids, a digest of everything host-visible,
//! and ledger checks (the out-of-band channel's in [`oob`]).

pub mod cc;
pub mod oob;
pub mod ri;
pub mod sampling;

use gpupm_driver::model::cc::BootIds;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::{parse, PhaseSpec, ProfileSpec, Scenario};
use gpupm_uapi::events::{self, UnitType, MAX_EVENTS};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::{
    self, Block, BlockSlot, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE, SYSTEM_BLOCK_SLOT,
};
use gpupm_uapi::regs::{self as r, ctx_state, hs_state};
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

pub use crate::scenario::CONTEXT_TYPES;

/// A small two-partition scenario: partition 1 time-slices VMs 1 and 2,
/// partition 2 runs VM 3 (confidential); the node tests serve the same
/// file.
pub fn small_scenario() -> Scenario {
    parse("small.toml", &crate::scenario::small()).expect("the small scenario parses")
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
            out.extend_from_slice(&u32::try_from(v).expect("a 4-byte read").to_le_bytes());
        }
        off += 4;
    }
    let blocks =
        usize::try_from(u64::from(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) * layout::BLOCK_SLOT_SIZE)
            .expect("the block slots fit in memory");
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
        let ring_len =
            usize::try_from(cap * layout::STREAM_SLOT_SIZE).expect("a ring fits in memory");
        let mut ring = vec![0u8; ring_len];
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
    let mut buf = vec![0u8; usize::try_from(layout::BLOCK_SLOT_SIZE).expect("a slot fits")];
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

/// Configured partition slots of `dev`.
pub fn configured(dev: &Device) -> Vec<u32> {
    (1..r::MAX_PARTITION_SLOTS)
        .filter(|&p| reg32(dev, r::part(p, r::PART_STATUS)) & r::part_status::CONFIGURED != 0)
        .collect()
}

/// Handshake state of partition `p`.
pub fn hs(dev: &Device, p: u32) -> u32 {
    reg32(dev, r::part(p, r::PART_STATUS)) & r::part_status::STATE_MASK
}

/// Switches a context in on partition `p` (servicing its first switch
/// request with a host), then runs until `p` asks to switch it out. Nobody
/// services that request, so the context runs on until the test pauses it.
pub fn run_until_switch_out_requested(dev: &mut Device, p: u32) {
    let mut host = gpupm_driver::host::Host::new();
    loop {
        dev.advance(1_000).expect("advance");
        let requested = hs(dev, p) == hs_state::REQUESTED;
        let running = reg32(dev, r::part(p, r::PART_CUR_CTX)) != 0;
        match (requested, running) {
            (true, true) => return,
            (true, false) => {
                host.service(dev).expect("the host services the switch in");
            }
            _ => {}
        }
    }
}

fn reg32(dev: &Device, offset: u64) -> u32 {
    u32::try_from(dev.read_reg(offset, 4).expect("a register")).expect("a 4-byte read")
}

/// Finishes every switch in flight (host-driven where it is at the start,
/// by fallback otherwise), then flushes everything into the blocks.
pub fn settle_and_flush(dev: &mut Device) {
    for _ in 0..1000 {
        let mut stuck = false;
        for p in configured(dev) {
            match hs(dev, p) {
                hs_state::IDLE => {}
                hs_state::REQUESTED => {
                    gpupm_driver::host::handshake(dev, p).unwrap();
                }
                _ => stuck = true,
            }
        }
        if !stuck {
            gpupm_driver::host::flush_all(dev).unwrap();
            return;
        }
        dev.advance(40_001).unwrap();
    }
    panic!("switches never settled");
}
