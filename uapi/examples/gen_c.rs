//! Prints the C header of the gpupm ABI:
//! `cargo run -p gpupm-uapi --example gen_c > include/gpupm/gpupm_uapi.h`.
//! The text is [`gpupm_uapi_gen::c::render`]'s, which `uapi/tests/`
//! compares with the committed file.

fn main() {
    print!("{}", gpupm_uapi_gen::c::render());
}
