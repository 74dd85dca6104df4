//! The DeploymentPlan's pure decision: a [`PlanObservation`] in (the time is an
//! input), a [`PlanDecision`] out: the status to write and the Events of the
//! transitions it made. [`decide`](decide()) is the one entry; its rules, one pass
//! in order, are in the `pass` module docs. No I/O: `super::observe` reads the
//! cluster into the observation, `super::apply` writes the decision.
//!
//! The placement in force is `status.instances`: the controller is the only
//! writer of a plan's status, and the status subresource keeps users' spec
//! edits from touching it. A direct edit of the status by someone allowed to
//! write it is put back from the member slices (see `drift`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::api::deployment_plan::{DeploymentPlanSpec, DeploymentPlanStatus};
use crate::observed::LeaseState;
use crate::planned::PlannedEvent;

mod blue_green;
pub mod drift;
mod gate;
mod history;
mod members;
mod ordered;
mod pass;
mod reports;
mod requests;
mod rollout;
pub mod service;
mod size;
mod status;
mod status_document;
#[cfg(test)]
pub(super) mod tests;

pub use members::{demand as instance_demand, reserved_by_plans};
pub use pass::decide;
pub use reports::InstanceReport;
pub use requests::{Verb, parse_request, request_item, request_items};

/// One pod of a pool, as a plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberPod {
    /// Pod uid.
    pub uid: String,
    /// Its Ready condition is True.
    pub ready: bool,
    /// It has a deletion timestamp.
    pub deleting: bool,
    /// The `topology.kubernetes.io/zone` label of its node, when known.
    pub node_zone: Option<String>,
    /// Its IP, once it has one (the plan's Service lists it).
    pub ip: Option<String>,
}

/// A StatefulSet labelled for the plan's Swarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolObservation {
    /// StatefulSet name.
    pub name: String,
    /// Its annotations (capabilities, capacity, update domain).
    pub annotations: BTreeMap<String, String>,
    /// Its pods by ordinal.
    pub pods: BTreeMap<u32, MemberPod>,
}

impl PoolObservation {
    /// Its members: pod name `<pool>-<ordinal>` and pod.
    pub fn members(&self) -> impl Iterator<Item = (String, &MemberPod)> {
        self.pods
            .iter()
            .map(move |(ordinal, pod)| (format!("{}-{ordinal}", self.name), pod))
    }
}

/// A member Lease, as far as plans read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberLease {
    /// Who holds it (only `holder` and `pod_uid` are read here).
    pub lease: LeaseState,
    /// The `shoal.dev/instance-states` annotation, as written.
    pub instance_states: Option<String>,
}

/// Another DeploymentPlan of the namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherPlan {
    /// Its name.
    pub name: String,
    /// Its spec.
    pub spec: DeploymentPlanSpec,
    /// Its status (its placement in force).
    pub status: DeploymentPlanStatus,
}

/// What a plan reads of its Swarm: instances reach a member only through the
/// Swarm's slices, which exist only for the members of the Swarm's revision in
/// force, so a plan placed on members that revision does not hold waits for the
/// Swarm (and says so, naming what to approve).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwarmView {
    /// Members with a slice in the Swarm's revision in force
    /// (`status.members[].sliceHash` set).
    pub members_in_force: BTreeSet<String>,
    /// The Swarm's revision waiting for approval, if one does.
    pub pending: Option<PendingSwarmRevision>,
    /// Members its `spec.cordon` names (pod names): they get no new instances.
    pub cordoned: BTreeSet<String>,
    /// Of those, the ones being drained: their instances are relocated (through the
    /// operations' approval, like any relocation).
    pub draining: BTreeSet<String>,
}

/// A Swarm revision waiting for approval, as its status names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSwarmRevision {
    /// Its number.
    pub revision: u64,
    /// The `shoal.dev/approve` value that approves it.
    pub approve_with: String,
}

/// Everything [`decide`](decide()) looks at for one plan.
#[derive(Debug, Clone)]
pub struct PlanObservation {
    /// The plan's name.
    pub name: String,
    /// The plan's uid (deployment ids derive from it).
    pub uid: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The spec.
    pub spec: DeploymentPlanSpec,
    /// The plan's annotations (`shoal.dev/approve`, `shoal.dev/operate`).
    pub annotations: BTreeMap<String, String>,
    /// The status as last written.
    pub status: DeploymentPlanStatus,
    /// The Swarm `spec.swarm`, when it exists in the namespace.
    pub swarm: Option<SwarmView>,
    /// The Swarm's pools.
    pub pools: Vec<PoolObservation>,
    /// Member Leases by pod name.
    pub leases: BTreeMap<String, MemberLease>,
    /// The other plans of the namespace (those of other Swarms are ignored).
    pub other_plans: Vec<OtherPlan>,
    /// Placement record fields (`instances`, `deployments`) last written by a
    /// field manager other than the controller: field → that manager (see `drift`).
    pub record_editors: BTreeMap<String, String>,
    /// The plan's instances as the member slices hold them, the source an edited
    /// `status.instances` is put back from; read only when `record_editors` names
    /// `instances` (else empty), `Err` with why when a slice cannot be trusted.
    pub held_instances: Result<Vec<drift::HeldInstance>, String>,
    /// Whether the admission policy `shoal-approved-by` is in force, so that
    /// `shoal.dev/approved-by` names who set the approval (see [`crate::approvers`]).
    /// Read only in a pass where the approval annotation can approve something; `false`
    /// otherwise.
    pub approved_by_policy: bool,
    /// The plan's Service and EndpointSlices (`spec.serviceName`), see `service`.
    pub service: service::ServiceObservation,
    /// Now.
    pub now: Timestamp,
}

/// What [`decide`](decide()) decided.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanDecision {
    /// The status to write.
    pub status: DeploymentPlanStatus,
    /// Events for the transitions made.
    pub events: Vec<PlannedEvent>,
    /// Reconcile again after this long (operations under way).
    pub requeue_after: Option<Duration>,
    /// The edited placement record could not be put back: the fields someone
    /// else wrote are left as they are, not written as the controller's.
    pub leave_edited_record: bool,
    /// The plan's Service and EndpointSlices to write and delete.
    pub service: service::ServicePlan,
}
