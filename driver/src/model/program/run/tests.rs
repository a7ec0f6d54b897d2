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
