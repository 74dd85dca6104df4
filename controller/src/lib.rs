//! Shoal controller: Swarms and labelled StatefulSets in, versioned per-member slices out.
//!
//! * [`approvers`]: who approved (`shoal.dev/approved-by`, the policy that vouches for it).
//! * [`crd`]: the `Swarm` custom resource.
//! * [`deployment_plan`]: the `DeploymentPlan` custom resource.
//! * [`deployment`]: the DeploymentPlan controller (observe, pure decide, apply, run).
//! * [`limits`]: the size budgets of both CRDs: every list, map and string bounded in the schema, every status fitted to its byte budget before it is written.
//! * [`plan`]: the pure decision (approval gate, revoke-then-grant, restarts, status, Events).
//! * [`reconcile`]: observe → plan → apply against the API.
//! * [`plugin`]: `kubectl shoal` (binary `kubectl-shoal`), reusing observe and plan.
//! * [`status_api`]: the deployment status REST endpoint (Margo), TokenReview/SubjectAccessReview-guarded.
//! * [`run`]: the whole controller in-process (watches, leader election, metrics server).

pub mod apply;
pub mod approval_record;
pub mod approvers;
pub mod cluster;
pub mod crd;
pub mod deployment;
pub mod deployment_plan;
pub mod events;
pub mod eviction;
pub mod fixtures;
pub mod lease_clock;
pub mod limits;
pub mod managed_fields;
pub mod metrics;
pub mod observed;
pub mod plan;
pub mod planned;
pub mod plugin;
pub mod reconcile;
pub mod refusals;
mod runtime;
pub mod server;
pub mod status_api;

use std::net::SocketAddr;
use std::time::Duration;

pub use runtime::{Clients, RunError, run, run_with_clients};

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
    /// This replica's identity (Lease holder, Event reporter instance).
    pub identity: String,
    /// Address of the `/metrics`, `/healthz`, `/readyz` server; `None`: no server.
    pub metrics_address: Option<SocketAddr>,
    /// Reconcile every Swarm at least this often.
    pub resync: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: None,
            leader_election: None,
            identity: "shoal-controller".to_owned(),
            metrics_address: None,
            resync: Duration::from_secs(60),
        }
    }
}
