use super::*;
use crate::scenario::program::{generate, BlockSpec, Exit, KernelSpec, ProgramSpec};
use gpupm_uapi::sampling::BranchEntry;

fn env() -> Env<'static> {
    Env {
        ctx_base: 0,
        dev_base: 0,
        phase: 0,
        throttle: &[],
        seed: 5,
    }
}

#[test]
fn any_split_of_time_walks_the_same_program() {
    let prog = Program::compile(&generate(11, 2));
    let mut one = ProgramRun::new(0, &prog, 1);
    let mut many = one.clone();
    let a = one.advance(100_000, &prog, &env(), &mut Unwatched);
    let mut b = 0;
    for step in [1, 7, 300, 1, 99_691] {
        let e = Env {
            ctx_base: many.ctx_cycles(),
            dev_base: many.ctx_cycles(),
            ..env()
        };
        b += many.advance(step, &prog, &e, &mut Unwatched);
    }
    assert_eq!(a, b);
    assert_eq!(one.truth(&prog), many.truth(&prog));
    let t = one.truth(&prog);
    assert_eq!(t.iter().map(|r| r.instructions).sum::<u64>(), a);
    assert_eq!(t.iter().map(|r| r.cycles).sum::<u64>(), 100_000);
}

/// Watches, and admits nothing: the walk steps through every block.
struct Stepper(u64);

impl Watch for Stepper {
    fn ran(&mut self, _: u64, _: u64, _: u16, _: u16) {}
    fn taken(&mut self, _: BranchEntry, _: u64) {
        self.0 += 1;
    }
}

#[test]
fn advancing_in_aggregate_reaches_the_state_the_walk_reaches() {
    let windows = [ThrottleWindow {
        start: 50_000,
        end: 90_001,
    }];
    let mut specs = crate::scenario::builtin().programs;
    specs.extend((0..4).map(|k| generate(3, k)));
    specs.push(nested());
    for spec in &specs {
        let prog = Program::compile(spec);
        let mut fast = ProgramRun::new(0, &prog, 4);
        let mut slow = fast.clone();
        let mut stepper = Stepper(0);
        for (i, step) in [3, 40_000, 1, 77_777, 5_000_000].into_iter().enumerate() {
            let env = |run: &ProgramRun| Env {
                ctx_base: run.ctx_cycles(),
                dev_base: run.ctx_cycles(),
                phase: i % 2,
                throttle: &windows,
                seed: 5,
            };
            let a = fast.advance(step, &prog, &env(&fast), &mut Unwatched);
            let b = slow.advance(step, &prog, &env(&slow), &mut stepper);
            assert_eq!(a, b, "{}", spec.name);
            assert_eq!(fast.truth(&prog), slow.truth(&prog), "{}", spec.name);
            assert_eq!(fast.cur.frames, slow.cur.frames, "{}", spec.name);
        }
        assert_eq!(fast.branches, stepper.0, "{}", spec.name);
        assert_eq!(fast.branches, slow.branches);
    }
}

/// An outer loop with a branch of its own, a random inner loop and a call
/// into a kernel with a branch and a loop of its own.
fn nested() -> ProgramSpec {
    let block = |name: &str, instructions: u32, cpi: f64, exit: Exit| BlockSpec {
        name: name.into(),
        instructions,
        cpi: vec![cpi, cpi * 1.5],
        throttle: 1.5,
        exit,
        marker: false,
        data: None,
    };
    ProgramSpec {
        name: "nested".into(),
        entry: 0,
        kernels: vec![
            KernelSpec {
                name: "main".into(),
                blocks: vec![
                    block("prologue", 20, 1.5, Exit::Fall),
                    block("outer_head", 8, 1.0, Exit::Branch(vec![(3, 0.4)])),
                    block("a", 30, 2.0, Exit::Fall),
                    block("inner_head", 12, 1.2, Exit::Fall),
                    block("inner_body", 16, 2.5, Exit::Branch(vec![(6, 0.5)])),
                    block("x", 40, 3.0, Exit::Fall),
                    block("inner_latch", 4, 1.0, Exit::Loop { to: 3, trips: 7 }),
                    block("outer_mid", 10, 1.0, Exit::Call(1)),
                    block("outer_latch", 6, 1.0, Exit::Loop { to: 1, trips: 5 }),
                    block("epilogue", 24, 2.0, Exit::Ret),
                ],
            },
            KernelSpec {
                name: "helper".into(),
                blocks: vec![
                    block("h0", 8, 1.0, Exit::Branch(vec![(2, 0.2)])),
                    block("h1", 20, 1.0, Exit::Fall),
                    block("hloop", 9, 2.0, Exit::Loop { to: 2, trips: 3 }),
                    block("hret", 3, 1.0, Exit::Ret),
                ],
            },
        ],
    }
}

#[test]
fn composite_paths_cover_outer_loops_and_launches() {
    let prog = Program::compile(&nested());
    let mut run = ProgramRun::new(0, &prog, 4);
    run.advance(5_000_000, &prog, &env(), &mut Unwatched);
    // The outer loop (latch row 8) is advanced through its composite paths.
    assert!(run.composite.learned(8));
    let gemm = Program::compile(&crate::scenario::builtin().programs[0]);
    let mut run = ProgramRun::new(0, &gemm, 4);
    run.advance(5_000_000, &gemm, &env(), &mut Unwatched);
    // Launches of GEMM (they end in the store kernel) are.
    let store = gemm.block(1, 0).row;
    assert!(run.composite.learned(store));
}

/// A loop whose head branches three ways — falls to `a` (0.2), jumps to
/// `b` (0.3) or to `c` (0.5); `a` falls into `b` and `b` into `c` — and
/// whose `c` jumps to the latch with 0.25 or falls to `d`: every
/// iteration visits each branch point once, so the loop is advanced in
/// aggregate.
fn three_way() -> ProgramSpec {
    let block = |name: &str, exit: Exit| BlockSpec {
        name: name.into(),
        instructions: 8,
        cpi: vec![1.0, 1.5],
        throttle: 1.5,
        exit,
        marker: false,
        data: None,
    };
    ProgramSpec {
        name: "three_way".into(),
        entry: 0,
        kernels: vec![KernelSpec {
            name: "main".into(),
            blocks: vec![
                block("head", Exit::Branch(vec![(2, 0.3), (3, 0.5)])),
                block("a", Exit::Fall),
                block("b", Exit::Fall),
                block("c", Exit::Branch(vec![(5, 0.25)])),
                block("d", Exit::Fall),
                block("latch", Exit::Loop { to: 0, trips: 1000 }),
                block("end", Exit::Ret),
            ],
        }],
    }
}

/// Pearson's χ² of `observed` against `expected` shares of their sum.
fn chi_square(observed: &[u64], expected: &[f64]) -> f64 {
    let n = observed.iter().sum::<u64>() as f64;
    observed
        .iter()
        .zip(expected)
        .map(|(&o, &p)| (o as f64 - n * p).powi(2) / (n * p))
        .sum()
}

/// The outcomes the aggregated walk books follow the program's branch
/// probabilities. For each of 8 fixed seeds, the 3-way branch (2 degrees
/// of freedom) and the 2-way one (1) are scored with Pearson's χ² against
/// the critical values at α = 0.001 (13.82 and 10.83): a correct
/// generator fails one given seed with probability 0.001, and the seeds
/// are fixed, so the test is deterministic; a biased one — an edge's
/// threshold off, lanes of a batch reused, batches repeated — moves χ²
/// far past them at these counts (≈2.8 × 10⁵ iterations per seed: a
/// shift of 0.01 in one edge gives χ² ≈ 230).
#[test]
fn aggregated_branch_outcomes_follow_the_programs_probabilities() {
    let prog = Program::compile(&three_way());
    for seed in 1..=8 {
        let mut run = ProgramRun::new(0, &prog, seed);
        let env = Env { seed, ..env() };
        run.advance(10_000_000, &prog, &env, &mut Unwatched);
        // The loop went in aggregate, not block by block.
        let latch = prog.block(0, 5).row;
        assert!(
            run.paths
                .loops
                .iter()
                .any(|l| l.latch == latch && l.usable && l.paths.iter().any(Option::is_some)),
            "seed {seed}: the loop was walked block by block"
        );
        let visits: Vec<u64> = run.truth(&prog).iter().map(|r| r.visits).collect();
        let (a, b, c, d) = (visits[1], visits[2], visits[3], visits[4]);
        assert!(c > 100_000, "seed {seed}: {visits:?}");
        let head = chi_square(&[a, b - a, c - b], &[0.2, 0.3, 0.5]);
        assert!(head < 13.82, "seed {seed}: head χ² {head} ({visits:?})");
        let tail = chi_square(&[c - d, d], &[0.25, 0.75]);
        assert!(tail < 10.83, "seed {seed}: c χ² {tail} ({visits:?})");
    }
}
