//! Patch types: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//! strategic merge patch for the built-in types, plus the list-merge rules
//! (patch merge keys) they and server-side apply share.

use serde_json::{Map, Value};

/// How a list field merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced as a whole.
    Atomic,
    /// Elements identified by these keys (the first is the SMP merge key).
    Map(Vec<String>),
    /// A set of scalars (union on merge).
    Set,
}

/// List rules of the built-in types, by field path (field names only).
pub fn builtin_list_kind(path: &[String]) -> ListKind {
    let Some(field) = path.last() else {
        return ListKind::Atomic;
    };
    let parent_is =
        |names: &[&str]| path.len() >= 2 && names.contains(&path[path.len() - 2].as_str());
    let keys =
        |names: &[&str]| ListKind::Map(names.iter().map(|name| (*name).to_owned()).collect());
    match field.as_str() {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => keys(&["name"]),
        "volumeMounts" => keys(&["mountPath"]),
        "volumeDevices" => keys(&["devicePath"]),
        "ports" if parent_is(&["containers", "initContainers", "ephemeralContainers"]) => {
            keys(&["containerPort", "protocol"])
        }
        "ports" if parent_is(&["spec"]) => keys(&["port", "protocol"]),
        "conditions" => keys(&["type"]),
        "ownerReferences" => keys(&["uid"]),
        "hostAliases" => keys(&["ip"]),
        "topologySpreadConstraints" => keys(&["topologyKey", "whenUnsatisfiable"]),
        "finalizers" if parent_is(&["metadata"]) => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// List rules of a custom resource from its schema
/// (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`).
pub fn schema_list_kind(schema: &Value, path: &[String]) -> ListKind {
    if path.len() == 2 && path[0] == "metadata" && path[1] == "finalizers" {
        return ListKind::Set;
    }
    if path.len() == 2 && path[0] == "metadata" && path[1] == "ownerReferences" {
        return ListKind::Map(vec!["uid".into()]);
    }
    let mut node = schema;
    for segment in path {
        if node["type"].as_str() == Some("array") {
            node = &node["items"];
        }
        node = match node["properties"].get(segment) {
            Some(child) => child,
            None => &node["additionalProperties"],
        };
    }
    match node["x-kubernetes-list-type"].as_str() {
        Some("map") => ListKind::Map(
            node["x-kubernetes-list-map-keys"]
                .as_array()
                .map(|keys| {
                    keys.iter()
                        .filter_map(|key| key.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        Some("set") => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// A patch that cannot be applied.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchError(pub String);

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    if let Value::Object(patch_fields) = patch {
        if !target.is_object() {
            *target = Value::Object(Map::new());
        }
        if let Value::Object(target_fields) = target {
            for (key, value) in patch_fields {
                if value.is_null() {
                    target_fields.remove(key);
                } else {
                    merge_patch(
                        target_fields.entry(key.clone()).or_insert(Value::Null),
                        value,
                    );
                }
            }
        }
    } else {
        *target = patch.clone();
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn pointer_tokens(pointer: &str) -> Result<Vec<String>, PatchError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or_else(|| PatchError(format!("invalid JSON pointer {pointer:?}")))?;
    Ok(rest.split('/').map(unescape).collect())
}

fn parent_of<'a>(
    document: &'a mut Value,
    tokens: &[String],
    pointer: &str,
) -> Result<&'a mut Value, PatchError> {
    let mut current = document;
    for token in &tokens[..tokens.len().saturating_sub(1)] {
        current = match current {
            Value::Object(fields) => fields.get_mut(token),
            Value::Array(items) => token
                .parse::<usize>()
                .ok()
                .and_then(|index| items.get_mut(index)),
            _ => None,
        }
        .ok_or_else(|| PatchError(format!("path {pointer:?} does not exist")))?;
    }
    Ok(current)
}

fn json_add(document: &mut Value, pointer: &str, value: Value) -> Result<(), PatchError> {
    let tokens = pointer_tokens(pointer)?;
    let Some(last) = tokens.last().cloned() else {
        *document = value;
        return Ok(());
    };
    match parent_of(document, &tokens, pointer)? {
        Value::Object(fields) => {
            fields.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            if last == "-" {
                items.push(value);
                return Ok(());
            }
            let index: usize = last
                .parse()
                .map_err(|_| PatchError(format!("invalid array index in {pointer:?}")))?;
            if index > items.len() {
                return Err(PatchError(format!(
                    "array index out of bounds in {pointer:?}"
                )));
            }
            items.insert(index, value);
            Ok(())
        }
        _ => Err(PatchError(format!("path {pointer:?} does not exist"))),
    }
}

fn json_remove(document: &mut Value, pointer: &str) -> Result<Value, PatchError> {
    let tokens = pointer_tokens(pointer)?;
    let Some(last) = tokens.last().cloned() else {
        return Err(PatchError("cannot remove the whole document".into()));
    };
    let missing = || PatchError(format!("unable to remove nonexistent key: {pointer}"));
    match parent_of(document, &tokens, pointer)? {
        Value::Object(fields) => fields.remove(&last).ok_or_else(missing),
        Value::Array(items) => {
            let index: usize = last.parse().map_err(|_| missing())?;
            if index < items.len() {
                Ok(items.remove(index))
            } else {
                Err(missing())
            }
        }
        _ => Err(missing()),
    }
}

/// RFC 6902 JSON patch.
pub fn json_patch(document: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let operations = patch
        .as_array()
        .ok_or_else(|| PatchError("a JSON patch must be an array of operations".into()))?;
    for operation in operations {
        let op = operation["op"].as_str().unwrap_or_default();
        let path = operation["path"]
            .as_str()
            .ok_or_else(|| PatchError(format!("operation {op:?} has no path")))?;
        match op {
            "add" => json_add(document, path, operation["value"].clone())?,
            "remove" => {
                json_remove(document, path)?;
            }
            "replace" => {
                if document.pointer(path).is_none() {
                    return Err(PatchError(format!(
                        "replace operation does not apply: doc is missing key: {path}"
                    )));
                }
                if let Some(slot) = document.pointer_mut(path) {
                    *slot = operation["value"].clone();
                }
            }
            "move" => {
                let from = operation["from"].as_str().unwrap_or_default();
                let value = json_remove(document, from)?;
                json_add(document, path, value)?;
            }
            "copy" => {
                let from = operation["from"].as_str().unwrap_or_default();
                let value = document.pointer(from).cloned().ok_or_else(|| {
                    PatchError(format!("copy from {from:?}: path does not exist"))
                })?;
                json_add(document, path, value)?;
            }
            "test" => {
                if document.pointer(path) != Some(&operation["value"]) {
                    return Err(PatchError(format!(
                        "test failed: {path} does not hold the expected value"
                    )));
                }
            }
            other => {
                return Err(PatchError(format!(
                    "unexpected JSON patch operation {other:?}"
                )));
            }
        }
    }
    Ok(())
}

/// Removes SMP directives from a value being inserted as new.
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(key, _)| !key.starts_with('$'))
                .map(|(key, value)| (key.clone(), strip_directives(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|item| item.get("$patch").is_none())
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn same_key(a: &Value, b: &Value, key: &str) -> bool {
    a.get(key).is_some() && a.get(key) == b.get(key)
}

/// Strategic merge patch (the subset kubectl generates: null deletes,
/// `$patch: replace|delete|merge`, `$retainKeys`, `$setElementOrder/`,
/// `$deleteFromPrimitiveList/`, lists merged by their patch merge key).
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    list_kind: &dyn Fn(&[String]) -> ListKind,
) -> Result<(), PatchError> {
    let mut path = Vec::new();
    smp_map(target, patch, &mut path, list_kind)
}

fn smp_map(
    target: &mut Value,
    patch: &Value,
    path: &mut Vec<String>,
    list_kind: &dyn Fn(&[String]) -> ListKind,
) -> Result<(), PatchError> {
    let Value::Object(patch_fields) = patch else {
        return Err(PatchError(format!(
            "strategic merge patch for {} must be an object",
            display_path(path)
        )));
    };
    match patch_fields.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = strip_directives(patch);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(PatchError(format!("unknown patch directive {other:?}"))),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let mut orders: Vec<(String, Vec<Value>)> = Vec::new();
    for (key, value) in patch_fields {
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            orders.push((
                field.to_owned(),
                value.as_array().cloned().unwrap_or_default(),
            ));
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let removed = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = target.get_mut(field) {
                items.retain(|item| !removed.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        let Some(target_fields) = target.as_object_mut() else {
            continue;
        };
        path.push(key.clone());
        match value {
            Value::Null => {
                target_fields.remove(key);
            }
            Value::Object(inner) => {
                if inner.get("$patch").and_then(Value::as_str) == Some("delete") {
                    target_fields.remove(key);
                } else {
                    let slot = target_fields.entry(key.clone()).or_insert(Value::Null);
                    smp_map(slot, value, path, list_kind)?;
                }
            }
            Value::Array(items) => {
                let slot = target_fields.entry(key.clone()).or_insert(Value::Null);
                smp_list(slot, items, path, list_kind)?;
            }
            scalar => {
                target_fields.insert(key.clone(), scalar.clone());
            }
        }
        path.pop();
    }
    if let Some(Value::Array(retained)) = patch_fields.get("$retainKeys")
        && let Some(target_fields) = target.as_object_mut()
    {
        let keep: Vec<&str> = retained.iter().filter_map(Value::as_str).collect();
        target_fields.retain(|key, _| keep.contains(&key.as_str()));
    }
    for (field, order) in orders {
        path.push(field.clone());
        let merge_key = match list_kind(path) {
            ListKind::Map(keys) => keys.first().cloned(),
            _ => None,
        };
        path.pop();
        if let Some(Value::Array(items)) = target.get_mut(&field) {
            reorder(items, &order, merge_key.as_deref());
        }
    }
    Ok(())
}

fn reorder(items: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let mut remaining = std::mem::take(items);
    for wanted in order {
        let position = remaining.iter().position(|item| match merge_key {
            Some(key) => same_key(item, wanted, key),
            None => item == wanted,
        });
        if let Some(position) = position {
            items.push(remaining.remove(position));
        }
    }
    items.append(&mut remaining);
}

fn smp_list(
    target: &mut Value,
    patch_items: &[Value],
    path: &mut Vec<String>,
    list_kind: &dyn Fn(&[String]) -> ListKind,
) -> Result<(), PatchError> {
    let replace = patch_items
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    let kind = list_kind(path);
    if replace || kind == ListKind::Atomic || !target.is_array() {
        *target = strip_directives(&Value::Array(patch_items.to_vec()));
        return Ok(());
    }
    let Value::Array(items) = target else {
        return Ok(());
    };
    match kind {
        ListKind::Set => {
            for item in patch_items {
                if !items.contains(item) {
                    items.push(item.clone());
                }
            }
        }
        ListKind::Map(keys) => {
            let Some(merge_key) = keys.first() else {
                *target = strip_directives(&Value::Array(patch_items.to_vec()));
                return Ok(());
            };
            for patch_item in patch_items {
                if patch_item.get(merge_key).is_none() {
                    return Err(PatchError(format!(
                        "map: {patch_item} does not contain declared merge key: {merge_key} (in {})",
                        display_path(path)
                    )));
                }
                let position = items
                    .iter()
                    .position(|item| same_key(item, patch_item, merge_key));
                let delete = patch_item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(_), true) => items.retain(|item| !same_key(item, patch_item, merge_key)),
                    (None, true) => {}
                    (Some(index), false) => {
                        smp_map(&mut items[index], patch_item, path, list_kind)?
                    }
                    (None, false) => items.push(strip_directives(patch_item)),
                }
            }
        }
        ListKind::Atomic => {}
    }
    Ok(())
}

fn display_path(path: &[String]) -> String {
    if path.is_empty() {
        "the object".into()
    } else {
        path.join(".")
    }
}
