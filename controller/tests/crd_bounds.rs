//! Every list, map and string of both generated CRD schemas has a bound.
//!
//! A real API server estimates the cost of each CEL rule from the bounds of what it can
//! reach and of the lists around it, and counts anything unbounded as large as a
//! request (3 MiB): an unbounded list above a rule made the DeploymentPlan CRD
//! uninstallable on Kubernetes 1.28. The bounds come from `shoal_controller::api::limits`.

use serde_json::Value;

/// Schema paths that may stay unbounded, each as `(path, why)`, the path as the walk
/// names it (`.spec.jobs[]`, `.status.refusedAnnotations{}`). Empty: nothing needs it
/// (map keys cannot carry a bound in a structural schema, and the walk does not ask).
const ALLOWED: &[(&str, &str)] = &[];

/// Where `schema` (at `path`) lacks a bound, appended to `found`.
fn unbounded(schema: &Value, path: &str, found: &mut Vec<String>) {
    let has = |key: &str| schema.get(key).is_some();
    match schema.get("type").and_then(Value::as_str) {
        Some("array") => {
            if !has("maxItems") {
                found.push(format!("{path}: array without maxItems"));
            }
            if let Some(items) = schema.get("items") {
                unbounded(items, &format!("{path}[]"), found);
            }
        }
        Some("string") => {
            // An enum or a format bounds a string as well as maxLength does.
            if !has("maxLength") && !has("enum") && !has("format") {
                found.push(format!("{path}: string without maxLength"));
            }
        }
        _ => {
            if let Some(entries) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                if !has("maxProperties") {
                    found.push(format!("{path}: map without maxProperties"));
                }
                unbounded(entries, &format!("{path}{{}}"), found);
            }
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    unbounded(property, &format!("{path}.{name}"), found);
                }
            }
        }
    }
}

/// The unbounded places of a CRD's schema that the allow-list does not excuse.
fn unexcused<K: kube::CustomResourceExt>() -> Vec<String> {
    let crd = serde_json::to_value(K::crd()).expect("the CRD serializes");
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .expect("the CRD has versions");
    let mut found = Vec::new();
    for version in versions {
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .expect("every version has a schema");
        unbounded(schema, "", &mut found);
    }
    found.retain(|place| {
        !ALLOWED
            .iter()
            .any(|(allowed, _)| place.split(':').next() == Some(allowed))
    });
    found
}

#[test]
fn every_list_map_and_string_of_the_swarm_schema_is_bounded() {
    let found = unexcused::<shoal_controller::api::swarm::Swarm>();
    assert!(
        found.is_empty(),
        "the Swarm CRD has unbounded places (bound them from shoal_controller::api::limits):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_list_map_and_string_of_the_deployment_plan_schema_is_bounded() {
    let found = unexcused::<shoal_controller::api::deployment_plan::DeploymentPlan>();
    assert!(
        found.is_empty(),
        "the DeploymentPlan CRD has unbounded places (bound them from shoal_controller::api::limits):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_walk_finds_an_unbounded_list_map_and_string() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "list": {"type": "array", "items": {"type": "string", "maxLength": 3}},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
            "word": {"type": "string", "enum": ["a", "b"]},
            "bounded": {"type": "array", "maxItems": 2, "items": {"type": "integer"}}
        }
    });
    let mut found = Vec::new();
    unbounded(&schema, "", &mut found);
    assert_eq!(
        found,
        [
            ".list: array without maxItems",
            ".map: map without maxProperties",
            ".map{}: string without maxLength",
        ]
    );
}
