//! The deployment status document: the seed's draft examples and the
//! released shape parse, semantic validation names each problem, and every
//! document Shoal writes validates against the published JSON Schema.

use serde_json::{Value, json};
use shoal_core::deploy::status::{
    ComponentInput, DeploymentState, DocumentError, ParseError, SCHEMA, StatusError, document_for,
    parse_document, parse_json_document, validate,
};

const SEED_ID: &str = "3a5549f2-02a4-4faf-9bc4-1ea9866684c1";

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/margo/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn seed_components() -> Vec<String> {
    vec!["digitron-orchestrator".into(), "database-services".into()]
}

/// The subset of JSON Schema the published schema uses: `type`, `required`,
/// `properties`, `items`, `enum`, `minLength` and local `$ref`s. Returns
/// every violation with its JSON pointer.
fn schema_violations(schema_root: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let target = schema_root
            .pointer(reference.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("unresolved $ref {reference}"));
        return schema_violations(schema_root, target, value, at);
    }
    let mut problems = Vec::new();
    if let Some(kind) = schema["type"].as_str() {
        let fits = match kind {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            other => panic!("schema type {other} not handled by this checker"),
        };
        if !fits {
            return vec![format!("{at}: not a {kind}: {value}")];
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        problems.push(format!("{at}: {value} not in {allowed:?}"));
    }
    if let (Some(min), Some(text)) = (schema["minLength"].as_u64(), value.as_str())
        && (text.chars().count() as u64) < min
    {
        problems.push(format!("{at}: shorter than {min}"));
    }
    for required in schema["required"].as_array().into_iter().flatten() {
        let name = required.as_str().expect("required names are strings");
        if value.get(name).is_none() {
            problems.push(format!("{at}: {name} is required"));
        }
    }
    if let (Some(properties), Some(object)) = (schema["properties"].as_object(), value.as_object())
    {
        for (name, property) in properties {
            if let Some(field) = object.get(name) {
                problems.extend(schema_violations(
                    schema_root,
                    property,
                    field,
                    &format!("{at}/{name}"),
                ));
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (index, item) in array.iter().enumerate() {
            problems.extend(schema_violations(
                schema_root,
                items,
                item,
                &format!("{at}/{index}"),
            ));
        }
    }
    problems
}

fn violations(document: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(SCHEMA).expect("the published schema is JSON");
    schema_violations(&schema, &schema, document, "")
}

#[test]
fn the_seeds_draft_examples_parse_into_the_released_shape() {
    let expected_states = [
        ("installing", ["installed", "installing"]),
        ("installed", ["installed", "installed"]),
        ("failed", ["installed", "failed"]),
        ("failed", ["pending", "pending"]),
    ];
    for (number, (overall, components)) in (1..=4).zip(expected_states) {
        let text = fixture(&format!("draft-example-{number}.yaml"));
        let document = parse_document(&text).unwrap_or_else(|e| panic!("example {number}: {e}"));
        assert_eq!(document.deployment_id, SEED_ID, "example {number}");
        assert_eq!(document.status.state, overall, "example {number}");
        let states: Vec<&str> = document
            .components
            .iter()
            .map(|c| c.state.as_str())
            .collect();
        assert_eq!(states, components, "example {number}");
        assert_eq!(validate(&document, SEED_ID, &seed_components()), Ok(()));
        let json = serde_json::to_value(&document).expect("serialises");
        assert_eq!(violations(&json), Vec::<String>::new(), "example {number}");
    }
}

#[test]
fn the_drafts_errors_keep_their_code_and_message_whichever_way_message_is_spelled() {
    let third = parse_document(&fixture("draft-example-3.yaml")).expect("parses");
    let error = third.components[1].error.clone().expect("an error");
    assert_eq!(error.code, "InvalidArgument");
    assert!(
        error.message.contains("MULTI_NODE_MULTI_WRITER"),
        "{error:?}"
    );
    let fourth = parse_document(&fixture("draft-example-4.yaml")).expect("parses");
    let error = fourth.status.error.expect("an overall error");
    assert_eq!(error.code, "HostUnavailable");
    assert_eq!(
        error.message,
        "Unable to communicate with the Kubernetes cluster"
    );
}

#[test]
fn the_released_shape_parses_with_device_and_manifest_version() {
    let document = parse_document(&fixture("released.json")).expect("parses");
    assert_eq!(document.device_id.as_deref(), Some("edge-device-7"));
    assert_eq!(document.adopted_manifest_version.as_deref(), Some("4"));
    assert_eq!(document.components.len(), 2);
    assert_eq!(
        document.status.error.and_then(|e| e.source).as_deref(),
        Some("web-1 on pool-1")
    );
    let numeric = parse_document(
        r#"{"deploymentId": "d", "adoptedManifestVersion": 7, "status": {"state": "pending"}}"#,
    )
    .expect("a numeric version is read as text");
    assert_eq!(numeric.adopted_manifest_version.as_deref(), Some("7"));
}

#[test]
fn the_endpoints_json_only_reader_refuses_yaml_but_reads_both_json_shapes() {
    let yaml = fixture("draft-example-1.yaml");
    assert!(matches!(
        parse_json_document(&yaml),
        Err(ParseError::Syntax(_))
    ));
    let draft_as_json = r#"{"metadata": {"deploymentId": "d"}, "status": {"state": "installing",
        "components": [{"name": "a", "state": "installed"}]}}"#;
    let document = parse_json_document(draft_as_json).expect("the draft shape in JSON");
    assert_eq!(
        (document.deployment_id.as_str(), document.components.len()),
        ("d", 1)
    );
    let released = parse_json_document(&fixture("released.json")).expect("the released shape");
    assert_eq!(
        released,
        parse_document(&fixture("released.json")).expect("parses")
    );
}

#[test]
fn a_body_that_is_not_a_document_is_a_parse_error_naming_what_is_missing() {
    assert!(matches!(
        parse_document("{\"deploymentId\": "),
        Err(ParseError::Syntax(_))
    ));
    assert_eq!(
        parse_document(r#"{"status": {"state": "installed"}}"#),
        Err(ParseError::Missing("deploymentId"))
    );
    assert_eq!(
        parse_document(r#"{"deploymentId": "d", "status": {}}"#),
        Err(ParseError::Missing("status.state"))
    );
    assert_eq!(
        parse_document(r#"{"deploymentId": "d"}"#),
        Err(ParseError::Missing("status"))
    );
}

#[test]
fn validation_names_a_differing_id_an_unknown_component_a_duplicate_and_a_state_off_the_enum() {
    let document = parse_document(
        r#"{"deploymentId": "other", "status": {"state": "done"},
            "components": [
              {"name": "database-services", "state": "installed"},
              {"name": "database-services", "state": "installed"},
              {"name": "cache", "state": "Running"}]}"#,
    )
    .expect("parses: these are semantic problems");
    let problems = validate(&document, SEED_ID, &seed_components()).expect_err("invalid");
    assert_eq!(
        problems,
        vec![
            DocumentError::DeploymentIdDiffers {
                expected: SEED_ID.into(),
                body: "other".into()
            },
            DocumentError::UnknownState {
                at: "status.state".into(),
                state: "done".into()
            },
            DocumentError::DuplicateComponent("database-services".into()),
            DocumentError::UnknownComponent {
                name: "cache".into(),
                known: "digitron-orchestrator, database-services".into()
            },
            DocumentError::UnknownState {
                at: "components[cache].state".into(),
                state: "Running".into()
            },
        ]
    );
}

#[test]
fn the_schema_checker_refuses_what_the_schema_forbids() {
    let bad = json!({
        "deploymentId": "",
        "status": {"state": "done", "error": {"message": "no code"}},
        "components": [{"state": "installed"}]
    });
    let places: Vec<String> = violations(&bad)
        .iter()
        .map(|problem| problem.split(':').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        places,
        [
            "/components/0",
            "/deploymentId",
            "/status/error",
            "/status/state"
        ]
    );
    assert_eq!(
        violations(&json!({"status": {"state": "pending"}})),
        [": deploymentId is required", ": components is required"]
    );
}

/// Every document `document_for` can write for up to three components, each
/// with up to two instances in any state (and an error on failed ones).
#[test]
fn every_document_shoal_writes_validates_against_the_published_schema() {
    let mut per_component: Vec<Vec<DeploymentState>> = vec![vec![]];
    for first in DeploymentState::ALL {
        per_component.push(vec![first]);
        for second in DeploymentState::ALL {
            per_component.push(vec![first, second]);
        }
    }
    let input = |name: &str, states: &Vec<DeploymentState>| ComponentInput {
        name: name.to_owned(),
        states: states.clone(),
        error: states
            .contains(&DeploymentState::Failed)
            .then(|| StatusError {
                code: "ExitCode1".into(),
                source: Some("web-0 on pool-0".into()),
                message: "exited".into(),
            }),
    };
    let mut written = 0;
    for a in &per_component {
        for b in per_component.iter().step_by(3) {
            let components = [input("nginx", a), input("db", b)];
            let document = document_for("3a5549f2", 5, &components);
            let json = serde_json::to_value(&document).expect("serialises");
            assert_eq!(violations(&json), Vec::<String>::new(), "{json}");
            let names = vec!["nginx".to_owned(), "db".to_owned()];
            assert_eq!(validate(&document, "3a5549f2", &names), Ok(()), "{json}");
            written += 1;
        }
    }
    assert!(written > 500, "{written} documents checked");
    let empty = serde_json::to_value(document_for("x", 1, &[])).expect("serialises");
    assert_eq!(violations(&empty), Vec::<String>::new());
}
