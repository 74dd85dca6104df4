//! The test harness: a cluster per test (the emulator by default, or the
//! cluster in `SHOAL_TEST_KUBECONFIG`), a fresh namespace, the real `kubectl`,
//! and a polling helper that says what it last saw.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use tokio::io::AsyncWriteExt;

mod crds;
pub mod fixtures;
pub mod process;

pub use crds::{CRD_PUBLICATION_TIMEOUT, install_crd, wait_for_crd};

use crate::Faults;
use crate::sim::{Cluster, ClusterOptions, Kubelet, KubeletConfig, SimError};

/// Environment variable naming a real cluster's kubeconfig; when set, tests
/// run against that cluster instead of the emulator.
pub const KUBECONFIG_ENV: &str = "SHOAL_TEST_KUBECONFIG";
/// Environment variable saying the cluster in [`KUBECONFIG_ENV`] has no kubelets
/// (an API server, controller-manager and scheduler only): with `1`, each test
/// runs a kubelet stand-in ([`Kubelet`]) for its namespace on the Node
/// [`STAND_IN_NODE`], which binds the namespace's pods, marks them Running and
/// Ready and confirms their termination.
pub const NO_KUBELET_ENV: &str = "SHOAL_TEST_NO_KUBELET";
/// The Node the kubelet stand-ins register on a cluster without kubelets (one
/// for every test; each stand-in runs only its own namespace's pods).
pub const STAND_IN_NODE: &str = "shoal-kubelet-stand-in";
/// How long cleanup on a cluster without kubelets waits for the test namespace
/// to be gone (the stand-in confirms its pods' termination meanwhile).
const STAND_IN_CLEANUP: Duration = Duration::from_secs(60);

/// Environment variable overriding the kubectl binary (default `kubectl` on
/// PATH, which is /usr/bin/kubectl here).
pub const KUBECTL_ENV: &str = "SHOAL_KUBECTL";

/// What can go wrong while giving a test a cluster.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Starting the emulated cluster failed.
    #[error("starting the emulated cluster: {0}")]
    Emulator(#[from] SimError),
    /// The kubeconfig in `SHOAL_TEST_KUBECONFIG` could not be used.
    #[error("kubeconfig {path} (from {KUBECONFIG_ENV}): {reason}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why it could not be used.
        reason: String,
    },
    /// Creating the test namespace failed.
    #[error("creating namespace {namespace}: {source}")]
    CreateNamespace {
        /// The namespace.
        namespace: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// kubectl could not be run at all.
    #[error("cannot run kubectl ({program}): {source}; install kubectl v1.32 or set {KUBECTL_ENV}")]
    KubectlMissing {
        /// The program tried.
        program: String,
        /// Why it could not be started.
        #[source]
        source: std::io::Error,
    },
    /// kubectl ran and failed where the caller expected success.
    #[error("kubectl {args} exited with {code:?}: {stderr}")]
    KubectlFailed {
        /// The arguments.
        args: String,
        /// Exit code.
        code: Option<i32>,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A ServiceAccount token could not be requested.
    #[error("requesting a token for ServiceAccount {account}: {source}")]
    Token {
        /// `namespace/name`.
        account: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A CustomResourceDefinition could not be installed.
    #[error("CustomResourceDefinition {name}: {reason}")]
    Crd {
        /// The CRD (or the manifest's path).
        name: String,
        /// What went wrong.
        reason: String,
    },
    /// A condition did not hold in time.
    #[error("timed out after {timeout:?} waiting for {what}; last saw: {last_seen}")]
    Timeout {
        /// What the test waited for.
        what: String,
        /// How long it waited.
        timeout: Duration,
        /// The last observation.
        last_seen: String,
    },
}

/// One poll of [`wait_for`]: done with a value, or not yet with a description
/// of what was seen.
#[derive(Debug)]
pub enum Check<T> {
    /// The condition holds.
    Done(T),
    /// Not yet; this is what the probe saw.
    Pending(String),
}

/// Polls `probe` every 50 ms until it returns [`Check::Done`]; after
/// `timeout` fails with the last thing the probe saw.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut probe: F,
) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Check<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last_seen = match probe().await {
            Check::Done(value) => return Ok(value),
            Check::Pending(seen) => seen,
        };
        if Instant::now() >= deadline {
            return Err(HarnessError::Timeout {
                what: what.to_owned(),
                timeout,
                last_seen,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What kubectl did.
#[derive(Debug, Clone)]
pub struct KubectlOutput {
    /// The arguments (after `--kubeconfig` and `-n`).
    pub args: Vec<String>,
    /// Exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl KubectlOutput {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The output if kubectl succeeded, otherwise an error carrying stderr.
    pub fn ok(self) -> Result<KubectlOutput, HarnessError> {
        if self.success() {
            Ok(self)
        } else {
            Err(HarnessError::KubectlFailed {
                args: self.args.join(" "),
                code: self.code,
                stderr: self.stderr,
            })
        }
    }
}

enum Backend {
    Emulator(Box<Cluster>),
    Real {
        kubeconfig: PathBuf,
        /// The kubelet stand-in of a cluster without kubelets.
        stand_in: Option<Kubelet>,
    },
}

/// Whether [`NO_KUBELET_ENV`] asks for a kubelet stand-in.
fn without_kubelets() -> bool {
    std::env::var(NO_KUBELET_ENV).is_ok_and(|value| value == "1" || value == "true")
}

/// A kubelet stand-in running the pods of `namespace` on [`STAND_IN_NODE`].
fn stand_in(client: &Client, namespace: &str) -> Kubelet {
    Kubelet::start(
        client.clone(),
        KubeletConfig {
            node_name: STAND_IN_NODE.to_owned(),
            namespace: Some(namespace.to_owned()),
            ..KubeletConfig::default()
        },
    )
}

/// A cluster for one test with its own namespace. With the emulator, dropping
/// it stops the emulator; on a real cluster, dropping it deletes the
/// namespace (prefer [`TestCluster::cleanup`] in async code).
pub struct TestCluster {
    backend: Option<Backend>,
    client: Client,
    namespace: String,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TestCluster")
            .field("namespace", &self.namespace)
            .field("emulated", &self.is_emulated())
            .finish_non_exhaustive()
    }
}

fn random_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default(),
    );
    hasher.write_u32(std::process::id());
    let mut value = hasher.finish();
    let alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..8)
        .map(|_| {
            let digit = (value % 36) as usize;
            value /= 36;
            alphabet[digit] as char
        })
        .collect()
}

impl TestCluster {
    /// The emulator with default options, or the cluster in
    /// `SHOAL_TEST_KUBECONFIG`; either way with a fresh namespace.
    pub async fn start() -> Result<TestCluster, HarnessError> {
        TestCluster::start_with(ClusterOptions::default()).await
    }

    /// As [`TestCluster::start`], with emulator options (ignored on a real
    /// cluster).
    pub async fn start_with(options: ClusterOptions) -> Result<TestCluster, HarnessError> {
        match std::env::var_os(KUBECONFIG_ENV) {
            Some(path) if !path.is_empty() => {
                TestCluster::connect(Path::new(&path), without_kubelets()).await
            }
            _ => {
                let cluster = Cluster::start_with(options).await?;
                let client = cluster.client();
                TestCluster::with_namespace(Backend::Emulator(Box::new(cluster)), client).await
            }
        }
    }

    /// The cluster of `kubeconfig` (what `SHOAL_TEST_KUBECONFIG` names) with a
    /// fresh namespace; `without_kubelets` (what `SHOAL_TEST_NO_KUBELET` says)
    /// runs a kubelet stand-in for that namespace.
    pub async fn connect(
        kubeconfig: &Path,
        without_kubelets: bool,
    ) -> Result<TestCluster, HarnessError> {
        let client = real_client(kubeconfig).await?;
        let backend = Backend::Real {
            kubeconfig: kubeconfig.to_path_buf(),
            stand_in: None,
        };
        let mut cluster = TestCluster::with_namespace(backend, client).await?;
        if without_kubelets && let Some(Backend::Real { stand_in: slot, .. }) = &mut cluster.backend
        {
            *slot = Some(stand_in(&cluster.client, &cluster.namespace));
        }
        Ok(cluster)
    }

    async fn with_namespace(backend: Backend, client: Client) -> Result<TestCluster, HarnessError> {
        let namespace = format!("shoal-test-{}", random_suffix());
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let object = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(namespace.clone()),
                labels: Some([("shoal.dev/test".to_owned(), "true".to_owned())].into()),
                ..Default::default()
            },
            ..Namespace::default()
        };
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .map_err(|source| HarnessError::CreateNamespace {
                namespace: namespace.clone(),
                source,
            })?;
        Ok(TestCluster {
            backend: Some(backend),
            client,
            namespace,
        })
    }

    /// A client (default namespace of the kubeconfig; use
    /// [`TestCluster::namespace`] for `Api::namespaced`).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The test's own namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether this is the emulator (not `SHOAL_TEST_KUBECONFIG`).
    pub fn is_emulated(&self) -> bool {
        matches!(self.backend, Some(Backend::Emulator(_)))
    }

    /// The kubeconfig kubectl and other processes should use.
    pub fn kubeconfig_path(&self) -> &Path {
        match &self.backend {
            Some(Backend::Emulator(cluster)) => cluster.kubeconfig_path(),
            Some(Backend::Real { kubeconfig, .. }) => kubeconfig,
            None => Path::new(""),
        }
    }

    /// The emulated API server's audit log: every authorization decision (emulator only).
    pub fn audit(&self) -> Option<crate::Audit> {
        match &self.backend {
            Some(Backend::Emulator(cluster)) => Some(cluster.api().audit()),
            _ => None,
        }
    }

    /// A token for ServiceAccount `namespace/account` from the TokenRequest API (as a
    /// kubelet gets one for a pod), bound to `pod` when given: its user then carries the
    /// pod's name and uid, and the token stops working when the pod is gone.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        account: &str,
        pod: Option<&str>,
    ) -> Result<String, HarnessError> {
        let mut spec = serde_json::json!({"expirationSeconds": 3600});
        if let Some(pod) = pod {
            let pods: Api<k8s_openapi::api::core::v1::Pod> =
                Api::namespaced(self.client.clone(), namespace);
            let uid = pods
                .get(pod)
                .await
                .map_err(|source| HarnessError::Token {
                    account: format!("{namespace}/{account}"),
                    source,
                })?
                .metadata
                .uid
                .unwrap_or_default();
            spec["boundObjectRef"] =
                serde_json::json!({"kind": "Pod", "apiVersion": "v1", "name": pod, "uid": uid});
        }
        let request = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": spec,
        });
        let url = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token");
        let http_request = http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&request).unwrap_or_default())
            .map_err(|error| HarnessError::Token {
                account: format!("{namespace}/{account}"),
                source: kube::Error::HttpError(error),
            })?;
        let response: serde_json::Value =
            self.client
                .request(http_request)
                .await
                .map_err(|source| HarnessError::Token {
                    account: format!("{namespace}/{account}"),
                    source,
                })?;
        Ok(response["status"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// A kube client that authenticates with `token` (and trusts the cluster's CA).
    pub async fn client_with_token(&self, token: &str) -> Result<Client, HarnessError> {
        self.client_with(|auth| {
            *auth = kube::config::AuthInfo {
                token: Some(token.to_owned().into()),
                ..kube::config::AuthInfo::default()
            }
        })
        .await
    }

    /// A kube client for this cluster with the credentials passed through `edit`.
    async fn client_with(
        &self,
        edit: impl Fn(&mut kube::config::AuthInfo),
    ) -> Result<Client, HarnessError> {
        let mut config = self.config().await?;
        edit(&mut config.auth_info);
        Client::try_from(config).map_err(|error| HarnessError::Kubeconfig {
            path: self.kubeconfig_path().to_path_buf(),
            reason: error.to_string(),
        })
    }

    /// A kubeconfig file (next to `directory`) for the same cluster that authenticates
    /// with `token`, for kubectl and other processes run as that identity.
    pub fn kubeconfig_with_token(
        &self,
        directory: &Path,
        name: &str,
        token: &str,
    ) -> Result<PathBuf, HarnessError> {
        self.write_kubeconfig(directory, name, |auth| {
            *auth = kube::config::AuthInfo {
                token: Some(token.to_owned().into()),
                ..kube::config::AuthInfo::default()
            }
        })
    }

    /// This cluster's kubeconfig with each user's credentials passed through `edit`,
    /// written to `<directory>/<name>.kubeconfig`.
    fn write_kubeconfig(
        &self,
        directory: &Path,
        name: &str,
        edit: impl Fn(&mut kube::config::AuthInfo),
    ) -> Result<PathBuf, HarnessError> {
        let path = directory.join(format!("{name}.kubeconfig"));
        let failed = |reason: String| HarnessError::Kubeconfig {
            path: path.clone(),
            reason,
        };
        let mut kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig_path())
            .map_err(|error| failed(error.to_string()))?;
        for user in &mut kubeconfig.auth_infos {
            edit(user.auth_info.get_or_insert_with(Default::default));
        }
        let text =
            serde_saphyr::to_string(&kubeconfig).map_err(|error| failed(error.to_string()))?;
        std::fs::write(&path, text).map_err(|error| failed(error.to_string()))?;
        Ok(path)
    }

    async fn config(&self) -> Result<kube::Config, HarnessError> {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(self.kubeconfig_path()).map_err(|error| {
                HarnessError::Kubeconfig {
                    path: self.kubeconfig_path().to_path_buf(),
                    reason: error.to_string(),
                }
            })?;
        kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|error| HarnessError::Kubeconfig {
            path: self.kubeconfig_path().to_path_buf(),
            reason: error.to_string(),
        })
    }

    /// Fault injection, on the emulator only (`None` on a real cluster).
    pub fn faults(&self) -> Option<Faults> {
        match &self.backend {
            Some(Backend::Emulator(cluster)) => Some(cluster.faults()),
            _ => None,
        }
    }

    /// Request statistics of the emulated API server (`None` on a real cluster).
    pub fn request_stats(&self) -> Option<crate::RequestStats> {
        match &self.backend {
            Some(Backend::Emulator(cluster)) => Some(cluster.request_stats()),
            _ => None,
        }
    }

    /// A kube client with this cluster's credentials that impersonates `user` in
    /// `groups` (see [`TestCluster::kubeconfig_as`]).
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Result<Client, HarnessError> {
        self.client_with(|auth| impersonate(auth, user, groups))
            .await
    }

    /// A kubeconfig file (in `directory`) for the same cluster and credentials that
    /// impersonates `user` in `groups` (`kubectl --as --as-group`), so that the API
    /// server tells a process's requests from the others' (the emulator's
    /// [`crate::RequestStats`] and audit log count them under `user`). The
    /// kubeconfig's own user must be allowed to impersonate (the administrator is).
    pub fn kubeconfig_as(
        &self,
        directory: &Path,
        user: &str,
        groups: &[&str],
    ) -> Result<PathBuf, HarnessError> {
        self.write_kubeconfig(directory, user, |auth| impersonate(auth, user, groups))
    }

    /// Runs the real kubectl with `--kubeconfig <this cluster>` and
    /// `-n <namespace>` before `args`, capturing its output. A non-zero exit
    /// is not an error here (see [`KubectlOutput::ok`]).
    pub async fn kubectl(&self, args: &[&str]) -> Result<KubectlOutput, HarnessError> {
        self.kubectl_with_stdin(args, None).await
    }

    /// As [`TestCluster::kubectl`], feeding `stdin` (for `-f -`).
    pub async fn kubectl_with_stdin(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<KubectlOutput, HarnessError> {
        let program = std::env::var(KUBECTL_ENV).unwrap_or_else(|_| "kubectl".to_owned());
        let mut command = tokio::process::Command::new(&program);
        command
            .arg("--kubeconfig")
            .arg(self.kubeconfig_path())
            .arg("-n")
            .arg(&self.namespace)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|source| HarnessError::KubectlMissing {
                program: program.clone(),
                source,
            })?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A failed write shows up as kubectl's own error on stderr.
            let _ = pipe.write_all(input.as_bytes()).await;
            drop(pipe);
        }
        let output = child
            .wait_with_output()
            .await
            .map_err(|source| HarnessError::KubectlMissing { program, source })?;
        Ok(KubectlOutput {
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// [`wait_for`] with this cluster (convenience for tests).
    pub async fn wait_for<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        probe: F,
    ) -> Result<T, HarnessError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Check<T>>,
    {
        wait_for(what, timeout, probe).await
    }

    /// Deletes the namespace (real cluster) or stops the emulator.
    pub async fn cleanup(mut self) {
        match self.backend.take() {
            Some(Backend::Emulator(cluster)) => cluster.shutdown().await,
            Some(Backend::Real { stand_in, .. }) => {
                delete_namespace(&self.client, &self.namespace).await;
                if stand_in.is_some() {
                    namespace_gone(&self.client, &self.namespace).await;
                }
            }
            None => {}
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Some(Backend::Real {
            kubeconfig,
            stand_in: running,
        }) = self.backend.take()
        {
            // Drop cannot await; a helper thread with its own runtime deletes
            // the namespace so that a failed test still cleans up (with a
            // stand-in of its own confirming the pods' termination, as the
            // test's runtime is blocked here).
            let namespace = self.namespace.clone();
            let needs_stand_in = running.is_some();
            drop(running);
            let cleanup = std::thread::spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async move {
                    if let Ok(client) = real_client(&kubeconfig).await {
                        delete_namespace(&client, &namespace).await;
                        if needs_stand_in {
                            let _running = stand_in(&client, &namespace);
                            namespace_gone(&client, &namespace).await;
                        }
                    }
                });
            });
            let _ = cleanup.join();
        }
    }
}

/// Credentials that impersonate `user` in `groups`.
fn impersonate(auth: &mut kube::config::AuthInfo, user: &str, groups: &[&str]) {
    auth.impersonate = Some(user.to_owned());
    auth.impersonate_groups = Some(groups.iter().map(|group| (*group).to_owned()).collect());
}

async fn delete_namespace(client: &Client, namespace: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Err(error) = namespaces
        .delete(namespace, &DeleteParams::background())
        .await
    {
        tracing::warn!(%error, namespace, "deleting the test namespace");
    }
}

/// Waits (at most [`STAND_IN_CLEANUP`]) until the namespace is gone.
async fn namespace_gone(client: &Client, namespace: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let outcome = wait_for(
        "the test namespace to be deleted",
        STAND_IN_CLEANUP,
        || async {
            match namespaces.get_opt(namespace).await {
                Ok(None) => Check::Done(()),
                Ok(Some(_)) => Check::Pending(format!("namespace {namespace} still terminating")),
                Err(error) => Check::Pending(error.to_string()),
            }
        },
    )
    .await;
    if let Err(error) = outcome {
        tracing::warn!(%error, namespace, "cleanup");
    }
}

async fn real_client(kubeconfig: &Path) -> Result<Client, HarnessError> {
    let error = |reason: String| HarnessError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        reason,
    };
    let parsed =
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| error(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .map_err(|e| error(e.to_string()))?;
    Client::try_from(config).map_err(|e| error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_suffixes_are_valid_dns_labels_and_differ() {
        let first = random_suffix();
        let second = random_suffix();
        assert_eq!(first.len(), 8);
        assert!(
            first
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_ne!(first, second);
    }

    #[tokio::test]
    async fn wait_for_reports_the_last_observation_on_timeout() {
        let mut polls = 0;
        let outcome: Result<(), HarnessError> =
            wait_for("three", Duration::from_millis(120), || {
                polls += 1;
                let seen = polls;
                async move { Check::Pending(format!("poll {seen}")) }
            })
            .await;
        let message = outcome
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.contains("waiting for three"), "{message}");
        assert!(
            message.contains(&format!("last saw: poll {polls}")),
            "{message}"
        );
    }
}
