//! The tenant node, mounted for real on a temp dir over an in-process
//! fixture view, called by real unprivileged users (forked children that
//! drop to their credentials): isolation and the errno of every bad input
//! ([`access`]), stream sessions ([`stream`]), sampling sessions ([`sampling`]), fuzzed ioctls ([`fuzz`]),
//! the descriptor the service manager passes ([`fdstore`]) and the
//! `[limits]` bounds and their errnos ([`bounds`]).

mod access;
mod bounds;
mod fdstore;
mod fixture;
mod fuzz;
mod sampling;
mod stream;
