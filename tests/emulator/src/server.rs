//! The emulated Kubernetes API server.
//!
//! [`ApiServer::start`] binds 127.0.0.1 on a free port, serves the
//! Kubernetes REST API over plain HTTP and writes a kubeconfig that both the
//! `kube` client and `kubectl` accept. State lives in memory and is lost when
//! the server stops. [`Faults`] injects failures for tests; [`RequestStats`]
//! counts requests for benchmarks.

// ApiError carries a full Status (message, causes); it is returned once per
// request, so its size does not matter.
#![allow(clippy::result_large_err)]

mod admission;
mod apply;
mod auth;
mod binding;
mod cel_cost;
mod crd_cost;
mod discovery;
mod endpoint_slices;
mod errors;
mod events;
mod eviction;
mod handlers;
mod http;
pub mod identity;
mod jsonpath;
mod lifecycle;
mod limits;
mod patch;
mod protobuf;
mod rbac;
mod registry;
mod request_stats;
mod reviews;
mod schema_rules;
mod selectors;
mod store;
mod table;
mod tls;
mod validation;
mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch as signal;

pub use http::AuditEntry;
pub use identity::UserInfo;
pub use request_stats::{RequestCounts, RequestKey, RequestStats, RequestTally};
pub use store::ObjectKey;

/// Failures of starting the server or building a client for it.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot bind 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("cannot create the kubeconfig directory: {0}")]
    KubeconfigDir(std::io::Error),
    #[error("cannot write the kubeconfig {path}: {source}")]
    WriteKubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the kubeconfig {path} is not accepted by kube: {reason}")]
    LoadKubeconfig { path: PathBuf, reason: String },
    #[error("cannot build a kube client: {0}")]
    Client(#[from] kube::Error),
    #[error("cannot make the server's TLS certificates: {0}")]
    Certificates(String),
}

/// Options of [`ApiServer::start_with`].
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How many changes the watch history keeps; a watch resuming from a
    /// version older than that gets 410 Gone.
    pub watch_history: usize,
    /// Where to write the kubeconfig; a temporary directory owned by the
    /// server when `None`.
    pub kubeconfig_dir: Option<PathBuf>,
    /// How often an idle watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Port to bind (0 = any free port).
    pub port: u16,
    /// How long after its creation a CustomResourceDefinition is Established
    /// and its types served (discovery, OpenAPI, the resource paths). A real
    /// server takes a moment; zero publishes at once.
    pub crd_publication_delay: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            watch_history: 100_000,
            kubeconfig_dir: None,
            bookmark_interval: Duration::from_secs(10),
            port: 0,
            crd_publication_delay: Duration::ZERO,
        }
    }
}

/// One armed "fail the next N requests" rule.
#[derive(Debug, Clone)]
struct FailRule {
    remaining: usize,
    verb: Option<String>,
    resource: Option<String>,
    status: u16,
}

#[derive(Debug, Default)]
struct FaultState {
    fail_rules: Vec<FailRule>,
    latency: Duration,
    conflicts: Vec<String>,
    /// Write requests held now and the most held at once, by resource.
    writes_in_flight: std::collections::BTreeMap<String, InFlight>,
}

/// Write requests of one resource the server holds now, and the most it held at once.
#[derive(Debug, Default, Clone, Copy)]
struct InFlight {
    now: usize,
    peak: usize,
}

/// Verbs that change the store: what [`Faults::peak_writes_in_flight`] counts.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// One write request the server holds, counted in flight until dropped.
pub(crate) struct HeldWrite {
    faults: Faults,
    resource: String,
}

impl Drop for HeldWrite {
    fn drop(&mut self) {
        if let Some(count) = self.faults.lock().writes_in_flight.get_mut(&self.resource) {
            count.now = count.now.saturating_sub(1);
        }
    }
}

/// Fault injection handle (cheap to clone; all clones act on one server).
///
/// Faults apply to resource requests only (not to discovery, `/version` or
/// OpenAPI), so that clients can still find their way to the failure.
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
    drop_watches: Arc<signal::Sender<u64>>,
}

impl Faults {
    fn new() -> Faults {
        let (drop_watches, _) = signal::channel(0);
        Faults {
            state: Arc::new(Mutex::new(FaultState::default())),
            drop_watches: Arc::new(drop_watches),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Ends every open watch stream (clients see a clean end of stream and
    /// must re-watch).
    pub fn drop_all_watches(&self) {
        self.drop_watches.send_modify(|epoch| *epoch += 1);
    }

    /// Fails the next `n` resource requests matching `verb` (get, list,
    /// watch, create, update, patch, delete, deletecollection) and
    /// `resource` (plural, e.g. `pods` or `pods/status`); `None` matches any.
    /// `status` is the HTTP code, typically 500 or 429.
    pub fn fail_next(&self, n: usize, verb: Option<&str>, resource: Option<&str>, status: u16) {
        self.lock().fail_rules.push(FailRule {
            remaining: n,
            verb: verb.map(str::to_owned),
            resource: resource.map(str::to_owned),
            status,
        });
    }

    /// How many armed failures ([`Faults::fail_next`]) no request has met yet.
    pub fn unserved_failures(&self) -> usize {
        self.lock()
            .fail_rules
            .iter()
            .map(|rule| rule.remaining)
            .sum()
    }

    /// Delays every resource request by `latency` (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Makes the next update (PUT or PATCH, main resource or subresource) of
    /// `resource` fail with 409 Conflict.
    pub fn conflict_next_update(&self, resource: &str) {
        self.lock().conflicts.push(resource.to_owned());
    }

    /// The most write requests (create, update, patch, delete, deletecollection) of
    /// `resource` (plural, e.g. `configmaps`, or `pods/status`) the server held at once
    /// since it started, from their arrival to their answer (the latency included): with
    /// [`Faults::set_latency`], how many writes a client had in flight together.
    pub fn peak_writes_in_flight(&self, resource: &str) -> usize {
        self.lock()
            .writes_in_flight
            .get(resource)
            .map_or(0, |count| count.peak)
    }

    /// Counts a request in flight until the guard is dropped, when it is a write.
    pub(crate) fn hold(
        &self,
        verb: &str,
        resource: &str,
        subresource: Option<&str>,
    ) -> Option<HeldWrite> {
        if !WRITE_VERBS.contains(&verb) {
            return None;
        }
        let resource = match subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        };
        let mut state = self.lock();
        let count = state.writes_in_flight.entry(resource.clone()).or_default();
        count.now += 1;
        count.peak = count.peak.max(count.now);
        Some(HeldWrite {
            faults: self.clone(),
            resource,
        })
    }

    pub(crate) fn latency(&self) -> Duration {
        self.lock().latency
    }

    /// The status to fail this request with, consuming one armed failure.
    pub(crate) fn take_failure(
        &self,
        verb: &str,
        resource: &str,
        subresource: Option<&str>,
    ) -> Option<u16> {
        let full = subresource.map(|sub| format!("{resource}/{sub}"));
        let mut state = self.lock();
        let matches = |wanted: &Option<String>, actual: &str, full: Option<&str>| {
            wanted
                .as_deref()
                .is_none_or(|wanted| wanted == actual || Some(wanted) == full)
        };
        let index = state.fail_rules.iter().position(|rule| {
            rule.remaining > 0
                && matches(&rule.verb, verb, None)
                && matches(&rule.resource, resource, full.as_deref())
        })?;
        let rule = &mut state.fail_rules[index];
        rule.remaining -= 1;
        let status = rule.status;
        if rule.remaining == 0 {
            state.fail_rules.remove(index);
        }
        Some(status)
    }

    pub(crate) fn take_conflict(&self, resource: &str, subresource: Option<&str>) -> bool {
        let full = subresource.map(|sub| format!("{resource}/{sub}"));
        let mut state = self.lock();
        let index = state
            .conflicts
            .iter()
            .position(|wanted| wanted == resource || Some(wanted) == full.as_ref());
        match index {
            Some(index) => {
                state.conflicts.remove(index);
                true
            }
            None => false,
        }
    }

    pub(crate) fn drop_signal(&self) -> signal::Receiver<u64> {
        self.drop_watches.subscribe()
    }
}

/// A running emulated API server. Dropping it stops serving.
#[derive(Debug)]
pub struct ApiServer {
    address: SocketAddr,
    shared: Arc<http::Shared>,
    kubeconfig: PathBuf,
    _kubeconfig_dir: Option<tempfile::TempDir>,
    faults: Faults,
    request_stats: RequestStats,
    shutdown: signal::Sender<bool>,
    serving: Option<tokio::task::JoinHandle<()>>,
}

impl ApiServer {
    /// Starts a server with default options on a free port.
    pub async fn start() -> Result<ApiServer, ServerError> {
        ApiServer::start_with(ServerOptions::default()).await
    }

    /// Starts a server with the given options.
    pub async fn start_with(options: ServerOptions) -> Result<ApiServer, ServerError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", options.port))
            .await
            .map_err(|source| ServerError::Bind {
                port: options.port,
                source,
            })?;
        let address = listener.local_addr().map_err(|source| ServerError::Bind {
            port: options.port,
            source,
        })?;
        let (kubeconfig_dir, directory) = match &options.kubeconfig_dir {
            Some(directory) => {
                std::fs::create_dir_all(directory).map_err(ServerError::KubeconfigDir)?;
                (None, directory.clone())
            }
            None => {
                let temporary = tempfile::Builder::new()
                    .prefix("shoal-emulator-")
                    .tempdir()
                    .map_err(ServerError::KubeconfigDir)?;
                let path = temporary.path().to_path_buf();
                (Some(temporary), path)
            }
        };
        let certificates = tls::certificates().map_err(ServerError::Certificates)?;
        let options_port = options.port;
        let faults = Faults::new();
        let request_stats = RequestStats::default();
        let (shutdown, shutdown_signal) = signal::channel(false);
        let shared = Arc::new(http::Shared::new(
            options,
            faults.clone(),
            request_stats.clone(),
            shutdown_signal.clone(),
            address,
        ));
        let kubeconfig = directory.join("kubeconfig");
        let kubeconfig_document =
            kubeconfig_text(address, shared.tokens.admin(), &certificates.ca_pem);
        std::fs::write(&kubeconfig, kubeconfig_document).map_err(|source| {
            ServerError::WriteKubeconfig {
                path: kubeconfig.clone(),
                source,
            }
        })?;
        let router = http::router(shared.clone());
        let listener =
            tls::TlsListener::new(listener, certificates.config.clone()).map_err(|source| {
                ServerError::Bind {
                    port: options_port,
                    source,
                }
            })?;
        let mut stop = shutdown_signal;
        let serving = tokio::spawn(async move {
            let graceful = async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            };
            if let Err(error) = axum::serve(listener, router)
                .with_graceful_shutdown(graceful)
                .await
            {
                tracing::warn!(%error, "emulated API server stopped with an error");
            }
        });
        Ok(ApiServer {
            address,
            shared,
            kubeconfig,
            _kubeconfig_dir: kubeconfig_dir,
            faults,
            request_stats,
            shutdown,
            serving: Some(serving),
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// The kubeconfig (cluster, user and context named `shoal-emulator`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The kube `Config` the kubeconfig describes (default namespace
    /// `default`). Note that kube retries 429/503/504 by default
    /// (`default_retry`), honouring `Retry-After`; tests that expect to see a
    /// 429 (eviction against a budget, injected faults) turn that off.
    pub async fn config(&self) -> Result<kube::Config, ServerError> {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&self.kubeconfig).map_err(|error| {
                ServerError::LoadKubeconfig {
                    path: self.kubeconfig.clone(),
                    reason: error.to_string(),
                }
            })?;
        kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|error| ServerError::LoadKubeconfig {
            path: self.kubeconfig.clone(),
            reason: error.to_string(),
        })
    }

    /// A `kube` client built from the kubeconfig (see [`ApiServer::config`]).
    pub async fn client(&self) -> Result<kube::Client, ServerError> {
        Ok(kube::Client::try_from(self.config().await?)?)
    }

    /// The fault injection handle.
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// The request statistics handle: requests and body bytes by user, verb and
    /// resource.
    pub fn request_stats(&self) -> RequestStats {
        self.request_stats.clone()
    }

    /// The administrator's bearer token (also in the kubeconfig).
    pub fn admin_token(&self) -> String {
        self.shared.tokens.admin().to_owned()
    }

    /// Every authorization decision so far (bounded), oldest first: who did what, and
    /// whether RBAC allowed it.
    pub fn audit(&self) -> Audit {
        Audit {
            shared: self.shared.clone(),
        }
    }

    /// Stops serving: open watches end, then the listener closes.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(serving) = self.serving.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), serving).await;
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// A handle on the server's audit log (cheap to clone).
#[derive(Clone)]
pub struct Audit {
    shared: Arc<http::Shared>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Audit")
    }
}

impl Audit {
    /// The entries recorded so far, oldest first.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.shared
            .audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

fn kubeconfig_text(address: SocketAddr, token: &str, ca_pem: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: shoal-emulator
  cluster:
    server: https://{address}
    certificate-authority-data: {ca}
users:
- name: shoal-emulator
  user:
    token: {token}
contexts:
- name: shoal-emulator
  context:
    cluster: shoal-emulator
    user: shoal-emulator
    namespace: default
current-context: shoal-emulator
preferences: {{}}
"
    )
}
