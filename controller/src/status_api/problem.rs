//! Errors as `application/problem+json` (RFC 9457), each with a problem
//! type URI a client can act on:
//!
//! | status | `type` |
//! | --- | --- |
//! | 400 | `https://docs.margo.org/specification/margo-management-interface/problem-types#invalid-request` |
//! | 401 | `https://shoal.dev/problems/unauthenticated` |
//! | 403 | `https://docs.margo.org/specification/margo-management-interface/problem-types#not-authorized` |
//! | 404 | `https://shoal.dev/problems/not-found` |
//! | 409 | `https://shoal.dev/problems/reports-not-owned` |
//! | 413 | `https://shoal.dev/problems/body-too-large` |
//! | 422 | `https://docs.margo.org/specification/margo-management-interface/problem-types#semantic-error`, with `errors[]` |
//! | 503 | `https://shoal.dev/problems/unavailable` |
//!
//! Margo's problem-type registry (margo/specification,
//! `system-design/specification/margo-management-interface/problem-types.md`)
//! requires its own URIs for the conditions it defines (400, 403, 422); the
//! others are Shoal's, in Shoal's namespace as the registry asks of vendors.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use shoal_core::deploy::status::DocumentError;

/// Margo's problem-type namespace.
pub const MARGO_PROBLEMS: &str =
    "https://docs.margo.org/specification/margo-management-interface/problem-types";

/// Shoal's problem-type namespace.
pub const SHOAL_PROBLEMS: &str = "https://shoal.dev/problems";

/// One field a 422 is about: where (a JSON pointer, and the same as Margo's
/// dotted `field`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The JSON pointer (RFC 6901) of the field.
    pub pointer: String,
    /// What is wrong, in words.
    pub message: String,
}

impl From<&DocumentError> for FieldError {
    fn from(error: &DocumentError) -> FieldError {
        FieldError {
            pointer: error.pointer(),
            message: error.to_string(),
        }
    }
}

/// A refused or failed request: the HTTP status, what went wrong in words,
/// and for a 422 each field concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, naming the deployment, client or field concerned.
    pub detail: String,
    /// The fields a 422 is about (empty otherwise).
    pub errors: Vec<FieldError>,
}

impl Problem {
    /// A problem with `status` and `detail`.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// A 422: the body contradicts the specification or the deployment, at `errors`.
    pub fn semantic(detail: impl Into<String>, errors: &[DocumentError]) -> Problem {
        Problem {
            errors: errors.iter().map(FieldError::from).collect(),
            ..Problem::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
        }
    }

    /// The problem type URI and its title.
    pub fn problem_type(&self) -> (String, &'static str) {
        let margo = |name| format!("{MARGO_PROBLEMS}#{name}");
        let shoal = |name| format!("{SHOAL_PROBLEMS}/{name}");
        match self.status {
            StatusCode::BAD_REQUEST => (margo("invalid-request"), "Invalid Request"),
            StatusCode::UNAUTHORIZED => (shoal("unauthenticated"), "Unauthenticated"),
            StatusCode::FORBIDDEN => (margo("not-authorized"), "Not Authorized"),
            StatusCode::NOT_FOUND => (shoal("not-found"), "Not Found"),
            StatusCode::CONFLICT => (shoal("reports-not-owned"), "Reports Not Owned"),
            StatusCode::PAYLOAD_TOO_LARGE => (shoal("body-too-large"), "Body Too Large"),
            StatusCode::UNPROCESSABLE_ENTITY => (margo("semantic-error"), "Semantic Error"),
            _ => (shoal("unavailable"), "Unavailable"),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let (problem_type, title) = self.problem_type();
        let mut body = json!({
            "type": problem_type,
            "title": title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if !self.errors.is_empty() {
            body["errors"] = self
                .errors
                .iter()
                .map(|error| {
                    json!({
                        "field": dotted(&error.pointer),
                        "pointer": error.pointer,
                        "message": error.message,
                    })
                })
                .collect();
        }
        let mut response = (self.status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Margo's `field` spelling of a JSON pointer: `/components/2/state` is
/// `components.2.state` (its examples write `properties.roles`).
fn dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semantic_error_names_each_field_by_pointer_and_by_margos_dotted_path() {
        let problem = Problem::semantic(
            "deployment d: 1 problem",
            &[DocumentError::WrongKind("Deployment".into())],
        );
        assert_eq!(problem.errors[0].pointer, "/kind");
        assert_eq!(
            problem.problem_type().0,
            format!("{MARGO_PROBLEMS}#semantic-error")
        );
        assert_eq!(dotted("/components/2/state"), "components.2.state");
    }

    #[test]
    fn every_status_the_endpoint_answers_has_a_typed_problem_uri() {
        for status in [400, 401, 403, 404, 409, 413, 422, 503] {
            let status = StatusCode::from_u16(status).expect("a status");
            let (uri, _) = Problem::new(status, "x").problem_type();
            assert!(uri.starts_with("https://"), "{status}: {uri}");
        }
    }
}
