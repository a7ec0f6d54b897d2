//! Prints the register reference:
//! `cargo run -p gpupm-uapi --example gen_registers_md > docs/registers.md`.
//! The text is [`gpupm_uapi_gen::registers_md::render`]'s, which
//! `uapi/tests/registers_md.rs` compares with the committed file.

fn main() {
    print!("{}", gpupm_uapi_gen::registers_md::render());
}
