//! The deployment status document: Margo's `DeploymentStatusManifest`, one
//! per deployment of a plan, an overall state, one entry per component (the
//! plan's applications), errors with a code, a source and a message.
//!
//! Shoal follows the Margo Workload Management API as published in
//! `margo/specification`: version 1.0.0 (`apiVersion`, `kind` required) and
//! 1.0.0-rc.3 (`adoptedManifestVersion` required, a number). A document Shoal
//! writes carries every field either version requires, so it is valid under
//! both (neither forbids extra fields).
//!
//! * [`DeploymentStatusDocument`]: the document; [`parse_document`] also
//!   reads the earlier draft shape (`metadata.deploymentId`,
//!   `status.components`), JSON or YAML.
//! * [`overall_state`]: the one rule deriving a state from the states below
//!   it (a deployment's from its components', a component's from its
//!   instances'): the most severe wins, in the spec's order.
//! * [`required_fields`] and [`validate`]: what a reported document must
//!   satisfy under a [`SpecVersion`], each problem a [`DocumentError`] with
//!   the JSON pointer of the field it is about.
//! * [`deployment_id`]: the stable id of a plan's deployment (one for every
//!   revision; the revision is the document's `adoptedManifestVersion`).
//!
//! The JSON Schema of the document is `schemas/deployment-status.schema.json`
//! at the repository root ([`SCHEMA`]), re-stated from the specification.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The JSON Schema of [`DeploymentStatusDocument`], as published in the repository.
pub const SCHEMA: &str = include_str!("../../../schemas/deployment-status.schema.json");

/// The published schema's definition of `version`'s document, as a schema of
/// its own (its root refers to that definition): what a validator takes.
pub fn schema_of(version: SpecVersion) -> Value {
    let definition = match version {
        SpecVersion::V1 => "DeploymentStatusManifest",
        SpecVersion::V1Rc3 => "DeploymentStatusManifest-1.0.0-rc.3",
    };
    let mut schema: Value = serde_json::from_str(SCHEMA).unwrap_or_default();
    schema["$ref"] = Value::String(format!("#/$defs/{definition}"));
    schema
}

/// `apiVersion` of the documents Shoal writes: the value of the specification's examples.
pub const API_VERSION: &str = "deployment.margo.org/v1alpha1";

/// `kind` of the documents Shoal writes, the only one Margo 1.0.0 allows.
pub const KIND: &str = "DeploymentStatusManifest";

/// `kind` of the earlier draft, still read from reports sent by older clients.
pub const DRAFT_KIND: &str = "DeploymentStatus";

/// The error codes Margo reserves for errors a see-thru gateway generates
/// (101 unknown child device, 102 child device unreachable, 103 autonomous
/// placement not supported); their `source` must be the gateway's device id.
pub const GATEWAY_ERROR_CODES: [&str; 3] = ["101", "102", "103"];

/// Which published version of Margo's Workload Management API a report follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecVersion {
    /// 1.0.0: `POST /api/v1/clients/{clientId}/deployments/{deploymentId}/status`;
    /// `apiVersion` and `kind` required; `deviceId` may end in `/*`.
    V1,
    /// 1.0.0-rc.3: `POST /api/v1/deployments/{deploymentId}/status`;
    /// `adoptedManifestVersion` (a number) required; no `/*` in `deviceId`.
    V1Rc3,
}

impl fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpecVersion::V1 => "Margo 1.0.0",
            SpecVersion::V1Rc3 => "Margo 1.0.0-rc.3",
        })
    }
}

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

    /// How severe the state is in the spec's precedence, `failed > removing >
    /// installing > pending > removed > installed`. (The published text lists
    /// `removing` twice, "… > pending > removing > installed"; the second can
    /// only mean `removed`, the one state the list would otherwise leave out.)
    pub fn severity(self) -> u8 {
        match self {
            DeploymentState::Installed => 0,
            DeploymentState::Removed => 1,
            DeploymentState::Pending => 2,
            DeploymentState::Installing => 3,
            DeploymentState::Removing => 4,
            DeploymentState::Failed => 5,
        }
    }
}

impl fmt::Display for DeploymentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The overall state of something made of parts in `states`: the most severe
/// of them ([`DeploymentState::severity`]), as Margo requires of a
/// deployment's state from its components'; Shoal derives a component's state
/// from its instances' by the same rule. No part at all: `pending` (nothing
/// to install yet).
pub fn overall_state(states: impl IntoIterator<Item = DeploymentState>) -> DeploymentState {
    states
        .into_iter()
        .max_by_key(|state| state.severity())
        .unwrap_or(DeploymentState::Pending)
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
    /// Who generated it: the deployment's name (for `status.error`), the
    /// component's name (for `components[].error`), or the id of the see-thru
    /// gateway that generated it.
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

/// The status document of one deployment (Margo `DeploymentStatusManifest`).
/// States are kept as text so that a reported document with a state outside
/// the enumeration is a semantic error (see `validate`), not a malformed one.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatusDocument {
    /// `deployment.margo.org/v1alpha1` when Shoal writes it; required on input by Margo 1.0.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_WORD)))]
    pub api_version: Option<String>,
    /// `DeploymentStatusManifest` when Shoal writes it; on input, that or the
    /// draft's `DeploymentStatus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_WORD)))]
    pub kind: Option<String>,
    /// The deployment's id: a UUID derived from the plan's uid, the same for every revision.
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_TEXT)))]
    pub deployment_id: String,
    /// The device the deployment runs on, with its gateway hierarchy
    /// (`gateway/child`), when a device reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = MAX_DOCUMENT_TEXT)))]
    pub device_id: Option<String>,
    /// The manifest version the document reflects: the plan's deployment
    /// revision (a number; text holding a number, as earlier Shoal versions
    /// wrote it, is read too).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "manifest_version"
    )]
    pub adopted_manifest_version: Option<u64>,
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

/// What a reported document gets wrong (HTTP 422): a field the version
/// requires, a value it forbids, or a contradiction of the deployment
/// addressed. [`DocumentError::pointer`] names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// A field the specification version requires is absent.
    #[error("{field} is required by {version}")]
    Missing {
        /// The field's JSON pointer.
        field: &'static str,
        /// The version that requires it.
        version: SpecVersion,
    },
    /// A `kind` other than `DeploymentStatusManifest`.
    #[error("kind {0:?} is not DeploymentStatusManifest")]
    WrongKind(String),
    /// An `adoptedManifestVersion` later than any revision the deployment has had.
    #[error(
        "adoptedManifestVersion {reported} was never published: the deployment's latest revision is {latest}"
    )]
    UnpublishedManifestVersion {
        /// The version reported.
        reported: u64,
        /// The deployment's latest revision.
        latest: u64,
    },
    /// An `adoptedManifestVersion` that is not a whole number of at least 1.
    #[error("adoptedManifestVersion {0} is not a manifest version (a whole number, 1 or more)")]
    BadManifestVersion(String),
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
        /// Its index in `components`.
        index: usize,
        /// The component named.
        name: String,
        /// The deployment's components, comma-separated.
        known: String,
    },
    /// A component listed twice.
    #[error("component {name:?} is listed more than once")]
    DuplicateComponent {
        /// The index of the second entry.
        index: usize,
        /// The component named.
        name: String,
    },
    /// A component of the deployment the document has no entry for (Margo:
    /// one entry for each component).
    #[error("component {0:?} of the deployment has no entry")]
    MissingComponent(String),
    /// A state outside the enumeration.
    #[error(
        "state {state:?} is not one of pending, installing, installed, removing, removed, failed"
    )]
    UnknownState {
        /// The JSON pointer of the state.
        at: String,
        /// The state given.
        state: String,
    },
    /// A `deviceId` off the specification's pattern.
    #[error(
        "deviceId {device_id:?} is not a device id of {version}: one or more '/'-separated ids of letters, digits, '.', '_', '~' and '-'{}",
        if *version == SpecVersion::V1 { ", optionally ending in /*" } else { "" }
    )]
    BadDeviceId {
        /// The id given.
        device_id: String,
        /// The version whose pattern it misses.
        version: SpecVersion,
    },
    /// A `deviceId` that is neither the reporting client nor a device below it.
    #[error(
        "deviceId {device_id:?} is neither client {client:?} nor a device behind it ({client}/…)"
    )]
    DeviceNotOfClient {
        /// The id given.
        device_id: String,
        /// The client reporting.
        client: String,
    },
    /// A reserved gateway error code whose source is not a gateway above the device.
    #[error(
        "error code {code} is reserved for gateway-generated errors: source must be the id of the gateway (a device above {device_id:?}), not {source_id:?}"
    )]
    GatewayCodeSource {
        /// The JSON pointer of the error.
        at: String,
        /// The reserved code.
        code: String,
        /// The source given.
        source_id: String,
        /// The device reported on.
        device_id: String,
    },
}

impl DocumentError {
    /// The JSON pointer (RFC 6901) of the field the problem is about.
    pub fn pointer(&self) -> String {
        match self {
            DocumentError::Missing { field, .. } => (*field).to_owned(),
            DocumentError::WrongKind(_) => "/kind".to_owned(),
            DocumentError::BadManifestVersion(_)
            | DocumentError::UnpublishedManifestVersion { .. } => {
                "/adoptedManifestVersion".to_owned()
            }
            DocumentError::DeploymentIdDiffers { .. } => "/deploymentId".to_owned(),
            DocumentError::UnknownComponent { index, .. }
            | DocumentError::DuplicateComponent { index, .. } => {
                format!("/components/{index}/name")
            }
            DocumentError::MissingComponent(_) => "/components".to_owned(),
            DocumentError::UnknownState { at, .. } => at.clone(),
            DocumentError::BadDeviceId { .. } | DocumentError::DeviceNotOfClient { .. } => {
                "/deviceId".to_owned()
            }
            DocumentError::GatewayCodeSource { at, .. } => format!("{at}/source"),
        }
    }
}

/// A version given as a number or as text holding one (`"4"`, as earlier
/// Shoal versions wrote it); other text reads as no version.
fn manifest_version<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Version {
        Number(u64),
        Text(String),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Option::<Version>::deserialize(deserializer)? {
        Some(Version::Number(number)) => Some(number),
        Some(Version::Text(text)) => text.trim().parse().ok(),
        Some(Version::Other(_)) | None => None,
    })
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
    #[serde(default, deserialize_with = "manifest_version")]
    adopted_manifest_version: Option<u64>,
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

/// The fields `version` requires of a report that [`parse_json_document`]
/// does not (it reads older shapes too), checked on the body as sent:
/// `components` (the draft's `status.components` counts), and for 1.0.0
/// `apiVersion` and a `kind` of `DeploymentStatusManifest` (or the draft's
/// `DeploymentStatus`), for rc.3 `adoptedManifestVersion`, a whole number
/// from 1 (text is refused here: the published schema says number).
pub fn required_fields(body: &Value, version: SpecVersion) -> Vec<DocumentError> {
    let mut problems = Vec::new();
    let missing = |field| DocumentError::Missing { field, version };
    if version == SpecVersion::V1 {
        if !body["apiVersion"].is_string() {
            problems.push(missing("/apiVersion"));
        }
        match body["kind"].as_str() {
            None => problems.push(missing("/kind")),
            Some(KIND | DRAFT_KIND) => {}
            Some(other) => problems.push(DocumentError::WrongKind(other.to_owned())),
        }
    }
    match &body["adoptedManifestVersion"] {
        Value::Null if version == SpecVersion::V1Rc3 => {
            problems.push(missing("/adoptedManifestVersion"));
        }
        Value::Null => {}
        given if given.as_u64().is_none_or(|number| number == 0) => {
            problems.push(DocumentError::BadManifestVersion(given.to_string()));
        }
        _ => {}
    }
    if !body["components"].is_array() && !body["status"]["components"].is_array() {
        problems.push(missing("/components"));
    }
    problems
}

/// What a report is checked against: the deployment addressed, its
/// components, the specification version of the route, and the reporting
/// client (`None`: the route names none, and the `deviceId`'s first id is it).
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The id addressed.
    pub deployment_id: &'a str,
    /// The deployment's components, in order.
    pub components: &'a [String],
    /// The version of the route.
    pub version: SpecVersion,
    /// The client the route names.
    pub client: Option<&'a str>,
    /// The deployment's latest revision: a later `adoptedManifestVersion`
    /// names a manifest never published.
    pub latest_revision: u64,
}

/// Checks a reported document against the deployment addressed: the same
/// `deploymentId`, each of the deployment's components exactly once and no
/// other, every state in the enumeration, a `deviceId` of the version's
/// pattern under the reporting client, and reserved gateway codes from a
/// gateway. Every problem is returned, in document order.
pub fn validate(
    document: &DeploymentStatusDocument,
    expected: &Expected<'_>,
) -> Result<(), Vec<DocumentError>> {
    let mut problems = Vec::new();
    if document.deployment_id != expected.deployment_id {
        problems.push(DocumentError::DeploymentIdDiffers {
            expected: expected.deployment_id.to_owned(),
            body: document.deployment_id.clone(),
        });
    }
    if let Some(reported) = document
        .adopted_manifest_version
        .filter(|reported| *reported > expected.latest_revision)
    {
        problems.push(DocumentError::UnpublishedManifestVersion {
            reported,
            latest: expected.latest_revision,
        });
    }
    problems.extend(device_problems(document, expected));
    check_state(&document.status.state, "/status/state", &mut problems);
    check_gateway_code(
        document,
        document.status.error.as_ref(),
        "/status/error",
        &mut problems,
    );
    let mut seen = BTreeSet::new();
    for (index, component) in document.components.iter().enumerate() {
        if !expected.components.contains(&component.name) {
            problems.push(DocumentError::UnknownComponent {
                index,
                name: component.name.clone(),
                known: expected.components.join(", "),
            });
        } else if !seen.insert(component.name.as_str()) {
            problems.push(DocumentError::DuplicateComponent {
                index,
                name: component.name.clone(),
            });
        }
        let at = format!("/components/{index}");
        check_state(&component.state, &format!("{at}/state"), &mut problems);
        let error = component.error.as_ref();
        check_gateway_code(document, error, &format!("{at}/error"), &mut problems);
    }
    problems.extend(
        expected
            .components
            .iter()
            .filter(|name| !seen.contains(name.as_str()))
            .map(|name| DocumentError::MissingComponent(name.clone())),
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn check_state(state: &str, at: &str, problems: &mut Vec<DocumentError>) {
    if DeploymentState::parse(state).is_none() {
        problems.push(DocumentError::UnknownState {
            at: at.to_owned(),
            state: state.to_owned(),
        });
    }
}

/// Whether `id` is a device id of `version`: `id[/id…]` of RFC 3986
/// unreserved characters; 1.0.0 also allows a final `/*` (a gateway that
/// was asked to place the deployment and could not).
pub fn is_device_id(id: &str, version: SpecVersion) -> bool {
    let id = match id.strip_suffix("/*") {
        Some(placed_by_gateway) if version == SpecVersion::V1 => placed_by_gateway,
        _ => id,
    };
    id.split('/').all(|part| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-'))
    })
}

/// The `deviceId` problems: off the pattern, or not the client or below it.
fn device_problems(
    document: &DeploymentStatusDocument,
    expected: &Expected<'_>,
) -> Option<DocumentError> {
    let device_id = document.device_id.as_deref()?;
    if !is_device_id(device_id, expected.version) {
        return Some(DocumentError::BadDeviceId {
            device_id: device_id.to_owned(),
            version: expected.version,
        });
    }
    let client = expected.client?;
    let of_client = device_id == client
        || device_id
            .strip_prefix(client)
            .is_some_and(|rest| rest.starts_with('/'));
    (!of_client).then(|| DocumentError::DeviceNotOfClient {
        device_id: device_id.to_owned(),
        client: client.to_owned(),
    })
}

/// A reserved gateway code's source must be a gateway above the device
/// reported on: a proper prefix of its `deviceId` hierarchy.
fn check_gateway_code(
    document: &DeploymentStatusDocument,
    error: Option<&StatusError>,
    at: &str,
    problems: &mut Vec<DocumentError>,
) {
    let Some(error) = error.filter(|error| GATEWAY_ERROR_CODES.contains(&error.code.as_str()))
    else {
        return;
    };
    let device_id = document.device_id.as_deref().unwrap_or_default();
    let source = error.source.as_deref().unwrap_or_default();
    let is_gateway = !source.is_empty()
        && device_id
            .strip_prefix(source)
            .is_some_and(|rest| rest.starts_with('/'));
    if !is_gateway {
        problems.push(DocumentError::GatewayCodeSource {
            at: at.to_owned(),
            code: error.code.clone(),
            source_id: source.to_owned(),
            device_id: device_id.to_owned(),
        });
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
    /// The error of the first failed instance, if one failed (its `source` is
    /// replaced: Margo wants the component's name there).
    pub error: Option<StatusError>,
}

/// The deployment a document is written for.
#[derive(Debug, Clone, Copy)]
pub struct DeploymentRef<'a> {
    /// Its stable id ([`deployment_id`]).
    pub id: &'a str,
    /// Its name (the plan's), the `source` of a deployment-wide error.
    pub name: &'a str,
    /// The revision the document reflects (`adoptedManifestVersion`).
    pub revision: u64,
}

/// The document Shoal writes for one deployment: components in the order
/// given, each with its state from its instances and, when failed, its error
/// with the component's name as source; the overall state from the
/// components; a failed deployment carries its first failed component's
/// error, with the deployment's name as source and the component named in
/// the message.
pub fn document_for(
    deployment: DeploymentRef<'_>,
    components: &[ComponentInput],
) -> DeploymentStatusDocument {
    let components: Vec<ComponentStatus> = components.iter().map(component_status).collect();
    let state = overall_state(
        components
            .iter()
            .filter_map(|component| DeploymentState::parse(&component.state)),
    );
    let error = (state == DeploymentState::Failed)
        .then(|| {
            components.iter().find_map(|component| {
                let error = component.error.as_ref()?;
                Some(StatusError {
                    code: error.code.clone(),
                    source: Some(deployment.name.to_owned()),
                    message: format!("component {}: {}", component.name, error.message),
                })
            })
        })
        .flatten();
    DeploymentStatusDocument {
        api_version: Some(API_VERSION.to_owned()),
        kind: Some(KIND.to_owned()),
        deployment_id: deployment.id.to_owned(),
        device_id: None,
        adopted_manifest_version: Some(deployment.revision),
        status: OverallStatus {
            state: state.as_str().to_owned(),
            error,
        },
        components,
    }
}

fn component_status(component: &ComponentInput) -> ComponentStatus {
    let state = overall_state(component.states.iter().copied());
    let error = (state == DeploymentState::Failed)
        .then(|| component.error.clone())
        .flatten()
        .map(|error| StatusError {
            source: Some(component.name.clone()),
            ..error
        });
    ComponentStatus {
        name: component.name.clone(),
        state: state.as_str().to_owned(),
        error,
    }
}

/// The id of the deployment of the plan whose uid is `plan_uid`: a UUID
/// (RFC 9562 version 8, name-based on SHA-256), the same for every revision
/// of the deployment (Margo keeps one id per deployment and tells revisions
/// apart by `adoptedManifestVersion`), and never that of another plan (one
/// recreated under the same name gets a new uid).
pub fn deployment_id(plan_uid: &str) -> String {
    let digest = Sha256::digest(format!("shoal.dev/deployment\n{plan_uid}"));
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
    fn the_overall_state_is_the_most_severe_in_the_specs_order() {
        let table: &[(&[DeploymentState], DeploymentState)] = &[
            (&[], Pending),
            (&[Pending], Pending),
            (&[Pending, Installing], Installing),
            (&[Pending, Installed], Pending),
            (&[Installing, Installed], Installing),
            (&[Installed, Installed], Installed),
            (&[Installed, Failed], Failed),
            (&[Pending, Failed], Failed),
            (&[Removing, Failed], Failed),
            (&[Removed, Failed], Failed),
            (&[Installed, Removing], Removing),
            (&[Installing, Removing], Removing),
            (&[Installed, Removed], Removed),
            (&[Pending, Removed], Pending),
            (&[Removing, Removed], Removing),
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
    fn a_deployment_id_is_a_version_8_uuid_one_per_plan_for_every_revision() {
        let id = deployment_id("0b5c7a4e-uid");
        assert_eq!(id, deployment_id("0b5c7a4e-uid"));
        assert_ne!(id, deployment_id("another-uid"));
        let groups: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert_eq!(&id[14..15], "8");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
    }

    #[test]
    fn a_failed_component_fails_the_deployment_with_the_component_and_deployment_as_sources() {
        let error = StatusError {
            code: "ExitCode1".into(),
            source: Some("instance web-1 on pool-1".into()),
            message: "instance web-1 on pool-1: exited with status 1".into(),
        };
        let deployment = DeploymentRef {
            id: "id-1",
            name: "web",
            revision: 2,
        };
        let document = document_for(
            deployment,
            &[
                ComponentInput {
                    name: "nginx".into(),
                    states: vec![Installed, Installed],
                    error: None,
                },
                ComponentInput {
                    name: "db".into(),
                    states: vec![Installed, Failed],
                    error: Some(error),
                },
            ],
        );
        assert_eq!(document.kind.as_deref(), Some("DeploymentStatusManifest"));
        assert_eq!(document.status.state, "failed");
        let overall = document.status.error.clone().expect("an overall error");
        assert_eq!(overall.source.as_deref(), Some("web"));
        assert_eq!(
            overall.message,
            "component db: instance web-1 on pool-1: exited with status 1"
        );
        assert_eq!(document.components[0].error, None);
        let component = document.components[1].error.clone().expect("an error");
        assert_eq!(component.source.as_deref(), Some("db"));
        assert_eq!(component.code, "ExitCode1");
        assert_eq!(document.adopted_manifest_version, Some(2));
    }

    #[test]
    fn device_ids_follow_each_versions_pattern() {
        for id in ["edge-1", "gw.1/child_2/x~y", "a/b/c"] {
            assert!(is_device_id(id, SpecVersion::V1), "{id}");
            assert!(is_device_id(id, SpecVersion::V1Rc3), "{id}");
        }
        assert!(is_device_id("gw/*", SpecVersion::V1));
        assert!(!is_device_id("gw/*", SpecVersion::V1Rc3));
        for id in ["", "/a", "a/", "a//b", "a b", "*", "a/*/b", "ü"] {
            assert!(!is_device_id(id, SpecVersion::V1), "{id:?}");
        }
    }
}
