//! Managed fields and server-side apply: every write records which manager
//! owns which fields (`metadata.managedFields`, FieldsV1); an apply merges
//! the manager's configuration, removes fields it stopped applying, and
//! reports a 409 conflict for fields another manager owns with a different
//! value unless forced.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::errors::{ApiError, Cause};
use super::events::from_wire;
use super::handlers::{WriteContext, create_object, list_rules, update_object};
use super::patch::ListKind;
use super::registry::ResourceType;
use super::store::{ObjectKey, Store, now_timestamp};

/// A field path in FieldsV1 notation (`f:spec`, `k:{"name":"a"}`, `v:"x"`).
type FieldPath = Vec<String>;
type FieldSet = BTreeSet<FieldPath>;

const SYSTEM_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

fn element_key(item: &Value, keys: &[String]) -> Option<String> {
    let mut fields = Map::new();
    for key in keys {
        if let Some(value) = item.get(key) {
            fields.insert(key.clone(), value.clone());
        }
    }
    if fields.is_empty() {
        return None;
    }
    Some(format!("k:{}", Value::Object(fields)))
}

fn collect(
    value: &Value,
    path: &mut FieldPath,
    names: &mut Vec<String>,
    rules: &dyn Fn(&[String]) -> ListKind,
    out: &mut FieldSet,
) {
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            for (key, child) in fields {
                if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind") {
                    continue;
                }
                if path.len() == 1
                    && path[0] == "f:metadata"
                    && SYSTEM_METADATA.contains(&key.as_str())
                {
                    continue;
                }
                path.push(format!("f:{key}"));
                names.push(key.clone());
                collect(child, path, names, rules, out);
                names.pop();
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match rules(names) {
            ListKind::Map(keys) => {
                for item in items {
                    match element_key(item, &keys) {
                        Some(element) => {
                            path.push(element);
                            out.insert(path.clone());
                            collect(item, path, names, rules, out);
                            path.pop();
                        }
                        None => {
                            out.insert(path.clone());
                        }
                    }
                }
            }
            ListKind::Set => {
                for item in items {
                    path.push(format!("v:{item}"));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListKind::Atomic => {
                out.insert(path.clone());
            }
        },
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

fn field_set(object: &Value, resource_type: &ResourceType) -> FieldSet {
    let rules = list_rules(resource_type);
    let mut out = FieldSet::new();
    collect(object, &mut Vec::new(), &mut Vec::new(), &*rules, &mut out);
    out
}

fn matches_element(item: &Value, element: &str) -> bool {
    if let Some(keys) = element.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(keys) else {
            return false;
        };
        keys.iter().all(|(key, value)| item.get(key) == Some(value))
    } else if let Some(value) = element.strip_prefix("v:") {
        serde_json::from_str::<Value>(value).is_ok_and(|value| *item == value)
    } else {
        false
    }
}

fn value_at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut current = object;
    for segment in path {
        current = if let Some(field) = segment.strip_prefix("f:") {
            current.get(field)?
        } else {
            current
                .as_array()?
                .iter()
                .find(|item| matches_element(item, segment))?
        };
    }
    Some(current)
}

fn remove_at(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = object;
    for segment in parents {
        let next = if let Some(field) = segment.strip_prefix("f:") {
            current.get_mut(field)
        } else {
            current
                .as_array_mut()
                .and_then(|items| items.iter_mut().find(|item| matches_element(item, segment)))
        };
        match next {
            Some(next) => current = next,
            None => return,
        }
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Some(fields) = current.as_object_mut() {
            fields.remove(field);
        }
    } else if let Some(items) = current.as_array_mut() {
        items.retain(|item| !matches_element(item, last));
    }
}

fn to_tree(set: &FieldSet) -> Value {
    fn insert(node: &mut Map<String, Value>, path: &[String]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let child = node.entry(first.clone()).or_insert_with(|| json!({}));
        if let Value::Object(child) = child {
            if rest.is_empty() {
                if !child.is_empty() {
                    child.insert(".".into(), json!({}));
                }
            } else {
                insert(child, rest);
            }
        }
    }
    let mut tree = Map::new();
    // Longer paths first would lose "." marks; mark owned parents afterwards.
    for path in set {
        insert(&mut tree, path);
    }
    for path in set {
        insert(&mut tree, path);
    }
    Value::Object(tree)
}

fn from_tree(tree: &Value, path: &mut FieldPath, out: &mut FieldSet) {
    if let Some(fields) = tree.as_object() {
        for (key, child) in fields {
            if key == "." {
                out.insert(path.clone());
                continue;
            }
            path.push(key.clone());
            if child.as_object().is_none_or(Map::is_empty) {
                out.insert(path.clone());
            } else {
                from_tree(child, path, out);
            }
            path.pop();
        }
    }
}

/// One managedFields entry.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    subresource: String,
    api_version: String,
    time: String,
    fields: FieldSet,
}

fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| {
                    let mut fields = FieldSet::new();
                    from_tree(&item["fieldsV1"], &mut Vec::new(), &mut fields);
                    Entry {
                        manager: item["manager"].as_str().unwrap_or_default().to_owned(),
                        operation: item["operation"].as_str().unwrap_or("Update").to_owned(),
                        subresource: item["subresource"].as_str().unwrap_or_default().to_owned(),
                        api_version: item["apiVersion"].as_str().unwrap_or_default().to_owned(),
                        time: item["time"].as_str().unwrap_or_default().to_owned(),
                        fields,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn store_entries(object: &mut Value, entries: Vec<Entry>) {
    let rendered: Vec<Value> = entries
        .into_iter()
        .filter(|entry| !entry.fields.is_empty())
        .map(|entry| {
            let mut item = json!({
                "manager": entry.manager,
                "operation": entry.operation,
                "apiVersion": entry.api_version,
                "time": entry.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_tree(&entry.fields),
            });
            if !entry.subresource.is_empty() {
                item["subresource"] = json!(entry.subresource);
            }
            item
        })
        .collect();
    if rendered.is_empty() {
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("managedFields");
        }
    } else {
        object["metadata"]["managedFields"] = Value::Array(rendered);
    }
}

fn is_within(path: &FieldPath, prefix: &FieldPath) -> bool {
    path.len() >= prefix.len() && path[..prefix.len()] == prefix[..]
}

/// Records a create or update by `manager` in `new.metadata.managedFields`:
/// the fields it set or changed become its own and leave other managers.
pub fn record_update(
    new: &mut Value,
    old: Option<&Value>,
    manager: &str,
    resource_type: &ResourceType,
    operation: &str,
    subresource: Option<&str>,
) {
    let new_set = field_set(new, resource_type);
    let (mut list, changed) = match old {
        None => (Vec::new(), new_set.clone()),
        Some(old) => {
            let old_set = field_set(old, resource_type);
            let mut changed: FieldSet = new_set
                .iter()
                .filter(|path| value_at(new, path) != value_at(old, path))
                .cloned()
                .collect();
            changed.extend(old_set.difference(&new_set).cloned());
            (entries(old), changed)
        }
    };
    if changed.is_empty() && old.is_some() {
        store_entries(new, list);
        return;
    }
    let subresource = subresource.unwrap_or_default().to_owned();
    for entry in &mut list {
        if entry.manager == manager
            && entry.operation == operation
            && entry.subresource == subresource
        {
            continue;
        }
        entry
            .fields
            .retain(|path| !changed.iter().any(|changed| is_within(path, changed)));
    }
    let own: FieldSet = changed.intersection(&new_set).cloned().collect();
    let now = now_timestamp();
    match list.iter_mut().find(|entry| {
        entry.manager == manager && entry.operation == operation && entry.subresource == subresource
    }) {
        Some(entry) => {
            entry.fields.extend(own);
            entry.time = now;
            entry.api_version = resource_type.api_version();
        }
        None => list.push(Entry {
            manager: manager.to_owned(),
            operation: operation.to_owned(),
            subresource,
            api_version: resource_type.api_version(),
            time: now,
            fields: own,
        }),
    }
    store_entries(new, list);
}

fn merge_applied(
    target: &mut Value,
    config: &Value,
    names: &mut Vec<String>,
    rules: &dyn Fn(&[String]) -> ListKind,
) {
    match (target, config) {
        (Value::Object(target_fields), Value::Object(config_fields)) => {
            for (key, value) in config_fields {
                names.push(key.clone());
                match target_fields.get_mut(key) {
                    Some(existing) => merge_applied(existing, value, names, rules),
                    None => {
                        target_fields.insert(key.clone(), value.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(target_items), Value::Array(config_items)) => match rules(names) {
            ListKind::Map(keys) => {
                for item in config_items {
                    let position = element_key(item, &keys).and_then(|element| {
                        target_items
                            .iter()
                            .position(|existing| matches_element(existing, &element))
                    });
                    match position {
                        Some(index) => merge_applied(&mut target_items[index], item, names, rules),
                        None => target_items.push(item.clone()),
                    }
                }
            }
            ListKind::Set => {
                for item in config_items {
                    if !target_items.contains(item) {
                        target_items.push(item.clone());
                    }
                }
            }
            ListKind::Atomic => *target_items = config_items.clone(),
        },
        (target, config) => *target = config.clone(),
    }
}

fn render_path(path: &FieldPath) -> String {
    path.iter()
        .map(|segment| match segment.strip_prefix("f:") {
            Some(field) => format!(".{field}"),
            None => format!("[{segment}]"),
        })
        .collect()
}

/// `PATCH` with `application/apply-patch+yaml`: create or merge the
/// manager's configuration. Returns (status code, stored object).
pub fn server_side_apply(
    store: &mut Store,
    resource_type: &ResourceType,
    key: &ObjectKey,
    namespace: Option<&str>,
    body: &Value,
    force: bool,
    context: &WriteContext,
) -> Result<(u16, Arc<Value>), ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "an apply configuration must be an object",
        ));
    }
    let api_version = body["apiVersion"].as_str().unwrap_or_default();
    let kind = body["kind"].as_str().unwrap_or_default();
    if context.subresource.is_none()
        && (api_version != resource_type.api_version() || kind != resource_type.kind)
    {
        return Err(ApiError::bad_request(format!(
            "an apply configuration for {} must have apiVersion {:?} and kind {:?} (got {api_version:?}, {kind:?})",
            resource_type.resource,
            resource_type.api_version(),
            resource_type.kind
        )));
    }
    let body_name = body["metadata"]["name"].as_str().unwrap_or_default();
    if !body_name.is_empty() && body_name != key.name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            key.name
        )));
    }
    let mut config = from_wire(resource_type, body);
    let status_only = context.subresource.as_deref() == Some("status");
    if let Some(fields) = config.as_object_mut() {
        if status_only {
            fields.retain(|field, _| {
                matches!(
                    field.as_str(),
                    "apiVersion" | "kind" | "metadata" | "status"
                )
            });
            if let Some(metadata) = fields.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.retain(|field, _| field == "name" || field == "namespace");
            }
        } else if resource_type.status_subresource {
            fields.remove("status");
        }
        if let Some(metadata) = fields.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
            metadata.remove("resourceVersion");
        }
    }
    let subresource = context.subresource.clone().unwrap_or_default();
    let Some(old) = store.get(key) else {
        if status_only {
            return Err(ApiError::not_found(
                &resource_type.group,
                &resource_type.resource,
                &key.name,
            ));
        }
        config["metadata"]["name"] = json!(key.name);
        let created = create_object(store, resource_type, namespace, config, context)?;
        let mut object = (*created).clone();
        let mut list = entries(&object);
        for entry in &mut list {
            if entry.manager == context.manager {
                entry.operation = "Apply".into();
            }
        }
        store_entries(&mut object, list);
        if context.dry_run {
            return Ok((201, Arc::new(object)));
        }
        return Ok((201, store.put(key.clone(), object)));
    };
    let config_set = field_set(&config, resource_type);
    // A real server compares the applied values with the defaults filled in (the merged
    // object is defaulted before it is compared with the live one), so a field the
    // configuration leaves to its default is no conflict.
    let mut compared = config.clone();
    if let Some(schema) = &resource_type.schema {
        super::validation::apply_schema_defaults(&mut compared, schema);
    }
    let mut list = entries(&old);
    let is_own = |entry: &Entry| {
        entry.manager == context.manager
            && entry.operation == "Apply"
            && entry.subresource == subresource
    };
    let mut conflicts: Vec<(String, String, FieldPath)> = Vec::new();
    for entry in list.iter().filter(|entry| !is_own(entry)) {
        for path in config_set.intersection(&entry.fields) {
            if value_at(&old, path) != value_at(&compared, path) && value_at(&old, path).is_some() {
                conflicts.push((
                    entry.manager.clone(),
                    entry.api_version.clone(),
                    path.clone(),
                ));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let listed: Vec<String> = conflicts
            .iter()
            .map(|(manager, _, path)| format!("conflict with {manager:?}: {}", render_path(path)))
            .collect();
        let mut error =
            ApiError::conflict_with(&resource_type.group, &resource_type.resource, &key.name, "");
        error.message = if conflicts.len() == 1 {
            format!("Apply failed with 1 conflict: {}", listed[0])
        } else {
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                listed.join("\n")
            )
        };
        error.causes = conflicts
            .iter()
            .map(|(manager, api_version, path)| Cause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with {manager:?} using {api_version}"),
                field: render_path(path),
            })
            .collect();
        return Err(error);
    }
    for entry in list.iter_mut().filter(|entry| !is_own(entry)) {
        entry.fields.retain(|path| {
            !conflicts
                .iter()
                .any(|(_, _, conflict)| is_within(path, conflict))
        });
    }
    let previous: FieldSet = list
        .iter()
        .filter(|entry| is_own(entry))
        .flat_map(|entry| entry.fields.clone())
        .collect();
    let mut new = (*old).clone();
    for path in previous.difference(&config_set) {
        let owned_elsewhere = list.iter().filter(|entry| !is_own(entry)).any(|entry| {
            entry
                .fields
                .iter()
                .any(|owned| is_within(owned, path) || is_within(path, owned))
        });
        if !owned_elsewhere {
            remove_at(&mut new, path);
        }
    }
    let rules = list_rules(resource_type);
    merge_applied(&mut new, &config, &mut Vec::new(), &*rules);
    list.retain(|entry| !is_own(entry));
    list.push(Entry {
        manager: context.manager.clone(),
        operation: "Apply".into(),
        subresource: subresource.clone(),
        api_version: resource_type.api_version(),
        time: now_timestamp(),
        fields: config_set,
    });
    store_entries(&mut new, list);
    let apply_context = WriteContext {
        record: false,
        ..context.clone()
    };
    let stored = update_object(store, resource_type, key, &old, new, &apply_context)?;
    Ok((200, stored))
}
