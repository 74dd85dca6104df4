//! kubectl conformance, part 1: `apply -f` (create, then a three-way update),
//! `apply --server-side` with field managers and conflicts, and `create`
//! (namespace, configmap from literals). Runs on the emulator and on a real
//! cluster; every test checks what the cluster then holds through `kube`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use shoal_emulator::harness::TestCluster;
use shoal_emulator::harness::fixtures::{statefulset, wait_for_ready_pods};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn cluster() -> TestCluster {
    TestCluster::start().await.expect("a test cluster")
}

fn maps(cluster: &TestCluster) -> Api<ConfigMap> {
    Api::namespaced(cluster.client(), cluster.namespace())
}

fn config_map_yaml(data: &[(&str, &str)]) -> String {
    let mut text =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n");
    for (key, value) in data {
        text.push_str(&format!("  {key}: \"{value}\"\n"));
    }
    text
}

/// `(manager, operation)` pairs of an object's managedFields that own
/// `data.<key>`.
fn owners_of_data_key(map: &ConfigMap, key: &str) -> Vec<(String, String)> {
    map.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .is_some_and(|fields| fields.0["f:data"].get(format!("f:{key}")).is_some())
        })
        .map(|entry| {
            (
                entry.manager.clone().unwrap_or_default(),
                entry.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn apply_creates_an_object_then_updates_it_and_drops_removed_keys() {
    let cluster = cluster().await;
    let created = cluster
        .kubectl_with_stdin(
            &["apply", "-f", "-"],
            Some(&config_map_yaml(&[("a", "1"), ("b", "2")])),
        )
        .await
        .expect("kubectl")
        .ok()
        .expect("apply creates");
    assert_eq!(created.stdout.trim(), "configmap/settings created");
    let first = maps(&cluster).get("settings").await.expect("created");
    assert_eq!(
        first.data.clone().unwrap_or_default(),
        [
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "2".to_owned())
        ]
        .into()
    );
    assert!(
        first
            .annotations()
            .contains_key("kubectl.kubernetes.io/last-applied-configuration"),
        "client-side apply records what it applied"
    );

    let updated = cluster
        .kubectl_with_stdin(
            &["apply", "-f", "-"],
            Some(&config_map_yaml(&[("a", "10")])),
        )
        .await
        .expect("kubectl")
        .ok()
        .expect("apply updates");
    assert_eq!(updated.stdout.trim(), "configmap/settings configured");
    let second = maps(&cluster).get("settings").await.expect("still there");
    assert_eq!(
        second.data.unwrap_or_default(),
        [("a".to_owned(), "10".to_owned())].into(),
        "a key dropped from the manifest is removed"
    );
    assert_eq!(second.metadata.uid, first.metadata.uid);

    let unchanged = cluster
        .kubectl_with_stdin(
            &["apply", "-f", "-"],
            Some(&config_map_yaml(&[("a", "10")])),
        )
        .await
        .expect("kubectl")
        .ok()
        .expect("apply again");
    assert_eq!(unchanged.stdout.trim(), "configmap/settings unchanged");
    cluster.cleanup().await;
}

#[tokio::test]
async fn an_applied_statefulset_brings_up_its_pods_and_a_reapply_scales_it() {
    let cluster = cluster().await;
    let mut manifest = serde_json::to_value(statefulset("web", 1)).expect("json");
    manifest["apiVersion"] = json!("apps/v1");
    manifest["kind"] = json!("StatefulSet");
    cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string()))
        .await
        .expect("kubectl")
        .ok()
        .expect("apply");
    wait_for_ready_pods(&cluster.client(), cluster.namespace(), "web", 1, TIMEOUT)
        .await
        .expect("one pod");
    manifest["spec"]["replicas"] = json!(3);
    let output = cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string()))
        .await
        .expect("kubectl")
        .ok()
        .expect("reapply");
    assert_eq!(output.stdout.trim(), "statefulset.apps/web configured");
    wait_for_ready_pods(&cluster.client(), cluster.namespace(), "web", 3, TIMEOUT)
        .await
        .expect("three pods");
    cluster.cleanup().await;
}

#[tokio::test]
async fn server_side_apply_conflicts_with_another_manager_unless_forced() {
    let cluster = cluster().await;
    let applied = cluster
        .kubectl_with_stdin(
            &["apply", "--server-side", "-f", "-"],
            Some(&config_map_yaml(&[("a", "1")])),
        )
        .await
        .expect("kubectl")
        .ok()
        .expect("server-side apply creates");
    assert_eq!(
        applied.stdout.trim(),
        "configmap/settings serverside-applied"
    );
    let first = maps(&cluster).get("settings").await.expect("created");
    assert_eq!(
        owners_of_data_key(&first, "a"),
        vec![("kubectl".to_owned(), "Apply".to_owned())]
    );
    assert!(
        !first
            .annotations()
            .contains_key("kubectl.kubernetes.io/last-applied-configuration"),
        "server-side apply keeps no client-side record"
    );

    let refused = cluster
        .kubectl_with_stdin(
            &["apply", "--server-side", "--field-manager=rival", "-f", "-"],
            Some(&config_map_yaml(&[("a", "2")])),
        )
        .await
        .expect("kubectl");
    assert!(
        !refused.success(),
        "a conflicting apply must fail: {refused:?}"
    );
    assert!(
        refused.stderr.contains("conflict") && refused.stderr.contains(".data.a"),
        "kubectl names the conflicting field: {}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("\"kubectl\""),
        "and its manager: {}",
        refused.stderr
    );
    let kept = maps(&cluster).get("settings").await.expect("get");
    assert_eq!(kept.data.unwrap_or_default()["a"], "1");

    cluster
        .kubectl_with_stdin(
            &[
                "apply",
                "--server-side",
                "--field-manager=rival",
                "--force-conflicts",
                "-f",
                "-",
            ],
            Some(&config_map_yaml(&[("a", "2")])),
        )
        .await
        .expect("kubectl")
        .ok()
        .expect("forced apply succeeds");
    let forced = maps(&cluster).get("settings").await.expect("get");
    assert_eq!(forced.data.clone().unwrap_or_default()["a"], "2");
    assert_eq!(
        owners_of_data_key(&forced, "a"),
        vec![("rival".to_owned(), "Apply".to_owned())],
        "the forced manager takes the field over"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn create_namespace_and_create_configmap_from_literals() {
    let cluster = cluster().await;
    let extra = format!("{}-extra", cluster.namespace());
    let created = cluster
        .kubectl(&["create", "namespace", &extra])
        .await
        .expect("kubectl")
        .ok()
        .expect("create namespace");
    assert_eq!(created.stdout.trim(), format!("namespace/{extra} created"));
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    let namespace = namespaces.get(&extra).await.expect("namespace exists");
    assert_eq!(
        namespace.status.and_then(|status| status.phase).as_deref(),
        Some("Active")
    );

    cluster
        .kubectl(&[
            "create",
            "configmap",
            "literals",
            "--from-literal=color=blue",
            "--from-literal=size=7",
        ])
        .await
        .expect("kubectl")
        .ok()
        .expect("create configmap");
    let map = maps(&cluster).get("literals").await.expect("configmap");
    assert_eq!(
        map.data.unwrap_or_default(),
        [
            ("color".to_owned(), "blue".to_owned()),
            ("size".to_owned(), "7".to_owned())
        ]
        .into()
    );
    let again = cluster
        .kubectl(&["create", "configmap", "literals", "--from-literal=x=y"])
        .await
        .expect("kubectl");
    assert!(!again.success());
    assert!(
        again.stderr.contains("AlreadyExists") || again.stderr.contains("already exists"),
        "{}",
        again.stderr
    );
    namespaces
        .delete(&extra, &DeleteParams::default())
        .await
        .expect("delete the extra namespace");
    let listed: Value = serde_json::from_str(
        &cluster
            .kubectl(&["get", "configmap", "literals", "-o", "json"])
            .await
            .expect("kubectl")
            .ok()
            .expect("get")
            .stdout,
    )
    .expect("json");
    assert_eq!(listed["data"]["color"], "blue");
    cluster.cleanup().await;
}
