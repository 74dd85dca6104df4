//! Watches through the kube client and kube-runtime: initial events, resume
//! from a version, bookmarks, 410 Gone, timeouts, selector transitions.
//!
//! Emulator-only: starts its own `ApiServer`, some with a tiny watch history so
//! that 410 Gone (compaction) happens on demand, and exact resourceVersions.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;
use shoal_emulator::{ApiServer, ServerOptions};

fn config_map(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .expect("cm")
}

fn describe(event: &WatchEvent<ConfigMap>) -> String {
    match event {
        WatchEvent::Added(map) => {
            format!("ADDED {}", map.metadata.name.as_deref().unwrap_or_default())
        }
        WatchEvent::Modified(map) => format!(
            "MODIFIED {}",
            map.metadata.name.as_deref().unwrap_or_default()
        ),
        WatchEvent::Deleted(map) => format!(
            "DELETED {}",
            map.metadata.name.as_deref().unwrap_or_default()
        ),
        WatchEvent::Bookmark(bookmark) => {
            format!("BOOKMARK {}", bookmark.metadata.resource_version)
        }
        WatchEvent::Error(status) => format!("ERROR {}", status.code),
    }
}

async fn next_events(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
    count: usize,
) -> Vec<String> {
    let mut seen = Vec::new();
    while seen.len() < count {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event within 5 s")
            .expect("stream open")
            .expect("event decodes");
        if !matches!(event, WatchEvent::Bookmark(_)) {
            seen.push(describe(&event));
        }
    }
    seen
}

#[tokio::test]
async fn a_watch_from_a_version_replays_every_later_change_in_order() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let first = maps
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .expect("create a");
    let from = first.metadata.resource_version.expect("version");
    maps.create(&PostParams::default(), &config_map("b", json!({})))
        .await
        .expect("create b");
    maps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .expect("patch");
    maps.delete("b", &DeleteParams::default())
        .await
        .expect("delete");
    let mut stream = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();
    assert_eq!(
        next_events(&mut stream, 3).await,
        vec!["ADDED b", "MODIFIED a", "DELETED b"]
    );
    maps.create(&PostParams::default(), &config_map("c", json!({})))
        .await
        .expect("create c");
    assert_eq!(next_events(&mut stream, 1).await, vec!["ADDED c"]);
}

#[tokio::test]
async fn a_watch_from_version_zero_starts_with_the_current_objects() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    for name in ["x", "y"] {
        maps.create(&PostParams::default(), &config_map(name, json!({})))
            .await
            .expect("create");
    }
    let mut stream = maps
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    assert_eq!(
        next_events(&mut stream, 2).await,
        vec!["ADDED x", "ADDED y"]
    );
}

#[tokio::test]
async fn a_streaming_list_ends_its_initial_events_with_a_marked_bookmark() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    maps.create(&PostParams::default(), &config_map("x", json!({})))
        .await
        .expect("create");
    let mut stream = maps
        .watch(&WatchParams::streaming_lists(), "")
        .await
        .expect("watch")
        .boxed();
    let added = stream.try_next().await.expect("event").expect("open");
    assert_eq!(describe(&added), "ADDED x");
    let Some(WatchEvent::Bookmark(bookmark)) = stream.try_next().await.expect("event") else {
        panic!("expected the initial-events-end bookmark");
    };
    assert_eq!(
        bookmark
            .metadata
            .annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
}

#[tokio::test]
async fn an_idle_watch_that_asks_for_bookmarks_gets_them() {
    let options = ServerOptions {
        bookmark_interval: Duration::from_millis(100),
        ..ServerOptions::default()
    };
    let server = ApiServer::start_with(options).await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let created = maps
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await
        .expect("create");
    let from = created.metadata.resource_version.expect("version");
    let mut stream = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();
    let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("a bookmark within 5 s")
        .expect("event");
    let Some(WatchEvent::Bookmark(bookmark)) = event else {
        panic!("expected a bookmark, got {event:?}");
    };
    assert_eq!(bookmark.metadata.resource_version, from);
}

#[tokio::test]
async fn a_watch_from_a_version_older_than_the_history_gets_410_gone() {
    let options = ServerOptions {
        watch_history: 5,
        ..ServerOptions::default()
    };
    let server = ApiServer::start_with(options).await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let first = maps
        .create(&PostParams::default(), &config_map("old", json!({})))
        .await
        .expect("create");
    for round in 0..10 {
        maps.patch(
            "old",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": round.to_string()}})),
        )
        .await
        .expect("patch");
    }
    let from = first.metadata.resource_version.expect("version");
    let mut stream = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();
    let event = stream.try_next().await.expect("event").expect("open");
    let WatchEvent::Error(status) = event else {
        panic!("expected an ERROR event, got {event:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(
        status.message.starts_with("too old resource version"),
        "{}",
        status.message
    );
    assert!(
        stream.try_next().await.expect("clean end").is_none(),
        "the stream ends after the error"
    );
}

#[tokio::test]
async fn a_watch_ends_after_its_timeout() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let started = std::time::Instant::now();
    let mut stream = maps
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), "0")
        .await
        .expect("watch")
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("ends within 5 s");
    assert!(end.expect("clean end").is_none());
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn an_object_leaving_a_label_selector_is_deleted_from_the_watch_and_joining_it_is_added() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let created = maps
        .create(
            &PostParams::default(),
            &config_map("m", json!({"tier": "a"})),
        )
        .await
        .expect("create");
    let from = created.metadata.resource_version.expect("version");
    let mut stream = maps
        .watch(&WatchParams::default().labels("tier in (a)"), &from)
        .await
        .expect("watch")
        .boxed();
    maps.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "b"}}})),
    )
    .await
    .expect("relabel");
    maps.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "a"}}})),
    )
    .await
    .expect("relabel back");
    assert_eq!(
        next_events(&mut stream, 2).await,
        vec!["DELETED m", "ADDED m"]
    );
}

#[tokio::test]
async fn a_field_selector_on_the_name_watches_one_object() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    let mut stream = maps
        .watch(&WatchParams::default().fields("metadata.name=wanted"), "0")
        .await
        .expect("watch")
        .boxed();
    maps.create(&PostParams::default(), &config_map("other", json!({})))
        .await
        .expect("create");
    maps.create(&PostParams::default(), &config_map("wanted", json!({})))
        .await
        .expect("create");
    assert_eq!(next_events(&mut stream, 1).await, vec!["ADDED wanted"]);
}

#[tokio::test]
async fn a_kube_runtime_watcher_sees_creates_updates_and_deletes() {
    let server = ApiServer::start().await.expect("server starts");
    let maps: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    maps.create(&PostParams::default(), &config_map("before", json!({})))
        .await
        .expect("create");
    let mut events = watcher(maps.clone(), watcher::Config::default()).boxed();
    let mut initial = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .expect("event")
            .expect("ok")
        {
            Some(watcher::Event::InitApply(map)) => {
                initial.push(map.metadata.name.unwrap_or_default())
            }
            Some(watcher::Event::InitDone) => break,
            _ => {}
        }
    }
    assert_eq!(initial, vec!["before"]);
    maps.create(&PostParams::default(), &config_map("after", json!({})))
        .await
        .expect("create");
    maps.delete("before", &DeleteParams::default())
        .await
        .expect("delete");
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .expect("event")
            .expect("ok")
        {
            Some(watcher::Event::Apply(map)) => {
                seen.push(format!("apply {}", map.metadata.name.unwrap_or_default()))
            }
            Some(watcher::Event::Delete(map)) => {
                seen.push(format!("delete {}", map.metadata.name.unwrap_or_default()))
            }
            _ => {}
        }
    }
    assert_eq!(seen, vec!["apply after", "delete before"]);
}
