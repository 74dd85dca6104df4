//! The Swarm controller: observe → decide (pure) → apply.
//!
//! * [`decide`]: the pure decision (approval gate, revoke-then-grant, restarts, status,
//!   Events): an [`Observation`](decide::Observation) in, a [`Decision`](decide::Decision) out.
//! * [`observe`]: reads the cluster into an `Observation`.
//! * [`apply`]: writes what was decided (history, index, status, slices, evictions).
//! * [`reconcile`]: observe → decide → apply for one Swarm, the reconcile loop's entry and
//!   its [`Error`](reconcile::Error).
//! * [`fixtures`]: one in-memory observation for the unit tests, the plugin's and the
//!   benchmarks.

pub mod apply;
pub mod decide;
pub mod fixtures;
pub mod observe;
pub mod reconcile;
