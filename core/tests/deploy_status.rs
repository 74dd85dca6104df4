//! The deployment status document: the seed's draft examples and the
//! released shape parse, semantic validation names each problem, and every
//! document Shoal writes validates against the published JSON Schema.

use serde_json::{Value, json};
use shoal_core::deploy::status::{
    ComponentInput, DeploymentRef, DeploymentState, DocumentError, Expected, ParseError,
    SpecVersion, StatusError, document_for, parse_document, parse_json_document, required_fields,
    schema_of, validate,
};

const SEED_ID: &str = "3a5549f2-02a4-4faf-9bc4-1ea9866684c1";

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/margo/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn seed_components() -> Vec<String> {
    vec!["digitron-orchestrator".into(), "database-services".into()]
}

/// A validator of the published schema's definition `definition`.
fn validator(definition: &str) -> jsonschema::Validator {
    let version = if definition == RC3 {
        SpecVersion::V1Rc3
    } else {
        SpecVersion::V1
    };
    jsonschema::validator_for(&schema_of(version)).expect("the published schema compiles")
}

const V1: &str = "DeploymentStatusManifest";
const RC3: &str = "DeploymentStatusManifest-1.0.0-rc.3";

/// Every violation of `definition` by `document`, as `<pointer>: <what>`.
fn violations_of(definition: &str, document: &Value) -> Vec<String> {
    validator(definition)
        .iter_errors(document)
        .map(|error| format!("{}: {error}", error.instance_path()))
        .collect()
}

/// Violations of 1.0.0's schema.
fn violations(document: &Value) -> Vec<String> {
    violations_of(V1, document)
}

fn expected<'a>(id: &'a str, components: &'a [String], version: SpecVersion) -> Expected<'a> {
    Expected {
        deployment_id: id,
        components,
        version,
        client: None,
        latest_revision: 9,
    }
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
        let components = seed_components();
        let expected = expected(SEED_ID, &components, SpecVersion::V1);
        assert_eq!(validate(&document, &expected), Ok(()));
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
fn the_released_shape_parses_with_device_and_a_numeric_manifest_version() {
    let document = parse_document(&fixture("released.json")).expect("parses");
    assert_eq!(document.device_id.as_deref(), Some("edge-device-7"));
    assert_eq!(document.adopted_manifest_version, Some(4));
    assert_eq!(document.components.len(), 2);
    assert_eq!(
        document.status.error.and_then(|e| e.source).as_deref(),
        Some("web")
    );
    let text = parse_document(
        r#"{"deploymentId": "d", "adoptedManifestVersion": "7", "status": {"state": "pending"}}"#,
    )
    .expect("a version kept as text by earlier Shoal versions is read as its number");
    assert_eq!(text.adopted_manifest_version, Some(7));
}

#[test]
fn the_specifications_own_examples_parse_and_validate_against_its_schemas() {
    let v1: Value = serde_json::from_str(&fixture("spec-1.0.0-example.json")).expect("JSON");
    assert_eq!(violations_of(V1, &v1), Vec::<String>::new());
    let rc3: Value = serde_json::from_str(&fixture("spec-1.0.0-rc.3-example.json")).expect("JSON");
    assert_eq!(violations_of(RC3, &rc3), Vec::<String>::new());
    let components = seed_components();
    for (name, version, body) in [
        ("1.0.0", SpecVersion::V1, &v1),
        ("rc.3", SpecVersion::V1Rc3, &rc3),
    ] {
        assert_eq!(required_fields(body, version), [], "{name}");
        let document = parse_json_document(&body.to_string()).expect("parses");
        let id = "a3e2f5dc-912e-494f-8395-52cf3769bc06";
        assert_eq!(
            validate(&document, &expected(id, &components, version)),
            Ok(()),
            "{name}"
        );
    }
}

#[test]
fn each_version_requires_its_own_fields_and_names_each_missing_one() {
    let bare = json!({"deploymentId": "d", "status": {"state": "pending"}});
    let pointers = |version| -> Vec<String> {
        required_fields(&bare, version)
            .iter()
            .map(DocumentError::pointer)
            .collect()
    };
    assert_eq!(
        pointers(SpecVersion::V1),
        ["/apiVersion", "/kind", "/components"]
    );
    assert_eq!(
        pointers(SpecVersion::V1Rc3),
        ["/adoptedManifestVersion", "/components"]
    );
    let wrong = json!({"apiVersion": "v1", "kind": "Deployment", "deploymentId": "d",
        "adoptedManifestVersion": 0, "status": {"state": "pending"}, "components": []});
    assert_eq!(
        required_fields(&wrong, SpecVersion::V1),
        [
            DocumentError::WrongKind("Deployment".into()),
            DocumentError::BadManifestVersion("0".into())
        ]
    );
    let draft = json!({"apiVersion": "deployment.margo/v1", "kind": "DeploymentStatus",
        "metadata": {"deploymentId": "d"}, "status": {"state": "pending", "components": []}});
    assert_eq!(required_fields(&draft, SpecVersion::V1), []);
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
fn validation_names_each_problem_with_the_pointer_of_its_field() {
    let document = parse_document(
        r#"{"deploymentId": "other", "status": {"state": "done"},
            "components": [
              {"name": "database-services", "state": "installed"},
              {"name": "database-services", "state": "installed"},
              {"name": "cache", "state": "Running"}]}"#,
    )
    .expect("parses: these are semantic problems");
    let components = seed_components();
    let problems =
        validate(&document, &expected(SEED_ID, &components, SpecVersion::V1)).expect_err("invalid");
    assert_eq!(
        problems,
        vec![
            DocumentError::DeploymentIdDiffers {
                expected: SEED_ID.into(),
                body: "other".into()
            },
            DocumentError::UnknownState {
                at: "/status/state".into(),
                state: "done".into()
            },
            DocumentError::DuplicateComponent {
                index: 1,
                name: "database-services".into()
            },
            DocumentError::UnknownComponent {
                index: 2,
                name: "cache".into(),
                known: "digitron-orchestrator, database-services".into()
            },
            DocumentError::UnknownState {
                at: "/components/2/state".into(),
                state: "Running".into()
            },
            DocumentError::MissingComponent("digitron-orchestrator".into()),
        ]
    );
    let pointers: Vec<String> = problems.iter().map(DocumentError::pointer).collect();
    assert_eq!(
        pointers,
        [
            "/deploymentId",
            "/status/state",
            "/components/1/name",
            "/components/2/name",
            "/components/2/state",
            "/components"
        ]
    );
}

fn gateway_report(
    device_id: &str,
    code: &str,
    source: &str,
) -> shoal_core::deploy::status::DeploymentStatusDocument {
    parse_json_document(
        &json!({"deploymentId": SEED_ID, "deviceId": device_id,
            "status": {"state": "failed", "error": {"code": code, "source": source, "message": "Child device unreachable"}},
            "components": [{"name": "digitron-orchestrator", "state": "pending"},
                           {"name": "database-services", "state": "pending"}]})
        .to_string(),
    )
    .expect("parses")
}

#[test]
fn a_gateway_reports_for_a_child_device_behind_it_and_uses_the_reserved_codes_as_itself() {
    let components = seed_components();
    let under = |client, version| Expected {
        client: Some(client),
        ..expected(SEED_ID, &components, version)
    };
    let child = gateway_report("gateway01/subdevice01", "102", "gateway01");
    assert_eq!(
        validate(&child, &under("gateway01", SpecVersion::V1)),
        Ok(())
    );
    assert_eq!(
        validate(&child, &under("gateway01", SpecVersion::V1Rc3)),
        Ok(())
    );
    let placed_by_gateway = gateway_report("gateway01/*", "103", "gateway01");
    assert_eq!(
        validate(&placed_by_gateway, &under("gateway01", SpecVersion::V1)),
        Ok(())
    );
    let pointers = |document, client, version| -> Vec<String> {
        validate(document, &under(client, version))
            .err()
            .unwrap_or_default()
            .iter()
            .map(DocumentError::pointer)
            .collect()
    };
    assert_eq!(
        pointers(&placed_by_gateway, "gateway01", SpecVersion::V1Rc3),
        ["/deviceId"],
        "rc.3's deviceId has no /*"
    );
    assert_eq!(
        pointers(&child, "gateway02", SpecVersion::V1),
        ["/deviceId"],
        "a device behind another client"
    );
    let from_child = gateway_report("gateway01/subdevice01", "101", "subdevice01");
    assert_eq!(
        pointers(&from_child, "gateway01", SpecVersion::V1),
        ["/status/error/source"],
        "a reserved code from someone other than the gateway"
    );
    let own = gateway_report(
        "gateway01/subdevice01",
        "ExitCode1",
        "digitron-orchestrator",
    );
    assert_eq!(validate(&own, &under("gateway01", SpecVersion::V1)), Ok(()));
}

/// Every document `document_for` can write for two components, each with up
/// to two instances in any state (and an error on failed ones), validates
/// against both published schemas and Shoal's own checks of either version.
#[test]
fn every_document_shoal_writes_validates_against_the_published_schemas() {
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
                source: None,
                message: "instance web-0 on pool-0: exited".into(),
            }),
    };
    let (v1, rc3) = (validator(V1), validator(RC3));
    let deployment = DeploymentRef {
        id: "3a5549f2-02a4-4faf-9bc4-1ea9866684c1",
        name: "web",
        revision: 5,
    };
    let names = vec!["nginx".to_owned(), "db".to_owned()];
    let mut written = 0;
    for a in &per_component {
        for b in per_component.iter().step_by(3) {
            let document = document_for(deployment, &[input("nginx", a), input("db", b)]);
            let json = serde_json::to_value(&document).expect("serialises");
            for (schema, version) in [(&v1, SpecVersion::V1), (&rc3, SpecVersion::V1Rc3)] {
                let problems: Vec<String> =
                    schema.iter_errors(&json).map(|e| e.to_string()).collect();
                assert_eq!(problems, Vec::<String>::new(), "{version}: {json}");
                assert_eq!(required_fields(&json, version), [], "{json}");
                let expected = expected(deployment.id, &names, version);
                assert_eq!(validate(&document, &expected), Ok(()), "{json}");
            }
            written += 1;
        }
    }
    assert!(written > 500, "{written} documents checked");
    let empty = serde_json::to_value(document_for(deployment, &[])).expect("serialises");
    assert_eq!(violations(&empty), Vec::<String>::new());
    assert_eq!(violations_of(RC3, &empty), Vec::<String>::new());
}

#[test]
fn the_schema_refuses_what_the_specification_forbids() {
    let bad = json!({
        "apiVersion": "deployment.margo.org/v1alpha1",
        "kind": "DeploymentStatus",
        "deploymentId": "d",
        "deviceId": "a//b",
        "status": {"state": "done"},
        "components": [{"state": "installed"}]
    });
    let mut places: Vec<String> = violations(&bad)
        .iter()
        .map(|problem| problem.split(':').next().unwrap_or_default().to_owned())
        .collect();
    places.sort();
    assert_eq!(
        places,
        ["/components/0", "/deviceId", "/kind", "/status/state"]
    );
}
