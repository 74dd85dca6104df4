//! CRUD through the real kube client over HTTP: create, get, list, update
//! with optimistic concurrency, delete, and the errors the API documents.
//!
//! Emulator-only: each test starts its own `ApiServer` and works in its
//! `default` namespace, relying on a fresh store (no other objects there).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::json;
use shoal_emulator::ApiServer;

fn status_of<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => {
            (status.code, status.reason.clone(), status.message.clone())
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn a_created_object_gets_uid_version_and_timestamp_and_can_be_read_back() {
    let server = ApiServer::start().await.expect("server starts");
    let client = server.client().await.expect("client");
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = maps
        .create(&PostParams::default(), &config_map("one"))
        .await
        .expect("create");
    let metadata = &created.metadata;
    assert!(metadata.uid.as_deref().is_some_and(|uid| uid.len() == 36));
    assert!(metadata.creation_timestamp.is_some());
    let version: u64 = metadata
        .resource_version
        .as_deref()
        .unwrap_or_default()
        .parse()
        .expect("numeric version");
    assert!(version > 0);
    let read = maps.get("one").await.expect("get");
    assert_eq!(read.metadata.uid, created.metadata.uid);
    assert_eq!(read.data, created.data);
    let listed = maps.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 1);
    let list_version: u64 = listed
        .metadata
        .resource_version
        .unwrap_or_default()
        .parse()
        .expect("numeric");
    assert!(list_version >= version);
}

#[tokio::test]
async fn the_default_namespaces_exist_at_start() {
    let server = ApiServer::start().await.expect("server starts");
    let namespaces: Api<Namespace> = Api::all(server.client().await.expect("client"));
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|namespace| namespace.metadata.name)
        .collect();
    for expected in ["default", "kube-system", "kube-public"] {
        assert!(
            names.contains(&expected.to_owned()),
            "{expected} missing from {names:?}"
        );
    }
}

#[tokio::test]
async fn creating_an_existing_name_is_409_already_exists() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    maps.create(&PostParams::default(), &config_map("dup"))
        .await
        .expect("first create");
    let (code, reason, message) = status_of(
        maps.create(&PostParams::default(), &config_map("dup"))
            .await,
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(message, "configmaps \"dup\" already exists");
}

#[tokio::test]
async fn generate_name_appends_a_random_suffix() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let mut template = config_map("");
    template.metadata.name = None;
    template.metadata.generate_name = Some("gen-".into());
    let first = maps
        .create(&PostParams::default(), &template)
        .await
        .expect("create");
    let second = maps
        .create(&PostParams::default(), &template)
        .await
        .expect("create");
    let first = first.metadata.name.expect("name");
    let second = second.metadata.name.expect("name");
    assert!(first.starts_with("gen-") && first.len() == 9, "{first}");
    assert_ne!(first, second);
}

#[tokio::test]
async fn an_update_with_a_stale_resource_version_is_409_conflict() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let created = maps
        .create(&PostParams::default(), &config_map("cas"))
        .await
        .expect("create");
    let mut fresh = created.clone();
    fresh.data = Some([("k".to_owned(), "new".to_owned())].into());
    let updated = maps
        .replace("cas", &PostParams::default(), &fresh)
        .await
        .expect("update");
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    let mut stale = created;
    stale.data = Some([("k".to_owned(), "lost".to_owned())].into());
    let (code, reason, message) =
        status_of(maps.replace("cas", &PostParams::default(), &stale).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(
        message.contains("the object has been modified"),
        "{message}"
    );
    assert_eq!(
        maps.get("cas").await.expect("get").data.expect("data")["k"],
        "new"
    );
}

#[tokio::test]
async fn an_update_that_changes_nothing_keeps_the_resource_version() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let created = maps
        .create(&PostParams::default(), &config_map("same"))
        .await
        .expect("create");
    let again = maps
        .replace("same", &PostParams::default(), &created)
        .await
        .expect("update");
    assert_eq!(
        again.metadata.resource_version,
        created.metadata.resource_version
    );
}

#[tokio::test]
async fn an_invalid_name_is_422_invalid_naming_the_field() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let result = maps
        .create(&PostParams::default(), &config_map("Not_Valid"))
        .await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected 422, got {result:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status
            .message
            .starts_with("ConfigMap \"Not_Valid\" is invalid: metadata.name"),
        "{}",
        status.message
    );
    let details = status.details.as_ref().expect("details");
    assert_eq!(details.kind, "ConfigMap");
    assert_eq!(details.causes[0].field, "metadata.name");
}

#[tokio::test]
async fn missing_objects_and_namespaces_are_404_not_found() {
    let server = ApiServer::start().await.expect("server starts");
    let client = server.client().await.expect("client");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (code, reason, message) = status_of(maps.get("absent").await);
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (404, "NotFound", "configmaps \"absent\" not found")
    );
    let elsewhere: Api<ConfigMap> = Api::namespaced(client, "nowhere");
    let (code, _, message) = status_of(
        elsewhere
            .create(&PostParams::default(), &config_map("x"))
            .await,
    );
    assert_eq!(code, 404);
    assert_eq!(message, "namespaces \"nowhere\" not found");
}

#[tokio::test]
async fn generation_moves_on_spec_changes_only() {
    let server = ApiServer::start().await.expect("server starts");
    let sets: Api<StatefulSet> = Api::namespaced(server.client().await.expect("client"), "default");
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "serviceName": "web",
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        }
    }))
    .expect("statefulset");
    let created = sets
        .create(&PostParams::default(), &set)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    let mut relabelled = created.clone();
    relabelled.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
    let relabelled = sets
        .replace("web", &PostParams::default(), &relabelled)
        .await
        .expect("label");
    assert_eq!(relabelled.metadata.generation, Some(1));
    let mut scaled = relabelled;
    if let Some(spec) = scaled.spec.as_mut() {
        spec.replicas = Some(3);
    }
    let scaled = sets
        .replace("web", &PostParams::default(), &scaled)
        .await
        .expect("scale");
    assert_eq!(scaled.metadata.generation, Some(2));
}

#[tokio::test]
async fn a_deleted_object_is_gone() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    maps.create(&PostParams::default(), &config_map("bye"))
        .await
        .expect("create");
    maps.delete("bye", &DeleteParams::default())
        .await
        .expect("delete");
    let (code, _, _) = status_of(maps.get("bye").await);
    assert_eq!(code, 404);
    let (code, _, _) = status_of(maps.delete("bye", &DeleteParams::default()).await);
    assert_eq!(code, 404);
}

#[tokio::test]
async fn the_kubeconfig_names_the_server_and_kube_accepts_it() {
    let server = ApiServer::start().await.expect("server starts");
    let text = std::fs::read_to_string(server.kubeconfig_path()).expect("kubeconfig");
    assert!(text.contains(&format!("server: {}", server.url())));
    assert!(text.contains("current-context: shoal-emulator"));
    let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig_path()).expect("parse");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("accepted");
    assert_eq!(
        config.cluster_url.to_string().trim_end_matches('/'),
        server.url()
    );
    let version = server
        .client()
        .await
        .expect("client")
        .apiserver_version()
        .await
        .expect("version");
    assert_eq!(version.major, "1");
}

#[tokio::test]
async fn a_dry_run_create_is_validated_but_not_stored() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let returned = maps
        .create(&dry, &config_map("dry"))
        .await
        .expect("dry run");
    assert_eq!(returned.metadata.name.as_deref(), Some("dry"));
    assert!(maps.get_opt("dry").await.expect("get").is_none());
    let (code, _, _) = status_of(maps.create(&dry, &config_map("Bad_Name")).await);
    assert_eq!(code, 422);
}

#[tokio::test]
async fn delete_collection_removes_only_the_selected_objects() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    for (name, tier) in [("a", "web"), ("b", "web"), ("c", "db")] {
        let mut map = config_map(name);
        map.metadata.labels = Some([("tier".to_owned(), tier.to_owned())].into());
        maps.create(&PostParams::default(), &map)
            .await
            .expect("create");
    }
    maps.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("tier=web"),
    )
    .await
    .expect("delete collection");
    let left: Vec<String> = maps
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|map| map.metadata.name)
        .collect();
    assert_eq!(left, vec!["c"]);
}

#[tokio::test]
async fn a_body_whose_kind_does_not_match_the_path_is_400() {
    let server = ApiServer::start().await.expect("server starts");
    let client = server.client().await.expect("client");
    let body = serde_json::to_vec(
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}),
    )
    .expect("json");
    let result = client
        .request_text(
            http::Request::post("/api/v1/namespaces/default/configmaps")
                .header("content-type", "application/json")
                .body(body)
                .expect("request"),
        )
        .await;
    let (code, reason, _) = status_of(result);
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn leases_can_be_created_by_put() {
    let server = ApiServer::start().await.expect("server starts");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(server.client().await.expect("client"), "default");
    let lease = serde_json::from_value(json!({
        "metadata": {"name": "member"},
        "spec": {"holderIdentity": "pod-0", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"}
    }))
    .expect("lease");
    leases
        .replace("member", &PostParams::default(), &lease)
        .await
        .expect("put creates");
    let stored = leases.get("member").await.expect("get");
    assert_eq!(
        stored.spec.and_then(|spec| spec.holder_identity).as_deref(),
        Some("pod-0")
    );
}
