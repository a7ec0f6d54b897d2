//! The committed Python constants match this crate.

use gpupm_uapi_gen::py as gen_py;

#[test]
fn committed_python_constants_match_uapi() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/clients/gpupm_uapi.py"
    );
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == gen_py::render(),
        "{path} is stale: run `cargo run -p gpupm-uapi --example gen_py > tests/clients/gpupm_uapi.py`"
    );
}
