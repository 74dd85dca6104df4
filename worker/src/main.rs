//! `shoal-worker`: the member sidecar binary.

use clap::Parser;
use shoal_core::log_format::LogFormat;
use shoal_worker::Settings;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::parse();
    init_logs(settings.log_format);
    let client = kube::Client::try_default().await?;
    shoal_worker::run(client, settings, shutdown_signal()).await?;
    Ok(())
}

/// Logs to stderr in `format`; levels from `RUST_LOG`, else `info`.
fn init_logs(format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs
            .with_ansi(format.colours(std::io::stderr().is_terminal()))
            .init(),
    }
}

/// SIGTERM (the kubelet stopping the pod) or Ctrl-C.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the sidecar");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
