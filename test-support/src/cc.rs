//! A confidential VM under the real driver and daemon: the scenario, the
//! tenants' key files, running `gpupm` as a tenant, a deterministic way to
//! drive the step clock with the daemon handshaking, and digests of what
//! the host can read.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpupm_client::ops::{read32, reg32, write32};
use gpupm_client::{DevNode, Scope, TenantClient};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::ioctl::MAX_BATCH_OPS;
use gpupm_uapi::layout::{
    self, envelope_flags, BLOCK_SLOT_SIZE, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE,
};
use gpupm_uapi::regs::{self as r, hs_state, part_status, trig_cmd};
use gpupm_uapi::tenant::counter_flags;
use zerocopy::IntoBytes;

use crate::scenario::{hex, one_gpc_partitions};

/// The confidential VM (partition 2).
pub const CC_VM: u32 = 2;
/// Its provisioned key.
pub const CC_KEY: [u8; 32] = [0x2c; 32];
/// A plain VM (partition 1) of tenant [`UID_PLAIN`].
pub const PLAIN_VM: u32 = 1;
/// Another tenant's plain VM (partition 3).
pub const OTHER_VM: u32 = 3;
/// Tenant of [`CC_VM`].
pub const UID_CC: u32 = 61502;
/// Tenant of [`PLAIN_VM`].
pub const UID_PLAIN: u32 = 61501;
/// Tenant of [`OTHER_VM`].
pub const UID_OTHER: u32 = 61503;
/// Partition slots in use.
pub const PARTS: std::ops::RangeInclusive<u32> = 1..=3;
/// Cycles per clock step (below the switch timeout, above the timeslices).
pub const STEP: u64 = 8192;

/// The small three-partition device both confidential scenarios run
/// ([`scenario`] here and [`crate::planes::scenario`]): topology, 1 GHz
/// clock, triggers and rings, in scenario-file syntax.
pub const DEVICE: &str = r#"switch_timeout_cycles = 200000
device_profile = "links"
[clock]
mhz = 1000
[topology]
sms_per_gpc = [2, 2, 2]
memory_slices = 3
l2_per_slice = 1
fb_per_slice = 1
ce_per_slice = 1
nvlinks = 2
pcie = true
[trigger]
period_cycles = 20000
threshold = 4000
[stream]
ring_records = 64
watermark = 32
"#;

/// Three partitions, one VM each with two contexts; VM [`CC_VM`] is
/// confidential and its contexts run the profile "cc", whose rates are
/// `cc_rate` times the plain VMs'. Periodic and threshold triggers.
pub fn scenario(cc_rate: f64) -> String {
    let rates = |k: f64| {
        format!(
            "{{ sm_cycles_active = {}, sm_inst_executed = {}, l2_read_req = {}, l2_hit = {}, fb_bytes = {}, pcie_rx_bytes = {} }}",
            0.9 * k, 0.6 * k, 0.3 * k, 0.2 * k, 0.4 * k, 0.1 * k
        )
    };
    let mut s = format!(
        r#"name = "daemon-cc"
seed = 23
{DEVICE}[[profile]]
name = "busy"
[[profile.phase]]
duration_cycles = 30000
rates = {}
[[profile]]
name = "cc"
[[profile.phase]]
duration_cycles = 30000
rates = {}
[[profile]]
name = "links"
[[profile.phase]]
duration_cycles = 50000
rates = {{ nvlink_rx_flits = 0.25, nvlink_tx_flits = 0.5 }}
"#,
        rates(1.0),
        rates(cc_rate)
    );
    one_gpc_partitions(&mut s, *PARTS.end());
    for vm in PARTS {
        s += &format!("[[vm]]\nid = {vm}\npartition = {vm}\n");
        if vm == CC_VM {
            s += &format!("confidential_key = \"{}\"\n", hex(&CC_KEY));
        }
        let profile = if vm == CC_VM { "cc" } else { "busy" };
        for _ in 0..2 {
            s += &format!("[[context]]\nvm = {vm}\nprofile = \"{profile}\"\n");
        }
    }
    s
}

/// [`scenario`] with the confidential VM marked `confidential = true` and
/// no key: its tenant establishes its session (`gpupm cc establish`).
pub fn session_scenario(cc_rate: f64) -> String {
    let keyed = format!("confidential_key = \"{}\"\n", hex(&CC_KEY));
    let s = scenario(cc_rate);
    assert!(s.contains(&keyed));
    s.replace(&keyed, "confidential = true\n")
}

/// The repository's vendor root key (the emulated factory's), as a file
/// only its owner may read (git keeps no file modes): in `dir`.
pub fn vendor_key_file(dir: &Path) -> PathBuf {
    let path = dir.join("vendor-root.key");
    let key = std::fs::read(crate::workspace_root().join("packaging/factory/vendor-root.key"))
        .expect("read packaging/factory/vendor-root.key");
    std::fs::write(&path, key).expect("write the vendor key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// Provisions a device identity in `path` unless one is there (the
/// factory of `gpupm-driver provision`, in process).
pub fn provision_identity(path: &Path) {
    if path.exists() {
        return;
    }
    let dir = path.parent().expect("the identity file has a directory");
    let vendor = vendor_key_file(dir);
    gpupm_driver::model::cc::identity::provision(&vendor, path, false, false)
        .expect("provision a device identity");
    std::fs::remove_file(vendor).expect("remove the vendor key copy");
}

/// A tenant's state directory (`XDG_STATE_HOME`) under `root`, owned by
/// `uid`, mode 0700.
pub fn tenant_state(root: &Path, uid: u32) -> PathBuf {
    let dir = root.join(format!("state-{uid}"));
    std::fs::create_dir_all(&dir).expect("state dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    nix::unistd::chown(&dir, Some(uid.into()), Some(uid.into())).expect("chown state dir");
    dir
}

/// The tenant's session file of [`CC_VM`] in its state dir `state` (as
/// `gpupm cc establish` writes it), read as root: (session, epoch, key of
/// that epoch).
pub fn session_of(state: &Path) -> (u64, u32, [u8; 32]) {
    let dir = state.join("gpupm").join("cc");
    let node_dir = std::fs::read_dir(&dir)
        .expect("the tenant's cc state dir")
        .next()
        .expect("one node directory")
        .expect("dir entry")
        .path();
    let text = std::fs::read_to_string(node_dir.join(format!("vm-{CC_VM}.json")))
        .expect("the session file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("session JSON");
    let epoch = u32::try_from(v["epoch"].as_u64().expect("epoch")).expect("u32 epoch");
    let key_hex = v["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["epoch"].as_u64() == Some(u64::from(epoch)))
        .expect("the current epoch's key")["key"]
        .as_str()
        .expect("key hex")
        .to_string();
    let mut key = [0u8; 32];
    for (b, pair) in key.iter_mut().zip(key_hex.as_bytes().chunks_exact(2)) {
        *b = u8::from_str_radix(std::str::from_utf8(pair).expect("hex"), 16).expect("hex");
    }
    (v["session"].as_u64().expect("session"), epoch, key)
}

/// Replaces the tenant's session file of [`CC_VM`] in `state` with one at
/// `epoch` holding `key` (what the tenant's own tool would have written
/// after a rekey the test made through raw requests); the file keeps its
/// owner and mode.
pub fn install_session_key(state: &Path, epoch: u32, key: &[u8; 32]) {
    let dir = state.join("gpupm").join("cc");
    let node_dir = std::fs::read_dir(&dir)
        .expect("the tenant's cc state dir")
        .next()
        .expect("one node directory")
        .expect("dir entry")
        .path();
    let path = node_dir.join(format!("vm-{CC_VM}.json"));
    let text = std::fs::read_to_string(&path).expect("the session file");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("session JSON");
    v["epoch"] = epoch.into();
    v["keys"]
        .as_array_mut()
        .expect("keys")
        .push(serde_json::json!({"epoch": epoch, "key": hex(key)}));
    std::fs::write(&path, v.to_string()).expect("rewrite the session file");
}

/// The daemon's `[[tenant]]` tables for the three tenants.
pub fn tenants() -> String {
    format!(
        "[[tenant]]\nvm = {PLAIN_VM}\nuid = {UID_PLAIN}\n[[tenant]]\nvm = {CC_VM}\nuid = {UID_CC}\n[[tenant]]\nvm = {OTHER_VM}\nuid = {UID_OTHER}\n"
    )
}

/// Writes `key` as 64 hex digits to `path`, owned by `uid` with `mode`.
pub fn key_file(path: &Path, key: &[u8; 32], uid: u32, mode: u32) -> PathBuf {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(path, format!("{hex}\n")).expect("write key file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod key");
    nix::unistd::chown(path, Some(uid.into()), Some(uid.into())).expect("chown key");
    path.to_path_buf()
}

/// Handshake states of [`PARTS`].
fn hs_states(dev: &DevNode) -> Vec<u32> {
    let offsets: Vec<u64> = PARTS.map(|p| r::part(p, r::PART_STATUS)).collect();
    dev.read_many(&offsets)
        .expect("PART_STATUS")
        .iter()
        .map(|&s| reg32(s) & part_status::STATE_MASK)
        .collect()
}

/// Whether every ring the daemon drains is empty.
fn rings_empty(dev: &DevNode) -> bool {
    let offsets: Vec<u64> = (0..=*PARTS.end())
        .flat_map(|p| {
            [
                r::part(p, r::PART_STREAM_HEAD),
                r::part(p, r::PART_STREAM_TAIL),
            ]
        })
        .collect();
    let v = dev.read_many(&offsets).expect("ring pointers");
    v.chunks_exact(2).all(|ht| ht[0] == ht[1])
}

/// Waits until the daemon has done everything it can without device time:
/// no partition is in a handshake state the host must act on, and every
/// ring is drained. Then device time moves only when the test says so,
/// and two runs driven alike see the same device timeline whatever the
/// daemon's wall-clock speed.
pub fn wait_host_done(dev: &DevNode, mut daemon_dead: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let states = hs_states(dev);
        let host_owes = states
            .iter()
            .any(|&s| !matches!(s, hs_state::IDLE | hs_state::TRIGGERED));
        if !host_owes && rings_empty(dev) {
            return;
        }
        assert!(!daemon_dead(), "gpupmd died");
        assert!(
            Instant::now() < deadline,
            "the daemon did not settle within 30 s: {states:?}"
        );
        std::thread::yield_now();
    }
}

/// Advances `steps` clock steps, each followed by the daemon settling and
/// by as many flush-ack waits as the handshakes need (each also settled).
pub fn drive(dev: &DevNode, steps: u32, mut daemon_dead: impl FnMut() -> bool) {
    for _ in 0..steps {
        dev.advance(STEP).expect("advance");
        settle(dev, &mut daemon_dead);
    }
}

/// The daemon settled, with every handshake finished (acks given device
/// time in fixed increments).
pub fn settle(dev: &DevNode, mut daemon_dead: impl FnMut() -> bool) {
    loop {
        wait_host_done(dev, &mut daemon_dead);
        if hs_states(dev).iter().all(|&s| s == hs_state::IDLE) {
            return;
        }
        dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))
            .expect("advance for flush acks");
    }
}

/// Flushes every partition into the blocks and settles.
pub fn flush_and_settle(dev: &DevNode, daemon_dead: impl FnMut() -> bool) {
    let mask = PARTS.fold(1u32, |m, p| m | 1 << p);
    dev.batch(&mut [
        write32(r::TRIG_TARGET, mask),
        write32(r::TRIG_CMD, trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER),
    ])
    .expect("flush");
    settle(dev, daemon_dead);
}

/// The readable registers of the documented register blocks (global,
/// partitions, CCUs, VMs, contexts; the rest of BAR0 is unmapped), found
/// once by batch reads that split where a batch hits a hole.
#[derive(Debug)]
pub struct RegisterMap(Vec<u64>);

impl RegisterMap {
    /// Finds every readable register.
    pub fn discover(dev: &DevNode) -> RegisterMap {
        let ranges = [
            (0, 0x600),
            (r::PART_BASE, r::part(r::MAX_PARTITION_SLOTS, 0)),
            (r::CCU_BASE, r::ccu(r::MAX_CCUS, 0)),
            (r::VM_BASE, r::vm(r::MAX_VMS, 0)),
            (r::CTX_BASE, r::ctx(r::MAX_CONTEXTS, 0)),
        ];
        let mut out = Vec::new();
        for (start, end) in ranges {
            let offsets: Vec<u64> = (start..end).step_by(4).collect();
            for chunk in offsets.chunks(MAX_BATCH_OPS) {
                readable_in(dev, chunk, &mut out);
            }
        }
        RegisterMap(out)
    }

    /// Every readable register as `offset=value;`.
    pub fn read(&self, dev: &DevNode) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in self.0.chunks(MAX_BATCH_OPS) {
            let mut ops: Vec<_> = chunk.iter().map(|&o| read32(o)).collect();
            dev.batch(&mut ops).expect("read registers");
            for op in &ops {
                out.extend_from_slice(format!("{:x}={};", op.offset, reg32(op.value)).as_bytes());
            }
        }
        out
    }

    /// The map without the registers at `skip`.
    pub fn without(mut self, skip: &[u64]) -> RegisterMap {
        self.0.retain(|o| !skip.contains(o));
        self
    }

    /// Number of readable registers.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no register is readable.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn readable_in(dev: &DevNode, offsets: &[u64], out: &mut Vec<u64>) {
    let mut ops: Vec<_> = offsets.iter().map(|&o| read32(o)).collect();
    if dev.batch(&mut ops).is_ok() {
        out.extend_from_slice(offsets);
    } else if offsets.len() > 1 {
        let (a, b) = offsets.split_at(offsets.len() / 2);
        readable_in(dev, a, out);
        readable_in(dev, b, out);
    }
}

/// The memory window's block slots and the rings of [`PARTS`] (and ring 0).
pub fn window(dev: &DevNode) -> Vec<u8> {
    let blocks = u64::from(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) * BLOCK_SLOT_SIZE;
    let mut out = vec![0u8; usize::try_from(blocks).expect("window fits")];
    dev.window(0, &mut out).expect("window read");
    for p in 0..=*PARTS.end() {
        let cap = dev
            .read32(r::part(p, r::PART_STREAM_CAP))
            .expect("PART_STREAM_CAP");
        let mut ring = vec![0u8; size(u64::from(cap) * layout::STREAM_SLOT_SIZE)];
        dev.window(layout::stream_slot_offset(p, 0), &mut ring)
            .expect("ring read");
        out.extend_from_slice(&ring);
    }
    out
}

/// What the admin reads through the tenant node: who it is, every VM's
/// contexts, and the counters of every VM, every context and the system.
pub fn admin_view(admin: &TenantClient) -> Vec<u8> {
    let mut out = Vec::new();
    let who = admin.whoami().expect("whoami");
    out.extend_from_slice(who.as_bytes());
    let mut read = |s: Scope| match admin.read_counters(s, &[]) {
        Ok(mut rc) => {
            if rc.flags & counter_flags::SEALED != 0 {
                mask_sealed(rc.sealed.as_mut_bytes());
            }
            out.extend_from_slice(rc.as_bytes());
        }
        Err(e) => out.extend_from_slice(format!("{s:?}: {e}").as_bytes()),
    };
    read(Scope::System);
    for vm in PARTS {
        read(Scope::Vm(vm));
        for c in admin.list_contexts(vm).expect("list contexts") {
            read(Scope::Ctx(c.ctx));
        }
    }
    out
}

/// Blanks what of a sealed slot (envelope, payload, tag) may differ between
/// two runs without saying anything about the workload: the ciphertext and
/// tag (their lengths stay), and the session id, which the device draws
/// from the OS at every start (public by design). A plain slot is left as
/// it is.
pub fn mask_sealed(slot: &mut [u8]) {
    let flags = u32::from_le_bytes(slot[4..8].try_into().expect("envelope flags"));
    if flags & envelope_flags::ENCRYPTED == 0 {
        return;
    }
    slot[12..16].fill(0); // session_lo
    slot[28..32].fill(0); // session_hi
    slot[32..].fill(0); // payload and tag
}

/// [`window`] with every sealed slot masked ([`mask_sealed`]).
pub fn masked_window(dev: &DevNode) -> Vec<u8> {
    let mut w = window(dev);
    let blocks =
        usize::try_from(u64::from(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) * BLOCK_SLOT_SIZE)
            .expect("fits");
    let (block_bytes, rings) = w.split_at_mut(blocks);
    for slot in block_bytes.chunks_exact_mut(size(BLOCK_SLOT_SIZE)) {
        mask_sealed(slot);
    }
    for slot in rings.chunks_exact_mut(size(layout::STREAM_SLOT_SIZE)) {
        mask_sealed(slot);
    }
    w
}

/// A byte size of the ABI as a `usize`.
fn size(n: u64) -> usize {
    usize::try_from(n).expect("sizes fit in usize")
}

/// Sum of all events.
pub fn total(values: &[u64; MAX_EVENTS]) -> u64 {
    values.iter().sum()
}
