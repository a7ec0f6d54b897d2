//! The tenant node, mounted for real on a temp dir over an in-process
//! fixture view, called by real unprivileged users (forked children that
//! drop to their credentials): isolation and the errno of every bad input
//! ([`access`]), stream sessions ([`stream`]), fuzzed ioctls ([`fuzz`]),
//! and the descriptor the service manager passes ([`fdstore`]).

mod access;
mod fdstore;
mod fixture;
mod fuzz;
mod stream;
