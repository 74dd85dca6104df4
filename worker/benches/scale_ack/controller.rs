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
//!
//! [`WRAPPER_ENV`] names a command to run the child under, a heap profiler for
//! instance (`SHOAL_BENCH_CONTROLLER_WRAPPER='heaptrack -o /tmp/controller'`;
//! words split on whitespace, the child's command line appended). The memory
//! the bench prints is then still the controller's own: it is read from the
//! process running [`CHILD_FLAG`] with this bench's metrics address, found
//! under `/proc`, not from the wrapper; and the controller is stopped with
//! SIGTERM so that the wrapper can finish its report.

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
/// The environment variable naming a command to run the controller under.
pub const WRAPPER_ENV: &str = "SHOAL_BENCH_CONTROLLER_WRAPPER";

/// A running controller process.
pub struct ControllerProcess {
    child: tokio::process::Child,
    /// The controller's own process (not its wrapper's).
    pid: u32,
    /// Whether it runs under a wrapper (see [`WRAPPER_ENV`]).
    wrapped: bool,
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
        let wrapper: Vec<String> = std::env::var(WRAPPER_ENV)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let mut command = match wrapper.split_first() {
            Some((program, arguments)) => {
                let mut command = tokio::process::Command::new(program);
                command.args(arguments).arg(executable);
                command
            }
            None => tokio::process::Command::new(executable),
        };
        let child = command
            .arg(CHILD_FLAG)
            .arg(&kubeconfig)
            .arg(cluster.namespace())
            .arg(metrics_address.to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start the controller process: {error}"));
        let pid = child.id().expect("the controller's pid");
        let mut controller = ControllerProcess {
            child,
            pid,
            wrapped: !wrapper.is_empty(),
            metrics_address,
        };
        controller.metrics().await;
        if controller.wrapped {
            // It serves /metrics, so it runs.
            controller.pid = child_running(metrics_address).unwrap_or_else(|| {
                panic!("no process runs {CHILD_FLAG} with metrics address {metrics_address}")
            });
        }
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

    /// Stops it: kills it, or, under a wrapper, ends it with SIGTERM and waits
    /// for the wrapper to finish.
    pub async fn stop(mut self) {
        if self.wrapped {
            let terminated = i32::try_from(self.pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
                .map(|pid| rustix::process::kill_process(pid, rustix::process::Signal::TERM));
            if let Some(Ok(())) = terminated {
                let _ = self.child.wait().await;
                return;
            }
        }
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// The process running [`CHILD_FLAG`] (its first argument; a wrapper's own
/// command line has it further on) with `metrics_address` (its last),
/// found under `/proc`: the controller when a wrapper started it.
fn child_running(metrics_address: SocketAddr) -> Option<u32> {
    let address = metrics_address.to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let command_line = std::fs::read(entry.path().join("cmdline")).ok()?;
            let arguments: Vec<&[u8]> = command_line
                .split(|byte| *byte == 0)
                .filter(|argument| !argument.is_empty())
                .collect();
            let runs_child = arguments.get(1) == Some(&CHILD_FLAG.as_bytes())
                && arguments.last() == Some(&address.as_bytes());
            runs_child.then_some(pid)
        })
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
