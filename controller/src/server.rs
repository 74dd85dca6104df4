//! `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use shoal_core::exposition;

use crate::metrics::Metrics;

/// Shared state of the HTTP endpoints.
#[derive(Clone)]
pub struct Health {
    /// Metrics to expose.
    pub metrics: Arc<Metrics>,
    /// Set once the controller has started its watches (as leader or standby).
    pub ready: Arc<AtomicBool>,
}

/// The router with the three endpoints.
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

/// The Prometheus text format unless the scraper's `Accept` asks for OpenMetrics
/// (Prometheus does; `promtool check metrics` and `curl` read the former).
async fn metrics(State(health): State<Health>, headers: HeaderMap) -> impl IntoResponse {
    let format = exposition::negotiate(
        headers
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok()),
    );
    (
        [(header::CONTENT_TYPE, format.content_type())],
        exposition::render(&health.metrics.encode(), format),
    )
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    if health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// Binds and serves until `shutdown` completes.
pub async fn serve(
    address: SocketAddr,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    axum::serve(listener, router(health))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::exposition::{Format, undeclared};

    /// Serves [`router`] over every family on a free port, as a scraper meets it.
    async fn serve_every_family() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let address = listener.local_addr().expect("its address");
        let health = Health {
            metrics: Arc::new(Metrics::with_every_family()),
            ready: Arc::new(AtomicBool::new(true)),
        };
        tokio::spawn(async move { axum::serve(listener, router(health)).await });
        address
    }

    /// `GET /metrics` with `accept` (none when `None`): the Content-Type and the body.
    async fn scrape(address: SocketAddr, accept: Option<&str>) -> (String, String) {
        let headers: Vec<(&str, &str)> = accept
            .map(|accept| ("accept", accept))
            .into_iter()
            .collect();
        let response =
            shoal_emulator::http_client::request(address, "GET", "/metrics", &headers, None)
                .await
                .expect("the metrics server answers");
        assert_eq!(response.status, 200, "{}", response.body);
        let content_type = response.header("content-type").expect("a Content-Type");
        (content_type.to_owned(), response.body)
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text_unless_the_scraper_asks_for_openmetrics() {
        let address = serve_every_family().await;
        let prometheus_scrape = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, format) in [
            (None, Format::Prometheus),
            (Some("*/*"), Format::Prometheus),
            (Some("text/plain; version=0.0.4"), Format::Prometheus),
            (Some(prometheus_scrape), Format::OpenMetrics),
        ] {
            let (content_type, body) = scrape(address, accept).await;
            assert_eq!(content_type, format.content_type(), "Accept: {accept:?}");
            assert_eq!(
                undeclared(&body, format),
                Vec::<String>::new(),
                "Accept: {accept:?}:\n{body}"
            );
            // Every family the registry encodes is declared once, in either format.
            let registered = Metrics::with_every_family()
                .encode()
                .matches("# TYPE ")
                .count();
            assert_eq!(body.matches("# TYPE ").count(), registered, "{body}");
            assert_eq!(body.matches("# HELP ").count(), registered, "{body}");
            assert_eq!(body.contains("# EOF"), format == Format::OpenMetrics);
        }
        // A plain scrape gets what `tests/sandbox/tests/monitoring.rs` hands to `promtool
        // check metrics`: the same lines (a family's series come in hash order).
        let (_, text) = scrape(address, None).await;
        assert!(text.contains("# TYPE shoal_revisions_applied_total counter\n"));
        let sorted = |text: &str| {
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            lines.sort();
            lines
        };
        let checked =
            exposition::render(&Metrics::with_every_family().encode(), Format::Prometheus);
        assert_eq!(sorted(&text), sorted(&checked));
    }
}
