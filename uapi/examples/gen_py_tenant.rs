//! Prints the Python constants module of the tenant-node ABI:
//! `cargo run -p gpupm-uapi --example gen_py_tenant > examples/python/gpupm_tenant.py`.
//! The text is [`gpupm_uapi_gen::py_tenant::render`]'s, which `uapi/tests/`
//! compares with the committed file.

fn main() {
    print!("{}", gpupm_uapi_gen::py_tenant::render());
}
