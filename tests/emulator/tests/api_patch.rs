//! Every patch type through the kube client: JSON merge, JSON patch,
//! strategic merge (merge keys and directives), and server-side apply with
//! field managers, conflicts and force.
//!
//! Emulator-only: each test starts its own `ApiServer` and works in its
//! `default` namespace, relying on a fresh store.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use shoal_emulator::ApiServer;

async fn setup() -> (ApiServer, kube::Client) {
    let server = ApiServer::start().await.expect("server starts");
    let client = server.client().await.expect("client");
    (server, client)
}

/// A Deployment whose pod template the strategic merge tests patch (a pod's own
/// containers cannot change but for their image, on a real server as here).
fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "labels": {"app": "a"}},
        "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {
                "metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [
                    {"name": "main", "image": "main:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "side", "image": "side:1"}
                ]}
            }
        }
    }))
    .expect("deployment")
}

#[tokio::test]
async fn a_merge_patch_sets_and_removes_fields() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "m"}, "data": {"a": "1", "b": "2"}}))
            .expect("cm");
    maps.create(&PostParams::default(), &map)
        .await
        .expect("create");
    let patched = maps
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": null, "c": "3"}})),
        )
        .await
        .expect("patch");
    let data = patched.data.expect("data");
    assert_eq!(data.keys().cloned().collect::<Vec<_>>(), vec!["b", "c"]);
}

#[tokio::test]
async fn a_merge_patch_with_a_stale_resource_version_is_a_conflict() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "m"}, "data": {"a": "1"}})).expect("cm");
    let created = maps
        .create(&PostParams::default(), &map)
        .await
        .expect("create");
    maps.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "2"}})),
    )
    .await
    .expect("patch");
    let stale = json!({"metadata": {"resourceVersion": created.metadata.resource_version}, "data": {"a": "3"}});
    let result = maps
        .patch("m", &PatchParams::default(), &Patch::Merge(stale))
        .await;
    assert!(
        matches!(result, Err(kube::Error::Api(ref status)) if status.code == 409),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_json_patch_applies_operations_in_order_and_a_failed_test_rejects_it() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "m"}, "data": {"a": "1"}})).expect("cm");
    maps.create(&PostParams::default(), &map)
        .await
        .expect("create");
    let json_patch = |operations: Value| {
        http::Request::patch("/api/v1/namespaces/default/configmaps/m")
            .header("content-type", "application/json-patch+json")
            .body(serde_json::to_vec(&operations).expect("json"))
            .expect("request")
    };
    let text = client
        .request_text(json_patch(json!([
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "add", "path": "/data/b", "value": "2"},
            {"op": "replace", "path": "/data/a", "value": "10"},
            {"op": "copy", "from": "/data/b", "path": "/data/c"},
            {"op": "remove", "path": "/data/b"}
        ])))
        .await
        .expect("json patch");
    let patched: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(patched["data"], json!({"a": "10", "c": "2"}));
    let result = client
        .request_text(json_patch(json!([
            {"op": "test", "path": "/data/a", "value": "nope"},
            {"op": "add", "path": "/data/z", "value": "z"}
        ])))
        .await;
    assert!(
        matches!(result, Err(kube::Error::Api(ref status)) if status.code == 422),
        "{result:?}"
    );
    assert!(
        !maps
            .get("m")
            .await
            .expect("get")
            .data
            .expect("data")
            .contains_key("z")
    );
}

#[tokio::test]
async fn a_strategic_merge_patch_merges_containers_and_env_by_name() {
    let (_server, client) = setup().await;
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    deployments
        .create(&PostParams::default(), &deployment())
        .await
        .expect("create");
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "main:2", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]}
    ]}}}});
    let patched = deployments
        .patch("p", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patch");
    let value = serde_json::to_value(&patched).expect("json");
    let containers = value["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 2, "side container kept");
    assert_eq!(containers[0]["image"], "main:2");
    let env: Vec<(&str, &str)> = containers[0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|entry| {
            (
                entry["name"].as_str().unwrap_or_default(),
                entry["value"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(env, vec![("A", "1"), ("B", "20"), ("C", "3")]);
}

#[tokio::test]
async fn strategic_merge_directives_delete_list_items_and_replace_maps() {
    let (_server, client) = setup().await;
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    deployments
        .create(&PostParams::default(), &deployment())
        .await
        .expect("create");
    let patch = json!({
        "metadata": {"labels": {"$patch": "replace", "only": "this"}},
        "spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}
    });
    let patched = deployments
        .patch("p", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patch");
    let value = serde_json::to_value(&patched).expect("json");
    assert_eq!(value["metadata"]["labels"], json!({"only": "this"}));
    let names: Vec<&str> = value["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|container| container["name"].as_str())
        .collect();
    assert_eq!(names, vec!["main"]);
}

fn managers(object: &impl serde::Serialize) -> Vec<(String, String)> {
    let value = serde_json::to_value(object).expect("json");
    value["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|entry| {
                    (
                        entry["manager"].as_str().unwrap_or_default().to_owned(),
                        entry["operation"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn server_side_apply_creates_then_merges_and_records_the_manager() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let apply = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": data});
    let created = maps
        .patch(
            "s",
            &PatchParams::apply("alpha"),
            &Patch::Apply(apply(json!({"a": "1"}))),
        )
        .await
        .expect("apply creates");
    assert_eq!(
        managers(&created),
        vec![("alpha".to_owned(), "Apply".to_owned())]
    );
    let merged = maps
        .patch(
            "s",
            &PatchParams::apply("beta"),
            &Patch::Apply(apply(json!({"b": "2"}))),
        )
        .await
        .expect("second manager");
    let data = merged.data.clone().expect("data");
    assert_eq!((data["a"].as_str(), data["b"].as_str()), ("1", "2"));
    let mut owners = managers(&merged);
    owners.sort();
    assert_eq!(
        owners,
        vec![
            ("alpha".into(), "Apply".into()),
            ("beta".into(), "Apply".into())
        ]
    );
}

#[tokio::test]
async fn server_side_apply_removes_fields_a_manager_stops_applying() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let apply = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": data});
    maps.patch(
        "s",
        &PatchParams::apply("alpha"),
        &Patch::Apply(apply(json!({"a": "1", "b": "2"}))),
    )
    .await
    .expect("apply");
    let reduced = maps
        .patch(
            "s",
            &PatchParams::apply("alpha"),
            &Patch::Apply(apply(json!({"a": "1"}))),
        )
        .await
        .expect("apply again");
    assert_eq!(
        reduced
            .data
            .expect("data")
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        vec!["a"]
    );
}

#[tokio::test]
async fn server_side_apply_conflicts_with_another_manager_unless_forced() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let apply = |value: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"shared": value}});
    maps.patch("s", &PatchParams::apply("alpha"), &Patch::Apply(apply("1")))
        .await
        .expect("alpha");
    // The same value is shared ownership, not a conflict.
    maps.patch("s", &PatchParams::apply("beta"), &Patch::Apply(apply("1")))
        .await
        .expect("beta agrees");
    maps.patch("s", &PatchParams::apply("alpha"), &Patch::Apply(apply("1")))
        .await
        .expect("alpha again");
    let result = maps
        .patch("s", &PatchParams::apply("gamma"), &Patch::Apply(apply("2")))
        .await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected a conflict, got {result:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.starts_with("Apply failed with 2 conflicts"),
        "{}",
        status.message
    );
    assert!(
        status.message.contains(".data.shared"),
        "{}",
        status.message
    );
    let forced = maps
        .patch(
            "s",
            &PatchParams::apply("gamma").force(),
            &Patch::Apply(apply("2")),
        )
        .await
        .expect("forced");
    assert_eq!(forced.data.expect("data")["shared"], "2");
    let owners = managers(&maps.get("s").await.expect("get"));
    assert_eq!(
        owners,
        vec![("gamma".to_owned(), "Apply".to_owned())],
        "the others lost the field"
    );
}

#[tokio::test]
async fn an_update_takes_ownership_so_a_later_apply_conflicts() {
    let (_server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let apply = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"k": "applied"}});
    maps.patch(
        "s",
        &PatchParams::apply("alpha"),
        &Patch::Apply(apply.clone()),
    )
    .await
    .expect("apply");
    let params = PatchParams {
        field_manager: Some("editor".into()),
        ..PatchParams::default()
    };
    maps.patch(
        "s",
        &params,
        &Patch::Merge(json!({"data": {"k": "edited"}})),
    )
    .await
    .expect("edit");
    let result = maps
        .patch("s", &PatchParams::apply("alpha"), &Patch::Apply(apply))
        .await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected a conflict, got {result:?}");
    };
    assert!(
        status.message.contains("conflict with \"editor\""),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn server_side_apply_merges_containers_by_name() {
    let (_server, client) = setup().await;
    let sets: Api<StatefulSet> = Api::namespaced(client, "default");
    let config = |containers: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "serviceName": "web",
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}
        })
    };
    sets.patch(
        "web",
        &PatchParams::apply("alpha"),
        &Patch::Apply(config(json!([{"name": "a", "image": "a:1"}]))),
    )
    .await
    .expect("alpha");
    let merged = sets
        .patch(
            "web",
            &PatchParams::apply("beta"),
            &Patch::Apply(config(json!([{"name": "b", "image": "b:1"}]))),
        )
        .await
        .expect("beta");
    let value = serde_json::to_value(&merged).expect("json");
    let names: Vec<&str> = value["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|container| container["name"].as_str())
        .collect();
    assert_eq!(names, vec!["a", "b"]);
}

#[tokio::test]
async fn apply_without_a_field_manager_is_rejected() {
    let (_server, client) = setup().await;
    let result = client
        .request_text(
            http::Request::patch("/api/v1/namespaces/default/configmaps/x")
                .header("content-type", "application/apply-patch+yaml")
                .body(b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n".to_vec())
                .expect("request"),
        )
        .await;
    assert!(
        matches!(result, Err(kube::Error::Api(ref status)) if status.code == 400),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_yaml_apply_body_creates_the_object() {
    let (_server, client) = setup().await;
    let text = client
        .request_text(
            http::Request::patch("/api/v1/namespaces/default/configmaps/y?fieldManager=yaml")
                .header("content-type", "application/apply-patch+yaml")
                .body(
                    b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  k: v\n"
                        .to_vec(),
                )
                .expect("request"),
        )
        .await
        .expect("apply");
    let created: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(created["data"]["k"], "v");
}

#[tokio::test]
async fn reapplying_a_statefulset_without_replicas_keeps_the_defaulted_replicas() {
    let (_server, client) = setup().await;
    let sets: Api<StatefulSet> = Api::namespaced(client, "default");
    let config = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "serviceName": "web",
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "a:1"}]}}}
    });
    let created = sets
        .patch(
            "web",
            &PatchParams::apply("alpha"),
            &Patch::Apply(config.clone()),
        )
        .await
        .expect("create");
    assert_eq!(
        created.spec.as_ref().and_then(|spec| spec.replicas),
        Some(1),
        "defaulted"
    );
    let again = sets
        .patch("web", &PatchParams::apply("alpha"), &Patch::Apply(config))
        .await
        .expect("reapply");
    assert_eq!(
        again.spec.as_ref().and_then(|spec| spec.replicas),
        Some(1),
        "defaults are nobody's to remove"
    );
    assert_eq!(
        again.metadata.resource_version, created.metadata.resource_version,
        "an identical apply is a no-op"
    );
}

#[tokio::test]
async fn server_side_apply_of_status_keeps_its_own_managed_fields() {
    let (_server, client) = setup().await;
    let sets: Api<StatefulSet> = Api::namespaced(client, "default");
    let config = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "serviceName": "web",
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "a:1"}]}}}
    });
    sets.patch("web", &PatchParams::apply("alpha"), &Patch::Apply(config))
        .await
        .expect("create");
    let status = |fields: Value| json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"}, "status": fields});
    sets.patch_status(
        "web",
        &PatchParams::apply("ctrl"),
        &Patch::Apply(status(json!({"replicas": 1, "readyReplicas": 1}))),
    )
    .await
    .expect("status apply");
    let reduced = sets
        .patch_status(
            "web",
            &PatchParams::apply("ctrl"),
            &Patch::Apply(status(json!({"replicas": 1}))),
        )
        .await
        .expect("status apply again");
    let value = serde_json::to_value(&reduced).expect("json");
    assert_eq!(value["status"]["replicas"], 1);
    assert!(
        value["status"].get("readyReplicas").is_none(),
        "the field it stopped applying is removed"
    );
    assert_eq!(
        value["spec"]["template"]["spec"]["containers"][0]["image"],
        "a:1"
    );
}
