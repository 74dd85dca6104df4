//! List filtering and paging: equality and set-based label selectors,
//! field selectors (name, namespace, pod fields, event involvedObject),
//! limit/continue.
//!
//! Emulator-only: seeds its own `ApiServer`'s `default` namespace and expects
//! list results to hold exactly those objects.

use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use shoal_emulator::ApiServer;

async fn names(api: &Api<ConfigMap>, params: &ListParams) -> Vec<String> {
    api.list(params)
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|map| map.metadata.name)
        .collect()
}

async fn seeded() -> (ApiServer, Api<ConfigMap>) {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    for (name, labels) in [
        ("a", json!({"tier": "web", "env": "prod"})),
        ("b", json!({"tier": "db", "env": "prod"})),
        ("c", json!({"tier": "web", "env": "dev"})),
        ("d", json!({})),
    ] {
        let map: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                .expect("cm");
        maps.create(&PostParams::default(), &map)
            .await
            .expect("create");
    }
    (server, maps)
}

#[tokio::test]
async fn equality_label_selectors_filter_lists() {
    let (_server, maps) = seeded().await;
    assert_eq!(
        names(&maps, &ListParams::default().labels("tier=web")).await,
        vec!["a", "c"]
    );
    assert_eq!(
        names(&maps, &ListParams::default().labels("tier==web,env=prod")).await,
        vec!["a"]
    );
    assert_eq!(
        names(&maps, &ListParams::default().labels("tier!=web")).await,
        vec!["b", "d"]
    );
}

#[tokio::test]
async fn set_based_label_selectors_filter_lists() {
    let (_server, maps) = seeded().await;
    assert_eq!(
        names(&maps, &ListParams::default().labels("env in (dev, prod)")).await,
        vec!["a", "b", "c"]
    );
    assert_eq!(
        names(&maps, &ListParams::default().labels("tier notin (web)")).await,
        vec!["b", "d"]
    );
    assert_eq!(
        names(&maps, &ListParams::default().labels("tier")).await,
        vec!["a", "b", "c"]
    );
    assert_eq!(
        names(&maps, &ListParams::default().labels("!tier")).await,
        vec!["d"]
    );
    assert_eq!(
        names(
            &maps,
            &ListParams::default().labels("tier in (web),env notin (prod)")
        )
        .await,
        vec!["c"]
    );
}

#[tokio::test]
async fn a_malformed_selector_is_400() {
    let (_server, maps) = seeded().await;
    let result = maps
        .list(&ListParams::default().labels("tier in web"))
        .await;
    assert!(
        matches!(result, Err(kube::Error::Api(ref status)) if status.code == 400),
        "{result:?}"
    );
    let result = maps.list(&ListParams::default().fields("data.k=v")).await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected 400, got {result:?}");
    };
    assert_eq!(status.code, 400);
    assert!(
        status.message.contains("field label not supported: data.k"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn field_selectors_match_name_and_namespace() {
    let (server, maps) = seeded().await;
    assert_eq!(
        names(&maps, &ListParams::default().fields("metadata.name=b")).await,
        vec!["b"]
    );
    assert_eq!(
        names(&maps, &ListParams::default().fields("metadata.name!=b")).await,
        vec!["a", "c", "d"]
    );
    let client = server.client().await.expect("client");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "other"}})).expect("ns");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "other");
    let map: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "z"}})).expect("cm");
    elsewhere
        .create(&PostParams::default(), &map)
        .await
        .expect("create");
    let everywhere: Api<ConfigMap> = Api::all(client);
    assert_eq!(
        names(&everywhere, &ListParams::default()).await,
        vec!["a", "b", "c", "d", "z"]
    );
    assert_eq!(
        names(
            &everywhere,
            &ListParams::default().fields("metadata.namespace=other")
        )
        .await,
        vec!["z"]
    );
}

#[tokio::test]
async fn pod_field_selectors_match_phase_and_node() {
    let server = ApiServer::start().await.expect("server starts");
    let pods: Api<Pod> = Api::namespaced(server.client().await.expect("client"), "default");
    for (name, node) in [("p1", "n1"), ("p2", "n2")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create");
    }
    let on_n2 = pods
        .list(&ListParams::default().fields("spec.nodeName=n2"))
        .await
        .expect("list");
    assert_eq!(on_n2.items.len(), 1);
    assert_eq!(on_n2.items[0].metadata.name.as_deref(), Some("p2"));
    let pending = pods
        .list(&ListParams::default().fields("status.phase=Pending"))
        .await
        .expect("list");
    assert_eq!(pending.items.len(), 2, "new pods start Pending");
}

#[tokio::test]
async fn event_field_selectors_match_the_involved_object() {
    let server = ApiServer::start().await.expect("server starts");
    let events: Api<Event> = Api::namespaced(server.client().await.expect("client"), "default");
    for (name, target) in [("e1", "cm-a"), ("e2", "cm-b")] {
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": name},
            "involvedObject": {"kind": "ConfigMap", "name": target, "namespace": "default", "uid": format!("uid-{target}")},
            "reason": "Test", "message": "m", "type": "Normal"
        }))
        .expect("event");
        events
            .create(&PostParams::default(), &event)
            .await
            .expect("create");
    }
    let selected = events
        .list(&ListParams::default().fields("involvedObject.name=cm-b,involvedObject.namespace=default,involvedObject.kind=ConfigMap"))
        .await
        .expect("list");
    assert_eq!(selected.items.len(), 1);
    assert_eq!(selected.items[0].metadata.name.as_deref(), Some("e2"));
    let by_uid = events
        .list(&ListParams::default().fields("involvedObject.uid=uid-cm-a"))
        .await
        .expect("list");
    assert_eq!(by_uid.items.len(), 1);
}

#[tokio::test]
async fn limit_and_continue_page_through_a_list() {
    let (_server, maps) = seeded().await;
    let first = maps
        .list(&ListParams::default().limit(3))
        .await
        .expect("page 1");
    let first_names: Vec<String> = first
        .items
        .iter()
        .filter_map(|map| map.metadata.name.clone())
        .collect();
    assert_eq!(first_names, vec!["a", "b", "c"]);
    assert_eq!(first.metadata.remaining_item_count, Some(1));
    let token = first.metadata.continue_.clone().expect("continue token");
    let second = maps
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .expect("page 2");
    let second_names: Vec<String> = second
        .items
        .iter()
        .filter_map(|map| map.metadata.name.clone())
        .collect();
    assert_eq!(second_names, vec!["d"]);
    assert!(
        second
            .metadata
            .continue_
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
}

#[tokio::test]
async fn limit_applies_after_the_selector() {
    let (_server, maps) = seeded().await;
    let page = maps
        .list(&ListParams::default().labels("tier=web").limit(1))
        .await
        .expect("page");
    assert_eq!(page.items.len(), 1);
    let token = page.metadata.continue_.clone().expect("token");
    let rest = maps
        .list(
            &ListParams::default()
                .labels("tier=web")
                .limit(1)
                .continue_token(&token),
        )
        .await
        .expect("rest");
    assert_eq!(rest.items[0].metadata.name.as_deref(), Some("c"));
}
