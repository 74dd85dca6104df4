//! Deletion semantics: ownerReference garbage collection (background,
//! foreground, orphan), finalizers and deletionTimestamp, graceful pod
//! deletion, namespace cleanup, and eviction against PodDisruptionBudgets.
//!
//! Emulator-only: starts its own `ApiServer` with no kubelet and writes pod
//! status by hand, which a real cluster's kubelet would overwrite.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams, PropagationPolicy,
};
use serde_json::{Value, json};
use shoal_emulator::ApiServer;

/// kube retries 429 (honouring Retry-After, 10 s for evictions); these
/// tests want to see the refusal itself.
async fn setup() -> (ApiServer, kube::Client) {
    let server = ApiServer::start().await.expect("server starts");
    let mut config = server.config().await.expect("config");
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("client");
    (server, client)
}

async fn owner_and_dependents(maps: &Api<ConfigMap>) -> String {
    let owner: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "owner"}})).expect("cm");
    let owner = maps
        .create(&PostParams::default(), &owner)
        .await
        .expect("owner");
    let uid = owner.metadata.uid.expect("uid");
    for name in ["dep-1", "dep-2"] {
        let dependent: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "blockOwnerDeletion": true}
        ]}}))
        .expect("cm");
        maps.create(&PostParams::default(), &dependent)
            .await
            .expect("dependent");
    }
    uid
}

async fn exists(maps: &Api<ConfigMap>, name: &str) -> bool {
    maps.get_opt(name).await.expect("get").is_some()
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    owner_and_dependents(&maps).await;
    maps.delete("owner", &DeleteParams::background())
        .await
        .expect("delete");
    for name in ["owner", "dep-1", "dep-2"] {
        assert!(!exists(&maps, name).await, "{name} should be gone");
    }
}

#[tokio::test]
async fn a_dependent_with_another_live_owner_survives_and_loses_the_dead_reference() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let uid = owner_and_dependents(&maps).await;
    let second: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "second"}})).expect("cm");
    let second_uid = maps
        .create(&PostParams::default(), &second)
        .await
        .expect("second")
        .metadata
        .uid
        .expect("uid");
    let shared: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "shared", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "second", "uid": second_uid}
        ]}}))
        .expect("cm");
    maps.create(&PostParams::default(), &shared)
        .await
        .expect("shared");
    maps.delete("owner", &DeleteParams::default())
        .await
        .expect("delete");
    let survivor = maps.get("shared").await.expect("still there");
    let owners = survivor.metadata.owner_references.expect("owners");
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].name, "second");
}

#[tokio::test]
async fn foreground_deletion_keeps_the_owner_until_dependents_are_gone() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    owner_and_dependents(&maps).await;
    // A finalizer on one dependent holds the whole foreground deletion.
    maps.patch(
        "dep-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["test/hold"]}})),
    )
    .await
    .expect("hold");
    maps.delete("owner", &DeleteParams::foreground())
        .await
        .expect("delete");
    let owner = maps.get("owner").await.expect("owner still there");
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert!(
        owner
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_owned())
    );
    assert!(!exists(&maps, "dep-2").await);
    let held = maps.get("dep-1").await.expect("held");
    assert!(held.metadata.deletion_timestamp.is_some());
    maps.patch(
        "dep-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert!(!exists(&maps, "dep-1").await);
    assert!(
        !exists(&maps, "owner").await,
        "owner goes once its dependents are gone"
    );
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_reference() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    owner_and_dependents(&maps).await;
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    maps.delete("owner", &params).await.expect("delete");
    assert!(!exists(&maps, "owner").await);
    let orphan = maps.get("dep-1").await.expect("orphan kept");
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn a_finalizer_holds_an_object_with_a_deletion_timestamp_until_removed() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let held: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "held", "finalizers": ["example.com/cleanup"]}}),
    )
    .expect("cm");
    maps.create(&PostParams::default(), &held)
        .await
        .expect("create");
    let response = maps
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        response.is_left(),
        "the object is returned while it still exists"
    );
    let marked = maps.get("held").await.expect("still there");
    assert!(marked.metadata.deletion_timestamp.is_some());
    let adding = maps
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/cleanup", "new"]}})),
        )
        .await;
    assert!(
        matches!(adding, Err(kube::Error::Api(ref status)) if status.code == 422),
        "{adding:?}"
    );
    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .expect("remove finalizer");
    assert!(!exists(&maps, "held").await);
}

#[tokio::test]
async fn a_delete_with_a_stale_uid_precondition_is_409() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let map: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "m"}})).expect("cm");
    maps.create(&PostParams::default(), &map)
        .await
        .expect("create");
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let result = maps.delete("m", &params).await;
    assert!(
        matches!(result, Err(kube::Error::Api(ref status)) if status.code == 409),
        "{result:?}"
    );
    assert!(exists(&maps, "m").await);
}

fn pod(name: &str, node: Option<&str>, ready: bool) -> (Pod, Value) {
    let mut spec =
        json!({"containers": [{"name": "c", "image": "i"}], "terminationGracePeriodSeconds": 30});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    let pod = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "web"}}, "spec": spec}),
    )
    .expect("pod");
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    (pod, status)
}

async fn running_pod(pods: &Api<Pod>, name: &str, ready: bool) {
    let (object, status) = pod(name, Some("node-1"), ready);
    pods.create(&PostParams::default(), &object)
        .await
        .expect("create pod");
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("status");
}

#[tokio::test]
async fn a_scheduled_pod_is_deleted_gracefully_and_an_unscheduled_one_at_once() {
    let (_server, client) = setup().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    running_pod(&pods, "scheduled", true).await;
    let (unscheduled, _) = pod("unscheduled", None, false);
    pods.create(&PostParams::default(), &unscheduled)
        .await
        .expect("create");
    pods.delete("unscheduled", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(pods.get_opt("unscheduled").await.expect("get").is_none());
    pods.delete("scheduled", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = pods.get("scheduled").await.expect("still terminating");
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    // What a kubelet does once the containers stopped.
    pods.delete("scheduled", &DeleteParams::default().grace_period(0))
        .await
        .expect("confirm");
    assert!(pods.get_opt("scheduled").await.expect("get").is_none());
}

#[tokio::test]
async fn status_writes_change_only_status_and_spec_writes_ignore_status() {
    let (_server, client) = setup().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    running_pod(&pods, "p", true).await;
    let patched = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Failed"}}),
            ),
        )
        .await
        .expect("status patch");
    assert_eq!(
        patched
            .status
            .as_ref()
            .and_then(|status| status.phase.as_deref()),
        Some("Failed")
    );
    assert!(
        !patched
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("x"),
        "status writes ignore metadata"
    );
    let main = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Running"}}),
            ),
        )
        .await
        .expect("main patch");
    assert_eq!(
        main.status.and_then(|status| status.phase).as_deref(),
        Some("Failed"),
        "main writes ignore status"
    );
    assert_eq!(
        main.metadata
            .labels
            .unwrap_or_default()
            .get("x")
            .map(String::as_str),
        Some("y")
    );
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_content_then_the_namespace() {
    let (_server, client) = setup().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "doomed"}})).expect("ns");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create ns");
    let maps: Api<ConfigMap> = Api::namespaced(client, "doomed");
    let held: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["x/y"]}}))
            .expect("cm");
    maps.create(&PostParams::default(), &held)
        .await
        .expect("create");
    let free: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "free"}})).expect("cm");
    maps.create(&PostParams::default(), &free)
        .await
        .expect("create");
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete ns");
    let terminating = namespaces.get("doomed").await.expect("terminating");
    assert_eq!(
        terminating
            .status
            .and_then(|status| status.phase)
            .as_deref(),
        Some("Terminating")
    );
    assert!(maps.get_opt("free").await.expect("get").is_none());
    let refused = maps.create(&PostParams::default(), &free).await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref status)) if status.code == 403),
        "{refused:?}"
    );
    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert!(namespaces.get_opt("doomed").await.expect("get").is_none());
}

async fn budget(client: &kube::Client, spec: Value) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "budget"},
        "spec": spec,
    }))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("pdb");
}

#[tokio::test]
async fn eviction_is_refused_with_429_when_the_budget_is_exhausted() {
    let (_server, client) = setup().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["web-0", "web-1"] {
        running_pod(&pods, name, true).await;
    }
    budget(
        &client,
        json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
    )
    .await;
    pods.evict("web-0", &EvictParams::default())
        .await
        .expect("first eviction fits the budget");
    assert!(
        pods.get("web-0")
            .await
            .expect("terminating")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let refused = pods.evict("web-1", &EvictParams::default()).await;
    let Err(kube::Error::Api(status)) = refused else {
        panic!("expected 429, got {refused:?}");
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    assert!(
        status.message.contains("disruption budget"),
        "{}",
        status.message
    );
    assert!(
        pods.get("web-1")
            .await
            .expect("kept")
            .metadata
            .deletion_timestamp
            .is_none()
    );
}

#[tokio::test]
async fn max_unavailable_zero_blocks_eviction_of_a_ready_pod_but_not_of_an_unready_one_when_healthy()
 {
    let (_server, client) = setup().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    running_pod(&pods, "ready", true).await;
    budget(
        &client,
        json!({"maxUnavailable": "0%", "selector": {"matchLabels": {"app": "web"}}}),
    )
    .await;
    let refused = pods.evict("ready", &EvictParams::default()).await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref status)) if status.code == 429),
        "{refused:?}"
    );
    let (unready, status) = pod("unready", Some("node-1"), false);
    pods.create(&PostParams::default(), &unready)
        .await
        .expect("create");
    pods.patch_status("unready", &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("status");
    // Budget: 2 expected, 0 unavailable allowed → desired 2, healthy 1: an
    // unready pod may only go while the budget is healthy, which it is not.
    let refused = pods.evict("unready", &EvictParams::default()).await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref status)) if status.code == 429),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_pod_without_a_budget_is_evicted() {
    let (_server, client) = setup().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    running_pod(&pods, "free", true).await;
    pods.evict("free", &EvictParams::default())
        .await
        .expect("evicted");
    assert!(
        pods.get("free")
            .await
            .expect("terminating")
            .metadata
            .deletion_timestamp
            .is_some()
    );
}
