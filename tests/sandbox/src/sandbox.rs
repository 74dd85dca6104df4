//! The sandbox itself: the emulated cluster, Shoal's CRD and the demo applied
//! with the real kubectl, the controller and one sidecar per member pod.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_controller::api::swarm::Swarm;
use shoal_controller::{LeaderElection, RunError};
use shoal_emulator::ServerOptions;
use shoal_emulator::sim::{Cluster, ClusterOptions, SimError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::convergence::{Converged, Verdict, judge};
use crate::instructions::{Sidecar, StatusApiAccess, Tour};
use crate::kubectl::{Kubectl, KubectlError};
use crate::observe::{self, ObserveError};
use crate::sidecars::{SidecarOptions, Sidecars};

/// How to run the sandbox.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory for the kubeconfig and the members' slice files
    /// (`members/<pod>/slice.yaml`); created if missing.
    pub dir: PathBuf,
    /// Port of the emulated API server on 127.0.0.1 (0: any free port).
    pub port: u16,
    /// Namespace to apply the demo into (created if missing); `None`: the
    /// namespaces its manifests name, else `default`.
    pub namespace: Option<String>,
    /// The CRD manifest applied first.
    pub crd: PathBuf,
    /// The demo: a manifest file or a directory of them (`kubectl apply -f`),
    /// or a kustomization directory (`kubectl apply -k`).
    pub demo: PathBuf,
    /// The kubectl program.
    pub kubectl: String,
    /// Member Lease duration for pods without a `shoal-worker` container
    /// (a pod with one runs with that container's flags).
    pub member_lease: Duration,
    /// Address of the controller's `/metrics`, `/healthz`, `/readyz` server; `None`: no server.
    pub controller_metrics: Option<SocketAddr>,
    /// Address of the deployment status REST endpoint (`/api/v1/deployments/...`; port 0:
    /// any free port, see [`Sandbox::status_api_address`]); `None`: not served. Its RBAC
    /// (`status-api/rbac.yaml` beside the CRD) is applied when it is served.
    pub status_api: Option<SocketAddr>,
    /// Members (pod names) whose sidecar waits for the application's
    /// acknowledgement instead of acknowledging on apply: run an example worker
    /// against each (the demo converges once it acknowledges).
    pub app_ack: Vec<String>,
}

impl Options {
    /// Defaults around `dir`: any free port, the repository's CRD and the
    /// demo in `tests/sandbox/demo` (namespace `default`).
    pub fn new(dir: impl Into<PathBuf>) -> Options {
        Options {
            dir: dir.into(),
            port: 0,
            namespace: None,
            crd: default_crd(),
            demo: default_demo(),
            kubectl: "kubectl".to_owned(),
            member_lease: Duration::from_secs(15),
            controller_metrics: None,
            status_api: None,
            app_ack: Vec::new(),
        }
    }
}

/// `manifests/crd.yaml` of this repository.
pub fn default_crd() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/crd.yaml");
    // Shown to the user: without the `..` when the file is there.
    std::fs::canonicalize(&path).unwrap_or(path)
}

/// `tests/sandbox/demo` of this repository: the seed's 27 streams, a Swarm and a 2-replica pool.
pub fn default_demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("demo")
}

/// Why the sandbox could not start, converge or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox directory could not be prepared.
    #[error("preparing the sandbox directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Another sandbox process uses the directory.
    #[error(
        "the sandbox directory {path} is in use by process {pid} (another shoal-sandbox); stop it or pass --dir"
    )]
    DirInUse {
        /// The directory.
        path: PathBuf,
        /// The other process.
        pid: String,
    },
    /// A manifest to apply does not exist.
    #[error("{what} {path} does not exist")]
    MissingManifest {
        /// Which manifest.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The deployment status endpoint's certificates could not be made or used.
    #[error("the deployment status endpoint's certificates in {dir}: {detail}")]
    StatusApiCertificates {
        /// Where they are written.
        dir: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// The deployment status endpoint could not listen.
    #[error("binding the deployment status endpoint to {address}: {source}")]
    StatusApiBind {
        /// The address asked for.
        address: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The emulated cluster did not start.
    #[error("starting the emulated cluster: {0}")]
    Cluster(#[from] SimError),
    /// A kubectl step failed.
    #[error("{step}: {source}")]
    Kubectl {
        /// What the sandbox was doing.
        step: String,
        /// The kubectl failure.
        #[source]
        source: KubectlError,
    },
    /// Reading the cluster failed.
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// The demo defines no Swarm.
    #[error("the demo {path} defines no Swarm")]
    NoSwarm {
        /// The demo manifests.
        path: PathBuf,
    },
    /// The demo's Swarm has no labelled StatefulSet.
    #[error("no StatefulSet in namespace {namespace} is labelled shoal.dev/swarm={swarm}")]
    NoPool {
        /// The Swarm.
        swarm: String,
        /// The namespace.
        namespace: String,
    },
    /// The controller stopped with an error.
    #[error("the controller stopped: {0}")]
    Controller(#[from] RunError),
    /// The controller task ended unexpectedly (it panicked or was cancelled).
    #[error("the controller task ended: {0}")]
    ControllerTask(#[source] tokio::task::JoinError),
    /// The controller returned without being asked to stop.
    #[error("the controller stopped without being asked to")]
    ControllerExited,
    /// Something did not happen in time.
    #[error("timed out after {timeout:?} waiting for {what}; last saw: {last_seen}")]
    Timeout {
        /// What the sandbox waited for.
        what: String,
        /// How long it waited.
        timeout: Duration,
        /// The last observation.
        last_seen: String,
    },
}

/// The controller running in-process.
struct Controller {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), RunError>>,
}

/// The deployment status endpoint running in-process.
struct StatusEndpoint {
    access: StatusApiAccess,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

/// A running sandbox. Stop it with [`Sandbox::shutdown`]; dropping it stops
/// everything abruptly.
pub struct Sandbox {
    options: Options,
    // Field order is drop order: sidecars and controller before the cluster.
    sidecars: Option<Sidecars>,
    controller: Option<Controller>,
    status_endpoint: Option<StatusEndpoint>,
    cluster: Option<Cluster>,
    client: Client,
    kubectl: Kubectl,
    namespace: String,
    swarm: String,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Sandbox")
            .field("options", &self.options)
            .field("swarm", &self.swarm)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Starts the emulated cluster, applies the CRD and the demo with kubectl,
    /// and starts the controller and the members' sidecars. Returns at once;
    /// see [`Sandbox::wait_converged`].
    pub async fn start(options: Options) -> Result<Sandbox, SandboxError> {
        for (what, path) in [("the CRD", &options.crd), ("the demo", &options.demo)] {
            if !path.exists() {
                return Err(SandboxError::MissingManifest {
                    what,
                    path: path.clone(),
                });
            }
        }
        prepare_dir(&options.dir)?;
        let cluster = Cluster::start_with(ClusterOptions {
            server: ServerOptions {
                kubeconfig_dir: Some(options.dir.clone()),
                port: options.port,
                ..ServerOptions::default()
            },
            ..ClusterOptions::default()
        })
        .await?;
        let client = cluster.client();
        let kubectl = Kubectl::new(options.kubectl.clone(), cluster.kubeconfig_path());
        apply_file(&kubectl, &options.crd, "installing the CRD").await?;
        // The DeploymentPlan CRD beside it, when there: manifests/example ships a plan.
        let plans_crd = options.crd.with_file_name("crd-deploymentplan.yaml");
        if plans_crd.exists() {
            apply_file(&kubectl, &plans_crd, "installing the CRD").await?;
        }
        let apply = match &options.namespace {
            Some(namespace) => {
                ensure_namespace(&kubectl, namespace).await?;
                kubectl.in_namespace(namespace)
            }
            None => kubectl.clone(),
        };
        let demo = options.demo.display().to_string();
        let how = if is_kustomization(&options.demo) {
            "-k"
        } else {
            "-f"
        };
        apply
            .run(&["apply", how, &demo])
            .await
            .map_err(|source| SandboxError::Kubectl {
                step: format!("applying the demo {demo}"),
                source,
            })?;
        let (namespace, swarm) = demo_swarm(&client, &options).await?;
        let status_endpoint = match options.status_api {
            Some(address) => {
                Some(start_status_endpoint(&client, &kubectl, &options, address, &namespace).await?)
            }
            None => None,
        };
        let controller = start_controller(&client, &options, &namespace);
        let sidecars = Sidecars::start(
            client.clone(),
            SidecarOptions {
                namespace: namespace.clone(),
                dir: options.dir.clone(),
                lease: options.member_lease,
                app_ack: options.app_ack.iter().cloned().collect(),
            },
        );
        Ok(Sandbox {
            options,
            sidecars: Some(sidecars),
            controller: Some(controller),
            status_endpoint,
            cluster: Some(cluster),
            client,
            kubectl: kubectl.in_namespace(&namespace),
            namespace,
            swarm,
        })
    }

    /// The kubeconfig of the emulated cluster (for kubectl and `kube`).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.cluster
            .as_ref()
            .map(|cluster| cluster.kubeconfig_path().to_path_buf())
            .unwrap_or_default()
    }

    /// Where the deployment status endpoint listens (`None`: not served).
    pub fn status_api_address(&self) -> Option<SocketAddr> {
        self.status_api_access().map(|access| access.address)
    }

    /// The deployment status endpoint's address, CA and device certificate
    /// (`None`: not served).
    pub fn status_api_access(&self) -> Option<&StatusApiAccess> {
        self.status_endpoint
            .as_ref()
            .map(|endpoint| &endpoint.access)
    }

    /// A client of the emulated cluster.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The demo's namespace (the Swarm's).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The demo's Swarm.
    pub fn swarm(&self) -> &str {
        &self.swarm
    }

    /// kubectl bound to the sandbox's kubeconfig and the demo's namespace.
    pub fn kubectl(&self) -> &Kubectl {
        &self.kubectl
    }

    /// Where member `pod`'s sidecar keeps its slice file.
    pub fn slice_file(&self, pod: &str) -> PathBuf {
        observe::slice_file(&self.options.dir, pod)
    }

    /// One observation of the demo's Swarm.
    pub async fn observe(&self) -> Result<crate::convergence::Observation, SandboxError> {
        Ok(observe::observe(
            &self.client,
            &self.namespace,
            &self.swarm,
            &self.options.dir,
        )
        .await?)
    }

    /// Starts the sandbox in `dir` with the demo, waits for it to converge, applies
    /// `pools` (a manifest of more pools for the demo Swarm) and waits until the
    /// Swarm has converged with `members` members in all.
    pub async fn start_with_pools(
        dir: &Path,
        pools: &Path,
        members: usize,
        timeout: Duration,
    ) -> Result<Sandbox, SandboxError> {
        let mut sandbox = Sandbox::start(Options::new(dir)).await?;
        sandbox.wait_converged(timeout).await?;
        let manifest = pools.display().to_string();
        sandbox
            .kubectl
            .run(&["apply", "-f", &manifest])
            .await
            .map_err(|source| SandboxError::Kubectl {
                step: format!("applying the pools {manifest}"),
                source,
            })?;
        sandbox.wait_converged_with(members, timeout).await?;
        Ok(sandbox)
    }

    /// Waits until the Swarm has converged with exactly `members` slices (a scale
    /// reaches the Swarm a moment after kubectl returns).
    pub async fn wait_converged_with(
        &mut self,
        members: usize,
        timeout: Duration,
    ) -> Result<Converged, SandboxError> {
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let converged = self.wait_converged(remaining).await?;
            if converged.slices.len() == members {
                return Ok(converged);
            }
            if remaining.is_zero() {
                return Err(SandboxError::Timeout {
                    what: format!("Swarm {} to converge with {members} members", self.swarm),
                    timeout,
                    last_seen: format!(
                        "converged with {:?}",
                        converged.slices.keys().collect::<Vec<_>>()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the Swarm is Ready and every member pod acknowledged its
    /// slice and holds it in its file.
    pub async fn wait_converged(&mut self, timeout: Duration) -> Result<Converged, SandboxError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_controller().await?;
            let mut last_seen = match self.observe().await {
                Ok(observation) => match judge(&observation) {
                    Verdict::Converged(converged) => return Ok(converged),
                    Verdict::Pending(reason) => reason,
                },
                Err(error) => error.to_string(),
            };
            if Instant::now() >= deadline {
                if let Some(sidecars) = &self.sidecars {
                    for (pod, failure) in sidecars.failures().await {
                        last_seen.push_str(&format!("; the sidecar of {pod} failed: {failure}"));
                    }
                }
                return Err(SandboxError::Timeout {
                    what: format!("Swarm {} to converge", self.swarm),
                    timeout,
                    last_seen,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Each running sidecar's local API address, by pod.
    pub async fn sidecar_addresses(&self) -> BTreeMap<String, SocketAddr> {
        match &self.sidecars {
            Some(sidecars) => sidecars.addresses().await,
            None => BTreeMap::new(),
        }
    }

    /// Waits until the sidecars of the `app_ack` members run; their addresses.
    pub async fn app_ack_sidecars(
        &self,
        timeout: Duration,
    ) -> Result<BTreeMap<String, SocketAddr>, SandboxError> {
        let deadline = Instant::now() + timeout;
        loop {
            let running = self.sidecar_addresses().await;
            let wanted: BTreeMap<String, SocketAddr> = running
                .into_iter()
                .filter(|(pod, _)| self.options.app_ack.contains(pod))
                .collect();
            if wanted.len() == self.options.app_ack.len() {
                return Ok(wanted);
            }
            if Instant::now() >= deadline {
                return Err(SandboxError::Timeout {
                    what: format!("the sidecars of {}", self.options.app_ack.join(", ")),
                    timeout,
                    last_seen: format!("running: {:?}", wanted.keys().collect::<Vec<_>>()),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The instructions to print for a converged demo.
    pub async fn tour(&self, converged: &Converged) -> Result<Tour, SandboxError> {
        let pools = observe::pools(&self.client, &self.namespace, &converged.swarm).await?;
        let (pool, replicas) = pools
            .into_iter()
            .next()
            .ok_or_else(|| SandboxError::NoPool {
                swarm: converged.swarm.clone(),
                namespace: self.namespace.clone(),
            })?;
        Ok(Tour {
            kubeconfig: self.kubeconfig_path(),
            namespace: self.namespace.clone(),
            converged: converged.clone(),
            pool,
            replicas,
            slice_files: converged
                .slices
                .keys()
                .map(|pod| (pod.clone(), self.slice_file(pod)))
                .collect(),
            exec_logs: converged
                .slices
                .keys()
                .map(|pod| (pod.clone(), observe::exec_log(&self.options.dir, pod)))
                .filter(|(_, log)| log.is_file())
                .collect(),
            plugin: None,
            status_api: self.status_api_access().cloned(),
            sidecars: self
                .sidecar_addresses()
                .await
                .into_iter()
                .map(|(pod, address)| Sidecar {
                    acknowledges_itself: !self.options.app_ack.contains(&pod),
                    pod,
                    address,
                })
                .collect(),
        })
    }

    /// Resolves only when a part of the sandbox stopped on its own, with why.
    pub async fn until_failure(&mut self) -> SandboxError {
        loop {
            if let Err(error) = self.check_controller().await {
                return error;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Fails if the controller stopped on its own.
    async fn check_controller(&mut self) -> Result<(), SandboxError> {
        let finished = self
            .controller
            .as_ref()
            .is_some_and(|controller| controller.task.is_finished());
        if finished && let Some(controller) = self.controller.take() {
            controller
                .task
                .await
                .map_err(SandboxError::ControllerTask)??;
            return Err(SandboxError::ControllerExited);
        }
        Ok(())
    }

    /// Stops the sidecars, the controller (releasing its Lease) and the cluster.
    pub async fn shutdown(mut self) -> Result<(), SandboxError> {
        let mut outcome = Ok(());
        // Sidecars first, as a pod's containers stop before the cluster goes.
        if let Some(sidecars) = self.sidecars.take() {
            sidecars.stop().await;
        }
        if let Some(mut controller) = self.controller.take() {
            if let Some(stop) = controller.stop.take() {
                let _ = stop.send(());
            }
            match tokio::time::timeout(Duration::from_secs(10), &mut controller.task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => outcome = Err(SandboxError::Controller(error)),
                Ok(Err(error)) => outcome = Err(SandboxError::ControllerTask(error)),
                Err(_) => {
                    controller.task.abort();
                    outcome = Err(SandboxError::Timeout {
                        what: "the controller to stop".to_owned(),
                        timeout: Duration::from_secs(10),
                        last_seen: "still running".to_owned(),
                    });
                }
            }
        }
        if let Some(mut endpoint) = self.status_endpoint.take() {
            if let Some(stop) = endpoint.stop.take() {
                let _ = stop.send(());
            }
            if tokio::time::timeout(Duration::from_secs(10), &mut endpoint.task)
                .await
                .is_err()
            {
                endpoint.task.abort();
            }
        }
        if let Some(cluster) = self.cluster.take() {
            cluster.shutdown().await;
        }
        let pid_file = self.options.dir.join(PID_FILE);
        let mine = std::fs::read_to_string(&pid_file)
            .is_ok_and(|owner| owner.trim() == std::process::id().to_string());
        if mine {
            let _ = std::fs::remove_file(&pid_file);
        }
        outcome
    }
}

/// The file naming the process that uses a sandbox directory.
const PID_FILE: &str = "sandbox.pid";

/// The program name of a live process (Linux `/proc/<pid>/comm`).
fn program_of(pid: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|comm| comm.trim().to_owned())
}

/// Creates the sandbox directory, refuses it while another sandbox process
/// uses it, claims it and clears the slice files of a previous run.
fn prepare_dir(dir: &Path) -> Result<(), SandboxError> {
    let error = |source| SandboxError::Dir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(error)?;
    let pid_file = dir.join(PID_FILE);
    let me = std::process::id().to_string();
    if let Ok(owner) = std::fs::read_to_string(&pid_file) {
        let owner = owner.trim().to_owned();
        // A live process running the same program; a stale file (or a reused pid) is taken over.
        let live_sandbox = owner != me
            && program_of(&owner).is_some_and(|program| Some(program) == program_of("self"));
        if live_sandbox {
            return Err(SandboxError::DirInUse {
                path: dir.to_path_buf(),
                pid: owner,
            });
        }
    }
    std::fs::write(&pid_file, &me).map_err(|source| SandboxError::Dir {
        path: pid_file.clone(),
        source,
    })?;
    let members = dir.join("members");
    match std::fs::remove_dir_all(&members) {
        Ok(()) => {}
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(SandboxError::Dir {
                path: members,
                source,
            });
        }
    }
    Ok(())
}

async fn ensure_namespace(kubectl: &Kubectl, namespace: &str) -> Result<(), SandboxError> {
    let manifest = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n");
    let file = tempfile::NamedTempFile::new().map_err(|source| SandboxError::Dir {
        path: std::env::temp_dir(),
        source,
    })?;
    std::fs::write(file.path(), manifest).map_err(|source| SandboxError::Dir {
        path: file.path().to_path_buf(),
        source,
    })?;
    let path = file.path().display().to_string();
    kubectl
        .run(&["apply", "-f", &path])
        .await
        .map(|_| ())
        .map_err(|source| SandboxError::Kubectl {
            step: format!("creating namespace {namespace}"),
            source,
        })
}

/// A directory with a kustomization file.
fn is_kustomization(path: &Path) -> bool {
    ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .any(|name| path.join(name).is_file())
}

/// The demo's Swarm, as (namespace, name): the first by namespace and name
/// (in `options.namespace` when set).
async fn demo_swarm(client: &Client, options: &Options) -> Result<(String, String), SandboxError> {
    let swarms: Api<Swarm> = match &options.namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let list = swarms
        .list(&ListParams::default())
        .await
        .map_err(|source| ObserveError::Api {
            action: "listing Swarms".to_owned(),
            source,
        })?;
    let mut found: Vec<(String, String)> = list
        .items
        .iter()
        .map(|swarm| (swarm.namespace().unwrap_or_default(), swarm.name_any()))
        .collect();
    found.sort();
    found
        .into_iter()
        .next()
        .ok_or_else(|| SandboxError::NoSwarm {
            path: options.demo.clone(),
        })
}

fn start_controller(client: &Client, options: &Options, namespace: &str) -> Controller {
    let settings = shoal_controller::Settings {
        namespace: Some(namespace.to_owned()),
        leader_election: Some(LeaderElection {
            lease_name: "shoal-controller".to_owned(),
            lease_namespace: namespace.to_owned(),
            duration_seconds: 15,
        }),
        identity: "shoal-sandbox".to_owned(),
        metrics_address: options.controller_metrics,
        resync: Duration::from_secs(30),
        ..shoal_controller::Settings::default()
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let client = client.clone();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        shoal_controller::run(client, settings, shutdown).await
    });
    Controller {
        stop: Some(stop),
        task,
    }
}

/// `status-api/rbac.yaml` beside the CRD: the endpoint's reviews and the reader and
/// reporter roles its callers are bound to.
fn status_api_rbac(options: &Options) -> PathBuf {
    options
        .crd
        .parent()
        .unwrap_or(Path::new("."))
        .join("status-api/rbac.yaml")
}

/// Applies the endpoint's RBAC, binds `address` and serves the deployment status
/// endpoint for the demo's namespace, as `shoal-controller --status-api-address` does.
async fn start_status_endpoint(
    client: &Client,
    kubectl: &Kubectl,
    options: &Options,
    address: SocketAddr,
    namespace: &str,
) -> Result<StatusEndpoint, SandboxError> {
    let rbac = status_api_rbac(options);
    if !rbac.exists() {
        return Err(SandboxError::MissingManifest {
            what: "the deployment status endpoint's RBAC",
            path: rbac,
        });
    }
    apply_file(
        kubectl,
        &rbac,
        "applying the deployment status endpoint's RBAC",
    )
    .await?;
    let dir = options.dir.join("status-api");
    let (files, access) = issue_certificates(&dir, address, namespace)?;
    apply_file(kubectl, &access.rbac, "letting the sandbox's device report").await?;
    let config = shoal_controller::status_api::tls::server_config(&files).map_err(|error| {
        SandboxError::StatusApiCertificates {
            dir: dir.clone(),
            detail: error.to_string(),
        }
    })?;
    let bind_error = |source| SandboxError::StatusApiBind { address, source };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(bind_error)?;
    let address = listener.local_addr().map_err(bind_error)?;
    let api = shoal_controller::status_api::StatusApi {
        client: client.clone(),
        namespace: Some(namespace.to_owned()),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        shoal_controller::status_api::serve_tls(listener, config, api, shutdown).await
    });
    Ok(StatusEndpoint {
        access: StatusApiAccess { address, ..access },
        stop: Some(stop),
        task,
    })
}

/// The sandbox's device: its client id, the user RBAC sees.
const DEVICE: &str = "edge-1";

/// Makes a CA, the endpoint's serving certificate and device [`DEVICE`]'s
/// client certificate, both signed by it, and a RoleBinding letting the
/// device report in `namespace`, in `dir`: `ca.crt` (trusted by curl and by the endpoint
/// for client certificates), `tls.crt`/`tls.key`, `edge-1.crt`/`edge-1.key`,
/// `device-rbac.yaml`.
fn issue_certificates(
    dir: &Path,
    address: SocketAddr,
    namespace: &str,
) -> Result<(shoal_controller::status_api::tls::TlsFiles, StatusApiAccess), SandboxError> {
    let failed = |detail: String| SandboxError::StatusApiCertificates {
        dir: dir.to_owned(),
        detail,
    };
    let authority = shoal_emulator::pki::Authority::new("shoal-sandbox-ca").map_err(failed)?;
    let serving = authority.serving("shoal-status-api").map_err(failed)?;
    let device = authority
        .client(DEVICE, &["shoal-sandbox"])
        .map_err(failed)?;
    let rbac = format!(
        "# Lets the sandbox's device (client certificate CN={DEVICE}) report.\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: device-{DEVICE}\n  namespace: {namespace}\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: shoal-deployment-status-reporter\n\
         subjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: shoal-device:{DEVICE}\n"
    );
    let files = [
        ("ca.crt", authority.certificate_pem()),
        ("tls.crt", serving.certificate_pem),
        ("tls.key", serving.key_pem),
        ("edge-1.crt", device.certificate_pem),
        ("edge-1.key", device.key_pem),
        ("device-rbac.yaml", rbac),
    ];
    std::fs::create_dir_all(dir).map_err(|error| failed(error.to_string()))?;
    for (name, text) in files {
        std::fs::write(dir.join(name), text)
            .map_err(|error| failed(format!("writing {name}: {error}")))?;
    }
    let tls = shoal_controller::status_api::tls::TlsFiles {
        certificate: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        client_ca: Some(dir.join("ca.crt")),
        reload: shoal_controller::status_api::tls::RELOAD_INTERVAL,
    };
    let access = StatusApiAccess {
        address,
        ca: dir.join("ca.crt"),
        client_id: DEVICE.to_owned(),
        certificate: dir.join("edge-1.crt"),
        key: dir.join("edge-1.key"),
        rbac: dir.join("device-rbac.yaml"),
    };
    Ok((tls, access))
}

/// `kubectl apply -f path`; a failure names `step` and the file.
async fn apply_file(kubectl: &Kubectl, path: &Path, step: &str) -> Result<(), SandboxError> {
    let file = path.display().to_string();
    kubectl
        .run(&["apply", "-f", &file])
        .await
        .map(|_| ())
        .map_err(|source| SandboxError::Kubectl {
            step: format!("{step} {file}"),
            source,
        })
}
