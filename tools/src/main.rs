//! gpupm command line (see README).

fn main() {}
