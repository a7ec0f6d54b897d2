//! Prints `docs/registers.md`, the register reference, from the register
//! map (`gpupm_uapi::map`): every block with where it lies, then every
//! register with its offset, width, access and documentation, then the
//! memory window's regions:
//! `cargo run -p gpupm-uapi --example gen_registers_md > docs/registers.md`.
//! `uapi/tests/registers_md.rs` checks that the committed file matches.

use std::fmt::Write;

use gpupm_uapi::map::{BLOCKS, WINDOW};
use gpupm_uapi::regdef::{Block, Placement, Reg, RegSet, Width};

/// The document's text.
pub fn render() -> String {
    let mut s = String::from(
        "<!-- Generated from the register map (uapi/src/map.rs) by\n     \
         `cargo run -p gpupm-uapi --example gen_registers_md > docs/registers.md`; do not edit. -->\n\
         # Register reference\n\n\
         Every register of BAR0, block by block in address order, as the register map\n\
         declares it; the C header's `GPUPM_REG_<name>` has the same offset. The rules\n\
         that hold for every register (widths, halves, checked writes, errors) are in\n\
         [docs/abi.md §3](abi.md#3-registers). Offsets of a block at a fixed place are\n\
         absolute; offsets in an array of blocks are inside one instance, and the\n\
         header's macro computes the absolute offset.\n\n",
    );
    line(&mut s, "| block | where | header macro |");
    line(&mut s, "|---|---|---|");
    for block in BLOCKS {
        line(
            &mut s,
            &format!(
                "| [{0}](#{1}) | {2} | {3} |",
                block.name,
                anchor(block),
                place(block),
                macro_of(block)
            ),
        );
    }
    for block in BLOCKS {
        emit_block(&mut s, block);
    }
    line(&mut s, "\n## The memory window\n");
    line(
        &mut s,
        "Window offsets (from `GPUPM_MEM_WINDOW_OFFSET` on the node), in order:\n",
    );
    line(&mut s, "| region | first byte | span | spans | end |");
    line(&mut s, "|---|---|---|---|---|");
    for r in WINDOW {
        line(
            &mut s,
            &format!(
                "| {} | `{:#x}` | `{:#x}` | {} | `{:#x}` |",
                r.name,
                r.base,
                r.span,
                r.count,
                r.end()
            ),
        );
    }
    s
}

fn line(s: &mut String, text: &str) {
    writeln!(s, "{text}").expect("write to String");
}

/// The heading's anchor as GitHub and the docs' link check make it.
fn anchor(block: &Block) -> String {
    block.name.to_lowercase()
}

fn place(block: &Block) -> String {
    match block.placement {
        Placement::Fixed { start, end } => format!("`{start:#06x}..{end:#06x}`"),
        Placement::Array {
            base,
            stride,
            count,
        } => format!("{count} × `{stride:#x}` from `{base:#06x}`"),
    }
}

fn macro_of(block: &Block) -> String {
    match (block.placement, block.sets.first()) {
        (Placement::Fixed { .. }, _) => "—".to_string(),
        (Placement::Array { .. }, Some(set)) if set.base == 0 => {
            format!("`GPUPM_{}(i, j, reg)`", block.name)
        }
        (Placement::Array { .. }, _) => format!("`GPUPM_{}(i, reg)`", block.name),
    }
}

fn emit_block(s: &mut String, block: &Block) {
    line(s, &format!("\n## {}\n", block.name));
    line(
        s,
        &format!(
            "{} ({}; `gpupm_uapi::{}`)\n",
            one_paragraph(block.doc),
            place(block),
            block.module
        ),
    );
    if !block.regs.is_empty() {
        table(s, block.regs);
    }
    for set in block.sets {
        emit_set(s, set);
    }
}

fn emit_set(s: &mut String, set: &RegSet) {
    line(
        s,
        &format!(
            "\nRegister set `{}`: {} copies, `{:#x}` apart, the first at `{:#x}` in the block; offsets inside one copy.\n",
            set.name, set.count, set.stride, set.base
        ),
    );
    table(s, set.regs);
}

fn table(s: &mut String, regs: &[Reg]) {
    line(s, "| register | offset | width | access | what |");
    line(s, "|---|---|---|---|---|");
    for reg in regs {
        let width = match (reg.width, reg.words) {
            (Width::W64, _) => "64".to_string(),
            (Width::W32, 1) => "32".to_string(),
            (Width::W32, n) => format!("{n} × 32"),
        };
        line(
            s,
            &format!(
                "| `{}` | `{:#06x}` | {width} | {} | {} |",
                reg.name,
                reg.offset,
                reg.access.label(),
                one_paragraph(reg.doc).replace('|', "\\|")
            ),
        );
    }
}

/// A doc comment's lines as one paragraph, rustdoc links as code.
fn one_paragraph(doc: &str) -> String {
    let text: Vec<&str> = doc
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    text.join(" ")
        .replace("[`", "`")
        .replace("`]", "`")
        .replace("`crate::", "`")
}
