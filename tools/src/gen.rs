//! `gpupm completions SHELL` and `gpupm man [DIR]`: generated from the clap
//! definition, so they never drift from the real options.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::error::{CliError, CliResult};

/// Arguments of `gpupm completions`.
#[derive(clap::Args, Debug)]
pub struct CompletionArgs {
    /// Shell.
    #[arg(value_enum)]
    shell: Shell,
}

/// Arguments of `gpupm man`.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Write gpupm.1 and one gpupm-SUBCOMMAND.1 per subcommand into DIR
    /// instead of printing gpupm.1 to stdout.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

/// Prints the completion script.
pub fn completions<C: CommandFactory>(a: &CompletionArgs) -> CliResult<ExitCode> {
    let mut cmd = C::command();
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "gpupm", &mut buf);
    crate::output::emit(&String::from_utf8_lossy(&buf))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints or writes the man pages: clap's sections, then EXAMPLES, EXIT
/// STATUS, FILES and SEE ALSO.
pub fn man<C: CommandFactory>(a: &ManArgs) -> CliResult<ExitCode> {
    let mut cmd = crate::schema::with_json_schemas(C::command()).disable_help_subcommand(true);
    cmd.build();
    let io = |e: std::io::Error| CliError::usage(format!("man: {e}"));
    match &a.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(io)?;
            write_pages(&cmd, dir).map_err(io)?;
        }
        None => {
            let mut buf = Vec::new();
            page(&cmd, &mut buf).map_err(io)?;
            crate::output::emit(&String::from_utf8_lossy(&buf))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `cmd`'s page and every subcommand's, into `dir`.
fn write_pages(cmd: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let mut file = std::fs::File::create(dir.join(format!("{name}.1")))?;
    page(cmd, &mut file)
}

/// One page.
fn page(cmd: &clap::Command, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(w)?;
    }
    if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        man.render_extra_section(w)?;
    }
    let sub = cmd.get_name();
    w.write_all(sections(sub).as_bytes())?;
    if cmd.get_version().is_some() || cmd.get_long_version().is_some() {
        man.render_version_section(w)?;
    }
    Ok(())
}

/// `text` as roff text: backslashes and hyphens escaped, no line starting
/// with a control character.
fn roff(text: &str) -> String {
    text.replace('\\', "\\e")
        .replace('-', "\\-")
        .replace('\'', "\\(aq")
}

/// Examples of a subcommand: (command line, what it does).
fn examples(sub: &str) -> &'static [(&'static str, &'static str)] {
    match sub {
        "stat" => &[
            (
                "gpupm stat --vm 1",
                "totals of VM 1 since the device's reset",
            ),
            (
                "gpupm stat --vm 1 -I 1s --csv",
                "a CSV row per event per second, with timestamps",
            ),
            (
                "gpupm stat --ctx 12 --duration 5s",
                "the counts of the next five seconds",
            ),
            (
                "gpupm stat --vm 1 -- ./train.sh",
                "the counts while the command runs (on stderr)",
            ),
        ],
        "dmon" => &[
            ("gpupm dmon", "one line per VM per second"),
            (
                "gpupm dmon --vm 1,3 -s sm,dram -o DT",
                "two VMs, two columns, date and time",
            ),
            (
                "gpupm dmon -c 60 --csv > vm.csv",
                "a minute of samples for a spreadsheet",
            ),
        ],
        "top" => &[
            ("gpupm top", "the live view (s: sort key, q: quit)"),
            (
                "gpupm top -b -n 3 --width 80",
                "three text frames, 80 columns",
            ),
        ],
        "health" => &[
            ("gpupm health", "one verdict per subsystem, and what to do"),
            (
                "gpupm health --json | jq .verdict",
                "the verdict for a script",
            ),
        ],
        "events" => &[("gpupm events", "the catalogue: source, scope, unit")],
        "record" => &[(
            "gpupm record --vm 1 -o vm1.gpupm --duration 10s",
            "ten seconds of a stream session",
        )],
        "report" => &[("gpupm report vm1.gpupm", "summarise a recording")],
        "ri" => &[(
            "gpupm ri --ctx 12 -o ri.gpupm --duration 5s",
            "record report groups for gpupm report",
        )],
        "cpi" => &[("gpupm cpi --ctx 12", "kernels and hot blocks with CPI")],
        "ranges" => &[
            (
                "gpupm ranges --ctx 12 add --code 0:3-7 --count 1000",
                "count blocks 3 to 7 of kernel 0",
            ),
            (
                "gpupm ranges --ctx 12 list",
                "the context's ranges, hottest first",
            ),
        ],
        "list" => &[(
            "gpupm list --all",
            "partitions, VMs and every context instance",
        )],
        "gpupm" => &[
            ("gpupm list", "what you may see"),
            ("gpupm stat --vm 1", "a VM's totals, like perf stat"),
            (
                "gpupm dmon",
                "one line per VM per second, like nvidia-smi dmon",
            ),
            (
                "gpupm health",
                "the daemon's and the device's health (admin)",
            ),
        ],
        _ => &[("gpupm --help", "every command")],
    }
}

/// EXAMPLES, EXIT STATUS, FILES and SEE ALSO of `sub`'s page.
fn sections(sub: &str) -> String {
    let mut t = String::from(".SH EXAMPLES\n");
    for (line, what) in examples(sub) {
        t += &format!(".TP\n.B {}\n{}\n", roff(line), roff(what));
    }
    let status = match sub {
        "health" => "0 every check passes; 1 a check warns or fails; 2 neither the daemon nor the device can be read.",
        "stat" => "0 success; 1 the command ran but found a problem (gpupmd gone for longer than \
                   --give-up-after); 2 usage or environment error; with -- CMD, the exit status of CMD.",
        "dmon" | "top" => "0 success (also when the reader of the output goes away); 1 gpupmd gone \
                           for longer than --give-up-after; 2 usage or environment error.",
        "ri" => "0 success; 1 report groups were lost or the session failed; 2 usage or environment error.",
        _ => "0 success; 1 the command ran but found a problem; 2 usage or environment error \
              (no daemon, permission denied, unknown event, a scope that is not yours).",
    };
    t += &format!(".SH \"EXIT STATUS\"\n{}\n", roff(status));
    t += ".SH FILES\n";
    for (path, what) in [
        ("/run/gpupm/tenant/node", "the tenant node gpupmd serves"),
        (
            "/run/gpupm/pages/socket",
            "gpupmd's page socket (counter pages)",
        ),
        ("/run/gpupm/dev/card0", "the device node (admin)"),
        (
            "/etc/gpupm/gpupmd.toml",
            "the daemon's configuration (gpupm health reads its metrics address)",
        ),
    ] {
        t += &format!(".TP\n.I {}\n{}\n", roff(path), roff(what));
    }
    t += ".SH \"SEE ALSO\"\n";
    t += &roff(
        "gpupm(1), gpupmd(8), gpupm-driver(8), gpupm-mount(8), perf-stat(1), nvidia-smi(1); \
         /usr/share/doc/gpupm/README.md and operations.md",
    );
    t.push('\n');
    t
}
