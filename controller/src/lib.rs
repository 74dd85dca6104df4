//! Shoal controller: Swarms and labelled StatefulSets in, versioned per-member slices out.
//!
//! One shape per kind: its wire types under [`api`], then for each kind a pure
//! `decide` and the I/O around it (observe, apply, the loop).
//!
//! * [`api`]: the `Swarm` and `DeploymentPlan` custom resources, the approval record
//!   and the size budgets of both ([`api::limits`]).
//! * [`observed`], [`planned`], [`managed_fields`], [`refusals`]: plain data both kinds'
//!   decisions share.
//! * [`swarm`]: the Swarm controller: [`swarm::decide`] (the pure decision: approval
//!   gate, revoke-then-grant, restarts, status, Events), [`swarm::reconcile`] (observe →
//!   decide → apply against the API), [`swarm::apply`].
//! * [`deployment_plan`]: the DeploymentPlan controller: [`deployment_plan::decide`]
//!   (pure), [`deployment_plan::observe`], [`deployment_plan::apply`], its watch loop.
//! * [`cluster`], [`events`], [`eviction`], [`lease_clock`], [`metrics`], [`approvers`]:
//!   the I/O both kinds share.
//! * [`approvers`]: who approved (`shoal.dev/approved-by`, the policy that vouches for it).
//! * [`plugin`]: `kubectl shoal` (binary `kubectl-shoal`), reusing observe and decide.
//! * [`status_api`]: the deployment status REST endpoint (Margo), TokenReview/SubjectAccessReview-guarded.
//! * [`run`]: the whole controller in-process (watches, leader election, metrics server).

pub mod api;
pub mod approvers;
pub mod cluster;
pub mod deployment_plan;
pub mod events;
pub mod eviction;
pub mod lease_clock;
pub mod managed_fields;
pub mod metrics;
pub mod observed;
pub mod planned;
pub mod plugin;
pub mod refusals;
mod runtime;
pub mod server;
pub mod status_api;
pub mod swarm;

use std::net::SocketAddr;
use std::time::Duration;

pub use runtime::{Clients, RunError, default_identity, run, run_with_clients};

/// The global allocator the controller runs with: jemalloc. A library cannot set it; the
/// `shoal-controller` binary does (`#[global_allocator] static ALLOCATOR: Allocator =
/// Allocator;`), and so does every bench that runs the controller in a process of its
/// own to measure its memory, so that they measure the allocator that ships.
///
/// Why not the system's: with glibc's malloc the controller's resident peak at 1,000
/// members × 100,000 jobs was about 2.7 times the heap it held at its peak, the rest
/// freed memory the allocator kept (figures in `worker/BENCHMARKS.md`, "Memory").
pub use tikv_jemallocator::Jemalloc as Allocator;

/// Leader election on a Lease: only the holder reconciles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub lease_namespace: String,
    /// Seconds a leader holds the Lease without renewing.
    pub duration_seconds: u64,
}

/// How the controller runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Watch Swarms in this namespace only; `None`: all namespaces.
    pub namespace: Option<String>,
    /// Leader election; `None`: this process always reconciles.
    pub leader_election: Option<LeaderElection>,
    /// This replica's identity (Lease holder, Event reporter instance); the binary
    /// defaults it with [`default_identity`].
    pub identity: String,
    /// Address of the `/metrics`, `/healthz`, `/readyz` server; `None`: no server.
    pub metrics_address: Option<SocketAddr>,
    /// Reconcile every Swarm at least this often.
    pub resync: Duration,
    /// The most ConfigMap writes one pass of a Swarm has in flight at once (its slice
    /// writes and deletions; `swarm::apply` says which writes wait for which). 0 is taken
    /// as 1; the binary takes 1 to [`MAX_CONCURRENT_WRITES`].
    pub max_concurrent_writes: u16,
}

/// Default of [`Settings::max_concurrent_writes`] (`--max-concurrent-writes`).
pub const DEFAULT_MAX_CONCURRENT_WRITES: u16 = 16;

/// The most `--max-concurrent-writes` accepts: one controller never asks more of the API
/// server at once than a few hundred requests, whatever its flag says.
pub const MAX_CONCURRENT_WRITES: u16 = 256;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: None,
            leader_election: None,
            identity: "shoal-controller".to_owned(),
            metrics_address: None,
            resync: Duration::from_secs(60),
            max_concurrent_writes: DEFAULT_MAX_CONCURRENT_WRITES,
        }
    }
}
