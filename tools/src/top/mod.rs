//! `gpupm top`: full-screen live view of VMs and their active contexts with
//! rates, sortable (`s` cycles the sort key, `q`/Esc/Ctrl-C quits).
//!
//! `--headless-frames N` draws N frames into an in-memory terminal through
//! the same sampling and rendering path (for tests and the benchmark).

pub mod render;
pub mod sample;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

pub use self::render::SortKey;
use self::sample::Sampler;
use crate::error::{CliError, CliResult};
use crate::node::Global;

/// `-I/--interval MS` of `gpupm top` and `gpupm dmon`.
#[derive(clap::Args, Debug)]
pub struct IntervalArgs {
    /// Milliseconds between two samples.
    #[arg(
        short = 'I',
        long = "interval",
        value_name = "MS",
        default_value_t = 1000
    )]
    pub ms: u64,
}

/// Arguments of `gpupm top`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    interval: IntervalArgs,
    /// Initial sort key.
    #[arg(long, value_enum, default_value_t = SortKey::Sm)]
    sort: SortKey,
    /// VM rows only.
    #[arg(long)]
    no_contexts: bool,
    /// Test mode: draw N frames into an in-memory terminal, then exit.
    #[arg(long, value_name = "N")]
    headless_frames: Option<u32>,
}

/// How the live loop runs.
#[derive(Debug, Clone)]
pub struct LiveOpts {
    /// Frame period.
    pub interval: Duration,
    /// Sort key.
    pub sort: SortKey,
    /// Show contexts.
    pub contexts: bool,
    /// Headless: frames to draw.
    pub headless_frames: Option<u32>,
    /// Title line.
    pub title: String,
    /// How often the hook runs between frames.
    pub hook_every: Duration,
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let sampler = Sampler::new(g.node()?)?;
    let opts = LiveOpts {
        interval: Duration::from_millis(args.interval.ms.max(50)),
        sort: args.sort,
        contexts: !args.no_contexts,
        headless_frames: args.headless_frames,
        title: format!("gpupm top — {}", g.tenant_node.display()),
        hook_every: Duration::from_millis(args.interval.ms.max(50)),
    };
    live(sampler, &opts, &mut || Ok(true))?;
    Ok(ExitCode::SUCCESS)
}

/// The live loop: draws a frame every `interval` and calls `hook` every
/// `hook_every` (it returns `false` to stop) until the user quits.
pub fn live(
    mut sampler: Sampler,
    o: &LiveOpts,
    hook: &mut dyn FnMut() -> CliResult<bool>,
) -> CliResult {
    if let Some(n) = o.headless_frames {
        let mut term = Terminal::new(TestBackend::new(120, 40)).map_err(io_err)?;
        let mut next = Instant::now();
        for _ in 0..n {
            while Instant::now() < next {
                if !hook()? {
                    return Ok(());
                }
                std::thread::sleep(
                    o.hook_every
                        .min(next.saturating_duration_since(Instant::now())),
                );
            }
            next += o.interval;
            let (_, mut rows) = sampler.sample(o.contexts)?;
            render::sort(&mut rows, o.sort);
            term.draw(|f| render::draw(f, &o.title, &rows, o.sort))
                .map_err(io_err)?;
        }
        return Ok(());
    }
    let mut term = ratatui::try_init().map_err(io_err)?;
    let result = interactive(&mut term, &mut sampler, o, hook);
    ratatui::restore();
    result
}

fn interactive(
    term: &mut ratatui::DefaultTerminal,
    sampler: &mut Sampler,
    o: &LiveOpts,
    hook: &mut dyn FnMut() -> CliResult<bool>,
) -> CliResult {
    let mut key = o.sort;
    let mut rows = Vec::new();
    let mut next_frame = Instant::now();
    let mut next_hook = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_hook {
            if !hook()? {
                return Ok(());
            }
            next_hook = now + o.hook_every;
        }
        let mut redraw = false;
        if now >= next_frame {
            rows = sampler.sample(o.contexts)?.1;
            next_frame = now + o.interval;
            redraw = true;
        }
        let wait = next_frame
            .min(next_hook)
            .saturating_duration_since(Instant::now());
        if event::poll(wait).map_err(io_err)? {
            if let Event::Key(k) = event::read().map_err(io_err)? {
                if k.kind == KeyEventKind::Press {
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                            return Ok(())
                        }
                        KeyCode::Char('s') => key = key.next(),
                        _ => {}
                    }
                    redraw = true;
                }
            } else {
                redraw = true;
            }
        }
        if redraw {
            render::sort(&mut rows, key);
            term.draw(|f| render::draw(f, &o.title, &rows, key))
                .map_err(io_err)?;
        }
    }
}

fn io_err(e: std::io::Error) -> CliError {
    CliError::usage(format!("terminal: {e}"))
}
