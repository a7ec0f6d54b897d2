//! A typed client of the tenant node (served by `gpupmd`), for the `gpupm`
//! tool, tests and anyone writing Rust against the ABI of
//! [`gpupm_uapi::tenant`].
//!
//! ```no_run
//! use gpupm_client::tenant::{Scope, TenantClient, WhoamiExt};
//!
//! let node = TenantClient::open_default()?;
//! for vm in node.whoami()?.visible_vms() {
//!     let totals = node.read_counters(Scope::Vm(vm), &[])?;
//!     println!("VM {vm}: {} commits", totals.commit_seq);
//! }
//! # Ok::<(), gpupm_client::ClientError>(())
//! ```
//!
//! Any listed context instance — including retired ones whose id now
//! names a newer context — is read by its (id, created cycle):
//!
//! ```no_run
//! # use gpupm_client::TenantClient;
//! # let node = TenantClient::open_default()?;
//! for c in node.list_contexts(1)? {
//!     let t = node.read_instance(c.ctx, c.created_cycle, &[])?;
//!     println!("{}@{}: {} commits", c.ctx, c.created_cycle, t.commit_seq);
//! }
//! # Ok::<(), gpupm_client::ClientError>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::tenant::{
    instance_flags, scope, CtxEntry, EventInfo, KeyState, ListContexts, OpenStream, ReadCounters,
    ReadInstance, ReadInstanceRates, ReadRates, Rekey, TenantDelta, Whoami, RATE_SAMPLES,
    TENANT_IOC_EVENT_INFO, TENANT_IOC_KEY_STATE, TENANT_IOC_LIST_CONTEXTS, TENANT_IOC_OPEN_STREAM,
    TENANT_IOC_READ_COUNTERS, TENANT_IOC_READ_INSTANCE, TENANT_IOC_READ_INSTANCE_RATES,
    TENANT_IOC_READ_RATES, TENANT_IOC_REKEY, TENANT_IOC_WHOAMI, TENANT_STRUCT_VERSION,
};
use nix::errno::Errno;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::paths::DEFAULT_TENANT_NODE;
use crate::sys;

/// A VM id (1..MAX_VMS).
pub type VmId = u32;
/// A context id (1..MAX_CONTEXTS); reused after release, so a context
/// instance is named by (id, created cycle).
pub type CtxId = u32;

/// Which counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The whole device (RC0, the system block): admin only.
    System,
    /// One VM: every context it ever ran.
    Vm(VmId),
    /// One context id: its newest instance (any instance is read by
    /// (id, created cycle) with [`TenantClient::read_instance`]).
    Ctx(CtxId),
}

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node could not be opened.
    #[error("cannot open the tenant node {path}")]
    Open {
        /// Node path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An ioctl failed.
    #[error("{op} failed")]
    Ioctl {
        /// Which request.
        op: &'static str,
        /// The errno the node answered.
        #[source]
        source: Errno,
    },
    /// A `read()` of stream records failed.
    #[error("reading stream records failed")]
    Read(#[source] io::Error),
    /// A `read()` returned a partial record.
    #[error("the node returned {0} bytes, not whole records")]
    PartialRecord(usize),
    /// Too many event ids for one request.
    #[error("at most {MAX_EVENTS} event ids per request, not {0}")]
    TooManyEvents(usize),
}

impl ClientError {
    /// The errno behind the failure, if it was a system call's.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            ClientError::Open { source, .. } | ClientError::Read(source) => {
                source.raw_os_error().map(Errno::from_raw)
            }
            ClientError::Ioctl { source, .. } => Some(*source),
            ClientError::PartialRecord(_) | ClientError::TooManyEvents(_) => None,
        }
    }
}

/// `(kind, id)` of a scope as the ABI encodes it.
pub fn scope_code(s: Scope) -> (u32, u32) {
    match s {
        Scope::System => (scope::SYSTEM, 0),
        Scope::Vm(vm) => (scope::VM, vm),
        Scope::Ctx(ctx) => (scope::CONTEXT, ctx),
    }
}

/// Extension of [`Whoami`].
pub trait WhoamiExt {
    /// The valid entries of `vms`.
    fn visible_vms(&self) -> Vec<u32>;
}

impl WhoamiExt for Whoami {
    fn visible_vms(&self) -> Vec<u32> {
        let n = usize::try_from(self.n_vms).unwrap_or(0).min(self.vms.len());
        self.vms[..n].to_vec()
    }
}

/// An open handle on the tenant node.
#[derive(Debug)]
pub struct TenantClient {
    file: File,
}

impl TenantClient {
    /// Opens the node at `path` (blocking reads).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ClientError> {
        Self::open_with(path.as_ref(), 0)
    }

    /// Opens the node at `path` with `O_NONBLOCK` (reads fail with EAGAIN).
    pub fn open_nonblocking(path: impl AsRef<Path>) -> Result<Self, ClientError> {
        Self::open_with(path.as_ref(), libc::O_NONBLOCK)
    }

    /// Opens the node of the default directory.
    pub fn open_default() -> Result<Self, ClientError> {
        Self::open(DEFAULT_TENANT_NODE)
    }

    fn open_with(path: &Path, flags: i32) -> Result<Self, ClientError> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(flags | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| ClientError::Open {
                path: path.to_owned(),
                source,
            })?;
        Ok(TenantClient { file })
    }

    /// Issues `cmd` with `arg` (any struct of the ABI); the answer is in `arg`.
    pub fn call<T: IntoBytes + FromBytes + KnownLayout + Immutable>(
        &self,
        op: &'static str,
        cmd: u32,
        arg: &mut T,
    ) -> Result<(), ClientError> {
        sys::call(self.file.as_fd(), cmd, arg)
            .map(|_| ())
            .map_err(|source| ClientError::Ioctl { op, source })
    }

    #[cfg(feature = "test-utils")]
    /// Issues any command with raw argument bytes (see [`sys::raw`]).
    pub fn raw_ioctl(&self, cmd: u32, buf: &mut [u8]) -> Result<i32, Errno> {
        sys::raw(self.file.as_fd(), cmd, buf)
    }

    /// What the caller may see.
    pub fn whoami(&self) -> Result<Whoami, ClientError> {
        let mut arg = Whoami::new_zeroed();
        arg.version = TENANT_STRUCT_VERSION;
        self.call("TENANT_IOC_WHOAMI", TENANT_IOC_WHOAMI, &mut arg)?;
        Ok(arg)
    }

    /// Every context of `vm` (all pages).
    pub fn list_contexts(&self, vm: u32) -> Result<Vec<CtxEntry>, ClientError> {
        let mut out = Vec::new();
        let mut arg = Box::new(ListContexts::new_zeroed());
        loop {
            arg.version = TENANT_STRUCT_VERSION;
            arg.vm = vm;
            arg.offset = u32::try_from(out.len()).unwrap_or(u32::MAX);
            self.call(
                "TENANT_IOC_LIST_CONTEXTS",
                TENANT_IOC_LIST_CONTEXTS,
                &mut *arg,
            )?;
            let count = usize::try_from(arg.count).unwrap_or(0).min(arg.ctxs.len());
            out.extend_from_slice(&arg.ctxs[..count]);
            if count == 0 || out.len() >= usize::try_from(arg.total).unwrap_or(0) {
                return Ok(out);
            }
        }
    }

    /// Cumulative totals of `scope`: every event with `events` empty, else
    /// `values[i]` answers `events[i]`.
    pub fn read_counters(
        &self,
        s: Scope,
        events: &[u16],
    ) -> Result<Box<ReadCounters>, ClientError> {
        if events.len() > MAX_EVENTS {
            return Err(ClientError::TooManyEvents(events.len()));
        }
        let mut arg = Box::new(ReadCounters::new_zeroed());
        let (kind, id) = scope_code(s);
        arg.version = TENANT_STRUCT_VERSION;
        arg.scope = kind;
        arg.id = id;
        arg.n_events = u32::try_from(events.len()).unwrap_or(u32::MAX);
        arg.events[..events.len()].copy_from_slice(events);
        self.call(
            "TENANT_IOC_READ_COUNTERS",
            TENANT_IOC_READ_COUNTERS,
            &mut *arg,
        )?;
        Ok(arg)
    }

    /// Cumulative totals of the context instance (`ctx`, `created_cycle`)
    /// — active, destroyed or retired — as [`Self::read_counters`] answers
    /// them for a scope (ABI 1.2; an older daemon answers ENOTTY).
    pub fn read_instance(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        events: &[u16],
    ) -> Result<Box<ReadInstance>, ClientError> {
        self.instance_call(ctx, created_cycle, 0, events)
    }

    /// Cumulative totals of the newest instance of `ctx`, with its created
    /// cycle in the answer (so that later reads can name that instance).
    pub fn read_latest_instance(
        &self,
        ctx: CtxId,
        events: &[u16],
    ) -> Result<Box<ReadInstance>, ClientError> {
        self.instance_call(ctx, 0, instance_flags::LATEST, events)
    }

    fn instance_call(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        flags: u32,
        events: &[u16],
    ) -> Result<Box<ReadInstance>, ClientError> {
        if events.len() > MAX_EVENTS {
            return Err(ClientError::TooManyEvents(events.len()));
        }
        let mut arg = Box::new(ReadInstance::new_zeroed());
        arg.version = TENANT_STRUCT_VERSION;
        arg.scope = scope::CONTEXT;
        arg.id = ctx;
        arg.flags = flags;
        arg.created_cycle = created_cycle;
        arg.n_events = u32::try_from(events.len()).unwrap_or(u32::MAX);
        arg.events[..events.len()].copy_from_slice(events);
        self.call(
            "TENANT_IOC_READ_INSTANCE",
            TENANT_IOC_READ_INSTANCE,
            &mut *arg,
        )?;
        Ok(arg)
    }

    /// Up to `max` (1..=16) most recent rate samples of the context
    /// instance (`ctx`, `created_cycle`).
    pub fn read_instance_rates(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        max: u32,
    ) -> Result<Box<ReadInstanceRates>, ClientError> {
        let mut arg = Box::new(ReadInstanceRates::new_zeroed());
        arg.version = TENANT_STRUCT_VERSION;
        arg.scope = scope::CONTEXT;
        arg.id = ctx;
        arg.created_cycle = created_cycle;
        arg.max = max.min(u32::try_from(RATE_SAMPLES).unwrap_or(u32::MAX));
        self.call(
            "TENANT_IOC_READ_INSTANCE_RATES",
            TENANT_IOC_READ_INSTANCE_RATES,
            &mut *arg,
        )?;
        Ok(arg)
    }

    /// Up to `max` (1..=16) most recent rate samples of `scope`.
    pub fn read_rates(&self, s: Scope, max: u32) -> Result<Box<ReadRates>, ClientError> {
        let mut arg = Box::new(ReadRates::new_zeroed());
        let (kind, id) = scope_code(s);
        arg.version = TENANT_STRUCT_VERSION;
        arg.scope = kind;
        arg.id = id;
        arg.max = max.min(u32::try_from(RATE_SAMPLES).unwrap_or(u32::MAX));
        self.call("TENANT_IOC_READ_RATES", TENANT_IOC_READ_RATES, &mut *arg)?;
        Ok(arg)
    }

    /// Turns this handle into a stream session of `scope`.
    pub fn open_stream(&self, s: Scope) -> Result<(), ClientError> {
        let (kind, id) = scope_code(s);
        let mut arg = OpenStream {
            version: TENANT_STRUCT_VERSION,
            scope: kind,
            id,
            flags: 0,
        };
        self.call("TENANT_IOC_OPEN_STREAM", TENANT_IOC_OPEN_STREAM, &mut arg)
    }

    /// A VM's current key epoch and session (ABI 1.5): what a rekey blob
    /// is sealed for.
    pub fn key_state(&self, vm: VmId) -> Result<KeyState, ClientError> {
        let mut arg = KeyState {
            version: TENANT_STRUCT_VERSION,
            vm,
            ..KeyState::default()
        };
        self.call("TENANT_IOC_KEY_STATE", TENANT_IOC_KEY_STATE, &mut arg)?;
        Ok(arg)
    }

    /// Replaces confidential VM `vm`'s key (ABI 1.5) with the one `words`
    /// carry sealed under the current session key (the 14 staging words in
    /// register order; `docs/confidential.md`).
    pub fn rekey(
        &self,
        vm: VmId,
        words: &[u32; crate::ops::REKEY_WORDS],
    ) -> Result<(), ClientError> {
        let mut arg = Rekey {
            version: TENANT_STRUCT_VERSION,
            vm,
            ..Rekey::default()
        };
        let (nonce, rest) = words.split_at(arg.nonce.len());
        let (sealed_key, tag) = rest.split_at(arg.sealed_key.len());
        arg.nonce.copy_from_slice(nonce);
        arg.sealed_key.copy_from_slice(sealed_key);
        arg.tag.copy_from_slice(tag);
        self.call("TENANT_IOC_REKEY", TENANT_IOC_REKEY, &mut arg)
    }

    /// Sends a confidential VM's KEY_EXCHANGE (ABI 1.11) through the daemon
    /// to the device; the device's half comes back in `msg`. See
    /// `gpupm_cc::Requester`.
    pub fn cc_key_exchange(
        &self,
        msg: &mut gpupm_uapi::cc::KeyExchange,
    ) -> Result<(), ClientError> {
        self.call(
            "TENANT_IOC_CC_KEY_EXCHANGE",
            gpupm_uapi::tenant::TENANT_IOC_CC_KEY_EXCHANGE,
            msg,
        )
    }

    /// Sends a confidential VM's FINISH (ABI 1.11) through the daemon.
    pub fn cc_finish(&self, msg: &mut gpupm_uapi::cc::Finish) -> Result<(), ClientError> {
        self.call(
            "TENANT_IOC_CC_FINISH",
            gpupm_uapi::tenant::TENANT_IOC_CC_FINISH,
            msg,
        )
    }

    /// The catalogue entry of event `id`.
    pub fn event_info(&self, id: u32) -> Result<EventInfo, ClientError> {
        let mut arg = EventInfo::new_zeroed();
        arg.version = TENANT_STRUCT_VERSION;
        arg.id = id;
        self.call("TENANT_IOC_EVENT_INFO", TENANT_IOC_EVENT_INFO, &mut arg)?;
        Ok(arg)
    }

    /// Up to `max` stream records (at least one; blocks on a blocking
    /// handle until one is queued). Empty at the end of the stream.
    pub fn read_deltas(&self, max: usize) -> Result<Vec<TenantDelta>, ClientError> {
        let mut buf = vec![0u8; max.max(1) * size_of::<TenantDelta>()];
        let n = (&self.file).read(&mut buf).map_err(ClientError::Read)?;
        let bytes = buf.get(..n).unwrap_or_default();
        let records =
            <[TenantDelta]>::ref_from_bytes(bytes).map_err(|_| ClientError::PartialRecord(n))?;
        Ok(records.to_vec())
    }

    /// One stream record; `None` at the end of the stream.
    pub fn read_delta(&self) -> Result<Option<TenantDelta>, ClientError> {
        Ok(self.read_deltas(1)?.into_iter().next())
    }
}

impl TenantClient {
    /// The node's open file (reads of session records).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

impl AsFd for TenantClient {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}
