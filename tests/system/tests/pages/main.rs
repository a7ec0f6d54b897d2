//! The daemon's tenant pages with the real `gpupm-driver` and `gpupmd`:
//! who may have which page ([`access`]), pages equal to the ledger
//! ([`exact`]), and a page's life through context destruction, daemon
//! restarts and the pages directory's mount options ([`lifecycle`]).

mod access;
mod exact;
mod fixture;
mod lifecycle;
mod raw;
