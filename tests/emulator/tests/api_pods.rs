//! Pods as a real API server guards them: a pod is placed on a node through the
//! `pods/binding` subresource (201, then 409 once bound), and an update may not
//! change `spec.nodeName` or any other spec field but the few the server allows
//! (422 Forbidden). The pods here name a scheduler that does not exist, so a real
//! scheduler leaves them alone. Uses only the public API: runs on the emulator
//! and on a real cluster (`SHOAL_TEST_KUBECONFIG`).

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use shoal_emulator::harness::TestCluster;
use shoal_emulator::harness::fixtures::PAUSE_IMAGE;

const NODE: &str = "shoal-binding-test-node";

async fn cluster() -> TestCluster {
    TestCluster::start().await.expect("a test cluster")
}

/// A pod no scheduler picks up.
fn unscheduled_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "shoal-no-such-scheduler",
            "containers": [{"name": "app", "image": PAUSE_IMAGE}],
        },
    }))
    .expect("a pod")
}

fn binding(pod: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    })
}

fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason, status.message),
        other => panic!("expected the server to refuse, got {other:?}"),
    }
}

/// Removes the test's pods at once: no kubelet confirms their termination on a
/// node that does not exist.
async fn force_delete(pods: &Api<Pod>, name: &str) {
    let _ = pods
        .delete(
            name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await;
}

#[tokio::test]
async fn a_binding_places_a_pod_on_a_node_once_and_a_second_binding_conflicts() {
    let cluster = cluster().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    pods.create(&PostParams::default(), &unscheduled_pod("bound"))
        .await
        .expect("create");
    let reply: Value = pods
        .create_subresource(
            "binding",
            "bound",
            &PostParams::default(),
            &binding("bound", NODE),
        )
        .await
        .expect("the first binding is accepted");
    assert_eq!(reply["status"], "Success", "{reply}");
    let bound = pods.get("bound").await.expect("get");
    assert_eq!(
        bound
            .spec
            .as_ref()
            .and_then(|spec| spec.node_name.as_deref()),
        Some(NODE)
    );
    let scheduled = bound
        .status
        .iter()
        .flat_map(|status| status.conditions.iter().flatten())
        .any(|condition| condition.type_ == "PodScheduled" && condition.status == "True");
    assert!(scheduled, "{:?}", bound.status);

    let (code, reason, message) = refusal(
        pods.create_subresource::<Value, Value>(
            "binding",
            "bound",
            &PostParams::default(),
            &binding("bound", "another-node"),
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"), "{message}");
    assert_eq!(
        message,
        format!(
            "Operation cannot be fulfilled on pods/binding \"bound\": pod bound is already assigned to node \"{NODE}\""
        )
    );
    let still = pods.get("bound").await.expect("get");
    assert_eq!(
        still.spec.and_then(|spec| spec.node_name).as_deref(),
        Some(NODE)
    );
    force_delete(&pods, "bound").await;
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_patch_setting_a_pods_node_name_is_refused_as_a_forbidden_spec_change() {
    let cluster = cluster().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    pods.create(&PostParams::default(), &unscheduled_pod("patched"))
        .await
        .expect("create");
    let (code, reason, message) = refusal(
        pods.patch(
            "patched",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": NODE}})),
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(
        message.starts_with(
            "Pod \"patched\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
        ),
        "{message}"
    );
    let stored = pods.get("patched").await.expect("get");
    assert_eq!(stored.spec.and_then(|spec| spec.node_name), None);
    force_delete(&pods, "patched").await;
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_pod_update_may_change_an_image_and_labels_but_not_other_spec_fields() {
    let cluster = cluster().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    pods.create(&PostParams::default(), &unscheduled_pod("updated"))
        .await
        .expect("create");
    let image = "registry.k8s.io/pause:3.9";
    let changed = pods
        .patch(
            "updated",
            &PatchParams::default(),
            &Patch::Strategic(json!({
                "metadata": {"labels": {"changed": "yes"}},
                "spec": {"containers": [{"name": "app", "image": image}]},
            })),
        )
        .await
        .expect("an image and a label may change");
    assert_eq!(
        changed
            .spec
            .as_ref()
            .map(|spec| spec.containers[0].image.clone()),
        Some(Some(image.to_owned()))
    );
    let (code, _, message) = refusal(
        pods.patch(
            "updated",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"restartPolicy": "Never"}})),
        )
        .await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec: Forbidden: pod updates may not change fields other than"),
        "{message}"
    );
    force_delete(&pods, "updated").await;
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_pod_update_with_a_spec_that_is_not_an_object_is_refused_and_the_server_keeps_serving() {
    let cluster = cluster().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    pods.create(&PostParams::default(), &unscheduled_pod("odd"))
        .await
        .expect("create");
    let result = pods
        .patch(
            "odd",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": "not an object"})),
        )
        .await;
    match result {
        Err(kube::Error::Api(status)) => {
            assert!(matches!(status.code, 400 | 422), "{}", status.message);
        }
        other => panic!("a spec that is not an object was accepted: {other:?}"),
    }
    let stored = pods.get("odd").await.expect("the server still answers");
    assert_eq!(
        stored.spec.map(|spec| spec.containers.len()),
        Some(1),
        "the pod is unchanged"
    );
    force_delete(&pods, "odd").await;
    cluster.cleanup().await;
}
