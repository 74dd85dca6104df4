//! The deployment status REST endpoint (Margo's workload deployment status
//! interface), served by the controller on its own listener:
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /api/v1/deployments/{deploymentId}/status` | the document Shoal computes from its members' reports (the one in the plan's `status.deploymentStatus`) |
//! | `POST /api/v1/deployments/{deploymentId}/status` | keeps the body as the report of the client its `deviceId` names |
//! | `GET /api/v1/clients/{clientId}/deployments/{deploymentId}/status` | what that client reported |
//! | `POST /api/v1/clients/{clientId}/deployments/{deploymentId}/status` | keeps the body as that client's report |
//! | `GET /api/v1/schemas/deployment-status` | the document's JSON Schema (no token needed) |
//!
//! Every other request needs a Kubernetes bearer token (checked with a
//! TokenReview: 401 without one or with a bad one) and permission on the
//! plan the deployment belongs to (a SubjectAccessReview: `get` to read,
//! `update` to report, on `deploymentplans/deploymentstatus`; 403 when
//! refused; a caller who may not see every plan's deployments gets the same
//! 403 for a deployment id no plan has, so the answer tells nothing of which
//! ids exist). Then: 404 for a deployment id no plan has (or a client that
//! never reported), 413 for a body over 64 KiB, 400 for a body that is not a
//! JSON document, 422 for one that
//! contradicts the deployment (another `deploymentId`, a component that is
//! not one of the plan's applications, a state outside the enumeration, a
//! `deviceId` other than the path's client), 201 for a client's first report
//! on a deployment and 200 after. Every error is `application/problem+json`
//! (RFC 9457) and carries no internal text: a failure inside (503) is logged,
//! and the caller learns only which step failed.
//!
//! Reports are kept in the cluster (see [`reports`]), never only in memory.

use std::future::Future;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_core::deploy::status::{DeploymentStatusDocument, SCHEMA, parse_json_document, validate};

use crate::api::deployment_plan::DeploymentPlan;

pub mod access;
pub mod problem;
pub mod reports;

use problem::Problem;

/// Largest request body accepted (a document with a few hundred components);
/// a larger one is refused 413 (problem+json).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What the endpoint needs: a client with the controller's identity and the
/// namespace it watches (`None`: all).
#[derive(Clone)]
pub struct StatusApi {
    /// The controller's client.
    pub client: Client,
    /// Look for plans in this namespace only.
    pub namespace: Option<String>,
}

/// The router of the endpoint.
pub fn router(api: StatusApi) -> Router {
    Router::new()
        .route(
            "/api/v1/deployments/{deployment_id}/status",
            get(get_computed).post(post_report),
        )
        .route(
            "/api/v1/clients/{client_id}/deployments/{deployment_id}/status",
            get(get_client_report).post(post_client_report),
        )
        .route("/api/v1/schemas/deployment-status", get(schema))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(api)
}

/// Serves the endpoint on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    api: StatusApi,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(api))
        .with_graceful_shutdown(shutdown)
        .await
}

fn json(status: StatusCode, document: &DeploymentStatusDocument) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(document).unwrap_or_default(),
    )
        .into_response()
}

async fn schema() -> Response {
    ([(header::CONTENT_TYPE, "application/schema+json")], SCHEMA).into_response()
}

/// The plan that has deployment `deployment_id`, and its document.
pub fn find_deployment<'a>(
    plans: &'a [DeploymentPlan],
    deployment_id: &str,
) -> Option<(&'a DeploymentPlan, &'a DeploymentStatusDocument)> {
    plans.iter().find_map(|plan| {
        let document = plan
            .status
            .as_ref()?
            .deployment_status
            .iter()
            .find(|document| document.deployment_id == deployment_id)?;
        Some((plan, document))
    })
}

/// Authenticates, finds the deployment, authorizes `verb` on its plan.
///
/// A deployment no plan has is answered 404 only to a caller who may `verb`
/// the status of every plan the endpoint serves (who could list them anyway);
/// anyone else gets the 403 a real deployment would give, word for word, so
/// that the endpoint is no probe for which deployment ids exist.
async fn admit(
    api: &StatusApi,
    headers: &HeaderMap,
    verb: &str,
    deployment_id: &str,
) -> Result<(DeploymentPlan, DeploymentStatusDocument), Problem> {
    let user = access::authenticate(&api.client, headers).await?;
    let plans: Api<DeploymentPlan> = match &api.namespace {
        Some(namespace) => Api::namespaced(api.client.clone(), namespace),
        None => Api::all(api.client.clone()),
    };
    let listed = plans
        .list(&ListParams::default())
        .await
        .map_err(|error| {
            tracing::warn!(%error, "deployment status endpoint: listing DeploymentPlans failed");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "listing DeploymentPlans failed; try again later",
            )
        })?
        .items;
    let Some((plan, document)) = find_deployment(&listed, deployment_id) else {
        let everywhere = api.namespace.as_deref();
        return Err(
            if access::allowed(&api.client, &user, verb, everywhere, None).await? {
                Problem::new(
                    StatusCode::NOT_FOUND,
                    format!("no DeploymentPlan has a deployment with id {deployment_id:?}"),
                )
            } else {
                access::refusal(&user, verb, deployment_id)
            },
        );
    };
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    if !access::allowed(&api.client, &user, verb, Some(&namespace), Some(&name)).await? {
        return Err(access::refusal(&user, verb, deployment_id));
    }
    Ok((plan.clone(), document.clone()))
}

/// The request body, or the problem with it: 413 over [`MAX_BODY_BYTES`], 400
/// when it could not be read.
fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, Problem> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over {MAX_BODY_BYTES} bytes, the most one report may take"),
            )
        } else {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            )
        }
    })
}

async fn get_computed(
    State(api): State<StatusApi>,
    Path(deployment_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let (_, document) = admit(&api, &headers, "get", &deployment_id).await?;
    Ok(json(StatusCode::OK, &document))
}

async fn get_client_report(
    State(api): State<StatusApi>,
    Path((client_id, deployment_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    reports::check_client_id(&client_id)?;
    let (plan, _) = admit(&api, &headers, "get", &deployment_id).await?;
    let report = reports::read(&api.client, &plan, &deployment_id, &client_id).await?;
    let report = report.ok_or_else(|| {
        Problem::new(
            StatusCode::NOT_FOUND,
            format!("client {client_id:?} has not reported on deployment {deployment_id}"),
        )
    })?;
    Ok(json(StatusCode::OK, &report))
}

async fn post_report(
    State(api): State<StatusApi>,
    Path(deployment_id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    report(&api, &headers, &deployment_id, None, body).await
}

async fn post_client_report(
    State(api): State<StatusApi>,
    Path((client_id, deployment_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    reports::check_client_id(&client_id)?;
    report(&api, &headers, &deployment_id, Some(&client_id), body).await
}

async fn report(
    api: &StatusApi,
    headers: &HeaderMap,
    deployment_id: &str,
    path_client: Option<&str>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let (plan, _) = admit(api, headers, "update", deployment_id).await?;
    let body = body_of(body)?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| Problem::new(StatusCode::BAD_REQUEST, "the body is not UTF-8 text"))?;
    let mut document = parse_json_document(text)
        .map_err(|error| Problem::new(StatusCode::BAD_REQUEST, error.to_string()))?;
    let applications: Vec<String> = plan
        .spec
        .applications
        .iter()
        .map(|application| application.name.clone())
        .collect();
    validate(&document, deployment_id, &applications).map_err(|problems| {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "deployment {deployment_id} of DeploymentPlan {}/{}: {}",
                plan.namespace().unwrap_or_default(),
                plan.name_any(),
                problems.join("; ")
            ),
        )
    })?;
    let client_id = reporting_client(path_client, document.device_id.as_deref())?;
    reports::check_client_id(&client_id)?;
    document.device_id = Some(client_id.clone());
    let created = reports::write(&api.client, &plan, &client_id, &document).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json(status, &document))
}

/// Who reports: the path's client, else the body's `deviceId`; both given
/// and different is a contradiction (422), neither is a missing field.
fn reporting_client(path: Option<&str>, device: Option<&str>) -> Result<String, Problem> {
    match (path, device) {
        (Some(path), Some(device)) if path != device => Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("deviceId {device:?} in the document differs from client {path:?} in the path"),
        )),
        (Some(client), _) | (None, Some(client)) => Ok(client.to_owned()),
        (None, None) => Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "name the reporting device: deviceId in the document, or POST to /api/v1/clients/{clientId}/deployments/{deploymentId}/status",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reporting_client_is_the_paths_or_the_documents_and_never_two() {
        assert_eq!(reporting_client(Some("a"), None).ok(), Some("a".into()));
        assert_eq!(reporting_client(None, Some("b")).ok(), Some("b".into()));
        assert_eq!(
            reporting_client(Some("a"), Some("a")).ok(),
            Some("a".into())
        );
        let differs = reporting_client(Some("a"), Some("b")).expect_err("a contradiction");
        assert_eq!(differs.status, StatusCode::UNPROCESSABLE_ENTITY);
        let neither = reporting_client(None, None).expect_err("nobody reports");
        assert_eq!(neither.status, StatusCode::UNPROCESSABLE_ENTITY);
    }
}
