//! Pods as a real API server guards them: a pod is placed on a node only through
//! the `pods/binding` subresource (POST a Binding: 201, 409 once bound or while
//! being deleted), and an update may change only the few spec fields the real
//! server allows (`ValidatePodUpdate`), so `spec.nodeName` cannot be patched in.
//! Messages as in Kubernetes 1.32.

use serde_json::{Value, json};

use super::errors::{ApiError, Cause, success_status};
use super::handlers::{Reply, WriteContext, storage_key, update_object};
use super::http::{ApiRequest, Shared};
use super::store::now_timestamp;

/// The spec fields an update may change, as the real server words it.
const ALLOWED_POD_UPDATES: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// POST `pods/<name>/binding`: sets `spec.nodeName` and the PodScheduled condition.
pub fn bind(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = request.target.resource_type.clone();
    let name = request.target.name.clone().unwrap_or_default();
    let binding = request.json_body()?;
    let bound_name = binding["metadata"]["name"].as_str().unwrap_or_default();
    if !bound_name.is_empty() && bound_name != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    let node = binding["target"]["name"].as_str().unwrap_or_default();
    let mut causes = Vec::new();
    if node.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            field: "target.name".into(),
            message: "Required value".into(),
        });
    }
    let kind = binding["target"]["kind"].as_str().unwrap_or_default();
    if !kind.is_empty() && kind != "Node" {
        causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            field: "target.kind".into(),
            message: format!("Unsupported value: {kind:?}: supported values: \"Node\""),
        });
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("", "Binding", &name, causes));
    }
    let key = storage_key(&resource_type, request.target.namespace.as_deref(), &name);
    let context = WriteContext::of(request);
    let node = node.to_owned();
    shared.write(|store| {
        let old = store
            .get(&key)
            .ok_or_else(|| ApiError::not_found("", "pods", &name))?;
        let refuse = |why: String| ApiError::conflict_with("", "pods/binding", &name, &why);
        if !old["metadata"]["deletionTimestamp"].is_null() {
            return Err(refuse(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        if let Some(current) = old["spec"]["nodeName"]
            .as_str()
            .filter(|node| !node.is_empty())
        {
            return Err(refuse(format!(
                "pod {name} is already assigned to node {current:?}"
            )));
        }
        let mut new = (*old).clone();
        let Some(spec) = new["spec"].as_object_mut() else {
            return Err(ApiError::bad_request(format!(
                "pod {name} has no spec object to bind"
            )));
        };
        spec.insert("nodeName".into(), json!(node));
        // The Binding's uid and resourceVersion are preconditions on the pod.
        for field in ["uid", "resourceVersion"] {
            new["metadata"][field] = binding["metadata"][field].clone();
            if new["metadata"][field].is_null()
                && let Some(metadata) = new["metadata"].as_object_mut()
            {
                metadata.remove(field);
            }
        }
        set_scheduled(&mut new);
        update_object(store, &resource_type, &key, &old, new, &context)?;
        Ok((201, success_status(201)))
    })
}

/// PodScheduled=True, replacing any earlier PodScheduled condition.
fn set_scheduled(pod: &mut Value) {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    let mut conditions: Vec<Value> = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|condition| condition["type"] != "PodScheduled");
    conditions.push(json!({
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": null,
        "lastTransitionTime": now_timestamp(),
    }));
    pod["status"]["conditions"] = json!(conditions);
}

/// The refusal of a pod update that changes a spec field other than those the real
/// server allows; `new` carries the server's defaults already.
pub fn forbidden_spec_change(old: &Value, new: &Value) -> Option<Cause> {
    let old_spec = &old["spec"];
    let mut munged = new["spec"].clone();
    if munged.is_null() {
        munged = json!({});
    }
    if !munged.is_object() {
        return Some(Cause {
            reason: "FieldValueInvalid".into(),
            field: "spec".into(),
            message: format!("Invalid value: {munged}: spec must be an object"),
        });
    }
    for list in ["containers", "initContainers"] {
        let (Some(old_items), Some(new_items)) =
            (old_spec[list].as_array(), munged[list].as_array_mut())
        else {
            continue;
        };
        if old_items.len() == new_items.len() {
            for (old_item, new_item) in old_items.iter().zip(new_items.iter_mut()) {
                if let Some(fields) = new_item.as_object_mut() {
                    fields.insert("image".into(), old_item["image"].clone());
                }
            }
        }
    }
    munged["activeDeadlineSeconds"] = old_spec["activeDeadlineSeconds"].clone();
    let old_tolerations = old_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let only_added = munged["tolerations"]
        .as_array()
        .is_some_and(|new_tolerations| {
            old_tolerations
                .iter()
                .all(|toleration| new_tolerations.contains(toleration))
        });
    if only_added {
        munged["tolerations"] = old_spec["tolerations"].clone();
    }
    if old_spec["terminationGracePeriodSeconds"]
        .as_i64()
        .is_some_and(|seconds| seconds < 0)
        && munged["terminationGracePeriodSeconds"] == json!(1)
    {
        munged["terminationGracePeriodSeconds"] = old_spec["terminationGracePeriodSeconds"].clone();
    }
    let changed = changed_fields(old_spec, &munged);
    if changed.is_empty() {
        return None;
    }
    Some(Cause {
        reason: "FieldValueForbidden".into(),
        field: "spec".into(),
        message: format!(
            "Forbidden: {ALLOWED_POD_UPDATES}\n  changed: {}",
            changed.join(", ")
        ),
    })
}

/// The top-level spec fields that differ (a null counts as absent).
fn changed_fields(old: &Value, new: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    let mut fields: Vec<&String> = old.keys().chain(new.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter(|field| {
            let before = old.get(*field).unwrap_or(&Value::Null);
            let after = new.get(*field).unwrap_or(&Value::Null);
            before != after
        })
        .map(|field| format!("spec.{field}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn an_image_change_and_an_added_toleration_are_allowed() {
        let old = pod(
            json!({"containers": [{"name": "a", "image": "one"}], "tolerations": [{"key": "k"}]}),
        );
        let new = pod(
            json!({"containers": [{"name": "a", "image": "two"}], "tolerations": [{"key": "k"}, {"key": "l"}]}),
        );
        assert!(forbidden_spec_change(&old, &new).is_none());
    }

    #[test]
    fn setting_the_node_name_is_forbidden_and_named() {
        let old = pod(json!({"containers": [{"name": "a", "image": "one"}]}));
        let new = pod(json!({"containers": [{"name": "a", "image": "one"}], "nodeName": "n"}));
        let cause = forbidden_spec_change(&old, &new).expect("forbidden");
        assert_eq!(cause.field, "spec");
        assert!(
            cause
                .message
                .starts_with("Forbidden: pod updates may not change fields other than")
        );
        assert!(
            cause.message.ends_with("changed: spec.nodeName"),
            "{}",
            cause.message
        );
    }

    #[test]
    fn a_spec_that_is_not_an_object_is_refused_not_a_panic() {
        let old = pod(json!({"containers": [{"name": "a", "image": "one"}]}));
        let new = pod(json!(5));
        assert!(forbidden_spec_change(&old, &new).is_some());
        let new = pod(json!({"containers": ["not an object"]}));
        assert!(forbidden_spec_change(&old, &new).is_some());
    }

    #[test]
    fn removing_a_toleration_is_forbidden() {
        let old = pod(json!({"tolerations": [{"key": "k"}]}));
        let new = pod(json!({"tolerations": []}));
        assert!(forbidden_spec_change(&old, &new).is_some());
    }
}
