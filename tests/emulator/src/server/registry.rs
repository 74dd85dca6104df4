//! The resource types the server serves: the built-in ones and every custom
//! resource the stored CustomResourceDefinitions define.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// How objects of a type are translated between their wire form and storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Stored as sent (only `apiVersion` is rewritten for other versions).
    Identity,
    /// events.k8s.io/v1 Event, stored as a core/v1 Event.
    EventsV1,
}

/// How metadata.name is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    Subdomain,
    Label,
    PathSegment,
    /// `<plural>.<group>` for CustomResourceDefinitions.
    CrdName,
}

/// The scale subresource of a type (`autoscaling/v1` Scale).
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleSpec {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

/// A printer column (`additionalPrinterColumns` of a CRD).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub column_type: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// One served group/version/resource.
#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status_subresource: bool,
    pub scale: Option<ScaleSpec>,
    pub eviction: bool,
    /// metadata.generation is kept and bumped on spec changes.
    pub generation: bool,
    /// PUT on a missing object creates it.
    pub create_on_update: bool,
    pub name_rule: NameRule,
    pub conversion: Conversion,
    /// Storage (group, resource): two served types may share one storage.
    pub storage_group: String,
    pub storage_resource: String,
    /// The CRD's openAPIV3Schema for this version.
    pub schema: Option<Value>,
    pub columns: Vec<PrinterColumn>,
    /// Served from a CRD (no strategic merge patch).
    pub custom: bool,
    /// A review (SubjectAccessReview, TokenReview, …): only created, never stored;
    /// the response is computed.
    pub review: bool,
    /// ServiceAccounts: the `token` subresource (TokenRequest).
    pub token_request: bool,
}

impl ResourceType {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The verbs listed in discovery.
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.review {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    fn builtin(group: &str, version: &str, resource: &str, kind: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
            singular: kind.to_lowercase(),
            kind: kind.to_owned(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            status_subresource: false,
            scale: None,
            eviction: false,
            generation: false,
            create_on_update: false,
            name_rule: NameRule::Subdomain,
            conversion: Conversion::Identity,
            storage_group: group.to_owned(),
            storage_resource: resource.to_owned(),
            schema: None,
            columns: Vec::new(),
            custom: false,
            review: false,
            token_request: false,
        }
    }

    fn review(group: &str, resource: &str, kind: &str, namespaced: bool) -> Self {
        let mut review = ResourceType::builtin(group, "v1", resource, kind, namespaced);
        review.review = true;
        review
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|name| (*name).to_owned()).collect();
        self
    }

    fn categories(mut self, names: &[&str]) -> Self {
        self.categories = names.iter().map(|name| (*name).to_owned()).collect();
        self
    }

    fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    fn with_generation(mut self) -> Self {
        self.generation = true;
        self
    }

    fn replicas_scale(mut self) -> Self {
        self.scale = Some(ScaleSpec {
            spec_replicas_path: ".spec.replicas".into(),
            status_replicas_path: ".status.replicas".into(),
            label_selector_path: Some(".spec.selector".into()),
        });
        self
    }
}

/// The built-in types.
pub fn builtin_types() -> Vec<ResourceType> {
    let mut namespaces = ResourceType::builtin("", "v1", "namespaces", "Namespace", false)
        .short(&["ns"])
        .with_status();
    namespaces.name_rule = NameRule::Label;
    let mut pods = ResourceType::builtin("", "v1", "pods", "Pod", true)
        .short(&["po"])
        .categories(&["all"])
        .with_status()
        .with_generation();
    pods.eviction = true;
    let mut services = ResourceType::builtin("", "v1", "services", "Service", true)
        .short(&["svc"])
        .categories(&["all"])
        .with_status();
    services.name_rule = NameRule::Label;
    let mut core_events = ResourceType::builtin("", "v1", "events", "Event", true).short(&["ev"]);
    core_events.name_rule = NameRule::PathSegment;
    core_events.create_on_update = true;
    let mut events_v1 =
        ResourceType::builtin("events.k8s.io", "v1", "events", "Event", true).short(&["ev"]);
    events_v1.name_rule = NameRule::PathSegment;
    events_v1.create_on_update = true;
    events_v1.conversion = Conversion::EventsV1;
    events_v1.storage_group = String::new();
    let mut leases = ResourceType::builtin("coordination.k8s.io", "v1", "leases", "Lease", true);
    leases.create_on_update = true;
    let mut crds = ResourceType::builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
    )
    .short(&["crd", "crds"])
    .categories(&["api-extensions"])
    .with_status()
    .with_generation();
    crds.name_rule = NameRule::CrdName;
    vec![
        namespaces,
        pods,
        ResourceType::builtin("", "v1", "configmaps", "ConfigMap", true).short(&["cm"]),
        ResourceType::builtin("", "v1", "nodes", "Node", false)
            .short(&["no"])
            .with_status(),
        ResourceType::builtin("", "v1", "secrets", "Secret", true),
        {
            let mut accounts =
                ResourceType::builtin("", "v1", "serviceaccounts", "ServiceAccount", true)
                    .short(&["sa"]);
            accounts.token_request = true;
            accounts
        },
        services,
        ResourceType::builtin(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
        ),
        core_events,
        ResourceType::builtin("apps", "v1", "statefulsets", "StatefulSet", true)
            .short(&["sts"])
            .categories(&["all"])
            .with_status()
            .with_generation()
            .replicas_scale(),
        ResourceType::builtin("apps", "v1", "deployments", "Deployment", true)
            .short(&["deploy"])
            .categories(&["all"])
            .with_status()
            .with_generation()
            .replicas_scale(),
        ResourceType::builtin("apps", "v1", "replicasets", "ReplicaSet", true)
            .short(&["rs"])
            .categories(&["all"])
            .with_status()
            .with_generation()
            .replicas_scale(),
        ResourceType::builtin(
            "apps",
            "v1",
            "controllerrevisions",
            "ControllerRevision",
            true,
        ),
        events_v1,
        leases,
        ResourceType::builtin(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
        )
        .short(&["pdb"])
        .with_status()
        .with_generation(),
        ResourceType::review(
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
        ),
        ResourceType::review(
            "authorization.k8s.io",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
        ),
        ResourceType::review(
            "authorization.k8s.io",
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            true,
        ),
        ResourceType::review(
            "authorization.k8s.io",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            false,
        ),
        ResourceType::review(
            "authentication.k8s.io",
            "tokenreviews",
            "TokenReview",
            false,
        ),
        ResourceType::review(
            "authentication.k8s.io",
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
        ),
        ResourceType::builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            false,
        )
        .with_status()
        .with_generation(),
        ResourceType::builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            false,
        )
        .with_generation(),
        // RBAC objects are stored, served, and enforced (server/rbac.rs).
        ResourceType::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
        ),
        ResourceType::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
        ),
        ResourceType::builtin("rbac.authorization.k8s.io", "v1", "roles", "Role", true),
        ResourceType::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
        ),
        crds,
    ]
}

/// Problems that make a CRD unservable (reported as 422 on create/update).
pub fn crd_types(crd: &Value) -> Result<Vec<ResourceType>, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_owned();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default().to_owned();
    let kind = names["kind"].as_str().unwrap_or_default().to_owned();
    let scope = spec["scope"].as_str().unwrap_or_default();
    if group.is_empty() {
        problems.push(("spec.group".into(), "Required value".into()));
    }
    if plural.is_empty() {
        problems.push(("spec.names.plural".into(), "Required value".into()));
    }
    if kind.is_empty() {
        problems.push(("spec.names.kind".into(), "Required value".into()));
    }
    if scope != "Namespaced" && scope != "Cluster" {
        problems.push((
            "spec.scope".into(),
            format!(
                "Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        ));
    }
    let expected_name = format!("{plural}.{group}");
    if crd["metadata"]["name"].as_str() != Some(expected_name.as_str()) {
        problems.push((
            "metadata.name".into(),
            format!(
                "Invalid value: {:?}: must be spec.names.plural+\".\"+spec.group",
                crd["metadata"]["name"].as_str().unwrap_or_default()
            ),
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        problems.push((
            "spec.versions".into(),
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    let storage_count = versions
        .iter()
        .filter(|version| version["storage"].as_bool() == Some(true))
        .count();
    if !versions.is_empty() && storage_count != 1 {
        problems.push((
            "spec.versions".into(),
            format!("Invalid value: must have exactly one version marked as storage version (found {storage_count})"),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut types = Vec::new();
    for version in versions {
        if version["served"].as_bool() == Some(false) {
            continue;
        }
        let name = version["name"].as_str().unwrap_or_default().to_owned();
        let subresources = &version["subresources"];
        let scale = subresources.get("scale").and_then(|scale| {
            Some(ScaleSpec {
                spec_replicas_path: scale["specReplicasPath"].as_str()?.to_owned(),
                status_replicas_path: scale["statusReplicasPath"].as_str()?.to_owned(),
                label_selector_path: scale["labelSelectorPath"].as_str().map(str::to_owned),
            })
        });
        let columns = version["additionalPrinterColumns"]
            .as_array()
            .map(|columns| {
                columns
                    .iter()
                    .map(|column| PrinterColumn {
                        name: column["name"].as_str().unwrap_or_default().to_owned(),
                        column_type: column["type"].as_str().unwrap_or("string").to_owned(),
                        format: column["format"].as_str().unwrap_or_default().to_owned(),
                        description: column["description"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        priority: column["priority"].as_i64().unwrap_or(0),
                        json_path: column["jsonPath"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        types.push(ResourceType {
            group: group.clone(),
            version: name,
            resource: plural.clone(),
            singular: names["singular"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| kind.to_lowercase()),
            kind: kind.clone(),
            namespaced: scope == "Namespaced",
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            status_subresource: subresources.get("status").is_some(),
            scale,
            eviction: false,
            generation: true,
            create_on_update: false,
            name_rule: NameRule::Subdomain,
            conversion: Conversion::Identity,
            storage_group: group.clone(),
            storage_resource: plural.clone(),
            schema: version["schema"].get("openAPIV3Schema").cloned(),
            columns,
            custom: true,
            review: false,
            token_request: false,
        });
    }
    Ok(types)
}

/// Every served type, looked up by (group, version, resource).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    types: BTreeMap<(String, String, String), Arc<ResourceType>>,
}

impl Registry {
    pub fn new(builtins: Vec<ResourceType>) -> Registry {
        let mut registry = Registry::default();
        for resource_type in builtins {
            registry.insert(resource_type);
        }
        registry
    }

    pub fn insert(&mut self, resource_type: ResourceType) {
        self.types.insert(
            (
                resource_type.group.clone(),
                resource_type.version.clone(),
                resource_type.resource.clone(),
            ),
            Arc::new(resource_type),
        );
    }

    /// Removes every custom type and adds the ones the CRDs define.
    pub fn rebuild_custom<'a>(&mut self, crds: impl Iterator<Item = &'a Value>) {
        self.types.retain(|_, resource_type| !resource_type.custom);
        for crd in crds {
            if let Ok(types) = crd_types(crd) {
                for resource_type in types {
                    // A CRD never shadows a built-in type.
                    let key = (
                        resource_type.group.clone(),
                        resource_type.version.clone(),
                        resource_type.resource.clone(),
                    );
                    self.types
                        .entry(key)
                        .or_insert_with(|| Arc::new(resource_type));
                }
            }
        }
    }

    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&(group.to_owned(), version.to_owned(), resource.to_owned()))
            .cloned()
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }

    /// Group name → versions served (sorted, preferred first).
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for resource_type in self.types.values() {
            let versions = groups.entry(resource_type.group.clone()).or_default();
            if !versions.contains(&resource_type.version) {
                versions.push(resource_type.version.clone());
            }
        }
        for versions in groups.values_mut() {
            versions.sort_by_key(|version| std::cmp::Reverse(version_priority(version)));
        }
        groups
    }
}

/// Kubernetes version ordering: GA > beta > alpha, higher numbers first.
fn version_priority(version: &str) -> (u8, u64, u64) {
    let Some(rest) = version.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        (3, major, 0)
    } else if let Some(beta) = tail.strip_prefix("beta") {
        (2, major, beta.parse().unwrap_or(0))
    } else if let Some(alpha) = tail.strip_prefix("alpha") {
        (1, major, alpha.parse().unwrap_or(0))
    } else {
        (0, major, 0)
    }
}
