//! Size limits as a real API server enforces them, with its codes and messages
//! (Kubernetes 1.32+ wording; 1.30 and 1.31 say `must have at most N bytes`, which
//! these tests also accept): a request body over 3 MiB (413), annotations over
//! 256 KiB (422), ConfigMap and Secret data over 1 MiB (422), and an object over
//! etcd's 1.5 MiB request limit (500 `etcdserver: request is too large`). Every
//! write path is covered: create, update, each patch type, server-side apply and
//! a status write; a refused write leaves the stored object as it was.
//!
//! Uses only the public API, so it runs on the emulator and on a real cluster
//! (`SHOAL_TEST_KUBECONFIG`).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use shoal_emulator::harness::TestCluster;
use shoal_emulator::harness::fixtures::PAUSE_IMAGE;

const MIB: usize = 1024 * 1024;

async fn cluster() -> TestCluster {
    TestCluster::start().await.expect("a test cluster")
}

/// The code, reason and message of a refusal.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason, status.message),
        other => panic!("expected the server to refuse the write, got {other:?}"),
    }
}

/// Whether `message` ends with the real server's "too long" wording for `limit`.
fn says_too_long(message: &str, field: &str, limit: usize) -> bool {
    message.ends_with(&format!(
        "{field}: Too long: may not be more than {limit} bytes"
    )) || message.ends_with(&format!(
        "{field}: Too long: must have at most {limit} bytes"
    ))
}

fn config_map(name: &str, data: BTreeMap<String, String>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// Many long keys with empty values: over etcd's limit while the data (values
/// only, as the real server counts it) is empty.
fn many_long_keys() -> BTreeMap<String, String> {
    (0..8_000)
        .map(|index| (format!("{index:05}-{}", "k".repeat(220)), String::new()))
        .collect()
}

fn assert_etcd_refusal(refused: (u16, String, String)) {
    let (code, reason, message) = refused;
    assert_eq!(code, 500, "{reason}: {message}");
    assert_eq!(reason, "", "{message}");
    assert_eq!(message, "etcdserver: request is too large");
}

#[tokio::test]
async fn a_request_body_over_three_mebibytes_is_refused_with_413_on_create_and_patch() {
    let cluster = cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    let huge: BTreeMap<String, String> = [("big".to_owned(), "x".repeat(3 * MIB + 1))].into();
    let (code, reason, message) = refusal(
        maps.create(&PostParams::default(), &config_map("huge", huge.clone()))
            .await,
    );
    assert_eq!(code, 413, "{message}");
    assert_eq!(reason, "RequestEntityTooLarge");
    assert_eq!(message, "Request entity too large: limit is 3145728");

    maps.create(
        &PostParams::default(),
        &config_map("small", BTreeMap::new()),
    )
    .await
    .expect("a small ConfigMap is accepted");
    let patch = json!({"data": huge});
    let (code, reason, _) = refusal(
        maps.patch("small", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    );
    assert_eq!((code, reason.as_str()), (413, "RequestEntityTooLarge"));
    let stored = maps.get("small").await.expect("still there");
    assert_eq!(stored.data.unwrap_or_default(), BTreeMap::new());
    cluster.cleanup().await;
}

#[tokio::test]
async fn config_map_data_of_exactly_one_mebibyte_is_accepted_and_one_byte_more_is_invalid() {
    let cluster = cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    // Data and binaryData count together; keys do not count.
    let mut at_limit = config_map("at-limit", [("a".to_owned(), "x".repeat(MIB - 10))].into());
    at_limit.binary_data = Some([("b".to_owned(), ByteString(vec![7; 10]))].into());
    maps.create(&PostParams::default(), &at_limit)
        .await
        .expect("1 MiB of data is within the limit");

    let mut over = config_map("over", [("a".to_owned(), "x".repeat(MIB - 10))].into());
    over.binary_data = Some([("b".to_owned(), ByteString(vec![7; 11]))].into());
    let (code, reason, message) = refusal(maps.create(&PostParams::default(), &over).await);
    assert_eq!(code, 422, "{message}");
    assert_eq!(reason, "Invalid");
    assert!(
        message.starts_with("ConfigMap \"over\" is invalid: ")
            && says_too_long(&message, "[]", MIB),
        "{message}"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn config_map_data_over_the_limit_is_refused_by_update_every_patch_type_and_apply() {
    let cluster = cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    let original: BTreeMap<String, String> = [("kept".to_owned(), "yes".to_owned())].into();
    let created = maps
        .create(
            &PostParams::default(),
            &config_map("target", original.clone()),
        )
        .await
        .expect("create");
    let big = "y".repeat(MIB + 1);

    let mut replaced = created.clone();
    replaced.data = Some([("big".to_owned(), big.clone())].into());
    let update = maps
        .replace("target", &PostParams::default(), &replaced)
        .await;
    let merge = maps
        .patch(
            "target",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"big": big}})),
        )
        .await;
    let strategic = maps
        .patch(
            "target",
            &PatchParams::default(),
            &Patch::Strategic(&json!({"data": {"big": big}})),
        )
        .await;
    let operations = json!([{"op": "add", "path": "/data/big", "value": big}]);
    let json_request = http::Request::patch(format!(
        "/api/v1/namespaces/{}/configmaps/target",
        cluster.namespace()
    ))
    .header("content-type", "application/json-patch+json")
    .body(serde_json::to_vec(&operations).expect("json"))
    .expect("request");
    let json_result = cluster.client().request::<ConfigMap>(json_request).await;
    let apply = maps
        .patch(
            "target",
            &PatchParams::apply("size-test").force(),
            &Patch::Apply(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "target"},
                "data": {"big": big},
            })),
        )
        .await;
    for (path, result) in [
        ("update", update),
        ("merge patch", merge),
        ("strategic merge patch", strategic),
        ("JSON patch", json_result),
        ("server-side apply", apply),
    ] {
        let (code, reason, message) = refusal(result);
        assert_eq!(
            (code, reason.as_str()),
            (422, "Invalid"),
            "{path}: {message}"
        );
        assert!(says_too_long(&message, "[]", MIB), "{path}: {message}");
    }
    let stored = maps.get("target").await.expect("still there");
    assert_eq!(stored.data, Some(original));
    cluster.cleanup().await;
}

#[tokio::test]
async fn secret_data_over_one_mebibyte_is_invalid_on_the_data_field() {
    let cluster = cluster().await;
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), cluster.namespace());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("big".to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("blob".to_owned(), ByteString(vec![1; MIB + 1]))].into()),
        ..Secret::default()
    };
    let (code, reason, message) = refusal(secrets.create(&PostParams::default(), &secret).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(
        message.starts_with("Secret \"big\" is invalid: ") && says_too_long(&message, "data", MIB),
        "{message}"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn annotations_over_256_kibibytes_are_invalid_on_create_and_patch() {
    let cluster = cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    // Keys count with values: 10 bytes of key and 262134 of value is the limit.
    let mut at_limit = config_map("annotated", BTreeMap::new());
    at_limit.metadata.annotations = Some([("0123456789".to_owned(), "v".repeat(262_134))].into());
    maps.create(&PostParams::default(), &at_limit)
        .await
        .expect("256 KiB of annotations is within the limit");

    let mut over = config_map("over", BTreeMap::new());
    over.metadata.annotations = Some([("0123456789".to_owned(), "v".repeat(262_135))].into());
    let (code, reason, message) = refusal(maps.create(&PostParams::default(), &over).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(
        message.starts_with("ConfigMap \"over\" is invalid: ")
            && says_too_long(&message, "metadata.annotations", 262_144),
        "{message}"
    );

    let patch = json!({"metadata": {"annotations": {"another": "w"}}});
    let (code, _, message) = refusal(
        maps.patch("annotated", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(
        says_too_long(&message, "metadata.annotations", 262_144),
        "{message}"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn an_object_over_etcds_request_limit_is_refused_with_etcds_error_on_create_and_update() {
    let cluster = cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    assert_etcd_refusal(refusal(
        maps.create(
            &PostParams::default(),
            &config_map("keys", many_long_keys()),
        )
        .await,
    ));
    let created = maps
        .create(
            &PostParams::default(),
            &config_map("grows", BTreeMap::new()),
        )
        .await
        .expect("create");
    let mut grown = created;
    grown.data = Some(many_long_keys());
    assert_etcd_refusal(refusal(
        maps.replace("grows", &PostParams::default(), &grown).await,
    ));
    let stored = maps.get("grows").await.expect("still there");
    assert_eq!(stored.data.unwrap_or_default(), BTreeMap::new());
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_status_write_that_makes_the_object_too_large_for_etcd_is_refused() {
    let cluster = cluster().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "status-size"},
        "spec": {"containers": [{"name": "app", "image": PAUSE_IMAGE}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let status = json!({"status": {"message": "m".repeat(MIB + MIB / 2)}});
    assert_etcd_refusal(refusal(
        pods.patch_status(
            "status-size",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await,
    ));
    let stored = pods.get("status-size").await.expect("still there");
    assert_eq!(stored.status.and_then(|status| status.message), None);
    cluster.cleanup().await;
}
