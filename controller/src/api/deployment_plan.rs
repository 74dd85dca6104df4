//! The `DeploymentPlan` custom resource (`shoal.dev/v1alpha1`): replicated
//! applications ("instances") placed on the members of a Swarm's pools.
//!
//! A plan names the Swarm whose members may run it, the applications every
//! instance runs (with their resource demands and ports), the capabilities a
//! member must offer, and its current *deployment*: how many instances, with
//! which payload coordinates (image, version, config) per application. Each
//! change of the deployment is a new deployment revision; every change to an
//! instance (create, update, relocate, stop, restart, delete) is an operation
//! that goes through the plan's approval policy.
//!
//! What a member offers is set on its pool, where a kubectl user sets things
//! (`kubectl label` / `kubectl annotate statefulset`):
//!
//! | on the pool StatefulSet | meaning | default |
//! | --- | --- | --- |
//! | annotation `shoal.dev/update-domain` | the update domain of its members | the node's zone, else the pool's name |
//! | annotation `shoal.dev/capabilities` | capabilities with scores, e.g. `GPU=nvidia-v100:3,nvidia-p100:2;CPU=intel-xeon` | none |
//! | annotation `shoal.dev/capacity` | capacity of each member in the units the plans' demands use, e.g. `cores=4,memory=8192` | none declared |
//! | annotation `shoal.dev/reserved` | what each member keeps for itself, taken from its capacity before plans are placed (MRDS's system reserved), e.g. `cores=4,memory=32` | nothing |
//!
//! The rules (comparators, placement, operation states) are those of
//! `shoal_core::deploy`.
//!
//! The CRD YAML in `manifests/crd-deploymentplan.yaml` is generated from these
//! types: `cargo run -p shoal-controller -- crd deploymentplan`.

// Several `printcolumn(type_ = "string")` attributes are distinct columns, not duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;

use crate::api::approval_record::ApprovalRecord;
use serde::{Deserialize, Serialize};
use shoal_core::deploy::status::DeploymentStatusDocument;

use crate::api::limits;
use crate::api::swarm::{ApprovalSpec, Condition};

/// Replicated applications placed on the members of a Swarm, changed only through approved operations.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "shoal.dev",
    version = "v1alpha1",
    kind = "DeploymentPlan",
    namespaced,
    status = "DeploymentPlanStatus",
    shortname = "dplan",
    doc = "A DeploymentPlan places instances of its applications on the members of a Swarm's pools; every change to an instance is an operation that goes through the plan's approval policy.",
    printcolumn(
        name = "Swarm",
        type_ = "string",
        description = "the Swarm whose members run the instances",
        json_path = ".spec.swarm"
    ),
    printcolumn(
        name = "Instances",
        type_ = "string",
        description = "instances installed / desired",
        json_path = ".status.ready"
    ),
    printcolumn(
        name = "Deployment",
        type_ = "integer",
        description = "deployment revision in force",
        json_path = ".status.currentDeployment"
    ),
    printcolumn(
        name = "Pending",
        type_ = "integer",
        description = "operations waiting for approval",
        json_path = ".status.pendingOperations"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Rollout",
        type_ = "string",
        description = "where the rollout of the latest deployment stands: Paused is the user's pause only (spec.paused); CanaryWait a canary's pause; Halted a failure",
        json_path = ".status.rollout.phase"
    ),
    printcolumn(
        name = "Next-Window",
        type_ = "string",
        description = "when the next maintenance window opens, while approved operations wait for it",
        json_path = ".status.nextWindow"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPlanSpec {
    /// The Swarm (same namespace) whose members may run this plan's instances.
    #[schemars(length(min = 1, max = limits::MAX_NAME), pattern(crate::api::swarm::DNS_SUBDOMAIN_PATTERN))]
    pub swarm: String,
    /// The applications every instance runs.
    #[schemars(length(min = 1, max = limits::MAX_APPLICATIONS))]
    pub applications: Vec<Application>,
    /// Capabilities a member must offer to run an instance; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_REQUIREMENTS))]
    pub requirements: Vec<CapabilityRequirement>,
    /// At most this many instances of this plan on one member.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_instances_per_member: u32,
    /// The deployment in force once approved: instance count and payload coordinates.
    pub deployment: DeploymentSpec,
    /// Which operations apply at once and which wait for `shoal.dev/approve`.
    #[serde(default)]
    pub approval: ApprovalSpec,
    /// How many finished operations are kept in `status.operations`.
    #[serde(default = "default_operation_history_limit")]
    #[schemars(range(min = 1, max = limits::MAX_OPERATION_HISTORY))]
    pub operation_history_limit: u32,
    /// How many deployment revisions `status.deployments` keeps beyond those still in use
    /// by an instance or an open operation (the newest ones are kept).
    #[serde(default = "default_deployment_history_limit")]
    #[schemars(range(min = 1, max = limits::MAX_DEPLOYMENT_HISTORY))]
    pub deployment_history_limit: u32,
    /// The user's pause, for every rollout type: while true, no further `UPDATE` is released
    /// (Rolling: the active update domain is held; Canary: the canaries and the rest; BlueGreen:
    /// no green copy is started and no switch made). Instances already updated stay as they
    /// are; operations already approved go on; scaling still applies. `status.rollout.phase`
    /// is `Paused` while it holds a rollout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// A headless Service (`clusterIP: None`, no selector) of this name, owned by the plan,
    /// whose EndpointSlices list the pods of the members holding the plan's instances,
    /// with the applications' ports. A name another object holds is reported
    /// (`Degraded`, `OwnershipConflict`), never taken over. Changing or removing it removes
    /// the plan's earlier Service and EndpointSlices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(SERVICE_NAME_PATTERN))]
    pub service_name: Option<String>,
}

/// A Service name (DNS-1035 label): lowercase alphanumerics and `-`, starting with a
/// letter, ending alphanumeric.
const SERVICE_NAME_PATTERN: &str = r"^[a-z]([-a-z0-9]*[a-z0-9])?$";

/// A DNS label: lowercase alphanumerics and `-`, alphanumeric at both ends.
const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

fn one() -> u32 {
    1
}

fn default_operation_history_limit() -> u32 {
    100
}

fn default_deployment_history_limit() -> u32 {
    10
}

/// One application of a plan: what each instance runs of it and what it needs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Application {
    /// Name, unique within the plan (a DNS label).
    #[schemars(length(min = 1, max = limits::MAX_LABEL), pattern(DNS_LABEL_PATTERN))]
    pub name: String,
    /// What one instance of the application takes from its member, in the units of the
    /// pools' `shoal.dev/capacity` annotation, e.g. `{cores: 1, memory: 512}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = limits::MAX_RESOURCES))]
    pub resources: BTreeMap<String, u64>,
    /// Ports the application listens on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_PORTS))]
    pub ports: Vec<Port>,
}

/// A port an application listens on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    /// `TCP` (default) or `UDP`.
    #[serde(default)]
    pub protocol: Protocol,
    /// The port number.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
}

impl Port {
    /// The port in the core's terms.
    pub fn core(&self) -> shoal_core::deploy::Port {
        match self.protocol {
            Protocol::TCP => shoal_core::deploy::Port::tcp(self.port),
            Protocol::UDP => shoal_core::deploy::Port::udp(self.port),
        }
    }
}

/// A transport protocol.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum Protocol {
    /// TCP.
    #[default]
    TCP,
    /// UDP.
    UDP,
}

/// A capability a member must (or must not) offer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityRequirement {
    /// The capability type, e.g. `GPU`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = limits::MAX_LABEL))]
    pub type_: String,
    /// How the member's capabilities of that type compare with `names`.
    pub comparator: Comparator,
    /// Capability names of that type, e.g. `nvidia-v100`.
    #[schemars(length(min = 1, max = limits::MAX_REQUIREMENTS), inner(length(min = 1, max = limits::MAX_NAME)))]
    pub names: Vec<String>,
}

/// How a requirement compares a member's capabilities with the names it lists.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Comparator {
    /// The member offers one of the names.
    In,
    /// The member offers none of the names.
    NotIn,
    /// The member offers a capability of that type scored at least as high as the lowest-scored name.
    Gte,
    /// The member offers a capability of that type scored at most as high as the highest-scored name.
    Lte,
}

/// A deployment: how many instances, running what.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// How many instances.
    #[schemars(range(min = 0, max = shoal_core::deploy::placement::MAX_INSTANCES))]
    pub instances: u32,
    /// Payload coordinates per application (e.g. `image`, `version`, `config`); an
    /// application not listed has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_APPLICATIONS))]
    pub payloads: Vec<Payload>,
    /// How a changed payload reaches the instances.
    #[serde(default)]
    pub rollout: DeploymentRollout,
}

/// What one application runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Payload {
    /// The application's name.
    #[schemars(length(max = limits::MAX_LABEL))]
    pub application: String,
    /// Coordinates handed to the instance (as environment variables in exec mode).
    #[serde(default)]
    #[schemars(extend("maxProperties" = limits::MAX_COORDINATES))]
    #[schemars(extend("additionalProperties" = {"type": "string", "maxLength": limits::MAX_COORDINATE_VALUE}))]
    pub coordinates: BTreeMap<String, String>,
}

/// How a new deployment replaces the one in force.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.type) && self.type == 'Canary') || (!has(self.canaryInstances) && !has(self.pauseSeconds))",
    "message": "canaryInstances and pauseSeconds apply to rollout type Canary only"
}, {
    "rule": "!has(self.domainOrder) || size(self.domainOrder) == 0 || !has(self.type) || self.type == 'Rolling'",
    "message": "domainOrder applies to rollout type Rolling only (a Canary or BlueGreen rollout is not ordered by domain): set type Rolling, and canaryInstances and pauseSeconds to null in a merge patch"
}]))]
pub struct DeploymentRollout {
    /// `Rolling` (default): instances are updated in place, one update domain at a time
    /// (`domainOrder`), each operation through the approval policy. `Canary`: `canaryInstances` instances (spread over update domains)
    /// are updated first; the rest wait until every canary reports installed and then
    /// `pauseSeconds` have passed (through the approval policy), or, without
    /// `pauseSeconds`, wait for approval whatever the policy; a failed canary halts the
    /// rollout until the next deployment. `BlueGreen`: a complete second set comes up
    /// before the old set is removed, after approval.
    #[serde(default, rename = "type")]
    pub type_: RolloutType,
    /// Canary: how many instances take the new payload first (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = shoal_core::deploy::placement::MAX_INSTANCES))]
    pub canary_instances: Option<u32>,
    /// Canary: once every canary reports installed, the rest follow after this many
    /// seconds (through the approval policy). Unset: the rest wait for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604800))]
    pub pause_seconds: Option<u32>,
    /// Rolling: the update domains in the order their instances are updated, one domain
    /// at a time (the next starts when every instance of the previous one reports
    /// installed); domains not listed follow in byte order. Empty: byte order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_DOMAIN_ORDER), inner(length(max = limits::MAX_NAME)))]
    pub domain_order: Vec<String>,
}

/// A rollout type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum RolloutType {
    /// In place, update domain by update domain.
    #[default]
    Rolling,
    /// A few instances first, the rest after approval.
    Canary,
    /// A complete second set, then the old set is removed after approval.
    BlueGreen,
}

/// What the controller observed and did for a plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPlanStatus {
    /// Ready, Progressing, AwaitingApproval, Degraded, WaitingForSwarm (open
    /// operations target members the Swarm's revision in force does not hold yet),
    /// ReportsIgnored, RolloutHalted.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_CONDITIONS))]
    pub conditions: Vec<Condition>,
    /// The plan generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Deployment revision in force (0: none yet).
    #[serde(default)]
    pub current_deployment: u64,
    /// The highest deployment revision number given so far.
    #[serde(default)]
    pub latest_deployment: u64,
    /// Every deployment number up to this one was given or burnt (by an approval that
    /// named it before it existed); the next revision takes a higher one. Never lowered.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deployment_counter: u64,
    /// Every operation number up to this one was given or burnt; an operation id ends in
    /// its number (`create-web-0-r3-7`), so an id is never given twice, even after the
    /// history that held it was pruned. Never lowered.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub operation_counter: u64,
    /// Fingerprint of the `spec.deployment` and `spec.applications` that
    /// `latestDeployment` was given for: a change of either is a new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_HASH))]
    pub deployment_hash: Option<String>,
    /// Instances installed / desired, e.g. `2/3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_WORD))]
    pub ready: Option<String>,
    /// Operations waiting for approval.
    #[serde(default)]
    pub pending_operations: u32,
    /// The value of `shoal.dev/approve` that approves at once every operation of the
    /// latest deployment awaiting approval, `deployment-<revision>/<hash>` (the hash covers
    /// exactly those operations). A plain string: server-side apply removes it cleanly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_APPROVE_VALUE))]
    pub approve_deployment_with: Option<String>,
    /// Each instance: where it runs and how it is doing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_PLAN_INSTANCES))]
    pub instances: Vec<InstanceStatus>,
    /// The deployment revisions, oldest first: what each one deploys. A record is kept
    /// while an instance or an open operation uses its revision, and the newest
    /// `spec.deploymentHistoryLimit` records are kept besides. Members receive the
    /// payload coordinates of an instance's revision from here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_DEPLOYMENT_RECORDS))]
    pub deployments: Vec<DeploymentRecord>,
    /// Instances that fit on no member, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_UNPLACED))]
    pub unplaced: Vec<UnplacedInstance>,
    /// Operations, newest last: open ones and up to `operationHistoryLimit` finished ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_OPERATIONS))]
    pub operations: Vec<OperationStatus>,
    /// Annotations the controller refused, with the value refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = limits::MAX_REFUSED_ANNOTATIONS))]
    #[schemars(extend("additionalProperties" = {"type": "string", "maxLength": limits::MAX_ENTRY_MESSAGE}))]
    pub refused_annotations: BTreeMap<String, String>,
    /// The requests of the `shoal.dev/operate` annotation already handled (accepted as
    /// an operation or refused with a Warning): each request is handled once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_HANDLED_REQUESTS), inner(length(max = limits::MAX_REQUEST_TEXT)))]
    pub handled_requests: Vec<String>,
    /// The canary or blue-green rollout of the latest deployment, when its rollout is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// While approved operations wait for a maintenance window: when the next one opens
    /// (RFC 3339). The WaitingForWindow condition names the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_TIMESTAMP))]
    pub next_window: Option<String>,
    /// `Pending`, `AwaitingApproval`, `WaitingForSwarm`, `Progressing`, `Ready` or `Degraded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_WORD))]
    pub phase: Option<String>,
    /// The last problem, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_MESSAGE))]
    pub last_error: Option<String>,
    /// Member reports the controller did not act on: a report is evidence of an approved
    /// change, never a change (see `deployment::reports`).
    #[serde(default, skip_serializing_if = "IgnoredReports::is_empty")]
    pub ignored_reports: IgnoredReports,
    /// The Service of `spec.serviceName` as the controller last wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceStatus>,
    /// One deployment status document (Margo 1.0.0 `DeploymentStatusManifest`)
    /// per deployment revision in use or recent, oldest first, all under the
    /// plan's one `deploymentId`, the revision in `adoptedManifestVersion`:
    /// overall state, one entry per application, errors. `GET
    /// /api/v1/deployments/{deploymentId}/status` serves the latest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_DEPLOYMENT_RECORDS))]
    pub deployment_status: Vec<DeploymentStatusDocument>,
}

impl DeploymentPlanStatus {
    /// The record of deployment revision `revision`, if still kept.
    pub fn deployment(&self, revision: u64) -> Option<&DeploymentRecord> {
        self.deployments
            .iter()
            .find(|record| record.revision == revision)
    }
}

/// The plan's headless Service (`spec.serviceName`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// The Service's name.
    #[schemars(length(max = limits::MAX_NAME))]
    pub name: String,
    /// Endpoints listed: one per member pod holding a delivered instance, with an IP.
    pub endpoints: u32,
    /// Of those, endpoints marked ready: the pod is Ready and an instance on it reports
    /// installed.
    pub ready: u32,
    /// Ports of the Service, e.g. `TCP/80,UDP/53`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = limits::MAX_MESSAGE))]
    pub ports: String,
    /// Why the Service is not the plan's (a name held by another object), when it is not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub conflict: String,
}

/// Member reports (`shoal.dev/instance-states`) that no approved operation allows, and so
/// changed nothing: the instance stays as it was (delivered, if it was).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct IgnoredReports {
    /// How many distinct reports were ignored over the plan's life (each counted, and
    /// announced by a Warning `ReportIgnored`, when first seen).
    #[serde(default)]
    pub count: u64,
    /// The reports ignored now, by member and instance (at most
    /// `deployment::reports::MAX_LISTED_IGNORED`; the rest are ignored too, not listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_LISTED_IGNORED))]
    pub current: Vec<IgnoredReport>,
}

impl IgnoredReports {
    /// Nothing was ever ignored.
    pub fn is_empty(&self) -> bool {
        self.count == 0 && self.current.is_empty()
    }
}

/// One member report the controller ignored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoredReport {
    /// The member (pod) whose Lease carries the report.
    #[schemars(length(max = limits::MAX_NAME))]
    pub member: String,
    /// The instance it names.
    #[schemars(length(max = limits::MAX_INSTANCE_NAME))]
    pub instance: String,
    /// The state it reports, as written.
    #[schemars(length(max = limits::MAX_WORD))]
    pub state: String,
    /// The deployment revision it reports.
    pub deployment: u64,
    /// Why it changes nothing, in words.
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub why: String,
}

/// What one deployment revision deploys, as `spec.deployment` was when the revision was taken.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentRecord {
    /// The revision number.
    pub revision: u64,
    /// The fingerprint (`status.deploymentHash`) the revision was taken for.
    #[schemars(length(max = limits::MAX_HASH))]
    pub hash: String,
    /// `spec.deployment.payloads` as they were.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_APPLICATIONS))]
    pub payloads: Vec<Payload>,
    /// `spec.deployment.rollout` as it was.
    #[serde(default)]
    pub rollout: DeploymentRollout,
    /// `spec.applications[].ports` as they were, for each application with ports: what
    /// members receive in their slices. Absent in records taken before ports were
    /// recorded: their instances get no ports until the next deployment revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_APPLICATIONS))]
    pub ports: Vec<ApplicationPorts>,
    /// `spec.deployment.instances` when the revision was taken.
    #[serde(default)]
    pub instances: u32,
    /// The plan's `kubernetes.io/change-cause` annotation when the revision was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_CHANGE_CAUSE))]
    pub change_cause: Option<String>,
    /// When the revision was taken (RFC 3339).
    #[schemars(length(max = limits::MAX_TIMESTAMP))]
    pub created: String,
    /// Who approved operations of this revision: each approver once, first approval
    /// first (`shoal-controller (Automatic)` for the policy's own approvals).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_APPROVALS))]
    pub approvals: Vec<ApprovalRecord>,
    /// `deployment-<revision>/<hash>` approvals of this revision that approved its
    /// waiting operations: used up, they approve nothing more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_APPROVALS), inner(length(max = limits::MAX_APPROVE_VALUE)))]
    pub approved_with: Vec<String>,
    /// `deployment-<revision>/<hash>` approvals of this revision refused when first read:
    /// they stay refused, even when the set they name waits later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_APPROVALS), inner(length(max = limits::MAX_APPROVE_VALUE)))]
    pub refused_with: Vec<String>,
}

/// The ports of one application, as a deployment record keeps them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationPorts {
    /// The application's name.
    #[schemars(length(max = limits::MAX_LABEL))]
    pub application: String,
    /// Its ports.
    #[schemars(length(max = limits::MAX_PORTS))]
    pub ports: Vec<Port>,
}

/// Every `status.rollout.phase` of every rollout type ([`RolloutStatus::phase`]), for
/// the metrics' bounded label set.
pub const ROLLOUT_PHASES: [&str; 9] = [
    "Canary",
    "CanaryWait",
    "Promoted",
    "Deploying",
    "Switching",
    "Progressing",
    "Complete",
    "Halted",
    "Paused",
];

/// Every `status.instances[].state` ([`InstanceStatus::state`]): Margo's six, then the two
/// a user's STOP and RESTART hold an instance in.
pub const INSTANCE_STATES: [&str; 8] = [
    "pending",
    "installing",
    "installed",
    "removing",
    "removed",
    "failed",
    "stopped",
    "restarting",
];

/// Where a canary or blue-green rollout of one deployment revision stands.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The deployment revision rolled out.
    pub deployment: u64,
    /// Canary: `Canary` (the canaries take it), `CanaryWait` (they are installed and
    /// `pauseSeconds` runs), `Promoted` (the rest may follow), `Halted` (a canary failed:
    /// nothing more until the next deployment). Blue-green: `Deploying`, `Switching` (the
    /// old set is removed through the gate), `Complete`, `Halted` (a new copy failed).
    /// Rolling: `Progressing`, `Complete`, `Halted`. Every type: `Paused` while the user's
    /// pause (`spec.paused`) holds it, and only then.
    #[schemars(length(max = limits::MAX_WORD))]
    pub phase: String,
    /// The canary instances, chosen when the rollout started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_CANARIES), inner(length(max = limits::MAX_INSTANCE_NAME)))]
    pub canaries: Vec<String>,
    /// When every canary was first seen installed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_TIMESTAMP))]
    pub canaries_installed_at: Option<String>,
    /// What the rollout waits for, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = limits::MAX_MESSAGE))]
    pub message: String,
    /// Rolling: every update domain in rollout order with its state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_STATUS_DOMAINS))]
    pub domains: Vec<DomainRollout>,
}

/// Where one update domain stands in an ordered (Rolling) rollout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainRollout {
    /// The update domain.
    #[schemars(length(max = limits::MAX_NAME))]
    pub name: String,
    /// `Waiting`, `Updating`, `Paused`, `Done` or `Failed`.
    #[schemars(length(max = limits::MAX_WORD))]
    pub state: String,
    /// Its instances installed at the rolled-out deployment / its instances, e.g. `1/2`.
    #[schemars(length(max = limits::MAX_WORD))]
    pub installed: String,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub cause: String,
}

/// One instance of a plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// `<plan>-<n>`: a stable logical replica that outlives its placement.
    #[schemars(length(max = limits::MAX_INSTANCE_NAME))]
    pub name: String,
    /// The member (pod) it is placed on.
    #[schemars(length(max = limits::MAX_NAME))]
    pub member: String,
    /// That member's update domain.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = limits::MAX_NAME))]
    pub update_domain: String,
    /// The deployment revision whose payload it runs.
    pub deployment: u64,
    /// `pending`, `installing`, `installed`, `removing`, `removed` or `failed`; `stopped`
    /// (a user stopped it: placement and capacity kept, not running) or `restarting` (a
    /// user restart: not running until its member reports it gone, then `pending`).
    #[schemars(length(max = limits::MAX_WORD))]
    pub state: String,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<InstanceError>,
}

impl InstanceStatus {
    /// Whether the entry belongs in its member's slice: states `pending`, `installing`,
    /// `installed` and `failed` (a failed instance stays delivered, so that its member keeps
    /// reporting the failure rather than restarting it). `removing`, `removed`, `stopped`,
    /// `restarting` and anything unknown are not delivered: the member stops the instance.
    pub fn delivered(&self) -> bool {
        matches!(
            self.state.as_str(),
            "pending" | "installing" | "installed" | "failed"
        )
    }
}

/// An instance's error, as its member reported it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceError {
    /// A short machine-readable code, e.g. `ExitCode1`.
    #[schemars(length(max = limits::MAX_ERROR_CODE))]
    pub code: String,
    /// Who reported it, e.g. the member's pod name.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_NAME))]
    pub source: String,
    /// What happened, in words.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub message: String,
}

/// An instance that fits on no member.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnplacedInstance {
    /// The instance.
    #[schemars(length(max = limits::MAX_INSTANCE_NAME))]
    pub name: String,
    /// Why it fits nowhere, naming the requirement, resource or limit.
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub reason: String,
}

/// One operation on one instance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationStatus {
    /// `<type>-<instance>-r<deployment>-<number>`, the number from `status.operationCounter`
    /// (ids given before numbers: `<type>-<instance>-r<deployment>`, `.2`… on a repeat): never
    /// given twice within the plan.
    #[schemars(length(max = limits::MAX_OPERATION_ID))]
    pub id: String,
    /// `CREATE`, `UPDATE`, `RELOCATE`, `STOP`, `RESTART` or `DELETE`.
    #[serde(rename = "type")]
    #[schemars(length(max = limits::MAX_WORD))]
    pub type_: String,
    /// The instance it acts on.
    #[schemars(length(max = limits::MAX_INSTANCE_NAME))]
    pub instance: String,
    /// The member the instance leaves (RELOCATE, STOP, DELETE) or runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_NAME))]
    pub from_member: Option<String>,
    /// The member the instance goes to (CREATE, RELOCATE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_NAME))]
    pub to_member: Option<String>,
    /// The deployment revision it belongs to.
    pub deployment: u64,
    /// `PENDING`, `PENDING_APPROVAL`, `APPROVED`, `SUCCEEDED` or `FAILED`.
    #[schemars(length(max = limits::MAX_WORD))]
    pub state: String,
    /// Hash of what the operation does; an approval must name it.
    #[schemars(length(max = limits::MAX_HASH))]
    pub hash: String,
    /// The value of `shoal.dev/approve` that approves exactly this operation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = limits::MAX_APPROVE_VALUE))]
    pub approve_with: String,
    /// What happened, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub message: String,
    /// Why a `FAILED` operation failed: `Superseded` (a newer deployment replaced it
    /// before approval), `Withdrawn` (no longer needed), `Reported` (its member reported
    /// the instance failed; the code is in `errorCode`) or `TargetLeft` (the member it went
    /// to left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_WORD))]
    pub reason: Option<String>,
    /// The member's error code of a `Reported` failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_ERROR_CODE))]
    pub error_code: Option<String>,
    /// The `shoal.dev/operate` request it was made for, when a user asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_REQUEST_TEXT))]
    pub request: Option<String>,
    /// When `state` last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_TIMESTAMP))]
    pub last_transition_time: Option<String>,
    /// Who approved it and when, once approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
}

/// Serde: leave a zero counter out (status written before counters existed reads as 0).
fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// The CRD as YAML, exactly as written to `manifests/crd-deploymentplan.yaml`.
pub fn crd_yaml() -> String {
    crate::api::swarm::render_crd::<DeploymentPlan>(
        "crd deploymentplan > manifests/crd-deploymentplan.yaml",
    )
}
