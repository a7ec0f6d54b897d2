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

/// Prints or writes the man pages.
pub fn man<C: CommandFactory>(a: &ManArgs) -> CliResult<ExitCode> {
    let cmd = crate::schema::with_json_schemas(C::command());
    let io = |e: std::io::Error| CliError::usage(format!("man: {e}"));
    match &a.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(io)?;
            clap_mangen::generate_to(cmd, dir).map_err(io)?;
        }
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut buf).map_err(io)?;
            crate::output::emit(&String::from_utf8_lossy(&buf))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
