//! Attacks on the isolation and the bounds, each run as real
//! unprivileged uids against the real `gpupm-driver` and `gpupmd`: what a
//! tenant can make the daemon hold, and what it can learn of another
//! tenant. docs/isolation.md states every bound these tests hold the
//! daemon to.
//!
//! * `exhaust` — handles and sessions until refused: memory within the
//!   uid's budget, another tenant's p99 and the handshakes unchanged;
//! * `pageflood` — 1,100 page-socket connections from 9 uids: the admin
//!   and the other tenants still served;
//! * `parked` — 5,000 blocked reads on one handle: another tenant's p99
//!   unchanged, the reader still killable;
//! * `cotenant` — a tenant's answers byte-identical whether or not its
//!   co-tenant holds everything it can; per-VM shares of registers and
//!   RI blocks;
//! * `reassign` — a VM given to another user shows it none of the
//!   previous tenant's retired contexts.
mod cotenant;
mod exhaust;
mod fixture;
mod pageflood;
mod parked;
mod reassign;
