//! Events: events.k8s.io/v1 and core/v1 Events share storage, so what a
//! kube `Recorder` writes is what `kubectl describe` reads (by
//! involvedObject field selectors).
//!
//! Emulator-only: starts its own `ApiServer` and expects exactly the events it
//! wrote in `default`, which a real cluster's own events would disturb.

use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use shoal_emulator::ApiServer;

async fn setup() -> (ApiServer, kube::Client) {
    let server = ApiServer::start().await.expect("server starts");
    let client = server.client().await.expect("client");
    (server, client)
}

#[tokio::test]
async fn events_written_through_events_k8s_io_are_read_as_core_events() {
    let (_server, client) = setup().await;
    let new_events: Api<EventV1> = Api::namespaced(client.clone(), "default");
    let event: EventV1 = serde_json::from_value(json!({
        "metadata": {"name": "e"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "shoal.dev/controller",
        "reportingInstance": "shoal-0",
        "action": "Reconcile",
        "reason": "Applied",
        "note": "slice written",
        "type": "Normal",
        "regarding": {"kind": "ConfigMap", "name": "cm", "namespace": "default", "uid": "u-1", "apiVersion": "v1"}
    }))
    .expect("event");
    new_events
        .create(&PostParams::default(), &event)
        .await
        .expect("create");
    let core_events: Api<CoreEvent> = Api::namespaced(client, "default");
    let listed = core_events
        .list(&ListParams::default().fields("involvedObject.name=cm,involvedObject.kind=ConfigMap"))
        .await
        .expect("list");
    assert_eq!(listed.items.len(), 1);
    let core = &listed.items[0];
    assert_eq!(core.message.as_deref(), Some("slice written"));
    assert_eq!(core.involved_object.uid.as_deref(), Some("u-1"));
    assert_eq!(
        core.reporting_component.as_deref(),
        Some("shoal.dev/controller")
    );
    let back = new_events.get("e").await.expect("read back");
    assert_eq!(back.note.as_deref(), Some("slice written"));
    assert_eq!(
        back.regarding
            .and_then(|regarding| regarding.name)
            .as_deref(),
        Some("cm")
    );
}
