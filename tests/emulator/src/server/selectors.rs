//! Label selectors (equality and set-based) and field selectors.

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

/// Splits on commas outside parentheses.
fn split_top_level(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for character in text.chars() {
        match character {
            '(' => {
                depth += 1;
                current.push(character);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                current.push(character);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut current)),
            _ => current.push(character),
        }
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|part| part.trim().to_owned())
        .filter(|part| !part.is_empty())
        .collect()
}

fn parse_set(text: &str, selector: &str) -> Result<Vec<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|rest| rest.strip_suffix(')'))
        .ok_or_else(|| format!("unable to parse requirement: found '{text}', expected: '(' ... ')' in selector {selector:?}"))?;
    Ok(inner
        .split(',')
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
        .collect())
}

fn check_key(key: &str, selector: &str) -> Result<String, String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_owned())
    } else {
        Err(format!(
            "invalid label key {key:?} in selector {selector:?}"
        ))
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(selector: &str) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(selector) {
            let requirement =
                if let Some(key) = part.strip_prefix('!') {
                    Requirement::DoesNotExist(check_key(key, selector)?)
                } else if let Some((key, values)) = split_word(&part, "notin") {
                    Requirement::NotIn(check_key(key, selector)?, parse_set(values, selector)?)
                } else if let Some((key, values)) = split_word(&part, "in") {
                    Requirement::In(check_key(key, selector)?, parse_set(values, selector)?)
                } else if let Some((key, value)) = part.split_once("!=") {
                    Requirement::NotEquals(check_key(key, selector)?, value.trim().to_owned())
                } else if let Some((key, value)) = part.split_once("==") {
                    Requirement::Equals(check_key(key, selector)?, value.trim().to_owned())
                } else if let Some((key, value)) = part.split_once('=') {
                    Requirement::Equals(check_key(key, selector)?, value.trim().to_owned())
                } else if let Some((key, value)) = part.split_once('>') {
                    let number = value.trim().parse().map_err(|_| {
                        format!("invalid number {value:?} in selector {selector:?}")
                    })?;
                    Requirement::GreaterThan(check_key(key, selector)?, number)
                } else if let Some((key, value)) = part.split_once('<') {
                    let number = value.trim().parse().map_err(|_| {
                        format!("invalid number {value:?} in selector {selector:?}")
                    })?;
                    Requirement::LessThan(check_key(key, selector)?, number)
                } else {
                    Requirement::Exists(check_key(&part, selector)?)
                };
            requirements.push(requirement);
        }
        Ok(LabelSelector { requirements })
    }

    /// Builds a selector from a metav1 LabelSelector object
    /// (`matchLabels`, `matchExpressions`).
    pub fn from_object(selector: &Value) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector["matchLabels"].as_object() {
            for (key, value) in labels {
                requirements.push(Requirement::Equals(
                    key.clone(),
                    value.as_str().unwrap_or_default().to_owned(),
                ));
            }
        }
        if let Some(expressions) = selector["matchExpressions"].as_array() {
            for expression in expressions {
                let key = expression["key"].as_str().unwrap_or_default().to_owned();
                let values: Vec<String> = expression["values"]
                    .as_array()
                    .map(|values| {
                        values
                            .iter()
                            .filter_map(|value| value.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let requirement = match expression["operator"].as_str().unwrap_or_default() {
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::DoesNotExist(key),
                    other => {
                        return Err(format!("{other:?} is not a valid label selector operator"));
                    }
                };
                requirements.push(requirement);
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// The query-string form (`a=b,c in (d,e)`), as in Scale's status.selector.
    pub fn to_query(&self) -> String {
        self.requirements
            .iter()
            .map(|requirement| match requirement {
                Requirement::Equals(key, value) => format!("{key}={value}"),
                Requirement::NotEquals(key, value) => format!("{key}!={value}"),
                Requirement::In(key, values) => format!("{key} in ({})", values.join(",")),
                Requirement::NotIn(key, values) => format!("{key} notin ({})", values.join(",")),
                Requirement::Exists(key) => key.clone(),
                Requirement::DoesNotExist(key) => format!("!{key}"),
                Requirement::GreaterThan(key, value) => format!("{key}>{value}"),
                Requirement::LessThan(key, value) => format!("{key}<{value}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Does an object's `metadata.labels` satisfy every requirement?
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |key: &str| labels.get(key).and_then(Value::as_str);
        self.requirements
            .iter()
            .all(|requirement| match requirement {
                Requirement::Equals(key, value) => label(key) == Some(value.as_str()),
                Requirement::NotEquals(key, value) => label(key) != Some(value.as_str()),
                Requirement::In(key, values) => {
                    label(key).is_some_and(|found| values.iter().any(|value| value == found))
                }
                Requirement::NotIn(key, values) => {
                    label(key).is_none_or(|found| values.iter().all(|value| value != found))
                }
                Requirement::Exists(key) => label(key).is_some(),
                Requirement::DoesNotExist(key) => label(key).is_none(),
                Requirement::GreaterThan(key, bound) => label(key)
                    .and_then(|found| found.parse::<i64>().ok())
                    .is_some_and(|found| found > *bound),
                Requirement::LessThan(key, bound) => label(key)
                    .and_then(|found| found.parse::<i64>().ok())
                    .is_some_and(|found| found < *bound),
            })
    }
}

/// `key in (..)` / `key notin (..)` with the operator as a separate word.
fn split_word<'a>(part: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let pattern = format!(" {word} ");
    if let Some(index) = part.find(&pattern) {
        return Some((&part[..index], &part[index + pattern.len()..]));
    }
    let pattern = format!(" {word}(");
    part.find(&pattern)
        .map(|index| (&part[..index], &part[index + pattern.len() - 1..]))
}

/// One field requirement.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub equal: bool,
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses `a=b,c!=d`; `supported` lists the fields this type accepts.
    pub fn parse(selector: &str, supported: &[&str]) -> Result<FieldSelector, String> {
        let mut requirements = Vec::new();
        for part in selector
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
        {
            let (field, value, equal) = if let Some((field, value)) = part.split_once("!=") {
                (field, value, false)
            } else if let Some((field, value)) = part.split_once("==") {
                (field, value, true)
            } else if let Some((field, value)) = part.split_once('=') {
                (field, value, true)
            } else {
                return Err(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(format!("field label not supported: {field}"));
            }
            requirements.push(FieldRequirement {
                field: field.to_owned(),
                value: value.trim().to_owned(),
                equal,
            });
        }
        Ok(FieldSelector { requirements })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|requirement| {
            let found = field_value(object, &requirement.field);
            (found == requirement.value) == requirement.equal
        })
    }
}

/// The string value of a dotted field path; missing → "".
pub fn field_value(object: &Value, field: &str) -> String {
    // `source` on core events is `source.component`.
    let path = if field == "source" {
        "source.component"
    } else {
        field
    };
    let mut current = object;
    for segment in path.split('.') {
        current = &current[segment];
    }
    match current {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        other => other.to_string(),
    }
}

/// The field selectors each type supports, beyond metadata.name/namespace.
pub fn supported_fields(group: &str, resource: &str) -> Vec<&'static str> {
    let mut fields = vec!["metadata.name", "metadata.namespace"];
    match (group, resource) {
        ("", "pods") => fields.extend([
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]),
        ("", "events") => fields.extend([
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]),
        ("events.k8s.io", "events") => fields.extend([
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ]),
        ("", "namespaces") => fields.push("status.phase"),
        ("", "secrets") => fields.push("type"),
        _ => {}
    }
    fields
}
