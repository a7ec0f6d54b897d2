//! Prints the header of the perf PMU module `gpupm_pmu.ko`:
//! `cargo run -p gpupm-uapi --example gen_kmod > kmod/gpupm_events.h`.
//! The text is [`gpupm_uapi_gen::kmod::render`]'s, which `uapi/tests/`
//! compares with the committed file.

fn main() {
    print!("{}", gpupm_uapi_gen::kmod::render());
}
