//! Shared by the page tests: a scenario with a confidential VM, a daemon
//! configuration mapping tenants to VMs with pages in the test's
//! directory, and waiting until pages show the device's blocks.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpupm_client::page::{MappedPage, PageClient};
use gpupm_client::DevNode;
use gpupm_driver::model::cc;
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::ioctl::ledger_flags;
use gpupm_uapi::layout::{envelope_flags, Block, BlockSlot};
use gpupm_uapi::page::{PageData, PAGES_SOCKET_NAME};
use gpupm_uapi::regs as r;
use gpupm_uapi::tenant::scope;

use zerocopy::FromBytes;

use gpupm_test_support::device::expected;
use gpupm_test_support::scenario::churn;
use gpupm_test_support::services::daemon_config;
use gpupm_test_support::Scratch;

/// Tenant A: owns VM 3 (churned contexts) by uid.
pub const UID_A: u32 = 61401;
/// Tenant B: owns VM 1 by uid.
pub const UID_B: u32 = 61402;
/// Tenant C: owns confidential VM [`VM_CC`] through group [`GID_C`].
pub const UID_C: u32 = 61403;
/// Group of tenant C.
pub const GID_C: u32 = 61413;
/// A user mapped to nothing.
pub const UID_NOBODY: u32 = 61404;
/// Tenant A's VM.
pub const VM_A: u32 = 3;
/// Tenant B's VM.
pub const VM_B: u32 = 1;
/// The confidential VM.
pub const VM_CC: u32 = 11;
/// Its key.
pub const KEY_CC: [u8; 32] = [0x5a; 32];
/// Every VM of [`scenario`].
pub const VMS: std::ops::RangeInclusive<u32> = 1..=11;

/// The end-to-end churn scenario plus confidential VM [`VM_CC`] (two
/// contexts) time-slicing partition 5.
pub fn scenario() -> String {
    let key: String = KEY_CC.iter().map(|b| format!("{b:02x}")).collect();
    let mut s = churn();
    s += &format!("[[vm]]\nid = {VM_CC}\npartition = 5\nconfidential_key = \"{key}\"\n");
    for _ in 0..2 {
        s += &format!("[[context]]\nvm = {VM_CC}\nprofile = \"busy\"\n");
    }
    s
}

/// A backstop no test outlives: what a page shows came from an event.
pub const NO_BACKSTOP_MS: u64 = 3_600_000;

/// The daemon configuration: tenants A, B, C; pages in `tmp/pages`, with
/// a full refresh every `backstop_ms`; `extra` appended.
pub fn config(tmp: &Scratch, backstop_ms: u64, extra: &str) -> String {
    daemon_config(
        tmp,
        &format!(
            "[[tenant]]\nvm = {VM_A}\nuid = {UID_A}\n[[tenant]]\nvm = {VM_B}\nuid = {UID_B}\n\
             [[tenant]]\nvm = {VM_CC}\ngid = {GID_C}\n[pages]\ndir = {:?}\nbackstop_ms = {backstop_ms}\n{extra}",
            tmp.join("pages")
        ),
    )
}

/// The page socket of a test's daemon.
pub fn socket(tmp: &Scratch) -> PathBuf {
    tmp.join("pages").join(PAGES_SOCKET_NAME)
}

/// A connection to the page socket.
pub fn connect(tmp: &Scratch) -> PageClient {
    PageClient::connect(socket(tmp)).expect("connect to the page socket")
}

/// Where the block behind a page is: the VM's or the context's.
pub fn block_offset(dev: &DevNode, page: &MappedPage) -> u64 {
    let h = page.header();
    let reg = if h.scope == scope::VM {
        r::vm(h.id, r::VM_BLOCK)
    } else {
        r::ctx(h.id, r::CTX_BLOCK)
    };
    dev.read64(reg).expect("block register")
}

/// The device's block slot behind a page now.
pub fn device_slot(dev: &DevNode, page: &MappedPage) -> BlockSlot {
    dev.block_slot(block_offset(dev, page))
        .expect("read the block slot")
}

/// Waits (up to 30 s) until every page shows its block as the device
/// holds it now: the same commit count (plaintext) or the same slot
/// bytes (sealed). The device must be quiescent.
pub fn wait_current(dev: &DevNode, pages: &[&MappedPage]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for page in pages {
        loop {
            let slot = device_slot(dev, page);
            let data = page.read().expect("page read");
            let current = if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
                data.sealed == slot
            } else {
                slot.plain_block()
                    .is_some_and(|b| b.commit_seq == data.counters.commit_seq)
            };
            if current {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "page {:?} not current within 30 s",
                page.header()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The totals in a confidential scope's sealed block slot, opened with
/// [`KEY_CC`] as its tenant's trusted environment would (session key from
/// the envelope's session and epoch).
pub fn open_sealed(slot: &BlockSlot) -> [u64; MAX_EVENTS] {
    let mut payload = slot.payload;
    cc::open(&KEY_CC, &slot.envelope, &mut payload, &slot.tag)
        .expect("the tenant's key opens the sealed slot");
    Block::read_from_bytes(&payload).expect("a block").counters
}

/// A confidential scope's page `data` (of `page`) holds the device's
/// ciphertext, and its tenant's key opens it to the ledger's totals of
/// (`ledger_scope`, `id`); `who` names the page in a failure.
pub fn assert_sealed_page(
    dev: &DevNode,
    page: &MappedPage,
    data: &PageData,
    (ledger_scope, id): (u32, u32),
    who: &str,
) {
    assert_eq!(
        data.sealed,
        device_slot(dev, page),
        "{who}: the device's ciphertext"
    );
    assert_eq!(
        open_sealed(&data.sealed),
        sealed_ledger(dev, ledger_scope, id),
        "{who}: the opened page"
    );
}

/// The ledger's totals of a confidential scope: the device seals the
/// answer under the VM's session key; [`KEY_CC`] opens it.
pub fn sealed_ledger(dev: &DevNode, ledger_scope: u32, id: u32) -> [u64; MAX_EVENTS] {
    let mut l = dev.ledger(ledger_scope, id).expect("ledger");
    assert_ne!(
        l.flags & ledger_flags::SEALED,
        0,
        "a confidential scope's ledger answer is sealed"
    );
    cc::open_ledger(&mut l, &KEY_CC).expect("the VM's key opens its ledger");
    expected(&l)
}
