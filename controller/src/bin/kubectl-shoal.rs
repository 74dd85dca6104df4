//! `kubectl-shoal`: the kubectl plugin (`kubectl shoal status|diff|approve|history|undo|slices`).

use clap::Parser;
use shoal_controller::plugin::{Cli, complete, run};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Run as `kubectl_complete-shoal` (a link): kubectl asks for completions.
    let mut args = std::env::args_os();
    let program = args.next().unwrap_or_default();
    if std::path::Path::new(&program).file_name()
        == Some(std::ffi::OsStr::new(complete::COMPLETION_BINARY))
    {
        let words: Vec<String> = args.map(|arg| arg.to_string_lossy().into_owned()).collect();
        print!("{}", complete::kubectl_complete(&words));
        return std::process::ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    match run(&cli).await {
        Ok(output) => {
            print!("{output}");
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            // Every message already names its cause; printing the source chain would repeat it.
            eprintln!("error: {error}");
            std::process::ExitCode::from(error.exit_code())
        }
    }
}
