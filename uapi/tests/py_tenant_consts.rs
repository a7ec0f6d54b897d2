//! The committed Python tenant-ABI module matches this crate.

use gpupm_uapi_gen::py_tenant as gen_py_tenant;

#[test]
fn committed_python_tenant_module_matches_uapi() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/python/gpupm_tenant.py"
    );
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == gen_py_tenant::render(),
        "{path} is stale: run `cargo run -p gpupm-uapi --example gen_py_tenant > examples/python/gpupm_tenant.py`"
    );
}
