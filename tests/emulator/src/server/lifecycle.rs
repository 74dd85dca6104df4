//! Deletion: grace periods, finalizers and deletionTimestamp, ownerReference
//! garbage collection (background, foreground, orphan), namespace and CRD
//! cleanup. Collection runs synchronously after each deletion, so dependents
//! are gone (or marked) by the time the DELETE returns.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::errors::ApiError;
use super::http::ApiRequest;
use super::registry::ResourceType;
use super::store::{ObjectKey, Store, now_timestamp};

pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// How dependents are treated when their owner is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// The parts of metav1 DeleteOptions the emulator honours.
#[derive(Debug, Clone)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_version: Option<String>,
    pub dry_run: bool,
}

impl Default for DeleteOptions {
    fn default() -> Self {
        DeleteOptions {
            grace_period_seconds: None,
            propagation: Propagation::Background,
            precondition_uid: None,
            precondition_version: None,
            dry_run: false,
        }
    }
}

fn parse_propagation(text: &str) -> Result<Propagation, ApiError> {
    match text {
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        "Orphan" => Ok(Propagation::Orphan),
        other => Err(ApiError::bad_request(format!(
            "invalid propagationPolicy {other:?}: supported values are Background, Foreground, Orphan"
        ))),
    }
}

impl DeleteOptions {
    /// From the body (a DeleteOptions object) and the query parameters.
    pub fn of(request: &ApiRequest) -> Result<DeleteOptions, ApiError> {
        let mut options = DeleteOptions {
            dry_run: request.dry_run(),
            ..DeleteOptions::default()
        };
        if !request.body.is_empty() {
            let body = request.json_body()?;
            if let Some(grace) = body["gracePeriodSeconds"].as_i64() {
                options.grace_period_seconds = Some(grace);
            }
            if let Some(policy) = body["propagationPolicy"].as_str() {
                options.propagation = parse_propagation(policy)?;
            }
            if body["orphanDependents"].as_bool() == Some(true) {
                options.propagation = Propagation::Orphan;
            }
            options.precondition_uid = body["preconditions"]["uid"].as_str().map(str::to_owned);
            options.precondition_version = body["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_owned);
            if body["dryRun"]
                .as_array()
                .is_some_and(|values| values.iter().any(|value| value == "All"))
            {
                options.dry_run = true;
            }
        }
        if let Some(grace) = request.query.get("gracePeriodSeconds") {
            options.grace_period_seconds = Some(grace.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid gracePeriodSeconds {grace:?}"))
            })?);
        }
        if let Some(policy) = request.query.get("propagationPolicy") {
            options.propagation = parse_propagation(policy)?;
        }
        if request.query.flag("orphanDependents") {
            options.propagation = Propagation::Orphan;
        }
        Ok(options)
    }
}

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn uid_of(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn owner_uids(object: &Value) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .map(|owners| {
            owners
                .iter()
                .filter_map(|owner| owner["uid"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn is_pod(key: &ObjectKey) -> bool {
    key.group.is_empty() && key.resource == "pods"
}

/// A pod that waits for its kubelet to confirm termination.
fn awaits_kubelet(key: &ObjectKey, object: &Value) -> bool {
    is_pod(key)
        && object["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0)
            > 0
}

/// Deletes one object; returns the HTTP status (200 gone, 202 pending) and
/// the object's last state.
pub fn delete(
    store: &mut Store,
    resource_type: &ResourceType,
    key: &ObjectKey,
    options: &DeleteOptions,
) -> Result<(u16, Arc<Value>), ApiError> {
    let current = store.get(key).ok_or_else(|| {
        ApiError::not_found(&resource_type.group, &resource_type.resource, &key.name)
    })?;
    if let Some(uid) = &options.precondition_uid
        && *uid != uid_of(&current)
    {
        return Err(ApiError::conflict_with(
            &resource_type.group,
            &resource_type.resource,
            &key.name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                uid_of(&current)
            ),
        ));
    }
    if let Some(version) = &options.precondition_version
        && Some(version.as_str()) != current["metadata"]["resourceVersion"].as_str()
    {
        return Err(ApiError::conflict_with(
            &resource_type.group,
            &resource_type.resource,
            &key.name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {version}, ResourceVersion in object meta: {}",
                current["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
            ),
        ));
    }
    if options.dry_run {
        return Ok((200, current));
    }
    let result = delete_unchecked(store, key, options);
    settle(store);
    Ok(match store.get(key) {
        Some(still_there) => (202, still_there),
        None => (200, result),
    })
}

fn grace_for(key: &ObjectKey, object: &Value, requested: Option<i64>) -> i64 {
    if !is_pod(key) {
        return 0;
    }
    let phase = object["status"]["phase"].as_str().unwrap_or_default();
    let scheduled = object["spec"]["nodeName"]
        .as_str()
        .is_some_and(|node| !node.is_empty());
    if !scheduled || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    requested
        .or_else(|| object["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
        .max(0)
}

/// Marks or removes an object without preconditions; collection is left to
/// [`settle`].
fn delete_unchecked(store: &mut Store, key: &ObjectKey, options: &DeleteOptions) -> Arc<Value> {
    let Some(current) = store.get(key) else {
        return Arc::new(Value::Null);
    };
    let mut object = (*current).clone();
    let grace = grace_for(key, &object, options.grace_period_seconds);
    if options.propagation == Propagation::Orphan {
        orphan_dependents(store, &uid_of(&object));
    }
    let mut finalizer_list = finalizers(&object);
    let namespace = key.group.is_empty() && key.resource == "namespaces";
    let crd = key.group == "apiextensions.k8s.io" && key.resource == "customresourcedefinitions";
    if options.propagation == Propagation::Foreground
        && object["metadata"]["deletionTimestamp"].is_null()
        && !finalizer_list
            .iter()
            .any(|finalizer| finalizer == FOREGROUND_FINALIZER)
    {
        finalizer_list.push(FOREGROUND_FINALIZER.to_owned());
        object["metadata"]["finalizers"] = json!(finalizer_list);
    }
    let already_deleting = !object["metadata"]["deletionTimestamp"].is_null();
    if already_deleting {
        // A second delete may only shorten a pod's grace period.
        let current_grace = object["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        if is_pod(key) && grace < current_grace {
            object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            if grace == 0 && finalizer_list.is_empty() {
                return store.remove(key).unwrap_or(current);
            }
            return store.put(key.clone(), object);
        }
        if object != *current {
            return store.put(key.clone(), object);
        }
        return current;
    }
    if grace > 0 || !finalizer_list.is_empty() || namespace || crd {
        let deadline = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace);
        object["metadata"]["deletionTimestamp"] =
            json!(deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        if namespace {
            object["status"]["phase"] = json!("Terminating");
        }
        let generation = object["metadata"]["generation"].as_i64();
        if let Some(generation) = generation {
            object["metadata"]["generation"] = json!(generation + 1);
        }
        return store.put(key.clone(), object);
    }
    let removed = store.remove(key).unwrap_or(current);
    if crd {
        refresh_registry(store);
    }
    removed
}

fn orphan_dependents(store: &mut Store, owner_uid: &str) {
    let dependents: Vec<(ObjectKey, Arc<Value>)> = store
        .all()
        .filter(|(_, object)| owner_uids(object).iter().any(|uid| uid == owner_uid))
        .map(|(key, object)| (key.clone(), object.clone()))
        .collect();
    for (key, object) in dependents {
        let mut updated = (*object).clone();
        if let Some(owners) = updated["metadata"]["ownerReferences"].as_array_mut() {
            owners.retain(|owner| owner["uid"].as_str() != Some(owner_uid));
            if owners.is_empty()
                && let Some(metadata) = updated["metadata"].as_object_mut()
            {
                metadata.remove("ownerReferences");
            }
        }
        store.put(key, updated);
    }
}

/// Runs garbage collection, foreground completion, finalizer-free removal,
/// and namespace/CRD cleanup until nothing changes.
pub fn settle(store: &mut Store) {
    for _ in 0..1000 {
        if !settle_once(store) {
            return;
        }
    }
    tracing::warn!("garbage collection did not settle after 1000 rounds");
}

fn settle_once(store: &mut Store) -> bool {
    let live_uids: BTreeSet<String> = store.all().map(|(_, object)| uid_of(object)).collect();
    let snapshot: Vec<(ObjectKey, Arc<Value>)> = store
        .all()
        .map(|(key, object)| (key.clone(), object.clone()))
        .collect();
    let mut changed = false;
    let background = DeleteOptions::default();
    // Dependents' owner references, by uid, and what they point to.
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    for (_, object) in &snapshot {
        referenced.extend(owner_uids(object));
    }
    for (key, object) in &snapshot {
        let deleting = !object["metadata"]["deletionTimestamp"].is_null();
        let finalizer_list = finalizers(object);
        let uid = uid_of(object);
        // Foreground owners: delete dependents, then drop the finalizer.
        if deleting
            && finalizer_list
                .iter()
                .any(|finalizer| finalizer == FOREGROUND_FINALIZER)
        {
            if referenced.contains(&uid) {
                for (dependent_key, dependent) in &snapshot {
                    if owner_uids(dependent).contains(&uid)
                        && dependent["metadata"]["deletionTimestamp"].is_null()
                    {
                        delete_unchecked(store, dependent_key, &background);
                        changed = true;
                    }
                }
            } else {
                let mut updated = (**object).clone();
                updated["metadata"]["finalizers"] = json!(
                    finalizer_list
                        .iter()
                        .filter(|finalizer| *finalizer != FOREGROUND_FINALIZER)
                        .collect::<Vec<_>>()
                );
                store.put(key.clone(), updated);
                changed = true;
            }
            continue;
        }
        // Namespaces: delete the content, then the namespace.
        if deleting && key.group.is_empty() && key.resource == "namespaces" {
            let content: Vec<&(ObjectKey, Arc<Value>)> = snapshot
                .iter()
                .filter(|(content_key, _)| {
                    content_key.namespace == key.name && !content_key.namespace.is_empty()
                })
                .collect();
            if content.is_empty() {
                store.remove(key);
                changed = true;
            } else {
                for (content_key, content_object) in content {
                    if content_object["metadata"]["deletionTimestamp"].is_null() {
                        delete_unchecked(store, content_key, &background);
                        changed = true;
                    }
                }
            }
            continue;
        }
        // CRDs: delete the instances, then the definition.
        if deleting
            && key.group == "apiextensions.k8s.io"
            && key.resource == "customresourcedefinitions"
        {
            let group = object["spec"]["group"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let plural = object["spec"]["names"]["plural"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let instances: Vec<&(ObjectKey, Arc<Value>)> = snapshot
                .iter()
                .filter(|(instance_key, _)| {
                    instance_key.group == group && instance_key.resource == plural
                })
                .collect();
            if instances.is_empty() && finalizer_list.is_empty() {
                store.remove(key);
                refresh_registry(store);
                changed = true;
            } else {
                for (instance_key, instance) in instances {
                    if instance["metadata"]["deletionTimestamp"].is_null() {
                        delete_unchecked(store, instance_key, &background);
                        changed = true;
                    }
                }
            }
            continue;
        }
        if deleting && finalizer_list.is_empty() && !awaits_kubelet(key, object) {
            store.remove(key);
            changed = true;
            continue;
        }
        // Background collection: every owner is gone.
        let owners = owner_uids(object);
        if !owners.is_empty() && !deleting {
            let gone: Vec<&String> = owners
                .iter()
                .filter(|uid| !live_uids.contains(*uid))
                .collect();
            if gone.len() == owners.len() {
                delete_unchecked(store, key, &background);
                changed = true;
            } else if !gone.is_empty() {
                let mut updated = (**object).clone();
                if let Some(references) = updated["metadata"]["ownerReferences"].as_array_mut() {
                    references.retain(|owner| {
                        owner["uid"]
                            .as_str()
                            .is_none_or(|uid| live_uids.contains(uid))
                    });
                }
                store.put(key.clone(), updated);
                changed = true;
            }
        }
    }
    changed
}

/// Rebuilds the custom types from the stored CRDs.
pub fn refresh_registry(store: &mut Store) {
    let crds: Vec<Value> = store
        .list("apiextensions.k8s.io", "customresourcedefinitions", None)
        .filter(|(key, _)| !store.unpublished_crds.contains_key(&key.name))
        .map(|(_, crd)| (**crd).clone())
        .collect();
    store.registry.rebuild_custom(crds.iter());
}

/// After a CRD is stored: serve its types and mark it Established, at once or,
/// with a publication delay, only when [`publish_due_crds`] runs after it (a
/// real server publishes a new CRD moments after the create: Established, then
/// discovery and the OpenAPI document, each a little later).
pub fn crd_created(store: &mut Store, key: &ObjectKey) -> Arc<Value> {
    if !store.crd_publication_delay.is_zero() {
        let due = std::time::Instant::now() + store.crd_publication_delay;
        store.unpublished_crds.insert(key.name.clone(), due);
        refresh_registry(store);
        return store.get(key).unwrap_or_else(|| Arc::new(Value::Null));
    }
    refresh_registry(store);
    establish(store, key)
}

/// Publishes every CRD whose publication delay has passed; returns whether any
/// remain unpublished.
pub fn publish_due_crds(store: &mut Store) -> bool {
    let now = std::time::Instant::now();
    let due: Vec<String> = store
        .unpublished_crds
        .iter()
        .filter(|(_, when)| **when <= now)
        .map(|(name, _)| name.clone())
        .collect();
    for name in &due {
        store.unpublished_crds.remove(name);
    }
    if !due.is_empty() {
        refresh_registry(store);
        for name in due {
            let key = ObjectKey::new(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "",
                &name,
            );
            if store.get(&key).is_some() {
                establish(store, &key);
            }
        }
    }
    !store.unpublished_crds.is_empty()
}

/// Marks a served CRD NamesAccepted and Established.
fn establish(store: &mut Store, key: &ObjectKey) -> Arc<Value> {
    let Some(current) = store.get(key) else {
        return Arc::new(Value::Null);
    };
    let mut object = (*current).clone();
    let now = now_timestamp();
    let storage: Vec<Value> = object["spec"]["versions"]
        .as_array()
        .map(|versions| {
            versions
                .iter()
                .filter(|version| version["storage"].as_bool() == Some(true))
                .map(|version| version["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    object["status"] = json!({
        "acceptedNames": object["spec"]["names"],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": storage,
    });
    store.put(key.clone(), object)
}
