//! Kubernetes `Status` errors, shaped like the real API server's
//! (`kind: Status`, `status: Failure`, `reason`, `details`, `code`).

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

/// One field-level cause of an error (`details.causes[]`).
#[derive(Debug, Clone)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// An API error, rendered as a metav1 `Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub name: Option<String>,
    pub group: Option<String>,
    pub kind: Option<String>,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: Option<u32>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            name: None,
            group: None,
            kind: None,
            causes: Vec::new(),
            retry_after_seconds: None,
        }
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> ApiError {
        self.group = Some(group.to_owned());
        self.kind = Some(kind.to_owned());
        self.name = Some(name.to_owned());
        self
    }

    /// `pods "x" not found` / `swarms.shoal.dev "x" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// The optimistic-concurrency conflict (stale resourceVersion).
    pub fn conflict(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::conflict_with(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn conflict_with(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// 422 Invalid with field causes; `kind` is the object's Kind.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let listed: Vec<String> = causes
            .iter()
            .map(|cause| {
                if cause.field.is_empty() {
                    cause.message.clone()
                } else {
                    format!("{}: {}", cause.field, cause.message)
                }
            })
            .collect();
        let summary = if listed.len() == 1 {
            listed[0].clone()
        } else {
            format!("[{}]", listed.join(", "))
        };
        let qualified_kind = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        let mut error = ApiError::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {summary}"),
        )
        .with_details(group, kind, name);
        error.causes = causes;
        error
    }

    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn too_many_requests(message: impl Into<String>) -> ApiError {
        let mut error = ApiError::new(429, "TooManyRequests", message);
        error.retry_after_seconds = Some(1);
        error
    }

    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "Forbidden", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }

    /// 413 `RequestEntityTooLarge`.
    pub fn request_entity_too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(413, "RequestEntityTooLarge", message)
    }

    /// A 500 with no reason: how the real server passes on an error of its storage
    /// that it does not translate (e.g. etcd's).
    pub fn unknown_internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> ApiError {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(422, "Invalid", message)
    }

    pub fn with_cause(mut self, cause: Cause) -> ApiError {
        self.causes.push(cause);
        self
    }

    pub fn with_name(mut self, group: &str, kind: &str, name: &str) -> ApiError {
        self = self.with_details(group, kind, name);
        self
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // The real server omits an empty reason (StatusReasonUnknown).
        if self.reason.is_empty()
            && let Some(fields) = status.as_object_mut()
        {
            fields.remove("reason");
        }
        let mut details = serde_json::Map::new();
        if let Some(name) = &self.name {
            details.insert("name".into(), json!(name));
        }
        if let Some(group) = &self.group
            && !group.is_empty()
        {
            details.insert("group".into(), json!(group));
        }
        if let Some(kind) = &self.kind {
            details.insert("kind".into(), json!(kind));
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|cause| {
                    let mut entry = json!({"reason": cause.reason, "message": cause.message});
                    if !cause.field.is_empty() {
                        entry["field"] = json!(cause.field);
                    }
                    entry
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(seconds) = self.retry_after_seconds {
            details.insert("retryAfterSeconds".into(), json!(seconds));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        let mut response = (
            StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body,
        )
            .into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after_seconds {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A `Status` with `status: Success` (eviction, some deletes).
pub fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}
