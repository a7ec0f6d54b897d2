//! gpupmd: the privileged daemon (issue 4; being built).

fn main() -> std::process::ExitCode {
    eprintln!("gpupmd: not implemented yet");
    std::process::ExitCode::from(2)
}
