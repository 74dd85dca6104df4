//! Watch streams: newline-delimited JSON events (ADDED, MODIFIED, DELETED,
//! BOOKMARK, ERROR), resuming from a resourceVersion out of the store's
//! history, with initial events, bookmarks, 410 Gone and timeouts.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::errors::ApiError;
use super::events::to_wire;
use super::handlers::{Filters, Presentation, partial_metadata};
use super::http::{ApiRequest, Shared};
use super::registry::ResourceType;
use super::store::Change;
use super::table;

/// Where the stream starts.
enum Start {
    /// Synthetic ADDED events for the current state, then changes.
    Snapshot { end_bookmark: bool },
    /// Changes after this version.
    After(u64),
}

struct WatchSpec {
    resource_type: Arc<ResourceType>,
    namespace: Option<String>,
    filters: Filters,
    presentation: Presentation,
    bookmarks: bool,
    timeout: Option<Duration>,
}

impl WatchSpec {
    fn render(&self, event_type: &str, object: &Value, first_table: &mut bool) -> Bytes {
        let object = match &self.presentation {
            Presentation::Full => object.clone(),
            Presentation::Metadata => partial_metadata(object),
            Presentation::Table { include_object } => {
                let version = object["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let rendered = table::table(
                    &self.resource_type,
                    std::slice::from_ref(object),
                    include_object,
                    &version,
                    None,
                    *first_table,
                );
                *first_table = false;
                rendered
            }
        };
        line(&json!({"type": event_type, "object": object}))
    }

    fn bookmark(&self, version: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": version.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let (kind, api_version) = match self.presentation {
            Presentation::Metadata => (
                "PartialObjectMetadata".to_owned(),
                "meta.k8s.io/v1".to_owned(),
            ),
            _ => (
                self.resource_type.kind.clone(),
                self.resource_type.api_version(),
            ),
        };
        line(
            &json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": metadata}}),
        )
    }

    fn in_scope(&self, change: &Change) -> bool {
        change.key.group == self.resource_type.storage_group
            && change.key.resource == self.resource_type.storage_resource
            && self
                .namespace
                .as_ref()
                .is_none_or(|namespace| *namespace == change.key.namespace)
    }

    /// The event a change produces for this watch, if any.
    fn event(&self, change: &Change) -> Option<(&'static str, Value)> {
        if !self.in_scope(change) {
            return None;
        }
        // Filtered on the stored object, converted only when sent (`matches_stored`).
        let old_matches = change
            .old
            .as_ref()
            .is_some_and(|old| self.matches_stored(old));
        let wire = |stored: &Value| to_wire(&self.resource_type, stored);
        match &change.new {
            None => change
                .old
                .as_ref()
                .filter(|_| old_matches)
                .map(|old| ("DELETED", wire(old))),
            Some(new) => {
                let new_matches = self.matches_stored(new);
                match (change.old.is_some() && old_matches, new_matches) {
                    (true, true) => Some(("MODIFIED", wire(new))),
                    (false, true) => Some(("ADDED", wire(new))),
                    (true, false) => Some(("DELETED", wire(new))),
                    (false, false) => None,
                }
            }
        }
    }

    fn matches_stored(&self, stored: &Value) -> bool {
        self.filters.matches_stored(&self.resource_type, stored)
    }
}

fn line(value: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

pub fn serve_watch(shared: Arc<Shared>, request: ApiRequest) -> Response {
    let filters = match Filters::of(&request) {
        Ok(filters) => filters,
        Err(error) => return error.into_response(),
    };
    let timeout = match request.query.get("timeoutSeconds") {
        Some(seconds) => match seconds.parse::<u64>() {
            Ok(seconds) => Some(Duration::from_secs(seconds)),
            Err(_) => {
                return ApiError::bad_request(format!("invalid timeoutSeconds {seconds:?}"))
                    .into_response();
            }
        },
        None => None,
    };
    let send_initial = request.query.get("sendInitialEvents") == Some("true");
    let start = match request.query.get("resourceVersion") {
        None | Some("") | Some("0") => Start::Snapshot {
            end_bookmark: send_initial,
        },
        Some(_) if send_initial => Start::Snapshot { end_bookmark: true },
        Some(version) => match version.parse::<u64>() {
            Ok(version) => Start::After(version),
            Err(_) => {
                return ApiError::bad_request(format!(
                    "invalid resourceVersion {version:?}: must be an integer"
                ))
                .into_response();
            }
        },
    };
    let spec = WatchSpec {
        resource_type: request.target.resource_type.clone(),
        namespace: request.target.namespace.clone(),
        filters,
        presentation: Presentation::of(&request),
        bookmarks: request.query.flag("allowWatchBookmarks"),
        timeout,
    };
    let (sender, receiver) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    tokio::spawn(run(shared, spec, start, sender));
    let mut response = (
        StatusCode::OK,
        Body::from_stream(ReceiverStream::new(receiver)),
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

async fn run(
    shared: Arc<Shared>,
    spec: WatchSpec,
    start: Start,
    sender: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let mut versions = shared.versions.subscribe();
    let mut drops = shared.faults.drop_signal();
    drops.borrow_and_update();
    let mut shutdown = shared.shutdown.clone();
    if *shutdown.borrow_and_update() {
        return;
    }
    let deadline = spec
        .timeout
        .map(|timeout| tokio::time::Instant::now() + timeout);
    let mut first_table = true;
    versions.borrow_and_update();
    let mut last = match start {
        Start::After(version) => version,
        Start::Snapshot { end_bookmark } => {
            let (objects, version) = {
                let store = shared.read();
                let objects: Vec<Value> = store
                    .list(
                        &spec.resource_type.storage_group,
                        &spec.resource_type.storage_resource,
                        spec.namespace.as_deref(),
                    )
                    .filter(|(_, stored)| spec.filters.matches_stored(&spec.resource_type, stored))
                    .map(|(_, stored)| to_wire(&spec.resource_type, stored))
                    .collect();
                (objects, store.resource_version())
            };
            for object in &objects {
                if sender
                    .send(Ok(spec.render("ADDED", object, &mut first_table)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if end_bookmark && sender.send(Ok(spec.bookmark(version, true))).await.is_err() {
                return;
            }
            version
        }
    };
    let bookmark_interval = shared
        .options
        .bookmark_interval
        .max(Duration::from_millis(10));
    loop {
        versions.borrow_and_update();
        let changes = shared.read().changes_since(last);
        match changes {
            Err(compacted) => {
                let status = ApiError::gone(format!(
                    "too old resource version: {} ({})",
                    compacted.requested, compacted.oldest
                ))
                .to_status();
                let _ = sender
                    .send(Ok(line(&json!({"type": "ERROR", "object": status}))))
                    .await;
                return;
            }
            Ok(changes) => {
                for change in changes {
                    last = change.resource_version;
                    if let Some((event_type, object)) = spec.event(&change)
                        && sender
                            .send(Ok(spec.render(event_type, &object, &mut first_table)))
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let until_deadline = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = versions.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = drops.changed() => return,
            _ = shutdown.changed() => return,
            _ = until_deadline => return,
            _ = sender.closed() => return,
            _ = tokio::time::sleep(bookmark_interval), if spec.bookmarks => {
                if sender.send(Ok(spec.bookmark(last, false))).await.is_err() {
                    return;
                }
            }
        }
    }
}
