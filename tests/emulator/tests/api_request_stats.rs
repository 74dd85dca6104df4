//! Request statistics ([`shoal_emulator::RequestStats`]): resource requests
//! counted by user (after impersonation), verb and resource, with their body
//! bytes; discovery is not counted.
//!
//! Emulator-only: the statistics exist only in the emulated API server.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use shoal_emulator::{ApiServer, RequestKey, RequestTally};

fn key(user: &str, verb: &str, resource: &str) -> RequestKey {
    RequestKey {
        user: user.to_owned(),
        verb: verb.to_owned(),
        resource: resource.to_owned(),
    }
}

#[tokio::test]
async fn requests_are_counted_by_user_verb_and_resource_with_their_body_and_response_bytes() {
    let server = ApiServer::start().await.expect("server starts");
    let admin = server.client().await.expect("client");
    let mut config = server.config().await.expect("config");
    config.auth_info.impersonate = Some("shoal-controller".to_owned());
    config.auth_info.impersonate_groups = Some(vec!["system:masters".to_owned()]);
    let controller = kube::Client::try_from(config).expect("impersonating client");
    // Discovery is not a resource request: it is not counted.
    admin.apiserver_version().await.expect("version");
    let before = server.request_stats().snapshot();

    let object: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"k": "v"}}))
            .expect("ConfigMap");
    let sent = serde_json::to_vec(&object).expect("JSON").len() as u64;
    Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &object)
        .await
        .expect("created");
    let maps = Api::<ConfigMap>::namespaced(controller.clone(), "default");
    let patch = json!({"data": {"k": "w"}});
    for _ in 0..2 {
        maps.patch("a", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patched");
    }
    let read = controller
        .request_text(
            http::Request::get("/api/v1/namespaces/default/configmaps/a")
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .expect("read");

    let counts = server.request_stats().snapshot().since(&before);
    // In key order: user, then verb, then resource.
    let rows: Vec<(RequestKey, RequestTally)> = counts
        .iter()
        .map(|(key, tally)| (key.clone(), *tally))
        .collect();
    let patch_bytes = 2 * serde_json::to_vec(&patch).expect("JSON").len() as u64;
    // Each write is answered with the object written: about what the read returned.
    let answered = |verb| counts.total(|key| key.verb == verb).response_bytes;
    for verb in ["create", "patch"] {
        let per_write = answered(verb) / counts.total(|key| key.verb == verb).requests;
        assert!(
            per_write.abs_diff(read.len() as u64) < 64,
            "{verb} answered {per_write} bytes, the object read is {}",
            read.len()
        );
    }
    let (create_answer, patch_answer) = (answered("create"), answered("patch"));
    assert_eq!(
        rows,
        vec![
            (
                key("shoal-controller", "get", "configmaps"),
                RequestTally {
                    requests: 1,
                    body_bytes: 0,
                    response_bytes: read.len() as u64,
                }
            ),
            (
                key("shoal-controller", "patch", "configmaps"),
                RequestTally {
                    requests: 2,
                    body_bytes: patch_bytes,
                    response_bytes: patch_answer,
                }
            ),
            (
                key("system:admin", "create", "configmaps"),
                RequestTally {
                    requests: 1,
                    body_bytes: sent,
                    response_bytes: create_answer,
                }
            ),
        ]
    );
}

#[tokio::test]
async fn a_request_failed_by_an_injected_fault_is_still_counted() {
    let server = ApiServer::start().await.expect("server starts");
    let mut config = server.config().await.expect("config");
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("client");
    server
        .faults()
        .fail_next(1, Some("get"), Some("configmaps"), 500);

    let failed = Api::<ConfigMap>::namespaced(client, "default")
        .get("missing")
        .await;

    assert!(failed.is_err());
    let gets = server
        .request_stats()
        .snapshot()
        .total(|key| key.verb == "get" && key.resource == "configmaps");
    assert_eq!(gets.requests, 1);
}

#[tokio::test]
async fn the_harness_clients_and_kubeconfigs_as_a_user_are_counted_under_that_user() {
    let cluster = shoal_emulator::harness::TestCluster::start()
        .await
        .expect("cluster");
    let stats = cluster.request_stats().expect("emulated");
    let directory = tempfile::tempdir().expect("temp dir");
    let client = cluster
        .client_as("shoal-sidecar", &["system:masters"])
        .await
        .expect("client");
    let kubeconfig = cluster
        .kubeconfig_as(directory.path(), "shoal-controller", &["system:masters"])
        .expect("kubeconfig");
    let before = stats.snapshot();

    Api::<ConfigMap>::namespaced(client, cluster.namespace())
        .get_opt("absent")
        .await
        .expect("read");
    let listed = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["-n", cluster.namespace(), "get", "configmaps"])
        .output()
        .await
        .expect("kubectl runs");

    assert!(listed.status.success(), "{listed:?}");
    let counts = stats.snapshot().since(&before);
    let by = |user: &'static str, verb: &'static str| {
        counts
            .total(|key| key.user == user && key.verb == verb && key.resource == "configmaps")
            .requests
    };
    assert_eq!(by("shoal-sidecar", "get"), 1);
    assert_eq!(by("shoal-controller", "list"), 1);
    cluster.cleanup().await;
}
