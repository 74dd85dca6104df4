//! The DeploymentPlan controller: observe → decide (pure) → apply, like the
//! Swarm's (`crate::swarm`).
//!
//! * [`decide`] is the pure decision: a [`PlanObservation`](decide::PlanObservation)
//!   (the time is an input) in, a [`PlanDecision`](decide::PlanDecision) out: the
//!   status to write and the Events of the transitions it made.
//! * [`observe`] reads the cluster into a `PlanObservation`.
//! * [`apply`] writes the status (server-side apply on the status
//!   subresource, field manager `shoal-controller`) and the Events.
//! * [`run`] is the watch loop; the runtime starts it with [`run::spawn`] beside
//!   the Swarm controller, under the same leadership, so only the leader
//!   reconciles plans.

pub mod apply;
pub mod decide;
pub mod observe;
pub mod run;
