//! gpupm-client: what a program needs to talk to gpupm's nodes.
//!
//! - [`DevNode`] ([`devnode`]): the device node `card0` served by
//!   `gpupm-driver` — registers by `pread`/`pwrite`, atomic register
//!   batches, the memory window, the `GPUPM_IOC_*` ioctls and interrupt
//!   records ([`IntrReader`]). Root or the admin group only.
//! - [`TenantClient`] ([`tenant`]): the tenant node served by `gpupmd` —
//!   the `TENANT_IOC_*` ioctls and stream records, for any user the
//!   daemon maps to a VM.
//! - [`page`]: tenant counter pages — the page socket, read-only mappings
//!   and the sequence-lock reader, and [`CounterReader`], which reads
//!   through a page when the daemon offers one and through the tenant
//!   node otherwise.
//! - [`sampling`], [`ri`], [`ranges`]: sampling sessions (with buffer
//!   planning and CPI reconstruction), runtime-instrumentation sessions,
//!   marked ranges and call graphs through the tenant node.
//! - [`mirror`]: the driver's commit mirror — writing it (the driver) and
//!   reading it (the daemon's commit follower and drains).
//! - [`oob`]: the BMC's side of the out-of-band mailbox (`card0-oob`): the
//!   OOB reduction channel's commands, typed, under the sequence protocol.
//! - [`ops`]: register-op builders for batches.
//! - [`handshake`]: the context-switch handshake as one sequence over any
//!   [`RegisterBatch`] executor (the device node, or an in-process model).
//! - [`paths`]: the well-known paths and names.
//! - [`stepclock`]: what the owner of a step clock must do (partitions,
//!   handshake states, letting flush acks arrive, flushing).
//! - [`config`]: the daemon's configuration file (`gpupmd.toml`), as the
//!   daemon and the admin tools read it.
//! - [`health`]: the health thresholds `gpupm health`, gpupmd and the
//!   shipped alert rules share.
//! - [`instance`]: the one-instance lock of gpupmd and gpupm-driver.
//! - [`cpus`]: CPU lists, and pinning a thread to them.
//! - [`splitmix`]: the workspace's one 64-bit mixer (re-exported from
//!   `gpupm-splitmix`).
//! - [`sys`]: the ioctl system call, typed and raw.
//!
//! The crate's `unsafe` is in four small modules, each about one kind of
//! system call: [`sys`] (ioctls), [`shm`] (the one shared-memory mapping,
//! seen as atomic words: pages, the mirror and its waiter word),
//! `page::sys` (taking the descriptors a page reply carries) and
//! `mirror::sys` (opening the mirror's files relative to their directory,
//! the futex calls). Everything else is safe code over them.
//!
//! The ABI itself (numbers, layouts) is [`gpupm_uapi`]; this crate only
//! carries it to the nodes. A confidential VM's cryptography — the key
//! exchange's tenant side, opening sealed slots, rekey blobs, secret
//! files — is `gpupm-cc`; the node calls that carry its messages
//! (`cc_key_exchange`, `cc_finish`, `rekey`) are here. It links no async runtime and no FUSE library.
//!
//! ```no_run
//! use gpupm_client::{Scope, TenantClient, WhoamiExt};
//!
//! let node = TenantClient::open_default()?;
//! for vm in node.whoami()?.visible_vms() {
//!     let totals = node.read_counters(Scope::Vm(vm), &[])?;
//!     println!("VM {vm}: {} commits", totals.commit_seq);
//! }
//! # Ok::<(), gpupm_client::ClientError>(())
//! ```

pub mod config;
pub mod cpus;
pub mod devnode;
pub mod handshake;
pub mod health;
pub mod identity;
pub mod instance;
pub mod mirror;
pub mod oob;
pub mod ops;
pub mod page;
pub mod paths;
mod patience;
pub mod ranges;
pub mod ri;
pub mod sampling;
pub mod shm;
pub mod stepclock;
pub mod sys;
pub mod tenant;

pub use devnode::{DevError, DevNode, IntrReader};
pub use gpupm_splitmix as splitmix;
pub use handshake::RegisterBatch;
pub use page::{CounterReader, PageClient};
pub use tenant::{ClientError, CtxId, Scope, TenantClient, VmId, WhoamiExt};
