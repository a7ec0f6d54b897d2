//! Register file and memory window of the real device model through
//! `pread`/`pwrite` on the node (small scenario, step clock).

use std::os::unix::fs::FileExt;

use gpupm_test_support::rawnode::{advance, flush_all, identity, read_block};
use gpupm_test_support::rawnode::{errno, rd32, rd64, wr32};
use gpupm_test_support::Driver;
use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::layout::{self, block_kind, Block, BlockSlot, BLOCK_SLOT_SIZE, MEM_WINDOW_OFFSET};
use gpupm_uapi::regs::{self, device_status, mbox_op, mbox_status};
use zerocopy::FromBytes;

#[test]
fn the_node_tests_scenario_files_parse() {
    for text in [
        gpupm_test_support::scenario::small(),
        gpupm_test_support::scenario::switching(),
        gpupm_test_support::scenario::slow_realtime(),
    ] {
        gpupm_driver::scenario::parse("test.toml", &text).expect("scenario file parses");
    }
}

#[test]
fn identity_and_topology_registers_describe_the_scenario() {
    let d = Driver::start();
    let card = d.card();
    assert_eq!(rd32(&card, regs::ID).unwrap(), regs::DEVICE_MAGIC);
    assert_eq!(
        rd32(&card, regs::ABI_VERSION).unwrap(),
        gpupm_uapi::ABI_VERSION
    );
    // sms_per_gpc = [3, 2], 2 memory slices of 2 L2 + 1 FB + 1 CE, 2 NVLinks.
    let expect = [
        (regs::TOPO_GPCS, 2),
        (regs::TOPO_SMS, 5),
        (regs::TOPO_L2_SLICES, 4),
        (regs::TOPO_FB_PARTITIONS, 2),
        (regs::TOPO_NVLINKS, 2),
        (regs::TOPO_COPY_ENGINES, 2),
        (regs::TOPO_PARTITIONS, 2),
        (regs::TOPO_EVENTS, u32::try_from(EVENT_COUNT).unwrap()),
        (regs::TOPO_MEMORY_SLICES, 2),
        (regs::CLOCK_KHZ, 1_980_000),
        (regs::DEVICE_STATUS, device_status::STEP_CLOCK),
        (regs::TOPO_VMS, regs::MAX_VMS),
        (regs::TOPO_CONTEXTS, regs::MAX_CONTEXTS),
    ];
    for (off, want) in expect {
        assert_eq!(rd32(&card, off).unwrap(), want, "register {off:#x}");
    }
    let id = identity(&card);
    assert_eq!(rd32(&card, regs::TOPO_CCUS).unwrap(), id.ccus);
    assert_eq!((id.sms, id.partitions), (5, 2));
    // Every CCU belongs to the system channel or one of the two slices, and
    // the slices' assigned masks are disjoint.
    let a1 = rd64(&card, regs::part(1, regs::PART_CCU_ASSIGNED)).unwrap();
    let a2 = rd64(&card, regs::part(2, regs::PART_CCU_ASSIGNED)).unwrap();
    assert_eq!(a1 & a2, 0);
    assert!(a1 != 0 && a2 != 0);
    for c in 0..id.ccus {
        let owner = rd32(&card, regs::ccu(c, regs::CCU_OWNER)).unwrap();
        let in_mask = |m: u64| m & 1 << c != 0;
        match owner {
            1 => assert!(in_mask(a1)),
            2 => assert!(in_mask(a2)),
            o => assert!(o == 0 || o == u32::MAX, "CCU {c} owner {o}"),
        }
    }
    // VM table: VM 3 is the confidential one, with a session under the
    // scenario's key.
    let cc = regs::vm_flags::CONFIDENTIAL | regs::vm_flags::SESSION;
    for (vm, part, flags) in [(1, 1, 0), (2, 1, 0), (3, 2, cc)] {
        assert_eq!(rd32(&card, regs::vm(vm, regs::VM_PARTITION)).unwrap(), part);
        assert_eq!(rd32(&card, regs::vm(vm, regs::VM_FLAGS)).unwrap(), flags);
    }
    assert_eq!(rd32(&card, regs::vm(4, regs::VM_PARTITION)).unwrap(), 0);
    d.stop();
}

#[test]
fn sixty_four_bit_counter_reads_atomically_and_by_halves() {
    let d = Driver::start();
    let card = d.card();
    assert_eq!(advance(&card, 123_457).unwrap(), 123_457);
    assert_eq!(rd64(&card, regs::CYCLE).unwrap(), 123_457);
    assert_eq!(rd32(&card, regs::CYCLE).unwrap(), 123_457);
    assert_eq!(rd32(&card, regs::CYCLE + 4).unwrap(), 0);
    let switches = rd64(&card, regs::part(1, regs::PART_SWITCHES)).unwrap();
    assert!(switches > 0, "the device switched contexts while advancing");
    let e = card.read_at(&mut [0u8; 8], regs::ID).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL, "8-byte read of a 32-bit register");
    d.stop();
}

#[test]
fn writes_read_back_and_read_only_registers_refuse_writes() {
    let d = Driver::start();
    let card = d.card();
    let reg = regs::part(1, regs::PART_SWITCH_TIMEOUT);
    assert_eq!(rd32(&card, reg).unwrap(), 50_000, "scenario switch timeout");
    wr32(&card, reg, 70_000).unwrap();
    assert_eq!(rd32(&card, reg).unwrap(), 70_000);
    for (off, value) in [
        (regs::ID, 1),
        (regs::CYCLE, 0),
        (regs::TOPO_SMS, 9),
        (regs::part(1, regs::PART_SWITCHES), 0),
        (reg, 10),                                 // below the 1024-cycle minimum
        (regs::TRIG_PERIOD, 5),                    // below TRIG_PERIOD_MIN
        (regs::part(1, regs::PART_RC_BIND_VM), 3), // VM 3 lives on partition 2
        (regs::part(1, regs::PART_CTRL), regs::part_ctrl::ALL), // no switch pending
    ] {
        let e = wr32(&card, off, value).unwrap_err();
        assert_eq!(errno(&e), libc::EINVAL, "write {value} to {off:#x}");
    }
    assert_eq!(rd32(&card, regs::ID).unwrap(), regs::DEVICE_MAGIC);
    assert_eq!(rd32(&card, reg).unwrap(), 70_000);
    assert_eq!(rd32(&card, regs::TRIG_PERIOD).unwrap(), 20_000);
    d.stop();
}

#[test]
fn unaligned_odd_width_and_out_of_range_accesses_are_einval_and_change_nothing() {
    let d = Driver::start();
    let card = d.card();
    let reg = regs::part(1, regs::PART_SWITCH_TIMEOUT);
    wr32(&card, reg, 7_777).unwrap();
    let before = gpupm_test_support::rawnode::digest(&card);
    let mut b4 = [0u8; 4];
    let mut b2 = [0u8; 2];
    let mut b16 = [0u8; 16];
    let window_end = layout::STREAM_REGION + 16 * layout::STREAM_RING_SPAN;
    for (what, res) in [
        ("unaligned read", card.read_at(&mut b4, reg + 2)),
        ("2-byte read", card.read_at(&mut b2, reg)),
        ("16-byte read", card.read_at(&mut b16, reg)),
        ("read past BAR0", card.read_at(&mut b4, regs::BAR0_SIZE)),
        ("read of an unmapped register", card.read_at(&mut b4, 0x3FC)),
        (
            "read far past BAR0",
            card.read_at(&mut b4, MEM_WINDOW_OFFSET - 4 - 0x4000),
        ),
        ("unaligned write", card.write_at(&[1, 2, 3, 4], reg + 1)),
        ("2-byte write", card.write_at(&[1, 2], reg)),
        (
            "write past BAR0",
            card.write_at(&[1, 2, 3, 4], regs::BAR0_SIZE),
        ),
        (
            "unaligned 8-byte read",
            card.read_at(&mut [0u8; 8], regs::CYCLE + 4),
        ),
        (
            "window write",
            card.write_at(&[1, 2, 3, 4], MEM_WINDOW_OFFSET),
        ),
        (
            "window read past its end",
            card.read_at(&mut b16, MEM_WINDOW_OFFSET + window_end),
        ),
    ] {
        let e = res.expect_err(what);
        assert_eq!(errno(&e), libc::EINVAL, "{what}: {e}");
    }
    assert_eq!(rd32(&card, reg).unwrap(), 7_777);
    assert!(
        gpupm_test_support::rawnode::digest(&card) == before,
        "a refused access changed the device"
    );
    d.stop();
}

#[test]
fn memory_window_reads_blocks_in_bulk() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 200_000).unwrap();
    flush_all(&card);
    let mut buf = vec![0u8; 64 * 1024];
    card.read_exact_at(&mut buf, MEM_WINDOW_OFFSET).unwrap();
    let slot = |i: u64| {
        let size = usize::try_from(BLOCK_SLOT_SIZE).unwrap();
        let at = usize::try_from(i).unwrap() * size;
        BlockSlot::read_from_bytes(&buf[at..at + size]).unwrap()
    };
    let system = Block::read_from_bytes(&slot(0).payload).unwrap();
    assert_eq!(
        (system.magic, system.kind),
        (layout::BLOCK_MAGIC, block_kind::SYSTEM)
    );
    assert!(
        system.counters.iter().sum::<u64>() > 0,
        "the system block counted"
    );
    assert_eq!(
        system,
        read_block(&card, 0, None),
        "bulk and single-slot reads agree"
    );
    let vm1 = Block::read_from_bytes(&slot(1).payload).unwrap();
    assert_eq!((vm1.kind, vm1.id), (block_kind::VM, 1));
    // VM 3 is confidential: ciphertext in the window, plaintext with its key.
    assert_ne!(
        slot(3).envelope.flags & layout::envelope_flags::ENCRYPTED,
        0
    );
    let vm3 = read_block(
        &card,
        layout::block_slot_offset(3),
        Some(&gpupm_test_support::scenario::VM3_KEY),
    );
    assert_eq!((vm3.kind, vm3.id), (block_kind::VM, 3));
    assert!(vm3.counters.iter().sum::<u64>() > 0);
    d.stop();
}

#[test]
fn oob_node_allows_only_the_mailbox_and_agrees_with_the_window() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 100_000).unwrap();
    flush_all(&card);
    let oob = d.open("card0-oob", 0);
    wr32(&oob, regs::OOB_MBOX_CMD, mbox_op::GET_CAPS).unwrap();
    assert_eq!(rd32(&oob, regs::OOB_MBOX_STATUS).unwrap(), mbox_status::OK);
    let caps = rd64(&oob, regs::OOB_MBOX_DATA).unwrap();
    assert_eq!(caps >> 32, u64::from(gpupm_uapi::ABI_VERSION));
    assert_eq!(caps & 0xFFFF_FFFF, EVENT_COUNT as u64);
    wr32(&oob, regs::OOB_MBOX_CMD, mbox_op::READ_CYCLE).unwrap();
    assert_eq!(rd64(&oob, regs::OOB_MBOX_DATA).unwrap(), 100_000);
    let system = read_block(&card, 0, None);
    let nvlink_tx = gpupm_uapi::events::by_name("nvlink_tx_flits").unwrap().id;
    wr32(&oob, regs::OOB_MBOX_ARG, u32::from(nvlink_tx)).unwrap();
    wr32(&oob, regs::OOB_MBOX_CMD, mbox_op::READ_SYSTEM_COUNTER).unwrap();
    let via_mailbox = rd64(&oob, regs::OOB_MBOX_DATA).unwrap();
    assert_eq!(via_mailbox, system.counters[usize::from(nvlink_tx)]);
    assert!(via_mailbox > 0);
    wr32(&oob, regs::OOB_MBOX_CMD, 0x7F).unwrap();
    assert_eq!(
        rd32(&oob, regs::OOB_MBOX_STATUS).unwrap(),
        mbox_status::ERR_OPCODE
    );
    assert_eq!(rd32(&oob, regs::OOB_MBOX_SEQ).unwrap(), 4);
    // Each side reaches only its own mailbox.
    for off in [regs::ID, regs::TRIG_CMD, regs::INTR_ACK, regs::MBOX_CMD] {
        assert_eq!(errno(&rd32(&oob, off).unwrap_err()), libc::EINVAL);
        assert_eq!(errno(&wr32(&oob, off, 0).unwrap_err()), libc::EINVAL);
    }
    for off in [
        regs::OOB_MBOX_ARG,
        regs::OOB_MBOX_CMD,
        regs::OOB_MBOX_STATUS,
    ] {
        assert_eq!(errno(&rd32(&card, off).unwrap_err()), libc::EINVAL);
        assert_eq!(errno(&wr32(&card, off, 1).unwrap_err()), libc::EINVAL);
    }
    assert_eq!(rd32(&card, regs::MBOX_SEQ).unwrap(), 0);
    d.stop();
}

/// The host's node reaches no word of the OOB mailbox block by any path
/// (pread, pwrite, a register batch), and the BMC's node reaches every
/// register of it; a refused host access changes nothing the BMC sees.
#[test]
fn the_host_node_reaches_no_oob_mailbox_register_by_any_path() {
    use gpupm_test_support::rawnode::{batch, read_op, write_op};

    let d = Driver::start();
    let card = d.card();
    let oob = d.open("card0-oob", 0);
    wr32(&oob, regs::OOB_MBOX_ARG2, 7).unwrap();
    let seq = rd32(&oob, regs::OOB_MBOX_SEQ).unwrap();
    let (start, end) = regs::OOB_MAILBOX_REGS.range();
    for reg in regs::OOB_MAILBOX_REGS.regs {
        for word in 0..u64::from(reg.words) {
            let off = reg.offset + 4 * word;
            let width = u32::try_from(reg.width.bytes()).unwrap();
            assert!(off >= start && off < end);
            let mut b = [0u8; 8];
            let w = width as usize;
            assert_eq!(
                errno(&card.read_at(&mut b[..w], off).unwrap_err()),
                libc::EINVAL,
                "host pread of {}",
                reg.name
            );
            assert_eq!(
                errno(&card.write_at(&b[..4], off).unwrap_err()),
                libc::EINVAL,
                "host pwrite of {}",
                reg.name
            );
            for mut op in [read_op(off, width), write_op(off, 1)] {
                assert_eq!(
                    errno(&batch(&card, std::slice::from_mut(&mut op)).unwrap_err()),
                    libc::EINVAL,
                    "host batch op on {}",
                    reg.name
                );
            }
            oob.read_at(&mut b[..w], off)
                .unwrap_or_else(|e| panic!("BMC read of {}: {e}", reg.name));
        }
    }
    assert_eq!(
        rd32(&oob, regs::OOB_MBOX_ARG2).unwrap(),
        7,
        "ARG2 unchanged"
    );
    assert_eq!(
        rd32(&oob, regs::OOB_MBOX_SEQ).unwrap(),
        seq,
        "no command ran"
    );
    d.stop();
}

/// The device knows its host driver from the node: no `card0` handle
/// open is "unloaded", an open handle with requests "loaded", and the
/// BMC's own requests on `card0-oob` say nothing of the host.
#[test]
fn the_bmc_sees_the_host_driver_load_and_unload_through_the_node() {
    use gpupm_client::oob::{HostDriver, OobClient};

    let d = Driver::start();
    let bmc = OobClient::open(d.card_path().parent().unwrap()).unwrap();
    let state = |bmc: &OobClient| bmc.host_state().unwrap();
    assert_eq!(
        state(&bmc).driver,
        HostDriver::Unloaded,
        "no host handle yet"
    );
    assert_eq!(
        state(&bmc).driver,
        HostDriver::Unloaded,
        "BMC reads are no host"
    );
    let card = d.card();
    advance(&card, 1_000).unwrap();
    let loaded = state(&bmc);
    assert_eq!(
        (loaded.driver, loaded.handles),
        (HostDriver::Loaded, 1),
        "{loaded:?}"
    );
    let second = d.card();
    assert_eq!(state(&bmc).handles, 2);
    drop(second);
    assert_eq!(state(&bmc).handles, 1);
    drop(card);
    let gone = state(&bmc);
    assert_eq!(
        (gone.driver, gone.handles),
        (HostDriver::Unloaded, 0),
        "{gone:?}"
    );
    d.stop();
}

#[test]
fn oob_node_refuses_ioctls_and_the_window() {
    let d = Driver::start();
    let oob = d.open("card0-oob", 0);
    let e = gpupm_test_support::rawnode::ioctl(
        &oob,
        gpupm_uapi::ioctl::GPUPM_IOC_IDENTITY,
        &mut [0u8; 48],
    )
    .unwrap_err();
    assert_eq!(errno(&e), libc::ENOTTY);
    let mut b = [0u8; 4];
    assert_eq!(
        errno(&oob.read_at(&mut b, MEM_WINDOW_OFFSET).unwrap_err()),
        libc::EINVAL
    );
    d.stop();
}
