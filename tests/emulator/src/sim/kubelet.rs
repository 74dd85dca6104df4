//! The simulated kubelet: registers its Node (and keeps it Ready with heartbeats,
//! its Lease in `kube-node-lease` and the Node's Ready condition), binds pods
//! through `pods/binding`, starts them (phase Running, Ready, reported only
//! through `pods/status`) after a delay and confirms the termination of deleted
//! pods after their (scaled) grace period. Everything goes through the public
//! API, so it also stands in for kubelets on a real control plane that has none.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::SimError;

/// Annotation opting a pod out of automatic readiness: with value `"true"` the
/// kubelet starts the pod (phase Running) but leaves it not Ready, for tests
/// that drive readiness with [`set_pod_ready`].
pub const MANUAL_READINESS_ANNOTATION: &str = "emulator.shoal.dev/manual-readiness";
/// A readiness gate condition type tests can put in a pod template
/// (`readinessGates: [{conditionType: emulator.shoal.dev/ready}]`) to keep
/// pods unready until [`set_pod_ready`], on the emulator and on a real
/// cluster alike.
pub const READINESS_GATE: &str = "emulator.shoal.dev/ready";
const FIELD_MANAGER: &str = "shoal-emulator-kubelet";

/// How the simulated kubelet behaves.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// Time from seeing a pod to reporting it Running (and Ready).
    pub start_delay: Duration,
    /// Multiplies a deleted pod's grace period (seconds) to get the time the
    /// kubelet waits before confirming termination; 0.01 turns 30 s into
    /// 300 ms.
    pub grace_scale: f64,
    /// The node the kubelet stands for.
    pub node_name: String,
    /// Also run pods without `spec.nodeName` that are for the default
    /// scheduler, binding them to `node_name` through `pods/binding` first (the
    /// emulator has no scheduler). When false, only pods already bound to
    /// `node_name` are run.
    pub schedule: bool,
    /// Only pods of this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// How often the kubelet renews its Node Lease and the Node's Ready
    /// condition (a real kubelet: 10 s; the node lifecycle controller marks a
    /// node unreachable after 40 s without).
    pub heartbeat: Duration,
}

impl Default for KubeletConfig {
    fn default() -> KubeletConfig {
        KubeletConfig {
            start_delay: Duration::from_millis(100),
            grace_scale: 0.01,
            node_name: "shoal-emulator-node".to_owned(),
            schedule: true,
            namespace: None,
            heartbeat: Duration::from_secs(10),
        }
    }
}

/// The simulated kubelet. Runs until dropped.
pub struct Kubelet {
    task: tokio::task::JoinHandle<()>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Kubelet")
    }
}

#[derive(Default)]
struct Seen {
    started: HashSet<String>,
    terminating: HashSet<String>,
}

impl Kubelet {
    /// Starts watching pods and acting on them.
    pub fn start(client: Client, config: KubeletConfig) -> Kubelet {
        let pods: Api<Pod> = match &config.namespace {
            Some(namespace) => Api::namespaced(client.clone(), namespace),
            None => Api::all(client.clone()),
        };
        let config = Arc::new(config);
        let heartbeat = tokio::spawn(keep_node_ready(client.clone(), Arc::clone(&config)));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn(async move {
            let mut events = watcher(pods, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(pod) => observe(&client, &config, &seen, pod),
                    Err(error) => tracing::debug!(%error, "kubelet watch"),
                }
            }
        });
        Kubelet { task, heartbeat }
    }

    /// Stops the kubelet (its Node stays, and goes NotReady on a real cluster).
    pub fn stop(self) {
        self.task.abort();
        self.heartbeat.abort();
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
        self.heartbeat.abort();
    }
}

/// The label marking Nodes a kubelet stand-in registered.
pub const STAND_IN_NODE_LABEL: &str = "shoal.dev/kubelet-stand-in";

/// Registers the Node, then renews its Lease and Ready condition every
/// heartbeat, as a kubelet does, until stopped.
async fn keep_node_ready(client: Client, config: Arc<KubeletConfig>) {
    let registered = now();
    loop {
        if let Err(error) = heartbeat(&client, &config.node_name, &registered).await {
            tracing::debug!(%error, node = config.node_name, "kubelet heartbeat");
        }
        tokio::time::sleep(config.heartbeat).await;
    }
}

/// One heartbeat: the Node exists and is Ready, its Lease renewed.
async fn heartbeat(client: &Client, node: &str, registered: &str) -> Result<(), SimError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let failed = |action: &'static str| {
        let object = node.to_owned();
        move |source| SimError::Api {
            action,
            object,
            source,
        }
    };
    let manifest: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "labels": {
                "kubernetes.io/hostname": node,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                STAND_IN_NODE_LABEL: "true",
            },
        },
    }))
    .map_err(|error| SimError::Invalid {
        object: node.to_owned(),
        problem: error.to_string(),
    })?;
    match nodes.create(&PostParams::default(), &manifest).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(source) => return Err(failed("register node")(source)),
    }
    let now = now();
    let resources = json!({"cpu": "64", "memory": "256Gi", "pods": "1000"});
    let status = json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": node}],
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet stand-in is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": registered,
            }],
        }
    });
    nodes
        .patch_status(node, &kubelet_params(), &Patch::Merge(status))
        .await
        .map_err(failed("report node status"))?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    let renew = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renew},
    });
    leases
        .patch(
            node,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(lease),
        )
        .await
        .map_err(failed("renew node lease"))?;
    Ok(())
}

fn observe(client: &Client, config: &Arc<KubeletConfig>, seen: &Arc<Mutex<Seen>>, pod: Pod) {
    let Some(uid) = pod.uid() else { return };
    let Some(namespace) = pod.namespace() else {
        return;
    };
    let name = pod.name_any();
    let node = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.clone())
        .filter(|node| !node.is_empty());
    // Unbound pods are taken only for the default scheduler (as its stand-in);
    // a pod naming another scheduler waits for that one.
    let default_scheduler = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.scheduler_name.as_deref())
        .is_none_or(|scheduler| scheduler == "default-scheduler");
    let ours = match &node {
        Some(node) => *node == config.node_name,
        None => config.schedule && default_scheduler,
    };
    if !ours {
        return;
    }
    let Ok(mut seen_guard) = seen.lock() else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    if pod.metadata.deletion_timestamp.is_some() {
        if !seen_guard.terminating.insert(uid.clone()) {
            return;
        }
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or(0)
            .max(0);
        let wait = Duration::from_secs_f64(grace as f64 * config.grace_scale.max(0.0));
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            with_retries("confirming termination", &name, || async {
                match api.delete(&name, &params).await {
                    Ok(_) => Ok(()),
                    // Gone already, or a newer pod under the same name.
                    Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                        Ok(())
                    }
                    Err(source) => Err(SimError::Api {
                        action: "confirm termination of",
                        object: name.clone(),
                        source,
                    }),
                }
            })
            .await;
        });
        return;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|status| status.phase.clone())
        .unwrap_or_default();
    if phase == "Running" || phase == "Succeeded" || phase == "Failed" {
        // Started before this kubelet (or by hand): leave its phase alone,
        // but keep Ready in step with its readiness gates as a kubelet does.
        seen_guard.started.insert(uid);
        drop(seen_guard);
        if phase == "Running" && has_readiness_gates(&pod) && ready_is_stale(&pod) {
            tokio::spawn(async move {
                with_retries("syncing readiness with gates", &name, || {
                    sync_ready(&api, &name)
                })
                .await;
            });
        }
        return;
    }
    if !seen_guard.started.insert(uid) {
        return;
    }
    drop(seen_guard);
    let config = Arc::clone(config);
    let manual = pod
        .annotations()
        .get(MANUAL_READINESS_ANNOTATION)
        .is_some_and(|value| value == "true");
    tokio::spawn(async move {
        tokio::time::sleep(config.start_delay).await;
        with_retries("starting pod", &name, || {
            start_pod(&api, &name, node.is_none(), &config, manual)
        })
        .await;
    });
}

/// Attempts of an action that failed (an injected fault, a server hiccup)
/// before the kubelet gives up on it; a pod must not stay Pending, or stay
/// terminating, because one request failed.
const ACTION_ATTEMPTS: u32 = 20;

async fn with_retries<F, Fut>(what: &str, pod: &str, mut action: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), SimError>>,
{
    let mut pause = Duration::from_millis(50);
    for attempt in 1..=ACTION_ATTEMPTS {
        match action().await {
            Ok(()) => return,
            // The pod is gone: nothing left to do.
            Err(SimError::Api {
                source: kube::Error::Api(status),
                ..
            }) if status.code == 404 => return,
            Err(error) => {
                tracing::debug!(%error, attempt, pod, "kubelet: {what} failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
    tracing::warn!(
        pod,
        "kubelet: gave up {what} after {ACTION_ATTEMPTS} attempts"
    );
}

/// How often a status write that lost a race with another writer is redone
/// on a fresh read.
const STATUS_ATTEMPTS: usize = 8;

const KUBELET_CONDITIONS: [&str; 4] = ["PodScheduled", "Initialized", "ContainersReady", "Ready"];

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn condition_is_true(pod: &Pod, kind: &str) -> bool {
    pod.status
        .iter()
        .flat_map(|status| status.conditions.iter().flatten())
        .any(|condition| condition.type_ == kind && condition.status == "True")
}

fn has_readiness_gates(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.readiness_gates.as_ref())
        .is_some_and(|gates| !gates.is_empty())
}

/// Ready differs from ContainersReady and the gates.
fn ready_is_stale(pod: &Pod) -> bool {
    let wanted = condition_is_true(pod, "ContainersReady") && readiness_gates_met(pod);
    condition_is_true(pod, "Ready") != wanted
}

/// The pod's conditions other than the four the kubelet owns (readiness
/// gate conditions and whatever else others wrote), as JSON.
fn foreign_conditions(pod: &Pod) -> Vec<Value> {
    pod.status
        .iter()
        .flat_map(|status| status.conditions.iter().flatten())
        .filter(|condition| !KUBELET_CONDITIONS.contains(&condition.type_.as_str()))
        .filter_map(|condition| serde_json::to_value(condition).ok())
        .collect()
}

fn get_error(object: &str) -> impl FnOnce(kube::Error) -> SimError {
    let object = object.to_owned();
    move |source| SimError::Api {
        action: "get pod",
        object,
        source,
    }
}

/// Sets Ready to ContainersReady and the readiness gates, on a fresh read
/// (retrying when another writer got in between).
async fn sync_ready(api: &Api<Pod>, name: &str) -> Result<(), SimError> {
    let object = format!("{}/{name}", api.namespace().unwrap_or_default());
    for _ in 0..STATUS_ATTEMPTS {
        let Some(pod) = api.get_opt(name).await.map_err(get_error(&object))? else {
            return Ok(());
        };
        if !ready_is_stale(&pod) || pod.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let now = now();
        let ready = condition_is_true(&pod, "ContainersReady") && readiness_gates_met(&pod);
        let mut conditions: Vec<Value> = pod
            .status
            .iter()
            .flat_map(|status| status.conditions.iter().flatten())
            .filter(|condition| condition.type_ != "Ready")
            .filter_map(|condition| serde_json::to_value(condition).ok())
            .collect();
        conditions
            .push(json!({ "type": "Ready", "status": truth(ready), "lastTransitionTime": now }));
        let patch = json!({
            "metadata": { "resourceVersion": pod.metadata.resource_version },
            "status": { "conditions": conditions },
        });
        match api
            .patch_status(name, &kubelet_params(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(error) if is_conflict(&error) => continue,
            Err(source) => {
                return Err(SimError::Api {
                    action: "sync readiness of",
                    object,
                    source,
                });
            }
        }
    }
    Ok(())
}

fn kubelet_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn truth(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

/// Binds the pod if asked, then reports it Running. Readiness is computed
/// from a fresh read, so readiness (or gates) set through `pods/status`
/// before the start are kept rather than overwritten: Ready is
/// ContainersReady (true unless `manual`, where an earlier `set_pod_ready`
/// counts) and every readiness gate.
async fn start_pod(
    api: &Api<Pod>,
    name: &str,
    bind: bool,
    config: &KubeletConfig,
    manual: bool,
) -> Result<(), SimError> {
    let object = format!("{}/{name}", api.namespace().unwrap_or_default());
    if bind && !bind_pod(api, name, &config.node_name).await? {
        return Ok(());
    }
    for _ in 0..STATUS_ATTEMPTS {
        let Some(pod) = api.get_opt(name).await.map_err(get_error(&object))? else {
            return Ok(());
        };
        let phase = pod
            .status
            .as_ref()
            .and_then(|status| status.phase.as_deref())
            .unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() || (!phase.is_empty() && phase != "Pending") {
            // Deleted, failed or started by someone else in the meantime.
            return Ok(());
        }
        let containers_ready = !manual || condition_is_true(&pod, "ContainersReady");
        let ready = containers_ready && readiness_gates_met(&pod);
        let now = now();
        let containers: Vec<Value> = pod
            .spec
            .iter()
            .flat_map(|spec| spec.containers.iter())
            .map(|container| {
                json!({
                    "name": container.name,
                    "image": container.image.clone().unwrap_or_default(),
                    "imageID": "",
                    "ready": containers_ready,
                    "started": true,
                    "restartCount": 0,
                    "state": { "running": { "startedAt": now } },
                })
            })
            .collect();
        let mut conditions = vec![
            json!({ "type": "PodScheduled", "status": "True", "lastTransitionTime": now }),
            json!({ "type": "Initialized", "status": "True", "lastTransitionTime": now }),
            json!({ "type": "ContainersReady", "status": truth(containers_ready), "lastTransitionTime": now }),
            json!({ "type": "Ready", "status": truth(ready), "lastTransitionTime": now }),
        ];
        conditions.extend(foreign_conditions(&pod));
        let status = json!({
            "metadata": { "resourceVersion": pod.metadata.resource_version },
            "status": {
                "phase": "Running",
                "hostIP": "10.0.0.1",
                "podIP": pod_ip(name),
                "podIPs": [{ "ip": pod_ip(name) }],
                "hostIPs": [{ "ip": "10.0.0.1" }],
                "startTime": now,
                "conditions": conditions,
                "containerStatuses": containers,
            }
        });
        match api
            .patch_status(name, &kubelet_params(), &Patch::Merge(status))
            .await
        {
            Ok(_) => return Ok(()),
            Err(error) if is_conflict(&error) => continue,
            Err(source) => {
                return Err(SimError::Api {
                    action: "report running",
                    object,
                    source,
                });
            }
        }
    }
    Err(SimError::Invalid {
        object,
        problem: format!("status kept changing under {STATUS_ATTEMPTS} attempts to start it"),
    })
}

/// Binds the pod to `node` through `pods/binding`, as a scheduler does; false
/// when someone else (a real scheduler) bound it to another node first.
async fn bind_pod(api: &Api<Pod>, name: &str, node: &str) -> Result<bool, SimError> {
    let object = format!("{}/{name}", api.namespace().unwrap_or_default());
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    match api
        .create_subresource::<Value, Value>("binding", name, &PostParams::default(), &binding)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            // Bound already (or being deleted): run it only if it is on our node.
            let pod = api.get_opt(name).await.map_err(get_error(&object))?;
            Ok(pod
                .and_then(|pod| pod.spec.and_then(|spec| spec.node_name))
                .is_some_and(|bound| bound == node))
        }
        Err(source) => Err(SimError::Api {
            action: "bind pod",
            object,
            source,
        }),
    }
}

/// A made-up but stable pod IP.
fn pod_ip(name: &str) -> String {
    let sum = name.bytes().fold(0u32, |sum, byte| {
        sum.wrapping_mul(31).wrapping_add(u32::from(byte))
    });
    format!("10.244.{}.{}", (sum >> 8) % 250 + 1, sum % 250 + 1)
}

/// Every `spec.readinessGates` condition is True in the pod's status (the
/// kubelet keeps a pod with unmet gates not Ready, on a real cluster too).
pub fn readiness_gates_met(pod: &Pod) -> bool {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref());
    pod.spec
        .iter()
        .flat_map(|spec| spec.readiness_gates.iter().flatten())
        .all(|gate| {
            conditions
                .iter()
                .flat_map(|list| list.iter())
                .any(|condition| {
                    condition.type_ == gate.condition_type && condition.status == "True"
                })
        })
}

/// Phase Running and condition Ready=True.
pub fn is_running_and_ready(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

/// Sets a pod's Ready and ContainersReady conditions (and its containers'
/// `ready`) through `pods/status`, the way a kubelet's readiness probe would,
/// and every condition its `spec.readinessGates` name. On a real cluster the
/// real kubelet recomputes Ready from its probes and the gates, so tests that
/// must hold a pod unready there give it a readiness gate (see
/// [`READINESS_GATE`]).
pub async fn set_pod_ready(
    client: &Client,
    namespace: &str,
    name: &str,
    ready: bool,
) -> Result<(), SimError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let object = format!("{namespace}/{name}");
    // The write carries the version it was computed from; when the kubelet
    // (or anyone) wrote in between, read again rather than lose their write.
    let mut last_conflict = None;
    for _ in 0..STATUS_ATTEMPTS {
        let pod = api.get(name).await.map_err(get_error(&object))?;
        let now = now();
        let mut status =
            serde_json::to_value(pod.status.unwrap_or_default()).unwrap_or(Value::Null);
        let mut conditions: Vec<Value> =
            status["conditions"].as_array().cloned().unwrap_or_default();
        let gates: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|spec| spec.readiness_gates.iter().flatten())
            .map(|gate| gate.condition_type.clone())
            .collect();
        for kind in ["ContainersReady", "Ready"]
            .into_iter()
            .chain(gates.iter().map(String::as_str))
        {
            conditions.retain(|condition| condition["type"] != kind);
            conditions
                .push(json!({ "type": kind, "status": truth(ready), "lastTransitionTime": now }));
        }
        status["conditions"] = json!(conditions);
        if let Some(containers) = status["containerStatuses"].as_array_mut() {
            for container in containers {
                container["ready"] = json!(ready);
            }
        }
        let outcome = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": { "resourceVersion": pod.metadata.resource_version },
                    "status": {
                        "conditions": status["conditions"],
                        "containerStatuses": status["containerStatuses"],
                    }
                })),
            )
            .await;
        match outcome {
            Ok(_) => return Ok(()),
            Err(error) if is_conflict(&error) => last_conflict = Some(error),
            Err(source) => {
                return Err(SimError::Api {
                    action: "set readiness of pod",
                    object,
                    source,
                });
            }
        }
    }
    Err(match last_conflict {
        Some(source) => SimError::Api {
            action: "set readiness of pod (kept conflicting)",
            object,
            source,
        },
        None => SimError::Invalid {
            object,
            problem: "readiness could not be written".to_owned(),
        },
    })
}

/// Marks a pod Failed (its containers terminated with exit code 1 and the
/// given reason) through `pods/status`. A StatefulSet controller replaces a
/// failed pod.
pub async fn fail_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Result<(), SimError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let object = format!("{namespace}/{name}");
    let pod = api.get(name).await.map_err(|source| SimError::Api {
        action: "get pod",
        object: object.clone(),
        source,
    })?;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|spec| spec.containers.iter())
        .map(|container| {
            json!({
                "name": container.name,
                "image": container.image.clone().unwrap_or_default(),
                "imageID": "",
                "ready": false,
                "restartCount": 0,
                "state": { "terminated": {
                    "exitCode": 1, "reason": reason, "finishedAt": now, "startedAt": now
                } },
            })
        })
        .collect();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "status": {
                "phase": "Failed",
                "reason": reason,
                "conditions": [
                    { "type": "PodScheduled", "status": "True", "lastTransitionTime": now },
                    { "type": "Initialized", "status": "True", "lastTransitionTime": now },
                    { "type": "ContainersReady", "status": "False", "lastTransitionTime": now },
                    { "type": "Ready", "status": "False", "lastTransitionTime": now },
                ],
                "containerStatuses": containers,
            }
        })),
    )
    .await
    .map_err(|source| SimError::Api {
        action: "fail pod",
        object,
        source,
    })?;
    Ok(())
}
