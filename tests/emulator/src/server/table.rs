//! `meta.k8s.io/v1` Table output for `kubectl get`: the columns the real
//! server prints for the built-in types, and a CRD's
//! additionalPrinterColumns for custom resources.

use serde_json::{Value, json};

use super::jsonpath;
use super::registry::{PrinterColumn, ResourceType};

/// Age the way kubectl prints it (`duration.HumanDuration`).
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    let minutes = seconds / 60;
    let hours = minutes / 60;
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        if seconds % 60 == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{}s", seconds % 60)
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        if minutes % 60 == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{}m", minutes % 60)
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        if hours % 24 == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{}h", hours / 24, hours % 24)
        }
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let days = hours / 24;
        if days % 365 == 0 {
            format!("{}y", days / 365)
        } else {
            format!("{}y{}d", days / 365, days % 365)
        }
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

fn age_of(timestamp: &Value) -> String {
    match timestamp
        .as_str()
        .and_then(|text| text.parse::<jiff::Timestamp>().ok())
    {
        Some(at) => human_duration((jiff::Timestamp::now() - at).get_seconds()),
        None => "<unknown>".into(),
    }
}

fn column(name: &str, column_type: &str, format: &str, priority: i64) -> PrinterColumn {
    PrinterColumn {
        name: name.to_owned(),
        column_type: column_type.to_owned(),
        format: format.to_owned(),
        description: String::new(),
        priority,
        json_path: String::new(),
    }
}

type Row = Vec<Value>;
/// Columns and the function that renders one object as a row.
type Layout<'a> = (Vec<PrinterColumn>, Box<dyn Fn(&Value) -> Row + 'a>);

fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn count(value: &Value) -> usize {
    value
        .as_object()
        .map(|fields| fields.len())
        .or_else(|| value.as_array().map(Vec::len))
        .unwrap_or(0)
}

fn pod_row(object: &Value) -> Row {
    let containers = count(&object["spec"]["containers"]);
    let statuses = object["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = statuses
        .iter()
        .filter(|status| status["ready"].as_bool() == Some(true))
        .count();
    let restarts: i64 = statuses
        .iter()
        .map(|status| status["restartCount"].as_i64().unwrap_or(0))
        .sum();
    let mut phase = text(&object["status"]["phase"]);
    if let Some(reason) = object["status"]["reason"].as_str() {
        phase = reason.to_owned();
    }
    for status in &statuses {
        if let Some(reason) = status["state"]["waiting"]["reason"].as_str() {
            phase = reason.to_owned();
        }
    }
    if !object["metadata"]["deletionTimestamp"].is_null() {
        phase = "Terminating".into();
    }
    vec![
        json!(object["metadata"]["name"]),
        json!(format!("{ready}/{containers}")),
        json!(phase),
        json!(restarts),
        json!(age_of(&object["metadata"]["creationTimestamp"])),
        json!(object["status"]["podIP"].as_str().unwrap_or("<none>")),
        json!(object["spec"]["nodeName"].as_str().unwrap_or("<none>")),
    ]
}

/// Columns and row builder for a built-in type.
fn builtin_layout(resource_type: &ResourceType) -> Layout<'static> {
    let name = column("Name", "string", "name", 0);
    let age = column("Age", "string", "", 0);
    let name_of = |object: &Value| json!(object["metadata"]["name"]);
    let age_cell = |object: &Value| json!(age_of(&object["metadata"]["creationTimestamp"]));
    match (
        resource_type.group.as_str(),
        resource_type.resource.as_str(),
    ) {
        ("", "pods") => (
            vec![
                name,
                column("Ready", "string", "", 0),
                column("Status", "string", "", 0),
                column("Restarts", "string", "", 0),
                age,
                column("IP", "string", "", 1),
                column("Node", "string", "", 1),
            ],
            Box::new(pod_row),
        ),
        // As `kubectl get nodes`: Ready or NotReady from the Ready condition.
        ("", "nodes") => (
            vec![
                name,
                column("Status", "string", "", 0),
                column("Roles", "string", "", 0),
                age,
                column("Version", "string", "", 0),
            ],
            Box::new(move |object| {
                let ready = object["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|condition| condition["type"] == "Ready" && condition["status"] == "True");
                let version = object["status"]["nodeInfo"]["kubeletVersion"]
                    .as_str()
                    .unwrap_or("");
                vec![
                    name_of(object),
                    json!(if ready { "Ready" } else { "NotReady" }),
                    json!("<none>"),
                    age_cell(object),
                    json!(version),
                ]
            }),
        ),
        ("", "namespaces") => (
            vec![name, column("Status", "string", "", 0), age],
            Box::new(move |object| {
                vec![
                    name_of(object),
                    json!(text(&object["status"]["phase"])),
                    age_cell(object),
                ]
            }),
        ),
        ("", "configmaps") | ("", "secrets") => (
            vec![name, column("Data", "string", "", 0), age],
            Box::new(move |object| {
                let data = count(&object["data"])
                    + count(&object["binaryData"])
                    + count(&object["stringData"]);
                vec![name_of(object), json!(data), age_cell(object)]
            }),
        ),
        ("apps", "statefulsets") => (
            vec![
                name,
                column("Ready", "string", "", 0),
                age,
                column("Containers", "string", "", 1),
                column("Images", "string", "", 1),
            ],
            Box::new(move |object| {
                let ready = object["status"]["readyReplicas"].as_i64().unwrap_or(0);
                let wanted = object["spec"]["replicas"].as_i64().unwrap_or(0);
                let containers = object["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let joined = |field: &str| {
                    containers
                        .iter()
                        .map(|container| text(&container[field]))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                vec![
                    name_of(object),
                    json!(format!("{ready}/{wanted}")),
                    age_cell(object),
                    json!(joined("name")),
                    json!(joined("image")),
                ]
            }),
        ),
        ("apps", "deployments") => (
            vec![
                name,
                column("Ready", "string", "", 0),
                column("Up-to-date", "string", "", 0),
                column("Available", "string", "", 0),
                age,
            ],
            Box::new(move |object| {
                let status = &object["status"];
                let ready = status["readyReplicas"].as_i64().unwrap_or(0);
                let wanted = object["spec"]["replicas"].as_i64().unwrap_or(0);
                vec![
                    name_of(object),
                    json!(format!("{ready}/{wanted}")),
                    json!(status["updatedReplicas"].as_i64().unwrap_or(0)),
                    json!(status["availableReplicas"].as_i64().unwrap_or(0)),
                    age_cell(object),
                ]
            }),
        ),
        ("coordination.k8s.io", "leases") => (
            vec![name, column("Holder", "string", "", 0), age],
            Box::new(move |object| {
                vec![
                    name_of(object),
                    json!(text(&object["spec"]["holderIdentity"])),
                    age_cell(object),
                ]
            }),
        ),
        ("policy", "poddisruptionbudgets") => (
            vec![
                name,
                column("Min Available", "string", "", 0),
                column("Max Unavailable", "string", "", 0),
                column("Allowed Disruptions", "integer", "", 0),
                age,
            ],
            Box::new(move |object| {
                let or_na = |value: &Value| {
                    if value.is_null() {
                        "N/A".to_owned()
                    } else {
                        text(value)
                    }
                };
                vec![
                    name_of(object),
                    json!(or_na(&object["spec"]["minAvailable"])),
                    json!(or_na(&object["spec"]["maxUnavailable"])),
                    json!(object["status"]["disruptionsAllowed"].as_i64().unwrap_or(0)),
                    age_cell(object),
                ]
            }),
        ),
        ("apps", "controllerrevisions") => (
            vec![
                name,
                column("Controller", "string", "", 0),
                column("Revision", "integer", "", 0),
                age,
            ],
            Box::new(move |object| {
                let controller = object["metadata"]["ownerReferences"]
                    .as_array()
                    .and_then(|owners| {
                        owners
                            .iter()
                            .find(|owner| owner["controller"].as_bool() == Some(true))
                    })
                    .map(|owner| {
                        format!(
                            "{}/{}",
                            text(&owner["kind"]).to_lowercase(),
                            text(&owner["name"])
                        )
                    })
                    .unwrap_or_else(|| "<none>".into());
                vec![
                    name_of(object),
                    json!(controller),
                    json!(object["revision"].as_i64().unwrap_or(0)),
                    age_cell(object),
                ]
            }),
        ),
        ("", "events") | ("events.k8s.io", "events") => (
            vec![
                column("Last Seen", "string", "", 0),
                column("Type", "string", "", 0),
                column("Reason", "string", "", 0),
                column("Object", "string", "", 0),
                column("Message", "string", "", 0),
            ],
            Box::new(move |object| {
                let regarding = if object["involvedObject"].is_null() {
                    &object["regarding"]
                } else {
                    &object["involvedObject"]
                };
                let seen = [
                    &object["lastTimestamp"],
                    &object["deprecatedLastTimestamp"],
                    &object["eventTime"],
                    &object["metadata"]["creationTimestamp"],
                ]
                .into_iter()
                .find(|value| !value.is_null())
                .map(age_of)
                .unwrap_or_default();
                let message = if object["message"].is_null() {
                    &object["note"]
                } else {
                    &object["message"]
                };
                vec![
                    json!(seen),
                    json!(text(&object["type"])),
                    json!(text(&object["reason"])),
                    json!(format!(
                        "{}/{}",
                        text(&regarding["kind"]).to_lowercase(),
                        text(&regarding["name"])
                    )),
                    json!(text(message)),
                ]
            }),
        ),
        ("", "services") => (
            vec![
                name,
                column("Type", "string", "", 0),
                column("Cluster-IP", "string", "", 0),
                age,
            ],
            Box::new(move |object| {
                vec![
                    name_of(object),
                    json!(object["spec"]["type"].as_str().unwrap_or("ClusterIP")),
                    json!(object["spec"]["clusterIP"].as_str().unwrap_or("<none>")),
                    age_cell(object),
                ]
            }),
        ),
        _ => (
            vec![name, age],
            Box::new(move |object| vec![name_of(object), age_cell(object)]),
        ),
    }
}

fn custom_cell(object: &Value, column: &PrinterColumn) -> Value {
    let Some(value) = jsonpath::first(object, &column.json_path) else {
        return Value::Null;
    };
    match column.column_type.as_str() {
        "date" => json!(age_of(&value)),
        "integer" | "number" | "boolean" => value,
        _ => match value {
            Value::String(text) => json!(text),
            other => json!(other.to_string()),
        },
    }
}

fn layout(resource_type: &ResourceType) -> Layout<'_> {
    if !resource_type.custom {
        return builtin_layout(resource_type);
    }
    if resource_type.columns.is_empty() {
        let columns = vec![
            column("Name", "string", "name", 0),
            column("Age", "date", "", 0),
        ];
        return (
            columns,
            Box::new(|object: &Value| {
                vec![
                    json!(object["metadata"]["name"]),
                    json!(age_of(&object["metadata"]["creationTimestamp"])),
                ]
            }),
        );
    }
    let mut columns = vec![column("Name", "string", "name", 0)];
    columns.extend(resource_type.columns.iter().cloned());
    (
        columns,
        Box::new(move |object: &Value| {
            let mut row = vec![json!(object["metadata"]["name"])];
            row.extend(
                resource_type
                    .columns
                    .iter()
                    .map(|column| custom_cell(object, column)),
            );
            row
        }),
    )
}

/// A Table of `objects` (wire form).
pub fn table(
    resource_type: &ResourceType,
    objects: &[Value],
    include_object: &str,
    resource_version: &str,
    continue_token: Option<&str>,
    with_columns: bool,
) -> Value {
    let (columns, row_of) = layout(resource_type);
    let definitions: Vec<Value> = columns
        .iter()
        .map(|column| {
            json!({
                "name": column.name,
                "type": column.column_type,
                "format": column.format,
                "description": column.description,
                "priority": column.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let mut row = json!({"cells": row_of(object)});
            match include_object {
                "None" => {}
                "Object" => row["object"] = object.clone(),
                _ => row["object"] = super::handlers::partial_metadata(object),
            }
            row
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": if with_columns { definitions } else { Vec::new() },
        "rows": rows,
    })
}
