//! The simulated kubelet, driven through `kube` on a [`TestCluster`]:
//! pods start Running and Ready, readiness gates and `pods/status` drive
//! readiness (as on a real cluster), failure is reported through the API.
//! The start delay, the grace-period wait and the manual-readiness annotation
//! are the emulator's own knobs, so those tests skip on a real cluster.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use shoal_emulator::harness::fixtures::PAUSE_IMAGE;
use shoal_emulator::harness::{Check, TestCluster};
use shoal_emulator::sim::{
    ClusterOptions, KubeletConfig, MANUAL_READINESS_ANNOTATION, READINESS_GATE, fail_pod,
    is_running_and_ready, set_pod_ready,
};

const TIMEOUT: Duration = Duration::from_secs(60);

fn pod(name: &str, gated: bool, annotations: serde_json::Value) -> Pod {
    let gates = if gated {
        json!([{ "conditionType": READINESS_GATE }])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "metadata": { "name": name, "annotations": annotations },
        "spec": {
            "terminationGracePeriodSeconds": 10,
            "readinessGates": gates,
            "containers": [{ "name": "app", "image": PAUSE_IMAGE }],
        }
    }))
    .expect("pod literal")
}

fn pods(cluster: &TestCluster) -> Api<Pod> {
    Api::namespaced(cluster.client(), cluster.namespace())
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.clone())
        .unwrap_or_default()
}

fn condition(pod: &Pod, kind: &str) -> String {
    pod.status
        .iter()
        .flat_map(|status| status.conditions.iter().flatten())
        .find(|condition| condition.type_ == kind)
        .map(|condition| condition.status.clone())
        .unwrap_or_else(|| "absent".to_owned())
}

fn describe(pod: &Pod) -> String {
    format!(
        "phase {:?}, Ready {}, gate {}",
        phase(pod),
        condition(pod, "Ready"),
        condition(pod, READINESS_GATE)
    )
}

/// Waits until `done` holds for the pod.
async fn wait_for_pod(
    cluster: &TestCluster,
    name: &str,
    what: &str,
    done: impl Fn(&Pod) -> bool,
) -> Pod {
    let api = pods(cluster);
    cluster
        .wait_for(what, TIMEOUT, || async {
            match api.get_opt(name).await {
                Ok(Some(pod)) if done(&pod) => Check::Done(pod),
                Ok(Some(pod)) => Check::Pending(describe(&pod)),
                Ok(None) => Check::Pending("absent".to_owned()),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect(what)
}

fn running(pod: &Pod) -> bool {
    phase(pod) == "Running"
}

#[tokio::test]
async fn the_kubelet_starts_a_pod_running_and_ready_only_after_its_start_delay() {
    let delay = Duration::from_millis(800);
    let cluster = TestCluster::start_with(ClusterOptions {
        kubelet: KubeletConfig {
            start_delay: delay,
            ..KubeletConfig::default()
        },
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    if !cluster.is_emulated() {
        println!("skipped: the start delay is the emulated kubelet's setting");
        return;
    }
    let api = pods(&cluster);
    let before_create = Instant::now();
    api.create(&PostParams::default(), &pod("solo", false, json!({})))
        .await
        .expect("create");
    tokio::time::sleep(delay / 4).await;
    let early = api.get("solo").await.expect("get");
    assert!(
        !running(&early) && !is_running_and_ready(&early),
        "started before the delay: {}",
        describe(&early)
    );
    let started = wait_for_pod(&cluster, "solo", "Running and Ready", is_running_and_ready).await;
    assert!(
        before_create.elapsed() >= delay,
        "Running after {:?}, before the {delay:?} delay",
        before_create.elapsed()
    );
    let spec = started.spec.as_ref().expect("spec");
    assert_eq!(
        spec.node_name.as_deref(),
        Some(KubeletConfig::default().node_name.as_str()),
        "the kubelet binds an unscheduled pod to its node"
    );
    let status = started.status.as_ref().expect("status");
    assert!(status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()));
    assert!(status.start_time.is_some());
    let containers = status.container_statuses.as_ref().expect("containers");
    assert_eq!(containers.len(), 1);
    assert!(containers[0].ready);
    assert!(
        containers[0]
            .state
            .as_ref()
            .is_some_and(|state| state.running.is_some())
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn the_kubelet_keeps_a_deleted_pod_terminating_for_its_scaled_grace_period() {
    // Grace 10 s scaled by 0.1: the kubelet confirms after 1 s.
    let cluster = TestCluster::start_with(ClusterOptions {
        kubelet: KubeletConfig {
            grace_scale: 0.1,
            ..KubeletConfig::default()
        },
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    if !cluster.is_emulated() {
        println!(
            "skipped: a real kubelet ends a pause container at once on SIGTERM, so the \
             grace period is not observable there"
        );
        return;
    }
    let api = pods(&cluster);
    api.create(&PostParams::default(), &pod("slow", false, json!({})))
        .await
        .expect("create");
    wait_for_pod(&cluster, "slow", "Running", running).await;
    let deleted_at = Instant::now();
    api.delete("slow", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = api.get("slow").await.expect("still there");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(10));
    cluster
        .wait_for("the pod gone", TIMEOUT, || async {
            match api.get_opt("slow").await {
                Ok(None) => Check::Done(()),
                Ok(Some(pod)) => Check::Pending(describe(&pod)),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("termination confirmed");
    assert!(
        deleted_at.elapsed() >= Duration::from_secs(1),
        "gone after {:?}, before the scaled grace period of 1 s",
        deleted_at.elapsed()
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_readiness_gate_holds_a_running_pod_unready_until_set_pod_ready() {
    let cluster = TestCluster::start().await.expect("cluster");
    let api = pods(&cluster);
    api.create(&PostParams::default(), &pod("gated", true, json!({})))
        .await
        .expect("create");
    let started = wait_for_pod(&cluster, "gated", "Running", running).await;
    assert!(!is_running_and_ready(&started), "{}", describe(&started));

    set_pod_ready(&cluster.client(), cluster.namespace(), "gated", true)
        .await
        .expect("ready");
    let ready = wait_for_pod(&cluster, "gated", "Ready", is_running_and_ready).await;
    assert_eq!(condition(&ready, READINESS_GATE), "True");

    set_pod_ready(&cluster.client(), cluster.namespace(), "gated", false)
        .await
        .expect("unready");
    let unready = wait_for_pod(&cluster, "gated", "not Ready", |pod| {
        running(pod) && !is_running_and_ready(pod)
    })
    .await;
    assert_eq!(condition(&unready, READINESS_GATE), "False");
    cluster.cleanup().await;
}

#[tokio::test]
async fn readiness_set_before_the_pod_starts_survives_the_start() {
    // A slow start gives the test time to set readiness first; the kubelet
    // must not overwrite it with "unready" when it reports the pod Running.
    let cluster = TestCluster::start_with(ClusterOptions {
        kubelet: KubeletConfig {
            start_delay: Duration::from_millis(500),
            ..KubeletConfig::default()
        },
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    let api = pods(&cluster);
    api.create(&PostParams::default(), &pod("early", true, json!({})))
        .await
        .expect("create");
    set_pod_ready(&cluster.client(), cluster.namespace(), "early", true)
        .await
        .expect("ready before start");
    let ready = wait_for_pod(&cluster, "early", "Running and Ready", is_running_and_ready).await;
    assert_eq!(condition(&ready, READINESS_GATE), "True");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_gate_condition_written_on_its_own_makes_the_pod_ready() {
    // What a readiness-gate controller does on a real cluster: it writes only
    // its own condition; the kubelet derives Ready from it.
    let cluster = TestCluster::start().await.expect("cluster");
    let api = pods(&cluster);
    api.create(&PostParams::default(), &pod("gate-only", true, json!({})))
        .await
        .expect("create");
    wait_for_pod(&cluster, "gate-only", "Running", running).await;
    // A JSON patch appends to the conditions without restating them.
    let operations = json!([
        { "op": "add", "path": "/status/conditions/-", "value": {
            "type": READINESS_GATE, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"
        } }
    ]);
    let request = http::Request::patch(format!(
        "/api/v1/namespaces/{}/pods/gate-only/status",
        cluster.namespace()
    ))
    .header("content-type", "application/json-patch+json")
    .body(serde_json::to_vec(&operations).expect("json"))
    .expect("request");
    cluster
        .client()
        .request_text(request)
        .await
        .expect("write the gate condition");
    let ready = wait_for_pod(&cluster, "gate-only", "Ready", is_running_and_ready).await;
    assert_eq!(condition(&ready, "Ready"), "True");
    cluster.cleanup().await;
}

#[tokio::test]
async fn the_manual_readiness_annotation_starts_a_pod_unready_until_set_pod_ready() {
    let cluster = TestCluster::start().await.expect("cluster");
    if !cluster.is_emulated() {
        println!("skipped: the manual-readiness annotation is an emulated-kubelet knob");
        return;
    }
    let api = pods(&cluster);
    api.create(
        &PostParams::default(),
        &pod(
            "manual",
            false,
            json!({ MANUAL_READINESS_ANNOTATION: "true" }),
        ),
    )
    .await
    .expect("create");
    let started = wait_for_pod(&cluster, "manual", "Running", running).await;
    assert_eq!(condition(&started, "Ready"), "False");
    assert_eq!(condition(&started, "ContainersReady"), "False");
    set_pod_ready(&cluster.client(), cluster.namespace(), "manual", true)
        .await
        .expect("ready");
    let ready = wait_for_pod(&cluster, "manual", "Ready", is_running_and_ready).await;
    assert!(
        ready
            .status
            .as_ref()
            .and_then(|status| status.container_statuses.as_ref())
            .is_some_and(|containers| containers.iter().all(|container| container.ready))
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn fail_pod_reports_the_pod_failed_with_terminated_containers() {
    let cluster = TestCluster::start().await.expect("cluster");
    let api = pods(&cluster);
    api.create(&PostParams::default(), &pod("doomed", false, json!({})))
        .await
        .expect("create");
    wait_for_pod(
        &cluster,
        "doomed",
        "Running and Ready",
        is_running_and_ready,
    )
    .await;
    fail_pod(
        &cluster.client(),
        cluster.namespace(),
        "doomed",
        "OOMKilled",
    )
    .await
    .expect("fail");
    let failed = api.get("doomed").await.expect("get");
    assert_eq!(phase(&failed), "Failed");
    assert_eq!(condition(&failed, "Ready"), "False");
    let terminated = failed
        .status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|containers| containers.first())
        .and_then(|container| container.state.as_ref())
        .and_then(|state| state.terminated.as_ref())
        .expect("a terminated container");
    assert_eq!(terminated.exit_code, 1);
    assert_eq!(terminated.reason.as_deref(), Some("OOMKilled"));
    // The kubelet does not bring a failed pod back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(phase(&api.get("doomed").await.expect("get")), "Failed");
    assert_eq!(failed.name_any(), "doomed");
    cluster.cleanup().await;
}

#[tokio::test]
async fn the_kubelet_registers_a_ready_node_and_binds_only_through_pods_binding() {
    let cluster = TestCluster::start().await.expect("cluster");
    let Some(audit) = cluster.audit() else {
        println!("skipped: which requests the kubelet made is read from the emulator's audit log");
        return;
    };
    let api = pods(&cluster);
    api.create(&PostParams::default(), &pod("placed", false, json!({})))
        .await
        .expect("create");
    wait_for_pod(
        &cluster,
        "placed",
        "Running and Ready",
        is_running_and_ready,
    )
    .await;
    let node_name = KubeletConfig::default().node_name;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.client());
    let node = nodes
        .get(&node_name)
        .await
        .expect("the kubelet registered its Node");
    assert_eq!(
        node.labels()
            .get(shoal_emulator::sim::STAND_IN_NODE_LABEL)
            .map(String::as_str),
        Some("true")
    );
    let node_ready = node
        .status
        .iter()
        .flat_map(|status| status.conditions.iter().flatten())
        .any(|condition| condition.type_ == "Ready" && condition.status == "True");
    assert!(node_ready, "{:?}", node.status);
    let table = cluster
        .kubectl(&["get", "node", &node_name])
        .await
        .expect("kubectl runs")
        .ok()
        .expect("kubectl get node")
        .stdout;
    let cells: Vec<&str> = table
        .lines()
        .find(|line| line.starts_with(&node_name))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(cells.get(1), Some(&"Ready"), "{table}");
    let pod_writes: Vec<_> = audit
        .entries()
        .into_iter()
        .filter(|entry| {
            entry.resource.starts_with("pods") && entry.name.as_deref() == Some("placed")
        })
        .filter(|entry| !matches!(entry.verb.as_str(), "get" | "list" | "watch"))
        .map(|entry| format!("{} {}", entry.verb, entry.resource))
        .collect();
    assert!(
        pod_writes.contains(&"create pods/binding".to_owned()),
        "{pod_writes:?}"
    );
    assert!(
        pod_writes
            .iter()
            .all(|write| write == "create pods/binding" || write.ends_with("pods/status")),
        "the kubelet wrote the pod other than through pods/binding and pods/status: {pod_writes:?}"
    );
    cluster.cleanup().await;
}
