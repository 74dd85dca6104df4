//! Deployment plans: the pure core of plan instances placed on members.
//!
//! Shoal brings MRDS's model (plans → deployments → instances → operations)
//! onto a Swarm's members. Everything here is a pure function of its inputs;
//! the controller reads the cluster, calls these, and writes the results.
//!
//! * [`capability`]: scored capabilities a member offers (parsed from one
//!   annotation on its pool), the [`capability::Catalogue`] of reference
//!   scores, and a plan's [`capability::Requirement`]s (`In`, `NotIn`, `Gte`,
//!   `Lte`).
//! * [`placement`](mod@placement): where the instances `<plan>-<n>` of one
//!   plan go: sticky, capability- and capacity-checked, spread over update
//!   domains, with typed reasons for instances that fit nowhere and
//!   deterministic scale-down victims.
//! * [`operation`]: the operations (`CREATE` … `DELETE`) a placement change
//!   needs, their enforced state machine and the hash an approval names.
//! * [`domains`]: the order in which update domains are rolled out.

pub mod capability;
pub mod domains;
pub mod operation;
pub mod placement;

pub use capability::{Capabilities, Catalogue, Comparator, Requirement};
pub use domains::{next_domain, rollout_order};
pub use operation::{Operation, OperationState, OperationType, operation_hash, operations_for};
pub use placement::{DeployMember, InstanceId, PlanPlacement, PlanRequest, place_plan};

/// Text naming none of an enumeration's values (a comparator, an operation
/// type or state), with the accepted spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a valid {what}; expected one of: {expected}")]
pub struct UnknownName {
    /// What was being named (`comparator`, `operation type`, …).
    pub what: &'static str,
    /// The text given.
    pub text: String,
    /// The accepted spellings, comma-separated.
    pub expected: &'static str,
}
