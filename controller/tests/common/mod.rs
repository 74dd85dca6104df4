//! Shared helpers of the controller's cluster tests: an emulated cluster, the
//! controller running in-process, kubectl, and polling.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_controller::crd::Swarm;
use shoal_controller::{Settings, run};
use shoal_core::format::parse_slice;
use shoal_emulator::server::ApiServer;

/// An emulated cluster with the Swarm CRD installed.
///
/// Until `shoal_emulator::harness::TestCluster` lands this runs the bare API
/// server: StatefulSets get no pods, so members exist (from `spec.replicas`)
/// but are never Ready.
pub struct Env {
    /// The API server.
    pub server: ApiServer,
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
    /// Starts a cluster and installs the CRD with the real kubectl.
    pub async fn start() -> Env {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_test_writer()
            .try_init();
        let server = ApiServer::start()
            .await
            .expect("emulated API server starts");
        let client = server.client().await.expect("client for the emulator");
        let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crd.yaml");
        let env = Env {
            server,
            client,
            namespace: "default".to_owned(),
        };
        env.kubectl(&["apply", "-f", crd]).await;
        env
    }

    async fn run_kubectl(&self, args: &[&str]) -> std::process::Output {
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.server.kubeconfig_path())
            .arg("--namespace")
            .arg(&self.namespace)
            .args(args)
            .output()
            .await
            .expect("kubectl runs")
    }

    /// Runs kubectl against the cluster in the test namespace; panics on failure.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let output = self.run_kubectl(args).await;
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs kubectl and returns (success, stdout + stderr).
    pub async fn kubectl_status(&self, args: &[&str]) -> (bool, String) {
        let output = self.run_kubectl(args).await;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    }

    /// `kubectl apply -f` of a YAML document.
    pub async fn apply(&self, yaml: &str) {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), yaml).expect("write manifest");
        let path = file.path().to_string_lossy().into_owned();
        self.kubectl(&["apply", "-f", &path]).await;
    }

    /// Starts the controller in-process, watching the test namespace.
    pub fn start_controller(&self) -> Running {
        self.start_controller_with(Settings {
            namespace: Some(self.namespace.clone()),
            resync: Duration::from_secs(5),
            ..Settings::default()
        })
    }

    /// Starts the controller with explicit settings.
    pub fn start_controller_with(&self, settings: Settings) -> Running {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let client = self.client.clone();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(error) = run(client, settings, shutdown).await {
                panic!("controller failed: {error}");
            }
        });
        Running {
            stop: Some(stop),
            task,
        }
    }

    /// A labelled StatefulSet of `replicas` pods and its pods' readiness is simulated.
    pub async fn pool(&self, name: &str, swarm: &str, replicas: u32) {
        self.apply(&format!(
            r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
  labels:
    shoal.dev/swarm: {swarm}
spec:
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
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: example.invalid/app:1
"#
        ))
        .await;
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

    /// How many pods are Ready.
    pub async fn ready_pods(&self) -> usize {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .expect("list pods")
            .items
            .iter()
            .filter(|pod| {
                pod.status
                    .as_ref()
                    .and_then(|status| status.conditions.as_ref())
                    .is_some_and(|conditions| {
                        conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
            })
            .count()
    }

    /// Pod uids by pod name.
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
}

/// A stand-in for the StatefulSet controller and kubelet until the emulator's
/// simulators land: keeps pods `<sts>-0..replicas` of every StatefulSet in the
/// namespace, each Ready `ready_after` after it was created, and removes
/// terminating and surplus pods. Stops when the returned handle is dropped... or aborted.
pub fn simulate_pods(env: &Env, ready_after: Duration) -> tokio::task::JoinHandle<()> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

    let client = env.client.clone();
    let namespace = env.namespace.clone();
    tokio::spawn(async move {
        let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
        let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let mut born: BTreeMap<String, Instant> = BTreeMap::new();
        loop {
            let (Ok(sets), Ok(pods)) = (
                sts_api.list(&ListParams::default()).await,
                pod_api.list(&ListParams::default()).await,
            ) else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let mut existing: BTreeMap<String, Pod> = pods
                .items
                .into_iter()
                .map(|pod| (pod.name_any(), pod))
                .collect();
            for (name, pod) in existing.clone() {
                if pod.metadata.deletion_timestamp.is_some() {
                    let _ = pod_api
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await;
                    existing.remove(&name);
                }
            }
            for sts in &sets.items {
                let set_name = sts.name_any();
                let replicas = sts
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.replicas)
                    .unwrap_or(1);
                for (name, pod) in &existing {
                    let ordinal = name
                        .strip_prefix(&format!("{set_name}-"))
                        .and_then(|ordinal| ordinal.parse::<i32>().ok());
                    let owned = pod.owner_references().iter().any(|o| o.name == set_name);
                    if owned && ordinal.is_some_and(|ordinal| ordinal >= replicas) {
                        let _ = pod_api
                            .delete(name, &DeleteParams::default().grace_period(0))
                            .await;
                    }
                }
                for ordinal in 0..replicas {
                    let name = format!("{set_name}-{ordinal}");
                    match existing.get(&name) {
                        None => {
                            let labels = sts
                                .spec
                                .as_ref()
                                .and_then(|spec| spec.template.metadata.as_ref())
                                .and_then(|meta| meta.labels.clone())
                                .unwrap_or_default();
                            let pod: Pod = serde_json::from_value(serde_json::json!({
                                "metadata": {
                                    "name": name,
                                    "labels": labels,
                                    "ownerReferences": [{
                                        "apiVersion": "apps/v1", "kind": "StatefulSet",
                                        "name": set_name, "uid": sts.uid().unwrap_or_default(),
                                        "controller": true,
                                    }],
                                },
                                "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}],
                                         "terminationGracePeriodSeconds": 0},
                            }))
                            .expect("pod manifest");
                            if let Ok(created) = pod_api.create(&PostParams::default(), &pod).await
                            {
                                born.insert(created.uid().unwrap_or_default(), Instant::now());
                            }
                        }
                        Some(pod) => {
                            let uid = pod.uid().unwrap_or_default();
                            let since = *born.entry(uid).or_insert_with(Instant::now);
                            let ready = pod
                                .status
                                .as_ref()
                                .and_then(|status| status.conditions.as_ref())
                                .is_some_and(|c| {
                                    c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                                });
                            if !ready && since.elapsed() >= ready_after {
                                let status = serde_json::json!({"status": {"phase": "Running", "conditions": [
                                    {"type": "Ready", "status": "True"}
                                ]}});
                                let _ = pod_api
                                    .patch_status(
                                        &name,
                                        &PatchParams::default(),
                                        &Patch::Merge(status),
                                    )
                                    .await;
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
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
