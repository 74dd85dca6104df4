//! Validation: object names (DNS rules), labels, and custom resources
//! against their CRD's openAPIV3Schema (types, required fields, enums,
//! bounds, `x-kubernetes-list-type: set` uniqueness), with pruning of unknown fields.

use serde_json::Value;

use super::errors::Cause;
use super::registry::NameRule;

const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// One field-level problem.
pub(super) fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause {
        reason: reason.to_owned(),
        field: field.to_owned(),
        message,
    }
}

pub(super) fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && text.as_bytes()[0] != b'-'
        && text.as_bytes()[text.len() - 1] != b'-'
}

pub(super) fn is_dns_subdomain(text: &str) -> bool {
    !text.is_empty() && text.len() <= 253 && text.split('.').all(is_dns_label)
}

/// Problems with `metadata.name` under a type's naming rule.
pub fn validate_name(name: &str, rule: NameRule) -> Vec<Cause> {
    let field = "metadata.name";
    if name.is_empty() {
        return vec![cause(
            "FieldValueRequired",
            field,
            "Required value: name or generateName is required".into(),
        )];
    }
    let mut causes = Vec::new();
    match rule {
        NameRule::Subdomain | NameRule::CrdName => {
            if name.len() > 253 {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {name:?}: must be no more than 253 characters"),
                ));
            } else if !is_dns_subdomain(name) {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {name:?}: {SUBDOMAIN_MESSAGE}"),
                ));
            }
        }
        NameRule::Label => {
            if name.len() > 63 {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {name:?}: must be no more than 63 characters"),
                ));
            } else if !is_dns_label(name) {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {name:?}: {LABEL_MESSAGE}"),
                ));
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." || name.contains('/') || name.contains('%') {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {name:?}: may not be '.' or '..' and may not contain '/' or '%'"),
                ));
            }
        }
    }
    causes
}

fn is_qualified_name_part(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && text.as_bytes()[0].is_ascii_alphanumeric()
        && text.as_bytes()[text.len() - 1].is_ascii_alphanumeric()
}

/// Problems with `metadata.labels` keys and values.
pub fn validate_labels(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(labels) = object["metadata"]["labels"].as_object() else {
        return causes;
    };
    for (key, value) in labels {
        let (prefix, name) = match key.split_once('/') {
            Some((prefix, name)) => (Some(prefix), name),
            None => (None, key.as_str()),
        };
        let key_ok = is_qualified_name_part(name) && prefix.is_none_or(is_dns_subdomain);
        if !key_ok {
            causes.push(cause(
                "FieldValueInvalid",
                "metadata.labels",
                format!("Invalid value: {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
            ));
        }
        match value {
            Value::String(text) if text.is_empty() || is_qualified_name_part(text) => {}
            Value::String(text) => causes.push(cause(
                "FieldValueInvalid",
                "metadata.labels",
                format!("Invalid value: {text:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
            )),
            other => causes.push(cause(
                "FieldValueTypeInvalid",
                "metadata.labels",
                format!("Invalid value: {other}: label values must be strings"),
            )),
        }
    }
    causes
}

/// The outcome of checking a custom resource against its schema.
#[derive(Debug, Default)]
pub struct SchemaReport {
    pub causes: Vec<Cause>,
    /// Paths of fields the schema does not know (they were pruned).
    pub unknown_fields: Vec<String>,
}

/// Fills in the schema's `default`s where a field is absent (or null and not nullable),
/// as the API server does to every custom resource it is sent, so that what is stored
/// carries the default of the CRD it was written under. A default inside a defaulted
/// value applies too; only objects (`properties`, `additionalProperties`) and array items
/// are walked.
pub fn apply_schema_defaults(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(fields) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (name, field_schema) in properties {
                    let absent = match fields.get(name) {
                        None => true,
                        Some(Value::Null) => field_schema["nullable"].as_bool() != Some(true),
                        Some(_) => false,
                    };
                    if absent && let Some(default) = field_schema.get("default") {
                        fields.insert(name.clone(), default.clone());
                    }
                    if let Some(field) = fields.get_mut(name) {
                        apply_schema_defaults(field, field_schema);
                    }
                }
            }
            if let Some(values_schema) = schema
                .get("additionalProperties")
                .filter(|values| values.is_object())
            {
                for field in fields.values_mut() {
                    apply_schema_defaults(field, values_schema);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_schema_defaults(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Fills in defaults, then validates and prunes a custom resource in place.
pub fn validate_custom(object: &mut Value, schema: &Value) -> SchemaReport {
    apply_schema_defaults(object, schema);
    let mut report = SchemaReport::default();
    let Some(fields) = object.as_object_mut() else {
        report.causes.push(cause(
            "FieldValueTypeInvalid",
            "",
            "Invalid value: the object must be a JSON object".into(),
        ));
        return report;
    };
    let properties = schema["properties"].as_object();
    let preserve = schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true);
    let keys: Vec<String> = fields.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match properties.and_then(|properties| properties.get(&key)) {
            Some(field_schema) => {
                let mut remove = false;
                if let Some(value) = fields.get_mut(&key) {
                    remove = check(value, field_schema, &key, &mut report);
                }
                if remove {
                    fields.remove(&key);
                }
            }
            None if preserve => {}
            None => {
                fields.remove(&key);
                report.unknown_fields.push(key);
            }
        }
    }
    check_required(fields, schema, "", &mut report);
    report
}

fn check_required(
    fields: &serde_json::Map<String, Value>,
    schema: &Value,
    path: &str,
    report: &mut SchemaReport,
) {
    if let Some(required) = schema["required"].as_array() {
        for name in required.iter().filter_map(Value::as_str) {
            if !fields.contains_key(name) {
                report.causes.push(cause(
                    "FieldValueRequired",
                    &join(path, name),
                    "Required value".into(),
                ));
            }
        }
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// The JSON type name a real server shows for a value in its validation messages.
pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Checks one value; returns true when the value must be pruned (a null
/// where the schema is not nullable).
/// As the real server: an item of a `x-kubernetes-list-type: map` list whose
/// key fields (`x-kubernetes-list-map-keys`) repeat an earlier item's is one
/// cause, worded with the keys as Go prints a `map[string]interface{}`.
fn duplicate_map_keys(items: &[Value], schema: &Value, path: &str, report: &mut SchemaReport) {
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .map(|keys| keys.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for (index, item) in items.iter().enumerate() {
        let mut present: Vec<(&str, &Value)> = keys
            .iter()
            .filter_map(|key| item.get(*key).map(|value| (*key, value)))
            .collect();
        present.sort_by_key(|(key, _)| *key);
        let text = present
            .iter()
            .map(|(key, value)| format!("{:?}:{value}", key))
            .collect::<Vec<_>>()
            .join(", ");
        if !seen.insert(text.clone()) {
            report.causes.push(cause(
                "FieldValueDuplicate",
                &format!("{path}[{index}]"),
                format!("Duplicate value: map[string]interface {{}}{{{text}}}"),
            ));
        }
    }
}

fn check(value: &mut Value, schema: &Value, path: &str, report: &mut SchemaReport) -> bool {
    if value.is_null() {
        return schema["nullable"].as_bool() != Some(true);
    }
    let int_or_string = schema["x-kubernetes-int-or-string"].as_bool() == Some(true);
    let expected = schema["type"].as_str().unwrap_or_default();
    let actual = type_name(value);
    let type_ok = if int_or_string {
        matches!(actual, "integer" | "string")
    } else {
        match expected {
            "" => true,
            "number" => matches!(actual, "integer" | "number"),
            other => other == actual,
        }
    };
    if !type_ok {
        let shown = if int_or_string {
            "integer or string"
        } else {
            expected
        };
        report.causes.push(cause(
            "FieldValueTypeInvalid",
            path,
            format!(
                "Invalid value: \"{actual}\": {path} in body must be of type {shown}: \"{actual}\""
            ),
        ));
        return false;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        report.causes.push(cause(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {value}: supported values: {}",
                listed.join(", ")
            ),
        ));
    }
    match value {
        Value::Number(number) => {
            let number = number.as_f64().unwrap_or_default();
            if let Some(minimum) = schema["minimum"].as_f64()
                && number < minimum
            {
                report.causes.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!("Invalid value: {number}: {path} in body should be greater than or equal to {minimum}"),
                ));
            }
            if let Some(maximum) = schema["maximum"].as_f64()
                && number > maximum
            {
                report.causes.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!("Invalid value: {number}: {path} in body should be less than or equal to {maximum}"),
                ));
            }
        }
        Value::String(text) => {
            let length = text.chars().count() as u64;
            if let Some(min) = schema["minLength"].as_u64()
                && length < min
            {
                report.causes.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!("Invalid value: {text:?}: {path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(max) = schema["maxLength"].as_u64()
                && length > max
            {
                report.causes.push(cause(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
        }
        Value::Array(items) => {
            if let Some(min) = schema["minItems"].as_u64()
                && (items.len() as u64) < min
            {
                report.causes.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {}: {path} in body should have at least {min} items",
                        items.len()
                    ),
                ));
            }
            if let Some(max) = schema["maxItems"].as_u64()
                && (items.len() as u64) > max
            {
                report.causes.push(cause(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {}: must have at most {max} items", items.len()),
                ));
            }
            if schema["x-kubernetes-list-type"].as_str() == Some("set") {
                // As the real server: each repeat of an earlier item is one cause.
                let mut seen = std::collections::HashSet::new();
                for (index, item) in items.iter().enumerate() {
                    if !seen.insert(item.to_string()) {
                        report.causes.push(cause(
                            "FieldValueDuplicate",
                            &format!("{path}[{index}]"),
                            format!("Duplicate value: {item}"),
                        ));
                    }
                }
            }
            if schema["x-kubernetes-list-type"].as_str() == Some("map") {
                duplicate_map_keys(items, schema, path, report);
            }
            if let Some(item_schema) = schema.get("items") {
                let mut index = 0;
                items.retain_mut(|item| {
                    let remove = check(item, item_schema, &format!("{path}[{index}]"), report);
                    index += 1;
                    !remove
                });
            }
        }
        Value::Object(fields) => {
            let properties = schema["properties"].as_object();
            let additional = schema.get("additionalProperties");
            let preserve = schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
                || additional.and_then(Value::as_bool) == Some(true);
            let embedded = schema["x-kubernetes-embedded-resource"].as_bool() == Some(true);
            let keys: Vec<String> = fields.keys().cloned().collect();
            for key in keys {
                let child_path = join(path, &key);
                let child_schema = properties
                    .and_then(|properties| properties.get(&key))
                    .or(additional.filter(|additional| additional.is_object()));
                match child_schema {
                    Some(child_schema) => {
                        let mut remove = false;
                        if let Some(child) = fields.get_mut(&key) {
                            remove = check(child, child_schema, &child_path, report);
                        }
                        if remove {
                            fields.remove(&key);
                        }
                    }
                    None if preserve
                        || (embedded
                            && matches!(key.as_str(), "apiVersion" | "kind" | "metadata")) => {}
                    None => {
                        fields.remove(&key);
                        report.unknown_fields.push(child_path);
                    }
                }
            }
            check_required(fields, schema, path, report);
        }
        _ => {}
    }
    false
}

#[cfg(test)]
mod defaults {
    use serde_json::json;

    use super::apply_schema_defaults;

    fn schema() -> serde_json::Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "strategy": {"type": "object", "default": {"type": "bounded"}, "properties": {
                "type": {"type": "string", "default": "bounded"},
                "epsilon": {"type": "number", "default": 0}
            }},
            "limit": {"type": "integer", "default": 10},
            "note": {"type": "string", "nullable": true, "default": "x"},
            "items": {"type": "array", "items": {"type": "object", "properties": {
                "weight": {"type": "integer", "default": 1}
            }}}
        }}}})
    }

    #[test]
    fn absent_fields_get_their_defaults_and_so_do_fields_inside_a_default() {
        let mut object = json!({"spec": {"items": [{}, {"weight": 3}]}});
        apply_schema_defaults(&mut object, &schema());
        assert_eq!(
            object,
            json!({"spec": {
                "strategy": {"type": "bounded", "epsilon": 0},
                "limit": 10,
                "note": "x",
                "items": [{"weight": 1}, {"weight": 3}]
            }})
        );
    }

    #[test]
    fn given_values_are_kept_and_a_nullable_null_stays_null() {
        let mut object =
            json!({"spec": {"strategy": {"type": "sticky"}, "limit": 3, "note": null}});
        apply_schema_defaults(&mut object, &schema());
        assert_eq!(
            object["spec"]["strategy"],
            json!({"type": "sticky", "epsilon": 0})
        );
        assert_eq!(object["spec"]["limit"], json!(3));
        assert_eq!(object["spec"]["note"], json!(null));
    }

    #[test]
    fn a_null_that_is_not_nullable_is_defaulted() {
        let mut object = json!({"spec": {"limit": null}});
        apply_schema_defaults(&mut object, &schema());
        assert_eq!(object["spec"]["limit"], json!(10));
    }
}
