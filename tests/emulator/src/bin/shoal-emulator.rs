//! Runs the emulated cluster (API server, StatefulSet controller, kubelet)
//! until Ctrl-C, printing how to point kubectl at it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use shoal_emulator::ServerOptions;
use shoal_emulator::sim::{Cluster, ClusterOptions, KubeletConfig};

/// An in-process Kubernetes API server with simulated StatefulSet and kubelet
/// controllers, for trying things with kubectl. Test infrastructure, not a
/// cluster.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Port to listen on (127.0.0.1); 0 picks a free port.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Directory for the kubeconfig (a temporary directory when omitted).
    #[arg(long)]
    kubeconfig_dir: Option<PathBuf>,
    /// Milliseconds before the kubelet reports a new pod Running and Ready.
    #[arg(long, default_value_t = 100)]
    start_delay_ms: u64,
    /// Factor applied to pod grace periods (0.01 turns 30 s into 300 ms).
    #[arg(long, default_value_t = 0.01)]
    grace_scale: f64,
    /// Run no kubelet (a control plane without kubelets: point
    /// SHOAL_TEST_KUBECONFIG at it with SHOAL_TEST_NO_KUBELET=1).
    #[arg(long)]
    no_kubelet: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let args = Args::parse();
    let server = ServerOptions {
        port: args.port,
        kubeconfig_dir: args.kubeconfig_dir,
        ..ServerOptions::default()
    };
    let kubelet = KubeletConfig {
        start_delay: Duration::from_millis(args.start_delay_ms),
        grace_scale: args.grace_scale,
        ..KubeletConfig::default()
    };
    let cluster = Cluster::start_with(ClusterOptions {
        server,
        kubelet,
        without_kubelet: args.no_kubelet,
    })
    .await
    .context("starting the emulated cluster")?;
    let kubeconfig = cluster.kubeconfig_path().display().to_string();
    println!("shoal-emulator serving {}", cluster.api().url());
    println!("kubeconfig: {kubeconfig}");
    println!("export KUBECONFIG={kubeconfig}");
    println!("Ctrl-C stops it.");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    cluster.shutdown().await;
    Ok(())
}
