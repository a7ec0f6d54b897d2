//! `gpupm` command line (placeholder until the tools issue lands).

fn main() {}
