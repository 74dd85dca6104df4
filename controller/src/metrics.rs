//! Prometheus metrics of the controller.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label of the reconcile error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// [`crate::reconcile::Error::category`].
    pub category: String,
}

/// Label of the API write counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// What was written: `configmap` (slices, index, history, deletions
    /// included), `status`, `eviction` or `event`.
    pub kind: String,
}

/// Label of per-Swarm gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SwarmLabels {
    /// Swarm name.
    pub swarm: String,
}

/// Every metric the controller exports.
pub struct Metrics {
    /// Reconcile duration in seconds.
    pub reconcile_duration: Histogram,
    /// Failed reconciles by failing step.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// Revisions put in force.
    pub revisions_applied: Counter,
    /// Jobs moved by revisions put in force.
    pub jobs_moved: Counter,
    /// Pods evicted to pick up a new slice.
    pub members_restarted: Counter,
    /// Slice ConfigMaps written.
    pub slices_written: Counter,
    /// Write requests sent to the API server, by kind.
    pub api_writes: Family<WriteLabels, Counter>,
    /// 1 while a Swarm has a revision waiting for approval.
    pub pending_approvals: Family<SwarmLabels, Gauge>,
    /// Seconds from a change being seen to its revision in force everywhere.
    pub change_to_applied: Histogram,
    registry: Mutex<Registry>,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("shoal");
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let change_to_applied = Histogram::new(exponential_buckets(0.05, 2.0, 16));
        let metrics = Metrics {
            reconcile_duration: reconcile_duration.clone(),
            reconcile_errors: Family::default(),
            revisions_applied: Counter::default(),
            jobs_moved: Counter::default(),
            members_restarted: Counter::default(),
            slices_written: Counter::default(),
            api_writes: Family::default(),
            pending_approvals: Family::default(),
            change_to_applied: change_to_applied.clone(),
            registry: Mutex::new(Registry::default()),
        };
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            reconcile_duration,
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles by failing step",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "revisions_applied",
            "Revisions put in force",
            metrics.revisions_applied.clone(),
        );
        registry.register(
            "jobs_moved",
            "Jobs moved by applied revisions",
            metrics.jobs_moved.clone(),
        );
        registry.register(
            "members_restarted",
            "Pods evicted to pick up a new slice",
            metrics.members_restarted.clone(),
        );
        registry.register(
            "slices_written",
            "Slice ConfigMaps written",
            metrics.slices_written.clone(),
        );
        registry.register(
            "api_writes",
            "Write requests sent to the API server, by kind",
            metrics.api_writes.clone(),
        );
        registry.register(
            "pending_approvals",
            "Revisions waiting for approval",
            metrics.pending_approvals.clone(),
        );
        registry.register(
            "change_to_applied_seconds",
            "Time from a change being seen to its revision in force on every member",
            change_to_applied,
        );
        *metrics
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = registry;
        metrics
    }

    /// Counts one write request of `kind` (see [`WriteLabels`]).
    pub fn wrote(&self, kind: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Sets the pending-approval gauge of a Swarm.
    pub fn set_pending(&self, swarm: &str, pending: u64) {
        self.pending_approvals
            .get_or_create(&SwarmLabels {
                swarm: swarm.to_owned(),
            })
            .set(pending as i64);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
            text.clear();
        }
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
