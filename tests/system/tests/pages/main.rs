//! The daemon's tenant pages with the real `gpupm-driver` and `gpupmd`:
//! who may have which page ([`access`]), pages equal to the ledger
//! ([`exact`]), and a page's life through context destruction, daemon
//! restarts and the pages directory's mount options ([`lifecycle`]), what
//! wakes the refresher ([`events`]) and how it follows the device's periodic
//! commits ([`follow`]).

mod access;
mod events;
mod exact;
mod fixture;
mod follow;
mod lifecycle;
mod raw;
