//! The pods/eviction subresource (policy/v1 Eviction), honouring
//! PodDisruptionBudgets the way the real eviction REST handler does.
//!
//! There is no disruption controller: the budget is computed at eviction
//! time from the pods the PDB selects (expected = selected pods, healthy =
//! selected pods that are Ready and not being deleted).

use serde_json::{Value, json};

use super::errors::{ApiError, Cause, success_status};
use super::handlers::{Reply, storage_key};
use super::http::{ApiRequest, Shared};
use super::lifecycle::{self, DeleteOptions, Propagation};
use super::selectors::LabelSelector;
use super::store::{ObjectKey, Store};

fn is_ready(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|condition| condition["type"] == "Ready" && condition["status"] == "True")
            })
}

/// An int-or-percent against a total (percentages round up).
fn scaled(value: &Value, total: i64) -> Result<i64, String> {
    match value {
        Value::Number(number) => number
            .as_i64()
            .ok_or_else(|| format!("invalid number {number}")),
        Value::String(text) => {
            if let Some(percent) = text.strip_suffix('%') {
                let percent: i64 = percent
                    .parse()
                    .map_err(|_| format!("invalid percentage {text:?}"))?;
                Ok((percent * total + 99) / 100)
            } else {
                text.parse()
                    .map_err(|_| format!("invalid int-or-string {text:?}"))
            }
        }
        other => Err(format!("invalid int-or-string {other}")),
    }
}

/// (desired healthy, current healthy, expected) of one PDB.
fn budget(store: &Store, namespace: &str, pdb: &Value) -> Result<(i64, i64, i64), String> {
    let selector = LabelSelector::from_object(&pdb["spec"]["selector"])?;
    let pods: Vec<&Value> = store
        .list("", "pods", Some(namespace))
        .map(|(_, pod)| pod.as_ref())
        .filter(|pod| selector.matches(pod))
        .collect();
    let expected = pods.len() as i64;
    let healthy = pods.iter().filter(|pod| is_ready(pod)).count() as i64;
    let desired = if !pdb["spec"]["minAvailable"].is_null() {
        scaled(&pdb["spec"]["minAvailable"], expected)?
    } else if !pdb["spec"]["maxUnavailable"].is_null() {
        expected - scaled(&pdb["spec"]["maxUnavailable"], expected)?
    } else {
        0
    };
    Ok((desired, healthy, expected))
}

pub fn evict(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = request.target.resource_type.clone();
    let namespace = request.target.namespace.clone().unwrap_or_default();
    let name = request.target.name.clone().unwrap_or_default();
    let body = request.json_body()?;
    if let Some(kind) = body["kind"].as_str()
        && kind != "Eviction"
    {
        return Err(ApiError::bad_request(format!(
            "the body of an eviction must be an Eviction, not {kind}"
        )));
    }
    let body_name = body["metadata"]["name"].as_str().unwrap_or_default();
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object ({name} vs {body_name})"
        )));
    }
    let delete_options = &body["deleteOptions"];
    let options = DeleteOptions {
        grace_period_seconds: delete_options["gracePeriodSeconds"].as_i64(),
        propagation: Propagation::Background,
        precondition_uid: delete_options["preconditions"]["uid"]
            .as_str()
            .map(str::to_owned),
        precondition_version: delete_options["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
        dry_run: request.dry_run(),
    };
    shared.write(|store| {
        let key: ObjectKey = storage_key(&resource_type, Some(&namespace), &name);
        let pod = store
            .get(&key)
            .ok_or_else(|| ApiError::not_found("", "pods", &name))?;
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        let terminal = matches!(phase, "Succeeded" | "Failed" | "Pending");
        if !terminal && pod["metadata"]["deletionTimestamp"].is_null() {
            let budgets: Vec<Value> = store
                .list("policy", "poddisruptionbudgets", Some(&namespace))
                .map(|(_, pdb)| (**pdb).clone())
                .filter(|pdb| {
                    LabelSelector::from_object(&pdb["spec"]["selector"])
                        .is_ok_and(|selector| !selector.is_empty() && selector.matches(&pod))
                })
                .collect();
            if budgets.len() > 1 {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(pdb) = budgets.first() {
                let pdb_name = pdb["metadata"]["name"].as_str().unwrap_or_default();
                let (desired, healthy, expected) = budget(store, &namespace, pdb).map_err(|problem| {
                    ApiError::internal(format!("the PodDisruptionBudget {pdb_name} is invalid: {problem}"))
                })?;
                let pod_healthy = is_ready(&pod);
                let allowed = if pod_healthy { healthy - desired } else { i64::from(healthy >= desired) };
                if allowed <= 0 {
                    let mut error = ApiError::too_many_requests(
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    )
                    .with_cause(Cause {
                        reason: "DisruptionBudget".into(),
                        field: String::new(),
                        message: format!(
                            "The disruption budget {pdb_name} needs {desired} healthy pods and has {healthy} currently"
                        ),
                    });
                    error.retry_after_seconds = Some(10);
                    return Err(error);
                }
                if !options.dry_run {
                    let pdb_key = ObjectKey::new("policy", "poddisruptionbudgets", &namespace, pdb_name);
                    if let Some(current) = store.get(&pdb_key) {
                        let mut updated = (*current).clone();
                        updated["status"]["disruptionsAllowed"] = json!((healthy - desired - 1).max(0));
                        updated["status"]["currentHealthy"] = json!(healthy);
                        updated["status"]["desiredHealthy"] = json!(desired);
                        updated["status"]["expectedPods"] = json!(expected);
                        updated["status"]["observedGeneration"] = current["metadata"]["generation"].clone();
                        store.put(pdb_key, updated);
                    }
                }
            }
        }
        lifecycle::delete(store, &resource_type, &key, &options)?;
        Ok((201, success_status(201)))
    })
}
