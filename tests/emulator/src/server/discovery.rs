//! Discovery documents: /version, /api, /apis, group and group-version
//! resource lists, and the OpenAPI endpoints kubectl probes.

use serde_json::{Value, json};

use super::registry::{Registry, ResourceType};

/// The Kubernetes version the emulator claims to be.
pub const MAJOR: &str = "1";
pub const MINOR: &str = "32";

pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": "v1.32.0-shoal-emulator",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

pub fn core_versions(address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    })
}

fn group_document(name: &str, versions: &[String]) -> Value {
    let listed: Vec<Value> = versions
        .iter()
        .map(|version| json!({"groupVersion": format!("{name}/{version}"), "version": version}))
        .collect();
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": listed,
        "preferredVersion": listed.first().cloned().unwrap_or(Value::Null),
    })
}

pub fn group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .iter()
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, versions)| {
            let mut group = group_document(name, versions);
            if let Some(fields) = group.as_object_mut() {
                fields.remove("kind");
                fields.remove("apiVersion");
            }
            group
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    registry
        .groups()
        .get(name)
        .map(|versions| group_document(name, versions))
}

fn resource_entry(resource_type: &ResourceType) -> Value {
    let mut entry = json!({
        "name": resource_type.resource,
        "singularName": resource_type.singular,
        "namespaced": resource_type.namespaced,
        "kind": resource_type.kind,
        "verbs": resource_type.verbs(),
    });
    if !resource_type.short_names.is_empty() {
        entry["shortNames"] = json!(resource_type.short_names);
    }
    if !resource_type.categories.is_empty() {
        entry["categories"] = json!(resource_type.categories);
    }
    entry
}

fn subresource_entry(
    resource_type: &ResourceType,
    subresource: &str,
    kind: &str,
    group_version: Option<(&str, &str)>,
    verbs: &[&str],
) -> Value {
    let mut entry = json!({
        "name": format!("{}/{subresource}", resource_type.resource),
        "singularName": "",
        "namespaced": resource_type.namespaced,
        "kind": kind,
        "verbs": verbs,
    });
    if let Some((group, version)) = group_version {
        entry["group"] = json!(group);
        entry["version"] = json!(version);
    }
    entry
}

pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for resource_type in registry
        .all()
        .filter(|resource_type| resource_type.group == group && resource_type.version == version)
    {
        resources.push(resource_entry(resource_type));
        if resource_type.status_subresource {
            resources.push(subresource_entry(
                resource_type,
                "status",
                &resource_type.kind,
                None,
                &["get", "patch", "update"],
            ));
        }
        if resource_type.scale.is_some() {
            resources.push(subresource_entry(
                resource_type,
                "scale",
                "Scale",
                Some(("autoscaling", "v1")),
                &["get", "patch", "update"],
            ));
        }
        if resource_type.eviction {
            resources.push(subresource_entry(
                resource_type,
                "eviction",
                "Eviction",
                Some(("policy", "v1")),
                &["create"],
            ));
        }
        if resource_type.eviction {
            // Pods (the only type with eviction) are bound through pods/binding.
            resources.push(subresource_entry(
                resource_type,
                "binding",
                "Binding",
                None,
                &["create"],
            ));
        }
        if resource_type.token_request {
            resources.push(subresource_entry(
                resource_type,
                "token",
                "TokenRequest",
                Some(("authentication.k8s.io", "v1")),
                &["create"],
            ));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// The OpenAPI v3 index. Every path is listed so that kubectl's query
/// parameter check (fieldValidation) finds a document per group-version.
pub fn openapi_v3_index(registry: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            let path = if group.is_empty() {
                format!("api/{version}")
            } else {
                format!("apis/{group}/{version}")
            };
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash=shoal")}),
            );
        }
    }
    json!({"paths": paths})
}

/// A minimal OpenAPI v3 document for one group-version: for each resource a
/// path whose PATCH operation names its GVK and accepts `fieldValidation`
/// (kubectl checks that before sending `fieldValidation=Strict`), and for
/// each custom resource its CRD schema, so that `kubectl explain` works on
/// it. Built-in types carry no schema (the emulator holds none for them).
pub fn openapi_v3_group(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    for resource_type in registry
        .all()
        .filter(|resource_type| resource_type.group == group && resource_type.version == version)
    {
        let path = if resource_type.namespaced {
            format!(
                "{prefix}/namespaces/{{namespace}}/{}/{{name}}",
                resource_type.resource
            )
        } else {
            format!("{prefix}/{}/{{name}}", resource_type.resource)
        };
        let gvk = json!({"group": group, "version": version, "kind": resource_type.kind});
        let parameters = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "force", "in": "query", "schema": {"type": "boolean"}},
        ]);
        let operation = |id: &str| {
            json!({
                "operationId": format!("{id}{}", resource_type.kind),
                "parameters": parameters,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        if let Some(schema) = &resource_type.schema {
            schemas.insert(
                schema_name(group, version, &resource_type.kind),
                object_schema(schema, &gvk),
            );
        }
        paths.insert(
            path,
            json!({
                "get": operation("read"),
                "put": operation("replace"),
                "patch": operation("patch"),
                "delete": operation("delete"),
            }),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{MAJOR}.{MINOR}.0")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The schema name the API server uses: the group reversed (`shoal.dev` →
/// `dev.shoal`), then version and kind.
fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// A CRD's openAPIV3Schema as the API server publishes it: the GVK extension
/// that `kubectl explain` looks the type up by, and the `apiVersion`, `kind`
/// and `metadata` fields every object has (CRD schemas usually leave them out).
fn object_schema(schema: &Value, gvk: &Value) -> Value {
    let mut published = schema.clone();
    if let Some(fields) = published.as_object_mut() {
        fields.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        fields.entry("type").or_insert_with(|| json!("object"));
        let properties = fields.entry("properties").or_insert_with(|| json!({}));
        if let Some(properties) = properties.as_object_mut() {
            properties.entry("apiVersion").or_insert_with(|| json!({
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation of an object.",
            }));
            properties.entry("kind").or_insert_with(|| json!({
                "type": "string",
                "description": "Kind is a string value representing the REST resource this object represents.",
            }));
            properties.entry("metadata").or_insert_with(|| json!({
                "type": "object",
                "description": "Standard object's metadata: name, namespace, labels, annotations, ownerReferences, ...",
            }));
        }
    }
    published
}
