//! `kubectl-shoal`: the kubectl plugin (`kubectl shoal status|diff|approve|history|undo|slices`).

use clap::Parser;
use shoal_controller::plugin::{Cli, run};

#[tokio::main]
async fn main() -> std::process::ExitCode {
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
