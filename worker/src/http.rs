//! The localhost HTTP server: the slice for applications in any language.
//!
//! | endpoint | what |
//! | --- | --- |
//! | `GET /v1/slice` | the delivered slice as JSON (`swarm`, `member`, `revision`, `hash`, `jobs`, `instances`, `fenced`); 404 before the first slice |
//! | `GET /v1/slice?waitForRevisionAfter=N[&timeoutSeconds=T]` | long poll: answers once the delivered revision is above `N` or the delivery changes otherwise (e.g. fencing), or after `T` seconds (default 30, at most 300) with whatever is current |
//! | `GET /v1/slice?waitForChangeFrom=H[&timeoutSeconds=T]` | long poll: answers once the delivered slice's hash is not `H` (an instance change keeps the revision and changes the hash) or the delivery changes otherwise, or after `T` seconds |
//! | `GET /v1/watch` | NDJSON stream: the current slice, then one line per change |
//! | `POST /v1/ack` | `{"revision": N, "hash": "sha256:…"}`: the application confirms it applied the delivered slice (file/HTTP mode without `--ack-on-apply`) |
//! | `GET /healthz` | 200 while the process runs |
//! | `GET /readyz` | 200 when the slice watch has synced and the sidecar is not fenced, else 503; JSON detail either way |
//! | `GET /metrics` | Prometheus text format; OpenMetrics when `Accept` asks for `application/openmetrics-text` |
//! | `GET /openapi.yaml` | the OpenAPI 3 document of this API (`worker/openapi.yaml`) |
//!
//! Any other path or method answers 404 with a JSON `error`. The slice is JSON on
//! `/v1/slice` (no YAML parser needed); the same slice as YAML is the `--slice-file`.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_stream::wrappers::WatchStream;

use crate::view::{AckTarget, Delivered, SliceView};
use crate::{AckRefused, Shared};

/// The JSON body of `GET /v1/slice` and of each `/v1/watch` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceResponse {
    /// The slice (with no jobs while fenced).
    #[serde(flatten)]
    pub slice: SliceView,
    /// Whether the sidecar is fenced (run nothing).
    pub fenced: bool,
}

/// The JSON body of `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// Synced and not fenced.
    pub ready: bool,
    /// Self-fenced: the Lease could not be renewed in time.
    pub fenced: bool,
    /// The slice watch completed its first list.
    pub synced: bool,
    /// Revision of the slice in force, if any.
    pub revision: Option<u64>,
    /// Revision last acknowledged on the Lease, if any.
    pub acked_revision: Option<u64>,
    /// Why the newest slice ConfigMap was rejected (the last good one stays in force).
    pub rejected: Option<String>,
    /// The slice ConfigMap does not exist (not yet, or deleted).
    pub config_map_missing: bool,
    /// The last watch error, until the watch recovers.
    pub watch_error: Option<String>,
    /// The last Lease renewal error, until a renewal succeeds.
    pub lease_error: Option<String>,
    /// The last slice-file write error, until a write succeeds.
    pub file_error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SliceQuery {
    wait_for_revision_after: Option<u64>,
    /// A slice hash: answer once the delivered slice's hash is another. An
    /// instance change keeps the revision and changes the hash, so a worker
    /// that acknowledges by revision and hash waits with this.
    wait_for_change_from: Option<String>,
    timeout_seconds: Option<u64>,
}

impl SliceQuery {
    /// Whether this is a long poll at all.
    fn waits(&self) -> bool {
        self.wait_for_revision_after.is_some() || self.wait_for_change_from.is_some()
    }

    /// Whether `delivered` already differs from what the caller holds.
    fn answered_by(&self, delivered: &Delivered) -> bool {
        delivered.slice.as_ref().is_some_and(|slice| {
            self.wait_for_revision_after
                .is_some_and(|after| slice.revision > after)
                || self
                    .wait_for_change_from
                    .as_deref()
                    .is_some_and(|hash| slice.hash != hash)
        })
    }
}

const DEFAULT_LONG_POLL: Duration = Duration::from_secs(30);
const MAX_LONG_POLL: Duration = Duration::from_secs(300);

/// Every route the local API answers, as (method, path): the router is built from this
/// list alone, and `worker/openapi.yaml` documents exactly these (a test holds both).
pub const ROUTES: [(&str, &str); 7] = [
    ("get", "/v1/slice"),
    ("get", "/v1/watch"),
    ("post", "/v1/ack"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.yaml"),
];

/// The OpenAPI 3 document of the local API, served at `GET /openapi.yaml`.
pub const OPENAPI_YAML: &str = include_str!("../openapi.yaml");

/// The handler of one route of [`ROUTES`].
fn endpoint(method: &str, path: &str) -> Option<MethodRouter<Arc<Shared>>> {
    Some(match (method, path) {
        ("get", "/v1/slice") => get(get_slice),
        ("get", "/v1/watch") => get(watch_slices),
        ("post", "/v1/ack") => post(post_ack),
        ("get", "/healthz") => get(|| async { "ok\n" }),
        ("get", "/readyz") => get(readyz),
        ("get", "/metrics") => get(metrics),
        ("get", "/openapi.yaml") => {
            get(|| async { ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML) })
        }
        _ => return None,
    })
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let mut router = Router::new();
    for (method, path) in ROUTES {
        if let Some(handler) = endpoint(method, path) {
            router = router.route(path, handler);
        }
    }
    router.fallback(no_such_route).with_state(shared)
}

/// A path or method the local API does not have.
async fn no_such_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error_body(
        StatusCode::NOT_FOUND,
        format!(
            "no route {method} {}; the local API is described at GET /openapi.yaml",
            uri.path()
        ),
    )
}

/// The router of the separate metrics listener (`--metrics-address`): `/metrics` and
/// nothing else, so that exposing it beyond the pod reveals no slice and takes no ack.
pub(crate) fn metrics_router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(shared)
}

fn slice_response(delivered: &Delivered) -> Option<SliceResponse> {
    delivered.slice.as_ref().map(|slice| SliceResponse {
        slice: (**slice).clone(),
        fenced: delivered.fenced,
    })
}

fn error_body(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": message.into() }))).into_response()
}

fn current_slice_response(delivered: &Delivered) -> Response {
    match slice_response(delivered) {
        Some(body) => Json(body).into_response(),
        None => error_body(StatusCode::NOT_FOUND, "no slice delivered yet"),
    }
}

async fn get_slice(State(shared): State<Arc<Shared>>, Query(query): Query<SliceQuery>) -> Response {
    let mut delivered = shared.delivered.subscribe();
    if !query.waits() {
        return current_slice_response(&delivered.borrow_and_update());
    }
    let timeout = query
        .timeout_seconds
        .map_or(DEFAULT_LONG_POLL, Duration::from_secs)
        .min(MAX_LONG_POLL);
    let start = delivered.borrow_and_update().clone();
    if query.answered_by(&start) {
        return current_slice_response(&start);
    }
    let mut shutdown = shared.shutdown.subscribe();
    tokio::select! {
        _ = tokio::time::sleep(timeout) => {}
        _ = delivered.wait_for(|now| *now != start) => {}
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
    current_slice_response(&delivered.borrow())
}

async fn watch_slices(State(shared): State<Arc<Shared>>) -> Response {
    let mut shutdown = shared.shutdown.subscribe();
    let lines = WatchStream::new(shared.delivered.subscribe())
        .filter_map(|delivered| async move { slice_response(&delivered) })
        .map(|body| {
            let mut line = serde_json::to_vec(&body)?;
            line.push(b'\n');
            Ok::<_, serde_json::Error>(line)
        })
        .take_until(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(lines))
        .unwrap_or_else(|error| error_body(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))
}

async fn post_ack(
    State(shared): State<Arc<Shared>>,
    body: Result<Json<AckTarget>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(target) = match body {
        Ok(body) => body,
        Err(rejection) => {
            return error_body(
                StatusCode::BAD_REQUEST,
                format!(
                    "ack body must be {{\"revision\": N, \"hash\": \"sha256:…\"}}: {rejection}"
                ),
            );
        }
    };
    match shared.app_ack(target) {
        Ok(accepted) => (StatusCode::ACCEPTED, Json(accepted)).into_response(),
        Err(refused @ AckRefused::Automatic) => {
            error_body(StatusCode::CONFLICT, refused.to_string())
        }
        Err(refused @ AckRefused::Fenced) => {
            error_body(StatusCode::SERVICE_UNAVAILABLE, refused.to_string())
        }
        Err(refused) => error_body(StatusCode::CONFLICT, refused.to_string()),
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let readiness = shared.readiness();
    let code = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(readiness)).into_response()
}

/// The Prometheus text format unless the scraper's `Accept` asks for OpenMetrics, as the
/// controller's `/metrics` does.
async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let format = shoal_core::exposition::negotiate(
        headers
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok()),
    );
    match shared.metrics.render() {
        Ok(text) => (
            [(header::CONTENT_TYPE, format.content_type())],
            shoal_core::exposition::render(&text, format),
        )
            .into_response(),
        Err(error) => error_body(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot render metrics: {error}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_route_has_a_handler() {
        for (method, path) in ROUTES {
            assert!(endpoint(method, path).is_some(), "{method} {path}");
        }
    }
}
