//! The review APIs (`authorization.k8s.io/v1` access and rules reviews,
//! `authentication.k8s.io/v1` TokenReview and SelfSubjectReview) and the
//! TokenRequest subresource: created, never stored; the answer is computed
//! from the RBAC objects and the issued tokens.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::auth;
use super::errors::ApiError;
use super::http::{ApiRequest, Shared};
use super::identity::UserInfo;
use super::rbac::{self, Action, Attributes};

/// Answers a create of a review resource, or of `serviceaccounts/<name>/token`.
pub fn create(shared: &Shared, request: &ApiRequest) -> Result<(u16, Value), ApiError> {
    let body = request.json_body()?;
    let resource_type = &request.target.resource_type;
    if resource_type.token_request {
        let namespace = request.target.namespace.clone().unwrap_or_default();
        let account = request.target.name.clone().unwrap_or_default();
        let response =
            shared.write(|store| shared.tokens.request(store, &namespace, &account, &body))?;
        return Ok((201, response));
    }
    let status = match resource_type.resource.as_str() {
        "selfsubjectaccessreviews" => access(shared, &request.user, &body["spec"], None),
        "subjectaccessreviews" => access(shared, &subject(&body["spec"]), &body["spec"], None),
        "localsubjectaccessreviews" => access(
            shared,
            &subject(&body["spec"]),
            &body["spec"],
            request.target.namespace.as_deref(),
        ),
        "selfsubjectrulesreviews" => {
            let namespace = body["spec"]["namespace"].as_str().unwrap_or_default();
            rbac::rules_review(&shared.read(), &request.user, namespace)
        }
        "tokenreviews" => {
            let token = body["spec"]["token"].as_str().unwrap_or_default();
            let store = shared.read();
            match shared.tokens.user_of(token, &store) {
                Ok(user) => json!({
                    "authenticated": true,
                    "user": auth::user_info_document(&user),
                    "audiences": body["spec"]["audiences"].as_array().cloned().unwrap_or_default(),
                }),
                Err(why) => json!({"authenticated": false, "error": why, "user": {}}),
            }
        }
        "selfsubjectreviews" => json!({"userInfo": auth::user_info_document(&request.user)}),
        other => {
            return Err(ApiError::method_not_allowed(format!(
                "{other} cannot be created here"
            )));
        }
    };
    let mut response = body;
    response["apiVersion"] = json!(resource_type.api_version());
    response["kind"] = json!(resource_type.kind);
    if response["metadata"].is_null() {
        response["metadata"] = json!({});
    }
    response["metadata"]["creationTimestamp"] = Value::Null;
    response["status"] = status;
    Ok((201, response))
}

/// The user a SubjectAccessReview asks about.
fn subject(spec: &Value) -> UserInfo {
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let extra: BTreeMap<String, Vec<String>> = spec["extra"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(key, values)| (key.clone(), strings(values)))
        .collect();
    UserInfo {
        username: spec["user"].as_str().unwrap_or_default().to_owned(),
        uid: spec["uid"].as_str().unwrap_or_default().to_owned(),
        groups: strings(&spec["groups"]),
        extra,
    }
}

/// The status of an access review of `user` for the attributes in `spec`.
fn access(shared: &Shared, user: &UserInfo, spec: &Value, namespace: Option<&str>) -> Value {
    let (verb, action) = match spec["nonResourceAttributes"].as_object() {
        Some(non_resource) => (
            non_resource
                .get("verb")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            Action::Path(
                non_resource
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ),
        ),
        None => {
            let attributes = &spec["resourceAttributes"];
            let text = |key: &str| {
                attributes[key]
                    .as_str()
                    .filter(|value| !value.is_empty())
                    .map(str::to_owned)
            };
            (
                text("verb").unwrap_or_default(),
                Action::Resource {
                    group: text("group").unwrap_or_default(),
                    resource: text("resource").unwrap_or_default(),
                    subresource: text("subresource"),
                    namespace: namespace.map(str::to_owned).or_else(|| text("namespace")),
                    name: text("name"),
                },
            )
        }
    };
    let attributes = Attributes {
        user,
        verb: &verb,
        action,
    };
    if rbac::allowed(&shared.read(), &attributes) {
        json!({"allowed": true, "reason": "allowed by RBAC"})
    } else {
        json!({"allowed": false})
    }
}
