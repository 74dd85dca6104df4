//! Fault injection: failing requests with 500/429, forced update conflicts,
//! latency, and dropping every open watch (watchers must recover).
//!
//! Emulator-only: fault injection ([`shoal_emulator::Faults`]) exists only in
//! the emulated API server.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::runtime::watcher;
use serde_json::json;
use shoal_emulator::ApiServer;

/// A client that does not retry 429/503, so the injected failure is seen.
async fn setup() -> (ApiServer, kube::Client) {
    let server = ApiServer::start().await.expect("server starts");
    let mut config = server.config().await.expect("config");
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("client");
    (server, client)
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).expect("cm")
}

fn code<T: std::fmt::Debug>(result: kube::Result<T>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn fail_next_fails_exactly_n_matching_requests() {
    let (server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    server
        .faults()
        .fail_next(2, Some("create"), Some("configmaps"), 500);
    assert_eq!(server.faults().unserved_failures(), 2);
    maps.list(&ListParams::default())
        .await
        .expect("other verbs pass");
    assert_eq!(
        code(maps.create(&PostParams::default(), &config_map("a")).await),
        500
    );
    assert_eq!(
        code(maps.create(&PostParams::default(), &config_map("a")).await),
        500
    );
    assert_eq!(server.faults().unserved_failures(), 0);
    maps.create(&PostParams::default(), &config_map("a"))
        .await
        .expect("third create passes");
}

#[tokio::test]
async fn fail_next_with_429_says_retry_after() {
    let (server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    server.faults().fail_next(1, None, None, 429);
    let result = maps.get_opt("x").await;
    let Err(kube::Error::Api(status)) = result else {
        panic!("expected 429, got {result:?}");
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    assert!(maps.get_opt("x").await.expect("next passes").is_none());
}

#[tokio::test]
async fn an_injected_429_says_retry_after_one_second_in_its_header_as_kube_apiservers_flow_control_does()
 {
    let (server, client) = setup().await;
    server
        .faults()
        .fail_next(1, Some("list"), Some("configmaps"), 429);
    let request = http::Request::get("/api/v1/namespaces/default/configmaps")
        .body(kube::client::Body::from(Vec::new()))
        .expect("a request");
    let response = client.send(request).await.expect("an answer");
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(
        response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok()),
        Some("1")
    );
}

#[tokio::test]
async fn the_server_reports_the_most_writes_of_a_resource_it_held_at_once() {
    let (server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let faults = server.faults();
    faults.set_latency(Duration::from_millis(300));
    for name in ["a", "b"] {
        maps.create(&PostParams::default(), &config_map(name))
            .await
            .expect("create");
    }
    // Reads held at once are no writes.
    let every = ListParams::default();
    let lists = (0..3).map(|_| maps.list(&every));
    futures::future::try_join_all(lists).await.expect("lists");
    assert_eq!(faults.peak_writes_in_flight("configmaps"), 1);
    // Three at once: each waits out the latency while the others arrive.
    let creates = ["c", "d", "e"].map(|name| {
        let maps = maps.clone();
        async move { maps.create(&PostParams::default(), &config_map(name)).await }
    });
    futures::future::try_join_all(creates)
        .await
        .expect("creates");
    let peak = faults.peak_writes_in_flight("configmaps");
    assert!((2..=3).contains(&peak), "{peak}");
    assert_eq!(faults.peak_writes_in_flight("secrets"), 0);
}

#[tokio::test]
async fn the_default_kube_client_retries_an_injected_429() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    server.faults().fail_next(1, Some("list"), None, 429);
    maps.list(&ListParams::default())
        .await
        .expect("kube retries after Retry-After");
}

#[tokio::test]
async fn conflict_next_update_forces_one_409() {
    let (server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    maps.create(&PostParams::default(), &config_map("c"))
        .await
        .expect("create");
    server.faults().conflict_next_update("configmaps");
    let patch = Patch::Merge(json!({"data": {"k": "2"}}));
    assert_eq!(
        code(maps.patch("c", &PatchParams::default(), &patch).await),
        409
    );
    maps.patch("c", &PatchParams::default(), &patch)
        .await
        .expect("second update passes");
}

#[tokio::test]
async fn latency_delays_requests() {
    let (server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    server.faults().set_latency(Duration::from_millis(300));
    let started = Instant::now();
    maps.list(&ListParams::default()).await.expect("list");
    assert!(started.elapsed() >= Duration::from_millis(300));
    server.faults().set_latency(Duration::ZERO);
}

#[tokio::test]
async fn dropping_watches_ends_open_streams() {
    let (server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut stream = maps
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .expect("watch")
        .boxed();
    server.faults().drop_all_watches();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("ends quickly");
    assert!(end.expect("clean end").is_none());
}

#[tokio::test]
async fn a_kube_runtime_watcher_recovers_after_its_watch_is_dropped() {
    let (server, client) = setup().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events = watcher(maps.clone(), watcher::Config::default()).boxed();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .expect("event")
            .expect("ok");
        if matches!(event, Some(watcher::Event::InitDone)) {
            break;
        }
    }
    server.faults().drop_all_watches();
    tokio::time::sleep(Duration::from_millis(200)).await;
    maps.create(&PostParams::default(), &config_map("after-drop"))
        .await
        .expect("create");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(remaining, events.try_next())
            .await
            .expect("recovered in time")
            .expect("ok");
        match event {
            Some(watcher::Event::Apply(map) | watcher::Event::InitApply(map))
                if map.metadata.name.as_deref() == Some("after-drop") =>
            {
                break;
            }
            _ => {}
        }
    }
}
