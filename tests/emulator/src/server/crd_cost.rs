//! The cost check a real API server (Kubernetes 1.28) makes of a CRD's CEL
//! rules when the CRD is created or updated, before any custom resource exists:
//! each rule's estimated worst-case cost ([`super::cel_cost`]) times the number
//! of times the rule can run in one object (its cardinality) must stay within
//! [`STATIC_ESTIMATED_COST_LIMIT`], and the rules of one schema together within
//! [`STATIC_ESTIMATED_CRD_COST_LIMIT`].
//!
//! The cardinality of a rule is the product of the `maxItems`/`maxProperties` of
//! every list and map above it; when one of them has no bound, it is instead the
//! request-size ceiling (3 MiB) divided by one more than the smallest JSON the
//! rule's own node can serialize to. A `messageExpression` is costed once, not
//! times the cardinality, as the server does. Paths and messages are the
//! server's: `spec.validation.openAPIV3Schema` when every version has the same
//! schema (the server moves it there), else `spec.versions[<i>].schema.openAPIV3Schema`;
//! then `.properties[<name>]`, `.items`, `.additionalProperties`, and
//! `.x-kubernetes-validations[<i>].rule`. A rule the estimator does not understand
//! is refused (see [`super::cel_cost`]), never let through uncosted.
//!
//! With the costs, as the server does, a transition rule (one reading `oldSelf`)
//! is refused below the items of a list other than `x-kubernetes-list-type: map`,
//! whose items the server cannot match with the old object's.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::cel_cost::{self, Decl, Kind, MAX_REQUEST_SIZE_BYTES, Refusal};
use super::errors::Cause;
use super::validation::cause;

/// The largest estimated cost of one rule (`StaticEstimatedCostLimit`).
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// The largest estimated cost of all rules of one schema (`StaticEstimatedCRDCostLimit`).
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;

/// The rules named among the contributors when the total is over its limit: at
/// most this many, each at least 1% of the limit.
const MOST_EXPENSIVE_SHOWN: usize = 4;

/// The cost problems of a CRD (`apiextensions.k8s.io/v1`): one cause per rule
/// over its limit or not estimable, and, per schema over the total, one per
/// most expensive rule and one for the schema.
pub fn check(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(versions) = crd["spec"]["versions"].as_array() else {
        return causes;
    };
    let schemas: Vec<Option<&Value>> = versions
        .iter()
        .map(|version| version["schema"].get("openAPIV3Schema"))
        .collect();
    let identical = schemas.windows(2).all(|pair| pair[0] == pair[1]);
    if identical {
        if let Some(Some(schema)) = schemas.first() {
            check_schema(schema, "spec.validation.openAPIV3Schema", &mut causes);
        }
    } else {
        for (index, schema) in schemas.iter().enumerate() {
            if let Some(schema) = schema {
                check_schema(
                    schema,
                    &format!("spec.versions[{index}].schema.openAPIV3Schema"),
                    &mut causes,
                );
            }
        }
    }
    causes
}

/// The rules of one schema and what they cost together.
#[derive(Default)]
struct Total {
    cost: u64,
    /// The dearest rules (at least 1% of the total limit), dearest first.
    most_expensive: Vec<(String, u64)>,
}

impl Total {
    fn observe(&mut self, path: String, cost: u64) {
        self.cost = self.cost.saturating_add(cost);
        if cost < STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((path, cost));
        // Stable: of equal costs, the rule met first stays first.
        self.most_expensive
            .sort_by_key(|(_, cost)| std::cmp::Reverse(*cost));
        self.most_expensive.truncate(MOST_EXPENSIVE_SHOWN);
    }
}

fn check_schema(schema: &Value, base: &str, causes: &mut Vec<Cause>) {
    let mut total = Total::default();
    let place = Place {
        path: base,
        cardinality: Some(1),
        root: true,
        uncorrelatable: None,
    };
    walk(schema, place, &mut total, causes);
    if total.cost > STATIC_ESTIMATED_CRD_COST_LIMIT {
        for (path, _) in &total.most_expensive {
            causes.push(forbidden(
                path,
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
                    .into(),
            ));
        }
        causes.push(forbidden(
            base,
            cost_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total.cost,
                STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
}

/// Where a schema node is in its CRD, as the checks of its rules need it.
#[derive(Clone, Copy)]
struct Place<'a> {
    path: &'a str,
    /// How often the node can occur in one object; `None` when a list or map
    /// above it is unbounded.
    cardinality: Option<u64>,
    root: bool,
    /// The highest list above the node whose items a server cannot match with
    /// the old object's (any list but `x-kubernetes-list-type: map`): no rule
    /// below it may read `oldSelf`.
    uncorrelatable: Option<&'a str>,
}

impl<'a> Place<'a> {
    /// A child node at `path`, occurring `cardinality` times.
    fn child<'b>(&self, path: &'b str, cardinality: Option<u64>) -> Place<'b>
    where
        'a: 'b,
    {
        Place {
            path,
            cardinality,
            root: false,
            uncorrelatable: self.uncorrelatable,
        }
    }
}

/// Visits `schema` at `path`: its rules, then its map values, properties and items,
/// in the server's order.
fn walk(schema: &Value, place: Place<'_>, total: &mut Total, causes: &mut Vec<Cause>) {
    let path = place.path;
    if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
        check_rules(schema, rules, place, total, causes);
    }
    let cardinality = place.cardinality.and_then(|cardinality| {
        max_elements(schema).map(|factor| cardinality.saturating_mul(factor))
    });
    if let Some(values) = schema
        .get("additionalProperties")
        .filter(|values| values.is_object())
    {
        walk(
            values,
            place.child(&format!("{path}.additionalProperties"), cardinality),
            total,
            causes,
        );
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            walk(
                property,
                place.child(&format!("{path}.properties[{name}]"), cardinality),
                total,
                causes,
            );
        }
    }
    // Items are matched with the old object's only in a list of type map.
    let uncorrelatable = match schema["x-kubernetes-list-type"].as_str() {
        Some("map") => place.uncorrelatable,
        _ => place.uncorrelatable.or(Some(path)),
    };
    match schema.get("items") {
        Some(items @ Value::Object(_)) => {
            let items_path = format!("{path}.items");
            let place = Place {
                uncorrelatable,
                ..place.child(&items_path, cardinality)
            };
            walk(items, place, total, causes);
        }
        Some(Value::Array(schemas)) => {
            for (index, items) in schemas.iter().enumerate() {
                let items_path = format!("{path}.items[{index}]");
                let place = Place {
                    uncorrelatable,
                    ..place.child(&items_path, cardinality)
                };
                walk(items, place, total, causes);
            }
        }
        _ => {}
    }
}

fn check_rules(
    schema: &Value,
    rules: &[Value],
    place: Place<'_>,
    total: &mut Total,
    causes: &mut Vec<Cause>,
) {
    let Place {
        path,
        cardinality,
        root,
        uncorrelatable,
    } = place;
    let embedded = schema["x-kubernetes-embedded-resource"].as_bool() == Some(true);
    let Some(self_type) = schema_decl(schema, root || embedded) else {
        causes.push(cause(
            "InternalError",
            &format!("{path}.x-kubernetes-validations"),
            "Internal error: internal error: failed to construct type information for x-kubernetes-validations rules: unable to convert structural schema to CEL declarations".into(),
        ));
        return;
    };
    // Under an unbounded list or map, the rule runs at most as often as its node
    // fits in a request, each occurrence followed by a comma.
    let cardinality = cardinality.unwrap_or_else(|| {
        (MAX_REQUEST_SIZE_BYTES / (self_type.min_size.max(0) + 1)).max(0) as u64
    });
    for (index, rule) in rules.iter().enumerate() {
        let rule_path = format!("{path}.x-kubernetes-validations[{index}]");
        let expression = rule["rule"].as_str().unwrap_or_default();
        if !expression.trim().is_empty() {
            match cel_cost::estimate(expression, &self_type) {
                Ok(estimate) if !matches!(estimate.result.kind, Kind::Bool | Kind::Dyn) => {
                    causes.push(invalid(
                        &format!("{rule_path}.rule"),
                        expression,
                        "cel expression must evaluate to a bool",
                    ));
                }
                Ok(estimate) => {
                    let cost = estimate.max_cost.saturating_mul(cardinality);
                    if cost > STATIC_ESTIMATED_COST_LIMIT {
                        causes.push(forbidden(
                            &format!("{rule_path}.rule"),
                            cost_message("estimated rule cost", cost, STATIC_ESTIMATED_COST_LIMIT),
                        ));
                    }
                    total.observe(format!("{rule_path}.rule"), cost);
                    if estimate.transition
                        && let Some(within) = uncorrelatable
                    {
                        causes.push(invalid(
                            &format!("{rule_path}.rule"),
                            expression,
                            &format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"),
                        ));
                    }
                }
                Err(refusal) => {
                    causes.push(refused(&format!("{rule_path}.rule"), expression, refusal))
                }
            }
        }
        let Some(message_expression) = rule["messageExpression"]
            .as_str()
            .filter(|text| !text.trim().is_empty())
        else {
            continue;
        };
        let field = format!("{rule_path}.messageExpression");
        match cel_cost::estimate(message_expression, &self_type) {
            Ok(estimate) if !matches!(estimate.result.kind, Kind::String | Kind::Dyn) => {
                causes.push(invalid(
                    &field,
                    message_expression,
                    "messageExpression must evaluate to a string",
                ));
            }
            Ok(estimate) => {
                if estimate.max_cost > STATIC_ESTIMATED_COST_LIMIT {
                    causes.push(forbidden(
                        &field,
                        cost_message(
                            "estimated messageExpression cost",
                            estimate.max_cost,
                            STATIC_ESTIMATED_COST_LIMIT,
                        ),
                    ));
                }
                total.observe(field, estimate.max_cost);
            }
            Err(refusal) => causes.push(refused(&field, message_expression, refusal)),
        }
    }
}

/// How many times each child of `schema` can occur per occurrence of `schema`:
/// a list's `maxItems`, a map's `maxProperties` (`None`: unbounded), else 1.
fn max_elements(schema: &Value) -> Option<u64> {
    let bound = |name: &str| {
        schema
            .get(name)
            .and_then(integer)
            .map(|value| value.max(0) as u64)
    };
    match schema["type"].as_str() {
        Some("object") if schema.get("additionalProperties").is_some() => bound("maxProperties"),
        Some("array") => bound("maxItems"),
        _ => Some(1),
    }
}

/// A JSON number as an integer (bounds may be written `100` or `100.0`).
fn integer(value: &Value) -> Option<i64> {
    value
        .as_i64()
        .or_else(|| value.as_f64().map(|number| number as i64))
}

/// The server's wording of a cost over its limit: the factor with six decimals
/// under 1.5, one decimal up to 100, else "more than 100x".
pub(super) fn cost_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

fn forbidden(field: &str, detail: String) -> Cause {
    cause("FieldValueForbidden", field, format!("Forbidden: {detail}"))
}

fn invalid(field: &str, expression: &str, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {expression:?}: {detail}"),
    )
}

fn refused(field: &str, expression: &str, refusal: Refusal) -> Cause {
    let detail = match refusal {
        Refusal::Compile(detail) => format!("compilation failed: {detail}"),
        Refusal::Unsupported(what) => format!(
            "the emulator cannot estimate the cost of {what} (tests/emulator/src/server/cel_cost.rs); a real API server may accept this rule, so teach the estimator or write the rule with what it knows"
        ),
    };
    invalid(field, expression, &detail)
}

/// The CEL type of a schema node, as the server declares it for rules
/// (`SchemaDeclType`): `None` for what rules cannot see (no type, a list without
/// items). `resource_root` adds `apiVersion`, `kind` and `metadata.name`/
/// `generateName`, as at the root of a resource.
pub(super) fn schema_decl(schema: &Value, resource_root: bool) -> Option<Arc<Decl>> {
    let unbounded_string = MAX_REQUEST_SIZE_BYTES - 2;
    if schema["x-kubernetes-int-or-string"].as_bool() == Some(true) {
        return Some(Arc::new(Decl {
            kind: Kind::Dyn,
            max_elements: unbounded_string,
            min_size: 1,
        }));
    }
    if resource_root {
        return schema_decl(&with_type_and_object_meta(schema), false);
    }
    let embedded = |child: &Value| child["x-kubernetes-embedded-resource"].as_bool() == Some(true);
    let bound = |name: &str| schema.get(name).and_then(integer).map(|value| value.max(0));
    let decl = |kind, max_elements, min_size| {
        Some(Arc::new(Decl {
            kind,
            max_elements,
            min_size,
        }))
    };
    match schema["type"].as_str()? {
        "array" => {
            let items = schema.get("items").filter(|items| items.is_object())?;
            let element = schema_decl(items, embedded(items))?;
            // A list with no bound holds as many of its smallest items as fit in
            // a request, each followed by a comma.
            let max_items =
                bound("maxItems").unwrap_or_else(|| unbounded_string / (element.min_size + 1));
            decl(Kind::List(element), max_items, 2)
        }
        "object" => {
            if let Some(values) = schema
                .get("additionalProperties")
                .filter(|values| values.is_object())
            {
                let value = schema_decl(values, embedded(values))?;
                // Each entry is at least `"":` with a comma and its smallest value.
                let max_properties = bound("maxProperties")
                    .unwrap_or_else(|| unbounded_string / (value.min_size + 6));
                let key = Decl::plain(Kind::String);
                return decl(Kind::Map(key, value), max_properties, 2);
            }
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut fields = BTreeMap::new();
            let mut min_size = 2;
            for (name, property) in schema["properties"].as_object().into_iter().flatten() {
                let Some(field) = schema_decl(property, embedded(property)) else {
                    continue;
                };
                // A required field without a default is always serialized.
                if required.contains(&name.as_str()) && property.get("default").is_none() {
                    min_size += name.len() as i64 + field.min_size + 4;
                }
                if let Some(escaped) = escape(name) {
                    fields.insert(escaped, field);
                }
            }
            decl(Kind::Object(fields), 0, min_size)
        }
        "string" => match schema["format"].as_str() {
            Some("byte") => decl(
                Kind::Bytes,
                bound("maxLength").unwrap_or(unbounded_string),
                2,
            ),
            Some("duration") => decl(Kind::Duration, 32, 3),
            Some("date") => decl(Kind::Timestamp, 12, 12),
            Some("date-time") => decl(Kind::Timestamp, 32, 21),
            // maxLength counts characters; a character takes up to four bytes.
            _ => decl(
                Kind::String,
                bound("maxLength").map_or(unbounded_string, |length| length.saturating_mul(4)),
                2,
            ),
        },
        "boolean" => decl(Kind::Bool, 0, 4),
        "number" => decl(Kind::Double, 0, 1),
        "integer" => decl(Kind::Int, 0, 1),
        _ => None,
    }
}

/// The root of a resource as rules see it: `apiVersion` and `kind` strings, and a
/// `metadata` with only `name` and `generateName`, unless the schema declares all
/// of them as such.
fn with_type_and_object_meta(schema: &Value) -> Value {
    let properties = &schema["properties"];
    let typed = |value: &Value, ty: &str| value["type"].as_str() == Some(ty);
    let metadata = &properties["metadata"];
    if typed(&properties["kind"], "string")
        && typed(&properties["apiVersion"], "string")
        && typed(metadata, "object")
        && typed(&metadata["properties"]["name"], "string")
        && typed(&metadata["properties"]["generateName"], "string")
    {
        return schema.clone();
    }
    let mut result = schema.clone();
    let mut added = properties.as_object().cloned().unwrap_or_else(Map::new);
    added.insert("kind".into(), json!({"type": "string"}));
    added.insert("apiVersion".into(), json!({"type": "string"}));
    added.insert(
        "metadata".into(),
        json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "generateName": {"type": "string"}
        }}),
    );
    if let Some(fields) = result.as_object_mut() {
        fields.insert("properties".into(), Value::Object(added));
    }
    result
}

/// Words CEL reserves: a property so named is `__<word>__` in a rule.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property's name in CEL (`a-b` is `a__dash__b`), or `None` when a rule cannot
/// name it (it then is not visible to rules).
fn escape(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'))
    {
        return None;
    }
    Some(
        name.replace("__", "__underscores__")
            .replace('.', "__dot__")
            .replace('-', "__dash__")
            .replace('/', "__slash__"),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{STATIC_ESTIMATED_COST_LIMIT, check, cost_message};
    use crate::server::errors::Cause;

    const HINT: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";

    fn crd(schema: Value) -> Value {
        json!({
            "metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "gadgets", "kind": "Gadget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema}}]}
        })
    }

    fn listed(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|cause| format!("{}: {}", cause.field, cause.message))
            .collect()
    }

    /// A list of `max_items` (unbounded: `None`) objects whose `name` (no
    /// `maxLength`) a rule on each item compares: 3 per item.
    fn listed_names(max_items: Option<u64>) -> Value {
        let mut list = json!({"type": "array", "items": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "self.name == 'a'"}]
        }});
        if let Some(max_items) = max_items {
            list["maxItems"] = json!(max_items);
        }
        list
    }

    #[test]
    fn the_old_deploymentplan_crd_is_refused_with_the_real_servers_reason() {
        let fixture = include_str!("../../tests/fixtures/deploymentplan-crd-unbounded.yaml");
        let crd: Value = serde_saphyr::from_str(fixture).expect("the fixture is YAML");
        assert_eq!(
            listed(&check(&crd)),
            vec![format!(
                "spec.validation.openAPIV3Schema.properties[status].properties[deployments].items.properties[rollout].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.153434x {HINT}"
            )]
        );
    }

    #[test]
    fn the_current_swarm_crd_is_accepted() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests/crd.yaml");
        let text = std::fs::read_to_string(path).expect("manifests/crd.yaml is readable");
        let crd: Value = serde_saphyr::from_str(&text).expect("the manifest is YAML");
        assert_eq!(listed(&check(&crd)), Vec::<String>::new());
    }

    #[test]
    fn a_rule_under_a_bounded_list_runs_max_items_times() {
        // 3 * 3,333,333 = 9,999,999: within the limit; one more item is over it.
        let within = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": listed_names(Some(3_333_333))}}
        }}));
        assert_eq!(listed(&check(&within)), Vec::<String>::new());
        let over = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": listed_names(Some(3_333_334))}}
        }}));
        assert_eq!(
            listed(&check(&over)),
            vec![format!(
                "spec.validation.openAPIV3Schema.properties[spec].properties[items].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.000000x {HINT}"
            )]
        );
    }

    #[test]
    fn under_an_unbounded_list_a_rule_runs_as_often_as_its_smallest_node_fits_in_a_request() {
        // An item is at least `{}` and a comma: 3 MiB / 3 = 1,048,576 items, 3 each.
        let unbounded = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": listed_names(None)}}
        }}));
        assert_eq!(listed(&check(&unbounded)), Vec::<String>::new());
        // Five comparisons, 15 per item: 15,728,640 is over the limit (1.57, printed 1.6).
        let mut dear = listed_names(None);
        dear["items"]["x-kubernetes-validations"] = json!([
            {"rule": "self.name == 'a' || self.name == 'b' || self.name == 'c' || self.name == 'd' || self.name == 'e'"}
        ]);
        let schema = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": dear.clone()}}
        }}));
        assert_eq!(
            listed(&check(&schema)),
            vec![format!(
                "spec.validation.openAPIV3Schema.properties[spec].properties[items].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.6x {HINT}"
            )]
        );
        // A required name (no default) makes each item at least `{"name":""}` and a
        // comma, 13 bytes: 241,979 items, 3,629,685 in all.
        dear["items"]["required"] = json!(["name"]);
        let schema = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": dear}}
        }}));
        assert_eq!(listed(&check(&schema)), Vec::<String>::new());
    }

    #[test]
    fn rules_within_their_own_limit_are_refused_together_over_the_schemas_total() {
        // Twelve lists of items costing 3 each, 9,000,000 to 9,033,000 per rule:
        // 108,198,000 in all. The four dearest are named.
        let mut properties = serde_json::Map::new();
        for index in 0..12u64 {
            properties.insert(
                format!("list{index:02}"),
                listed_names(Some(3_000_000 + index * 1_000)),
            );
        }
        let schema = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": properties}
        }}));
        let rule = |list: &str| {
            format!(
                "spec.validation.openAPIV3Schema.properties[spec].properties[{list}].items.x-kubernetes-validations[0].rule: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
            )
        };
        assert_eq!(
            listed(&check(&schema)),
            vec![
                rule("list11"),
                rule("list10"),
                rule("list09"),
                rule("list08"),
                format!(
                    "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of 1.081980x {HINT}"
                ),
            ]
        );
    }

    #[test]
    fn versions_with_different_schemas_are_checked_each_under_its_own_path() {
        let mut crd = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": listed_names(Some(10))}}
        }}));
        let mut second = crd["spec"]["versions"][0].clone();
        second["name"] = json!("v2");
        second["storage"] = json!(false);
        second["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["items"] =
            listed_names(Some(4_000_000));
        crd["spec"]["versions"]
            .as_array_mut()
            .expect("versions")
            .push(second);
        assert_eq!(
            listed(&check(&crd)),
            vec![format!(
                "spec.versions[1].schema.openAPIV3Schema.properties[spec].properties[items].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.200000x {HINT}"
            )]
        );
    }

    #[test]
    fn a_message_expression_is_costed_once_not_per_occurrence() {
        let mut list = listed_names(Some(3_000_000));
        list["items"]["x-kubernetes-validations"][0]["messageExpression"] =
            json!("'name ' + self.name + ' is not a'");
        let schema = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": list}}
        }}));
        assert_eq!(listed(&check(&schema)), Vec::<String>::new());
    }

    #[test]
    fn a_rule_the_estimator_cannot_cost_is_refused_naming_what_it_did_not_understand() {
        let schema = crd(json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 10}},
            "x-kubernetes-validations": [{"rule": "self.name.reverse() == 'a'"}]
        }}}));
        let causes = check(&schema);
        assert_eq!(causes.len(), 1, "{:?}", listed(&causes));
        assert_eq!(
            causes[0].field,
            "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
        );
        assert!(
            causes[0]
                .message
                .contains("the emulator cannot estimate the cost of the function 'reverse'"),
            "{}",
            causes[0].message
        );
    }

    #[test]
    fn a_transition_rule_is_refused_below_list_items_the_server_cannot_match_with_old_ones() {
        let named = |list_type: Option<&str>| {
            let mut list = json!({"type": "array", "items": {"type": "object",
                "properties": {"name": {"type": "string", "maxLength": 10,
                    "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}});
            if let Some(list_type) = list_type {
                list["x-kubernetes-list-type"] = json!(list_type);
                list["x-kubernetes-list-map-keys"] = json!(["name"]);
                list["items"]["required"] = json!(["name"]);
            }
            crd(
                json!({"type": "object", "properties": {"spec": {"type": "object",
                "properties": {"outer": {"type": "array", "maxItems": 4, "items": {
                    "type": "object", "required": ["key"],
                    "properties": {"key": {"type": "string"}, "l": list}}}}}}}),
            )
        };
        let field = "spec.validation.openAPIV3Schema.properties[spec].properties[outer].items.properties[l].items.properties[name].x-kubernetes-validations[0].rule";
        // The highest such list is named, whatever the lists below it are.
        assert_eq!(
            listed(&check(&named(Some("map")))),
            listed(&check(&named(None)))
        );
        assert_eq!(
            listed(&check(&named(None))),
            vec![format!(
                "{field}: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[spec].properties[outer]"
            )]
        );
        let mut outer_map = named(Some("map"));
        let outer = &mut outer_map["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"]["outer"];
        outer["x-kubernetes-list-type"] = json!("map");
        outer["x-kubernetes-list-map-keys"] = json!(["key"]);
        assert_eq!(listed(&check(&outer_map)), Vec::<String>::new());
    }

    /// Where a probe's node sits: at the root, as the items of a list `spec.l` of
    /// at most so many, or of a list without `maxItems`.
    #[derive(Clone, Copy)]
    enum Under {
        Root,
        Items(u64),
        Unbounded,
    }

    /// Rules applied with `kubectl apply --dry-run=server` to a real kube-apiserver
    /// v1.28.7 (tag, place, node schema, rule, messageExpression) and what it
    /// answered, without the advice that ends each cost message (`None`: accepted).
    #[allow(clippy::type_complexity)]
    const PROBES: &[(&str, Under, &str, &str, &str, Option<&[&str]>)] = &[
        (
            "rootmeta",
            Under::Root,
            r#"{"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}}"#,
            "self.metadata.name.matches('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.006634x",
            ]),
        ),
        (
            "rootkind",
            Under::Root,
            r#"{"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}}"#,
            "self.kind == 'x' && self.apiVersion != 'y' && self.metadata.generateName == 'z'",
            "",
            None,
        ),
        (
            "values",
            Under::Items(1000000),
            r#"{"type": "object", "properties": {"m": {"type": "object", "maxProperties": 10, "additionalProperties": {"type": "string", "maxLength": 5}}}}"#,
            "self.m.all(k, self.m[k] == 'abc')",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 8.3x",
            ]),
        ),
        (
            "inlist",
            Under::Items(10000),
            r#"{"type": "object", "properties": {"l": {"type": "array", "maxItems": 1000, "items": {"type": "string"}}}}"#,
            "'a' in self.l",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.002000x",
            ]),
        ),
        (
            "inmap",
            Under::Items(3000000),
            r#"{"type": "object", "properties": {"m": {"type": "object", "maxProperties": 10, "additionalProperties": {"type": "string", "maxLength": 5}}}}"#,
            "'a' in self.m",
            "",
            None,
        ),
        (
            "unbmap",
            Under::Items(30),
            r#"{"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "integer"}}}}"#,
            "self.all(k, has(self[k].x))",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 8.3x",
            ]),
        ),
        (
            "unbmap2",
            Under::Items(10),
            r#"{"type": "object", "additionalProperties": {"type": "integer"}}"#,
            "self.all(k, self[k] > 0)",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 3.1x",
            ]),
        ),
        (
            "mapall",
            Under::Items(2),
            r#"{"type": "object", "properties": {"l": {"type": "array", "maxItems": 100, "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}}}}}"#,
            "self.l.map(x, x.name).all(n, n == 'a')",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x",
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x",
            ]),
        ),
        (
            "filter",
            Under::Items(50000),
            r#"{"type": "object", "properties": {"l": {"type": "array", "maxItems": 100, "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}}}}}"#,
            "self.l.filter(x, x.name.startsWith('a')).size() < 3",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 8.1x",
            ]),
        ),
        (
            "map3",
            Under::Items(50000),
            r#"{"type": "object", "properties": {"l": {"type": "array", "maxItems": 100, "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}}}}}"#,
            "self.l.map(x, x.name != 'b', x.name).size() < 3",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 8.6x",
            ]),
        ),
        (
            "existsone",
            Under::Items(10000),
            r#"{"type": "object", "properties": {"l": {"type": "array", "maxItems": 100, "items": {"type": "string", "maxLength": 20}}}}"#,
            "self.l.exists_one(x, x == 'a')",
            "",
            None,
        ),
        (
            "contains",
            Under::Items(100000),
            r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}, "b": {"type": "string", "maxLength": 50}}}"#,
            "self.a.contains(self.b)",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 8.0x",
            ]),
        ),
        (
            "ends",
            Under::Items(500000),
            r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}, "b": {"type": "string", "maxLength": 50}}}"#,
            "self.a.endsWith(self.b) || self.a.startsWith('xyz')",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.350000x",
            ]),
        ),
        (
            "lower",
            Under::Items(300000),
            r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}}}"#,
            "self.a.lowerAscii() == 'abc' && self.a.trim().size() > 2",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 2.6x",
            ]),
        ),
        (
            "substr",
            Under::Items(200000),
            r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}}}"#,
            "self.a.upperAscii().substring(1) == 'abc'",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.7x",
            ]),
        ),
        (
            "intstr",
            Under::Items(10),
            r#"{"type": "object", "properties": {"a": {"x-kubernetes-int-or-string": true}}}"#,
            "type(self.a) == string ? self.a.matches('^[0-9]+%$') : self.a < 100",
            "",
            None,
        ),
        (
            "embedded",
            Under::Items(1000000),
            r#"{"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true, "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}}"#,
            "self.metadata.name == 'a' && self.spec.a == 'b'",
            "",
            None,
        ),
        (
            "transition",
            Under::Unbounded,
            r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}}}"#,
            "self.name == oldSelf.name",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.7x",
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Invalid value: \"self.name == oldSelf.name\": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[spec].properties[l]",
            ]),
        ),
        (
            "nestedlist",
            Under::Items(1),
            r#"{"type": "object", "properties": {"l": {"type": "array", "maxItems": 50, "items": {"type": "array", "items": {"type": "string", "maxLength": 10}}}}}"#,
            "self.l.all(i, i.all(s, s.size() < 5))",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 31.5x",
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of 3.1x",
            ]),
        ),
        (
            "listadd",
            Under::Items(50000),
            r#"{"type": "object", "properties": {"a": {"type": "array", "maxItems": 20, "items": {"type": "string", "maxLength": 4}}, "b": {"type": "array", "maxItems": 30, "items": {"type": "string", "maxLength": 4}}}}"#,
            "(self.a + self.b).exists(x, x == 'q')",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.280000x",
            ]),
        ),
        (
            "strcat",
            Under::Items(200000),
            r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}, "b": {"type": "string", "maxLength": 50}}}"#,
            "self.a + '-' + self.b != 'x'",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 2.1x",
            ]),
        ),
        (
            "ternary",
            Under::Items(1000000),
            r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}, "b": {"type": "string", "maxLength": 50}}}"#,
            "(has(self.a) ? self.a : self.b) == 'hello world'",
            "",
            None,
        ),
        (
            "dates",
            Under::Items(1000000),
            r#"{"type": "object", "properties": {"t": {"type": "string", "format": "date-time"}, "d": {"type": "string", "format": "duration"}, "day": {"type": "string", "format": "date"}, "by": {"type": "string", "format": "byte", "maxLength": 8}}}"#,
            "self.t < timestamp('2020-01-01T00:00:00Z') && self.d > duration('1s') && self.day == self.day && self.by.size() > 1",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.8x",
            ]),
        ),
        (
            "lits",
            Under::Items(500000),
            r#"{"type": "object", "properties": {"a": {"type": "integer"}}}"#,
            "self.a in [1, 2, 3] && {'x': 1}['x'] == self.a",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 2.4x",
            ]),
        ),
        (
            "msgexpr",
            Under::Items(3000000),
            r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}}}"#,
            "self.a != 'x'",
            "'bad ' + self.a",
            None,
        ),
        (
            "unbounded-in-map",
            Under::Unbounded,
            r#"{"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"q": {"type": "string"}}}}}}"#,
            "self.m.all(k, self.m[k].q == k)",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x",
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x",
            ]),
        ),
        (
            "sets",
            Under::Items(100),
            r#"{"type": "object", "properties": {"l": {"type": "array", "maxItems": 1000, "x-kubernetes-list-type": "set", "items": {"type": "string", "maxLength": 63}}}}"#,
            "self.l.all(x, x.matches('^[a-z]+$'))",
            "",
            None,
        ),
        (
            "dyncmp",
            Under::Items(10),
            r#"{"type": "object", "properties": {"a": {"x-kubernetes-int-or-string": true}, "b": {"x-kubernetes-int-or-string": true}}}"#,
            "self.a < self.b",
            "",
            None,
        ),
        (
            "dynadd",
            Under::Items(10),
            r#"{"type": "object", "properties": {"a": {"x-kubernetes-int-or-string": true}, "b": {"x-kubernetes-int-or-string": true}}}"#,
            "self.a + self.b == self.b",
            "",
            None,
        ),
        (
            "negate",
            Under::Items(1000000),
            r#"{"type": "object", "properties": {"a": {"type": "integer"}, "d": {"type": "number"}}}"#,
            "-self.a < 0 && self.d * 2.0 > 1.0 && self.a % 2 == 0 && int(self.d) == self.a && double(self.a) == self.d && string(self.a) == 'x'",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 2.6x",
            ]),
        ),
        (
            "bytesconv",
            Under::Items(1000000),
            r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}, "by": {"type": "string", "format": "byte", "maxLength": 64}}}"#,
            "bytes(self.a) == self.by && string(self.by) == self.a",
            "",
            Some(&[
                "spec.validation.openAPIV3Schema.properties[spec].properties[l].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 6.9x",
            ]),
        ),
    ];

    #[test]
    fn each_kind_of_expression_costs_what_a_real_v1_28_7_server_says() {
        for (tag, under, node, rule, message, expected) in PROBES {
            let mut node: Value = serde_json::from_str(node).expect("a probe's schema is JSON");
            let mut validation = json!({"rule": rule});
            if !message.is_empty() {
                validation["messageExpression"] = json!(message);
            }
            node["x-kubernetes-validations"] = json!([validation]);
            let in_spec = |inner: Value| {
                json!({"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"l": inner}}}})
            };
            let schema = match *under {
                Under::Root => node,
                Under::Items(max_items) => {
                    in_spec(json!({"type": "array", "maxItems": max_items, "items": node}))
                }
                Under::Unbounded => in_spec(json!({"type": "array", "items": node})),
            };
            let advice = format!(" {HINT}");
            let answered: Vec<String> = listed(&check(&crd(schema)))
                .into_iter()
                .map(|cause| cause.trim_end_matches(&advice).to_owned())
                .collect();
            let expected: Vec<String> = expected
                .unwrap_or_default()
                .iter()
                .map(|cause| (*cause).to_owned())
                .collect();
            assert_eq!(answered, expected, "probe {tag}: {rule}");
        }
    }

    #[test]
    fn the_factor_is_printed_as_the_server_prints_it() {
        let factor = |cost| {
            let message = cost_message("estimated rule cost", cost, STATIC_ESTIMATED_COST_LIMIT);
            message
                .trim_start_matches("estimated rule cost exceeds budget by factor of ")
                .trim_end_matches(HINT)
                .trim_end()
                .to_owned()
        };
        assert_eq!(factor(11_534_336), "1.153434x");
        assert_eq!(factor(14_999_999), "1.500000x");
        assert_eq!(factor(15_000_000), "1.5x");
        assert_eq!(factor(1_000_000_000), "100.0x");
        assert_eq!(factor(1_000_000_001), "more than 100x");
    }
}
