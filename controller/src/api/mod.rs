//! The wire types of both kinds and what they share: plain data, no I/O.
//!
//! * [`swarm`]: the `Swarm` custom resource.
//! * [`deployment_plan`]: the `DeploymentPlan` custom resource.
//! * [`approval_record`]: the approval record both statuses carry.
//! * [`limits`]: the size budgets of both CRDs: every list, map and string bounded in
//!   the schema, every status fitted to its byte budget before it is written.

pub mod approval_record;
pub mod deployment_plan;
pub mod limits;
pub mod swarm;
