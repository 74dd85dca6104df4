//! The deployment status document (Margo's `DeploymentStatus`): one per
//! deployment revision of a plan, an overall state, one entry per component
//! (the plan's applications), errors with a code, a source and a message.
//!
//! * [`DeploymentStatusDocument`]: the document, the superset of Margo's
//!   released shape (`deploymentId`, `status`, `components` at the top) and
//!   the earlier draft's (`metadata.deploymentId`, `status.components`);
//!   [`parse_document`] reads either (JSON or YAML), Shoal writes the
//!   released one.
//! * [`overall_state`]: the one rule deriving a state from the states below
//!   it (a deployment's from its components', a component's from its
//!   instances').
//! * [`validate`]: what a reported document must satisfy beyond its shape
//!   (the deployment it names, its components, the state enumeration).
//! * [`deployment_id`]: the stable id of one deployment revision of a plan.
//!
//! The JSON Schema of the document is `schemas/deployment-status.schema.json`
//! at the repository root ([`SCHEMA`]).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};

/// The JSON Schema of [`DeploymentStatusDocument`], as published in the repository.
pub const SCHEMA: &str = include_str!("../../../schemas/deployment-status.schema.json");

/// `apiVersion` of the documents Shoal writes.
pub const API_VERSION: &str = "deployment.margo/v1alpha1";

/// `kind` of the documents Shoal writes.
pub const KIND: &str = "DeploymentStatus";

/// A deployment's, a component's or an instance's state: Margo's six
/// states, the same enumeration the sidecar reports its instances in (one
/// type, so the two cannot drift apart).
pub use crate::slice::InstanceState as DeploymentState;

impl DeploymentState {
    /// Every state, in the order of the enumeration.
    pub const ALL: [DeploymentState; 6] = [
        DeploymentState::Pending,
        DeploymentState::Installing,
        DeploymentState::Installed,
        DeploymentState::Removing,
        DeploymentState::Removed,
        DeploymentState::Failed,
    ];

    /// The spelling in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentState::Pending => "pending",
            DeploymentState::Installing => "installing",
            DeploymentState::Installed => "installed",
            DeploymentState::Removing => "removing",
            DeploymentState::Removed => "removed",
            DeploymentState::Failed => "failed",
        }
    }

    /// The state spelled `text`, if any.
    pub fn parse(text: &str) -> Option<DeploymentState> {
        Self::ALL.into_iter().find(|state| state.as_str() == text)
    }
}

impl fmt::Display for DeploymentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The overall state of something made of parts in `states`. The one rule,
/// used for a deployment (from its components) and for a component (from the
/// instances running it):
///
/// 1. no part: `pending` (nothing to install yet);
/// 2. any part `failed`: `failed`;
/// 3. every part `removed`: `removed`;
/// 4. any part `removing` or `removed` (but not all removed): `removing`;
/// 5. every part `installed`: `installed`;
/// 6. every part `pending`: `pending`;
/// 7. otherwise (some part installing, or some installed while others are
///    still pending): `installing` — a deployment is installing until every
///    part has gone through installing.
pub fn overall_state(states: impl IntoIterator<Item = DeploymentState>) -> DeploymentState {
    use DeploymentState::*;
    let seen: BTreeSet<DeploymentState> = states.into_iter().collect();
    let only = |state| seen.len() == 1 && seen.contains(&state);
    if seen.is_empty() {
        Pending
    } else if seen.contains(&Failed) {
        Failed
    } else if only(Removed) {
        Removed
    } else if seen.contains(&Removing) || seen.contains(&Removed) {
        Removing
    } else if only(Installed) {
        Installed
    } else if only(Pending) {
        Pending
    } else {
        Installing
    }
}

/// Longest text of a status document as a plan's status keeps it (a message, a source,
/// an id), in characters: the bound of its CRD schema (`shoal_controller::api::limits`).
pub const MAX_DOCUMENT_TEXT: u32 = 1024;

/// Longest word of a status document (a state, a code, an `apiVersion`, a `kind`).
pub const MAX_DOCUMENT_WORD: u32 = 128;

/// Most components of one status document: one per plan application.
pub const MAX_DOCUMENT_COMPONENTS: u32 = 32;

/// An error: a short machine-readable code, who saw it, and what happened.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StatusError {
    /// A short machine-readable code, e.g. `ExitCode1`.
    #[serde(default)]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_WORD)))]
    pub code: String,
    /// Who reported it (an instance and its member, an agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_TEXT)))]
    pub source: Option<String>,
    /// What happened, in words. (`Error` is read too: the draft's example 4 spells it so.)
    #[serde(default, alias = "Error")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_TEXT)))]
    pub message: String,
}

/// The overall state of a deployment and, when it failed as a whole, why.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OverallStatus {
    /// `pending`, `installing`, `installed`, `removing`, `removed` or `failed`.
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_WORD)))]
    pub state: String,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<StatusError>,
}

/// One component (a plan application) of a deployment.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// The component's name.
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_TEXT)))]
    pub name: String,
    /// `pending`, `installing`, `installed`, `removing`, `removed` or `failed`.
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_WORD)))]
    pub state: String,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<StatusError>,
}

/// The status document of one deployment (Margo `DeploymentStatus`), in the
/// released shape. States are kept as text so that a reported document with
/// a state outside the enumeration is a semantic error (see `validate`), not
/// a malformed one.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatusDocument {
    /// `deployment.margo/v1alpha1` when Shoal writes it; any value accepted on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_WORD)))]
    pub api_version: Option<String>,
    /// `DeploymentStatus` when Shoal writes it; any value accepted on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_WORD)))]
    pub kind: Option<String>,
    /// The deployment's id: a UUID derived from the plan's uid and the revision.
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_TEXT)))]
    pub deployment_id: String,
    /// The device (agent) reporting, when one reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_TEXT)))]
    pub device_id: Option<String>,
    /// The manifest version the document reflects: the plan's deployment revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_TEXT)))]
    pub adopted_manifest_version: Option<String>,
    /// The overall state.
    pub status: OverallStatus,
    /// One entry per component.
    #[serde(default)]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_COMPONENTS)))]
    pub components: Vec<ComponentStatus>,
}

/// Why a document could not be read at all (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON / YAML of the document's shape.
    #[error("the deployment status document does not parse: {0}")]
    Syntax(String),
    /// A required field is absent in both the released and the draft place.
    #[error("the deployment status document has no {0}")]
    Missing(&'static str),
}

/// What a reported document gets wrong about its deployment (HTTP 422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The body names another deployment than the one addressed.
    #[error("deploymentId {body:?} in the document differs from {expected:?} in the path")]
    DeploymentIdDiffers {
        /// The id addressed.
        expected: String,
        /// The id in the body.
        body: String,
    },
    /// A component the deployment does not have.
    #[error("component {name:?} is not part of the deployment (its components: {known})")]
    UnknownComponent {
        /// The component named.
        name: String,
        /// The deployment's components, comma-separated.
        known: String,
    },
    /// A component listed twice.
    #[error("component {0:?} is listed more than once")]
    DuplicateComponent(String),
    /// A state outside the enumeration.
    #[error(
        "{at}: state {state:?} is not one of pending, installing, installed, removing, removed, failed"
    )]
    UnknownState {
        /// Where: `status.state` or `components[<name>].state`.
        at: String,
        /// The state given.
        state: String,
    },
}

/// A version given as a string or a number (`adoptedManifestVersion: 4`).
fn string_or_number<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Version {
        Text(String),
        Number(u64),
    }
    Ok(
        Option::<Version>::deserialize(deserializer)?.map(|version| match version {
            Version::Text(text) => text,
            Version::Number(number) => number.to_string(),
        }),
    )
}

/// Either shape on the wire; [`parse_document`] folds it into the released one.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireDocument {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    deployment_id: Option<String>,
    #[serde(default)]
    device_id: Option<String>,
    #[serde(default, deserialize_with = "string_or_number")]
    adopted_manifest_version: Option<String>,
    /// The draft: `metadata.deploymentId` (and a `timeStamp`, not kept).
    #[serde(default)]
    metadata: Option<WireMetadata>,
    #[serde(default)]
    status: Option<WireStatus>,
    #[serde(default)]
    components: Option<Vec<ComponentStatus>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMetadata {
    #[serde(default)]
    deployment_id: Option<String>,
}

#[derive(Deserialize)]
struct WireStatus {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error: Option<StatusError>,
    /// The draft keeps the components under `status`.
    #[serde(default)]
    components: Option<Vec<ComponentStatus>>,
}

/// Reads a document in the released or the draft shape, as JSON or YAML
/// (JSON is YAML; the draft's examples are YAML). Unknown fields are
/// ignored; `deploymentId` and `status.state` are required.
pub fn parse_document(text: &str) -> Result<DeploymentStatusDocument, ParseError> {
    match parse_json_document(text) {
        Ok(document) => Ok(document),
        // Meant as JSON: its error is the one that helps.
        Err(json_error) if text.trim_start().starts_with('{') => Err(json_error),
        Err(_) => {
            let wire: WireDocument = serde_saphyr::from_str(text)
                .map_err(|error| ParseError::Syntax(error.to_string()))?;
            fold(wire)
        }
    }
}

/// As [`parse_document`], JSON only: what the REST endpoint accepts (YAML
/// aliases would let a small body expand into a large one).
pub fn parse_json_document(text: &str) -> Result<DeploymentStatusDocument, ParseError> {
    let wire: WireDocument =
        serde_json::from_str(text).map_err(|error| ParseError::Syntax(error.to_string()))?;
    fold(wire)
}

/// The released shape of either wire shape.
fn fold(wire: WireDocument) -> Result<DeploymentStatusDocument, ParseError> {
    let deployment_id = wire
        .deployment_id
        .or(wire.metadata.and_then(|metadata| metadata.deployment_id))
        .ok_or(ParseError::Missing("deploymentId"))?;
    let status = wire.status.ok_or(ParseError::Missing("status"))?;
    let state = status.state.ok_or(ParseError::Missing("status.state"))?;
    Ok(DeploymentStatusDocument {
        api_version: wire.api_version,
        kind: wire.kind,
        deployment_id,
        device_id: wire.device_id,
        adopted_manifest_version: wire.adopted_manifest_version,
        status: OverallStatus {
            state,
            error: status.error,
        },
        components: wire.components.or(status.components).unwrap_or_default(),
    })
}

/// Checks a reported document against the deployment addressed: the same
/// `deploymentId`, only the deployment's components and each at most once,
/// every state in the enumeration. Every problem is returned, in document order.
pub fn validate(
    document: &DeploymentStatusDocument,
    deployment_id: &str,
    components: &[String],
) -> Result<(), Vec<DocumentError>> {
    let mut problems = Vec::new();
    if document.deployment_id != deployment_id {
        problems.push(DocumentError::DeploymentIdDiffers {
            expected: deployment_id.to_owned(),
            body: document.deployment_id.clone(),
        });
    }
    if DeploymentState::parse(&document.status.state).is_none() {
        problems.push(DocumentError::UnknownState {
            at: "status.state".to_owned(),
            state: document.status.state.clone(),
        });
    }
    let mut seen = BTreeSet::new();
    for component in &document.components {
        if !components.contains(&component.name) {
            problems.push(DocumentError::UnknownComponent {
                name: component.name.clone(),
                known: components.join(", "),
            });
        } else if !seen.insert(component.name.as_str()) {
            problems.push(DocumentError::DuplicateComponent(component.name.clone()));
        }
        if DeploymentState::parse(&component.state).is_none() {
            problems.push(DocumentError::UnknownState {
                at: format!("components[{}].state", component.name),
                state: component.state.clone(),
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// One component as seen from the instances running it: its state from
/// theirs ([`overall_state`]) and the first error among the failed ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInput {
    /// The component's name.
    pub name: String,
    /// The states of the instances running it.
    pub states: Vec<DeploymentState>,
    /// The error of the first failed instance, if one failed.
    pub error: Option<StatusError>,
}

/// The document Shoal writes for one deployment: components in the order
/// given, each with its state from its instances, the overall state from the
/// components; a failed deployment carries its first failed component's error.
pub fn document_for(
    deployment_id: &str,
    revision: u64,
    components: &[ComponentInput],
) -> DeploymentStatusDocument {
    let components: Vec<ComponentStatus> = components
        .iter()
        .map(|component| {
            let state = overall_state(component.states.iter().copied());
            ComponentStatus {
                name: component.name.clone(),
                state: state.as_str().to_owned(),
                error: (state == DeploymentState::Failed)
                    .then(|| component.error.clone())
                    .flatten(),
            }
        })
        .collect();
    let state = overall_state(
        components
            .iter()
            .filter_map(|component| DeploymentState::parse(&component.state)),
    );
    let error = (state == DeploymentState::Failed)
        .then(|| {
            components
                .iter()
                .find_map(|component| component.error.clone())
        })
        .flatten();
    DeploymentStatusDocument {
        api_version: Some(API_VERSION.to_owned()),
        kind: Some(KIND.to_owned()),
        deployment_id: deployment_id.to_owned(),
        device_id: None,
        adopted_manifest_version: Some(revision.to_string()),
        status: OverallStatus {
            state: state.as_str().to_owned(),
            error,
        },
        components,
    }
}

/// The id of deployment `revision` of the plan whose uid is `plan_uid`: a
/// UUID (RFC 9562 version 8, name-based on SHA-256) so that the same plan
/// and revision always give the same id, and another plan (even one
/// recreated under the same name, which gets a new uid) never does.
pub fn deployment_id(plan_uid: &str, revision: u64) -> String {
    let digest = Sha256::digest(format!("shoal.dev/deployment\n{plan_uid}\n{revision}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x80; // version 8
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // variant 10
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::DeploymentState::*;
    use super::*;

    #[test]
    fn the_overall_state_follows_the_table() {
        let table: &[(&[DeploymentState], DeploymentState)] = &[
            (&[], Pending),
            (&[Pending], Pending),
            (&[Pending, Pending], Pending),
            (&[Pending, Installing], Installing),
            (&[Pending, Installed], Installing),
            (&[Installing, Installed], Installing),
            (&[Installed], Installed),
            (&[Installed, Installed], Installed),
            (&[Installed, Failed], Failed),
            (&[Pending, Failed], Failed),
            (&[Removing, Failed], Failed),
            (&[Removed, Failed], Failed),
            (&[Installed, Removing], Removing),
            (&[Installed, Removed], Removing),
            (&[Removing, Removed], Removing),
            (&[Removed], Removed),
            (&[Removed, Removed], Removed),
        ];
        for (states, expected) in table {
            assert_eq!(
                overall_state(states.iter().copied()),
                *expected,
                "states {states:?}"
            );
            let reversed = states.iter().rev().copied();
            assert_eq!(overall_state(reversed), *expected, "order of {states:?}");
        }
    }

    #[test]
    fn every_state_spelling_reads_back_as_itself() {
        for state in DeploymentState::ALL {
            assert_eq!(DeploymentState::parse(state.as_str()), Some(state));
            let json = serde_json::to_string(&state).expect("serialises");
            assert_eq!(json, format!("\"{state}\""));
        }
        assert_eq!(DeploymentState::parse("Installed"), None);
    }

    #[test]
    fn a_deployment_id_is_a_version_8_uuid_stable_per_plan_and_revision() {
        let id = deployment_id("0b5c7a4e-uid", 3);
        assert_eq!(id, deployment_id("0b5c7a4e-uid", 3));
        assert_ne!(id, deployment_id("0b5c7a4e-uid", 4));
        assert_ne!(id, deployment_id("another-uid", 3));
        let groups: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert_eq!(&id[14..15], "8");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
    }

    #[test]
    fn a_failed_component_fails_the_deployment_with_its_error() {
        let error = StatusError {
            code: "ExitCode1".into(),
            source: Some("web-1 on pool-1".into()),
            message: "exited with status 1".into(),
        };
        let document = document_for(
            "id-1",
            2,
            &[
                ComponentInput {
                    name: "nginx".into(),
                    states: vec![Installed, Installed],
                    error: None,
                },
                ComponentInput {
                    name: "db".into(),
                    states: vec![Installed, Failed],
                    error: Some(error.clone()),
                },
            ],
        );
        assert_eq!(document.status.state, "failed");
        assert_eq!(document.status.error, Some(error.clone()));
        assert_eq!(document.components[0].state, "installed");
        assert_eq!(document.components[0].error, None);
        assert_eq!(document.components[1].state, "failed");
        assert_eq!(document.components[1].error, Some(error));
        assert_eq!(document.adopted_manifest_version.as_deref(), Some("2"));
    }
}
