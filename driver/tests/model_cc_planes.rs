//! Every plane of a confidential VM against a curious host,
//! on the device model: the host arms everything it can — marked ranges
//! (code and data) on the confidential program, both samplers on the
//! partition, runtime instrumentation on every context — and reads every
//! register, the whole memory window (sealed payloads blanked), every
//! interrupt record and both mailboxes. Two runs differing only in what
//! the confidential VM runs (rates and program) must show it the same
//! bytes; a test build that counts the confidential VM in the ranges again
//! must be caught; and the plain VM time-sliced with the confidential one
//! counts exactly the same in both runs, with both engines.

use gpupm_driver::host::{self, Host};
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::Scenario;
use gpupm_test_support::model::sampling::{self, Arm};
use gpupm_test_support::model::{assert_blocks_match_ledger, device, digest, host_block};
use gpupm_test_support::planes::{
    self, arm_everything, mailbox, model_scenario, range_counts, register_map, registers, window,
    Window, Workload, BUSY, CC_KEY, CC_VM, LONE_VM, OTHER, OTHER_VM, SHARED_VM,
};
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::sampling::{
    buf, buf_kind, samp, BranchSlot, BranchStackRecord, PcSlot, BUF_PRODUCED,
};
use zerocopy::{FromBytes, IntoBytes};

/// Cycles each run lasts: a few dozen switches on the shared partition,
/// hundreds of sample records, the throttle window.
const CYCLES: u64 = 400_000;

/// What the host could read at the end of one run.
struct Seen {
    attempts: Vec<bool>,
    registers: Vec<u8>,
    window: Window,
    interrupts: Vec<InterruptRecord>,
    mailboxes: Vec<u8>,
    /// The system scope and every plain VM's and context's ledger (the
    /// debug ioctl the host may have).
    plain_ledgers: Vec<[u64; gpupm_uapi::events::MAX_EVENTS]>,
    dev: Device,
}

fn run(dev: &mut Device, host: &mut Host, cycles: u64) {
    let end = dev.now() + cycles;
    while dev.now() < end {
        dev.advance(3_000.min(end - dev.now())).unwrap();
        host.service(dev).unwrap();
    }
}

fn observe(s: &Scenario, engine: EngineKind, leak: bool) -> Seen {
    let mut dev = device(s, engine);
    if leak {
        dev.reintroduce_range_leak();
    }
    let attempts = arm_everything(&mut dev, Some(64), true);
    let mut host = Host::new();
    run(&mut dev, &mut host, CYCLES);
    host::flush_all(&mut dev).unwrap();
    let mut interrupts = Vec::new();
    dev.interrupts_since(0, &mut interrupts);
    let map = register_map(&mut dev);
    let registers = registers(&mut dev, &map, &[]);
    let window = window(&mut dev);
    let mut plain_ledgers = vec![dev
        .ledger_totals(ledger_scope::SYSTEM, 0)
        .unwrap()
        .expected_committed()];
    for vm in [LONE_VM, OTHER_VM, SHARED_VM] {
        plain_ledgers.push(
            dev.ledger_totals(ledger_scope::VM, vm)
                .unwrap()
                .expected_committed(),
        );
        for ctx in planes::contexts_of(&mut dev, vm) {
            plain_ledgers.push(
                dev.ledger_totals(ledger_scope::CONTEXT, ctx)
                    .unwrap()
                    .expected_committed(),
            );
        }
    }
    let mut mailboxes = mailbox(&mut dev, false);
    mailboxes.extend(mailbox(&mut dev, true));
    Seen {
        attempts,
        registers,
        window,
        interrupts,
        mailboxes,
        plain_ledgers,
        dev,
    }
}

/// The first place two runs differ, if any.
fn difference(a: &Seen, b: &Seen) -> Option<String> {
    if a.attempts != b.attempts {
        return Some(format!("attempts {:?} vs {:?}", a.attempts, b.attempts));
    }
    if a.interrupts != b.interrupts {
        let at = a
            .interrupts
            .iter()
            .zip(&b.interrupts)
            .position(|(x, y)| x != y);
        return Some(format!(
            "interrupt records ({} vs {}) differ at {at:?}: {:?}",
            a.interrupts.len(),
            b.interrupts.len(),
            at.map(|i| (&a.interrupts[i], &b.interrupts[i]))
        ));
    }
    if a.window.regions != b.window.regions || a.window.sealed != b.window.sealed {
        return Some(format!(
            "window layouts differ: {:?} vs {:?}",
            a.window.regions, b.window.regions
        ));
    }
    if let Some(at) = first_difference(&a.window.bytes, &b.window.bytes) {
        let (region, offset) = a.window.locate(at);
        return Some(format!(
            "the memory window differs in {region} at byte {offset}"
        ));
    }
    for (what, x, y) in [
        ("registers", &a.registers, &b.registers),
        ("mailboxes", &a.mailboxes, &b.mailboxes),
    ] {
        if let Some(at) = first_difference(x, y) {
            let context = String::from_utf8_lossy(&x[at.saturating_sub(40)..(at + 8).min(x.len())]);
            return Some(format!("{what} differ at byte {at} ({context:?})"));
        }
    }
    if a.plain_ledgers != b.plain_ledgers {
        return Some("the plain scopes' ledgers differ".into());
    }
    None
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then_some(a.len().min(b.len())))
}

/// The confidential VM's branch-stack records in the window, opened with
/// its key (the tenant's view of the sampling plane).
fn cc_stacks(seen: &Seen) -> Vec<BranchStackRecord> {
    cc_stacks_of(&seen.dev)
}

/// [`cc_stacks`] of a device.
fn cc_stacks_of(dev: &Device) -> Vec<BranchStackRecord> {
    let p = planes::SHARED_SLOT;
    let reg = |kind, r| {
        let off = gpupm_uapi::sampling::samp(p, gpupm_uapi::sampling::buf(kind, r));
        dev.read_reg(off, if gpupm_uapi::map::is_64bit(off) { 8 } else { 4 })
            .unwrap()
    };
    let (cap, addr) = (
        reg(buf_kind::BRANCH, gpupm_uapi::sampling::BUF_CAP),
        reg(buf_kind::BRANCH, gpupm_uapi::sampling::BUF_ADDR),
    );
    let mut out = Vec::new();
    for i in 0..cap {
        let mut buf = vec![0u8; std::mem::size_of::<BranchSlot>()];
        let at = addr + i * std::mem::size_of::<BranchSlot>() as u64;
        dev.read_window(at, &mut buf).unwrap();
        let mut slot = BranchSlot::read_from_bytes(&buf).unwrap();
        if slot.envelope.vm != CC_VM {
            continue;
        }
        gpupm_driver::model::cc::open(&CC_KEY, &slot.envelope, &mut slot.payload, &slot.tag)
            .expect("the tenant's key opens its branch stacks");
        out.push(BranchStackRecord::read_from_bytes(&slot.payload).unwrap());
    }
    out
}

/// The confidential VM's cycle samples, opened with its key.
fn cc_samples(seen: &Seen) -> usize {
    let dev = &seen.dev;
    let p = planes::SHARED_SLOT;
    let off = |r| gpupm_uapi::sampling::samp(p, gpupm_uapi::sampling::buf(buf_kind::PC, r));
    let cap = dev.read_reg(off(gpupm_uapi::sampling::BUF_CAP), 4).unwrap();
    let addr = dev
        .read_reg(off(gpupm_uapi::sampling::BUF_ADDR), 8)
        .unwrap();
    (0..cap)
        .filter(|i| {
            let mut buf = vec![0u8; std::mem::size_of::<PcSlot>()];
            let at = addr + i * std::mem::size_of::<PcSlot>() as u64;
            dev.read_window(at, &mut buf).unwrap();
            let mut slot = PcSlot::read_from_bytes(&buf).unwrap();
            slot.envelope.vm == CC_VM
                && gpupm_driver::model::cc::open(
                    &CC_KEY,
                    &slot.envelope,
                    &mut slot.payload,
                    &slot.tag,
                )
                .is_ok()
        })
        .count()
}

fn both(engine: EngineKind, leak: bool) -> (Seen, Seen) {
    (
        observe(&model_scenario(BUSY), engine, leak),
        observe(&model_scenario(OTHER), engine, leak),
    )
}

#[test]
fn nothing_the_host_reads_on_any_plane_depends_on_a_confidential_vms_workload() {
    let (mut a, mut b) = both(EngineKind::Batched, false);
    if let Some(d) = difference(&a, &b) {
        panic!("the host's view depends on the confidential workload: {d}");
    }
    // Every plane was armed: the ring, five ranges and both samplers took,
    // runtime instrumentation bound the plain contexts and refused the
    // confidential ones.
    assert_eq!(
        a.attempts,
        [true; 7]
            .into_iter()
            .chain([false, false, true, true])
            .collect::<Vec<_>>()
    );
    // The ranges on the confidential program count nothing; those that
    // see the plain VM count it.
    let counts = range_counts(&mut a.dev);
    assert_eq!([counts[0], counts[1], counts[3]], [0, 0, 0], "{counts:?}");
    assert!(counts[2] > 0 && counts[4] > 0, "{counts:?}");
    for ctx in planes::contexts_of(&mut a.dev, CC_VM) {
        let mut q = a.dev.ledger_ranges(ctx, planes::SHARED_SLOT).unwrap();
        let mut rows = q.rows.as_bytes().to_vec();
        gpupm_driver::model::cc::open(&CC_KEY, &q.envelope, &mut rows, &q.tag).unwrap();
        q.rows = FromBytes::read_from_bytes(&rows[..]).unwrap();
        assert!(
            q.rows
                .iter()
                .all(|r| (r.entries, r.count, r.crossings) == (0, 0, 0)),
            "a range counted confidential context {ctx}: {:?}",
            q.rows
        );
    }
    // The confidential VM ran differently, and its tenant still gets its
    // samples and its exact counts.
    assert!(a.window.sealed > 50, "{} sealed slots", a.window.sealed);
    let (sa, sb) = (cc_stacks(&a), cc_stacks(&b));
    assert!(!sa.is_empty() && sa.len() == sb.len());
    let branches = |s: &[BranchStackRecord]| s.iter().map(|r| r.branches).collect::<Vec<_>>();
    assert_ne!(
        branches(&sa),
        branches(&sb),
        "the programs took other branches"
    );
    assert!(cc_samples(&a) > 0);
    for seen in [&mut a, &mut b] {
        let s = seen.dev.scenario().clone();
        assert_blocks_match_ledger(&mut seen.dev, &s);
    }
    let total = |s: &Seen| -> u64 {
        host_block(&s.dev, CC_VM, Some(&CC_KEY))
            .counters
            .iter()
            .sum()
    };
    assert!(total(&a) > total(&b) && total(&b) > 0);
}

#[test]
fn a_device_that_counts_confidential_contexts_in_ranges_is_caught() {
    // The test-only switch makes the ranges count the confidential VM's
    // context: the same comparison must then find the confidential workload.
    let (mut a, mut b) = both(EngineKind::Batched, true);
    let found = difference(&a, &b).expect("the range leak went unnoticed");
    eprintln!("caught: {found}");
    let (ca, cb) = (range_counts(&mut a.dev), range_counts(&mut b.dev));
    assert!(ca[0] > 0 && ca[0] != cb[0], "{ca:?} {cb:?}");
}

#[test]
fn both_engines_agree_bit_for_bit_with_every_plane_armed() {
    let s = model_scenario(OTHER);
    let mut batched = observe(&s, EngineKind::Batched, false);
    let mut cycle = observe(&s, EngineKind::CycleLevel, false);
    assert_eq!(difference(&batched, &cycle), None);
    assert!(digest(&batched.dev) == digest(&cycle.dev));
    assert_eq!(
        batched.dev.counting_snapshot(),
        cycle.dev.counting_snapshot()
    );
    assert_eq!(cycle.dev.self_check_failures(), (0, 0));
    assert_blocks_match_ledger(&mut cycle.dev, &s);
}

/// The shared partition's two sample buffers as the host reads them,
/// sealed records included.
fn sample_buffers(dev: &Device) -> Vec<u8> {
    use gpupm_uapi::sampling::{slot_size, BUF_ADDR, BUF_CAP};
    let mut out = Vec::new();
    for kind in [buf_kind::BRANCH, buf_kind::PC] {
        let cap = dev.read_reg(samp(planes::SHARED_SLOT, buf(kind, BUF_CAP)), 4);
        let addr = dev.read_reg(samp(planes::SHARED_SLOT, buf(kind, BUF_ADDR)), 8);
        let len = usize::try_from(cap.unwrap() * slot_size(kind)).unwrap();
        let mut bytes = vec![0u8; len];
        dev.read_window(addr.unwrap(), &mut bytes).unwrap();
        out.extend_from_slice(&bytes);
    }
    out
}

/// A confidential context's sample records hold what it executed (sealed
/// for its tenant): the batched engine takes them from whole loop
/// iterations in aggregate — each scheduled branch stack with the branches
/// taken before its cycle, in cycle order with the cycle samples — the
/// cycle-level engine block by block. The buffers are small and wrap, so
/// they are compared, ciphertext and all, every 1,000 cycles: every record
/// either engine wrote must be the same.
#[test]
fn both_engines_seal_the_same_confidential_sample_records_all_along() {
    let s = model_scenario(BUSY);
    let mut devs = [EngineKind::Batched, EngineKind::CycleLevel].map(|engine| {
        let mut dev = device(&s, engine);
        arm_everything(&mut dev, Some(64), true);
        (dev, Host::new())
    });
    let mut stacks = 0;
    while devs[0].0.now() < CYCLES {
        let mut seen = Vec::new();
        for (dev, host) in &mut devs {
            dev.advance(1_000).unwrap();
            host.service(dev).unwrap();
            seen.push(sample_buffers(dev));
        }
        let at = devs[0].0.now();
        assert!(
            seen[0] == seen[1],
            "the sample buffers differ at cycle {at}"
        );
        let opened = cc_stacks_of(&devs[0].0);
        stacks = stacks.max(opened.iter().filter(|r| r.count > 0).count());
    }
    assert!(
        stacks > 0,
        "the confidential context's stacks held branches"
    );
}

/// The same where a scheduled stack often falls on the cycle a branch's
/// target starts: a confidential context on a loop of 7- or 9-cycle
/// iterations with a branch point, a stack due every 64–127 cycles (N =
/// 1). A stack holds the branches reported before its cycle — the walk
/// reports a branch after the time up to its target's start — however
/// the walk went.
#[test]
fn both_engines_agree_on_scheduled_stacks_that_fall_on_a_branch() {
    let text = format!(
        "seed = 5\n[trigger]\nperiod_cycles = 0\n\
         [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
         ctx_timeslice_cycles = 0\nvm_timeslice_cycles = 0\n\
         [[vm]]\nid = 1\npartition = 1\nconfidential_key = \"{key}\"\n\
         [[profile]]\nname = \"t\"\nprogram = \"tight\"\n\
         [[profile.phase]]\nduration_cycles = 1000000\nrates = {{ sm_cycles_elapsed = 1.0 }}\n\
         [[context]]\nvm = 1\nprofile = \"t\"\n\
         [[program]]\nname = \"tight\"\n[[program.kernel]]\nname = \"main\"\n\
         [[program.kernel.block]]\nname = \"a\"\ninstructions = 3\ncpi = 1.0\n\
         branch = [{{ to = \"c\", p = 0.5 }}]\n\
         [[program.kernel.block]]\nname = \"b\"\ninstructions = 2\ncpi = 1.0\n\
         [[program.kernel.block]]\nname = \"c\"\ninstructions = 4\ncpi = 1.0\n\
         loop = {{ to = \"a\", trips = 1000000 }}\n",
        key = "3d".repeat(32)
    );
    let s = gpupm_driver::scenario::parse("tight.toml", &text).expect("the scenario parses");
    let arm = Arm {
        pc_cap: 64,
        branch_cap: 8,
        period: 300,
        dither: 255,
        n: 1,
    };
    let mut devs = [EngineKind::Batched, EngineKind::CycleLevel].map(|engine| {
        let mut dev = device(&s, engine);
        sampling::arm(&mut dev, 1, arm);
        (dev, Host::new())
    });
    while devs[0].0.now() < 200_000 {
        let mut seen = Vec::new();
        for (dev, host) in &mut devs {
            dev.advance(500).unwrap();
            host.service(dev).unwrap();
            seen.push(
                [buf_kind::BRANCH, buf_kind::PC].map(|kind| sampling::slots(dev, 1, kind).concat()),
            );
        }
        let at = devs[0].0.now();
        assert!(
            seen[0] == seen[1],
            "the sample buffers differ at cycle {at}"
        );
    }
    let stacks = devs[0]
        .0
        .read_reg(samp(1, buf(buf_kind::BRANCH, BUF_PRODUCED)), 8)
        .unwrap();
    assert!(stacks > 1_000, "{stacks} stacks");
}

/// Runs `s` serviced by the host with no plane armed, flushes; returns the
/// device.
fn plain_run(s: &Scenario, engine: EngineKind) -> Device {
    let mut dev = device(s, engine);
    let mut host = Host::new();
    run(&mut dev, &mut host, CYCLES);
    host::flush_all(&mut dev).unwrap();
    dev
}

#[test]
fn a_plain_vm_time_sliced_with_a_confidential_one_counts_the_same_whatever_it_runs() {
    // Only the confidential VM's rates differ (ten times), as the outside
    // client found it: per-unit state it left behind (generator phases)
    // made the next VM's counts differ by a few per event.
    let rates_only = Workload { rate: 0.1, ..BUSY };
    let mut a = plain_run(&model_scenario(BUSY), EngineKind::Batched);
    let mut b = plain_run(&model_scenario(rates_only), EngineKind::Batched);
    let shared = |dev: &mut Device| {
        let mut rows = vec![
            dev.ledger_totals(ledger_scope::VM, SHARED_VM)
                .unwrap()
                .generated,
        ];
        for ctx in planes::contexts_of(dev, SHARED_VM) {
            rows.push(
                dev.ledger_totals(ledger_scope::CONTEXT, ctx)
                    .unwrap()
                    .generated,
            );
        }
        (rows, host_block(dev, SHARED_VM, None))
    };
    let (rows_a, block_a) = shared(&mut a);
    let (rows_b, block_b) = shared(&mut b);
    assert!(rows_a[0].iter().sum::<u64>() > 0);
    assert_eq!(rows_a, rows_b, "the shared VM generated differently");
    assert_eq!(block_a, block_b, "the shared VM's block differs");
    for dev in [&mut a, &mut b] {
        let s = dev.scenario().clone();
        assert_blocks_match_ledger(dev, &s);
    }
    let cc = |dev: &Device| -> u64 { host_block(dev, CC_VM, Some(&CC_KEY)).counters.iter().sum() };
    assert!(cc(&a) > cc(&b), "the confidential VM's work did differ");
}

/// The range leak's reproduction: the built-in scenario, range 0 of
/// partition 3 armed on the confidential VM 4's program (kernel 0, every
/// block, instructions), 10 M cycles. A device whose ranges count the
/// confidential VM's context (the test-only leak switch) reads non-zero
/// `RANGE_ENTRIES` and `RANGE_COUNT` there (268 and 2,652,524 when first
/// measured).
#[test]
fn the_range_leaks_reproduction_reads_nothing_of_the_confidential_vm() {
    use gpupm_uapi::ranges::{self as rg, code_item, range_ctrl, range_reg};
    let read = |leak: bool| {
        let s = gpupm_driver::scenario::builtin();
        let mut dev = device(&s, EngineKind::Batched);
        if leak {
            dev.reintroduce_range_leak();
        }
        let ctx = planes::contexts_of(&mut dev, 4)[0];
        let program = dev
            .read_reg(gpupm_uapi::regs::ctx(ctx, gpupm_uapi::regs::CTX_PROGRAM), 4)
            .unwrap();
        assert_ne!(program, 0, "VM 4's context runs a program");
        let table = s.program_table();
        let index = usize::try_from(program - 1).unwrap();
        let blocks = table[index].kernels[0].blocks.len();
        let last = u16::try_from(blocks - 1).unwrap();
        for (reg, value) in [
            (rg::RANGE_START, code_item(0, 0)),
            (rg::RANGE_END, code_item(0, last)),
            (
                rg::RANGE_CTRL,
                range_ctrl::ENABLE | u32::try_from(program).unwrap() << range_ctrl::PROGRAM_SHIFT,
            ),
        ] {
            dev.write_reg(range_reg(3, 0, reg), 4, u64::from(value))
                .unwrap();
        }
        let mut host = Host::new();
        run(&mut dev, &mut host, 10_000_000);
        (
            dev.read_reg(range_reg(3, 0, rg::RANGE_ENTRIES), 8).unwrap(),
            dev.read_reg(range_reg(3, 0, rg::RANGE_COUNT), 8).unwrap(),
        )
    };
    assert_eq!(read(false), (0, 0));
    let (entries, count) = read(true);
    assert!(
        entries > 0 && count > 0,
        "the leak switch reproduces the range leak"
    );
}
