//! The parts of a CRD's schema a real API server checks with expressions:
//! `x-kubernetes-validations` (CEL rules over `self`, and transition rules over
//! `oldSelf`, evaluated only on an update where the old value exists) and
//! `pattern` on strings. Wording as in Kubernetes 1.32: a failed rule is
//! `<path>: Invalid value: "<type>": <message>` (`failed rule: <rule>` without a
//! message; the root's path prints as `<nil>`), a pattern mismatch
//! `<path>: Invalid value: "<value>": <path> in body should match '<pattern>'`.
//! CEL runs with the environment the admission policies use (admission.rs).
//! Not done: ratcheting of unchanged invalid values, rules on list items matched
//! to old items (`oldSelf` under arrays), runtime cost limits. The static cost
//! check at CRD create/update is `crd_cost.rs`.

use std::sync::Arc;

use cel::{Context, Env, Value as CelValue};
use serde_json::Value;

use super::admission::{cel_of, environment, run};
use super::errors::Cause;
use super::validation::type_name;

/// The rule and pattern problems of `object` (a custom resource after pruning)
/// against its version's `schema`; `old` is the stored object on an update.
pub fn check(object: &Value, old: Option<&Value>, schema: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !mentions_rules(schema) {
        return causes;
    }
    let env = environment();
    walk(&env, object, old, schema, "", &mut causes);
    causes
}

/// Whether the schema has anything for this module to check (most have not;
/// building the CEL environment is then skipped).
fn mentions_rules(schema: &Value) -> bool {
    let text = schema.to_string();
    text.contains("x-kubernetes-validations") || text.contains("\"pattern\"")
}

fn walk(
    env: &Arc<Env>,
    value: &Value,
    old: Option<&Value>,
    schema: &Value,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    if value.is_null() {
        return;
    }
    if let (Value::String(text), Some(pattern)) = (value, schema["pattern"].as_str())
        && !matches_pattern(env, text, pattern)
    {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            field: path.to_owned(),
            message: format!("Invalid value: {text:?}: {path} in body should match '{pattern}'"),
        });
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        causes.extend(check_rule(env, rule, value, old, path));
    }
    match value {
        Value::Object(fields) => {
            let properties = schema["properties"].as_object();
            let additional = schema
                .get("additionalProperties")
                .filter(|additional| additional.is_object());
            for (key, child) in fields {
                let child_schema = properties
                    .and_then(|properties| properties.get(key))
                    .or(additional);
                if let Some(child_schema) = child_schema {
                    let old_child = old.and_then(|old| old.get(key));
                    walk(
                        env,
                        child,
                        old_child,
                        child_schema,
                        &join(path, key),
                        causes,
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    walk(
                        env,
                        item,
                        None,
                        item_schema,
                        &format!("{path}[{index}]"),
                        causes,
                    );
                }
            }
        }
        _ => {}
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// Whether `text` matches the schema's `pattern` (an invalid pattern matches
/// nothing, so the value is refused rather than let through).
fn matches_pattern(env: &Arc<Env>, text: &str, pattern: &str) -> bool {
    let mut context = Context::with_env(env.clone());
    context.add_variable_from_value("text", CelValue::String(Arc::new(text.to_owned())));
    context.add_variable_from_value("pattern", CelValue::String(Arc::new(pattern.to_owned())));
    matches!(
        run(env, &context, "text.matches(pattern)"),
        Ok(CelValue::Bool(true))
    )
}

/// One rule at one node: `None` when it holds (or, a transition rule, when there
/// is no old value to compare with).
fn check_rule(
    env: &Arc<Env>,
    rule: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
) -> Option<Cause> {
    let expression = rule["rule"].as_str().unwrap_or_default();
    let transition = expression.contains("oldSelf");
    if transition && old.is_none() {
        return None;
    }
    let mut context = Context::with_env(env.clone());
    context.add_variable_from_value("self", cel_of(value));
    if let Some(old) = old {
        context.add_variable_from_value("oldSelf", cel_of(old));
    }
    let field = if path.is_empty() {
        "<nil>".to_owned()
    } else {
        path.to_owned()
    };
    let base = rule["fieldPath"]
        .as_str()
        .map(|extra| format!("{field}{extra}"))
        .unwrap_or(field);
    let message = match run(env, &context, expression) {
        Ok(CelValue::Bool(true)) => return None,
        Ok(CelValue::Bool(false)) => failure_message(env, &context, rule, expression),
        Ok(other) => format!("rule {expression:?} evaluated to {other:?}, not a bool"),
        Err(error) => {
            return Some(Cause {
                reason: "InternalError".into(),
                field: base,
                message: format!("Internal error: {error}"),
            });
        }
    };
    let reason = rule["reason"].as_str().unwrap_or("FieldValueInvalid");
    let message = match reason {
        "FieldValueForbidden" => format!("Forbidden: {message}"),
        "FieldValueRequired" => format!("Required value: {message}"),
        _ => format!("Invalid value: \"{}\": {message}", type_name(value)),
    };
    Some(Cause {
        reason: reason.to_owned(),
        field: base,
        message,
    })
}

/// The rule's `messageExpression`, else its `message`, else `failed rule: <rule>`.
fn failure_message(
    env: &Arc<Env>,
    context: &Context<'_, '_>,
    rule: &Value,
    expression: &str,
) -> String {
    if let Some(message_expression) = rule["messageExpression"].as_str()
        && let Ok(CelValue::String(text)) = run(env, context, message_expression)
        && !text.is_empty()
    {
        return text.to_string();
    }
    rule["message"]
        .as_str()
        .filter(|message| !message.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("failed rule: {expression}"))
}
