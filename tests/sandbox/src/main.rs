//! `cargo run -p shoal-sandbox`: an emulated cluster with Shoal and a demo,
//! ready for the real kubectl, until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use shoal_sandbox::{Options, Plugin, Sandbox};

/// Shoal's try-it-now sandbox: an in-process API server, Shoal's CRD and
/// controller, the demo's 27 streams over a 2-replica StatefulSet, and one
/// sidecar per member pod. Test infrastructure, not a cluster.
#[derive(Parser, Debug)]
#[command(name = "shoal-sandbox", version)]
struct Cli {
    /// Directory for the kubeconfig and the members' slice files
    /// (default: `target/shoal-sandbox` next to this binary's profile directory).
    #[arg(long, env = "SHOAL_SANDBOX_DIR")]
    dir: Option<PathBuf>,
    /// Port of the API server on 127.0.0.1 (0: any free port).
    #[arg(long, env = "SHOAL_SANDBOX_PORT", default_value_t = 0)]
    port: u16,
    /// Namespace to apply the demo into, created if missing (default: the
    /// namespaces its manifests name, else `default`).
    #[arg(long, env = "SHOAL_SANDBOX_NAMESPACE")]
    namespace: Option<String>,
    /// The Swarm CRD manifest.
    #[arg(long, env = "SHOAL_SANDBOX_CRD", default_value_os_t = shoal_sandbox::default_crd())]
    crd: PathBuf,
    /// The demo: a manifest file or a directory of them (`kubectl apply -f`),
    /// or a kustomization directory such as manifests/example (`kubectl apply -k`).
    #[arg(long, env = "SHOAL_SANDBOX_DEMO", default_value_os_t = shoal_sandbox::default_demo())]
    demo: PathBuf,
    /// The kubectl program.
    #[arg(long, env = "SHOAL_KUBECTL", default_value = "kubectl")]
    kubectl: String,
    /// Seconds to wait for the demo to converge before giving up.
    #[arg(long, env = "SHOAL_SANDBOX_CONVERGE_SECONDS", default_value_t = 120)]
    converge_seconds: u64,
    /// Seconds of the member Lease (renewed every third of it) for pods
    /// without a shoal-worker container; those with one use its flags.
    #[arg(long, env = "SHOAL_SANDBOX_MEMBER_LEASE_SECONDS", default_value_t = 15)]
    member_lease_seconds: u64,
    /// Address of the controller's /metrics, /healthz and /readyz server (default: none).
    #[arg(long, env = "SHOAL_SANDBOX_CONTROLLER_METRICS")]
    controller_metrics: Option<SocketAddr>,
    /// Address of the deployment status REST endpoint (port 0: any free port).
    #[arg(long, env = "SHOAL_SANDBOX_STATUS_API", default_value = "127.0.0.1:0")]
    status_api: SocketAddr,
    /// Members (pod names, comma-separated or repeated) whose sidecar waits for
    /// your application's acknowledgement instead of acknowledging each slice
    /// itself: run an example worker against it (its address is printed at
    /// once; the demo converges when the worker acknowledges).
    #[arg(long, env = "SHOAL_SANDBOX_APP_ACK", value_delimiter = ',')]
    app_ack: Vec<String>,
}

/// `target/shoal-sandbox` when the binary lives in `target/<profile>/`.
fn default_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("finding this program's path")?;
    let target = exe
        .parent()
        .and_then(|profile| profile.parent())
        .context("this program has no grandparent directory; pass --dir")?;
    Ok(target.join("shoal-sandbox"))
}

/// Resolves on Ctrl-C or SIGTERM, naming which.
async fn stop_signal() -> anyhow::Result<&'static str> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => {
            interrupted.context("listening for Ctrl-C")?;
            Ok("Ctrl-C")
        }
        _ = terminate.recv() => Ok("SIGTERM"),
    }
}

/// The sidecars waiting for the user's application, before waiting for the
/// demo to converge (it cannot until the application acknowledges).
async fn print_app_ack_sidecars(sandbox: &Sandbox, timeout: Duration) {
    match sandbox.app_ack_sidecars(timeout).await {
        Ok(sidecars) => {
            for (pod, address) in sidecars {
                eprintln!(
                    "shoal-sandbox: {pod}'s sidecar waits for your application's acknowledgement; \
                     run one against it: SHOAL_API=http://{address} python3 examples/python/worker.py"
                );
            }
        }
        Err(error) => eprintln!("shoal-sandbox: {error}"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let dir = match cli.dir {
        Some(dir) => dir,
        None => default_dir()?,
    };
    let dir = std::path::absolute(&dir)
        .with_context(|| format!("resolving the sandbox directory {}", dir.display()))?;
    // The sandbox's own directory: its `bin` holds only the plugin's links.
    let plugin_links = dir.join("bin");
    let options = Options {
        dir,
        port: cli.port,
        namespace: cli.namespace,
        crd: cli.crd,
        demo: cli.demo,
        kubectl: cli.kubectl,
        member_lease: Duration::from_secs(cli.member_lease_seconds.max(1)),
        controller_metrics: cli.controller_metrics,
        status_api: Some(cli.status_api),
        app_ack: cli.app_ack,
    };
    eprintln!(
        "shoal-sandbox: starting the emulated cluster, applying {} and {}",
        options.crd.display(),
        options.demo.display()
    );
    let stop = stop_signal();
    tokio::pin!(stop);
    let mut sandbox = tokio::select! {
        started = Sandbox::start(options) => started.context("starting the sandbox")?,
        signal = &mut stop => {
            eprintln!("shoal-sandbox: {} while starting; stopped", signal?);
            return Ok(());
        }
    };
    let timeout = Duration::from_secs(cli.converge_seconds);
    print_app_ack_sidecars(&sandbox, timeout).await;
    let converged = tokio::select! {
        converged = sandbox.wait_converged(timeout) => converged,
        signal = &mut stop => {
            eprintln!("shoal-sandbox: {} before the demo converged; stopping", signal?);
            sandbox.shutdown().await.context("stopping the sandbox")?;
            eprintln!("shoal-sandbox: stopped");
            return Ok(());
        }
    };
    let converged = match converged {
        Ok(converged) => converged,
        Err(error) => {
            let _ = sandbox.shutdown().await;
            return Err(error).context("waiting for the demo to converge");
        }
    };
    let mut tour = sandbox
        .tour(&converged)
        .await
        .context("describing the demo")?;
    tour.plugin = std::env::current_exe()
        .ok()
        .and_then(|program| Plugin::beside(&program, plugin_links));
    // Without its links the tour offers the plugin nowhere rather than a PATH that fails.
    if let Some(plugin) = &tour.plugin
        && let Err(error) = plugin.link()
    {
        eprintln!(
            "shoal-sandbox: cannot link the plugin into {}: {error}",
            plugin.links.display()
        );
        tour.plugin = None;
    }
    println!("{}", tour.render());
    let outcome = tokio::select! {
        signal = &mut stop => signal.map(|name| eprintln!("shoal-sandbox: {name}; stopping")),
        failure = sandbox.until_failure() => Err(failure).context("the sandbox failed"),
    };
    let stopped = sandbox.shutdown().await.context("stopping the sandbox");
    outcome?;
    stopped?;
    eprintln!("shoal-sandbox: stopped");
    Ok(())
}
