use super::*;
use crate::scenario::program::generate;
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

#[test]
fn debug_reduce_bulk() {
    let specs = crate::scenario::builtin().programs;
    let prog = Program::compile(&specs[1]);
    let mut run = ProgramRun::new(0, &prog, 4);
    run.advance(2_000_000, &prog, &env(), &mut Unwatched);
    for l in &run.paths.loops {
        eprintln!(
            "latch {} usable {} paths {:?} exits {:?}",
            l.latch,
            l.usable,
            l.paths
                .iter()
                .map(|p| p.as_ref().map(|p| (p.cycles, p.visits.len())))
                .collect::<Vec<_>>(),
            l.exits
        );
    }
    eprintln!("{:?}", prog.loops);
}
