use gpupm_driver::model::program::run::{Env, ProgramRun, Unwatched};
use gpupm_driver::model::program::Program;
use gpupm_driver::scenario::program::generate;
fn cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid local `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "the thread's CPU clock reads");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let mut specs = gpupm_driver::scenario::builtin().programs;
    specs.extend((0..4).map(|k| generate(7, k)));
    let only = std::env::var("ONLY").ok();
    for spec in specs
        .iter()
        .filter(|s| only.as_deref().is_none_or(|o| o == s.name))
    {
        let prog = Program::compile(spec);
        let mut run = ProgramRun::new(0, &prog, 4);
        let t = cpu();
        let span = 1_980_000u64;
        let mut insts = 0;
        for _ in 0..std::env::var("SPANS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000)
        {
            let env = Env {
                ctx_base: run.ctx_cycles(),
                dev_base: run.ctx_cycles(),
                phase: 0,
                throttle: &[],
                seed: 7,
            };
            insts += run.advance(span / 2, &prog, &env, &mut Unwatched);
            let env = Env {
                ctx_base: run.ctx_cycles(),
                dev_base: run.ctx_cycles(),
                phase: 0,
                throttle: &[],
                seed: 7,
            };
            insts += run.advance(span / 2, &prog, &env, &mut Unwatched);
        }
        let s = cpu() - t;
        let visits: u64 = run.truth(&prog).iter().map(|r| r.visits).sum();
        println!(
            "{:12} {:8.2} ms per simulated s, {} visits, {} insts",
            spec.name,
            s * 1000.0,
            visits,
            insts
        );
    }
}
