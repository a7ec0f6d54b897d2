//! A small seeded generator (splitmix64) for the tests that pick random
//! points or sizes: a failing run replays from its seed.

pub use gpupm_client::splitmix::SplitMix64 as Rng;
