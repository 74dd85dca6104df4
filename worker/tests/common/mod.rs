//! Helpers shared by the sidecar's tests, on top of the harness's
//! [`TestCluster`] (the emulator by default, or the real cluster in
//! `SHOAL_TEST_KUBECONFIG`, with a fresh namespace per test): writing slice
//! ConfigMaps as the controller does, requests to the
//! localhost server (through `shoal_emulator::http_client`), a TCP partition, and polling with a deadline.

#![allow(dead_code)]

pub mod owner;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use shoal_emulator::Faults;
use shoal_emulator::harness::{KUBECONFIG_ENV, TestCluster};
use shoal_worker::SliceView;
use shoal_worker::slice_doc;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Sidecar settings for tests: a short Lease (6 s, 1 s margin) so that
/// renewals and fencing happen within a test, and quick restarts.
pub fn short_lease_settings(cluster: &Cluster, member: &str) -> shoal_worker::Settings {
    let mut settings = shoal_worker::Settings::for_member(member, cluster.namespace());
    settings.lease_duration = Duration::from_secs(6);
    settings.fence_margin = Duration::from_secs(1);
    settings.stop_grace = Duration::from_secs(5);
    settings.restart_backoff = Duration::from_millis(100);
    settings
}

/// The lines of a log file the test's processes append to (none if absent).
pub fn log_lines(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until the member's Lease acknowledges exactly `slice`.
pub async fn wait_for_ack(cluster: &Cluster, slice: &SliceView, limit: Duration) {
    let expected = Some((slice.revision, slice.hash.clone()));
    eventually(
        &format!("revision {} acknowledged", slice.revision),
        limit,
        || async {
            (lease_ack(&cluster.client(), cluster.namespace(), &slice.member).await == expected)
                .then_some(())
        },
    )
    .await;
}

/// One plan instance, as the controller delivers it beside the jobs.
pub fn web_instance() -> shoal_core::SliceInstance {
    shoal_core::SliceInstance {
        name: "web-0".into(),
        plan: "web".into(),
        deployment: 1,
        applications: vec![shoal_core::InstanceApplication {
            name: "nginx".into(),
            coordinates: [("image".to_owned(), "nginx:1.27".to_owned())].into(),
            ports: Vec::new(),
        }],
    }
}

/// A slice for `member` as the controller would compute it.
pub fn slice(member: &str, revision: u64, jobs: &[&str]) -> SliceView {
    SliceView::new("demo", member, revision, jobs.iter().copied()).expect("valid job keys")
}

/// Writes `<member>-slice` with `document` under `slice.yaml`, as the
/// controller does (server-side apply, owned by a Swarm), retrying through
/// injected API errors (bounded), as a controller would.
pub async fn write_slice_document(
    client: &kube::Client,
    namespace: &str,
    member: &str,
    revision: u64,
    document: String,
) {
    let mut last_error = None;
    for _ in 0..50 {
        match owner::apply_slice_config_map(client, namespace, member, revision, document.clone())
            .await
        {
            Ok(()) => return,
            Err(error) => last_error = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("cannot write the slice ConfigMap of {member}: {last_error:?}");
}

/// Writes a well-formed slice ConfigMap.
pub async fn write_slice(client: &kube::Client, namespace: &str, slice: &SliceView) {
    write_slice_document(
        client,
        namespace,
        &slice.member,
        slice.revision,
        slice_doc::render(slice).expect("renderable slice"),
    )
    .await;
}

/// The member's Lease, if it exists.
pub async fn lease(client: &kube::Client, namespace: &str, member: &str) -> Option<Lease> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    api.get_opt(&shoal_worker::names::member_lease(member))
        .await
        .ok()
        .flatten()
}

/// The acknowledged (revision, hash) on the member's Lease.
pub async fn lease_ack(
    client: &kube::Client,
    namespace: &str,
    member: &str,
) -> Option<(u64, String)> {
    let lease = lease(client, namespace, member).await?;
    let annotations = lease.metadata.annotations?;
    let revision = annotations.get("shoal.dev/acked-revision")?.parse().ok()?;
    let hash = annotations.get("shoal.dev/acked-hash")?.clone();
    Some((revision, hash))
}

/// Polls `check` until it returns `Some`, failing the test after `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub use shoal_emulator::http_client::Response;

/// One request to the sidecar; the whole answer (panics when there is none).
pub async fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Response {
    let headers = [("content-type", "application/json")];
    shoal_emulator::http_client::request(address, method, path, &headers, body)
        .await
        .unwrap_or_else(|error| panic!("{error}"))
}

pub async fn get(address: SocketAddr, path: &str) -> Response {
    request(address, "GET", path, None).await
}

/// A streaming NDJSON reader for `GET /v1/watch`.
pub struct WatchStream {
    lines: shoal_emulator::http_client::Lines,
}

impl WatchStream {
    pub async fn open(address: SocketAddr) -> WatchStream {
        let (status, lines) = shoal_emulator::http_client::stream(address, "/v1/watch")
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(status, 200);
        WatchStream { lines }
    }

    /// The next JSON line, or `None` when the stream ended.
    pub async fn next(&mut self) -> Option<serde_json::Value> {
        let line = self.lines.next_line().await?;
        Some(serde_json::from_str(&line).expect("NDJSON line"))
    }
}

/// A TCP forwarder between the sidecar and the API server that a test can
/// cut (every open connection dropped, new ones refused at once) and heal:
/// a network partition of one member, whatever the API server is.
pub struct Partition {
    address: SocketAddr,
    cut: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Partition {
    pub async fn start(target: SocketAddr) -> Partition {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (cut, cut_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if *cut_rx.borrow() {
                    drop(inbound);
                    continue;
                }
                let mut cut_rx = cut_rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Partition { address, cut, task }
    }

    /// Where clients should connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Drops every connection and refuses new ones until [`Partition::heal`].
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A cluster for one test: [`TestCluster`] (the emulator, or the real
/// cluster in `SHOAL_TEST_KUBECONFIG`) with its fresh namespace, and the
/// conveniences the sidecar's tests share.
pub struct Cluster {
    inner: TestCluster,
}

impl Cluster {
    /// The emulator, or the cluster in `SHOAL_TEST_KUBECONFIG`.
    pub async fn start() -> Cluster {
        // The emulator publishes a new CRD a moment after its creation, as a real
        // server does (owner::slice_owner waits for it).
        let inner = TestCluster::start_with(shoal_emulator::sim::ClusterOptions {
            server: shoal_emulator::ServerOptions {
                crd_publication_delay: std::time::Duration::from_millis(200),
                ..shoal_emulator::ServerOptions::default()
            },
            ..shoal_emulator::sim::ClusterOptions::default()
        })
        .await
        .unwrap_or_else(|error| panic!("cannot start the test cluster: {error}"));
        Cluster { inner }
    }

    /// A client with cluster-admin rights (the test's, and the sidecars').
    pub fn client(&self) -> kube::Client {
        self.inner.client()
    }

    /// The test's own namespace.
    pub fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    /// Whether this is the emulator (not `SHOAL_TEST_KUBECONFIG`).
    pub fn is_emulated(&self) -> bool {
        self.inner.is_emulated()
    }

    /// The kubeconfig for kubectl and the `shoal-worker` binary.
    pub fn kubeconfig_path(&self) -> &std::path::Path {
        self.inner.kubeconfig_path()
    }

    /// Fault injection, on the emulator only.
    pub fn faults(&self) -> Option<Faults> {
        self.inner.faults()
    }

    /// The emulator's fault injection; panics on a real cluster, so call it
    /// only after [`Cluster::skip_unless_emulated`] or [`Cluster::is_emulated`].
    pub fn emulator_faults(&self) -> Faults {
        self.faults()
            .expect("fault injection exists on the emulator only")
    }

    /// `true` (after printing why the test is skipped) on a real cluster, for
    /// tests that need the emulator's fault injection or its address.
    pub fn skip_unless_emulated(&self, test: &str, reason: &str) -> bool {
        if self.is_emulated() {
            return false;
        }
        println!("skipped {test} on {KUBECONFIG_ENV}: {reason}");
        true
    }

    /// The emulated API server's address (for a [`Partition`] in front of
    /// it), read from its kubeconfig; `None` on a real cluster (TLS).
    pub fn api_address(&self) -> Option<SocketAddr> {
        if !self.is_emulated() {
            return None;
        }
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig_path()).ok()?;
        let server = kubeconfig
            .clusters
            .first()?
            .cluster
            .as_ref()?
            .server
            .clone()?;
        server
            .strip_prefix("https://")?
            .trim_end_matches('/')
            .parse()
            .ok()
    }

    /// A client that reaches the emulated API server through `address` (a [`Partition`]),
    /// with the kubeconfig's credentials and CA (the serving certificate is for 127.0.0.1,
    /// whatever the port).
    pub async fn client_via(&self, address: SocketAddr) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(self.kubeconfig_path()).expect("the kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("a client configuration");
        config.cluster_url = format!("https://{address}").parse().expect("proxy URL");
        config.default_namespace = self.namespace().to_string();
        kube::Client::try_from(config).expect("client through the partition")
    }

    /// Runs the real kubectl in the test namespace; panics on failure.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let output = self
            .inner
            .kubectl(args)
            .await
            .and_then(|output| output.ok())
            .unwrap_or_else(|error| panic!("{error}"));
        output.stdout
    }

    /// Deletes the namespace (real cluster) or stops the emulator.
    pub async fn cleanup(self) {
        self.inner.cleanup().await;
    }
}
