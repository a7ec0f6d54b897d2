//! Checks and resolves the `[[program]]` tables.

use std::ops::Range;

use toml::Spanned;

use super::error::SpanError;
use super::program::{BlockSpec, DataSpec, Exit, KernelSpec, ProgramSpec, CALL_DEPTH};
use super::raw::{RawBlock, RawData, RawKernel, RawProgram};

/// Most trips of a loop.
const MAX_TRIPS: u32 = 1 << 24;

/// Resolves every `[[program]]`, in file order.
pub(super) fn programs(raw: &[Spanned<RawProgram>]) -> Result<Vec<ProgramSpec>, SpanError> {
    let mut out: Vec<ProgramSpec> = Vec::with_capacity(raw.len());
    for p in raw {
        let name = p.get_ref().name.get_ref();
        if out.iter().any(|q| &q.name == name) {
            return Err(SpanError::new(
                p.get_ref().name.span(),
                format!("program \"{name}\" is defined twice"),
            ));
        }
        out.push(program(p)?);
    }
    Ok(out)
}

/// Index of the program `name` names.
pub(super) fn lookup(programs: &[ProgramSpec], name: &Spanned<String>) -> Result<usize, SpanError> {
    programs
        .iter()
        .position(|p| &p.name == name.get_ref())
        .ok_or_else(|| {
            SpanError::new(
                name.span(),
                format!("unknown program \"{}\"", name.get_ref()),
            )
        })
}

fn program(raw: &Spanned<RawProgram>) -> Result<ProgramSpec, SpanError> {
    let p = raw.get_ref();
    if p.kernel.is_empty() {
        return Err(SpanError::new(
            p.name.span(),
            format!(
                "program \"{}\" has no kernel; add a [[program.kernel]]",
                p.name.get_ref()
            ),
        ));
    }
    let kernel_names: Vec<&String> = p
        .kernel
        .iter()
        .map(|k| k.get_ref().name.get_ref())
        .collect();
    for (i, k) in p.kernel.iter().enumerate() {
        if kernel_names[..i].contains(&k.get_ref().name.get_ref()) {
            return Err(SpanError::new(
                k.get_ref().name.span(),
                format!("kernel \"{}\" is defined twice", k.get_ref().name.get_ref()),
            ));
        }
    }
    let entry = match &p.entry {
        Some(e) => index_of(&kernel_names, e, "kernel")?,
        None => 0,
    };
    let kernels = p
        .kernel
        .iter()
        .map(|k| kernel(k, &kernel_names))
        .collect::<Result<Vec<_>, _>>()?;
    let spec = ProgramSpec {
        name: p.name.get_ref().clone(),
        entry,
        kernels,
    };
    check_call_depth(&spec, p)?;
    Ok(spec)
}

fn kernel(raw: &Spanned<RawKernel>, kernels: &[&String]) -> Result<KernelSpec, SpanError> {
    let k = raw.get_ref();
    if k.block.is_empty() {
        return Err(SpanError::new(
            k.name.span(),
            format!(
                "kernel \"{}\" has no block; add a [[program.kernel.block]]",
                k.name.get_ref()
            ),
        ));
    }
    let names: Vec<String> = k
        .block
        .iter()
        .enumerate()
        .map(|(i, b)| {
            b.get_ref()
                .name
                .as_ref()
                .map_or_else(|| format!("b{i}"), |n| n.get_ref().clone())
        })
        .collect();
    for (i, b) in k.block.iter().enumerate() {
        if names[..i].contains(&names[i]) {
            return Err(SpanError::new(
                b.span(),
                format!("block \"{}\" is defined twice", names[i]),
            ));
        }
    }
    let refs: Vec<&String> = names.iter().collect();
    let blocks = k
        .block
        .iter()
        .enumerate()
        .map(|(i, b)| block(b, i, names[i].clone(), &refs, kernels))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(KernelSpec {
        name: k.name.get_ref().clone(),
        blocks,
    })
}

fn block(
    raw: &Spanned<RawBlock>,
    index: usize,
    name: String,
    blocks: &[&String],
    kernels: &[&String],
) -> Result<BlockSpec, SpanError> {
    let b = raw.get_ref();
    let instructions = *b.instructions.get_ref();
    if !(1..=65_535).contains(&instructions) {
        return Err(SpanError::new(
            b.instructions.span(),
            format!("instructions {instructions} is out of range; it must lie in 1..=65535"),
        ));
    }
    let cpi = match (&b.cpi, &b.phase_cpi) {
        (Some(_), Some(pc)) => {
            return Err(SpanError::new(
                pc.span(),
                "give `cpi` or `phase_cpi`, not both",
            ))
        }
        (None, None) => {
            return Err(SpanError::new(
                raw.span(),
                "`cpi` or `phase_cpi` is required",
            ))
        }
        (Some(c), None) => vec![ranged(c, "cpi", 1.0, 64.0)?],
        (None, Some(pc)) if pc.get_ref().is_empty() => {
            return Err(SpanError::new(pc.span(), "`phase_cpi` must not be empty"))
        }
        (None, Some(pc)) => pc
            .get_ref()
            .iter()
            .map(|c| ranged(c, "cpi", 1.0, 64.0))
            .collect::<Result<_, _>>()?,
    };
    let throttle = match &b.throttle {
        Some(t) => ranged(t, "throttle", 1.0, 16.0)?,
        None => 1.0,
    };
    let exit = exit(raw, index, blocks, kernels)?;
    let data = b.data.as_ref().map(data).transpose()?;
    Ok(BlockSpec {
        name,
        instructions,
        cpi,
        throttle,
        exit,
        marker: b.marker.as_ref().is_some_and(|m| *m.get_ref()),
        data,
    })
}

/// A block's `data = { base, stride, span }`: `span` at least 1 and the
/// sweep inside the 32-bit address space.
fn data(raw: &Spanned<RawData>) -> Result<DataSpec, SpanError> {
    let d = raw.get_ref();
    let (base, stride, span) = (*d.base.get_ref(), *d.stride.get_ref(), *d.span.get_ref());
    if span == 0 {
        return Err(SpanError::new(
            d.span.span(),
            "span 0 is out of range; a block's data sweep covers at least 1 byte",
        ));
    }
    if base.checked_add(span - 1).is_none() {
        return Err(SpanError::new(
            d.base.span(),
            format!("base {base} + span {span} runs past the 32-bit address space"),
        ));
    }
    Ok(DataSpec { base, stride, span })
}

fn exit(
    raw: &Spanned<RawBlock>,
    index: usize,
    blocks: &[&String],
    kernels: &[&String],
) -> Result<Exit, SpanError> {
    let b = raw.get_ref();
    let given = [
        b.branch.as_ref().map(Spanned::span),
        b.jump.as_ref().map(Spanned::span),
        b.loop_.as_ref().map(Spanned::span),
        b.call.as_ref().map(Spanned::span),
        b.ret.as_ref().map(Spanned::span),
    ];
    if let Some(second) = given.iter().flatten().nth(1) {
        return Err(SpanError::new(
            second.clone(),
            "a block has at most one of `branch`, `jump`, `loop`, `call`, `ret`",
        ));
    }
    if let Some(edges) = &b.branch {
        let mut out = Vec::with_capacity(edges.get_ref().len());
        let mut total = 0.0;
        for e in edges.get_ref() {
            let p = ranged(&e.get_ref().p, "p", 0.0, 1.0)?;
            total += p;
            out.push((index_of(blocks, &e.get_ref().to, "block")?, p));
        }
        if total > 1.0 + 1e-9 {
            return Err(SpanError::new(
                edges.span(),
                "branch probabilities sum to more than 1",
            ));
        }
        return Ok(Exit::Branch(out));
    }
    if let Some(j) = &b.jump {
        return Ok(Exit::Jump(index_of(blocks, j, "block")?));
    }
    if let Some(l) = &b.loop_ {
        let to = index_of(blocks, &l.get_ref().to, "block")?;
        if usize::from(to) > index {
            return Err(SpanError::new(
                l.get_ref().to.span(),
                "a loop's head must be this block or an earlier one",
            ));
        }
        let trips = *l.get_ref().trips.get_ref();
        if !(1..=MAX_TRIPS).contains(&trips) {
            return Err(SpanError::new(
                l.get_ref().trips.span(),
                format!("trips {trips} is out of range; it must lie in 1..={MAX_TRIPS}"),
            ));
        }
        return Ok(Exit::Loop { to, trips });
    }
    if let Some(c) = &b.call {
        return Ok(Exit::Call(index_of(kernels, c, "kernel")?));
    }
    match &b.ret {
        Some(r) if *r.get_ref() => Ok(Exit::Ret),
        _ => Ok(Exit::Fall),
    }
}

/// `v` if it lies in `lo..=hi`, else an error naming `what`.
fn ranged(v: &Spanned<f64>, what: &str, lo: f64, hi: f64) -> Result<f64, SpanError> {
    let x = *v.get_ref();
    if x.is_finite() && (lo..=hi).contains(&x) {
        Ok(x)
    } else {
        Err(SpanError::new(
            v.span(),
            format!("{what} {x} is out of range; it must lie in {lo:?}..={hi:?}"),
        ))
    }
}

fn index_of(names: &[&String], name: &Spanned<String>, what: &str) -> Result<u16, SpanError> {
    names
        .iter()
        .position(|n| *n == name.get_ref())
        .and_then(|i| u16::try_from(i).ok())
        .ok_or_else(|| {
            SpanError::new(
                name.span(),
                format!("unknown {what} \"{}\"", name.get_ref()),
            )
        })
}

/// Calls must not recurse nor nest deeper than [`CALL_DEPTH`].
fn check_call_depth(spec: &ProgramSpec, raw: &RawProgram) -> Result<(), SpanError> {
    fn depth(spec: &ProgramSpec, k: u16, path: &mut Vec<u16>) -> Option<usize> {
        if path.contains(&k) {
            return None;
        }
        path.push(k);
        let mut deepest = 0;
        for b in &spec.kernels[usize::from(k)].blocks {
            if let Exit::Call(c) = b.exit {
                deepest = deepest.max(depth(spec, c, path)?);
            }
        }
        path.pop();
        Some(deepest + 1)
    }
    let span: Range<usize> = raw.name.span();
    match depth(spec, spec.entry, &mut Vec::new()) {
        None => Err(SpanError::new(
            span,
            format!("program \"{}\" calls recursively", spec.name),
        )),
        Some(d) if d > CALL_DEPTH => Err(SpanError::new(
            span,
            format!(
                "program \"{}\" nests calls {d} deep; at most {CALL_DEPTH}",
                spec.name
            ),
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::scenario::program::Exit;
    use crate::scenario::test_support::{assert_at, err, ok};

    const HEAD: &str = "[[program]]\nname = \"g\"\n[[program.kernel]]\nname = \"main\"\n";

    #[test]
    fn a_loop_program_resolves() {
        let s = ok(&format!(
            "{HEAD}[[program.kernel.block]]\nname = \"a\"\ninstructions = 10\ncpi = 2.0\n\
             [[program.kernel.block]]\ninstructions = 4\nphase_cpi = [1.0, 3.0]\nloop = {{ to = \"a\", trips = 8 }}\n"
        ));
        let b = &s.programs[0].kernels[0].blocks;
        assert_eq!(b[1].exit, Exit::Loop { to: 0, trips: 8 });
        assert_eq!(b[1].cpi, vec![1.0, 3.0]);
    }

    #[test]
    fn block_data_resolves_and_sweeps() {
        let s = ok(&format!(
            "{HEAD}[[program.kernel.block]]\ninstructions = 10\ncpi = 2.0\n\
             data = {{ base = 4096, stride = 64, span = 192 }}\n"
        ));
        let d = s.programs[0].kernels[0].blocks[0].data.expect("data");
        let addrs: Vec<u32> = (0..4).map(|v| d.address(v)).collect();
        assert_eq!(addrs, [4096, 4160, 4224, 4096]);
    }

    #[test]
    fn bad_block_data_reports_its_line() {
        let block = "[[program.kernel.block]]\ninstructions = 3\ncpi = 1.0\n";
        assert_at(
            &err(&format!(
                "{HEAD}{block}data = {{ base = 0, stride = 4, span = 0 }}\n"
            )),
            8,
            "span 0 is out of range",
        );
        assert_at(
            &err(&format!(
                "{HEAD}{block}data = {{ base = 4294967295, stride = 4, span = 2 }}\n"
            )),
            8,
            "runs past the 32-bit address space",
        );
        assert_at(
            &err(&format!(
                "{HEAD}{block}data = {{ base = 0, stride = 4, span = 8, size = 2 }}\n"
            )),
            8,
            "unknown field",
        );
    }

    #[test]
    fn bad_program_keys_report_their_line() {
        let block = "[[program.kernel.block]]\n";
        assert_at(
            &err(&format!("{HEAD}{block}instructions = 0\ncpi = 1.0\n")),
            6,
            "instructions 0 is out of range",
        );
        assert_at(
            &err(&format!("{HEAD}{block}instructions = 3\ncpi = 0.5\n")),
            7,
            "cpi 0.5 is out of range",
        );
        assert_at(
            &err(&format!(
                "{HEAD}{block}instructions = 3\ncpi = 1.0\njump = \"nowhere\"\n"
            )),
            8,
            "unknown block \"nowhere\"",
        );
        assert_at(
            &err(&format!(
                "{HEAD}{block}instructions = 3\ncpi = 1.0\ncall = \"main\"\n"
            )),
            2,
            "calls recursively",
        );
        assert_at(
            &err(&format!(
                "{HEAD}{block}instructions = 3\ncpi = 1.0\nbranch = [{{ to = \"b0\", p = 0.7 }}, {{ to = \"b0\", p = 0.7 }}]\n"
            )),
            8,
            "sum to more than 1",
        );
        assert_at(
            &err("[[profile]]\nname = \"p\"\nprogram = \"none\"\nphase = [{ duration_us = 1 }]\n"),
            3,
            "unknown program \"none\"",
        );
    }
}
