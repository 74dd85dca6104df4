//! The deployment status REST endpoint (Margo's workload deployment status
//! interface), served by the controller on its own listener. Reports follow
//! the Margo Workload Management API as published in `margo/specification`,
//! each route the version whose path it is:
//!
//! | request | answer |
//! | --- | --- |
//! | `POST /api/v1/clients/{clientId}/deployments/{deploymentId}/status` | Margo 1.0.0: keeps the body as the report of `{clientId}`, or of the device behind it its `deviceId` names (`{clientId}/child…`) |
//! | `POST /api/v1/deployments/{deploymentId}/status` | Margo 1.0.0-rc.3: keeps the body as the report of the device its `deviceId` names; the first id of `deviceId` is the reporting client |
//! | `GET /api/v1/deployments/{deploymentId}/status` | the document Shoal computes from its members' reports (the latest revision's in the plan's `status.deploymentStatus`) |
//! | `GET /api/v1/clients/{clientId}/deployments/{deploymentId}/status[?deviceId=…]` | what that client (or a device behind it) reported |
//! | `GET /api/v1/schemas/deployment-status` | the document's JSON Schema, re-stated from the specification (no token needed) |
//!
//! The listener speaks TLS when given a certificate (see [`tls`], reloaded as
//! its files change), else plain HTTP. Every other request needs a caller:
//! with a client CA configured, a device's client certificate signed by it
//! (see [`identity`]: the certificate names the client id and a Kubernetes
//! user `shoal-device:<client-id>`; such a device may report and read only
//! for itself and the devices behind it, else 403), or a Kubernetes bearer
//! token (checked with a TokenReview: 401 without one or with a bad one),
//! and permission on the
//! plan the deployment belongs to (a SubjectAccessReview: `get` to read,
//! `update` to report, on `deploymentplans/deploymentstatus`; 403 when
//! refused; a caller who may not see every plan's deployments gets the same
//! 403 for a deployment id no plan has, so the answer tells nothing of which
//! ids exist). Then: 404 for a deployment id no plan has (or a device that
//! never reported), 413 for a body over 64 KiB, 400 for a body that is not a
//! JSON object of the document's shape or a malformed client id, 422 for one
//! the route's version refuses (a field it requires absent, another `kind`,
//! an `adoptedManifestVersion` that is no number, a `deviceId` off its
//! pattern or not the client or a device behind it, a reserved gateway
//! error code not from a gateway) or that contradicts the deployment
//! (another `deploymentId`, a component that is not one of the plan's
//! applications, one missing or listed twice, a state outside the
//! enumeration, an `adoptedManifestVersion` later than the latest revision), with `errors[]` naming each field; 201 for a device's first
//! report on a deployment and 200 after. Every error is
//! `application/problem+json` (RFC 9457) with a typed problem URI (see
//! [`problem`]) and carries no internal text: a failure inside (503) is
//! logged, and the caller learns only which step failed.
//!
//! A report may carry Margo 1.0.0's payload signature (see [`signature`]):
//! never required, checked when sent (401 when it does not verify, or from a
//! device, when its key is not the certificate's).
//!
//! Reports are kept in the cluster (see [`reports`]), never only in memory.

use std::future::Future;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_core::deploy::status::{
    DeploymentStatusDocument, DocumentError, Expected, ParseError, SCHEMA, SpecVersion,
    parse_json_document, required_fields, validate,
};

use crate::api::deployment_plan::DeploymentPlan;

pub mod access;
pub mod identity;
pub mod problem;
pub mod reports;
pub mod signature;
pub mod tls;

use access::Caller;
use identity::Peer;
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

/// The router of the endpoint. Its handlers read each connection's
/// [`Peer`]: serve it with `into_make_service_with_connect_info::<Peer>()`,
/// as [`serve`] and [`serve_tls`] do.
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

/// Serves the endpoint over plain HTTP on `listener` until `shutdown`
/// completes (callers authenticate by bearer token only).
pub async fn serve(
    listener: tokio::net::TcpListener,
    api: StatusApi,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router(api).into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// Serves the endpoint over TLS with `config` (see [`tls::server_config`]) on
/// `listener` until `shutdown` completes.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: std::sync::Arc<rustls::ServerConfig>,
    api: StatusApi,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tls::TlsListener::new(listener, config)?;
    axum::serve(
        listener,
        router(api).into_make_service_with_connect_info::<Peer>(),
    )
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

/// The plan that has deployment `deployment_id`, and its latest revision's
/// document (one id stands for every revision of a plan's deployment).
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
            .filter(|document| document.deployment_id == deployment_id)
            .max_by_key(|document| document.adopted_manifest_version)?;
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
    caller: &Caller,
    verb: &str,
    deployment_id: &str,
) -> Result<(DeploymentPlan, DeploymentStatusDocument), Problem> {
    let user = &caller.user;
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
            if access::allowed(&api.client, user, verb, everywhere, None).await? {
                Problem::new(
                    StatusCode::NOT_FOUND,
                    format!("no DeploymentPlan has a deployment with id {deployment_id:?}"),
                )
            } else {
                access::refusal(user, verb, deployment_id)
            },
        );
    };
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    if !access::allowed(&api.client, user, verb, Some(&namespace), Some(&name)).await? {
        return Err(access::refusal(user, verb, deployment_id));
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
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(deployment_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let caller = access::authenticate(&api.client, &headers, &peer.certificate).await?;
    let (_, document) = admit(&api, &caller, "get", &deployment_id).await?;
    Ok(json(StatusCode::OK, &document))
}

/// The device a client's GET asks about: `?deviceId=` (the client or a
/// device behind it), else the client itself.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceQuery {
    device_id: Option<String>,
}

async fn get_client_report(
    State(api): State<StatusApi>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((client_id, deployment_id)): Path<(String, String)>,
    Query(query): Query<DeviceQuery>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    reports::check_client_id(&client_id)?;
    let device_id = query.device_id.unwrap_or_else(|| client_id.clone());
    if !reports::is_of_client(&device_id, &client_id) {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            format!(
                "deviceId {device_id:?} is neither client {client_id:?} nor a device behind it"
            ),
        ));
    }
    let caller = access::authenticate(&api.client, &headers, &peer.certificate).await?;
    check_own(&caller, &device_id)?;
    let (plan, _) = admit(&api, &caller, "get", &deployment_id).await?;
    let report = reports::read(&api.client, &plan, &deployment_id, &device_id).await?;
    let report = report.ok_or_else(|| {
        Problem::new(
            StatusCode::NOT_FOUND,
            format!("device {device_id:?} has not reported on deployment {deployment_id}"),
        )
    })?;
    Ok(json(StatusCode::OK, &report))
}

/// Margo 1.0.0-rc.3's route: the client is the first id of the body's `deviceId`.
async fn post_report(
    State(api): State<StatusApi>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(deployment_id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let route = Route {
        version: SpecVersion::V1Rc3,
        client: None,
    };
    let caller = access::authenticate(&api.client, &headers, &peer.certificate).await?;
    report(&api, &caller, &headers, &deployment_id, route, body).await
}

/// Margo 1.0.0's route: the client is the path's.
async fn post_client_report(
    State(api): State<StatusApi>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((client_id, deployment_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    reports::check_client_id(&client_id)?;
    let route = Route {
        version: SpecVersion::V1,
        client: Some(&client_id),
    };
    let caller = access::authenticate(&api.client, &headers, &peer.certificate).await?;
    check_own(&caller, &client_id)?;
    report(&api, &caller, &headers, &deployment_id, route, body).await
}

/// What the route a report came by says: the specification version it
/// follows, and the client it names (1.0.0's path does, rc.3's does not).
#[derive(Clone, Copy)]
struct Route<'a> {
    version: SpecVersion,
    client: Option<&'a str>,
}

/// Refuses a device authenticated by certificate a report or read for a
/// device that is neither it nor behind it (403 naming both client ids).
fn check_own(caller: &Caller, device_id: &str) -> Result<(), Problem> {
    caller
        .device
        .as_ref()
        .map_or(Ok(()), |device| device.check_reports_for(device_id))
}

async fn report(
    api: &StatusApi,
    caller: &Caller,
    headers: &HeaderMap,
    deployment_id: &str,
    route: Route<'_>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let (plan, _) = admit(api, caller, "update", deployment_id).await?;
    let body = body_of(body)?;
    signature::check(headers, &body, caller.device.as_ref())?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| Problem::new(StatusCode::BAD_REQUEST, "the body is not UTF-8 text"))?;
    let applications: Vec<String> = plan
        .spec
        .applications
        .iter()
        .map(|application| application.name.clone())
        .collect();
    let expected = Expected {
        deployment_id,
        components: &applications,
        version: route.version,
        client: route.client,
        latest_revision: plan
            .status
            .as_ref()
            .map_or(0, |status| status.latest_deployment),
    };
    let mut document = checked_document(text, &expected).map_err(|problems| {
        Problem::semantic(
            format!(
                "the report on deployment {deployment_id} of DeploymentPlan {}/{} does not meet {}: {}",
                plan.namespace().unwrap_or_default(),
                plan.name_any(),
                route.version,
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            &problems,
        )
    })??;
    let device_id = reporting_device(route.client, document.device_id.as_deref())?;
    reports::check_client_id(reports::client_of(&device_id))?;
    check_own(caller, &device_id)?;
    document.device_id = Some(device_id.clone());
    let created = reports::write(&api.client, &plan, &device_id, &document).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json(status, &document))
}

/// The document of `text`, checked against the route's version and the
/// deployment: the outer error lists what the version or the deployment
/// refuses (422); the inner one is a body that is not a JSON object of the
/// document's shape (400).
fn checked_document(
    text: &str,
    expected: &Expected<'_>,
) -> Result<Result<DeploymentStatusDocument, Problem>, Vec<DocumentError>> {
    let malformed = |detail: String| Ok(Err(Problem::new(StatusCode::BAD_REQUEST, detail)));
    let body: serde_json::Value = match serde_json::from_str(text) {
        Ok(body @ serde_json::Value::Object(_)) => body,
        Ok(_) => return malformed("the body is not a JSON object".to_owned()),
        Err(error) => return malformed(format!("the body is not JSON: {error}")),
    };
    let mut problems = required_fields(&body, expected.version);
    let document = match parse_json_document(text) {
        Ok(document) => document,
        Err(ParseError::Missing(field)) => {
            problems.insert(0, missing(field, expected.version));
            return Err(problems);
        }
        Err(error) => return malformed(error.to_string()),
    };
    if let Err(found) = validate(&document, expected) {
        problems.extend(found);
    }
    if problems.is_empty() {
        Ok(Ok(document))
    } else {
        Err(problems)
    }
}

/// A field the parser found absent, as the problem of the version.
fn missing(field: &'static str, version: SpecVersion) -> DocumentError {
    let field = match field {
        "deploymentId" => "/deploymentId",
        "status" => "/status",
        _ => "/status/state",
    };
    DocumentError::Missing { field, version }
}

/// Who the report is about: the body's `deviceId` (already checked to be the
/// path's client or behind it), else the path's client; on rc.3's route,
/// which names no client, `deviceId` is required.
fn reporting_device(path: Option<&str>, device: Option<&str>) -> Result<String, Problem> {
    match (device, path) {
        (Some(device), _) | (None, Some(device)) => Ok(device.to_owned()),
        (None, None) => Err(Problem::semantic(
            "name the reporting device: deviceId in the document, or POST to /api/v1/clients/{clientId}/deployments/{deploymentId}/status",
            &[DocumentError::Missing {
                field: "/deviceId",
                version: SpecVersion::V1Rc3,
            }],
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reporting_device_is_the_documents_else_the_paths_client() {
        assert_eq!(reporting_device(Some("a"), None).ok(), Some("a".into()));
        assert_eq!(reporting_device(None, Some("b")).ok(), Some("b".into()));
        assert_eq!(
            reporting_device(Some("gw"), Some("gw/child")).ok(),
            Some("gw/child".into())
        );
        let neither = reporting_device(None, None).expect_err("nobody reports");
        assert_eq!(neither.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(neither.errors[0].pointer, "/deviceId");
    }

    #[test]
    fn a_report_missing_what_its_version_requires_is_refused_field_by_field() {
        let components = vec!["nginx".to_owned()];
        let expected = Expected {
            deployment_id: "d",
            components: &components,
            version: SpecVersion::V1,
            client: Some("edge-1"),
            latest_revision: 1,
        };
        let problems = checked_document(r#"{"deploymentId": "d"}"#, &expected).expect_err("a 422");
        let pointers: Vec<String> = problems.iter().map(DocumentError::pointer).collect();
        assert_eq!(pointers, ["/status", "/apiVersion", "/kind", "/components"]);
        let malformed = checked_document("[1]", &expected).expect("no field problems");
        assert_eq!(
            malformed.expect_err("a 400").status,
            StatusCode::BAD_REQUEST
        );
    }
}
