//! `shoal-controller`: the operator binary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use futures::FutureExt as _;
use shoal_controller::{LeaderElection, Settings};
use shoal_core::log_format::LogFormat;

/// jemalloc, not the system's allocator: see [`shoal_controller::Allocator`].
#[global_allocator]
static ALLOCATOR: shoal_controller::Allocator = shoal_controller::Allocator;

/// Shoal's controller: shards jobs across labelled StatefulSets.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Watch Swarms in this namespace only (default: all namespaces).
    #[arg(long, env = "SHOAL_NAMESPACE")]
    namespace: Option<String>,
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "SHOAL_METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_address: SocketAddr,
    /// Address of the deployment status REST endpoint (`/api/v1/deployments/...`);
    /// unset: not served. HTTPS with `--status-api-tls-cert`, else plain HTTP.
    #[arg(long, env = "SHOAL_STATUS_API_ADDRESS")]
    status_api_address: Option<SocketAddr>,
    /// The status endpoint's serving certificate chain (PEM, e.g. a mounted
    /// `kubernetes.io/tls` Secret's `tls.crt`); reloaded when it changes.
    #[arg(
        long,
        env = "SHOAL_STATUS_API_TLS_CERT",
        requires = "status_api_tls_key",
        requires = "status_api_address"
    )]
    status_api_tls_cert: Option<PathBuf>,
    /// The serving certificate's private key (PEM, the Secret's `tls.key`).
    #[arg(
        long,
        env = "SHOAL_STATUS_API_TLS_KEY",
        requires = "status_api_tls_cert"
    )]
    status_api_tls_key: Option<PathBuf>,
    /// CA certificates (PEM) whose client certificates authenticate devices
    /// (mutual TLS, subject CN = client id); bearer tokens stay accepted.
    #[arg(
        long,
        env = "SHOAL_STATUS_API_CLIENT_CA",
        requires = "status_api_tls_cert"
    )]
    status_api_client_ca: Option<PathBuf>,
    /// Name of the leader election Lease; empty disables leader election.
    #[arg(long, env = "SHOAL_LEADER_LEASE", default_value = "shoal-controller")]
    leader_lease: String,
    /// Namespace of the leader election Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "SHOAL_LEADER_LEASE_NAMESPACE")]
    leader_lease_namespace: Option<String>,
    /// Seconds the leader holds the Lease without renewing it.
    #[arg(long, env = "SHOAL_LEADER_LEASE_SECONDS", default_value_t = 15)]
    leader_lease_seconds: u64,
    /// This replica's identity, the leader Lease's holder (default: the pod name from
    /// `POD_NAME`, else `<host name>-<process id>`).
    #[arg(long, env = "SHOAL_IDENTITY")]
    identity: Option<String>,
    /// Reconcile every Swarm at least this often, in seconds.
    #[arg(long, env = "SHOAL_RESYNC_SECONDS", default_value_t = 60)]
    resync_seconds: u64,
    /// The most ConfigMap writes one pass of a Swarm has in flight at once (slice writes
    /// and deletions go out together; the API client retries 429 answers after their
    /// `Retry-After`).
    #[arg(
        long,
        env = "SHOAL_MAX_CONCURRENT_WRITES",
        default_value_t = shoal_controller::DEFAULT_MAX_CONCURRENT_WRITES,
        value_parser = clap::value_parser!(u16).range(1..=i64::from(shoal_controller::MAX_CONCURRENT_WRITES))
    )]
    max_concurrent_writes: u16,
    /// Log lines as `text` (coloured only on a terminal) or `json` (one object per line),
    /// on stderr. `RUST_LOG` sets the levels (default `info,kube=warn`).
    #[arg(long, env = "SHOAL_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a CRD: `crd > manifests/crd.yaml` (the Swarm), `crd deploymentplan >
    /// manifests/crd-deploymentplan.yaml`.
    Crd {
        /// Which custom resource.
        #[arg(value_enum, default_value_t = CrdKind::Swarm)]
        kind: CrdKind,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum CrdKind {
    /// `Swarm`.
    Swarm,
    /// `DeploymentPlan`.
    Deploymentplan,
}

/// The host name as the OS reports it (uname's nodename). Not `$HOSTNAME`: a shell
/// variable that is often not exported, so a controller started from a script would not
/// see it.
fn host_name() -> Option<String> {
    rustix::system::uname()
        .nodename()
        .to_str()
        .ok()
        .map(str::to_owned)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Crd { kind }) = cli.command {
        match kind {
            CrdKind::Swarm => print!("{}", shoal_controller::api::swarm::crd_yaml()),
            CrdKind::Deploymentplan => {
                print!("{}", shoal_controller::api::deployment_plan::crd_yaml())
            }
        }
        return Ok(());
    }
    init_logs(cli.log_format);
    let identity = cli.identity.unwrap_or_else(|| {
        shoal_controller::default_identity(
            std::env::var("POD_NAME").ok().as_deref(),
            host_name().as_deref(),
            std::process::id(),
        )
    });
    let lease_namespace = cli
        .leader_lease_namespace
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".to_owned());
    let settings = Settings {
        namespace: cli.namespace.clone(),
        leader_election: (!cli.leader_lease.is_empty()).then(|| LeaderElection {
            lease_name: cli.leader_lease.clone(),
            lease_namespace,
            duration_seconds: cli.leader_lease_seconds,
        }),
        identity,
        metrics_address: Some(cli.metrics_address),
        resync: Duration::from_secs(cli.resync_seconds.max(1)),
        max_concurrent_writes: cli.max_concurrent_writes,
    };
    let config = kube::Config::infer()
        .await
        .context("reading the Kubernetes API configuration (kubeconfig or in-cluster)")?;
    let clients = shoal_controller::Clients::from_config(config)
        .context("connecting to the Kubernetes API")?;
    let shutdown = shutdown_signal().boxed().shared();
    if let Some(address) = cli.status_api_address {
        let tls = tls_files(
            cli.status_api_tls_cert,
            cli.status_api_tls_key,
            cli.status_api_client_ca,
        );
        let api = shoal_controller::status_api::StatusApi {
            client: clients.api.clone(),
            namespace: cli.namespace.clone(),
        };
        start_status_api(address, tls, api, shutdown.clone()).await?;
    }
    shoal_controller::run_with_clients(clients, settings, shutdown)
        .await
        .context("running the controller")?;
    Ok(())
}

/// The status endpoint's TLS files, when a certificate is given (clap makes
/// the certificate and key come together).
fn tls_files(
    certificate: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> Option<shoal_controller::status_api::tls::TlsFiles> {
    Some(shoal_controller::status_api::tls::TlsFiles {
        certificate: certificate?,
        key: key?,
        client_ca,
        reload: shoal_controller::status_api::tls::RELOAD_INTERVAL,
    })
}

/// Binds and starts the deployment status endpoint: HTTPS with `tls`, else
/// plain HTTP (with a warning). Served by every replica, leader or not: it
/// only reads plans and writes report ConfigMaps, through the API server.
async fn start_status_api(
    address: SocketAddr,
    tls: Option<shoal_controller::status_api::tls::TlsFiles>,
    api: shoal_controller::status_api::StatusApi,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use shoal_controller::status_api;
    let config = match &tls {
        Some(files) => Some(status_api::tls::server_config(files).with_context(|| {
            format!("loading the deployment status endpoint's TLS files ({files:?})")
        })?),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding the deployment status endpoint to {address}"))?;
    let served = match config {
        Some(config) => {
            let devices = tls.as_ref().is_some_and(|files| files.client_ca.is_some());
            tracing::info!(%address, devices_by_certificate = devices, "deployment status endpoint: serving HTTPS");
            status_api::serve_tls(listener, config, api, stop).boxed()
        }
        None => {
            tracing::warn!(%address, "deployment status endpoint: serving plain HTTP (no --status-api-tls-cert): bearer tokens and reports travel in clear; give it a certificate or put TLS in front of it");
            status_api::serve(listener, api, stop).boxed()
        }
    };
    tokio::spawn(async move {
        if let Err(error) = served.await {
            tracing::error!(%error, "the deployment status endpoint stopped");
        }
    });
    Ok(())
}

/// Logs to stderr in `format`; levels from `RUST_LOG`, else `info,kube=warn`.
fn init_logs(format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn".into());
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

/// SIGTERM (the kubelet stopping the pod, a rolling update) or Ctrl-C: either way the
/// controller stops cleanly and gives up its leader Lease so the standby takes over at
/// once instead of after the Lease expires.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let terminated = async {
        match signal(SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the controller");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = terminated => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn status_endpoint_tls_files_without_its_address_are_refused_not_ignored() {
        let tls = [
            "--status-api-tls-cert",
            "tls.crt",
            "--status-api-tls-key",
            "tls.key",
        ];
        let without = Cli::try_parse_from(["shoal-controller"].into_iter().chain(tls));
        let error = without
            .expect_err("TLS files with no endpoint to serve them")
            .to_string();
        assert!(error.contains("--status-api-address"), "{error}");
        let with = Cli::try_parse_from(
            ["shoal-controller", "--status-api-address", "0.0.0.0:8443"]
                .into_iter()
                .chain(tls),
        );
        assert!(with.is_ok(), "{with:?}");
    }

    #[test]
    fn max_concurrent_writes_defaults_to_16_and_refuses_0_and_more_than_256_naming_the_flag() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(["shoal-controller"].iter().chain(args))
                .map(|cli| cli.max_concurrent_writes)
                .map_err(|error| error.to_string())
        };
        assert_eq!(parse(&[]), Ok(16));
        assert_eq!(parse(&["--max-concurrent-writes", "256"]), Ok(256));
        for refused in ["0", "257", "many"] {
            let error = parse(&["--max-concurrent-writes", refused]).expect_err(refused);
            assert!(error.contains("--max-concurrent-writes"), "{error}");
        }
    }
}
