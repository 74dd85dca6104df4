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
    /// [`crate::swarm::reconcile::Error::category`].
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
    /// The Swarm's namespace: Swarms of the same name in two namespaces are two series.
    pub namespace: String,
    /// Swarm name.
    pub swarm: String,
}

/// Labels of the per-Swarm phase gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The Swarm's namespace.
    pub namespace: String,
    /// Swarm name.
    pub swarm: String,
    /// One of [`PHASES`].
    pub phase: String,
}

/// Label of the build-info gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version the binary was built from.
    pub version: String,
}

/// Every phase a Swarm's status can report: the phase gauge has one series per phase
/// (1 for the current one, 0 for the others), so that an alert can say "Progressing for
/// 15 minutes" without a series appearing and vanishing.
pub const PHASES: [&str; 5] = [
    "Pending",
    "AwaitingApproval",
    "Progressing",
    "Ready",
    "Degraded",
];

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
    /// 1 for each Swarm's current phase, 0 for its other phases.
    pub swarm_phase: Family<PhaseLabels, Gauge>,
    /// The revision in force of each Swarm.
    pub revision_in_force: Family<SwarmLabels, Gauge>,
    /// Jobs of each Swarm's revision in force that no member of its pools owns.
    pub unowned_jobs: Family<SwarmLabels, Gauge>,
    /// 1 while this replica reconciles (holds the leader Lease, or runs without leader
    /// election), 0 while it stands by.
    pub leader: Gauge,
    /// Always 1; the `version` label says which build runs.
    pub build_info: Family<BuildLabels, Gauge>,
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
            swarm_phase: Family::default(),
            revision_in_force: Family::default(),
            unowned_jobs: Family::default(),
            leader: Gauge::default(),
            build_info: Family::default(),
            registry: Mutex::new(Registry::default()),
        };
        metrics
            .build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
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
        registry.register(
            "swarm_phase",
            "1 for the phase each Swarm is in, 0 for its other phases",
            metrics.swarm_phase.clone(),
        );
        registry.register(
            "revision_in_force",
            "The revision in force of each Swarm",
            metrics.revision_in_force.clone(),
        );
        registry.register(
            "unowned_jobs",
            "Jobs of each Swarm's revision in force that no member of its pools owns (their owner left)",
            metrics.unowned_jobs.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica reconciles (leader or no leader election), 0 on standby",
            metrics.leader.clone(),
        );
        registry.register(
            "build_info",
            "Always 1; the version label names the build",
            metrics.build_info.clone(),
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

    /// Sets the gauges of a Swarm after a reconcile: pending approval (0 or 1), its phase
    /// (an unknown phase sets every known one to 0) and the revision in force.
    pub fn set_swarm(&self, namespace: &str, swarm: &str, state: SwarmGauges<'_>) {
        let labels = SwarmLabels {
            namespace: namespace.to_owned(),
            swarm: swarm.to_owned(),
        };
        self.pending_approvals
            .get_or_create(&labels)
            .set(i64::from(state.pending));
        self.revision_in_force
            .get_or_create(&labels)
            .set(i64::try_from(state.revision_in_force).unwrap_or(i64::MAX));
        self.unowned_jobs
            .get_or_create(&labels)
            .set(i64::try_from(state.unowned_jobs).unwrap_or(i64::MAX));
        for phase in PHASES {
            self.swarm_phase
                .get_or_create(&PhaseLabels {
                    namespace: namespace.to_owned(),
                    swarm: swarm.to_owned(),
                    phase: phase.to_owned(),
                })
                .set(i64::from(state.phase == Some(phase)));
        }
    }

    /// Every metric name the `/metrics` text carries (with the `_total`, `_bucket`,
    /// `_sum`, `_count` and `_info` forms Prometheus sees), for checks that alerting rules
    /// and dashboards name only metrics that exist.
    ///
    /// A family prints nothing until it has a series, so this encodes a fresh registry
    /// with one series in each family.
    pub fn exported_names() -> std::collections::BTreeSet<String> {
        let every_family = Metrics::new();
        every_family.set_swarm(
            "namespace",
            "swarm",
            SwarmGauges {
                pending: false,
                phase: None,
                revision_in_force: 0,
                unowned_jobs: 0,
            },
        );
        every_family.wrote("configmap");
        every_family
            .reconcile_errors
            .get_or_create(&ErrorLabels {
                category: "category".to_owned(),
            })
            .inc();
        exported_names(&every_family.encode())
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

/// What [`Metrics::set_swarm`] records of one Swarm.
#[derive(Clone, Copy, Debug)]
pub struct SwarmGauges<'a> {
    /// A revision waits for approval.
    pub pending: bool,
    /// `status.phase`.
    pub phase: Option<&'a str>,
    /// `status.currentRevision`.
    pub revision_in_force: u64,
    /// `status.unownedJobs`.
    pub unowned_jobs: u64,
}

/// The metric names of an OpenMetrics/Prometheus text exposition: the name of every sample
/// line, and of every `# TYPE` line (so that a family with no sample yet still counts).
pub fn exported_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in exposition.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let mut words = declared.split_whitespace();
            if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                names.insert(name.to_owned());
                let suffixes: &[&str] = match kind {
                    "counter" => &["_total", "_created"],
                    "histogram" => &["_bucket", "_sum", "_count", "_created"],
                    "info" => &["_info"],
                    _ => &[],
                };
                for suffix in suffixes {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swarm_reports_its_namespace_phase_and_revision() {
        let metrics = Metrics::new();
        metrics.set_swarm(
            "team-a",
            "demo",
            SwarmGauges {
                pending: true,
                phase: Some("AwaitingApproval"),
                revision_in_force: 3,
                unowned_jobs: 4,
            },
        );
        let text = metrics.encode();
        for line in [
            "shoal_pending_approvals{namespace=\"team-a\",swarm=\"demo\"} 1",
            "shoal_revision_in_force{namespace=\"team-a\",swarm=\"demo\"} 3",
            "shoal_unowned_jobs{namespace=\"team-a\",swarm=\"demo\"} 4",
            "shoal_swarm_phase{namespace=\"team-a\",swarm=\"demo\",phase=\"AwaitingApproval\"} 1",
            "shoal_swarm_phase{namespace=\"team-a\",swarm=\"demo\",phase=\"Ready\"} 0",
        ] {
            assert!(text.contains(line), "lacks {line}:\n{text}");
        }
    }

    #[test]
    fn build_info_names_the_version_and_leader_starts_at_zero() {
        let text = Metrics::new().encode();
        let build = format!(
            "shoal_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&build), "lacks {build}:\n{text}");
        assert!(text.contains("shoal_leader 0"), "{text}");
    }

    #[test]
    fn exported_names_include_the_suffixed_forms_prometheus_sees() {
        let names = Metrics::exported_names();
        for name in [
            "shoal_revisions_applied_total",
            "shoal_reconcile_duration_seconds_bucket",
            "shoal_pending_approvals",
            "shoal_swarm_phase",
            "shoal_revision_in_force",
            "shoal_unowned_jobs",
            "shoal_reconcile_errors_total",
            "shoal_api_writes_total",
            "shoal_leader",
            "shoal_build_info",
        ] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }
        assert!(!names.contains("shoal_no_such_metric"));
    }
}
