//! Wire ↔ storage conversion. events.k8s.io/v1 Events share storage with
//! core/v1 Events (as in a real cluster), so `kubectl describe` sees the
//! events a kube `Recorder` writes.

use serde_json::{Map, Value, json};

use super::registry::{Conversion, ResourceType};

/// (events.k8s.io/v1 field, core/v1 field)
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(object: &Value, from_index: usize) -> Value {
    let mut converted = Map::new();
    if let Some(fields) = object.as_object() {
        for (key, value) in fields {
            let renamed = EVENT_FIELDS.iter().find_map(|pair| {
                let (v1, core) = *pair;
                let (from, to) = if from_index == 0 {
                    (v1, core)
                } else {
                    (core, v1)
                };
                (from == key).then_some(to)
            });
            converted.insert(renamed.unwrap_or(key).to_owned(), value.clone());
        }
    }
    Value::Object(converted)
}

/// The object as a client of `resource_type` sees it.
pub fn to_wire(resource_type: &ResourceType, stored: &Value) -> Value {
    let mut object = match resource_type.conversion {
        Conversion::Identity => stored.clone(),
        Conversion::EventsV1 => rename(stored, 1),
    };
    object["apiVersion"] = json!(resource_type.api_version());
    object["kind"] = json!(resource_type.kind);
    object
}

/// The object as stored.
pub fn from_wire(resource_type: &ResourceType, object: &Value) -> Value {
    match resource_type.conversion {
        Conversion::Identity => object.clone(),
        Conversion::EventsV1 => {
            let mut stored = rename(object, 0);
            stored["apiVersion"] = json!("v1");
            stored["kind"] = json!("Event");
            stored
        }
    }
}
