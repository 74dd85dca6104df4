//! The verbs: get, list, create, update, patch, delete, deletecollection,
//! and the status and scale subresources.

use std::sync::Arc;

use serde_json::{Value, json};

use super::apply;
use super::errors::{ApiError, Cause};
use super::events::{from_wire, to_wire};
use super::http::{ApiRequest, Shared};
use super::jsonpath;
use super::lifecycle::{self, DeleteOptions};
use super::limits;
use super::patch::{self, ListKind};
use super::registry::{Conversion, ResourceType};
use super::selectors::{FieldSelector, LabelSelector, supported_fields};
use super::store::{ObjectKey, Store, now_timestamp};
use super::table;
use super::validation;

pub type Reply = Result<(u16, Value), ApiError>;

/// How a response presents objects (plain, kubectl's Table, or metadata only).
#[derive(Debug, Clone, PartialEq)]
pub enum Presentation {
    Full,
    Table { include_object: String },
    Metadata,
}

impl Presentation {
    pub fn of(request: &ApiRequest) -> Presentation {
        let accept = request.accept();
        // The first acceptable media type wins, as in the real server.
        for media in accept.split(',') {
            let media = media.trim();
            if media.contains("as=Table") {
                return Presentation::Table {
                    include_object: request
                        .query
                        .get("includeObject")
                        .unwrap_or("Metadata")
                        .to_owned(),
                };
            }
            if media.contains("as=PartialObjectMetadata") {
                return Presentation::Metadata;
            }
            if media.starts_with("application/json") || media.starts_with("*/*") || media.is_empty()
            {
                return Presentation::Full;
            }
        }
        Presentation::Full
    }
}

pub fn storage_key(resource_type: &ResourceType, namespace: Option<&str>, name: &str) -> ObjectKey {
    ObjectKey::new(
        &resource_type.storage_group,
        &resource_type.storage_resource,
        if resource_type.namespaced {
            namespace.unwrap_or_default()
        } else {
            ""
        },
        name,
    )
}

fn target_key(request: &ApiRequest) -> ObjectKey {
    storage_key(
        &request.target.resource_type,
        request.target.namespace.as_deref(),
        request.target.name.as_deref().unwrap_or_default(),
    )
}

fn not_found(resource_type: &ResourceType, name: &str) -> ApiError {
    ApiError::not_found(&resource_type.group, &resource_type.resource, name)
}

/// PartialObjectMetadata of an object.
pub fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object["metadata"],
    })
}

pub fn get(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = &request.target.resource_type;
    let name = request.target.name.as_deref().unwrap_or_default();
    let stored = shared
        .read()
        .get(&target_key(request))
        .ok_or_else(|| not_found(resource_type, name))?;
    if request.target.subresource.as_deref() == Some("scale") {
        return Ok((200, scale_of(resource_type, &stored)?));
    }
    let object = to_wire(resource_type, &stored);
    Ok((200, present_one(request, resource_type, object)))
}

fn present_one(request: &ApiRequest, resource_type: &ResourceType, object: Value) -> Value {
    match Presentation::of(request) {
        Presentation::Full => object,
        Presentation::Metadata => partial_metadata(&object),
        Presentation::Table { include_object } => {
            let version = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            table::table(
                resource_type,
                &[object],
                &include_object,
                &version,
                None,
                true,
            )
        }
    }
}

/// Parsed list/watch filters.
pub struct Filters {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filters {
    pub fn of(request: &ApiRequest) -> Result<Filters, ApiError> {
        let resource_type = &request.target.resource_type;
        let labels = LabelSelector::parse(request.query.get("labelSelector").unwrap_or_default())
            .map_err(ApiError::bad_request)?;
        let supported = supported_fields(&resource_type.group, &resource_type.resource);
        let fields = FieldSelector::parse(
            request.query.get("fieldSelector").unwrap_or_default(),
            &supported,
        )
        .map_err(ApiError::bad_request)?;
        Ok(Filters { labels, fields })
    }

    /// Does the wire form of an object pass the filters?
    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    /// Does the wire form of a *stored* object pass the filters? Lists and watches ask
    /// this of every object of a type: a type stored as served differs on the wire only in
    /// `apiVersion` and `kind`, which no selector may name, so its stored form is filtered
    /// as it is, and only what passes is converted (a copy of every object for every
    /// list and watch was most of the emulator's time at a thousand members;
    /// kube-apiserver's watch cache, too, filters before it serializes).
    pub fn matches_stored(&self, resource_type: &ResourceType, stored: &Value) -> bool {
        let names_type = self
            .fields
            .requirements
            .iter()
            .any(|requirement| matches!(requirement.field.as_str(), "apiVersion" | "kind"));
        match resource_type.conversion {
            Conversion::Identity if !names_type => self.matches(stored),
            _ => self.matches(&to_wire(resource_type, stored)),
        }
    }
}

fn hex_encode(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

fn hex_decode(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(text.get(index..index + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

pub fn list(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = &request.target.resource_type;
    let filters = Filters::of(request)?;
    let limit: usize = match request.query.get("limit") {
        Some(limit) => limit
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {limit:?}")))?
            .max(0) as usize,
        None => 0,
    };
    let store = shared.read();
    let mut list_version = store.resource_version();
    let mut after: Option<(String, String)> = None;
    if let Some(token) = request
        .query
        .get("continue")
        .filter(|token| !token.is_empty())
    {
        let decoded = hex_decode(token)
            .and_then(|text| {
                let (version, rest) = text.split_once(':')?;
                let (namespace, name) = rest.split_once('/')?;
                Some((
                    version.parse::<u64>().ok()?,
                    namespace.to_owned(),
                    name.to_owned(),
                ))
            })
            .ok_or_else(|| ApiError::bad_request(format!("invalid continue token {token:?}")))?;
        if decoded.0 < store.compacted() {
            return Err(ApiError::gone(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ));
        }
        list_version = decoded.0;
        after = Some((decoded.1, decoded.2));
    }
    let namespace = request.target.namespace.as_deref();
    let mut items = Vec::new();
    let mut next: Option<String> = None;
    let mut remaining = 0u64;
    for (key, stored) in store.list(
        &resource_type.storage_group,
        &resource_type.storage_resource,
        namespace,
    ) {
        if let Some((after_namespace, after_name)) = &after
            && (key.namespace.as_str(), key.name.as_str())
                <= (after_namespace.as_str(), after_name.as_str())
        {
            continue;
        }
        if !filters.matches_stored(resource_type, stored) {
            continue;
        }
        if limit > 0 && items.len() >= limit {
            remaining += 1;
            if next.is_none()
                && let Some(last) = items.last()
            {
                let last: &Value = last;
                next = Some(hex_encode(&format!(
                    "{list_version}:{}/{}",
                    last["metadata"]["namespace"].as_str().unwrap_or_default(),
                    last["metadata"]["name"].as_str().unwrap_or_default()
                )));
            }
            continue;
        }
        items.push(to_wire(resource_type, stored));
    }
    drop(store);
    let version = list_version.to_string();
    let mut metadata = json!({"resourceVersion": version});
    if let Some(next) = &next {
        metadata["continue"] = json!(next);
        metadata["remainingItemCount"] = json!(remaining);
    }
    let body = match Presentation::of(request) {
        Presentation::Full => json!({
            "kind": format!("{}List", resource_type.kind),
            "apiVersion": resource_type.api_version(),
            "metadata": metadata,
            "items": items,
        }),
        Presentation::Metadata => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
        }),
        Presentation::Table { include_object } => table::table(
            resource_type,
            &items,
            &include_object,
            &version,
            next.as_deref(),
            true,
        ),
    };
    Ok((200, body))
}

/// Runs the ValidatingAdmissionPolicies on a write made on behalf of a user (writes the
/// server makes itself, e.g. garbage collection, carry no user and are not admitted).
fn admit(
    store: &Store,
    resource_type: &ResourceType,
    context: &WriteContext,
    operation: &'static str,
    key: &ObjectKey,
    object: Option<&Value>,
    old_object: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(user) = &context.user else {
        return Ok(());
    };
    let object = object.map(|object| to_wire(resource_type, object));
    let old_object = old_object.map(|object| to_wire(resource_type, object));
    let attributes = super::admission::Attributes {
        user,
        operation,
        group: &resource_type.group,
        version: &resource_type.version,
        resource: &resource_type.resource,
        kind: &resource_type.kind,
        subresource: context.subresource.as_deref(),
        namespace: (!key.namespace.is_empty()).then_some(key.namespace.as_str()),
        name: &key.name,
        object: object.as_ref(),
        old_object: old_object.as_ref(),
        dry_run: context.dry_run,
    };
    let warnings = super::admission::admit(store, &attributes)?;
    context
        .warnings
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .extend(warnings);
    Ok(())
}

/// Where a write comes from.
#[derive(Debug, Clone)]
pub struct WriteContext {
    pub manager: String,
    pub subresource: Option<String>,
    pub dry_run: bool,
    pub strict: bool,
    /// Record the write in managedFields (server-side apply records its own).
    pub record: bool,
    /// The user the write is made for (`None`: the server's own write).
    pub user: Option<super::identity::UserInfo>,
    /// Warnings for the response (`Warning` headers).
    pub warnings: Arc<std::sync::Mutex<Vec<String>>>,
}

impl WriteContext {
    pub fn of(request: &ApiRequest) -> WriteContext {
        WriteContext {
            manager: request.field_manager(),
            subresource: request.target.subresource.clone(),
            dry_run: request.dry_run(),
            strict: request.query.get("fieldValidation") == Some("Strict"),
            record: true,
            user: Some(request.user.clone()),
            warnings: request.warnings.clone(),
        }
    }
}

fn check_type_meta(resource_type: &ResourceType, object: &Value) -> Result<(), ApiError> {
    if let Some(kind) = object["kind"].as_str()
        && !kind.is_empty()
        && kind != resource_type.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind {kind:?} of the body does not match the resource {} (kind {:?})",
            resource_type.resource, resource_type.kind
        )));
    }
    if let Some(api_version) = object["apiVersion"].as_str()
        && !api_version.is_empty()
        && api_version != resource_type.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the apiVersion {api_version:?} of the body does not match the request path ({})",
            resource_type.api_version()
        )));
    }
    if !object.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    Ok(())
}

pub fn create(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = request.target.resource_type.clone();
    match request.target.subresource.as_deref() {
        Some("eviction") => return super::eviction::evict(shared, request),
        Some("binding") => return super::binding::bind(shared, request),
        Some(other) => {
            return Err(ApiError::method_not_allowed(format!(
                "create is not supported on {}/{other}",
                resource_type.resource
            )));
        }
        None => {}
    }
    if request.target.name.is_some() {
        return Err(ApiError::method_not_allowed(
            "POST to a named object is not supported; POST to the collection",
        ));
    }
    let body = request.json_body()?;
    check_type_meta(&resource_type, &body)?;
    let object = from_wire(&resource_type, &body);
    let context = WriteContext::of(request);
    let namespace = request.target.namespace.clone();
    let stored = shared.write(|store| {
        create_object(
            store,
            &resource_type,
            namespace.as_deref(),
            object,
            &context,
        )
    })?;
    Ok((201, to_wire(&resource_type, &stored)))
}

fn namespace_usable(store: &Store, namespace: &str) -> Result<(), ApiError> {
    let found = store
        .get(&ObjectKey::new("", "namespaces", "", namespace))
        .ok_or_else(|| ApiError::not_found("", "namespaces", namespace))?;
    if !found["metadata"]["deletionTimestamp"].is_null() {
        return Err(ApiError::forbidden(format!(
            "unable to create new content in namespace {namespace} because it is being terminated"
        )));
    }
    Ok(())
}

/// Type-specific defaults the real API server fills in on create.
fn apply_defaults(resource_type: &ResourceType, object: &mut Value) {
    // A spec that is not an object gets no defaults (indexing into it would
    // panic); validation names the problem.
    if !(object["spec"].is_object() || object["spec"].is_null()) {
        return;
    }
    match (
        resource_type.group.as_str(),
        resource_type.resource.as_str(),
    ) {
        // Every namespace carries its name as a label (since Kubernetes 1.21), so that
        // selectors (NetworkPolicy, admission policies) can pick namespaces by name.
        ("", "namespaces") => {
            let name = object["metadata"]["name"].clone();
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
        }
        ("", "pods") => {
            let spec = &mut object["spec"];
            for (field, value) in [
                ("restartPolicy", json!("Always")),
                ("terminationGracePeriodSeconds", json!(30)),
                ("dnsPolicy", json!("ClusterFirst")),
                ("schedulerName", json!("default-scheduler")),
            ] {
                if spec.get(field).is_none_or(Value::is_null) {
                    spec[field] = value;
                }
            }
        }
        ("apps", "statefulsets") => {
            let spec = &mut object["spec"];
            for (field, value) in [
                ("replicas", json!(1)),
                ("podManagementPolicy", json!("OrderedReady")),
                ("revisionHistoryLimit", json!(10)),
            ] {
                if spec.get(field).is_none_or(Value::is_null) {
                    spec[field] = value;
                }
            }
            // As upstream's SetDefaults_StatefulSet: a missing type becomes
            // RollingUpdate with an empty rollingUpdate; a present
            // rollingUpdate gets partition 0; an explicit RollingUpdate
            // without rollingUpdate stays without (kubectl's rollout status
            // tells the two apart).
            let strategy = &mut spec["updateStrategy"];
            if !strategy.is_object() {
                *strategy = json!({});
            }
            if strategy.get("type").is_none_or(Value::is_null) {
                strategy["type"] = json!("RollingUpdate");
                if strategy.get("rollingUpdate").is_none_or(Value::is_null) {
                    strategy["rollingUpdate"] = json!({});
                }
            }
            if strategy["type"] == "RollingUpdate"
                && strategy["rollingUpdate"].is_object()
                && strategy["rollingUpdate"]
                    .get("partition")
                    .is_none_or(Value::is_null)
            {
                strategy["rollingUpdate"]["partition"] = json!(0);
            }
        }
        ("apps", "deployments" | "replicasets") => {
            let spec = &mut object["spec"];
            if spec.get("replicas").is_none_or(Value::is_null) {
                spec["replicas"] = json!(1);
            }
        }
        _ => {}
    }
}

/// The status a fresh object starts with.
fn initial_status(resource_type: &ResourceType, object: &mut Value) {
    if !resource_type.status_subresource {
        return;
    }
    let fields = match object.as_object_mut() {
        Some(fields) => fields,
        None => return,
    };
    fields.remove("status");
    match (
        resource_type.group.as_str(),
        resource_type.resource.as_str(),
    ) {
        ("", "pods") => {
            fields.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": "BestEffort"}),
            );
        }
        ("", "namespaces") => {
            fields.insert("status".into(), json!({"phase": "Active"}));
        }
        _ => {}
    }
}

/// Validates and stores a new object; returns the stored form.
pub fn create_object(
    store: &mut Store,
    resource_type: &ResourceType,
    namespace: Option<&str>,
    mut object: Value,
    context: &WriteContext,
) -> Result<Arc<Value>, ApiError> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let namespace = if resource_type.namespaced {
        let requested = namespace.unwrap_or_default();
        let in_body = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !in_body.is_empty() && !requested.is_empty() && in_body != requested {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({in_body}) does not match the namespace sent on the request ({requested})"
            )));
        }
        let namespace = if requested.is_empty() {
            in_body
        } else {
            requested.to_owned()
        };
        if namespace.is_empty() {
            return Err(ApiError::bad_request(
                "a namespaced object needs a namespace",
            ));
        }
        namespace_usable(store, &namespace)?;
        object["metadata"]["namespace"] = json!(namespace);
        namespace
    } else {
        if let Some(fields) = object["metadata"].as_object_mut() {
            fields.remove("namespace");
        }
        String::new()
    };
    let mut name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if name.is_empty()
        && let Some(prefix) = object["metadata"]["generateName"].as_str()
        && !prefix.is_empty()
    {
        let mut candidate = format!("{prefix}{}", store.name_suffix());
        for _ in 0..8 {
            let key = storage_key(resource_type, Some(&namespace), &candidate);
            if store.get(&key).is_none() {
                break;
            }
            candidate = format!("{prefix}{}", store.name_suffix());
        }
        name = candidate;
        object["metadata"]["name"] = json!(name);
    }
    let mut causes = validation::validate_name(&name, resource_type.name_rule);
    causes.extend(validation::validate_labels(&object));
    causes.extend(limits::validate_sizes(resource_type, &object));
    if resource_type.resource == "customresourcedefinitions" {
        causes.extend(crd_problems(&object));
    }
    if is_endpoint_slice(resource_type) {
        causes.extend(super::endpoint_slices::validate(&object, None));
    }
    validate_custom_schema(
        resource_type,
        &mut object,
        None,
        &name,
        context.strict,
        &mut causes,
    )?;
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &resource_type.group,
            &resource_type.kind,
            &name,
            causes,
        ));
    }
    let key = storage_key(resource_type, Some(&namespace), &name);
    if store.get(&key).is_some() {
        return Err(ApiError::already_exists(
            &resource_type.group,
            &resource_type.resource,
            &name,
        ));
    }
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "generation",
            "managedFields",
        ] {
            metadata.remove(field);
        }
    }
    object["metadata"]["uid"] = json!(store.new_uid());
    object["metadata"]["creationTimestamp"] = json!(now_timestamp());
    if resource_type.generation {
        object["metadata"]["generation"] = json!(1);
    }
    if resource_type.resource == "namespaces" && resource_type.group.is_empty() {
        object["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        object["spec"]["finalizers"] = json!(["kubernetes"]);
    }
    initial_status(resource_type, &mut object);
    // The creator owns what it sent, not the server's defaults.
    apply::record_update(
        &mut object,
        None,
        &context.manager,
        resource_type,
        "Update",
        None,
    );
    apply_defaults(resource_type, &mut object);
    admit(
        store,
        resource_type,
        context,
        "CREATE",
        &key,
        Some(&object),
        None,
    )?;
    limits::check_stored_size(&object)?;
    if context.dry_run {
        return Ok(Arc::new(object));
    }
    let stored = store.put(key.clone(), object);
    if resource_type.resource == "customresourcedefinitions" {
        return Ok(lifecycle::crd_created(store, &key));
    }
    Ok(stored)
}

/// What a real server refuses in a CustomResourceDefinition, on create and update
/// alike: what makes it unservable, and CEL rules over their cost limits.
fn crd_problems(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Err(problems) = super::registry::crd_types(crd) {
        causes.extend(problems.into_iter().map(|(field, message)| Cause {
            reason: "FieldValueInvalid".into(),
            field,
            message,
        }));
    }
    causes.extend(super::crd_cost::check(crd));
    causes
}

fn validate_custom_schema(
    resource_type: &ResourceType,
    object: &mut Value,
    old: Option<&Value>,
    name: &str,
    strict: bool,
    causes: &mut Vec<Cause>,
) -> Result<(), ApiError> {
    let Some(schema) = &resource_type.schema else {
        return Ok(());
    };
    let report = validation::validate_custom(object, schema);
    if strict && !report.unknown_fields.is_empty() {
        let listed: Vec<String> = report
            .unknown_fields
            .iter()
            .map(|field| format!("unknown field \"{field}\""))
            .collect();
        return Err(ApiError::bad_request(format!(
            "{} in {} {name:?}: strict decoding error: {}",
            resource_type.kind,
            resource_type.api_version(),
            listed.join(", ")
        )));
    }
    causes.extend(report.causes);
    causes.extend(super::schema_rules::check(object, old, schema));
    Ok(())
}

fn without(object: &Value, fields: &[&str]) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        for field in fields {
            map.remove(*field);
        }
    }
    copy
}

/// Writes `new` over `old`: system fields kept, status/spec split by
/// subresource, validation, generation, optimistic concurrency, managed
/// fields; a write that changes nothing is not stored.
pub fn update_object(
    store: &mut Store,
    resource_type: &ResourceType,
    key: &ObjectKey,
    old: &Arc<Value>,
    mut new: Value,
    context: &WriteContext,
) -> Result<Arc<Value>, ApiError> {
    let name = key.name.clone();
    if !new.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    let body_name = new["metadata"]["name"].as_str().unwrap_or_default();
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if resource_type.namespaced {
        let body_namespace = new["metadata"]["namespace"].as_str().unwrap_or_default();
        if !body_namespace.is_empty() && body_namespace != key.namespace {
            return Err(ApiError::bad_request(format!(
                "the namespace of the object ({body_namespace}) does not match the namespace on the URL ({})",
                key.namespace
            )));
        }
    }
    let old_version = old["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    let new_version = new["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    if !new_version.is_empty() && new_version != old_version {
        return Err(ApiError::conflict(
            &resource_type.group,
            &resource_type.resource,
            &name,
        ));
    }
    let uid = new["metadata"]["uid"].as_str().unwrap_or_default();
    if !uid.is_empty() && Some(uid) != old["metadata"]["uid"].as_str() {
        return Err(ApiError::conflict_with(
            &resource_type.group,
            &resource_type.resource,
            &name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old["metadata"]["uid"].as_str().unwrap_or_default()
            ),
        ));
    }
    match context.subresource.as_deref() {
        Some("status") => {
            // Only the status stanza changes through /status (and the
            // managed fields a server-side apply computed for it).
            let status = new.get("status").cloned();
            let managed = new["metadata"].get("managedFields").cloned();
            new = (**old).clone();
            if !context.record
                && let Some(managed) = managed
            {
                new["metadata"]["managedFields"] = managed;
            }
            match status {
                Some(status) => new["status"] = status,
                None => {
                    if let Some(fields) = new.as_object_mut() {
                        fields.remove("status");
                    }
                }
            }
        }
        // pods/binding sets spec.nodeName and a status condition together.
        Some("binding") => {}
        _ if resource_type.status_subresource => match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Some(fields) = new.as_object_mut() {
                    fields.remove("status");
                }
            }
        },
        _ => {}
    }
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
        "name",
        "generation",
    ] {
        match old["metadata"].get(field) {
            Some(value) => new["metadata"][field] = value.clone(),
            None => {
                if let Some(metadata) = new["metadata"].as_object_mut() {
                    metadata.remove(field);
                }
            }
        }
    }
    if resource_type.resource == "namespaces" && resource_type.group.is_empty() {
        new["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
    }
    if !new["metadata"]["deletionTimestamp"].is_null() {
        let old_finalizers = old["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let added = new["metadata"]["finalizers"]
            .as_array()
            .map(|finalizers| {
                finalizers
                    .iter()
                    .any(|finalizer| !old_finalizers.contains(finalizer))
            })
            .unwrap_or(false);
        if added {
            return Err(ApiError::invalid(
                &resource_type.group,
                &resource_type.kind,
                &name,
                vec![Cause {
                    reason: "FieldValueForbidden".into(),
                    field: "metadata.finalizers".into(),
                    message:
                        "Forbidden: no new finalizers can be added if the object is being deleted"
                            .into(),
                }],
            ));
        }
    }
    let mut causes = validation::validate_labels(&new);
    causes.extend(limits::validate_sizes(resource_type, &new));
    if context.subresource.is_none()
        && resource_type.group.is_empty()
        && resource_type.resource == "pods"
    {
        // Compared with the server's defaults filled in, as a real server does.
        let mut defaulted = new.clone();
        apply_defaults(resource_type, &mut defaulted);
        causes.extend(super::binding::forbidden_spec_change(old, &defaulted));
    }
    if resource_type.resource == "customresourcedefinitions" {
        causes.extend(crd_problems(&new));
    }
    if is_endpoint_slice(resource_type) {
        causes.extend(super::endpoint_slices::validate(&new, Some(old)));
    }
    validate_custom_schema(
        resource_type,
        &mut new,
        Some(old),
        &name,
        context.strict,
        &mut causes,
    )?;
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &resource_type.group,
            &resource_type.kind,
            &name,
            causes,
        ));
    }
    if resource_type.generation {
        let ignored: &[&str] = if resource_type.status_subresource {
            &["metadata", "status", "apiVersion", "kind"]
        } else {
            &["metadata", "apiVersion", "kind"]
        };
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let spec_changed = without(old, ignored) != without(&new, ignored);
        new["metadata"]["generation"] = json!(if spec_changed {
            generation + 1
        } else {
            generation
        });
    }
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    if context.record {
        apply::record_update(
            &mut new,
            Some(old),
            &context.manager,
            resource_type,
            "Update",
            context.subresource.as_deref(),
        );
    }
    // Admission runs on every update request, a no-op included (as on a real server).
    admit(
        store,
        resource_type,
        context,
        "UPDATE",
        key,
        Some(&new),
        Some(old),
    )?;
    if without(&new, &["apiVersion", "kind"]) == without(old, &["apiVersion", "kind"])
        || unchanged_but_managed_time(old, &new)
    {
        return Ok(old.clone());
    }
    limits::check_stored_size(&new)?;
    if context.dry_run {
        return Ok(Arc::new(new));
    }
    let deleting = !new["metadata"]["deletionTimestamp"].is_null();
    let stored = store.put(key.clone(), new);
    if resource_type.resource == "customresourcedefinitions" {
        lifecycle::refresh_registry(store);
    }
    if deleting {
        lifecycle::settle(store);
        return Ok(store.get(key).unwrap_or(stored));
    }
    Ok(stored)
}

/// True when only managedFields timestamps differ (a no-op write).
fn unchanged_but_managed_time(old: &Value, new: &Value) -> bool {
    let strip = |object: &Value| {
        let mut copy = without(object, &["apiVersion", "kind"]);
        if let Some(entries) = copy["metadata"]["managedFields"].as_array_mut() {
            for entry in entries {
                if let Some(fields) = entry.as_object_mut() {
                    fields.remove("time");
                }
            }
        }
        copy
    };
    strip(old) == strip(new)
}

pub fn update(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = request.target.resource_type.clone();
    let body = request.json_body()?;
    let context = WriteContext::of(request);
    let key = target_key(request);
    if request.target.subresource.as_deref() == Some("scale") {
        return shared.write(|store| {
            write_scale(
                store,
                &resource_type,
                &key,
                ScaleWrite::Replace(body),
                &context,
            )
        });
    }
    if request.target.subresource.is_none() {
        check_type_meta(&resource_type, &body)?;
    }
    let object = from_wire(&resource_type, &body);
    let namespace = request.target.namespace.clone();
    shared.write(|store| {
        let Some(old) = store.get(&key) else {
            if resource_type.create_on_update && request.target.subresource.is_none() {
                let stored = create_object(
                    store,
                    &resource_type,
                    namespace.as_deref(),
                    object,
                    &context,
                )?;
                return Ok((201, to_wire(&resource_type, &stored)));
            }
            return Err(not_found(&resource_type, &key.name));
        };
        let stored = update_object(store, &resource_type, &key, &old, object, &context)?;
        Ok((200, to_wire(&resource_type, &stored)))
    })
}

/// The patch types of the `Content-Type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

fn patch_type(content_type: &str) -> Result<PatchType, ApiError> {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    match media {
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(PatchType::Apply),
        other => Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
        ))),
    }
}

/// The list rules for SMP and SSA on a type.
/// List rules as a boxed function of the field path.
pub type ListRules<'a> = Box<dyn Fn(&[String]) -> ListKind + 'a>;

fn is_endpoint_slice(resource_type: &ResourceType) -> bool {
    resource_type.group == "discovery.k8s.io" && resource_type.resource == "endpointslices"
}

pub fn list_rules(resource_type: &ResourceType) -> ListRules<'_> {
    match &resource_type.schema {
        Some(schema) => Box::new(move |path: &[String]| patch::schema_list_kind(schema, path)),
        None => Box::new(patch::builtin_list_kind),
    }
}

/// Applies a non-apply patch to a wire object.
pub fn apply_patch(
    resource_type: &ResourceType,
    kind: PatchType,
    target: &mut Value,
    body: &Value,
) -> Result<(), ApiError> {
    let invalid = |error: patch::PatchError| {
        ApiError::unprocessable(format!("the patch could not be applied: {}", error.0))
    };
    match kind {
        PatchType::Merge => {
            if !body.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            patch::merge_patch(target, body);
            Ok(())
        }
        PatchType::Json => patch::json_patch(target, body).map_err(invalid),
        PatchType::Strategic => {
            if resource_type.custom {
                return Err(ApiError::unsupported_media_type(
                    "strategic merge patch is not supported for custom resources; use a merge patch or server-side apply",
                ));
            }
            let rules = list_rules(resource_type);
            patch::strategic_merge_patch(target, body, &*rules).map_err(invalid)
        }
        PatchType::Apply => Err(ApiError::internal(
            "apply patches are handled by server-side apply",
        )),
    }
}

pub fn patch(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = request.target.resource_type.clone();
    let kind = patch_type(&request.content_type())?;
    let body = request.json_body()?;
    let context = WriteContext::of(request);
    let key = target_key(request);
    if request.target.subresource.as_deref() == Some("scale") {
        return shared.write(|store| {
            write_scale(
                store,
                &resource_type,
                &key,
                ScaleWrite::Patch(kind, body),
                &context,
            )
        });
    }
    let force = request.query.flag("force");
    let namespace = request.target.namespace.clone();
    shared.write(|store| {
        if kind == PatchType::Apply {
            if request.query.get("fieldManager").is_none_or(str::is_empty) {
                return Err(ApiError::bad_request(
                    "PATCH with apply-patch requires the fieldManager query parameter",
                ));
            }
            let (status, stored) = apply::server_side_apply(
                store,
                &resource_type,
                &key,
                namespace.as_deref(),
                &body,
                force,
                &context,
            )?;
            return Ok((status, to_wire(&resource_type, &stored)));
        }
        let old = store
            .get(&key)
            .ok_or_else(|| not_found(&resource_type, &key.name))?;
        let mut wire = to_wire(&resource_type, &old);
        apply_patch(&resource_type, kind, &mut wire, &body)?;
        let object = from_wire(&resource_type, &wire);
        let stored = update_object(store, &resource_type, &key, &old, object, &context)?;
        Ok((200, to_wire(&resource_type, &stored)))
    })
}

/// The autoscaling/v1 Scale of an object.
pub fn scale_of(resource_type: &ResourceType, object: &Value) -> Result<Value, ApiError> {
    let scale = resource_type.scale.as_ref().ok_or_else(|| {
        ApiError::not_found(&resource_type.group, &resource_type.resource, "scale")
    })?;
    let metadata = &object["metadata"];
    let selector = match &scale.label_selector_path {
        Some(path) => match jsonpath::first(object, path) {
            Some(Value::String(text)) => text,
            Some(selector @ Value::Object(_)) => LabelSelector::from_object(&selector)
                .map(|selector| selector.to_query())
                .unwrap_or_default(),
            _ => String::new(),
        },
        None => String::new(),
    };
    let mut status = json!({
        "replicas": jsonpath::first(object, &scale.status_replicas_path).and_then(|value| value.as_i64()).unwrap_or(0),
    });
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    let mut scale_metadata = json!({
        "name": metadata["name"],
        "uid": metadata["uid"],
        "resourceVersion": metadata["resourceVersion"],
        "creationTimestamp": metadata["creationTimestamp"],
    });
    if let Some(namespace) = metadata.get("namespace") {
        scale_metadata["namespace"] = namespace.clone();
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_metadata,
        "spec": {"replicas": jsonpath::first(object, &scale.spec_replicas_path).and_then(|value| value.as_i64()).unwrap_or(0)},
        "status": status,
    }))
}

pub enum ScaleWrite {
    Replace(Value),
    Patch(PatchType, Value),
}

fn write_scale(
    store: &mut Store,
    resource_type: &ResourceType,
    key: &ObjectKey,
    write: ScaleWrite,
    context: &WriteContext,
) -> Reply {
    let old = store
        .get(key)
        .ok_or_else(|| not_found(resource_type, &key.name))?;
    let current = scale_of(resource_type, &old)?;
    let requested = match write {
        ScaleWrite::Replace(body) => body,
        ScaleWrite::Patch(PatchType::Apply, body) => {
            let mut scale = current.clone();
            patch::merge_patch(&mut scale, &body);
            scale
        }
        ScaleWrite::Patch(kind, body) => {
            let mut scale = current.clone();
            apply_patch(resource_type, kind, &mut scale, &body)?;
            scale
        }
    };
    let version = requested["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    if !version.is_empty() && Some(version) != old["metadata"]["resourceVersion"].as_str() {
        return Err(ApiError::conflict(
            &resource_type.group,
            &resource_type.resource,
            &key.name,
        ));
    }
    let replicas = requested["spec"]["replicas"].as_i64().ok_or_else(|| {
        ApiError::invalid(
            "autoscaling",
            "Scale",
            &key.name,
            vec![Cause {
                reason: "FieldValueRequired".into(),
                field: "spec.replicas".into(),
                message: "Required value: the Scale needs spec.replicas".into(),
            }],
        )
    })?;
    if replicas < 0 {
        return Err(ApiError::invalid(
            "autoscaling",
            "Scale",
            &key.name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                field: "spec.replicas".into(),
                message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            }],
        ));
    }
    let mut new = (*old).clone();
    let path = resource_type
        .scale
        .as_ref()
        .map(|scale| scale.spec_replicas_path.clone())
        .unwrap_or_default();
    jsonpath::set(&mut new, &path, json!(replicas)).map_err(ApiError::internal)?;
    let scale_context = WriteContext {
        subresource: None,
        ..context.clone()
    };
    let stored = update_object(store, resource_type, key, &old, new, &scale_context)?;
    Ok((200, scale_of(resource_type, &stored)?))
}

pub fn delete(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = request.target.resource_type.clone();
    if request.target.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "delete is not supported on subresources",
        ));
    }
    let options = DeleteOptions::of(request)?;
    let key = target_key(request);
    let context = WriteContext::of(request);
    let (status, object) = shared.write(|store| {
        if let Some(old) = store.get(&key) {
            admit(
                store,
                &resource_type,
                &context,
                "DELETE",
                &key,
                None,
                Some(&old),
            )?;
        }
        lifecycle::delete(store, &resource_type, &key, &options)
    })?;
    Ok((status, to_wire(&resource_type, &object)))
}

pub fn delete_collection(shared: &Shared, request: &ApiRequest) -> Reply {
    let resource_type = request.target.resource_type.clone();
    let filters = Filters::of(request)?;
    let options = DeleteOptions::of(request)?;
    let namespace = request.target.namespace.clone();
    let deleted = shared.write(|store| {
        let keys: Vec<ObjectKey> = store
            .list(
                &resource_type.storage_group,
                &resource_type.storage_resource,
                namespace.as_deref(),
            )
            .filter(|(_, stored)| filters.matches_stored(&resource_type, stored))
            .map(|(key, _)| key.clone())
            .collect();
        let mut deleted = Vec::new();
        for key in keys {
            if let Ok((_, object)) = lifecycle::delete(store, &resource_type, &key, &options) {
                deleted.push(to_wire(&resource_type, &object));
            }
        }
        deleted
    });
    let version = shared.read().resource_version().to_string();
    Ok((
        200,
        json!({
            "kind": format!("{}List", resource_type.kind),
            "apiVersion": resource_type.api_version(),
            "metadata": {"resourceVersion": version},
            "items": deleted,
        }),
    ))
}
