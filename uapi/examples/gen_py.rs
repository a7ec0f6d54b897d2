//! Prints the Python constants module of the device-node ABI:
//! `cargo run -p gpupm-uapi --example gen_py > tests/clients/gpupm_uapi.py`.
//! The text is [`gpupm_uapi_gen::py::render`]'s, which `uapi/tests/`
//! compares with the committed file.

fn main() {
    print!("{}", gpupm_uapi_gen::py::render());
}
