//! ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`), as a real
//! API server enforces it: every binding's policy whose match constraints
//! (resource rules with subresources, operations and names; namespace and
//! object selectors; exclusions) and match conditions select a write is
//! evaluated in CEL with `object`, `oldObject`, `request` (with `userInfo`),
//! `namespaceObject` and `variables`; a failed validation denies the request
//! (`Deny`, the status code of its `reason`), warns (`Warn`) or is only
//! recorded (`Audit`); an evaluation error follows `failurePolicy`.

use std::sync::Arc;

use cel::{Context, Env, Program, Value as CelValue};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::identity::UserInfo;
use super::store::{ObjectKey, Store};

const GROUP: &str = "admissionregistration.k8s.io";

/// One write as admission sees it.
pub struct Attributes<'a> {
    /// Who writes.
    pub user: &'a UserInfo,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    /// The resource's group, version, plural and kind.
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub kind: &'a str,
    /// The subresource written, if any.
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    /// The object after the write (`None` for a delete).
    pub object: Option<&'a Value>,
    /// The object before the write (`None` for a create).
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
}

/// The CEL environment: the standard library with the string and list extensions
/// Kubernetes offers.
pub(super) fn environment() -> Arc<Env> {
    let mut env = Env::stdlib();
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    Arc::new(env)
}

/// Runs every policy binding against the write. `Ok` carries the warnings to return.
pub fn admit(store: &Store, attributes: &Attributes<'_>) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    let bindings: Vec<Arc<Value>> = store
        .list(GROUP, "validatingadmissionpolicybindings", None)
        .map(|(_, binding)| binding.clone())
        .collect();
    if bindings.is_empty() {
        return Ok(warnings);
    }
    let env = environment();
    for binding in bindings {
        let policy_name = binding["spec"]["policyName"].as_str().unwrap_or_default();
        let Some(policy) = store.get(&ObjectKey::new(
            GROUP,
            "validatingadmissionpolicies",
            "",
            policy_name,
        )) else {
            continue;
        };
        if !selects(store, &policy["spec"]["matchConstraints"], attributes)
            || (!binding["spec"]["matchResources"].is_null()
                && !selects(store, &binding["spec"]["matchResources"], attributes))
        {
            continue;
        }
        let evaluation = Evaluation::new(&env, store, &policy, attributes);
        let binding_name = binding["metadata"]["name"].as_str().unwrap_or_default();
        let actions: Vec<&str> = binding["spec"]["validationActions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let fail_open = policy["spec"]["failurePolicy"].as_str() == Some("Ignore");
        let outcome = match evaluation.conditions_hold() {
            Ok(false) => continue,
            Ok(true) => evaluation.first_failure(),
            Err(error) => Err(error),
        };
        let (message, reason) = match outcome {
            Ok(None) => continue,
            Ok(Some(failure)) => failure,
            Err(_) if fail_open => continue,
            Err(error) => (error, "Invalid".to_owned()),
        };
        let text = format!(
            "ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request: {message}"
        );
        if actions.contains(&"Warn") {
            warnings.push(format!(
                "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {message}"
            ));
        }
        if actions.contains(&"Deny") {
            return Err(denial(&reason, text, attributes));
        }
    }
    Ok(warnings)
}

/// The refusal a real server returns for a denying validation: its code and wording
/// follow the validation's `reason` (default `Invalid`).
fn denial(reason: &str, text: String, attributes: &Attributes<'_>) -> ApiError {
    let qualified = if attributes.group.is_empty() {
        attributes.resource.to_owned()
    } else {
        format!("{}.{}", attributes.resource, attributes.group)
    };
    let name = attributes.name;
    let mut error = match reason {
        "Forbidden" => ApiError::forbidden(format!("{qualified} \"{name}\" is forbidden: {text}")),
        "Unauthorized" => {
            let mut error = ApiError::forbidden(text);
            (error.code, error.reason) = (401, "Unauthorized");
            error
        }
        "RequestEntityTooLarge" => {
            let mut error = ApiError::forbidden(text);
            (error.code, error.reason) = (413, "RequestEntityTooLarge");
            error
        }
        _ => {
            let mut error =
                ApiError::forbidden(format!("{qualified} \"{name}\" is invalid: : {text}"));
            (error.code, error.reason) = (422, "Invalid");
            error
        }
    };
    error = error.with_name(attributes.group, attributes.kind, name);
    error
}

/// Whether match constraints (or a binding's matchResources) select the write.
fn selects(store: &Store, constraints: &Value, attributes: &Attributes<'_>) -> bool {
    let rules_select = |rules: &Value| {
        rules
            .as_array()
            .into_iter()
            .flatten()
            .any(|rule| rule_selects(rule, attributes))
    };
    // A binding's matchResources without resourceRules narrows by selectors only.
    let included =
        constraints["resourceRules"].is_null() || rules_select(&constraints["resourceRules"]);
    if !included || rules_select(&constraints["excludeResourceRules"]) {
        return false;
    }
    let object_labels = attributes
        .object
        .or(attributes.old_object)
        .map(|object| object["metadata"]["labels"].clone())
        .unwrap_or(Value::Null);
    if !label_selector_matches(&constraints["objectSelector"], &object_labels) {
        return false;
    }
    match attributes.namespace {
        Some(namespace) => {
            let labels = store
                .get(&ObjectKey::new("", "namespaces", "", namespace))
                .map(|object| object["metadata"]["labels"].clone())
                .unwrap_or(Value::Null);
            label_selector_matches(&constraints["namespaceSelector"], &labels)
        }
        None => true,
    }
}

fn strings(value: &Value) -> impl Iterator<Item = &str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn rule_selects(rule: &Value, attributes: &Attributes<'_>) -> bool {
    let any =
        |field: &str, wanted: &str| strings(&rule[field]).any(|item| item == "*" || item == wanted);
    let resource = match attributes.subresource {
        Some(subresource) => format!("{}/{subresource}", attributes.resource),
        None => attributes.resource.to_owned(),
    };
    let resource_ok = strings(&rule["resources"]).any(|item| {
        item == resource
            || item == "*/*"
            || (item == "*" && attributes.subresource.is_none())
            || attributes.subresource.is_some_and(|subresource| {
                item == format!("*/{subresource}") || item == format!("{}/*", attributes.resource)
            })
    });
    let names: Vec<&str> = strings(&rule["resourceNames"]).collect();
    any("apiGroups", attributes.group)
        && any("apiVersions", attributes.version)
        && resource_ok
        && any("operations", attributes.operation)
        && (names.is_empty() || names.contains(&attributes.name))
}

/// A label selector (absent or empty: everything) against labels.
fn label_selector_matches(selector: &Value, labels: &Value) -> bool {
    let labels_ok = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| labels[key] == *value);
    let expressions_ok = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|expression| {
            let key = expression["key"].as_str().unwrap_or_default();
            let label = labels[key].as_str();
            let values: Vec<&str> = strings(&expression["values"]).collect();
            match expression["operator"].as_str().unwrap_or_default() {
                "In" => label.is_some_and(|label| values.contains(&label)),
                "NotIn" => label.is_none_or(|label| !values.contains(&label)),
                "Exists" => label.is_some(),
                "DoesNotExist" => label.is_none(),
                _ => false,
            }
        });
    labels_ok && expressions_ok
}

/// One policy's evaluation of one write.
struct Evaluation<'a> {
    env: &'a Arc<Env>,
    policy: &'a Value,
    bindings: Vec<(&'static str, CelValue)>,
}

pub(super) fn cel_of(value: &Value) -> CelValue {
    cel::to_value(value).unwrap_or(CelValue::Null)
}

impl<'a> Evaluation<'a> {
    fn new(
        env: &'a Arc<Env>,
        store: &Store,
        policy: &'a Value,
        attributes: &Attributes<'_>,
    ) -> Self {
        let user = attributes.user;
        let request = json!({
            "kind": {"group": attributes.group, "version": attributes.version, "kind": attributes.kind},
            "resource": {"group": attributes.group, "version": attributes.version, "resource": attributes.resource},
            "subResource": attributes.subresource.unwrap_or_default(),
            "name": attributes.name,
            "namespace": attributes.namespace.unwrap_or_default(),
            "operation": attributes.operation,
            "userInfo": {
                "username": user.username,
                "uid": user.uid,
                "groups": user.groups,
                "extra": user.extra,
            },
            "dryRun": attributes.dry_run,
        });
        let namespace_object = attributes
            .namespace
            .and_then(|namespace| store.get(&ObjectKey::new("", "namespaces", "", namespace)))
            .map(|object| (*object).clone())
            .unwrap_or(Value::Null);
        Evaluation {
            env,
            policy,
            bindings: vec![
                ("object", attributes.object.map_or(CelValue::Null, cel_of)),
                (
                    "oldObject",
                    attributes.old_object.map_or(CelValue::Null, cel_of),
                ),
                ("request", cel_of(&request)),
                ("namespaceObject", cel_of(&namespace_object)),
                ("params", CelValue::Null),
            ],
        }
    }

    /// Evaluates `source` with the write's variables and the policy's `variables`.
    fn evaluate(&self, source: &str) -> Result<CelValue, String> {
        let mut context = Context::with_env(self.env.clone());
        for (name, value) in &self.bindings {
            context.add_variable_from_value(*name, value.clone());
        }
        let mut variables = serde_json::Map::new();
        for variable in self.policy["spec"]["variables"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = variable["name"].as_str().unwrap_or_default();
            let expression = variable["expression"].as_str().unwrap_or_default();
            let mut scope = Context::with_env(self.env.clone());
            for (binding, value) in &self.bindings {
                scope.add_variable_from_value(*binding, value.clone());
            }
            scope.add_variable_from_value("variables", cel_of(&Value::Object(variables.clone())));
            let value = run(self.env, &scope, expression)?;
            let value = value.json().unwrap_or(Value::Null);
            variables.insert(name.to_owned(), value);
        }
        context.add_variable_from_value("variables", cel_of(&Value::Object(variables)));
        run(self.env, &context, source)
    }

    fn conditions_hold(&self) -> Result<bool, String> {
        for condition in self.policy["spec"]["matchConditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let expression = condition["expression"].as_str().unwrap_or_default();
            match self.evaluate(expression)? {
                CelValue::Bool(true) => {}
                CelValue::Bool(false) => return Ok(false),
                other => {
                    return Err(format!(
                        "matchCondition '{}' evaluated to {other:?}, not a bool",
                        condition["name"].as_str().unwrap_or_default()
                    ));
                }
            }
        }
        Ok(true)
    }

    /// The first validation that does not hold: its message and reason.
    fn first_failure(&self) -> Result<Option<(String, String)>, String> {
        for validation in self.policy["spec"]["validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let expression = validation["expression"].as_str().unwrap_or_default();
            match self.evaluate(expression)? {
                CelValue::Bool(true) => continue,
                CelValue::Bool(false) => {}
                other => {
                    return Err(format!(
                        "expression '{expression}' evaluated to {other:?}, not a bool"
                    ));
                }
            }
            let message = match validation["messageExpression"].as_str() {
                Some(message_expression) => match self.evaluate(message_expression) {
                    Ok(CelValue::String(text)) => text.to_string(),
                    _ => format!("failed expression: {expression}"),
                },
                None => validation["message"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("failed expression: {expression}")),
            };
            let reason = validation["reason"]
                .as_str()
                .unwrap_or("Invalid")
                .to_owned();
            return Ok(Some((message, reason)));
        }
        Ok(None)
    }
}

/// Compiles and runs one expression.
pub(super) fn run(
    env: &Arc<Env>,
    context: &Context<'_, '_>,
    source: &str,
) -> Result<CelValue, String> {
    let program: Program = env
        .compile(source)
        .map_err(|error| format!("expression '{source}' does not compile: {error}"))?;
    program
        .execute(context)
        .map_err(|error| format!("expression '{source}' resulted in error: {error}"))
}
