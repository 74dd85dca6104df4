//! Authorization with the RBAC objects stored in the server, as a real API
//! server's RBAC authorizer decides: Roles and ClusterRoles (aggregated ones
//! included), bound to users, groups and ServiceAccounts; verbs, API groups,
//! resources with subresources, resourceNames and non-resource URLs. The
//! bootstrap roles a cluster starts with (`cluster-admin`, `view`, `edit`,
//! `admin`, discovery, self reviews) are stored at start.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::errors::ApiError;
use super::identity::UserInfo;
use super::store::{ObjectKey, Store};

const RBAC: &str = "rbac.authorization.k8s.io";

/// What a request asks to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// On a resource.
    Resource {
        /// API group (`""` for the core group).
        group: String,
        /// Plural resource.
        resource: String,
        /// Subresource, e.g. `status`, `eviction`.
        subresource: Option<String>,
        /// Namespace (`None`: cluster scope or all namespaces).
        namespace: Option<String>,
        /// Object name, when the request names one.
        name: Option<String>,
    },
    /// On a non-resource URL path.
    Path(String),
}

/// One authorization question.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    /// Who asks.
    pub user: &'a UserInfo,
    /// The verb (`get`, `list`, …; for paths the lower-case HTTP method).
    pub verb: &'a str,
    /// On what.
    pub action: Action,
}

/// Whether `attributes` are allowed, by a binding of the user (or by `system:masters`).
pub fn allowed(store: &Store, attributes: &Attributes<'_>) -> bool {
    if attributes
        .user
        .groups
        .iter()
        .any(|group| group == "system:masters")
    {
        return true;
    }
    let namespace = match &attributes.action {
        Action::Resource { namespace, .. } => namespace.as_deref(),
        Action::Path(_) => None,
    };
    rules_of(store, attributes.user, namespace)
        .iter()
        .any(|rule| rule_allows(rule, attributes))
}

/// The 403 a real server answers when `attributes` are not allowed.
pub fn forbidden(attributes: &Attributes<'_>) -> ApiError {
    let user = &attributes.user.username;
    let verb = attributes.verb;
    let (qualified, name, detail) = match &attributes.action {
        Action::Path(path) => (
            String::new(),
            None,
            format!("User {user:?} cannot {verb} path {path:?}"),
        ),
        Action::Resource {
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let full = match subresource {
                Some(subresource) => format!("{resource}/{subresource}"),
                None => resource.clone(),
            };
            let scope = match namespace {
                Some(namespace) => format!("in the namespace {namespace:?}"),
                None => "at the cluster scope".to_owned(),
            };
            (
                if group.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}.{group}")
                },
                name.clone(),
                format!(
                    "User {user:?} cannot {verb} resource {full:?} in API group {group:?} {scope}"
                ),
            )
        }
    };
    let subject = match (&name, qualified.is_empty()) {
        (_, true) => "forbidden".to_owned(),
        (Some(name), false) => format!("{qualified} {name:?} is forbidden"),
        (None, false) => format!("{qualified} is forbidden"),
    };
    let mut error = ApiError::forbidden(format!("{subject}: {detail}"));
    if let Action::Resource {
        group, resource, ..
    } = &attributes.action
    {
        error = error.with_name(group, resource, name.as_deref().unwrap_or_default());
    }
    error
}

/// Every rule that applies to `user` in `namespace` (cluster-wide rules included).
pub fn rules_of(store: &Store, user: &UserInfo, namespace: Option<&str>) -> Vec<Value> {
    let mut rules = Vec::new();
    for (_, binding) in store.list(RBAC, "clusterrolebindings", None) {
        if binds(binding, user) {
            rules.extend(role_rules(store, &binding["roleRef"], None));
        }
    }
    if let Some(namespace) = namespace {
        for (_, binding) in store.list(RBAC, "rolebindings", Some(namespace)) {
            if binds(binding, user) {
                rules.extend(role_rules(store, &binding["roleRef"], Some(namespace)));
            }
        }
    }
    rules
}

/// Whether a binding names the user, one of its groups, or its ServiceAccount.
fn binds(binding: &Value, user: &UserInfo) -> bool {
    let binding_namespace = binding["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|subject| {
            let name = subject["name"].as_str().unwrap_or_default();
            match subject["kind"].as_str().unwrap_or_default() {
                "User" => name == user.username,
                "Group" => user.groups.iter().any(|group| group == name),
                "ServiceAccount" => {
                    let namespace = subject["namespace"]
                        .as_str()
                        .filter(|namespace| !namespace.is_empty())
                        .unwrap_or(binding_namespace);
                    user.username == format!("system:serviceaccount:{namespace}:{name}")
                }
                _ => false,
            }
        })
}

/// The rules of the role a binding refers to (a Role only in the binding's namespace).
fn role_rules(store: &Store, role_ref: &Value, namespace: Option<&str>) -> Vec<Value> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    match role_ref["kind"].as_str() {
        Some("ClusterRole") => store
            .get(&ObjectKey::new(RBAC, "clusterroles", "", name))
            .map(|role| cluster_role_rules(store, &role))
            .unwrap_or_default(),
        Some("Role") => namespace
            .and_then(|namespace| store.get(&ObjectKey::new(RBAC, "roles", namespace, name)))
            .map(|role| rules_field(&role))
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn rules_field(role: &Value) -> Vec<Value> {
    role["rules"].as_array().cloned().unwrap_or_default()
}

/// A ClusterRole's rules; an aggregated one has the rules of every ClusterRole its
/// selectors match, as the aggregation controller of a real cluster fills them in.
pub fn cluster_role_rules(store: &Store, role: &Value) -> Vec<Value> {
    let Some(selectors) = role["aggregationRule"]["clusterRoleSelectors"].as_array() else {
        return rules_field(role);
    };
    let own = role["metadata"]["name"].as_str().unwrap_or_default();
    let mut rules = Vec::new();
    for (_, other) in store.list(RBAC, "clusterroles", None) {
        let name = other["metadata"]["name"].as_str().unwrap_or_default();
        if name != own && selectors.iter().any(|selector| selects(selector, other)) {
            // One level: an aggregated role's own aggregation is resolved where it is bound.
            rules.extend(rules_field(other));
        }
    }
    rules
}

/// Whether a label selector (matchLabels, matchExpressions) selects an object.
fn selects(selector: &Value, object: &Value) -> bool {
    let labels = &object["metadata"]["labels"];
    let labels_match = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| labels[key] == *value);
    let expressions_match = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|expression| {
            let key = expression["key"].as_str().unwrap_or_default();
            let values: BTreeSet<&str> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let label = labels[key].as_str();
            match expression["operator"].as_str().unwrap_or_default() {
                "In" => label.is_some_and(|label| values.contains(label)),
                "NotIn" => label.is_none_or(|label| !values.contains(label)),
                "Exists" => label.is_some(),
                "DoesNotExist" => label.is_none(),
                _ => false,
            }
        });
    labels_match && expressions_match
}

fn strings(value: &Value) -> impl Iterator<Item = &str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Whether one policy rule allows the attributes.
fn rule_allows(rule: &Value, attributes: &Attributes<'_>) -> bool {
    if !strings(&rule["verbs"]).any(|verb| verb == "*" || verb == attributes.verb) {
        return false;
    }
    match &attributes.action {
        Action::Path(path) => strings(&rule["nonResourceURLs"]).any(|pattern| {
            pattern == "*"
                || pattern == path
                || pattern
                    .strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        }),
        Action::Resource {
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let combined = match subresource {
                Some(subresource) => format!("{resource}/{subresource}"),
                None => resource.clone(),
            };
            let group_ok =
                strings(&rule["apiGroups"]).any(|wanted| wanted == "*" || wanted == group);
            let resource_ok = strings(&rule["resources"]).any(|wanted| {
                wanted == "*"
                    || wanted == combined
                    || subresource
                        .as_ref()
                        .is_some_and(|subresource| wanted == format!("*/{subresource}"))
            });
            let names: Vec<&str> = strings(&rule["resourceNames"]).collect();
            let name_ok =
                names.is_empty() || name.as_deref().is_some_and(|name| names.contains(&name));
            group_ok && resource_ok && name_ok
        }
    }
}

/// The roles and bindings a new cluster has, as far as Shoal, its tests and kubectl
/// rely on them.
pub fn bootstrap_objects() -> Vec<(ObjectKey, Value)> {
    let aggregated = |name: &str, label: &str, into: Option<&str>| {
        let mut role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
            "rules": [],
        });
        if let Some(into) = into {
            role["metadata"]["labels"][into] = json!("true");
        }
        role
    };
    let role = |name: &str, label: Option<&str>, rules: Value| {
        let mut role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "rules": rules,
        });
        if let Some(label) = label {
            role["metadata"]["labels"][label] = json!("true");
        }
        role
    };
    let binding = |name: &str, groups: &[&str]| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
            "subjects": groups.iter().map(|group| json!({"apiGroup": RBAC, "kind": "Group", "name": group})).collect::<Vec<_>>(),
        })
    };
    let read = json!(["get", "list", "watch"]);
    let write = json!(["create", "delete", "deletecollection", "patch", "update"]);
    let roles = vec![
        role(
            "cluster-admin",
            None,
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                   {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        ),
        role(
            "system:discovery",
            None,
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
        ),
        role(
            "system:public-info-viewer",
            None,
            json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
        ),
        role(
            "system:basic-user",
            None,
            json!([{"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                   {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
        ),
        aggregated(
            "admin",
            "rbac.authorization.k8s.io/aggregate-to-admin",
            None,
        ),
        aggregated(
            "edit",
            "rbac.authorization.k8s.io/aggregate-to-edit",
            Some("rbac.authorization.k8s.io/aggregate-to-admin"),
        ),
        aggregated(
            "view",
            "rbac.authorization.k8s.io/aggregate-to-view",
            Some("rbac.authorization.k8s.io/aggregate-to-edit"),
        ),
        role(
            "system:aggregate-to-view",
            Some("rbac.authorization.k8s.io/aggregate-to-view"),
            json!([{"apiGroups": [""], "resources": ["configmaps", "endpoints", "events", "persistentvolumeclaims", "pods", "pods/log", "pods/status", "replicationcontrollers", "serviceaccounts", "services"], "verbs": read},
                   {"apiGroups": ["apps"], "resources": ["controllerrevisions", "daemonsets", "deployments", "replicasets", "statefulsets", "statefulsets/scale", "deployments/scale"], "verbs": read},
                   {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": read},
                   {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": read}]),
        ),
        role(
            "system:aggregate-to-edit",
            Some("rbac.authorization.k8s.io/aggregate-to-edit"),
            json!([{"apiGroups": [""], "resources": ["configmaps", "pods", "secrets", "serviceaccounts", "services", "persistentvolumeclaims"], "verbs": write},
                   {"apiGroups": [""], "resources": ["pods/eviction", "serviceaccounts/token"], "verbs": ["create"]},
                   {"apiGroups": [""], "resources": ["secrets"], "verbs": read},
                   {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "replicasets", "statefulsets", "statefulsets/scale", "deployments/scale"], "verbs": write},
                   {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": write},
                   {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch", "update"]}]),
        ),
        role(
            "system:aggregate-to-admin",
            Some("rbac.authorization.k8s.io/aggregate-to-admin"),
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"], "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
                   {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]}]),
        ),
    ];
    let bindings = vec![
        binding("cluster-admin", &["system:masters"]),
        binding("system:discovery", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        binding("system:basic-user", &["system:authenticated"]),
    ];
    roles
        .into_iter()
        .map(|role| ("clusterroles", role))
        .chain(
            bindings
                .into_iter()
                .map(|binding| ("clusterrolebindings", binding)),
        )
        .map(|(resource, object)| {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (ObjectKey::new(RBAC, resource, "", &name), object)
        })
        .collect()
}

/// The rules of `user` in `namespace`, as SelfSubjectRulesReview reports them.
pub fn rules_review(store: &Store, user: &UserInfo, namespace: &str) -> Value {
    let rules: Vec<Value> = if user.groups.iter().any(|group| group == "system:masters") {
        vec![
            json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
            json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
        ]
    } else {
        rules_of(store, user, Some(namespace))
    };
    let (non_resource, resource): (Vec<Value>, Vec<Value>) = rules
        .into_iter()
        .partition(|rule| rule.get("nonResourceURLs").is_some());
    json!({
        "resourceRules": resource.into_iter().map(|rule| json!({
            "verbs": rule["verbs"],
            "apiGroups": rule.get("apiGroups").cloned().unwrap_or(json!([])),
            "resources": rule.get("resources").cloned().unwrap_or(json!([])),
            "resourceNames": rule.get("resourceNames").cloned().unwrap_or(json!([])),
        })).collect::<Vec<_>>(),
        "nonResourceRules": non_resource.into_iter().map(|rule| json!({
            "verbs": rule["verbs"],
            "nonResourceURLs": rule["nonResourceURLs"],
        })).collect::<Vec<_>>(),
        "incomplete": false,
    })
}
