//! `gpupm top`: full-screen live view of VMs and their active contexts with
//! rates, sortable (`s` cycles the sort key, `q`/Esc/Ctrl-C quits).
//!
//! Without a terminal (or with `-b`) it prints each frame as text, like
//! `top -b`, for `-n` frames. An interval without data says so in the
//! title line (`NO DATA since …`) and shows no rows; a catch-up frame says
//! what it covers.
//!
//! `--headless-frames N` draws N frames into an in-memory terminal through
//! the same sampling and rendering path (for tests and the benchmark).

pub mod render;
pub mod sample;
#[cfg(test)]
mod screen_tests;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

pub use self::render::SortKey;
use self::sample::{Frame, Row, Sampler};
use crate::error::{CliError, CliResult};
use crate::interval::{self, Moment, Status};
use crate::node::{Global, Missing};
use crate::output::emit_stream;

/// Arguments of `gpupm top`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Time between two frames: 1s, 500ms, or plain milliseconds.
    #[arg(short = 'I', long = "interval", value_name = "INTERVAL", default_value = "1s",
          value_parser = interval::parse_interval)]
    interval: Duration,
    /// Initial sort key.
    #[arg(long, value_enum, default_value_t = SortKey::Sm)]
    sort: SortKey,
    /// VM rows only.
    #[arg(long)]
    no_contexts: bool,
    /// Batch mode: print each frame as text (the default without a
    /// terminal).
    #[arg(short = 'b', long)]
    batch: bool,
    /// Batch mode: frames to print (default: until interrupted).
    #[arg(short = 'n', long, value_name = "N")]
    frames: Option<u64>,
    /// Batch mode: line width (columns that do not fit are left out and
    /// named).
    #[arg(long, value_name = "COLUMNS", default_value_t = 160)]
    width: usize,
    /// Test mode: draw N frames into an in-memory terminal, then exit.
    #[arg(long, value_name = "N", hide = true)]
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
    let interval = args.interval.max(Duration::from_millis(50));
    let sampler = Sampler::new(g.node()?)?.with_period(interval);
    let title = format!("gpupm top — {}", g.tenant_node.display());
    if args.headless_frames.is_none() && (args.batch || !std::io::stdout().is_terminal()) {
        batch(sampler, args, &title, interval)?;
        return Ok(ExitCode::SUCCESS);
    }
    let opts = LiveOpts {
        interval,
        sort: args.sort,
        contexts: !args.no_contexts,
        headless_frames: args.headless_frames,
        title,
        hook_every: interval,
    };
    live(sampler, &opts, &mut || Ok(true))?;
    Ok(ExitCode::SUCCESS)
}

/// Batch mode: a text frame per interval.
fn batch(mut sampler: Sampler, args: &Args, title: &str, interval: Duration) -> CliResult {
    let mut view = View::default();
    let mut next = Instant::now();
    let mut n = 0;
    while args.frames.is_none_or(|k| n < k) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += interval;
        view.update(&mut sampler, !args.no_contexts)?;
        render::sort(&mut view.rows, args.sort);
        let head = format!("{title}   {}   {}", Moment::now().clock(), view.banner);
        emit_stream(&(render::text(head.trim_end(), &view.rows, args.width) + "\n"))?;
        n += 1;
    }
    Ok(())
}

/// What the view shows: the last frame's rows and a line about its span.
#[derive(Debug, Default)]
struct View {
    rows: Vec<Row>,
    banner: String,
    gap_since: Option<Moment>,
}

impl View {
    /// Takes a sample: a gap empties the rows and says so.
    fn update(&mut self, sampler: &mut Sampler, contexts: bool) -> CliResult {
        match sampler.sample(contexts) {
            Ok(Frame {
                rows, span, status, ..
            }) => {
                self.rows = rows;
                self.gap_since = None;
                self.banner = match status {
                    Status::CatchUp => format!("CATCH-UP: rates over {}", span.describe()),
                    Status::Reset => "DEVICE RESET: rates resume at the next frame".into(),
                    _ if span.times_differ() => span.describe(),
                    _ => String::new(),
                };
                Ok(())
            }
            Err(Missing::Gone(why)) => {
                let since = *self.gap_since.get_or_insert_with(Moment::now);
                self.rows.clear();
                self.banner = format!("NO DATA since {}: {why}", since.clock());
                match sampler.reopen() {
                    Ok(()) | Err(Missing::Gone(_)) => Ok(()),
                    Err(Missing::Failed(e)) => Err(e),
                }
            }
            Err(Missing::Failed(e)) => Err(e),
        }
    }

    fn title(&self, title: &str) -> String {
        if self.banner.is_empty() {
            title.to_string()
        } else {
            format!("{title}   {}", self.banner)
        }
    }
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
        let mut view = View::default();
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
            view.update(&mut sampler, o.contexts)?;
            render::sort(&mut view.rows, o.sort);
            let title = view.title(&o.title);
            term.draw(|f| render::draw(f, &title, &view.rows, o.sort))
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
    let mut view = View::default();
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
            view.update(sampler, o.contexts)?;
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
            render::sort(&mut view.rows, key);
            let title = view.title(&o.title);
            term.draw(|f| render::draw(f, &title, &view.rows, key))
                .map_err(io_err)?;
        }
    }
}

fn io_err(e: std::io::Error) -> CliError {
    CliError::usage(format!("terminal: {e}"))
}
