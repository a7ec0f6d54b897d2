//! The committed register reference matches the register map.

use gpupm_uapi_gen::registers_md;

#[test]
fn committed_register_reference_matches_the_map() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/registers.md");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == registers_md::render(),
        "{path} is stale: run `cargo run -p gpupm-uapi --example gen_registers_md > docs/registers.md`"
    );
}
