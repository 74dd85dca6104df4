//! The controller in its own process, so that its peak memory is its own: this
//! bench binary run again with [`CHILD_FLAG`], which runs the controller's
//! library (`shoal_controller::run_with_clients`, what the `shoal-controller`
//! binary runs) and nothing else. A re-run of this binary rather than the
//! `shoal-controller` binary because cargo builds another package's binary
//! only for that package's own tests and benches; this way
//! `cargo bench -p shoal-worker --bench scale_ack` always measures the
//! controller code it was built with.
//!
//! The child talks to the API server as user [`IDENTITY`] (impersonated, in
//! group `system:masters`), so the API server's request statistics tell its
//! requests from the sidecars' and the bench's.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use shoal_emulator::harness::TestCluster;
use shoal_emulator::harness::process::{self, Memory};

/// The argument that makes this binary the controller.
pub const CHILD_FLAG: &str = "--controller-child";
/// The controller's user at the API server.
pub const IDENTITY: &str = "shoal-controller";

/// A running controller process.
pub struct ControllerProcess {
    child: tokio::process::Child,
    pid: u32,
    metrics_address: SocketAddr,
}

impl ControllerProcess {
    /// Starts the controller on `namespace` (its kubeconfig written in
    /// `directory`) and waits until it serves `/metrics`.
    pub async fn start(cluster: &TestCluster, directory: &Path) -> ControllerProcess {
        let kubeconfig = cluster
            .kubeconfig_as(directory, IDENTITY, &["system:masters"])
            .unwrap_or_else(|error| panic!("cannot write the controller's kubeconfig: {error}"));
        let metrics_address = process::free_local_address()
            .unwrap_or_else(|error| panic!("no port for the controller's /metrics: {error}"));
        let executable = std::env::current_exe().expect("the bench binary's path");
        let child = tokio::process::Command::new(executable)
            .arg(CHILD_FLAG)
            .arg(&kubeconfig)
            .arg(cluster.namespace())
            .arg(metrics_address.to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start the controller process: {error}"));
        let pid = child.id().expect("the controller's pid");
        let controller = ControllerProcess {
            child,
            pid,
            metrics_address,
        };
        controller.metrics().await;
        controller
    }

    /// Its memory now (`VmHWM`, the peak so far, and `VmRSS`).
    pub fn memory(&self) -> Memory {
        process::memory_of(self.pid).unwrap_or_default()
    }

    /// Its `/metrics` text.
    pub async fn metrics(&self) -> String {
        process::scrape_metrics(self.metrics_address, Duration::from_secs(30))
            .await
            .unwrap_or_else(|error| panic!("the controller's /metrics: {error}"))
    }

    /// Stops it.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// The child's side: `CHILD_FLAG <kubeconfig> <namespace> <metrics address>`.
/// Logs on stderr at the level `SHOAL_BENCH_LOG` sets (default `warn`).
pub fn run_child(arguments: &[String]) {
    let [kubeconfig, namespace, metrics_address] = arguments else {
        panic!("{CHILD_FLAG} takes <kubeconfig> <namespace> <metrics address>, got {arguments:?}");
    };
    let metrics_address: SocketAddr = metrics_address
        .parse()
        .unwrap_or_else(|error| panic!("metrics address {metrics_address}: {error}"));
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("SHOAL_BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)
            .unwrap_or_else(|error| panic!("kubeconfig {kubeconfig}: {error}"));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|error| panic!("kubeconfig: {error}"));
        let clients = shoal_controller::Clients::from_config(config)
            .unwrap_or_else(|error| panic!("kube client: {error}"));
        let settings = shoal_controller::Settings {
            namespace: Some(namespace.clone()),
            identity: IDENTITY.to_owned(),
            metrics_address: Some(metrics_address),
            ..shoal_controller::Settings::default()
        };
        let outcome =
            shoal_controller::run_with_clients(clients, settings, std::future::pending()).await;
        if let Err(error) = outcome {
            panic!("the controller stopped: {error}");
        }
    });
}
