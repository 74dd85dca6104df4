//! HTTP front: request parsing, routing of discovery and resource paths,
//! fault injection, and JSON responses.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::Value;
use tokio::sync::watch as signal;

use super::auth::{self, Tokens};
use super::errors::ApiError;
use super::identity::UserInfo;
use super::rbac::{self, Action, Attributes};
use super::registry::ResourceType;
use super::store::Store;
use super::store::now_timestamp;
use super::{Faults, RequestStats, ServerOptions, discovery, handlers, watch};

/// One authorization decision, as an audit log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Who asked.
    pub user: String,
    /// The verb.
    pub verb: String,
    /// The API group of a resource request (`""` for the core group).
    pub group: String,
    /// `resource` or `resource/subresource`; empty for a non-resource request.
    pub resource: String,
    /// The path of a non-resource request.
    pub path: Option<String>,
    /// Namespace, if any.
    pub namespace: Option<String>,
    /// Object name, if any.
    pub name: Option<String>,
    /// Whether RBAC allowed it.
    pub allowed: bool,
}

/// Most audit entries kept.
const AUDIT_LIMIT: usize = 200_000;

impl std::fmt::Debug for Shared {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Shared")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// State shared by every request.
pub struct Shared {
    store: Mutex<Store>,
    /// Tokens the server accepts.
    pub tokens: Tokens,
    /// Every authorization decision, oldest first (bounded).
    pub audit: Mutex<std::collections::VecDeque<AuditEntry>>,
    /// The latest committed resourceVersion; watches wait on it.
    pub versions: signal::Sender<u64>,
    pub faults: Faults,
    pub request_stats: RequestStats,
    pub options: ServerOptions,
    pub shutdown: signal::Receiver<bool>,
    pub address: SocketAddr,
}

impl Shared {
    pub fn new(
        options: ServerOptions,
        faults: Faults,
        request_stats: RequestStats,
        shutdown: signal::Receiver<bool>,
        address: SocketAddr,
    ) -> Shared {
        let mut store = Store::new(options.watch_history);
        store.crd_publication_delay = options.crd_publication_delay;
        for (key, mut object) in rbac::bootstrap_objects() {
            object["metadata"]["uid"] = serde_json::json!(store.new_uid());
            object["metadata"]["creationTimestamp"] = serde_json::json!(now_timestamp());
            store.put(key, object);
        }
        let admin_token = format!(
            "admin-{:016x}{:016x}",
            store.next_random(),
            store.next_random()
        );
        let (versions, _) = signal::channel(store.resource_version());
        Shared {
            store: Mutex::new(store),
            tokens: Tokens::new(admin_token),
            audit: Mutex::new(std::collections::VecDeque::new()),
            versions,
            faults,
            request_stats,
            options,
            shutdown,
            address,
        }
    }

    /// Reads the store.
    pub fn read(&self) -> MutexGuard<'_, Store> {
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a mutation and wakes the watches.
    pub fn write<R>(&self, mutation: impl FnOnce(&mut Store) -> R) -> R {
        let (result, version) = {
            let mut store = self.read();
            let result = mutation(&mut store);
            (result, store.resource_version())
        };
        self.versions.send_if_modified(|current| {
            if *current != version {
                *current = version;
                true
            } else {
                false
            }
        });
        result
    }
}

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(serve).with_state(shared)
}

/// Decoded query parameters (the last value of a repeated key wins).
#[derive(Debug, Default, Clone)]
pub struct Query {
    values: BTreeMap<String, String>,
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => decoded.push(b' '),
            b'%' if index + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[index + 1..index + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        decoded.push(byte);
                        index += 2;
                    }
                    Err(_) => decoded.push(b'%'),
                }
            }
            byte => decoded.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let mut values = BTreeMap::new();
        for pair in raw
            .unwrap_or_default()
            .split('&')
            .filter(|pair| !pair.is_empty())
        {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            values.insert(percent_decode(key), percent_decode(value));
        }
        Query { values }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "True"))
    }
}

/// What a request addresses under /api or /apis.
#[derive(Debug, Clone)]
pub struct Target {
    pub resource_type: Arc<ResourceType>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// One parsed request, handed to the verb handlers.
pub struct ApiRequest {
    pub method: Method,
    pub target: Target,
    pub query: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Who sent the request.
    pub user: UserInfo,
    /// Warnings for the response (admission policies with `Warn`).
    pub warnings: Arc<Mutex<Vec<String>>>,
}

impl ApiRequest {
    /// What the request does, for authorization. A list or watch selecting one object by
    /// `metadata.name` names it, as on a real server (so `resourceNames` rules apply).
    pub fn action(&self) -> Action {
        let target = &self.target;
        let name = target.name.clone().or_else(|| {
            self.query.get("fieldSelector").and_then(|selector| {
                let name = selector.strip_prefix("metadata.name=")?;
                (!name.contains(',')).then(|| name.to_owned())
            })
        });
        Action::Resource {
            group: target.resource_type.group.clone(),
            resource: target.resource_type.resource.clone(),
            subresource: target.subresource.clone(),
            namespace: target.namespace.clone(),
            name,
        }
    }

    /// The Kubernetes verb.
    pub fn verb(&self) -> &'static str {
        match (self.method.clone(), self.target.name.is_some()) {
            (Method::GET, true) => "get",
            (Method::GET, false) if self.query.flag("watch") => "watch",
            (Method::GET, false) => "list",
            (Method::POST, _) => "create",
            (Method::PUT, _) => "update",
            (Method::PATCH, _) => "patch",
            (Method::DELETE, true) => "delete",
            (Method::DELETE, false) => "deletecollection",
            _ => "unknown",
        }
    }

    pub fn content_type(&self) -> String {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    pub fn accept(&self) -> String {
        self.headers
            .get(header::ACCEPT)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// The field manager: the query parameter, else derived from the user
    /// agent as the real server does.
    pub fn field_manager(&self) -> String {
        if let Some(manager) = self.query.get("fieldManager")
            && !manager.is_empty()
        {
            return manager.to_owned();
        }
        let agent = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("unknown");
        agent
            .split('/')
            .next()
            .unwrap_or("unknown")
            .chars()
            .take(128)
            .collect()
    }

    pub fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }

    /// Parses the body as JSON, or as YAML when it is not JSON.
    pub fn json_body(&self) -> Result<Value, ApiError> {
        if self.content_type().contains("protobuf") {
            return super::protobuf::decode(&self.body).map_err(ApiError::unsupported_media_type);
        }
        if self.body.is_empty() {
            return Err(ApiError::bad_request("the request body is empty"));
        }
        match serde_json::from_slice(&self.body) {
            Ok(value) => Ok(value),
            Err(json_error) => {
                let text = std::str::from_utf8(&self.body).map_err(|_| {
                    ApiError::bad_request("the request body is neither JSON nor UTF-8 YAML")
                })?;
                serde_saphyr::from_str::<Value>(text).map_err(|yaml_error| {
                    ApiError::bad_request(format!(
                        "the request body is neither JSON ({json_error}) nor YAML ({yaml_error})"
                    ))
                })
            }
        }
    }
}

/// A JSON response with the given status.
pub fn json_response(status: u16, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        bytes,
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn serve(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_owned();
    let query = Query::parse(parts.uri.query());
    tracing::debug!(method = %parts.method, uri = %parts.uri, accept = ?parts.headers.get(header::ACCEPT), "request");
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    let segments: Vec<String> = path
        .split('/')
        .filter(|segment| !segment.is_empty())
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let user = match identify(&shared, &parts.headers) {
        Ok(user) => user,
        Err(error) => return error.into_response(),
    };
    if !is_resource_path(&segments) {
        let attributes = Attributes {
            user: &user,
            verb: &parts.method.as_str().to_lowercase(),
            action: Action::Path(format!("/{}", segments.join("/"))),
        };
        if let Err(error) = authorize(&shared, &attributes) {
            return error.into_response();
        }
    }
    if let Some(response) = serve_discovery(&shared, &parts.method, &segments) {
        return response;
    }
    let target = match resolve(&shared, &segments) {
        Ok(target) => target,
        Err(error) => return error.into_response(),
    };
    let api_request = ApiRequest {
        method: parts.method,
        target,
        query,
        headers: parts.headers,
        body,
        user,
        warnings: Arc::default(),
    };
    let verb = api_request.verb();
    let counted_as = full_resource(&api_request.target);
    let user_name = api_request.user.username.clone();
    shared.request_stats.record(
        &api_request.user.username,
        verb,
        &counted_as,
        api_request.body.len(),
    );
    let response = answer(&shared, api_request, verb).await;
    if let Some(bytes) = axum::body::HttpBody::size_hint(response.body()).exact() {
        shared
            .request_stats
            .record_response(&user_name, verb, &counted_as, bytes as usize);
    }
    response
}

/// Authorizes, faults and serves one counted API request.
async fn answer(shared: &Arc<Shared>, api_request: ApiRequest, verb: &'static str) -> Response {
    let attributes = Attributes {
        user: &api_request.user,
        verb,
        action: api_request.action(),
    };
    if let Err(error) = authorize(shared, &attributes) {
        return error.into_response();
    }
    // A server-side apply that creates the object needs create as well as patch.
    if verb == "patch"
        && api_request.content_type().contains("apply-patch")
        && creates(shared, &api_request)
    {
        let creating = Attributes {
            verb: "create",
            ..attributes.clone()
        };
        if let Err(error) = authorize(shared, &creating) {
            return error.into_response();
        }
    }
    let resource = api_request.target.resource_type.resource.clone();
    let subresource = api_request.target.subresource.clone();
    let _held = shared.faults.hold(verb, &resource, subresource.as_deref());
    let latency = shared.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(status) = shared
        .faults
        .take_failure(verb, &resource, subresource.as_deref())
    {
        let error = if status == 429 {
            ApiError::too_many_requests("injected fault: too many requests, please try again later")
        } else {
            let mut error = ApiError::internal(format!("injected fault: {verb} {resource} failed"));
            error.code = status;
            error
        };
        return error.into_response();
    }
    if matches!(verb, "update" | "patch")
        && shared
            .faults
            .take_conflict(&resource, subresource.as_deref())
    {
        let group = api_request.target.resource_type.group.clone();
        let name = api_request.target.name.clone().unwrap_or_default();
        return ApiError::conflict(&group, &resource, &name).into_response();
    }
    let result = match verb {
        "create"
            if api_request.target.resource_type.review
                || api_request.target.subresource.as_deref() == Some("token") =>
        {
            super::reviews::create(shared, &api_request)
        }
        "watch" => return watch::serve_watch(shared.clone(), api_request),
        "get" => handlers::get(shared, &api_request),
        "list" => handlers::list(shared, &api_request),
        "create" => handlers::create(shared, &api_request),
        "update" => handlers::update(shared, &api_request),
        "patch" => handlers::patch(shared, &api_request),
        "delete" => handlers::delete(shared, &api_request),
        "deletecollection" => handlers::delete_collection(shared, &api_request),
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource: {}",
            api_request.method
        ))),
    };
    // A CRD created with a publication delay is published by a task of its own.
    if result.is_ok()
        && resource == "customresourcedefinitions"
        && matches!(verb, "create" | "patch" | "update")
        && !shared.read().unpublished_crds.is_empty()
    {
        publish_later(shared.clone());
    }
    let mut response = match result {
        Ok((status, body)) => json_response(status, &body),
        Err(error) => error.into_response(),
    };
    let warnings = api_request
        .warnings
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for warning in warnings {
        let escaped = warning.replace('"', "\\\"");
        if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            response.headers_mut().append(http::header::WARNING, value);
        }
    }
    response
}

/// `resource` or `resource/subresource`, as RBAC and the audit log name it.
fn full_resource(target: &Target) -> String {
    match &target.subresource {
        Some(subresource) => format!("{}/{subresource}", target.resource_type.resource),
        None => target.resource_type.resource.clone(),
    }
}

/// How much of an over-limit body is read and dropped before the 413.
const DRAINED_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The request body, refused with the real server's 413 past its limit (kept no
/// further than that, as the real server's `limitedReadBody` does).
async fn read_body(body: axum::body::Body) -> Result<Bytes, ApiError> {
    use futures::StreamExt as _;
    let mut chunks = body.into_data_stream();
    let mut collected = bytes::BytesMut::new();
    let mut too_large = false;
    let mut discarded = 0usize;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|error| {
            ApiError::bad_request(format!("cannot read the request body: {error}"))
        })?;
        if too_large || collected.len() + chunk.len() > super::limits::MAX_REQUEST_BODY_BYTES {
            // Read (and drop) the rest, so that the client gets the 413 rather
            // than a connection closed under its write; give up past a bound.
            too_large = true;
            discarded += chunk.len();
            if discarded > DRAINED_BODY_BYTES {
                break;
            }
            continue;
        }
        collected.extend_from_slice(&chunk);
    }
    if too_large {
        return Err(super::limits::body_too_large());
    }
    Ok(collected.freeze())
}

/// Publishes the CRDs waiting for publication once their delay has passed.
fn publish_later(shared: Arc<Shared>) {
    let delay = shared.options.crd_publication_delay;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(delay.min(std::time::Duration::from_millis(50))).await;
            if !shared.write(super::lifecycle::publish_due_crds) {
                return;
            }
        }
    });
}

/// Who sent the request: authentication, then impersonation (itself authorized).
fn identify(shared: &Shared, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
    let user = auth::authenticate(headers, &shared.tokens, &shared.read())?;
    let Some(impersonated) = auth::impersonation(headers) else {
        return Ok(user);
    };
    let mut wanted = Vec::new();
    match impersonated.username.strip_prefix("system:serviceaccount:") {
        Some(account) => {
            let (namespace, name) = account.split_once(':').unwrap_or((account, ""));
            wanted.push((
                "",
                "serviceaccounts",
                None,
                Some(namespace.to_owned()),
                name.to_owned(),
            ));
        }
        None => wanted.push(("", "users", None, None, impersonated.username.clone())),
    }
    for group in &impersonated.groups {
        if group != "system:authenticated" && !group.starts_with("system:serviceaccounts") {
            wanted.push(("", "groups", None, None, group.clone()));
        }
    }
    if !impersonated.uid.is_empty() {
        wanted.push((
            "authentication.k8s.io",
            "uids",
            None,
            None,
            impersonated.uid.clone(),
        ));
    }
    for (key, values) in &impersonated.extra {
        for value in values {
            wanted.push((
                "authentication.k8s.io",
                "userextras",
                Some(key.clone()),
                None,
                value.clone(),
            ));
        }
    }
    for (group, resource, subresource, namespace, name) in wanted {
        authorize(
            shared,
            &Attributes {
                user: &user,
                verb: "impersonate",
                action: Action::Resource {
                    group: group.to_owned(),
                    resource: resource.to_owned(),
                    subresource,
                    namespace,
                    name: Some(name),
                },
            },
        )?;
    }
    Ok(impersonated)
}

/// RBAC's decision, recorded in the audit log; the real server's 403 when refused.
fn authorize(shared: &Shared, attributes: &Attributes<'_>) -> Result<(), ApiError> {
    let allowed = rbac::allowed(&shared.read(), attributes);
    let (group, resource, path, namespace, name) = match &attributes.action {
        Action::Path(path) => (String::new(), String::new(), Some(path.clone()), None, None),
        Action::Resource {
            group,
            resource,
            subresource,
            namespace,
            name,
        } => (
            group.clone(),
            match subresource {
                Some(subresource) => format!("{resource}/{subresource}"),
                None => resource.clone(),
            },
            None,
            namespace.clone(),
            name.clone(),
        ),
    };
    {
        let mut audit = shared
            .audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if audit.len() >= AUDIT_LIMIT {
            audit.pop_front();
        }
        audit.push_back(AuditEntry {
            user: attributes.user.username.clone(),
            verb: attributes.verb.to_owned(),
            group,
            resource,
            path,
            namespace,
            name,
            allowed,
        });
    }
    if allowed {
        Ok(())
    } else {
        Err(rbac::forbidden(attributes))
    }
}

/// Whether the request's object does not exist yet (a patch of it would create it).
fn creates(shared: &Shared, request: &ApiRequest) -> bool {
    let (Some(name), None) = (&request.target.name, &request.target.subresource) else {
        return false;
    };
    let key = handlers::storage_key(
        &request.target.resource_type,
        request.target.namespace.as_deref(),
        name,
    );
    shared.read().get(&key).is_none()
}

/// `/api/<version>/<resource>…` or `/apis/<group>/<version>/<resource>…`.
fn is_resource_path(segments: &[&str]) -> bool {
    matches!(segments, ["api", _, _, ..] | ["apis", _, _, _, ..])
}

fn serve_discovery(shared: &Shared, method: &Method, segments: &[&str]) -> Option<Response> {
    let is_get = method == Method::GET;
    let registry = || shared.read().registry.clone();
    let not_found = || {
        ApiError::not_found("", "", "")
            .with_name("", "", "")
            .into_response()
    };
    let document = match segments {
        [] if is_get => {
            serde_json::json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/openapi/v2", "/openapi/v3", "/version"]})
        }
        ["version"] => discovery::version(),
        ["healthz" | "livez" | "readyz", ..] => {
            return Some((StatusCode::OK, "ok").into_response());
        }
        ["api"] => discovery::core_versions(&shared.address.to_string()),
        ["apis"] => discovery::group_list(&registry()),
        ["api", version] => match discovery::resource_list(&registry(), "", version) {
            Some(document) => document,
            None => return Some(not_found()),
        },
        ["apis", group] => match discovery::group(&registry(), group) {
            Some(document) => document,
            None => return Some(not_found()),
        },
        ["apis", group, version] => match discovery::resource_list(&registry(), group, version) {
            Some(document) => document,
            None => return Some(not_found()),
        },
        ["openapi", "v2"] => {
            // An empty protobuf message is a valid, empty OpenAPI v2
            // Document: kubectl then falls back to its compiled-in types.
            let mut response = (StatusCode::OK, Vec::<u8>::new()).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                ),
            );
            return Some(response);
        }
        ["openapi", "v3"] => discovery::openapi_v3_index(&registry()),
        ["openapi", "v3", "api", version] => {
            match discovery::openapi_v3_group(&registry(), "", version) {
                Some(document) => document,
                None => return Some(not_found()),
            }
        }
        ["openapi", "v3", "apis", group, version] => {
            match discovery::openapi_v3_group(&registry(), group, version) {
                Some(document) => document,
                None => return Some(not_found()),
            }
        }
        _ => return None,
    };
    Some(json_response(200, &document))
}

/// Maps `/api/v1/...` and `/apis/<group>/<version>/...` to a target.
fn resolve(shared: &Shared, segments: &[&str]) -> Result<Target, ApiError> {
    let (group, version, rest) = match segments {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => {
            return Err(ApiError::not_found("", "", "")
                .with_name("", "", "")
                .with_message(format!(
                    "the server could not find the requested resource ({})",
                    segments.join("/")
                )));
        }
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, resource, rest @ ..]
            if !(rest.is_empty() && matches!(*resource, "status" | "finalize")) =>
        {
            (Some((*namespace).to_owned()), {
                let mut combined = vec![*resource];
                combined.extend_from_slice(rest);
                combined
            })
        }
        other => (None, other.to_vec()),
    };
    let (resource, name, subresource) = match rest.as_slice() {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some((*name).to_owned()), None),
        [resource, name, subresource] => (
            *resource,
            Some((*name).to_owned()),
            Some((*subresource).to_owned()),
        ),
        _ => {
            return Err(ApiError::not_found(group, "", "")
                .with_message("the server could not find the requested resource".into()));
        }
    };
    let resource_type = shared
        .read()
        .registry
        .get(group, version, resource)
        .ok_or_else(|| {
            ApiError::not_found(group, resource, "").with_message(format!(
                "the server could not find the requested resource (no {resource} in {})",
                if group.is_empty() {
                    version.to_owned()
                } else {
                    format!("{group}/{version}")
                }
            ))
        })?;
    if namespace.is_some() && !resource_type.namespaced {
        return Err(
            ApiError::not_found(group, resource, name.as_deref().unwrap_or_default())
                .with_message(format!("{resource} is not a namespaced resource")),
        );
    }
    if namespace.is_none() && resource_type.namespaced && name.is_some() {
        return Err(
            ApiError::not_found(group, resource, name.as_deref().unwrap_or_default()).with_message(
                format!("{resource} is namespaced: the request needs a namespace"),
            ),
        );
    }
    if let Some(subresource) = &subresource {
        let known = match subresource.as_str() {
            "status" => resource_type.status_subresource,
            "scale" => resource_type.scale.is_some(),
            "eviction" => resource_type.eviction,
            "binding" => resource_type.group.is_empty() && resource_type.resource == "pods",
            _ => false,
        };
        let known = known || subresource == "token" && resource_type.token_request;
        if !known {
            return Err(ApiError::not_found(group, resource, name.as_deref().unwrap_or_default())
                .with_message(format!("the server could not find the requested resource ({resource}/{subresource})")));
        }
    }
    Ok(Target {
        resource_type,
        namespace,
        name,
        subresource,
    })
}

impl ApiError {
    pub fn with_message(mut self, message: String) -> ApiError {
        self.message = message;
        self
    }
}
