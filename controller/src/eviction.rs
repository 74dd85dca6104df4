//! Evictions that are tried once, whatever client carries them.
//!
//! kube's default client retries a 429 inside the call (up to 15 times, honouring
//! `Retry-After`), so a PodDisruptionBudget refusing an eviction would hold a reconcile
//! for minutes and never be seen. Its retry layer replays only requests whose body it can
//! clone; a body that streams (every response body a `Client` hands back is one) cannot
//! be cloned, so an eviction sent with such a body is sent exactly once. This also sends
//! the Eviction's `deleteOptions` under their API name, so that the uid precondition is
//! applied by the API server.

use std::convert::Infallible;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::Resource;
use kube::api::EvictParams;
use kube::client::Body;
use kube::core::Status;

/// The Eviction object for `pod`, as the API server reads it.
fn eviction_body(pod: &str, params: &EvictParams) -> Result<Vec<u8>, kube::Error> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": { "name": pod },
        "deleteOptions": params.delete_options,
    }))
    .map_err(kube::Error::SerdeError)
}

/// `bytes` as a request body the retry layer cannot replay: it comes back through a
/// client (one that answers every request with these bytes), as a streaming body.
async fn unreplayable(bytes: Vec<u8>) -> Result<Body, kube::Error> {
    let echo = tower::service_fn(move |_: http::Request<Body>| {
        let bytes = bytes.clone();
        async move { Ok::<_, Infallible>(http::Response::new(Body::from(bytes))) }
    });
    let echo = Client::new(echo, "default");
    Ok(echo
        .send(http::Request::new(Body::empty()))
        .await?
        .into_body())
}

/// Evicts `pod` in `namespace` once: no retry, whatever `client` would do. An answer
/// other than success comes back as [`kube::Error::Api`] with the API server's Status.
pub async fn evict_once(
    client: &Client,
    namespace: &str,
    pod: &str,
    params: &EvictParams,
) -> Result<(), kube::Error> {
    let uri = format!("{}/{pod}/eviction", Pod::url_path(&(), Some(namespace)));
    let body = unreplayable(eviction_body(pod, params)?).await?;
    let request = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|error| {
            kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(error))
        })?;
    let response = client.send(request).await?;
    let code = response.status();
    let answer = response.into_body().collect_bytes().await?;
    if code.is_success() {
        return Ok(());
    }
    let status = serde_json::from_slice::<Status>(&answer).unwrap_or_else(|_| {
        Status::failure(&String::from_utf8_lossy(&answer), "").with_code(code.as_u16())
    });
    Err(kube::Error::Api(Box::new(status)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{DeleteParams, Preconditions};

    #[test]
    fn the_eviction_carries_its_uid_precondition_under_the_api_name() {
        let params = EvictParams {
            delete_options: Some(DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some("uid-1".to_owned()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        };
        let body: serde_json::Value =
            serde_json::from_slice(&eviction_body("worker-0", &params).unwrap()).unwrap();
        assert_eq!(body["kind"], "Eviction");
        assert_eq!(body["metadata"]["name"], "worker-0");
        assert_eq!(body["deleteOptions"]["preconditions"]["uid"], "uid-1");
    }

    #[tokio::test]
    async fn the_body_cannot_be_replayed_and_holds_the_bytes() {
        let body = unreplayable(b"{\"kind\":\"Eviction\"}".to_vec())
            .await
            .unwrap();
        assert!(
            body.try_clone().is_none(),
            "a replayable body would be retried"
        );
        assert_eq!(
            body.collect_bytes().await.unwrap().as_ref(),
            b"{\"kind\":\"Eviction\"}"
        );
    }
}
