//! Final totals of retired contexts, persisted under `state_dir/retired/`.
//!
//! # Format
//! One file per context instance, `ctx-<id>-<created cycle>.bin`, holding
//! one [`RetiredFile`] (little-endian, 632 bytes): a header naming the
//! instance and the context's block slot exactly as the device published
//! it (plaintext, or ciphertext for a confidential VM — the daemon never
//! has keys).
//!
//! Invariants: a file exists only complete (written to a temporary name,
//! fsynced, renamed, directory fsynced); it is written before the block is
//! released on the device, so a context is either still on the device or
//! here, never lost; (id, created cycle) names one instance, so a restart
//! that persists the same instance again rewrites the same file and never
//! counts it twice. Temporary files left by a crash are removed on open.
//!
//! Each file records the tenant mapping its VM had when it was persisted
//! ([`RetiredFile::tenancy`], [`tenancy_of`]): a VM later mapped to other
//! tenants does not show them the previous tenants' history (the admin
//! still sees it). Files of builds before the field hold 0 there and stay
//! visible to the VM's tenants of the day.
//! The retention policy ([`super::retention`]) removes files of the oldest
//! instances (unlink, then fsync of the directory); they stay removed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use gpupm_uapi::layout::{Block, BlockSlot};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Magic of a retired-context file: "gRET".
pub const RETIRED_MAGIC: u32 = u32::from_le_bytes(*b"gRET");
/// Format version.
pub const RETIRED_VERSION: u32 = 1;
const TMP_PREFIX: &str = ".tmp-";

/// One persisted context instance.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RetiredFile {
    /// [`RETIRED_MAGIC`].
    pub magic: u32,
    /// [`RETIRED_VERSION`].
    pub version: u32,
    /// Context id.
    pub ctx: u32,
    /// Owning VM.
    pub vm: u32,
    /// `CTX_CREATED_CYCLE` of the instance.
    pub created_cycle: u64,
    /// Device cycle when the daemon persisted it.
    pub retired_cycle: u64,
    /// Bits in [`retired_flags`].
    pub flags: u32,
    /// The VM's tenant mapping when the daemon persisted it
    /// ([`tenancy_of`]; 0: not recorded, a file of an earlier build).
    pub tenancy: u32,
    /// The context's block slot as the device published it.
    pub slot: BlockSlot,
}
const _: () = assert!(core::mem::size_of::<RetiredFile>() == 632);

/// Bits of [`RetiredFile::flags`].
pub mod retired_flags {
    /// The slot is ciphertext (confidential VM).
    pub const SEALED: u32 = 1 << 0;
}

impl RetiredFile {
    /// Whether the slot is ciphertext.
    pub fn sealed(&self) -> bool {
        self.flags & retired_flags::SEALED != 0
    }

    /// The plaintext block, if the slot holds one.
    pub fn block(&self) -> Option<Block> {
        plain_block(&self.slot)
    }
}

/// The tag of VM `vm`'s tenant mapping in `policy`: a hash of the uids
/// and gids the `[[tenant]]` entries naming `vm` admit, in a canonical
/// order, never 0. Mapping the VM to other users (or to more or fewer)
/// changes it; reordering the file does not.
pub fn tenancy_of(policy: &gpupm_client::config::TenantPolicy, vm: u32) -> u32 {
    let mut rules: Vec<(u32, u32)> = policy
        .tenants
        .iter()
        .filter(|t| t.vm == vm)
        .map(|t| (t.uid.map_or(u32::MAX, |u| u), t.gid.map_or(u32::MAX, |g| g)))
        .collect();
    rules.sort_unstable();
    rules.dedup();
    // FNV-1a: stable across builds and runs, unlike the std hasher.
    let mut h: u32 = 0x811c_9dc5;
    for byte in rules
        .iter()
        .flat_map(|&(u, g)| u.to_le_bytes().into_iter().chain(g.to_le_bytes()))
        .chain(vm.to_le_bytes())
    {
        h ^= u32::from(byte);
        h = h.wrapping_mul(0x0100_0193);
    }
    h.max(1)
}

/// The plaintext block of a slot (`None` when encrypted, empty or corrupt).
pub fn plain_block(slot: &BlockSlot) -> Option<Block> {
    slot.plain_block()
}

/// Why persisting failed.
#[derive(Debug, thiserror::Error)]
pub enum RetiredError {
    /// A file-system operation failed.
    #[error("{op} {path} failed")]
    Io {
        /// What.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// The directory of retired contexts.
#[derive(Debug)]
pub struct RetiredStore {
    dir: PathBuf,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RetiredError + 'a {
    move |source| RetiredError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl RetiredStore {
    /// Opens (creating) `state_dir/retired` and removes leftover temporaries.
    pub fn open(state_dir: &Path) -> Result<RetiredStore, RetiredError> {
        let dir = state_dir.join("retired");
        fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
        for entry in fs::read_dir(&dir).map_err(io_err("listing", &dir))? {
            let entry = entry.map_err(io_err("listing", &dir))?;
            if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_err("removing", &path))?;
            }
        }
        Ok(RetiredStore { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, ctx: u32, created_cycle: u64) -> PathBuf {
        self.dir.join(format!("ctx-{ctx}-{created_cycle}.bin"))
    }

    /// Whether the instance is persisted.
    pub fn contains(&self, ctx: u32, created_cycle: u64) -> bool {
        self.path_of(ctx, created_cycle).exists()
    }

    /// Persists `rec` atomically and durably.
    pub fn persist(&self, rec: &RetiredFile) -> Result<(), RetiredError> {
        let path = self.path_of(rec.ctx, rec.created_cycle);
        let tmp = self
            .dir
            .join(format!("{TMP_PREFIX}ctx-{}-{}", rec.ctx, rec.created_cycle));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io_err("creating", &tmp))?;
        f.write_all(rec.as_bytes())
            .map_err(io_err("writing", &tmp))?;
        f.sync_all().map_err(io_err("syncing", &tmp))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(io_err("renaming", &tmp))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("syncing", &self.dir))?;
        Ok(())
    }

    /// Removes the files of `instances` durably (unlink, then one fsync of
    /// the directory), for the retention policy. An already missing file
    /// is not an error; after a failure the others are still removed and
    /// the first error is returned.
    pub fn remove(&self, instances: &[(u32, u64)]) -> Result<(), RetiredError> {
        let mut first_err = None;
        for &(ctx, created_cycle) in instances {
            let path = self.path_of(ctx, created_cycle);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    first_err.get_or_insert_with(|| io_err("removing", &path)(e));
                }
            }
        }
        if let Err(e) = File::open(&self.dir).and_then(|d| d.sync_all()) {
            first_err.get_or_insert_with(|| io_err("syncing", &self.dir)(e));
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Reads one instance (`None` if absent or not a valid file).
    pub fn load(&self, ctx: u32, created_cycle: u64) -> Option<RetiredFile> {
        read_file(&self.path_of(ctx, created_cycle))
    }

    /// Every valid persisted instance; invalid files are reported by name.
    pub fn load_all(&self) -> Result<(Vec<RetiredFile>, Vec<PathBuf>), RetiredError> {
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io_err("listing", &self.dir))? {
            let path = entry.map_err(io_err("listing", &self.dir))?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !name.starts_with("ctx-") {
                continue;
            }
            match read_file(&path) {
                Some(rec) if self.path_of(rec.ctx, rec.created_cycle) == path => good.push(rec),
                _ => bad.push(path),
            }
        }
        good.sort_by_key(|r| (r.ctx, r.created_cycle));
        Ok((good, bad))
    }
}

fn read_file(path: &Path) -> Option<RetiredFile> {
    let bytes = fs::read(path).ok()?;
    let rec = RetiredFile::read_from_bytes(&bytes).ok()?;
    (rec.magic == RETIRED_MAGIC && rec.version == RETIRED_VERSION).then_some(rec)
}

#[cfg(test)]
mod tests {
    use zerocopy::FromZeros;

    use super::*;

    #[test]
    fn persisted_instances_round_trip_and_temporaries_are_swept() {
        let dir = std::env::temp_dir().join(format!("gpupmd-retired-{}", std::process::id()));
        let store = RetiredStore::open(&dir).unwrap();
        fs::write(store.dir().join(".tmp-ctx-1-2"), b"partial").unwrap();
        fs::write(store.dir().join("ctx-9-9.bin"), b"garbage").unwrap();
        let mut rec = RetiredFile::new_zeroed();
        rec.magic = RETIRED_MAGIC;
        rec.version = RETIRED_VERSION;
        rec.ctx = 7;
        rec.vm = 2;
        rec.created_cycle = 1234;
        store.persist(&rec).unwrap();
        store.persist(&rec).unwrap();
        let store = RetiredStore::open(&dir).unwrap();
        assert!(!store.dir().join(".tmp-ctx-1-2").exists());
        let (good, bad) = store.load_all().unwrap();
        assert_eq!(good, vec![rec]);
        assert_eq!(bad.len(), 1);
        assert!(store.contains(7, 1234));
        store.remove(&[(7, 1234), (7, 99)]).unwrap();
        assert!(!store.contains(7, 1234));
        assert_eq!(store.load_all().unwrap().0, vec![]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_vms_tenancy_changes_with_its_tenants_only() {
        use gpupm_client::config::{TenantMap, TenantPolicy};
        let map = |vm, uid, gid| TenantMap { vm, uid, gid };
        let policy = |tenants| TenantPolicy {
            admin_gid: None,
            tenants,
        };
        let a = policy(vec![map(1, Some(10), None), map(2, Some(20), None)]);
        let reordered = policy(vec![map(2, Some(20), None), map(1, Some(10), None)]);
        let other_vm_changed = policy(vec![map(1, Some(10), None), map(2, Some(21), None)]);
        let reassigned = policy(vec![map(1, Some(11), None), map(2, Some(20), None)]);
        let by_group = policy(vec![map(1, None, Some(10)), map(2, Some(20), None)]);
        assert_eq!(tenancy_of(&a, 1), tenancy_of(&reordered, 1));
        assert_eq!(tenancy_of(&a, 1), tenancy_of(&other_vm_changed, 1));
        assert_ne!(tenancy_of(&a, 1), tenancy_of(&reassigned, 1));
        assert_ne!(tenancy_of(&a, 1), tenancy_of(&by_group, 1));
        assert_ne!(tenancy_of(&a, 1), tenancy_of(&a, 2));
        assert_ne!(tenancy_of(&policy(vec![]), 3), 0);
    }
}
