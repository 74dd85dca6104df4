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
//! * [`canary`]: which instances take a new deployment first in a canary
//!   rollout.
//! * [`status`]: the deployment status document (Margo `DeploymentStatusManifest`),
//!   its aggregation rule and validation.
//! * [`port`]: the ports an application listens on (`TCP/80`); two
//!   instances needing one port never share a member.
//! * [`mrds`]: MRDS plan documents read as written (`kubectl shoal import-mrds`).
//! * [`pool`]: what a pool declares in its annotations (capabilities,
//!   capacity, update domain) and each member's update domain.

pub mod canary;
pub mod capability;
pub mod domains;
pub mod mrds;
pub mod operation;
pub mod placement;
pub mod pool;
pub mod port;
pub mod status;

pub use capability::{Capabilities, Catalogue, Comparator, Requirement};
pub use domains::{next_domain, rollout_order};
pub use operation::{
    FailureReason, Operation, OperationState, OperationType, operation_hash, operations_for,
};
pub use placement::{
    DeployMember, InstanceId, PlanPlacement, PlanRequest, Reservation, place_plan, unfit_for,
};
pub use pool::{PoolDeclaration, member_update_domain};
pub use port::{Port, Protocol};

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

/// Longest label value, and so longest capability, resource or domain name.
const MAX_LABEL_VALUE_LEN: usize = 63;

/// Whether `value` is a Kubernetes label value that is not empty: 1–63 of
/// ASCII letters, digits, `-`, `_`, `.`, starting and ending with a letter or
/// digit.
pub(crate) fn is_label_value(value: &str) -> bool {
    value.len() <= MAX_LABEL_VALUE_LEN
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
