//! Prometheus metrics of the controller.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use shoal_core::deploy::operation::OperationState;

use crate::api::deployment_plan::{DeploymentPlanStatus, INSTANCE_STATES, ROLLOUT_PHASES};

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

/// Labels of per-plan gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanLabels {
    /// The DeploymentPlan's namespace.
    pub namespace: String,
    /// DeploymentPlan name.
    pub plan: String,
}

/// Labels of per-plan gauges with one series per state or phase, from a fixed list
/// ([`OperationState::ALL`], [`INSTANCE_STATES`], [`PHASES`], [`ROLLOUT_PHASES`]), so
/// the label set stays bounded whatever a status holds.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanStateLabels {
    /// The DeploymentPlan's namespace.
    pub namespace: String,
    /// DeploymentPlan name.
    pub plan: String,
    /// The state or phase.
    pub state: String,
}

/// Labels of the reconcile phase histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcilePhaseLabels {
    /// What was reconciled: `swarm` or `plan`.
    pub kind: &'static str,
    /// `observe` (reading the cluster), `decide` (the pure step, with the lookups a
    /// Swarm's plan asks for) or `apply` (the writes).
    pub phase: &'static str,
}

/// The phase histogram's family: one histogram per kind and phase.
type PhaseFamily = Family<ReconcilePhaseLabels, Histogram, fn() -> Histogram>;

/// Buckets of the phase histogram: 0.5 ms to 16 s.
fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
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
    /// Time spent in each phase of a pass, by kind (see [`Metrics::timed`]).
    pub reconcile_phase: PhaseFamily,
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
    /// Bytes of the bodies of ConfigMap and status write requests, by kind.
    pub api_write_bytes: Family<WriteLabels, Counter>,
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
    /// Operations in each plan's status, by state.
    pub plan_operations: Family<PlanStateLabels, Gauge>,
    /// Seconds since the oldest operation of each plan not yet approved became so.
    pub plan_oldest_pending_operation: Family<PlanLabels, Gauge>,
    /// Instances in each plan's status, by state.
    pub plan_instances: Family<PlanStateLabels, Gauge>,
    /// 1 for each plan's current phase, 0 for its other phases.
    pub plan_phase: Family<PlanStateLabels, Gauge>,
    /// 1 for the phase of each plan's canary, blue-green or ordered rollout, 0 for the
    /// other phases (all 0 without such a rollout).
    pub plan_rollout_phase: Family<PlanStateLabels, Gauge>,
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
            reconcile_phase: Family::new_with_constructor(phase_histogram),
            reconcile_errors: Family::default(),
            revisions_applied: Counter::default(),
            jobs_moved: Counter::default(),
            members_restarted: Counter::default(),
            slices_written: Counter::default(),
            api_writes: Family::default(),
            api_write_bytes: Family::default(),
            pending_approvals: Family::default(),
            change_to_applied: change_to_applied.clone(),
            swarm_phase: Family::default(),
            revision_in_force: Family::default(),
            unowned_jobs: Family::default(),
            plan_operations: Family::default(),
            plan_oldest_pending_operation: Family::default(),
            plan_instances: Family::default(),
            plan_phase: Family::default(),
            plan_rollout_phase: Family::default(),
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
            "reconcile_phase_seconds",
            "Time spent in each phase of a reconcile (observe, decide, apply), by kind (swarm, plan)",
            metrics.reconcile_phase.clone(),
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
            "api_write_bytes",
            "Bytes of the request bodies of ConfigMap and status writes sent to the API server, by kind",
            metrics.api_write_bytes.clone(),
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
            "plan_operations",
            "Operations in each DeploymentPlan's status, by state",
            metrics.plan_operations.clone(),
        );
        registry.register(
            "plan_oldest_pending_operation_seconds",
            "Seconds the oldest operation of each DeploymentPlan not yet approved (PENDING or PENDING_APPROVAL) has waited; 0 when none waits",
            metrics.plan_oldest_pending_operation.clone(),
        );
        registry.register(
            "plan_instances",
            "Instances in each DeploymentPlan's status, by state",
            metrics.plan_instances.clone(),
        );
        registry.register(
            "plan_phase",
            "1 for the phase each DeploymentPlan is in, 0 for its other phases",
            metrics.plan_phase.clone(),
        );
        registry.register(
            "plan_rollout_phase",
            "1 for the phase of each DeploymentPlan's canary, blue-green or ordered rollout, 0 for the others",
            metrics.plan_rollout_phase.clone(),
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

    /// Runs `phase` (`observe`, `decide`, `apply`) of a `kind` (`swarm`, `plan`) pass
    /// inside a tracing span named `phase` (fields `kind` and `phase`) and records its
    /// duration in `shoal_reconcile_phase_seconds`, failed or not: one mechanism for
    /// both kinds' passes.
    pub async fn timed<F: std::future::Future>(
        &self,
        kind: &'static str,
        phase: &'static str,
        work: F,
    ) -> F::Output {
        use tracing::Instrument;
        let started = std::time::Instant::now();
        let output = work
            .instrument(tracing::info_span!("phase", kind, phase))
            .await;
        self.reconcile_phase
            .get_or_create(&ReconcilePhaseLabels { kind, phase })
            .observe(started.elapsed().as_secs_f64());
        output
    }

    /// Counts one write request of `kind` (see [`WriteLabels`]).
    pub fn wrote(&self, kind: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts one write request of `kind` and the `bytes` of its body (ConfigMap and status
    /// writes: what an operator sizes a control plane by).
    pub fn wrote_bytes(&self, kind: &str, bytes: usize) {
        self.wrote(kind);
        self.api_write_bytes
            .get_or_create(&WriteLabels {
                kind: kind.to_owned(),
            })
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
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

    /// Sets the gauges of a DeploymentPlan after a pass. Every state and phase of the
    /// fixed lists gets a series (0 when absent), so that none appears and vanishes; a
    /// state outside them is not counted.
    pub fn set_plan(&self, namespace: &str, plan: &str, gauges: &PlanGauges) {
        let by_state = |state: &str| PlanStateLabels {
            namespace: namespace.to_owned(),
            plan: plan.to_owned(),
            state: state.to_owned(),
        };
        for (state, count) in OperationState::ALL.iter().zip(gauges.operations) {
            self.plan_operations
                .get_or_create(&by_state(state.as_str()))
                .set(count);
        }
        for (state, count) in INSTANCE_STATES.iter().zip(gauges.instances) {
            self.plan_instances
                .get_or_create(&by_state(state))
                .set(count);
        }
        for phase in PHASES {
            self.plan_phase
                .get_or_create(&by_state(phase))
                .set(i64::from(gauges.phase == Some(phase)));
        }
        for phase in ROLLOUT_PHASES {
            self.plan_rollout_phase
                .get_or_create(&by_state(phase))
                .set(i64::from(gauges.rollout_phase == Some(phase)));
        }
        self.plan_oldest_pending_operation
            .get_or_create(&PlanLabels {
                namespace: namespace.to_owned(),
                plan: plan.to_owned(),
            })
            .set(gauges.oldest_pending_seconds);
    }

    /// A registry with a series in every family: a family prints nothing until it has
    /// one, and checks of what `/metrics` carries (names, HELP and TYPE, `promtool check
    /// metrics`) must see them all.
    pub fn with_every_family() -> Metrics {
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
        every_family.set_plan("namespace", "plan", &PlanGauges::default());
        every_family.wrote_bytes("configmap", 1);
        every_family
            .reconcile_phase
            .get_or_create(&ReconcilePhaseLabels {
                kind: "swarm",
                phase: "observe",
            })
            .observe(0.0);
        every_family
            .reconcile_errors
            .get_or_create(&ErrorLabels {
                category: "category".to_owned(),
            })
            .inc();
        every_family
    }

    /// Every metric name the `/metrics` text carries (with the `_total`, `_bucket`,
    /// `_sum`, `_count` and `_info` forms Prometheus sees), for checks that alerting rules
    /// and dashboards name only metrics that exist.
    ///
    /// A family prints nothing until it has a series, so this encodes
    /// [`Metrics::with_every_family`].
    pub fn exported_names() -> std::collections::BTreeSet<String> {
        exported_names(&Metrics::with_every_family().encode())
    }

    /// The OpenMetrics text exposition (`/metrics` converts it to the format the scraper
    /// asks for, `shoal_core::exposition`).
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

/// What [`Metrics::set_plan`] records of one DeploymentPlan, read from its status by
/// [`PlanGauges::of`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanGauges<'a> {
    /// Operations per state, in the order of [`OperationState::ALL`].
    pub operations: [i64; 5],
    /// Seconds since the oldest operation not yet approved (`PENDING` or
    /// `PENDING_APPROVAL`) entered its state; 0 when there is none.
    pub oldest_pending_seconds: i64,
    /// Instances per state, in the order of [`INSTANCE_STATES`].
    pub instances: [i64; 8],
    /// `status.phase`.
    pub phase: Option<&'a str>,
    /// `status.rollout.phase`.
    pub rollout_phase: Option<&'a str>,
}

impl<'a> PlanGauges<'a> {
    /// The gauges of `status` at `now`. An operation without a readable
    /// `lastTransitionTime` (written before it existed) counts as waiting since `now`:
    /// it is counted, and no age is made up for it.
    pub fn of(status: &'a DeploymentPlanStatus, now: jiff::Timestamp) -> PlanGauges<'a> {
        let mut gauges = PlanGauges {
            phase: status.phase.as_deref(),
            rollout_phase: status
                .rollout
                .as_ref()
                .map(|rollout| rollout.phase.as_str()),
            ..PlanGauges::default()
        };
        for operation in &status.operations {
            let Some(index) = OperationState::ALL
                .iter()
                .position(|state| state.as_str() == operation.state)
            else {
                continue;
            };
            gauges.operations[index] += 1;
            if matches!(
                OperationState::ALL[index],
                OperationState::Pending | OperationState::PendingApproval
            ) {
                let since = operation
                    .last_transition_time
                    .as_deref()
                    .and_then(|text| text.parse::<jiff::Timestamp>().ok())
                    .unwrap_or(now);
                let waited = now.duration_since(since).as_secs().max(0);
                gauges.oldest_pending_seconds = gauges.oldest_pending_seconds.max(waited);
            }
        }
        for instance in &status.instances {
            if let Some(index) = INSTANCE_STATES
                .iter()
                .position(|state| *state == instance.state)
            {
                gauges.instances[index] += 1;
            }
        }
        gauges
    }
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

    /// A plan's status as the controller writes it: operations of every kind of wait,
    /// instances in several states, a halted canary.
    fn plan_status() -> DeploymentPlanStatus {
        serde_json::from_value(serde_json::json!({
            "phase": "Degraded",
            "rollout": {"deployment": 2, "phase": "Halted"},
            "operations": [
                {"id": "a", "type": "CREATE", "instance": "web-0", "deployment": 2,
                 "state": "PENDING_APPROVAL", "hash": "h",
                 "lastTransitionTime": "2026-01-01T10:00:00Z"},
                {"id": "b", "type": "CREATE", "instance": "web-1", "deployment": 2,
                 "state": "PENDING", "hash": "h",
                 "lastTransitionTime": "2026-01-01T11:00:00Z"},
                {"id": "c", "type": "UPDATE", "instance": "web-2", "deployment": 2,
                 "state": "SUCCEEDED", "hash": "h",
                 "lastTransitionTime": "2026-01-01T08:00:00Z"},
                {"id": "d", "type": "UPDATE", "instance": "web-3", "deployment": 2,
                 "state": "NOT_A_STATE", "hash": "h"}
            ],
            "instances": [
                {"name": "web-0", "member": "m-0", "deployment": 2, "state": "installed"},
                {"name": "web-1", "member": "m-1", "deployment": 2, "state": "installed"},
                {"name": "web-2", "member": "m-2", "deployment": 2, "state": "failed"},
                {"name": "web-3", "member": "m-3", "deployment": 2, "state": "sideways"}
            ]
        }))
        .expect("a plan status")
    }

    #[test]
    fn a_plan_reports_its_operations_instances_and_phases_by_state() {
        let status = plan_status();
        let now: jiff::Timestamp = "2026-01-01T12:00:00Z".parse().expect("a time");
        let metrics = Metrics::new();
        metrics.set_plan("team-a", "web", &PlanGauges::of(&status, now));
        let text = metrics.encode();
        for line in [
            r#"shoal_plan_operations{namespace="team-a",plan="web",state="PENDING_APPROVAL"} 1"#,
            r#"shoal_plan_operations{namespace="team-a",plan="web",state="PENDING"} 1"#,
            r#"shoal_plan_operations{namespace="team-a",plan="web",state="SUCCEEDED"} 1"#,
            r#"shoal_plan_operations{namespace="team-a",plan="web",state="APPROVED"} 0"#,
            // The oldest waiting one entered PENDING_APPROVAL two hours before; the older
            // SUCCEEDED one no longer waits.
            r#"shoal_plan_oldest_pending_operation_seconds{namespace="team-a",plan="web"} 7200"#,
            r#"shoal_plan_instances{namespace="team-a",plan="web",state="installed"} 2"#,
            r#"shoal_plan_instances{namespace="team-a",plan="web",state="failed"} 1"#,
            r#"shoal_plan_instances{namespace="team-a",plan="web",state="restarting"} 0"#,
            r#"shoal_plan_phase{namespace="team-a",plan="web",state="Degraded"} 1"#,
            r#"shoal_plan_phase{namespace="team-a",plan="web",state="Ready"} 0"#,
            r#"shoal_plan_rollout_phase{namespace="team-a",plan="web",state="Halted"} 1"#,
            r#"shoal_plan_rollout_phase{namespace="team-a",plan="web",state="Canary"} 0"#,
        ] {
            assert!(text.contains(line), "lacks {line}:\n{text}");
        }
        // States outside the fixed lists make no series: the label set stays bounded.
        assert!(
            !text.contains("NOT_A_STATE") && !text.contains("sideways"),
            "{text}"
        );
        let series = |family: &str| {
            text.lines()
                .filter(|line| line.starts_with(&format!("{family}{{")))
                .count()
        };
        assert_eq!(series("shoal_plan_operations"), 5);
        assert_eq!(series("shoal_plan_instances"), INSTANCE_STATES.len());
        assert_eq!(series("shoal_plan_phase"), PHASES.len());
        assert_eq!(series("shoal_plan_rollout_phase"), ROLLOUT_PHASES.len());
    }

    #[test]
    fn a_plan_with_nothing_waiting_reports_no_age_and_no_rollout_phase() {
        let status = DeploymentPlanStatus {
            phase: Some("Ready".to_owned()),
            ..DeploymentPlanStatus::default()
        };
        let gauges = PlanGauges::of(&status, jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(gauges.oldest_pending_seconds, 0);
        assert_eq!(gauges.operations, [0; 5]);
        assert_eq!(gauges.rollout_phase, None);
        let metrics = Metrics::new();
        metrics.set_plan("ns", "web", &gauges);
        let text = metrics.encode();
        let rollout_phases_set = text
            .lines()
            .filter(|line| line.starts_with("shoal_plan_rollout_phase{") && line.ends_with(" 1"))
            .count();
        assert_eq!(rollout_phases_set, 0, "{text}");
        assert!(text.contains(r#"shoal_plan_phase{namespace="ns",plan="web",state="Ready"} 1"#));
    }

    #[test]
    fn the_instance_states_are_margos_six_then_stopped_and_restarting() {
        let margo: Vec<&str> = shoal_core::deploy::status::DeploymentState::ALL
            .iter()
            .map(|state| state.as_str())
            .collect();
        assert_eq!(INSTANCE_STATES[..6], margo[..]);
        assert_eq!(INSTANCE_STATES[6..], ["stopped", "restarting"]);
    }

    #[tokio::test]
    async fn a_timed_phase_is_counted_under_its_kind_and_phase() {
        let metrics = Metrics::new();
        let answer = metrics.timed("plan", "decide", async { 42 }).await;
        assert_eq!(answer, 42);
        let text = metrics.encode();
        let line = r#"shoal_reconcile_phase_seconds_count{kind="plan",phase="decide"} 1"#;
        assert!(text.contains(line), "lacks {line}:\n{text}");
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
            "shoal_reconcile_phase_seconds_bucket",
            "shoal_pending_approvals",
            "shoal_swarm_phase",
            "shoal_revision_in_force",
            "shoal_unowned_jobs",
            "shoal_reconcile_errors_total",
            "shoal_api_writes_total",
            "shoal_api_write_bytes_total",
            "shoal_leader",
            "shoal_build_info",
            "shoal_plan_operations",
            "shoal_plan_oldest_pending_operation_seconds",
            "shoal_plan_instances",
            "shoal_plan_phase",
            "shoal_plan_rollout_phase",
        ] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }
        assert!(!names.contains("shoal_no_such_metric"));
    }
}
