//! Shared helpers of the controller's cluster tests: a cluster per test from
//! `shoal_emulator::harness::TestCluster` (the emulator with its simulated
//! StatefulSet controller and kubelet, or the cluster in
//! `SHOAL_TEST_KUBECONFIG`), a fresh namespace, the controller running
//! in-process, the real kubectl, and polling.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_controller::api::swarm::Swarm;
use shoal_controller::{Clients, Settings, run_with_clients};
use shoal_core::format::parse_slice;
use shoal_core::{Assignment, JobSet, MemberId};
use shoal_emulator::harness::TestCluster;
use shoal_emulator::harness::fixtures::PAUSE_IMAGE;
use shoal_emulator::sim::ClusterOptions;
use shoal_emulator::{Faults, ServerOptions};

/// How long the emulator takes to publish a new CRD in these tests.
const CRD_PUBLICATION_DELAY: Duration = Duration::from_millis(200);

/// A cluster with the Swarm CRD installed and a namespace of the test's own.
/// Pods of StatefulSets are created by the (simulated or real) StatefulSet
/// controller and become Ready through the kubelet.
pub struct Env {
    /// The cluster.
    pub cluster: TestCluster,
    /// A client for it.
    pub client: Client,
    /// The test's namespace.
    pub namespace: String,
}

/// The controller running in-process; dropping it does not stop it, `stop` does.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the controller as a crash would: at once, between any two writes.
    pub async fn kill(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
        self.stop.take();
    }

    /// Stops the controller gracefully.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
    }
}

impl Env {
    /// Starts a cluster (the emulator, or `SHOAL_TEST_KUBECONFIG`) with a fresh
    /// namespace, installs the CRD with the real kubectl and waits until it is
    /// served.
    pub async fn start() -> Env {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_test_writer()
            .try_init();
        // The emulator publishes a new CRD a moment after its creation, as a real
        // server does, so that the tests wait for it as they must there.
        let cluster = TestCluster::start_with(ClusterOptions {
            server: ServerOptions {
                crd_publication_delay: CRD_PUBLICATION_DELAY,
                ..ServerOptions::default()
            },
            ..ClusterOptions::default()
        })
        .await
        .expect("a test cluster starts");
        let client = cluster.client();
        let namespace = cluster.namespace().to_owned();
        let env = Env {
            cluster,
            client,
            namespace,
        };
        let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crd.yaml");
        env.cluster
            .install_crd_file(Path::new(crd))
            .await
            .unwrap_or_else(|error| panic!("installing the Swarm CRD: {error}"));
        env
    }

    /// Installs the DeploymentPlan CRD with kubectl, as a user does, and waits
    /// until it is served.
    pub async fn install_plan_crd(&self) {
        let crd = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../manifests/crd-deploymentplan.yaml"
        );
        self.cluster
            .install_crd_file(Path::new(crd))
            .await
            .unwrap_or_else(|error| panic!("installing the DeploymentPlan CRD: {error}"));
    }

    /// As [`Env::start`], for tests that need the emulator (fault injection):
    /// on a real cluster prints why the test is skipped and returns `None`.
    pub async fn start_emulated(why: &str) -> Option<Env> {
        let env = Env::start().await;
        if env.cluster.is_emulated() {
            Some(env)
        } else {
            println!("skipped on a real cluster: {why}");
            env.finish().await;
            None
        }
    }

    /// Fault injection (the emulator only).
    pub fn faults(&self) -> Faults {
        self.cluster
            .faults()
            .expect("fault injection needs the emulator (use Env::start_emulated)")
    }

    /// The kubeconfig of the cluster (for kubectl and other processes).
    pub fn kubeconfig_path(&self) -> &Path {
        self.cluster.kubeconfig_path()
    }

    /// Deletes the namespace (real cluster) or stops the emulator.
    pub async fn finish(self) {
        self.cluster.cleanup().await;
    }

    /// Runs kubectl against the cluster in the test namespace; panics on failure.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let output = self.cluster.kubectl(args).await.expect("kubectl runs");
        assert!(
            output.success(),
            "kubectl {args:?} failed: {}{}",
            output.stdout,
            output.stderr
        );
        output.stdout
    }

    /// Runs kubectl and returns (success, stdout + stderr).
    pub async fn kubectl_status(&self, args: &[&str]) -> (bool, String) {
        let output = self.cluster.kubectl(args).await.expect("kubectl runs");
        (
            output.success(),
            format!("{}{}", output.stdout, output.stderr),
        )
    }

    /// `kubectl apply -f -` of a YAML document.
    pub async fn apply(&self, yaml: &str) {
        let output = self
            .cluster
            .kubectl_with_stdin(&["apply", "-f", "-"], Some(yaml))
            .await
            .expect("kubectl runs");
        assert!(
            output.success(),
            "kubectl apply failed: {}{}\n{yaml}",
            output.stdout,
            output.stderr
        );
    }

    /// Starts the controller in-process, watching the test namespace.
    pub fn start_controller(&self) -> Running {
        self.start_controller_with(Settings {
            namespace: Some(self.namespace.clone()),
            resync: Duration::from_secs(5),
            ..Settings::default()
        })
    }

    /// The controller's clients, as its binary makes them (evictions without retries).
    pub fn controller_clients(&self) -> Clients {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(self.kubeconfig_path()).expect("the kubeconfig");
        let config = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            ))
        })
        .expect("a client configuration");
        Clients::from_config(config).expect("clients")
    }

    /// Starts the controller with explicit settings.
    pub fn start_controller_with(&self, settings: Settings) -> Running {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let clients = self.controller_clients();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(error) = run_with_clients(clients, settings, shutdown).await {
                panic!("controller failed: {error}");
            }
        });
        Running {
            stop: Some(stop),
            task,
        }
    }

    /// A StatefulSet of `replicas` pause pods labelled for `swarm`; its pods
    /// are created by the StatefulSet controller and become Ready.
    pub async fn pool(&self, name: &str, swarm: &str, replicas: u32) {
        self.statefulset(name, Some(swarm), replicas, false).await;
    }

    /// A StatefulSet of `replicas` pause pods, labelled for `swarm` if given.
    /// `gated` pods carry the emulator's readiness gate: they stay unready
    /// until [`Env::set_ready`] (on a real cluster too).
    pub async fn statefulset(&self, name: &str, swarm: Option<&str>, replicas: u32, gated: bool) {
        let labels = swarm.map_or(String::new(), |swarm| {
            format!("  labels:\n    shoal.dev/swarm: {swarm}\n")
        });
        let gate = if gated {
            format!(
                "      readinessGates:\n      - conditionType: {}\n",
                shoal_emulator::sim::READINESS_GATE
            )
        } else {
            String::new()
        };
        self.apply(&format!(
            r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
{labels}spec:
  replicas: {replicas}
  serviceName: {name}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
{gate}      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: {PAUSE_IMAGE}
"#
        ))
        .await;
    }

    /// Sets a pod's readiness (and its readiness gate) through `pods/status`.
    pub async fn set_ready(&self, pod: &str, ready: bool) {
        shoal_emulator::sim::set_pod_ready(&self.client, &self.namespace, pod, ready)
            .await
            .expect("set pod readiness");
    }

    /// Marks a gated pod Ready once the kubelet reported it running (it writes the
    /// pod's conditions then, which would undo an earlier mark).
    pub async fn set_ready_once_running(&self, pod: &str) {
        eventually(
            &format!("{pod} running"),
            Duration::from_secs(60),
            || async {
                let pod = Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
                    .get_opt(pod)
                    .await
                    .ok()??;
                (pod.status?.phase.as_deref() == Some("Running")).then_some(())
            },
        )
        .await;
        self.set_ready(pod, true).await;
    }

    /// Waits until `count` pods of `pool` exist, all Ready; returns their uids by name.
    pub async fn ready_pool(&self, pool: &str, count: u32) -> BTreeMap<String, String> {
        shoal_emulator::harness::fixtures::wait_for_ready_pods(
            &self.client,
            &self.namespace,
            pool,
            count,
            Duration::from_secs(60),
        )
        .await
        .expect("the pool's pods become Ready")
        .into_values()
        .map(|pod| (pod.name_any(), pod.uid().unwrap_or_default()))
        .collect()
    }

    /// The Swarm.
    pub async fn swarm(&self, name: &str) -> Swarm {
        Api::<Swarm>::namespaced(self.client.clone(), &self.namespace)
            .get(name)
            .await
            .expect("Swarm exists")
    }

    /// Slice ConfigMaps of a Swarm by member.
    pub async fn slice_maps(&self, swarm: &str) -> BTreeMap<String, ConfigMap> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        api.list(&ListParams::default().labels(&format!("shoal.dev/swarm={swarm}")))
            .await
            .expect("list ConfigMaps")
            .items
            .into_iter()
            .filter_map(|cm| {
                let member = cm.labels().get("shoal.dev/member")?.clone();
                Some((member, cm))
            })
            .collect()
    }

    /// Jobs per member, parsed from the slice ConfigMaps.
    pub async fn slices(&self, swarm: &str) -> BTreeMap<String, Vec<String>> {
        self.slice_maps(swarm)
            .await
            .into_iter()
            .filter_map(|(member, cm)| {
                let text = cm.data.as_ref()?.get("slice.yaml")?;
                let slice = parse_slice(text).ok()?;
                Some((
                    member,
                    slice
                        .jobs
                        .iter()
                        .map(|key| key.as_str().to_owned())
                        .collect(),
                ))
            })
            .collect()
    }

    /// How many pods of the namespace are Ready and not terminating.
    pub async fn ready_pods(&self) -> usize {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .expect("list pods")
            .items
            .iter()
            .filter(|pod| {
                pod.metadata.deletion_timestamp.is_none()
                    && shoal_emulator::sim::is_running_and_ready(pod)
            })
            .count()
    }

    /// Uids of the pods not being deleted, by pod name.
    pub async fn pod_uids(&self) -> BTreeMap<String, String> {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .expect("list pods")
            .items
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .map(|pod| (pod.name_any(), pod.uid().unwrap_or_default()))
            .collect()
    }

    /// Waits until the Swarm has `revision` in force with phase Ready.
    pub async fn in_force(&self, swarm: &str, revision: u64, timeout: Duration) {
        eventually(
            &format!("revision {revision} of {swarm} in force"),
            timeout,
            || async {
                let status = self.swarm(swarm).await.status?;
                (status.current_revision == revision && status.phase.as_deref() == Some("Ready"))
                    .then_some(())
            },
        )
        .await;
    }

    /// Lets the controller make several passes (resync is 5 s in tests) and checks that
    /// they changed nothing: `revision` is still the one in force and the latest given,
    /// and the slices are still `slices`.
    pub async fn passes_change_nothing(
        &self,
        swarm: &str,
        revision: u64,
        slices: &BTreeMap<String, Vec<String>>,
    ) {
        tokio::time::sleep(Duration::from_secs(8)).await;
        let status = self.swarm(swarm).await.status.expect("status");
        assert_eq!(
            (status.current_revision, status.latest_revision),
            (revision, revision),
            "no new revision: {status:?}"
        );
        assert_eq!(&self.slices(swarm).await, slices, "nothing moved");
    }

    /// Approves the pending revision as a user does with kubectl alone: annotates the
    /// Swarm with the value `status.pendingRevision.approveWith` gives. Returns that value.
    pub async fn approve_pending(&self, swarm: &str) -> String {
        let value = self
            .kubectl(&[
                "get",
                "swarm",
                swarm,
                "-o",
                "jsonpath={.status.pendingRevision.approveWith}",
            ])
            .await;
        assert!(!value.is_empty(), "Swarm {swarm} has no pending revision");
        self.annotate_approval(swarm, &value).await;
        value
    }

    /// Annotates `shoal.dev/approve=<value>` on a Swarm.
    pub async fn annotate_approval(&self, swarm: &str, value: &str) {
        self.kubectl(&[
            "annotate",
            "swarm",
            swarm,
            &format!("shoal.dev/approve={value}"),
            "--overwrite",
        ])
        .await;
    }

    /// The namespace's Events, one `<reason>: <message>` per line (kubectl's YAML output
    /// wraps long messages).
    pub async fn event_messages(&self) -> String {
        self.kubectl(&[
            "get",
            "events",
            "-o",
            r#"jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}"#,
        ])
        .await
    }

    /// The namespace's Events as YAML (`kubectl get events -o yaml`).
    pub async fn events(&self) -> String {
        self.kubectl(&["get", "events", "-o", "yaml"]).await
    }
}

/// Writes (or rewrites) the member Lease of `pod` the way the sidecar does.
pub async fn acknowledge(env: &Env, pod: &str, revision: u64, hash: &str) {
    let name = format!("{pod}-member");
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let lease: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "labels": {"shoal.dev/member": pod},
            "annotations": {"shoal.dev/acked-revision": revision.to_string(), "shoal.dev/acked-hash": hash},
        },
        "spec": {"holderIdentity": pod, "leaseDurationSeconds": 60, "renewTime": now},
    }))
    .expect("lease manifest");
    write_member_lease(env, &lease).await;
}

/// Writes `pod`'s member Lease reporting plan instance `states` as its sidecar
/// would (held by the pod, owned by it, uid `uid`), or as `holder` when another
/// writer pretends to speak for it.
pub async fn report_instance_states(
    env: &Env,
    pod: &str,
    uid: &str,
    holder: &str,
    states: serde_json::Value,
) {
    let lease: k8s_openapi::api::coordination::v1::Lease =
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("{pod}-member"),
                "labels": {"shoal.dev/member": pod},
                "annotations": {"shoal.dev/instance-states": states.to_string()},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}],
            },
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 60},
        }))
        .expect("lease manifest");
    write_member_lease(env, &lease).await;
}

/// Creates a member Lease, or applies it over the one there (field manager
/// `test-sidecar`).
async fn write_member_lease(env: &Env, lease: &k8s_openapi::api::coordination::v1::Lease) {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client.clone(), &env.namespace);
    let name = lease.name_any();
    if api.get_opt(&name).await.expect("get lease").is_some() {
        api.patch(
            &name,
            &kube::api::PatchParams::apply("test-sidecar").force(),
            &kube::api::Patch::Apply(lease),
        )
        .await
        .expect("patch lease");
    } else {
        api.create(&kube::api::PostParams::default(), lease)
            .await
            .expect("create lease");
    }
}

/// The revision and hash of the slice written for `pod` of Swarm `demo`.
pub async fn slice_hash(env: &Env, pod: &str) -> (u64, String) {
    let maps = env.slice_maps("demo").await;
    let text = maps[pod].data.as_ref().unwrap()["slice.yaml"].clone();
    let slice = parse_slice(&text).expect("valid slice");
    (slice.revision, slice.hash)
}

/// Polls the slices of `swarm` until `stop` is set; returns every moment a job was in two
/// slices at once (the ownership oracle: revoke before grant means this never happens).
pub async fn two_owner_sightings(env: &Env, swarm: &str, stop: &AtomicBool) -> Vec<String> {
    let mut sightings = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let slices = env.slices(swarm).await;
        // Each pod is a member of its own; the pool does not matter to the check.
        let assignment = Assignment::from_slices(slices.iter().map(|(pod, jobs)| {
            (
                MemberId::generated("pool", pod.clone()),
                JobSet::parse(jobs.iter().cloned()).expect("valid jobs"),
            )
        }));
        if let Err(error) = assignment {
            sightings.push(format!("{error}: {slices:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sightings
}

/// Every key exactly once across the slices, sorted.
pub fn all_jobs(slices: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut all: Vec<String> = slices.values().flatten().cloned().collect();
    all.sort();
    all
}

/// Polls `check` until it returns `Some`, or panics naming `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Job keys `stream:000`…
pub fn job_keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("stream:{i:03}")).collect()
}

/// A Swarm manifest with inline jobs and extra spec lines (indented by two spaces).
pub fn swarm_yaml(name: &str, jobs: &[String], extra_spec: &str) -> String {
    let mut yaml = format!(
        "apiVersion: shoal.dev/v1alpha1\nkind: Swarm\nmetadata:\n  name: {name}\nspec:\n  jobs:\n"
    );
    for job in jobs {
        yaml.push_str(&format!("  - \"{job}\"\n"));
    }
    yaml.push_str(extra_spec);
    yaml
}

/// A DeploymentPlan `name` of the Swarm `demo`: one application needing no resources,
/// `instances` of it, every operation approved by hand (`policy: Manual`).
pub fn manual_plan_yaml(name: &str, instances: u32) -> String {
    format!(
        r#"apiVersion: shoal.dev/v1alpha1
kind: DeploymentPlan
metadata:
  name: {name}
spec:
  swarm: demo
  applications:
  - name: nginx
  approval: {{policy: Manual}}
  deployment:
    instances: {instances}
    payloads:
    - application: nginx
      coordinates: {{image: "nginx:1"}}
"#
    )
}

/// Every uid each pod name has had, by pod name.
pub type PodUids =
    std::sync::Arc<std::sync::Mutex<BTreeMap<String, std::collections::BTreeSet<String>>>>;

/// Records every uid each pod name has, from a watch started now: a pod recreated
/// under its name (a restart) shows as a second uid.
pub fn record_pod_uids(env: &Env) -> PodUids {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen = PodUids::default();
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let sink = seen.clone();
    tokio::spawn(async move {
        let mut pods = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(pod)) = pods.next().await {
            if let Some(uid) = pod.uid() {
                sink.lock()
                    .unwrap()
                    .entry(pod.name_any())
                    .or_default()
                    .insert(uid);
            }
        }
    });
    seen
}
