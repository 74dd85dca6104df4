//! The JSONPath subset printer columns and scale paths use: `.a.b`,
//! `['key.with.dots']`, `[0]`, `[*]` and `[?(@.field=="value")]`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter { field: Vec<String>, value: String },
}

fn parse(path: &str) -> Result<Vec<Step>, String> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or(path);
    let path = path.strip_prefix('$').unwrap_or(path);
    let characters: Vec<char> = path.chars().collect();
    let mut steps = Vec::new();
    let mut index = 0;
    while index < characters.len() {
        match characters[index] {
            '.' => {
                index += 1;
                let start = index;
                while index < characters.len()
                    && characters[index] != '.'
                    && characters[index] != '['
                {
                    if characters[index] == '\\' {
                        index += 1;
                    }
                    index += 1;
                }
                let field: String = characters[start..index.min(characters.len())]
                    .iter()
                    .collect();
                let field = field.replace("\\.", ".");
                if !field.is_empty() {
                    steps.push(Step::Field(field));
                }
            }
            '[' => {
                let end = characters[index..]
                    .iter()
                    .position(|character| *character == ']')
                    .map(|offset| index + offset)
                    .ok_or_else(|| format!("unclosed '[' in JSONPath {path:?}"))?;
                let inner: String = characters[index + 1..end].iter().collect();
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Some(filter) = inner
                    .strip_prefix("?(")
                    .and_then(|rest| rest.strip_suffix(')'))
                {
                    let (left, right) = filter
                        .split_once("==")
                        .ok_or_else(|| format!("unsupported JSONPath filter {filter:?}"))?;
                    let field = left
                        .trim()
                        .strip_prefix("@.")
                        .ok_or_else(|| format!("unsupported JSONPath filter {filter:?}"))?
                        .split('.')
                        .map(str::to_owned)
                        .collect();
                    let value = right
                        .trim()
                        .trim_matches(|c| c == '"' || c == '\'')
                        .to_owned();
                    steps.push(Step::Filter { field, value });
                } else if (inner.starts_with('\'') && inner.ends_with('\''))
                    || (inner.starts_with('"') && inner.ends_with('"'))
                {
                    steps.push(Step::Field(inner[1..inner.len() - 1].to_owned()));
                } else {
                    let position = inner
                        .parse()
                        .map_err(|_| format!("unsupported JSONPath index {inner:?}"))?;
                    steps.push(Step::Index(position));
                }
                index = end + 1;
            }
            other => return Err(format!("unexpected {other:?} in JSONPath {path:?}")),
        }
    }
    Ok(steps)
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Every value the path selects.
pub fn all(object: &Value, path: &str) -> Vec<Value> {
    let Ok(steps) = parse(path) else {
        return Vec::new();
    };
    let mut current = vec![object.clone()];
    for step in steps {
        let mut next = Vec::new();
        for value in current {
            match &step {
                Step::Field(field) => {
                    if let Some(child) = value.get(field) {
                        next.push(child.clone());
                    }
                }
                Step::Index(position) => {
                    if let Some(child) = value.get(*position) {
                        next.push(child.clone());
                    }
                }
                Step::All => match value {
                    Value::Array(items) => next.extend(items),
                    Value::Object(fields) => {
                        next.extend(fields.into_iter().map(|(_, child)| child))
                    }
                    _ => {}
                },
                Step::Filter {
                    field,
                    value: wanted,
                } => {
                    if let Value::Array(items) = value {
                        next.extend(items.into_iter().filter(|item| {
                            let mut found = item;
                            for segment in field {
                                found = &found[segment.as_str()];
                            }
                            !found.is_null() && scalar_text(found) == *wanted
                        }));
                    }
                }
            }
        }
        current = next;
    }
    current
}

/// The first value the path selects.
pub fn first(object: &Value, path: &str) -> Option<Value> {
    all(object, path).into_iter().next()
}

/// Sets a plain field path (`.spec.replicas`), creating objects on the way.
pub fn set(object: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let steps = parse(path)?;
    let mut current = object;
    for step in steps {
        match step {
            Step::Field(field) => {
                if !current.is_object() {
                    *current = Value::Object(serde_json::Map::new());
                }
                current = current
                    .as_object_mut()
                    .map(|fields| fields.entry(field).or_insert(Value::Null))
                    .ok_or_else(|| format!("cannot set {path:?}"))?;
            }
            _ => return Err(format!("cannot set through a list in {path:?}")),
        }
    }
    *current = value;
    Ok(())
}
