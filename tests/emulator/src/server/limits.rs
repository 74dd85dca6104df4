//! Size limits a real API server enforces, with its codes and messages.
//!
//! Matched against Kubernetes 1.32+ (kube-apiserver with its default flags and etcd
//! 3.5 with its default `--max-request-bytes`):
//! - a request body over 3 MiB is refused before it is decoded: 413
//!   `RequestEntityTooLarge`, `Request entity too large: limit is 3145728`
//!   (`MaxRequestBodyBytes`, apiserver `limitedReadBody`);
//! - `metadata.annotations` over 256 KiB in total (keys and values): 422
//!   `metadata.annotations: Too long: may not be more than 262144 bytes`
//!   (`ValidateAnnotations`);
//! - a ConfigMap whose `data` and `binaryData` values total over 1 MiB: 422
//!   `ConfigMap "x" is invalid: []: Too long: may not be more than 1048576 bytes`
//!   (`ValidateConfigMap` reports it on the root path, which prints as `[]`); a
//!   Secret likewise on `data`;
//! - an object whose stored form is over etcd's request limit (1.5 MiB): etcd
//!   refuses the write and the API server passes its error through as a 500 with
//!   no reason, `etcdserver: request is too large` (kubernetes/kubernetes#112152,
//!   still open). The emulator measures the object's compact JSON, which is what
//!   etcd holds for a custom resource (built-in kinds are stored as protobuf, a
//!   little smaller, so a built-in object near the limit is refused here slightly
//!   earlier than on a real server).
//!
//! Kubernetes 1.30 and 1.31 word the 422s `must have at most N bytes`; the codes,
//! reasons and fields are the same.

use serde_json::Value;

use super::errors::{ApiError, Cause};
use super::registry::ResourceType;

/// The largest request body the server reads (`--max-request-bytes` default).
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;
/// The most `metadata.annotations` may hold, keys and values together.
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;
/// The most a ConfigMap's or Secret's data may hold (`core.MaxSecretSize`).
pub const MAX_DATA_BYTES: usize = 1024 * 1024;
/// etcd's default `--max-request-bytes`: the largest object a write can store.
pub const MAX_STORED_BYTES: usize = 1024 * 1024 + 512 * 1024;

/// The 413 for a request body over [`MAX_REQUEST_BODY_BYTES`].
pub fn body_too_large() -> ApiError {
    ApiError::request_entity_too_large(format!(
        "Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}"
    ))
}

fn too_long(field: &str, limit: usize) -> Cause {
    Cause {
        reason: "FieldValueTooLong".into(),
        field: field.to_owned(),
        message: format!("Too long: may not be more than {limit} bytes"),
    }
}

/// Size problems of an object about to be validated: its annotations, and the data
/// of a ConfigMap or Secret. `object` is the stored form.
pub fn validate_sizes(resource_type: &ResourceType, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(annotations) = object["metadata"]["annotations"].as_object() {
        let total: usize = annotations
            .iter()
            .map(|(key, value)| key.len() + value.as_str().map_or(0, str::len))
            .sum();
        if total > MAX_ANNOTATION_BYTES {
            causes.push(too_long("metadata.annotations", MAX_ANNOTATION_BYTES));
        }
    }
    if !resource_type.group.is_empty() {
        return causes;
    }
    match resource_type.resource.as_str() {
        "configmaps" => {
            let total =
                text_values_len(&object["data"]) + decoded_values_len(&object["binaryData"]);
            if total > MAX_DATA_BYTES {
                causes.push(too_long("[]", MAX_DATA_BYTES));
            }
        }
        "secrets" if decoded_values_len(&object["data"]) > MAX_DATA_BYTES => {
            causes.push(too_long("data", MAX_DATA_BYTES));
        }
        _ => {}
    }
    causes
}

fn text_values_len(map: &Value) -> usize {
    map.as_object().map_or(0, |entries| {
        entries
            .values()
            .map(|value| value.as_str().map_or(0, str::len))
            .sum()
    })
}

/// The decoded length of base64 values (what the real server counts for bytes).
fn decoded_values_len(map: &Value) -> usize {
    use base64::Engine as _;
    map.as_object().map_or(0, |entries| {
        entries
            .values()
            .filter_map(Value::as_str)
            .map(|text| {
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_or(text.len() / 4 * 3, |bytes| bytes.len())
            })
            .sum()
    })
}

/// etcd's refusal of an object whose stored form is over [`MAX_STORED_BYTES`].
pub fn check_stored_size(object: &Value) -> Result<(), ApiError> {
    let size = serde_json::to_vec(object).map_or(0, |bytes| bytes.len());
    if size > MAX_STORED_BYTES {
        return Err(ApiError::unknown_internal(
            "etcdserver: request is too large",
        ));
    }
    Ok(())
}
