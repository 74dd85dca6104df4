//! Unit tests of the pure plan, driven by a tiny in-memory "cluster" that
//! applies each plan's operations the way the I/O layer does.

use super::*;
use std::collections::BTreeSet;

use jiff::SignedDuration;
use shoal_core::format::parse_slice;
use shoal_core::names::{
    ANNOTATION_APPROVE, ANNOTATION_APPROVED_BY, ANNOTATION_FAILOVER_NOW, ANNOTATION_ROLLBACK_TO,
};
use shoal_core::{Member, Strategy, assign};

use super::gate::approval_value;

use crate::api::swarm::{
    ApprovalPolicy, ApprovalSpec, ConfigMapKeyRef, FailoverSpec, JobsFrom, ReloadPolicy,
    RolloutSpec, StrategySpec, StrategyType,
};

fn t0() -> Timestamp {
    crate::swarm::fixtures::epoch()
}

/// The Lease a member's own sidecar writes: held by its pod, unchanged since `t0()`.
fn sidecar_lease(
    member: &str,
    acked_revision: Option<u64>,
    acked_hash: Option<String>,
    duration_seconds: i64,
) -> LeaseState {
    LeaseState {
        holder: Some(member.to_owned()),
        pod_uid: None,
        acked_revision,
        acked_hash,
        renew_time: Some(t0()),
        duration_seconds: Some(duration_seconds),
        version: "1".to_owned(),
        unchanged_since: Some(t0()),
    }
}

fn jobs(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("stream:{i:03}")).collect()
}

fn spec(job_keys: Vec<String>) -> SwarmSpec {
    SwarmSpec {
        jobs: job_keys,
        jobs_from: None,
        job_settings: Default::default(),
        strategy: StrategySpec::default(),
        reload: ReloadPolicy::HotReload,
        approval: ApprovalSpec::default(),
        rollout: RolloutSpec::default(),
        failover: FailoverSpec::default(),
        revision_history_limit: 10,
        paused: false,
        cordon: Vec::new(),
    }
}

use crate::swarm::fixtures::pool;

/// An in-memory cluster: an observation that operations are applied to.
struct Cluster {
    obs: Observation,
    writes: Vec<String>,
    evicted: Vec<String>,
}

impl Cluster {
    fn new(spec: SwarmSpec, replicas: u32) -> Cluster {
        Cluster {
            obs: crate::swarm::fixtures::observation("demo", spec, vec![pool("worker", replicas)]),
            writes: Vec::new(),
            evicted: Vec::new(),
        }
    }

    /// Plans once and applies the plan; returns it.
    fn step(&mut self) -> Decision {
        let decision = decide(&self.obs);
        // apply() writes the index before the status: that is only right when the index
        // comes in a pass that changes no slice.
        let writes_index = decision
            .operations
            .iter()
            .any(|operation| matches!(operation, Operation::WriteIndex { .. }));
        let writes_slice = decision
            .operations
            .iter()
            .any(|operation| matches!(operation, Operation::WriteSlice { .. }));
        assert!(
            !(writes_index && writes_slice),
            "index and slices written in one pass: {:?}",
            decision.operations
        );
        // apply() writes the slices of one pass together, in no order: a pass must never
        // grant what a revoke of the same pass takes away (see `swarm::apply`).
        let moves_jobs = |wanted: &str| {
            decision.operations.iter().any(|operation| {
                matches!(operation, Operation::WriteSlice { phase, instances_only: false, .. } if *phase == wanted)
            })
        };
        assert!(
            !(moves_jobs("revoke") && moves_jobs("grant")),
            "a revoke and a grant in one pass: {:?}",
            decision.operations
        );
        for operation in &decision.operations {
            if let Operation::WriteSlice { slice, .. } = operation {
                self.writes.push(slice.member.clone());
            }
        }
        for (pod, uid) in apply_in_memory(&mut self.obs, &decision) {
            self.evicted.push(pod.clone());
            for pool in &mut self.obs.pools {
                for (ordinal, state) in &mut pool.pods {
                    if format!("{}-{ordinal}", pool.name) == pod && state.uid == uid {
                        // The replacement pod comes back Ready at once.
                        state.uid = format!("{uid}-next");
                    }
                }
            }
        }
        self.obs.status = decision.status.clone();
        decision
    }

    /// Plans once and applies the plan, but every eviction is refused (a
    /// PodDisruptionBudget, say): every pod keeps running; returns the plan.
    fn step_refusing_evictions(&mut self) -> Decision {
        let decision = decide(&self.obs);
        apply_in_memory(&mut self.obs, &decision);
        self.obs.status = decision.status.clone();
        decision
    }

    /// Steps until a plan has no operations (at most 10 times); returns every plan.
    fn settle(&mut self) -> Vec<Decision> {
        let mut plans = Vec::new();
        for _ in 0..10 {
            let decision = self.step();
            let quiet = decision.operations.is_empty();
            plans.push(decision);
            if quiet {
                return plans;
            }
        }
        panic!("no convergence after 10 plans: {:#?}", plans.last());
    }

    fn slice_of(&self, member: &str) -> Vec<String> {
        let object = self.obs.slices.get(member).expect("slice exists");
        let slice = parse_slice(object.text.as_deref().unwrap()).unwrap();
        slice
            .jobs
            .iter()
            .map(|key| key.as_str().to_owned())
            .collect()
    }

    fn scale(&mut self, replicas: u32) {
        let name = self.obs.pools[0].name.clone();
        let old = std::mem::replace(&mut self.obs.pools[0], pool(&name, replicas));
        for (ordinal, pod) in old.pods {
            if ordinal < replicas {
                self.obs.pools[0].pods.insert(ordinal, pod);
            }
        }
    }

    /// Annotates the approval of the pending revision, as `kubectl shoal approve` does.
    fn approve_pending(&mut self) {
        let pending = self
            .obs
            .status
            .pending_revision
            .clone()
            .expect("a pending revision to approve");
        self.approve(&pending.approve_with);
    }

    fn approve(&mut self, value: &str) {
        self.obs
            .annotations
            .insert(ANNOTATION_APPROVE.to_owned(), value.to_owned());
    }

    fn condition(&self, type_: &str) -> Condition {
        previous_condition(&self.obs.status, type_)
            .cloned()
            .expect("condition present")
    }
}

/// A cluster of `replicas` members and `job_count` jobs under Manual approval.
fn manual(job_count: usize, replicas: u32) -> Cluster {
    let mut spec = spec(jobs(job_count));
    spec.approval.policy = ApprovalPolicy::Manual;
    Cluster::new(spec, replicas)
}

fn reasons(decision: &Decision) -> Vec<&str> {
    decision
        .events
        .iter()
        .map(|event| event.reason.as_str())
        .collect()
}

fn all_jobs_once(cluster: &Cluster) -> Vec<String> {
    let mut all: Vec<String> = cluster
        .obs
        .slices
        .keys()
        .flat_map(|member| cluster.slice_of(member))
        .collect();
    all.sort();
    all
}

#[test]
fn the_first_revision_applies_at_once_under_automatic_approval() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, Some(1));
    assert!(
        matches!(decision.operations[0], Operation::WriteRevision(ref record) if record.revision == 1)
    );
    assert_eq!(decision.status.current_revision, 1);
    assert!(reasons(&decision).contains(&"RevisionApproved"));
    cluster.settle();
    assert_eq!(all_jobs_once(&cluster), jobs(10));
    assert_eq!(cluster.slice_of("worker-0").len(), 5);
    assert_eq!(cluster.condition("Ready").status, "True");
    assert_eq!(cluster.obs.status.phase.as_deref(), Some("Ready"));
    assert_eq!(cluster.obs.status.ready.as_deref(), Some("2/2"));
    assert_eq!(cluster.obs.status.jobs, 10);
}

#[test]
fn a_converged_swarm_plans_no_writes_and_no_events() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    let decision = cluster.step();
    assert!(decision.operations.is_empty(), "{:?}", decision.operations);
    assert!(decision.events.is_empty(), "{:?}", decision.events);
    assert_eq!(decision.status, cluster.obs.status);
}

#[test]
fn the_index_is_written_in_the_seed_workloads_shape_once_converged() {
    let mut cluster = Cluster::new(spec(jobs(4)), 2);
    cluster.settle();
    let index = cluster.obs.index.clone().expect("index written");
    assert!(index.contains("workloads:"), "{index}");
    assert!(index.contains("worker-0:"), "{index}");
    assert!(index.contains("version: 1"), "{index}");
}

#[test]
fn scaling_up_revokes_before_granting_and_rewrites_only_affected_members() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    let before: BTreeMap<String, Vec<String>> = ["worker-0", "worker-1", "worker-2"]
        .iter()
        .map(|m| (m.to_string(), cluster.slice_of(m)))
        .collect();
    cluster.writes.clear();
    cluster.scale(4);
    let first = cluster.step();
    assert_eq!(first.applied_revision, Some(2));
    // The first plan only revokes: nothing is granted to the new member yet.
    let granted_new = first
        .operations
        .iter()
        .any(|op| matches!(op, Operation::WriteSlice { slice, .. } if slice.member == "worker-3"));
    assert!(
        !granted_new,
        "granted before revokes settled: {:?}",
        first.operations
    );
    for op in &first.operations {
        if let Operation::WriteSlice { phase, .. } = op {
            assert_eq!(*phase, "revoke");
        }
    }
    cluster.settle();
    assert_eq!(all_jobs_once(&cluster), jobs(30));
    for (member, old) in &before {
        let now = cluster.slice_of(member);
        let written = cluster.writes.iter().any(|w| w == member);
        assert_eq!(
            written,
            &now != old,
            "{member} written={written} but changed={}",
            &now != old
        );
        assert!(
            now.iter().all(|key| old.contains(key)),
            "{member} gained keys on scale up"
        );
    }
    assert!(!cluster.slice_of("worker-3").is_empty());
}

#[test]
fn a_member_lease_that_has_not_acknowledged_the_revoke_holds_back_the_grant() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    for member in ["worker-0", "worker-1", "worker-2"] {
        cluster
            .obs
            .leases
            .insert(member.to_owned(), sidecar_lease(member, Some(1), None, 30));
    }
    cluster.scale(4);
    cluster.step();
    for _ in 0..3 {
        let decision = cluster.step();
        assert!(
            !decision
                .operations
                .iter()
                .any(|op| matches!(op, Operation::WriteSlice { phase: "grant", .. })),
            "granted without acknowledgement: {:?}",
            decision.operations
        );
        assert_eq!(decision.status.phase.as_deref(), Some("Progressing"));
    }
    // Acknowledge every revoked slice.
    for member in ["worker-0", "worker-1", "worker-2"] {
        let hash = parse_slice(cluster.obs.slices[member].text.as_deref().unwrap())
            .unwrap()
            .hash;
        let lease = cluster.obs.leases.get_mut(member).unwrap();
        lease.acked_hash = Some(hash);
        lease.acked_revision = Some(2);
    }
    let decision = cluster.step();
    assert!(decision.operations.iter().any(
        |op| matches!(op, Operation::WriteSlice { slice, phase: "grant", .. } if slice.member == "worker-3")
    ));
}

#[test]
fn an_expired_member_lease_counts_as_having_given_up_its_jobs() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    for member in ["worker-0", "worker-1", "worker-2"] {
        cluster
            .obs
            .leases
            .insert(member.to_owned(), sidecar_lease(member, Some(1), None, 10));
    }
    cluster.scale(4);
    cluster.step();
    cluster.obs.now = t0() + SignedDuration::from_secs(11);
    let decision = cluster.step();
    assert!(decision.operations.iter().any(
        |op| matches!(op, Operation::WriteSlice { slice, phase: "grant", .. } if slice.member == "worker-3")
    ));
}

#[test]
fn scaling_down_moves_the_jobs_of_the_removed_member_and_deletes_its_slice() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    cluster.scale(2);
    let plans = cluster.settle();
    assert_eq!(plans[0].applied_revision, Some(2));
    assert!(!cluster.obs.slices.contains_key("worker-2"));
    assert_eq!(all_jobs_once(&cluster), jobs(30));
    assert_eq!(cluster.obs.status.ready.as_deref(), Some("2/2"));
}

#[test]
fn manual_approval_changes_nothing_until_the_pending_revision_is_approved() {
    let mut cluster = manual(20, 2);
    let decision = cluster.step();
    assert!(decision.operations.is_empty(), "{:?}", decision.operations);
    let pending = decision
        .status
        .pending_revision
        .clone()
        .expect("pending revision");
    assert_eq!(pending.revision, 1);
    assert_eq!(pending.summary.members_affected, 2);
    assert_eq!(decision.status.phase.as_deref(), Some("AwaitingApproval"));
    assert!(reasons(&decision).contains(&"RevisionPending"));
    // Still nothing on the next pass, and no repeated Event.
    let again = cluster.step();
    assert!(again.operations.is_empty());
    assert!(again.events.is_empty(), "{:?}", again.events);

    cluster.approve_pending();
    let approved = cluster.step();
    assert_eq!(approved.applied_revision, Some(1));
    assert!(approved.status.pending_revision.is_none());
    cluster.settle();
    assert_eq!(all_jobs_once(&cluster), jobs(20));
}

#[test]
fn an_approval_of_a_superseded_revision_is_refused_once_and_applies_nothing() {
    let mut cluster = manual(20, 2);
    let first = cluster.step().status.pending_revision.unwrap();
    // Revision 1 is pending; the job list changes before anyone approves.
    cluster.obs.spec.jobs = jobs(21);
    let superseding = cluster.step();
    let pending = superseding.status.pending_revision.clone().unwrap();
    assert_eq!(pending.revision, 2);
    assert_eq!(pending.summary.supersedes, Some(1));
    assert!(reasons(&superseding).contains(&"RevisionSuperseded"));
    // Approving the reviewed-but-superseded revision 1 must not apply revision 2.
    cluster.approve(&first.approve_with);
    let decision = cluster.step();
    assert!(decision.operations.is_empty(), "{:?}", decision.operations);
    assert_eq!(decision.status.current_revision, 0);
    assert_eq!(reasons(&decision), ["ApprovalRefused"]);
    let refusal = &decision.events[0].note;
    assert!(
        refusal.contains("revision 1") && refusal.contains("pending revision is 2"),
        "{refusal}"
    );
    let awaiting = previous_condition(&decision.status, "AwaitingApproval").unwrap();
    assert!(awaiting.message.contains("refused"), "{}", awaiting.message);
    // The refusal is announced once, not on every pass.
    assert!(cluster.step().events.is_empty());
    cluster.approve_pending();
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, Some(2));
    assert!(decision.status.refused_annotations.is_empty());
}

#[test]
fn a_bare_revision_number_does_not_approve_and_is_refused_naming_the_format() {
    let mut cluster = manual(20, 2);
    cluster.step();
    for value in ["1", "abc", "1/sha256:00", "1/md5:0123"] {
        cluster.approve(value);
        let decision = cluster.step();
        assert_eq!(
            decision.applied_revision, None,
            "{value} approved revision 1"
        );
        assert_eq!(reasons(&decision), ["ApprovalRefused"], "{value}");
        assert!(
            decision.events[0].note.contains("`<revision>/<hash>`"),
            "{}",
            decision.events[0].note
        );
    }
}

#[test]
fn an_approval_naming_the_pending_number_with_another_hash_is_refused() {
    let mut cluster = manual(20, 2);
    let pending = cluster.step().status.pending_revision.unwrap();
    let forged = approval_value(pending.revision, &format!("sha256:{}", "0".repeat(64)));
    cluster.approve(&forged);
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None);
    assert_eq!(reasons(&decision), ["ApprovalRefused"]);
    assert!(
        decision.events[0].note.contains(&pending.hash),
        "{}",
        decision.events[0].note
    );
}

#[test]
fn a_withdrawn_revision_number_is_never_given_to_another_plan() {
    let mut cluster = manual(20, 2);
    cluster.step();
    cluster.approve_pending();
    cluster.settle();
    assert_eq!(cluster.obs.status.current_revision, 1);
    // 2 -> 4 members: revision 2 pending; back to 2: withdrawn.
    cluster.scale(4);
    let withdrawn = cluster.step().status.pending_revision.unwrap();
    assert_eq!(withdrawn.revision, 2);
    cluster.scale(2);
    let decision = cluster.step();
    assert!(reasons(&decision).contains(&"RevisionWithdrawn"));
    assert!(decision.status.pending_revision.is_none());
    // Someone approves the withdrawn number (as reviewed), then the pool changes again.
    cluster.approve(&withdrawn.approve_with);
    let refused = cluster.step();
    assert_eq!(reasons(&refused), ["ApprovalRefused"]);
    cluster.scale(3);
    let decision = cluster.step();
    let pending = decision
        .status
        .pending_revision
        .clone()
        .expect("a new pending revision");
    assert_eq!(pending.revision, 3, "number 2 was given to another plan");
    assert_eq!(decision.applied_revision, None);
    assert!(reasons(&decision).contains(&"RevisionPending"));
    assert_eq!(decision.status.current_revision, 1);
}

#[test]
fn an_approval_written_before_its_revision_exists_never_approves_it() {
    let mut cluster = manual(20, 2);
    cluster.step();
    cluster.approve_pending();
    cluster.settle();
    // The exact plan a scale to 3 members gives, computed in advance.
    let mut preview = cluster.obs.clone();
    preview.spec.approval.policy = ApprovalPolicy::Automatic;
    let name = preview.pools[0].name.clone();
    preview.pools[0] = pool(&name, 3);
    let planned = decide(&preview)
        .proposal
        .expect("a scale to 3 proposes revision 2");
    assert_eq!(planned.revision, 2);
    cluster.approve(&planned.approve_with);
    let refused = cluster.step();
    assert_eq!(reasons(&refused), ["ApprovalRefused"]);
    assert!(
        refused.events[0].note.contains("does not exist yet"),
        "{}",
        refused.events[0].note
    );
    cluster.scale(3);
    let decision = cluster.step();
    assert_eq!(
        decision.applied_revision, None,
        "a pre-approval applied a revision"
    );
    let pending = decision.status.pending_revision.clone().expect("pending");
    assert_eq!(pending.hash, planned.hash, "the same plan as previewed");
    assert_eq!(
        pending.revision, 3,
        "number 2 was used up by the refused approval"
    );
}

#[test]
fn an_approval_of_an_absurd_revision_number_neither_panics_nor_exhausts_the_numbers() {
    let mut cluster = manual(20, 2);
    cluster.step();
    cluster.approve(&approval_value(
        u64::MAX,
        &format!("sha256:{}", "a".repeat(64)),
    ));
    let decision = cluster.step();
    assert_eq!(reasons(&decision), ["ApprovalRefused"]);
    assert_eq!(decision.status.latest_revision, 1);
    cluster.approve_pending();
    assert_eq!(cluster.step().applied_revision, Some(1));
}

#[test]
fn manual_approval_lets_through_a_revision_that_only_rehomes_jobs_of_departed_members() {
    let mut spec = spec(jobs(30));
    spec.approval.policy = ApprovalPolicy::Manual;
    spec.strategy.type_ = StrategyType::Jump;
    let mut cluster = Cluster::new(spec, 3);
    cluster.step();
    cluster.approve_pending();
    cluster.settle();
    // Scaling down with jump consistent hashing moves only the departed member's jobs.
    cluster.scale(2);
    let decision = cluster.step();
    assert_eq!(
        decision.applied_revision,
        Some(2),
        "{:?}",
        decision.status.pending_revision
    );
    let proposal = decision.proposal.clone().unwrap();
    assert_eq!(proposal.summary.jobs_rehomed, proposal.summary.jobs_moved);
    assert_eq!(proposal.summary.members_disrupted, 0);
    assert!(
        decision.events.iter().any(|event| event
            .note
            .contains("only re-homes jobs of members that are gone")),
        "{:?}",
        decision.events
    );
    // Scaling up moves jobs away from members that stay: that waits.
    cluster.settle();
    cluster.scale(3);
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None);
    assert!(
        decision
            .status
            .pending_revision
            .unwrap()
            .summary
            .members_disrupted
            > 0
    );
}

#[test]
fn a_swarm_whose_departed_members_jobs_wait_for_approval_is_not_ready_and_counts_them() {
    let mut spec = spec(jobs(27));
    spec.approval.policy = ApprovalPolicy::Manual;
    spec.strategy.type_ = StrategyType::Bounded;
    let mut cluster = Cluster::new(spec, 9);
    cluster.step();
    cluster.approve_pending();
    cluster.settle();
    assert_eq!(cluster.obs.status.unowned_jobs, 0);
    assert_eq!(cluster.condition("Ready").status, "True");
    let held: u64 = ["worker-7", "worker-8"]
        .iter()
        .map(|member| cluster.slice_of(member).len() as u64)
        .sum();
    assert!(held > 0);
    cluster.scale(7);
    cluster.settle();
    assert!(
        cluster.obs.status.pending_revision.is_some(),
        "bounded moves jobs of members that stay: the revision waits"
    );
    assert_eq!(cluster.obs.status.ready.as_deref(), Some("7/7"));
    assert_eq!(cluster.obs.status.unowned_jobs, held);
    let ready = cluster.condition("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "JobsUnowned"),
        "{ready:?}"
    );
    assert!(
        ready.message.contains(&format!("{held} of the 27 jobs")),
        "{}",
        ready.message
    );
    assert!(ready.message.contains("worker-7"), "{}", ready.message);
    assert_ne!(cluster.obs.status.phase.as_deref(), Some("Ready"));
    cluster.approve_pending();
    cluster.settle();
    assert_eq!(cluster.obs.status.unowned_jobs, 0);
    assert_eq!(cluster.condition("Ready").status, "True");
    assert_eq!(all_jobs_once(&cluster), jobs(27));
}

#[test]
fn budget_counts_stopped_jobs_as_moved() {
    let mut spec = spec(jobs(30));
    spec.approval = ApprovalSpec {
        policy: ApprovalPolicy::Budget,
        max_disrupted_members: None,
        max_moved_jobs: Some(5),
        ..ApprovalSpec::default()
    };
    let mut cluster = Cluster::new(spec, 3);
    cluster.settle();
    // Emptying the job list moves nothing but stops every job.
    cluster.obs.spec.jobs = Vec::new();
    let decision = cluster.step();
    assert_eq!(
        decision.applied_revision, None,
        "stopping 30 jobs passed a budget of 5"
    );
    let pending = decision.status.pending_revision.clone().unwrap();
    assert_eq!(pending.summary.jobs_stopped, 30);
    assert_eq!(pending.summary.jobs_moved, 0);
    let awaiting = previous_condition(&decision.status, "AwaitingApproval").unwrap();
    assert!(
        awaiting.message.contains("moves or stops 30 jobs"),
        "{}",
        awaiting.message
    );
}

#[test]
fn budget_approves_a_change_within_the_moved_jobs_budget() {
    let mut spec = spec(jobs(30));
    spec.approval = ApprovalSpec {
        policy: ApprovalPolicy::Budget,
        max_disrupted_members: None,
        max_moved_jobs: Some(10),
        ..ApprovalSpec::default()
    };
    let mut cluster = Cluster::new(spec, 3);
    cluster.settle();
    assert_eq!(cluster.obs.status.current_revision, 1);
    cluster.scale(4);
    let decision = cluster.step();
    assert_eq!(
        decision.applied_revision,
        Some(2),
        "{:?}",
        decision.status.pending_revision
    );
}

#[test]
fn budget_waits_for_approval_when_a_change_exceeds_it() {
    let mut spec = spec(jobs(30));
    spec.approval = ApprovalSpec {
        policy: ApprovalPolicy::Budget,
        max_disrupted_members: Some(1),
        max_moved_jobs: Some(2),
        ..ApprovalSpec::default()
    };
    let mut cluster = Cluster::new(spec, 3);
    cluster.settle();
    cluster.scale(4);
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None);
    let pending = decision.status.pending_revision.clone().expect("pending");
    assert!(pending.summary.jobs_moved > 2);
    let awaiting = previous_condition(&decision.status, "AwaitingApproval").unwrap();
    assert_eq!(awaiting.reason, "OverBudget");
}

#[test]
fn duplicate_job_keys_degrade_the_swarm_and_keep_the_last_good_revision() {
    let mut cluster = Cluster::new(spec(jobs(6)), 2);
    cluster.settle();
    let good = cluster.obs.slices.clone();
    cluster.obs.spec.jobs.push("stream:001".to_owned());
    let decision = cluster.step();
    assert!(decision.operations.is_empty(), "{:?}", decision.operations);
    assert_eq!(decision.status.current_revision, 1);
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert_eq!(degraded.status, "True");
    assert_eq!(degraded.reason, "InvalidJobs");
    assert!(
        degraded.message.contains("stream:001"),
        "{}",
        degraded.message
    );
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.warning && e.reason == "InvalidJobs")
    );
    assert_eq!(cluster.obs.slices, good);
    // The Event is not repeated while nothing changes.
    assert!(cluster.step().events.is_empty());
    cluster.obs.spec.jobs.pop();
    let fixed = cluster.step();
    assert!(reasons(&fixed).contains(&"Recovered"));
}

#[test]
fn a_missing_job_configmap_is_named_in_the_degraded_condition() {
    let mut spec = spec(vec![]);
    spec.jobs_from = Some(JobsFrom {
        config_map_key_ref: Some(ConfigMapKeyRef {
            name: "swarm-jobs".to_owned(),
            key: "config.yml".to_owned(),
        }),
        ..JobsFrom::default()
    });
    let mut cluster = Cluster::new(spec, 2);
    cluster.obs.job_source = JobSource::MissingConfigMap {
        name: "swarm-jobs".to_owned(),
    };
    let decision = cluster.step();
    assert!(decision.operations.is_empty());
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert_eq!(degraded.reason, "JobConfigMapMissing");
    assert!(degraded.message.contains("swarm-jobs"));
    assert_eq!(decision.status.phase.as_deref(), Some("Degraded"));
}

#[test]
fn an_unparsable_job_configmap_is_named_and_a_good_one_is_used() {
    let mut cluster = Cluster::new(spec(vec!["inline:a".to_owned()]), 2);
    cluster.obs.job_source = JobSource::Text {
        name: "swarm-jobs".to_owned(),
        key: "config.yml".to_owned(),
        text: "jobs: {not: a list".to_owned(),
    };
    let decision = cluster.step();
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert_eq!(degraded.reason, "JobConfigMapInvalid");
    assert!(degraded.message.contains("swarm-jobs"));
    cluster.obs.job_source = JobSource::Text {
        name: "swarm-jobs".to_owned(),
        key: "config.yml".to_owned(),
        text: "jobs:\n  - stream:cctv0:updated\n  - stream:foo:new\n".to_owned(),
    };
    cluster.settle();
    assert_eq!(
        all_jobs_once(&cluster),
        vec!["inline:a", "stream:cctv0:updated", "stream:foo:new"]
    );
}

#[test]
fn a_hand_edited_slice_is_put_back_and_reported() {
    let mut cluster = Cluster::new(spec(jobs(6)), 2);
    cluster.settle();
    let good = cluster.obs.slices["worker-0"].clone();
    let edited = good.text.clone().unwrap().replace("stream:", "hacked:");
    cluster.obs.slices.get_mut("worker-0").unwrap().text = Some(edited);
    let decision = cluster.step();
    assert!(reasons(&decision).contains(&"SliceRestored"));
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert_eq!(degraded.reason, "SliceEdited");
    assert!(degraded.message.contains("worker-0"));
    cluster.settle();
    assert_eq!(cluster.obs.slices["worker-0"].text, good.text);
}

#[test]
fn a_deleted_slice_is_written_again() {
    let mut cluster = Cluster::new(spec(jobs(6)), 2);
    cluster.settle();
    let good = cluster.obs.slices["worker-1"].text.clone();
    cluster.obs.slices.remove("worker-1");
    let decision = cluster.step();
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert!(
        degraded.message.contains("worker-1-slice"),
        "{}",
        degraded.message
    );
    assert_eq!(cluster.obs.slices["worker-1"].text, good);
}

#[test]
fn restart_policy_evicts_exactly_the_members_whose_slice_changed_one_at_a_time() {
    let mut spec = spec(jobs(40));
    spec.reload = ReloadPolicy::Restart;
    let mut cluster = Cluster::new(spec, 4);
    cluster.settle();
    cluster.evicted.clear();
    cluster.writes.clear();
    let before: BTreeMap<String, Vec<String>> = (0..4)
        .map(|i| format!("worker-{i}"))
        .map(|m| (m.clone(), cluster.slice_of(&m)))
        .collect();
    cluster.scale(5);
    let mut max_per_plan = 0;
    for _ in 0..20 {
        let decision = cluster.step();
        let evictions = decision
            .operations
            .iter()
            .filter(|op| matches!(op, Operation::Evict { .. }))
            .count();
        max_per_plan = max_per_plan.max(evictions);
        if decision.operations.is_empty() {
            break;
        }
    }
    assert!(
        max_per_plan <= 1,
        "more than maxUnavailable evictions in one plan"
    );
    let changed: BTreeSet<String> = before
        .iter()
        .filter(|(member, old)| &cluster.slice_of(member) != *old)
        .map(|(member, _)| member.clone())
        .chain(["worker-4".to_owned()])
        .collect();
    let evicted: BTreeSet<String> = cluster.evicted.iter().cloned().collect();
    assert_eq!(evicted, changed);
    // A pod is restarted a second time only when it both gave jobs away (restart one
    // releases them) and received jobs (restart two picks them up).
    for member in &evicted {
        let times = cluster.evicted.iter().filter(|m| *m == member).count();
        if times > 1 {
            let old = before.get(member).cloned().unwrap_or_default();
            let new = cluster.slice_of(member);
            let lost = old.iter().any(|key| !new.contains(key));
            let gained = new.iter().any(|key| !old.contains(key));
            assert!(
                lost && gained && times == 2,
                "{member} restarted {times} times"
            );
        }
    }
}

#[test]
fn restart_policy_never_evicts_a_pod_that_started_after_its_slice_was_written() {
    let mut spec = spec(jobs(12));
    spec.reload = ReloadPolicy::Restart;
    let mut cluster = Cluster::new(spec, 2);
    cluster.step();
    // Both pods restart on their own (a node drain, say) right after their slices were
    // written: the new pods read their slices at start-up and need no eviction.
    for pod in cluster.obs.pools[0].pods.values_mut() {
        pod.uid = format!("{}-drained", pod.uid);
    }
    cluster.evicted.clear();
    cluster.settle();
    assert!(cluster.evicted.is_empty(), "{:?}", cluster.evicted);
}

#[test]
fn a_member_unavailable_past_failover_after_loses_its_jobs_and_gets_them_back() {
    let mut spec = spec(jobs(30));
    spec.failover.after = Some("5m".to_owned());
    // Getting exactly its own jobs back is a property of the stateless strategies.
    spec.strategy.type_ = StrategyType::Bounded;
    let mut cluster = Cluster::new(spec, 3);
    cluster.settle();
    let original = cluster.slice_of("worker-1");
    let others_before = [cluster.slice_of("worker-0"), cluster.slice_of("worker-2")];
    cluster.obs.pools[0].pods.get_mut(&1).unwrap().ready = false;
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None);
    assert_eq!(decision.requeue_after, Some(Duration::from_secs(300)));
    cluster.obs.now = t0() + SignedDuration::from_secs(301);
    let decision = cluster.step();
    assert!(reasons(&decision).contains(&"MemberFailedOver"));
    assert_eq!(decision.applied_revision, Some(2));
    cluster.settle();
    assert!(cluster.slice_of("worker-1").is_empty());
    assert_eq!(all_jobs_once(&cluster), jobs(30));
    // Only worker-1's jobs moved: the others kept everything and gained only its jobs.
    for (member, before) in ["worker-0", "worker-2"].iter().zip(&others_before) {
        let theirs = cluster.slice_of(member);
        assert!(
            before.iter().all(|key| theirs.contains(key)),
            "{member} lost a job"
        );
        assert!(
            theirs
                .iter()
                .all(|key| before.contains(key) || original.contains(key)),
            "{member} gained a job that was not worker-1's"
        );
    }
    cluster.obs.pools[0].pods.get_mut(&1).unwrap().ready = true;
    let decision = cluster.step();
    assert!(reasons(&decision).contains(&"MemberReturned"));
    cluster.settle();
    assert_eq!(cluster.slice_of("worker-1"), original);
}

#[test]
fn the_failover_now_annotation_moves_a_members_jobs_at_once() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    cluster
        .obs
        .annotations
        .insert(ANNOTATION_FAILOVER_NOW.to_owned(), "worker-2".to_owned());
    cluster.settle();
    assert!(cluster.slice_of("worker-2").is_empty());
    assert_eq!(all_jobs_once(&cluster), jobs(30));
}

#[test]
fn history_beyond_the_limit_is_pruned_but_the_revision_in_force_is_kept() {
    let mut spec = spec(jobs(5));
    spec.revision_history_limit = 2;
    let mut cluster = Cluster::new(spec, 2);
    for n in 6..10 {
        cluster.obs.spec.jobs = jobs(n);
        cluster.settle();
    }
    let kept: Vec<u64> = cluster.obs.history.keys().copied().collect();
    assert_eq!(kept, vec![3, 4]);
    assert_eq!(cluster.obs.status.current_revision, 4);
}

#[test]
fn a_plan_is_the_same_after_a_controller_restart() {
    // The plan depends only on the observation: planning twice from the same
    // cluster state (as a restarted controller would) gives the same result.
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    cluster.scale(4);
    cluster.step();
    assert_eq!(decide(&cluster.obs), decide(&cluster.obs));
}

#[test]
fn an_invalid_failover_duration_is_reported() {
    let mut spec = spec(jobs(4));
    spec.failover.after = Some("soon".to_owned());
    let mut cluster = Cluster::new(spec, 2);
    let decision = cluster.step();
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert_eq!(degraded.reason, "InvalidFailover");
}

#[test]
fn an_index_too_large_for_a_configmap_becomes_a_summary() {
    let jobs = JobSet::parse((0..100_000).map(|i| format!("stream:{i:08}"))).unwrap();
    let members = vec![Member::new("worker", 0), Member::new("worker", 1)];
    let assignment = assign(&jobs, &members, &Strategy::Jump).unwrap();
    let text = index_text(&assignment.slices("demo", 3), 3);
    assert!(text.len() < MAX_INDEX_BYTES);
    assert!(text.contains("summary: true"));
    assert!(text.contains("worker-1:"));
    let small = index_text(
        &assignment.slices("demo", 3).into_iter().take(0).collect(),
        3,
    );
    assert!(!small.contains("summary"));
}

#[test]
fn a_revision_whose_job_list_was_omitted_falls_back_to_the_slices_in_the_cluster() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    for record in cluster.obs.history.values_mut() {
        let record = std::sync::Arc::make_mut(record);
        record.jobs = Default::default();
        record.jobs_omitted = true;
    }
    let decision = cluster.step();
    assert!(decision.operations.is_empty(), "{:?}", decision.operations);
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert_eq!(degraded.status, "False", "{}", degraded.message);
}

#[test]
fn a_deleted_history_object_of_the_revision_in_force_is_written_again() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    cluster.obs.history.clear();
    let decision = cluster.step();
    assert!(
        matches!(decision.operations.as_slice(), [Operation::WriteRevision(record)] if record.revision == 1),
        "{:?}",
        decision.operations
    );
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert_eq!(degraded.status, "False");
}

#[test]
fn the_old_rollback_annotation_is_refused_once_and_changes_nothing() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    cluster.obs.spec.jobs = jobs(14);
    cluster.settle();
    cluster
        .obs
        .annotations
        .insert(ANNOTATION_ROLLBACK_TO.to_owned(), "1".to_owned());
    let decision = cluster.step();
    assert!(decision.operations.is_empty(), "{:?}", decision.operations);
    assert_eq!(reasons(&decision), ["RollbackAnnotationRefused"]);
    assert!(
        decision.events[0].note.contains("kubectl shoal undo demo"),
        "{}",
        decision.events[0].note
    );
    assert!(cluster.step().events.is_empty(), "announced twice");
    assert_eq!(all_jobs_once(&cluster), jobs(14));
}

#[test]
fn a_failover_now_annotation_naming_no_member_is_refused_naming_the_members() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    cluster.obs.annotations.insert(
        ANNOTATION_FAILOVER_NOW.to_owned(),
        "worker-1, worker-7".to_owned(),
    );
    let decision = cluster.step();
    let refusal = decision
        .events
        .iter()
        .find(|event| event.reason == "FailoverTargetUnknown")
        .expect("a FailoverTargetUnknown Event");
    assert!(refusal.warning);
    assert!(
        refusal.note.contains("worker-7")
            && !refusal.note.contains("names worker-1")
            && refusal.note.contains("members: worker-0, worker-1"),
        "{}",
        refusal.note
    );
    cluster.settle();
    // worker-1 was failed over all the same; the refusal is not repeated.
    assert!(cluster.step().events.is_empty());
    assert_eq!(cluster.slice_of("worker-1"), Vec::<String>::new());
}

#[test]
fn a_revoke_is_not_settled_by_an_older_acknowledgement_of_the_same_jobs() {
    let members = ["worker-0", "worker-1", "worker-2"];
    let mut cluster = Cluster::new(spec(jobs(30)), 2);
    // Each sidecar acknowledges the slice it holds, unless `holding_back` says not.
    let step_and_ack = |cluster: &mut Cluster, holding_back: &dyn Fn(&[String]) -> bool| {
        let decision = cluster.step();
        for member in members {
            let Some(object) = cluster.obs.slices.get(member) else {
                continue;
            };
            let slice = parse_slice(object.text.as_deref().unwrap()).unwrap();
            let held: Vec<String> = slice.jobs.iter().map(|k| k.as_str().to_owned()).collect();
            if holding_back(&held) && member == "worker-0" {
                continue;
            }
            cluster.obs.leases.insert(
                member.to_owned(),
                sidecar_lease(member, Some(slice.revision), Some(slice.hash), 30),
            );
        }
        decision
    };
    let never = |_: &[String]| false;
    for _ in 0..10 {
        step_and_ack(&mut cluster, &never);
    }
    let at_two = cluster.slice_of("worker-0");
    cluster.scale(3);
    for _ in 0..10 {
        step_and_ack(&mut cluster, &never);
    }
    let at_three = cluster.slice_of("worker-0");
    let moving: Vec<String> = at_two
        .iter()
        .filter(|job| cluster.slice_of("worker-2").contains(job))
        .cloned()
        .collect();
    assert!(
        !moving.is_empty(),
        "growing moves jobs from worker-0 to worker-2"
    );
    // Shrinking hands worker-0 those jobs back; from then on it acknowledges nothing.
    let stopped = std::cell::Cell::new(false);
    let handed = |held: &[String]| {
        if held.iter().any(|job| moving.contains(job)) {
            stopped.set(true);
        }
        stopped.get()
    };
    cluster.scale(2);
    for _ in 0..10 {
        step_and_ack(&mut cluster, &handed);
    }
    assert!(stopped.get());
    // Its Lease acknowledges the very jobs the next revoke keeps, at an older revision.
    let kept: Vec<String> = at_two
        .iter()
        .filter(|job| at_three.contains(job))
        .cloned()
        .collect();
    let kept_hash = canonical_hash(&JobSet::parse(kept).unwrap());
    assert_eq!(
        cluster.obs.leases["worker-0"].acked_hash.as_deref(),
        Some(kept_hash.as_str())
    );
    // Growing again revokes them from worker-0; nobody else may get them.
    cluster.scale(3);
    for _ in 0..5 {
        let decision = step_and_ack(&mut cluster, &handed);
        for operation in &decision.operations {
            if let Operation::WriteSlice { slice, .. } = operation
                && slice.member != "worker-0"
            {
                let granted: Vec<&str> = slice
                    .jobs
                    .iter()
                    .map(|key| key.as_str())
                    .filter(|job| moving.iter().any(|moved| moved == job))
                    .collect();
                assert!(
                    granted.is_empty(),
                    "{granted:?} granted to {} before worker-0 acknowledged their revoke",
                    slice.member
                );
            }
        }
    }
    assert_eq!(
        cluster.obs.slices["worker-0"].phase.as_deref(),
        Some("revoke")
    );
}

#[test]
fn the_swarms_strategy_and_its_parameters_decide_the_assignment() {
    let keys = JobSet::parse(jobs(60)).unwrap();
    let members = shoal_core::member::pool_members("worker", 4);
    let slices_of = |strategy: &Strategy| -> Vec<Vec<String>> {
        let assignment = assign(&keys, &members, strategy).unwrap();
        (0..4)
            .map(|ordinal| {
                assignment
                    .slice_of(&MemberId::new("worker", ordinal))
                    .unwrap_or_default()
                    .iter()
                    .map(|key| key.as_str().to_owned())
                    .collect()
            })
            .collect()
    };
    let bounded = slices_of(&Strategy::default());
    for (written, strategy) in [
        (serde_json::json!({"type": "jump"}), Strategy::Jump),
        (
            serde_json::json!({"type": "ring", "vnodes": 8}),
            Strategy::Ring { vnodes: 8 },
        ),
        (
            serde_json::json!({"type": "bounded", "epsilon": 0.5}),
            Strategy::Bounded { epsilon: 0.5 },
        ),
    ] {
        let mut swarm = spec(jobs(60));
        swarm.strategy = serde_json::from_value(written.clone()).unwrap();
        let mut cluster = Cluster::new(swarm, 4);
        cluster.settle();
        let planned: Vec<Vec<String>> = (0..4)
            .map(|ordinal| cluster.slice_of(&format!("worker-{ordinal}")))
            .collect();
        assert_eq!(planned, slices_of(&strategy), "{written}");
        if strategy != Strategy::default() && !matches!(strategy, Strategy::Bounded { .. }) {
            assert_ne!(planned, bounded, "{written} planned like the default");
        }
    }
}

#[test]
fn scaling_down_grants_the_removed_members_jobs_only_once_its_pod_is_gone() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    let leaving_jobs = cluster.slice_of("worker-2");
    assert!(!leaving_jobs.is_empty());
    // Scaled to 2: worker-2's pod is terminating but still there (and may still run its jobs).
    cluster.obs.pools[0].replicas = 2;
    if let Some(pod) = cluster.obs.pools[0].pods.get_mut(&2) {
        pod.deleting = true;
        pod.ready = false;
    }
    for _ in 0..3 {
        cluster.step();
    }
    assert!(
        cluster.slice_of("worker-2").is_empty(),
        "worker-2's jobs are revoked first"
    );
    for member in ["worker-0", "worker-1"] {
        let slice = cluster.slice_of(member);
        assert!(
            leaving_jobs.iter().all(|key| !slice.contains(key)),
            "{member} was granted worker-2's jobs while its pod still exists"
        );
    }
    // The pod is gone: the jobs are granted and the slice deleted.
    cluster.obs.pools[0].pods.remove(&2);
    cluster.settle();
    assert!(!cluster.obs.slices.contains_key("worker-2"));
    let mut all: Vec<String> = ["worker-0", "worker-1"]
        .iter()
        .flat_map(|member| cluster.slice_of(member))
        .collect();
    all.sort();
    assert_eq!(all, jobs(30));
}

/// The grants of `plan` that hand out any of `keys`.
fn grants_of<'a>(decision: &'a Decision, keys: &[String]) -> Vec<&'a str> {
    decision
        .operations
        .iter()
        .filter_map(|operation| match operation {
            Operation::WriteSlice {
                slice,
                phase: "grant",
                ..
            } if keys.iter().any(|key| slice.jobs.contains(key)) => Some(slice.member.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_jobs_of_a_member_whose_pod_left_unseen_are_granted_only_once_its_slice_is_gone() {
    // Found by the ownership oracle under Restart: the pool was scaled down while the
    // controller was down, the departed member's slice survived, and a pod of that name
    // created by a later scale up read it at start while another member had been granted
    // its jobs.
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    let left_jobs = cluster.slice_of("worker-2");
    assert!(!left_jobs.is_empty());
    cluster.scale(2);
    for _ in 0..3 {
        // Every delete of the slice fails (an API error, a controller killed mid-pass).
        let mut pass = decide(&cluster.obs);
        assert!(
            pass.operations.iter().any(|operation| matches!(
                operation,
                Operation::DeleteSlice { member, .. } if member == "worker-2"
            )),
            "the departed member's slice is deleted: {:?}",
            pass.operations
        );
        assert_eq!(
            grants_of(&pass, &left_jobs),
            Vec::<&str>::new(),
            "worker-2's jobs are granted while its slice still exists"
        );
        pass.operations
            .retain(|operation| !matches!(operation, Operation::DeleteSlice { .. }));
        apply_in_memory(&mut cluster.obs, &pass);
        cluster.obs.status = pass.status.clone();
    }
    // The delete goes through: the jobs move.
    cluster.settle();
    assert!(!cluster.obs.slices.contains_key("worker-2"));
    assert_eq!(all_jobs_once(&cluster), jobs(30));
}

#[test]
fn a_removed_member_acknowledging_its_revoke_releases_its_jobs_before_its_pod_is_gone() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    cluster.obs.pools[0].replicas = 2;
    cluster.step();
    let revoked = parse_slice(
        cluster.obs.slices["worker-2"]
            .text
            .as_deref()
            .expect("revoked slice"),
    )
    .unwrap();
    assert!(revoked.jobs.is_empty());
    // The sidecar of the still-running pod acknowledges the empty slice.
    cluster.obs.leases.insert(
        "worker-2".to_owned(),
        sidecar_lease(
            "worker-2",
            Some(revoked.revision),
            Some(revoked.hash.clone()),
            3600,
        ),
    );
    cluster.step();
    let mut all: Vec<String> = ["worker-0", "worker-1"]
        .iter()
        .flat_map(|member| cluster.slice_of(member))
        .collect();
    all.sort();
    assert_eq!(all, jobs(30), "granted once worker-2 acknowledged");
}

#[test]
fn a_revoke_still_unacknowledged_when_a_newer_revision_is_approved_still_holds_back_grants() {
    let members = ["worker-0", "worker-1", "worker-2", "worker-3"];
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    // Each sidecar acknowledges the slice it holds, except worker-0 while `silent`.
    let step_and_ack = |cluster: &mut Cluster, silent: bool| {
        let decision = cluster.step();
        for member in members {
            let Some(object) = cluster.obs.slices.get(member) else {
                continue;
            };
            if silent && member == "worker-0" {
                continue;
            }
            let slice = parse_slice(object.text.as_deref().unwrap()).unwrap();
            cluster.obs.leases.insert(
                member.to_owned(),
                sidecar_lease(member, Some(slice.revision), Some(slice.hash), 30),
            );
        }
        decision
    };
    for _ in 0..10 {
        step_and_ack(&mut cluster, false);
    }
    let still_running = cluster.slice_of("worker-0");
    // Growing revokes some of worker-0's jobs; worker-0 is slow to acknowledge.
    cluster.scale(4);
    step_and_ack(&mut cluster, true);
    assert_eq!(
        cluster.obs.slices["worker-0"].phase.as_deref(),
        Some("revoke")
    );
    // Meanwhile the job list changes: a newer revision supersedes the rollout.
    cluster.obs.spec.jobs = jobs(31);
    for _ in 0..5 {
        let decision = step_and_ack(&mut cluster, true);
        for operation in &decision.operations {
            if let Operation::WriteSlice { slice, .. } = operation
                && slice.member != "worker-0"
            {
                let granted: Vec<&str> = slice
                    .jobs
                    .iter()
                    .map(|key| key.as_str())
                    .filter(|job| still_running.iter().any(|running| running == job))
                    .collect();
                assert!(
                    granted.is_empty(),
                    "{granted:?} granted to {} while worker-0 has not acknowledged their revoke",
                    slice.member
                );
            }
        }
    }
    // Once worker-0 acknowledges, the grants go out.
    for _ in 0..5 {
        step_and_ack(&mut cluster, false);
    }
    assert!(cluster.slice_of("worker-3").len() >= 7);
}

#[test]
fn a_job_configmap_past_the_yaml_parsers_default_budget_is_read_whole() {
    // 300,000 keys exceed the parser's default budget of 250,000 nodes.
    let keys: Vec<String> = (0..300_000).map(|i| format!("j{i:06}")).collect();
    let flow = format!("jobs: [{}]", keys.join(","));
    let block: String = std::iter::once("jobs:\n".to_owned())
        .chain(keys.iter().map(|key| format!("- {key}\n")))
        .collect();
    for text in [flow, block] {
        let source = JobSource::Text {
            name: "jobs".to_owned(),
            key: "config.yml".to_owned(),
            text,
        };
        let read = job_list("demo", &spec(Vec::new()), &source).expect("the whole list");
        assert_eq!(read.len(), keys.len());
    }
}

#[test]
fn a_configmap_of_someone_else_named_like_the_index_is_left_alone_and_reported() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster
        .obs
        .foreign_config_maps
        .insert("demo".to_owned(), "it has no controller owner".to_owned());
    let plans = cluster.settle();
    assert!(
        plans
            .iter()
            .flat_map(|decision| &decision.operations)
            .all(|operation| !matches!(operation, Operation::WriteIndex { .. })),
        "the index was written over a ConfigMap the Swarm does not own"
    );
    // Everything else is in force.
    assert_eq!(all_jobs_once(&cluster), jobs(10));
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "OwnershipConflict");
    assert!(
        degraded
            .message
            .contains("ConfigMap demo exists and is not owned by Swarm demo")
            && degraded.message.contains("no controller owner"),
        "{}",
        degraded.message
    );
    assert!(
        plans.iter().any(|decision| decision
            .events
            .iter()
            .any(|event| event.warning && event.reason == "OwnershipConflict")),
        "no Warning Event"
    );
}

#[test]
fn a_slice_configmap_of_someone_else_is_not_written_and_its_member_is_granted_nothing() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.obs.foreign_config_maps.insert(
        "worker-1-slice".to_owned(),
        "it is owned by Swarm other".to_owned(),
    );
    let plans = cluster.settle();
    let written: Vec<&str> = plans
        .iter()
        .flat_map(|decision| &decision.operations)
        .filter_map(|operation| match operation {
            Operation::WriteSlice { slice, .. } => Some(slice.member.as_str()),
            _ => None,
        })
        .collect();
    assert!(!written.contains(&"worker-1"), "{written:?}");
    assert!(written.contains(&"worker-0"));
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "OwnershipConflict");
    assert!(
        degraded.message.contains("Swarm other"),
        "{}",
        degraded.message
    );
}

#[test]
fn a_deletion_of_a_slice_the_swarm_does_not_own_is_never_planned() {
    let mut cluster = Cluster::new(spec(jobs(10)), 3);
    cluster.settle();
    // worker-2's slice was replaced by someone else's ConfigMap of that name.
    cluster.obs.owned_config_maps.remove("worker-2-slice");
    cluster.scale(2);
    for pool in &mut cluster.obs.pools {
        pool.pods.remove(&2);
    }
    let plans = cluster.settle();
    assert!(
        plans
            .iter()
            .flat_map(|decision| &decision.operations)
            .all(|operation| !matches!(
                operation,
                Operation::DeleteSlice { member, .. } if member == "worker-2"
            )),
        "a ConfigMap the Swarm does not own was deleted"
    );
}

#[test]
fn a_revision_number_whose_history_name_is_taken_is_skipped() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.obs.foreign_config_maps.insert(
        "demo-rev-1".to_owned(),
        "it has no controller owner".to_owned(),
    );
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, Some(2));
    assert!(cluster.obs.history.contains_key(&2));
}

#[test]
fn names_a_plan_writes_that_are_neither_owned_nor_known_foreign_are_to_be_checked() {
    let cluster = Cluster::new(spec(jobs(10)), 2);
    let decision = decide(&cluster.obs);
    let unchecked = unchecked_targets(&cluster.obs, &decision.operations);
    assert_eq!(
        unchecked.into_iter().collect::<Vec<_>>(),
        ["demo-rev-1", "worker-0-slice", "worker-1-slice"],
        "the first pass writes the history record and grants every slice"
    );
    let mut cluster = cluster;
    cluster.settle();
    let converged = super::decide(&cluster.obs);
    assert!(unchecked_targets(&cluster.obs, &converged.operations).is_empty());
}

#[test]
fn a_slice_edited_by_hand_with_a_correct_hash_is_written_back_and_reported_once() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    let mine = cluster.slice_of("worker-0");
    let theirs = cluster.slice_of("worker-1");
    // A careful hand: worker-1's first job added to worker-0's slice, hash recomputed.
    let mut edited = mine.clone();
    edited.push(theirs[0].clone());
    let edited = Slice::new(
        "demo".to_owned(),
        "worker-0".to_owned(),
        1,
        JobSet::parse(edited).unwrap(),
    );
    cluster.obs.slices.get_mut("worker-0").unwrap().text = Some(slice_text(&edited));
    cluster
        .obs
        .edited_config_maps
        .insert("worker-0-slice".to_owned(), "kubectl-edit".to_owned());
    let decision = cluster.step();
    assert_eq!(reasons(&decision), ["SliceRestored"]);
    assert!(
        decision.events[0].note.contains("changed by kubectl-edit"),
        "{}",
        decision.events[0].note
    );
    assert_eq!(cluster.condition("Degraded").reason, "SliceEdited");
    assert_eq!(
        cluster.slice_of("worker-0"),
        mine,
        "the added job was not revoked"
    );
    let rest = cluster.settle();
    assert!(
        rest.iter()
            .flat_map(|decision| &decision.events)
            .all(|event| event.reason != "SliceRestored"),
        "reported twice"
    );
    assert_eq!(cluster.condition("Degraded").status, "False");

    // An edit that changes nothing is written back all the same (to take the data back).
    cluster
        .obs
        .edited_config_maps
        .insert("worker-1-slice".to_owned(), "kubectl-patch".to_owned());
    let decision = cluster.step();
    assert!(
        decision.operations.iter().any(|operation| matches!(
            operation,
            Operation::WriteSlice { slice, .. } if slice.member == "worker-1"
        )),
        "{:?}",
        decision.operations
    );
}

#[test]
fn an_edited_history_record_is_not_read_and_an_old_one_is_deleted() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    cluster.obs.spec.jobs = jobs(12);
    cluster.settle();
    assert_eq!(cluster.obs.status.current_revision, 2);
    // observe leaves out the records someone else changed.
    cluster.obs.history.remove(&1);
    cluster
        .obs
        .edited_config_maps
        .insert("demo-rev-1".to_owned(), "kubectl-edit".to_owned());
    let decision = cluster.step();
    assert!(
        decision
            .operations
            .contains(&Operation::PruneRevision { revision: 1 })
    );
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "ConfigMapEdited");
    assert!(degraded.message.contains("demo-rev-1") && degraded.message.contains("kubectl-edit"));
    // The record of the revision in force, edited, is written back from the inputs.
    cluster.obs.history.remove(&2);
    cluster
        .obs
        .edited_config_maps
        .insert("demo-rev-2".to_owned(), "kubectl-edit".to_owned());
    let decision = cluster.step();
    assert!(decision.operations.iter().any(|operation| matches!(
        operation,
        Operation::WriteRevision(record) if record.revision == 2
    )));
    cluster.settle();
    assert_eq!(cluster.condition("Degraded").status, "False");
}

/// A cluster of 3 members with sidecar Leases, scaled to 4: revokes written, grants held.
fn scaled_with_sidecars() -> Cluster {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    for member in ["worker-0", "worker-1", "worker-2"] {
        cluster
            .obs
            .leases
            .insert(member.to_owned(), sidecar_lease(member, Some(1), None, 30));
    }
    cluster.scale(4);
    cluster.step();
    cluster
}

fn grants(decision: &Decision) -> Vec<&str> {
    decision
        .operations
        .iter()
        .filter_map(|operation| match operation {
            Operation::WriteSlice {
                slice,
                phase: "grant",
                ..
            } => Some(slice.member.as_str()),
            _ => None,
        })
        .collect()
}

/// Each revoked member's Lease acknowledges its revoked slice, through `forge`.
fn acknowledge_revokes(cluster: &mut Cluster, forge: impl Fn(&str, &mut LeaseState)) {
    for member in ["worker-0", "worker-1", "worker-2"] {
        let slice = parse_slice(cluster.obs.slices[member].text.as_deref().unwrap()).unwrap();
        let lease = cluster.obs.leases.get_mut(member).unwrap();
        lease.acked_revision = Some(slice.revision);
        lease.acked_hash = Some(slice.hash);
        forge(member, lease);
    }
}

#[test]
fn an_acknowledgement_in_a_lease_held_by_another_pod_does_not_settle_a_revoke() {
    let mut cluster = scaled_with_sidecars();
    acknowledge_revokes(&mut cluster, |_, lease| {
        lease.holder = Some("intruder".to_owned())
    });
    assert!(
        grants(&cluster.step()).is_empty(),
        "granted on a forged Lease"
    );
    acknowledge_revokes(&mut cluster, |member, lease| {
        lease.holder = Some(member.to_owned())
    });
    assert_eq!(grants(&cluster.step()), ["worker-3"]);
}

#[test]
fn an_acknowledgement_of_a_revision_never_written_does_not_settle_a_revoke() {
    let mut cluster = scaled_with_sidecars();
    acknowledge_revokes(&mut cluster, |_, lease| lease.acked_revision = Some(999));
    assert!(
        grants(&cluster.step()).is_empty(),
        "granted on revision 999"
    );
}

#[test]
fn a_lease_left_by_the_previous_pod_does_not_acknowledge_for_its_replacement() {
    let mut cluster = scaled_with_sidecars();
    acknowledge_revokes(&mut cluster, |_, lease| {
        lease.pod_uid = Some("the-pod-before".to_owned())
    });
    // The revoked slices were written for the pods running now, so only an
    // acknowledgement from those pods' own sidecars counts.
    assert!(grants(&cluster.step()).is_empty());
}

#[test]
fn a_lease_that_stops_changing_for_its_duration_releases_its_member() {
    let mut cluster = scaled_with_sidecars();
    // Renewed by hand to look fresh: no matter, the controller measures from what it saw.
    for lease in cluster.obs.leases.values_mut() {
        lease.renew_time = Some(t0() + SignedDuration::from_hours(1));
    }
    cluster.obs.now = t0() + SignedDuration::from_secs(29);
    assert!(grants(&cluster.step()).is_empty());
    cluster.obs.now = t0() + SignedDuration::from_secs(31);
    assert_eq!(grants(&cluster.step()), ["worker-3"]);
}

#[test]
fn under_restart_an_acknowledgement_does_not_settle_a_revoke_until_the_pod_is_replaced() {
    let mut spec = spec(jobs(30));
    spec.reload = ReloadPolicy::Restart;
    spec.rollout.max_unavailable = 3;
    let mut cluster = Cluster::new(spec, 3);
    cluster.settle();
    for member in ["worker-0", "worker-1", "worker-2"] {
        cluster.obs.leases.insert(
            member.to_owned(),
            sidecar_lease(member, Some(1), None, 3600),
        );
    }
    cluster.scale(4);
    cluster.obs.pools[0].pods.remove(&3);
    // The revokes are written (and the losing pods evicted); the sidecars acknowledge
    // at once, but the applications keep what they read at start-up until replaced.
    let decision = cluster.step();
    let evicted: Vec<String> = decision
        .operations
        .iter()
        .filter_map(|operation| match operation {
            Operation::Evict { pod, .. } => Some(pod.clone()),
            _ => None,
        })
        .collect();
    acknowledge_revokes(&mut cluster, |_, _| {});
    // The simulated cluster replaced the evicted pods already; undo that for one of them.
    let kept = evicted.first().expect("a losing pod evicted").clone();
    let ordinal: u32 = kept.rsplit_once('-').unwrap().1.parse().unwrap();
    let pod = cluster.obs.pools[0].pods.get_mut(&ordinal).unwrap();
    pod.uid = pod.uid.trim_end_matches("-next").to_owned();
    assert!(
        grants(&cluster.step()).is_empty(),
        "granted while {kept} still runs its original share"
    );
}

#[test]
fn a_new_member_is_granted_jobs_only_once_its_pod_is_ready() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    cluster.scale(4);
    cluster.obs.pools[0].pods.get_mut(&3).unwrap().ready = false;
    let plans = cluster.settle();
    assert!(
        plans
            .iter()
            .all(|decision| !grants(decision).contains(&"worker-3")),
        "granted to a pod that is not Ready"
    );
    let last = plans.last().unwrap();
    assert_eq!(last.status.phase.as_deref(), Some("Progressing"));
    cluster.obs.pools[0].pods.get_mut(&3).unwrap().ready = true;
    assert_eq!(grants(&cluster.step()), ["worker-3"]);
}

#[test]
fn a_member_that_never_becomes_ready_is_failed_over_after_five_minutes_by_default() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    cluster.scale(4);
    cluster.obs.pools[0].pods.get_mut(&3).unwrap().ready = false;
    cluster.settle();
    cluster.obs.now = t0() + SignedDuration::from_secs(301);
    let decision = cluster.step();
    assert!(reasons(&decision).contains(&"MemberFailedOver"));
    cluster.settle();
    assert_eq!(all_jobs_once(&cluster), jobs(30));
    assert!(
        cluster
            .obs
            .slices
            .get("worker-3")
            .is_none_or(|_| cluster.slice_of("worker-3").is_empty())
    );
}

#[test]
fn pools_asking_for_more_members_than_the_limit_keep_the_revision_in_force() {
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    cluster.obs.pools[0].replicas = 1_000_000_000;
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None);
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "TooManyMembers");
    assert!(
        degraded
            .message
            .contains("StatefulSet worker: 1000000000 replicas"),
        "{}",
        degraded.message
    );
    assert_eq!(all_jobs_once(&cluster), jobs(30));
}

#[test]
fn a_swarm_whose_pools_have_no_member_is_not_ready() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    cluster.scale(0);
    cluster.obs.pools[0].pods.clear();
    let plans = cluster.settle();
    let ready = cluster.condition("Ready");
    assert_eq!(ready.status, "False", "{ready:?}");
    assert_eq!(ready.reason, "NoMembers");
    assert!(ready.message.contains("10 jobs"), "{}", ready.message);
    assert_ne!(plans.last().unwrap().status.phase.as_deref(), Some("Ready"));
}

#[test]
fn a_duplicate_key_names_both_entries_and_the_configmap_it_comes_from() {
    let mut spec = spec(vec!["stream:a".to_owned(), "stream:b".to_owned()]);
    spec.jobs_from = Some(JobsFrom {
        config_map_key_ref: Some(ConfigMapKeyRef {
            name: "streams".to_owned(),
            key: "config.yml".to_owned(),
        }),
        ..JobsFrom::default()
    });
    let source = JobSource::Text {
        name: "streams".to_owned(),
        key: "config.yml".to_owned(),
        text: "jobs: [stream:c, stream:b, '']\n".to_owned(),
    };
    let problem = job_list("demo", &spec, &source).unwrap_err();
    assert_eq!(problem.reason, "InvalidJobs");
    assert!(
        problem
            .message
            .contains("ConfigMap streams key config.yml jobs[1] \"stream:b\" repeats spec.jobs[1]"),
        "{}",
        problem.message
    );
    assert!(
        problem
            .message
            .contains("ConfigMap streams key config.yml jobs[2] \"\":"),
        "{}",
        problem.message
    );
    assert!(
        problem.message.contains("2 problems"),
        "{}",
        problem.message
    );
}

/// The jobs of `running` (what `holder`'s pod read when it started) that `plan` writes
/// into another member's slice.
fn granted_away(decision: &Decision, holder: &str, running: &[String]) -> Vec<String> {
    decision
        .operations
        .iter()
        .filter_map(|operation| match operation {
            Operation::WriteSlice { slice, .. } if slice.member != holder => Some(slice),
            _ => None,
        })
        .flat_map(|slice| slice.jobs.iter().map(|key| key.as_str().to_owned()))
        .filter(|job| running.contains(job))
        .collect()
}

fn restart_cluster(job_count: usize, replicas: u32) -> Cluster {
    let mut spec = spec(jobs(job_count));
    spec.reload = ReloadPolicy::Restart;
    // Jump hashing moves only what a change needs: adding a job revokes nothing.
    spec.strategy.type_ = StrategyType::Jump;
    let mut cluster = Cluster::new(spec, replicas);
    cluster.settle();
    cluster
}

#[test]
fn under_restart_an_older_revoke_whose_eviction_is_held_back_holds_back_a_newer_revisions_grants() {
    let mut cluster = restart_cluster(30, 3);
    let members = ["worker-0", "worker-1", "worker-2"];
    let running: BTreeMap<&str, Vec<String>> = members
        .iter()
        .map(|member| (*member, cluster.slice_of(member)))
        .collect();
    // Revision 2 revokes jobs from the three pods; a budget refuses every eviction, so
    // their applications keep what they read at start-up.
    cluster.scale(4);
    cluster.step_refusing_evictions();
    assert!(
        members
            .iter()
            .any(|member| cluster.obs.slices[*member].phase.as_deref() == Some("revoke")),
        "scaling 3 -> 4 revoked nothing"
    );
    // A newer revision is approved (one more job) while those evictions wait.
    cluster.obs.spec.jobs = jobs(31);
    for _ in 0..5 {
        let decision = cluster.step_refusing_evictions();
        for (member, jobs) in &running {
            let granted = granted_away(&decision, member, jobs);
            assert!(
                granted.is_empty(),
                "{granted:?} granted away while {member}'s pod still runs them"
            );
        }
    }
    assert_eq!(cluster.obs.status.current_revision, 3);
    // Once the budget allows, the pods are replaced one by one and the grants go out.
    cluster.settle();
    assert_eq!(all_jobs_once(&cluster), jobs(31));
}

#[test]
fn under_restart_a_failed_over_pod_without_a_sidecar_keeps_its_jobs_until_it_is_replaced() {
    let mut cluster = restart_cluster(30, 3);
    let running = cluster.slice_of("worker-1");
    // worker-1 turns NotReady; its application may well still run.
    cluster.obs.pools[0].pods.get_mut(&1).unwrap().ready = false;
    cluster.step_refusing_evictions();
    cluster.obs.now = t0() + SignedDuration::from_secs(301);
    let mut evicted = false;
    for pass in 0..5 {
        let decision = cluster.step_refusing_evictions();
        if pass == 0 {
            assert!(reasons(&decision).contains(&"MemberFailedOver"));
        }
        evicted |= decision.operations.iter().any(
            |operation| matches!(operation, Operation::Evict { pod, .. } if pod == "worker-1"),
        );
        let granted = granted_away(&decision, "worker-1", &running);
        assert!(
            granted.is_empty(),
            "{granted:?} granted away while the failed-over pod worker-1 still exists"
        );
    }
    assert!(evicted, "the failed-over pod was never restarted");
    // Its pod is replaced (still NotReady): the jobs move.
    let pod = cluster.obs.pools[0].pods.get_mut(&1).unwrap();
    pod.uid = format!("{}-next", pod.uid);
    for _ in 0..10 {
        cluster.step();
    }
    assert_eq!(all_jobs_once(&cluster), jobs(30));
    assert!(cluster.slice_of("worker-1").is_empty());
}

#[test]
fn a_pod_replaced_between_the_read_and_the_revoke_write_is_restarted_before_its_jobs_move() {
    let mut cluster = restart_cluster(30, 3);
    let running: BTreeMap<String, Vec<String>> = ["worker-0", "worker-1", "worker-2"]
        .iter()
        .map(|member| (member.to_string(), cluster.slice_of(member)))
        .collect();
    cluster.scale(4);
    let planned = decide(&cluster.obs);
    let revoked = planned
        .operations
        .iter()
        .rev()
        .find_map(|operation| match operation {
            Operation::WriteSlice {
                slice,
                phase: "revoke",
                ..
            } => Some(slice.member.clone()),
            _ => None,
        })
        .expect("scaling 3 -> 4 revokes");
    // Between the controller's read and its write, the pod is replaced; the new pod
    // starts and reads the slice before the revoke lands.
    let ordinal: u32 = revoked.rsplit_once('-').unwrap().1.parse().unwrap();
    let pod = cluster.obs.pools[0].pods.get_mut(&ordinal).unwrap();
    pod.uid = format!("{}-raced", pod.uid);
    let raced_uid = pod.uid.clone();
    apply_in_memory(&mut cluster.obs, &planned);
    cluster.obs.status = planned.status.clone();
    let mut raced_restarted = false;
    for _ in 0..20 {
        let decision = cluster.step();
        let granted = granted_away(&decision, &revoked, &running[&revoked]);
        assert!(
            granted.is_empty() || raced_restarted,
            "{granted:?} granted away while {revoked}'s pod (started before the revoke) runs them"
        );
        raced_restarted |= decision.operations.iter().any(|operation| {
            matches!(operation, Operation::Evict { pod, uid } if *pod == revoked && *uid == raced_uid)
        });
        if decision.operations.is_empty() {
            break;
        }
    }
    assert!(
        raced_restarted,
        "{revoked} (uid {raced_uid}) never restarted"
    );
    assert_eq!(all_jobs_once(&cluster), jobs(30));
}

#[test]
fn a_swarm_whose_members_are_all_failed_over_is_not_ready() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    cluster.settle();
    for pod in cluster.obs.pools[0].pods.values_mut() {
        pod.ready = false;
    }
    cluster.step();
    cluster.obs.now = t0() + SignedDuration::from_secs(301);
    for _ in 0..5 {
        cluster.step();
    }
    assert!(
        cluster
            .obs
            .status
            .members
            .iter()
            .all(|member| member.failed_over)
    );
    let ready = cluster.condition("Ready");
    assert_eq!(ready.status, "False", "{ready:?}");
    assert_ne!(cluster.obs.status.phase.as_deref(), Some("Ready"));
}

#[test]
fn a_standing_rollback_annotation_holds_back_every_new_revision_until_it_is_removed() {
    let mut cluster = manual(10, 2);
    cluster.settle();
    cluster.approve_pending();
    cluster.settle();
    assert_eq!(cluster.obs.status.current_revision, 1);
    cluster
        .obs
        .annotations
        .insert(ANNOTATION_ROLLBACK_TO.to_owned(), "1".to_owned());
    cluster.obs.spec.jobs = jobs(14);
    let plans = cluster.settle();
    assert!(
        plans
            .iter()
            .all(|decision| decision.applied_revision.is_none())
    );
    assert_eq!(cluster.obs.status.pending_revision, None);
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "RollbackAnnotationRefused", "{degraded:?}");
    assert!(
        degraded.message.contains("kubectl shoal undo demo"),
        "{}",
        degraded.message
    );
    assert_eq!(all_jobs_once(&cluster), jobs(10));
    // Removed: the change waits for approval like any other; nothing applies by itself.
    cluster.obs.annotations.remove(ANNOTATION_ROLLBACK_TO);
    let plans = cluster.settle();
    assert!(
        plans
            .iter()
            .all(|decision| decision.applied_revision.is_none())
    );
    assert_eq!(all_jobs_once(&cluster), jobs(10));
    assert_eq!(cluster.condition("AwaitingApproval").status, "True");
    assert_eq!(cluster.condition("Degraded").status, "False");
}

/// A plan `name` whose status (as the controller wrote it) places `entries`
/// (instance, member, deployment, state) and records `images` (revision, nginx image).
fn plan_placing(
    name: &str,
    entries: &[(&str, &str, u64, &str)],
    images: &[(u64, &str)],
) -> PlanForDelivery {
    let status = serde_json::json!({
        "instances": entries
            .iter()
            .map(|(instance, member, deployment, state)| serde_json::json!({
                "name": instance, "member": member, "deployment": deployment, "state": state,
            }))
            .collect::<Vec<_>>(),
        "deployments": images
            .iter()
            .map(|(revision, image)| serde_json::json!({
                "revision": revision,
                "hash": format!("h{revision}"),
                "payloads": [
                    {"application": "nginx", "coordinates": {"image": image, "port": "80"}},
                    {"application": "exporter", "coordinates": {"version": "2"}},
                ],
                "created": "2026-01-01T00:00:00Z",
            }))
            .collect::<Vec<_>>(),
    });
    PlanForDelivery {
        name: name.to_owned(),
        status: Ok(serde_json::from_value(status).expect("a valid plan status")),
    }
}

fn held_slice(cluster: &Cluster, member: &str) -> Slice {
    let object = cluster.obs.slices.get(member).expect("slice exists");
    parse_slice(object.text.as_deref().expect("slice text")).expect("a valid slice")
}

/// The instance-only writes of a plan, by member.
fn refreshes(decision: &Decision) -> BTreeMap<String, (&Slice, &'static str, &str)> {
    decision
        .operations
        .iter()
        .filter_map(|operation| match operation {
            Operation::WriteSlice {
                slice,
                phase,
                written_for_uid,
                instances_only: true,
                ..
            } => Some((
                slice.member.clone(),
                (slice, *phase, written_for_uid.as_str()),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn delivered_instances_carry_their_revisions_ports_and_a_port_change_rewrites_the_slice() {
    let mut cluster = Cluster::new(spec(jobs(3)), 1);
    cluster.settle();
    let with_ports = |ports: serde_json::Value| {
        let mut plan = plan_placing("web", &[("web-0", "worker-0", 1, "pending")], &[(1, "n:1")]);
        if let Ok(status) = plan.status.as_mut() {
            status.deployments[0].ports = serde_json::from_value(serde_json::json!([
                {"application": "nginx", "ports": ports},
                // An application with ports and no payload is delivered too.
                {"application": "dns", "ports": [{"protocol": "UDP", "port": 53}]},
            ]))
            .expect("ports");
        }
        plan
    };
    cluster.obs.plans = Ok(vec![with_ports(
        serde_json::json!([{"port": 8080}, {"protocol": "TCP", "port": 80}]),
    )]);
    cluster.settle();
    let slice = held_slice(&cluster, "worker-0");
    let applications: Vec<(&str, Vec<String>)> = slice.instances[0]
        .applications
        .iter()
        .map(|a| {
            (
                a.name.as_str(),
                a.ports.iter().map(ToString::to_string).collect(),
            )
        })
        .collect();
    assert_eq!(
        applications,
        [
            ("dns", vec!["UDP/53".to_owned()]),
            ("exporter", vec![]),
            ("nginx", vec!["TCP/80".to_owned(), "TCP/8080".to_owned()]),
        ]
    );
    let before = slice.hash;
    cluster.obs.plans = Ok(vec![with_ports(serde_json::json!([{"port": 80}]))]);
    let decision = cluster.step();
    assert!(
        refreshes(&decision).contains_key("worker-0"),
        "{:?}",
        decision.operations
    );
    assert_ne!(held_slice(&cluster, "worker-0").hash, before);
}

#[test]
fn delivered_plan_instances_reach_their_members_slices_with_their_revisions_coordinates() {
    let mut cluster = Cluster::new(spec(jobs(9)), 3);
    cluster.settle();
    let jobs_before = cluster.slice_of("worker-0");
    let revision_before = held_slice(&cluster, "worker-0").revision;
    cluster.obs.plans = Ok(vec![plan_placing(
        "web",
        &[
            ("web-0", "worker-0", 1, "pending"),
            ("web-1", "worker-1", 2, "installed"),
            ("web-2", "worker-2", 2, "removing"),
        ],
        &[(1, "nginx:1"), (2, "nginx:2")],
    )]);
    let decision = cluster.step();
    let written = refreshes(&decision);
    assert_eq!(
        written.keys().map(String::as_str).collect::<Vec<_>>(),
        ["worker-0", "worker-1"],
        "only members whose instances changed are written: {:?}",
        decision.operations
    );
    assert_eq!(
        decision.applied_revision, None,
        "instances are not a Swarm revision"
    );
    assert!(decision.events.is_empty(), "{:?}", decision.events);
    let slice = held_slice(&cluster, "worker-0");
    assert_eq!(slice.revision, revision_before, "the revision stays");
    assert_eq!(cluster.slice_of("worker-0"), jobs_before, "the jobs stay");
    assert_eq!(
        slice.hash,
        shoal_core::slice::slice_hash(&slice.jobs, &slice.instances)
    );
    assert_eq!(slice.instances.len(), 1);
    let web0 = &slice.instances[0];
    assert_eq!(
        (web0.name.as_str(), web0.plan.as_str(), web0.deployment),
        ("web-0", "web", 1)
    );
    assert_eq!(
        web0.applications
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>(),
        ["exporter", "nginx"]
    );
    assert_eq!(web0.applications[1].coordinates["image"], "nginx:1");
    let web1 = &held_slice(&cluster, "worker-1").instances[0];
    assert_eq!((web1.name.as_str(), web1.deployment), ("web-1", 2));
    assert_eq!(web1.applications[1].coordinates["image"], "nginx:2");
    assert!(
        held_slice(&cluster, "worker-2").instances.is_empty(),
        "a removing entry is not delivered"
    );
    // The status shows the slice as written, and nothing more is to be done.
    let status0 = cluster
        .obs
        .status
        .members
        .iter()
        .find(|m| m.name == "worker-0")
        .unwrap();
    assert_eq!(status0.slice_hash.as_deref(), Some(slice.hash.as_str()));
    let plans = cluster.settle();
    assert!(plans.iter().all(|decision| refreshes(decision).is_empty()));
    assert_eq!(cluster.condition("Ready").status, "True");

    // The entry leaves the slice when it stops being delivered (removing).
    cluster.obs.plans = Ok(vec![plan_placing(
        "web",
        &[
            ("web-0", "worker-0", 1, "removing"),
            ("web-1", "worker-1", 2, "installed"),
        ],
        &[(1, "nginx:1"), (2, "nginx:2")],
    )]);
    let decision = cluster.step();
    assert_eq!(
        refreshes(&decision).keys().collect::<Vec<_>>(),
        ["worker-0"]
    );
    assert!(held_slice(&cluster, "worker-0").instances.is_empty());
    assert_eq!(
        held_slice(&cluster, "worker-0").hash,
        shoal_core::slice::canonical_hash(&held_slice(&cluster, "worker-0").jobs),
        "a slice without instances hashes as before"
    );
}

#[test]
fn an_instance_whose_revision_has_no_record_is_not_delivered_and_degrades_the_swarm_naming_it() {
    let mut cluster = Cluster::new(spec(jobs(4)), 2);
    cluster.settle();
    cluster.obs.plans = Ok(vec![plan_placing(
        "web",
        &[
            ("web-0", "worker-0", 1, "installed"),
            ("web-1", "worker-1", 3, "pending"),
        ],
        &[(1, "nginx:1")],
    )]);
    let decision = cluster.step();
    assert_eq!(
        refreshes(&decision).keys().collect::<Vec<_>>(),
        ["worker-0"]
    );
    assert!(held_slice(&cluster, "worker-1").instances.is_empty());
    let degraded = cluster.condition("Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "InstanceNotDelivered")
    );
    assert!(
        degraded
            .message
            .contains("DeploymentPlan web: instance web-1 on member worker-1")
            && degraded.message.contains("revision 3 has no record"),
        "{}",
        degraded.message
    );
    assert_eq!(
        decision.events.iter().filter(|e| e.warning).count(),
        1,
        "one Warning on the transition: {:?}",
        decision.events
    );
    assert!(cluster.step().events.is_empty(), "no second Warning");
}

#[test]
fn a_plan_status_written_by_someone_else_delivers_nothing_and_two_entries_of_one_name_on_one_member_deliver_one()
 {
    let mut cluster = Cluster::new(spec(jobs(4)), 2);
    cluster.settle();
    let mut forged = plan_placing(
        "evil",
        &[("evil-0", "worker-1", 1, "installed")],
        &[(1, "x")],
    );
    forged.status =
        Err("status.instances or status.deployments was written by kubectl-edit".to_owned());
    cluster.obs.plans = Ok(vec![
        plan_placing(
            "web",
            &[
                ("web-0", "worker-0", 1, "installed"),
                ("web-0", "worker-0", 2, "pending"),
                // A relocation under way: the same instance on another member.
                ("web-0", "worker-1", 2, "pending"),
            ],
            &[(1, "nginx:1"), (2, "nginx:2")],
        ),
        forged,
    ]);
    cluster.step();
    let on0 = held_slice(&cluster, "worker-0").instances;
    assert_eq!(on0.len(), 1);
    assert_eq!(on0[0].deployment, 1, "the first entry is kept");
    let on1 = held_slice(&cluster, "worker-1").instances;
    assert_eq!(
        on1.iter()
            .map(|i| (i.name.as_str(), i.deployment))
            .collect::<Vec<_>>(),
        [("web-0", 2)],
        "nothing of the untrusted plan"
    );
    let message = cluster.condition("Degraded").message;
    assert!(
        message.contains("DeploymentPlan evil: its instances are not delivered"),
        "{message}"
    );
    assert!(
        message.contains("web-0 is listed twice on member worker-0"),
        "{message}"
    );
}

#[test]
fn instance_changes_reach_a_revoked_member_at_once_keeping_its_revoke_standing_until_acknowledged()
{
    let mut cluster = Cluster::new(spec(jobs(30)), 3);
    cluster.settle();
    let leases = ["worker-0", "worker-1", "worker-2"]
        .map(|member| (member.to_owned(), sidecar_lease(member, Some(1), None, 30)));
    cluster.obs.leases.extend(leases);
    cluster.scale(4);
    cluster.step();
    let revoked = held_slice(&cluster, "worker-0");
    assert_eq!(
        cluster.obs.slices["worker-0"].phase.as_deref(),
        Some("revoke")
    );
    let written_for = cluster.obs.slices["worker-0"].written_for_uid.clone();
    // Meanwhile the plan places an instance on the revoked member and one on the new one.
    cluster.obs.plans = Ok(vec![plan_placing(
        "web",
        &[
            ("web-0", "worker-0", 1, "pending"),
            ("web-1", "worker-3", 1, "pending"),
        ],
        &[(1, "nginx:1")],
    )]);
    let decision = cluster.step();
    let written = refreshes(&decision);
    let (slice, phase, uid) = written.get("worker-0").expect("worker-0 refreshed at once");
    assert_eq!(*phase, "revoke", "the refresh keeps the revoke standing");
    assert_eq!(
        Some(uid.to_string()),
        written_for,
        "and the pod it answers for"
    );
    assert_eq!(
        (slice.revision, &slice.jobs),
        (revoked.revision, &revoked.jobs)
    );
    assert!(
        !decision.operations.iter().any(|op| matches!(
            op,
            Operation::WriteSlice {
                phase: "grant",
                instances_only: false,
                ..
            }
        )),
        "no job granted before the revokes settle: {:?}",
        decision.operations
    );
    // An acknowledgement of the slice as it was before the refresh settles nothing.
    let old_hash = revoked.hash.clone();
    let lease = cluster.obs.leases.get_mut("worker-0").unwrap();
    lease.acked_hash = Some(old_hash);
    lease.acked_revision = Some(2);
    for member in ["worker-1", "worker-2"] {
        let hash = held_slice(&cluster, member).hash;
        let lease = cluster.obs.leases.get_mut(member).unwrap();
        lease.acked_hash = Some(hash);
        lease.acked_revision = Some(2);
    }
    let decision = cluster.step();
    assert!(
        !decision.operations.iter().any(|op| matches!(
            op,
            Operation::WriteSlice {
                phase: "grant",
                instances_only: false,
                ..
            }
        )),
        "granted on an acknowledgement of a slice no longer written: {:?}",
        decision.operations
    );
    // Acknowledging what was written settles it; the new member's grant carries its instance.
    let hash = held_slice(&cluster, "worker-0").hash;
    cluster.obs.leases.get_mut("worker-0").unwrap().acked_hash = Some(hash);
    cluster.settle();
    let new_member = held_slice(&cluster, "worker-3");
    assert!(!new_member.jobs.is_empty());
    assert_eq!(new_member.instances.len(), 1);
    assert_eq!(new_member.instances[0].name, "web-1");
    assert_eq!(all_jobs_once(&cluster), jobs(30));
}

#[test]
fn under_restart_an_instance_change_restarts_no_pod() {
    let mut swarm = spec(jobs(6));
    swarm.reload = ReloadPolicy::Restart;
    let mut cluster = Cluster::new(swarm, 2);
    cluster.settle();
    cluster.evicted.clear();
    cluster.obs.plans = Ok(vec![plan_placing(
        "web",
        &[("web-0", "worker-1", 1, "pending")],
        &[(1, "nginx:1")],
    )]);
    let plans = cluster.settle();
    assert!(plans.iter().any(|decision| !refreshes(decision).is_empty()));
    assert!(
        cluster.evicted.is_empty(),
        "restarted {:?}",
        cluster.evicted
    );
    assert_eq!(held_slice(&cluster, "worker-1").instances.len(), 1);
}

/// A Swarm with the `sticky` strategy, `replicas` members and the 27 seed streams.
fn sticky_cluster(replicas: u32, policy: ApprovalPolicy) -> Cluster {
    let mut spec = spec(
        shoal_core::seed::SEED_STREAMS
            .iter()
            .map(|key| (*key).to_owned())
            .collect(),
    );
    spec.strategy.type_ = StrategyType::Sticky;
    spec.approval.policy = policy;
    Cluster::new(spec, replicas)
}

/// The assignment the slices in the cluster hold now.
fn slices_in_force(cluster: &Cluster) -> Assignment {
    Assignment::from_slices(cluster.obs.slices.keys().map(|member| {
        let (pool, ordinal) = member.rsplit_once('-').unwrap();
        (
            MemberId::new(pool, ordinal.parse().unwrap()),
            JobSet::parse(cluster.slice_of(member)).unwrap(),
        )
    }))
    .unwrap()
}

#[test]
fn a_sticky_revision_is_read_back_from_its_history_record_after_a_restart() {
    let mut cluster = sticky_cluster(3, ApprovalPolicy::Automatic);
    cluster.settle();
    cluster.scale(4);
    cluster.settle();
    let record = cluster.obs.history[&cluster.obs.status.current_revision].clone();
    assert_eq!(record.owners.len(), 27, "{record:?}");
    // The record holds the assignment the slices carry, which a fresh computation from
    // the inputs alone would not give (it depends on the revision before).
    let recorded = replay(&record).unwrap();
    assert_eq!(
        recorded.member_jobs(),
        slices_in_force(&cluster).member_jobs()
    );
    let members: Vec<Member> = (0..4)
        .map(|ordinal| Member::new("worker", ordinal))
        .collect();
    let from_scratch = assign(recorded.jobs(), &members, &Strategy::Sticky).unwrap();
    assert_ne!(from_scratch.member_jobs(), recorded.member_jobs());
    // A restarted controller plans from the cluster alone: nothing to do, and the
    // record survives its JSON round trip.
    let text = serde_json::to_string(record.as_ref()).unwrap();
    assert_eq!(
        serde_json::from_str::<RevisionRecord>(&text).unwrap(),
        *record
    );
    let restarted = decide(&cluster.obs.clone());
    assert!(
        restarted.operations.is_empty(),
        "{:?}",
        restarted.operations
    );
    assert_eq!(
        restarted.status.current_revision,
        cluster.obs.status.current_revision
    );
}

#[test]
fn a_sticky_record_with_a_damaged_assignment_is_reported_and_the_slices_stand() {
    let mut cluster = sticky_cluster(3, ApprovalPolicy::Automatic);
    cluster.settle();
    let before = slices_in_force(&cluster).member_jobs();
    for record in cluster.obs.history.values_mut() {
        std::sync::Arc::make_mut(record).owners[0] = 77;
    }
    let decision = cluster.step();
    assert!(
        decision
            .operations
            .iter()
            .all(|operation| !matches!(operation, Operation::WriteSlice { .. })),
        "{:?}",
        decision.operations
    );
    let degraded = previous_condition(&decision.status, "Degraded").unwrap();
    assert_eq!(degraded.reason, "HistoryInvalid");
    assert!(
        degraded
            .message
            .contains("revision 1: the recorded sticky assignment is inconsistent: job"),
        "{}",
        degraded.message
    );
    assert_eq!(slices_in_force(&cluster).member_jobs(), before);
}

#[test]
fn every_sticky_revision_of_the_sandbox_walk_moves_exactly_the_lower_bound() {
    // 27 jobs, 2 → 3 → 4 → 3 members under Manual approval.
    let mut cluster = sticky_cluster(2, ApprovalPolicy::Manual);
    cluster.settle();
    cluster.approve_pending();
    cluster.settle();
    assert_eq!(cluster.obs.status.current_revision, 1);
    let mut moved = Vec::new();
    for replicas in [3, 4, 3] {
        cluster.scale(replicas);
        let before = slices_in_force(&cluster);
        let decision = cluster.step();
        let summary = match &decision.status.pending_revision {
            Some(pending) => {
                let summary = pending.summary.clone();
                cluster.approve_pending();
                summary
            }
            // Re-homing the jobs of a member that left applies at once.
            None => decision.proposal.clone().expect("a revision").summary,
        };
        assert_eq!(summary.jobs_moved, summary.lower_bound, "to {replicas}");
        cluster.settle();
        let after = slices_in_force(&cluster);
        let change = shoal_core::diff(&before, &after);
        assert_eq!(
            change.moved.len() as u64,
            summary.jobs_moved,
            "to {replicas}"
        );
        assert_eq!(
            change.lower_bound as u64, summary.lower_bound,
            "to {replicas}"
        );
        moved.push(summary.jobs_moved);
    }
    assert_eq!(moved[..2], [9, 6]);
    assert!(moved[2] == 6 || moved[2] == 7, "{moved:?}");
}

#[test]
fn switching_from_bounded_to_sticky_moves_only_what_perfect_balance_forces() {
    // Both outcomes occur: bounded already balanced (nothing moves), and bounded with a
    // member under the floor (exactly the bound moves).
    let mut outcomes = BTreeSet::new();
    for (job_count, replicas) in [(30, 3), (30, 4), (27, 4), (100, 7)] {
        let mut swarm = spec(jobs(job_count));
        swarm.strategy.type_ = StrategyType::Bounded;
        let mut cluster = Cluster::new(swarm, replicas);
        cluster.settle();
        let bounded = slices_in_force(&cluster);
        let (floor, ceil) = (
            job_count / replicas as usize,
            job_count.div_ceil(replicas as usize),
        );
        let (min, max) = bounded.load_range();
        cluster.obs.spec.strategy.type_ = StrategyType::Sticky;
        let plans = cluster.settle();
        let sticky = slices_in_force(&cluster);
        let moved = shoal_core::diff(&bounded, &sticky).moved.len();
        assert_eq!(
            moved,
            shoal_core::diff::lower_bound(&bounded, &sticky, floor, ceil),
            "{job_count} jobs over {replicas}"
        );
        outcomes.insert(moved > 0);
        if floor <= min && max <= ceil {
            // Already perfectly balanced: the switch is no new revision at all.
            assert_eq!(moved, 0);
            assert!(
                plans
                    .iter()
                    .all(|decision| decision.applied_revision.is_none())
            );
        }
    }
    assert_eq!(outcomes, BTreeSet::from([false, true]));
}

#[test]
fn plans_that_cannot_be_read_leave_the_instances_in_the_slices_as_they_are() {
    let mut cluster = Cluster::new(spec(jobs(4)), 2);
    cluster.settle();
    cluster.obs.plans = Ok(vec![plan_placing(
        "web",
        &[("web-0", "worker-0", 1, "installed")],
        &[(1, "nginx:1")],
    )]);
    cluster.settle();
    let held = held_slice(&cluster, "worker-0");
    cluster.obs.plans = Err("listing DeploymentPlans was refused: forbidden".to_owned());
    let decision = cluster.step();
    assert!(refreshes(&decision).is_empty(), "{:?}", decision.operations);
    assert_eq!(held_slice(&cluster, "worker-0"), held);
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "InstanceNotDelivered");
    assert!(
        degraded.message.contains("refused: forbidden"),
        "{}",
        degraded.message
    );
}

#[test]
fn a_plan_whose_record_someone_else_edited_keeps_the_instances_its_members_hold() {
    let mut cluster = Cluster::new(spec(jobs(4)), 2);
    cluster.settle();
    cluster.obs.plans = Ok(vec![plan_placing(
        "web",
        &[
            ("web-0", "worker-0", 1, "installed"),
            ("web-1", "worker-1", 1, "installed"),
        ],
        &[(1, "nginx:1")],
    )]);
    cluster.step();
    let held = |cluster: &Cluster| {
        ["worker-0", "worker-1"].map(|member| {
            held_slice(cluster, member)
                .instances
                .iter()
                .map(|i| (i.name.clone(), i.deployment))
                .collect::<Vec<_>>()
        })
    };
    let before = held(&cluster);
    assert_eq!(before[0], [("web-0".to_owned(), 1)]);
    // Someone moves web-1 onto worker-0 by editing the record.
    let mut edited = plan_placing(
        "web",
        &[
            ("web-0", "worker-0", 1, "installed"),
            ("web-1", "worker-0", 1, "installed"),
        ],
        &[(1, "nginx:1")],
    );
    edited.status = Err("status.instances was written by intruder".to_owned());
    cluster.obs.plans = Ok(vec![edited]);
    cluster.step();
    assert_eq!(held(&cluster), before, "nothing moves, nothing stops");
    let message = cluster.condition("Degraded").message;
    assert!(
        message.contains("the members keep the ones they hold"),
        "{message}"
    );
}

/// Who the history record written by `plan` for `revision` says approved it.
fn recorded_approver(
    decision: &Decision,
    revision: u64,
) -> Option<crate::api::approval_record::ApprovalRecord> {
    decision
        .operations
        .iter()
        .find_map(|operation| match operation {
            Operation::WriteRevision(record) if record.revision == revision => {
                record.approval.clone()
            }
            _ => None,
        })
}

#[test]
fn a_revision_approved_by_annotation_records_the_named_approver_verified_only_under_the_policy() {
    for policy_in_force in [true, false] {
        let mut cluster = manual(20, 2);
        cluster.step();
        cluster.approve_pending();
        cluster
            .obs
            .annotations
            .insert(ANNOTATION_APPROVED_BY.to_owned(), "alice".to_owned());
        cluster.obs.approved_by_policy = policy_in_force;
        let approved = cluster.step();
        assert_eq!(approved.applied_revision, Some(1));
        let approver = recorded_approver(&approved, 1).expect("the record names its approver");
        assert_eq!(approver.by, "alice");
        assert_eq!(approver.verified, policy_in_force);
        assert_eq!(approver.at, t0().to_string());
    }
}

#[test]
fn a_revision_approved_by_an_annotation_naming_nobody_records_an_unknown_approver() {
    let mut cluster = manual(20, 2);
    cluster.step();
    cluster.approve_pending();
    cluster.obs.approved_by_policy = true;
    let approver = recorded_approver(&cluster.step(), 1).expect("an approver");
    assert_eq!(approver.by, crate::api::approval_record::UNNAMED_APPROVER);
    assert!(!approver.verified);
}

#[test]
fn automatic_and_budget_revisions_record_the_controller_and_its_policy_as_approver() {
    let mut cluster = Cluster::new(spec(jobs(10)), 2);
    let first = cluster.step();
    let approver = recorded_approver(&first, 1).expect("an approver");
    assert_eq!(approver.by, "shoal-controller (Automatic)");
    assert!(approver.verified);

    let mut budget = spec(jobs(30));
    budget.approval = ApprovalSpec {
        policy: ApprovalPolicy::Budget,
        max_disrupted_members: None,
        max_moved_jobs: Some(10),
        ..ApprovalSpec::default()
    };
    let mut cluster = Cluster::new(budget, 3);
    cluster.settle();
    cluster.scale(4);
    let scaled = cluster.step();
    assert_eq!(scaled.applied_revision, Some(2));
    assert_eq!(
        recorded_approver(&scaled, 2).map(|approver| approver.by),
        Some("shoal-controller (Budget)".to_owned())
    );
}

// Weighted and dedicated jobs.

fn weighted_source(text: &str) -> (SwarmSpec, JobSource) {
    let mut spec = spec(Vec::new());
    spec.jobs_from = Some(JobsFrom {
        config_map_key_ref: Some(ConfigMapKeyRef {
            name: "streams".to_owned(),
            key: "config.yml".to_owned(),
        }),
        ..JobsFrom::default()
    });
    let source = JobSource::Text {
        name: "streams".to_owned(),
        key: "config.yml".to_owned(),
        text: text.to_owned(),
    };
    (spec, source)
}

#[test]
fn a_job_list_document_entry_may_carry_a_weight_and_dedication() {
    let (spec, source) =
        weighted_source("jobs:\n- a\n- {key: b, weight: 5}\n- key: c\n  dedicated: true\n");
    let (jobs, settings) = inputs::job_list_and_settings("demo", &spec, &source).unwrap();
    assert_eq!(jobs.len(), 3);
    assert_eq!(settings.get("a"), shoal_core::JobSetting::default());
    assert_eq!(settings.get("b").weight, 5);
    assert!(settings.get("c").dedicated);
    assert_eq!(settings.get("c").weight, 1);
}

#[test]
fn bad_weights_and_settings_for_unlisted_jobs_are_refused_naming_each_entry() {
    let (mut spec, source) = weighted_source(
        "jobs: [a, {key: b, weight: 0}, {key: c, weight: 2000000}, {key: d, weight: 3}]\n",
    );
    spec.job_settings.insert(
        "ghost".to_owned(),
        crate::api::swarm::JobSettingSpec {
            weight: Some(2),
            dedicated: None,
        },
    );
    spec.job_settings.insert(
        "d".to_owned(),
        crate::api::swarm::JobSettingSpec {
            weight: None,
            dedicated: Some(true),
        },
    );
    let problem = inputs::job_list_and_settings("demo", &spec, &source).unwrap_err();
    assert_eq!(problem.reason, "InvalidJobSettings");
    for expected in [
        "Swarm demo: invalid job settings (4 problems)",
        "ConfigMap streams key config.yml jobs[1] job \"b\": weight 0 is out of range 1..=1000000",
        "ConfigMap streams key config.yml jobs[2] job \"c\": weight 2000000 is out of range",
        "spec.jobSettings[\"ghost\"] names job \"ghost\", which is not in the job list",
        "ConfigMap streams key config.yml jobs[3] job \"d\": the job already has a setting",
    ] {
        assert!(
            problem.message.contains(expected),
            "{expected:?} in {}",
            problem.message
        );
    }
}

#[test]
fn a_job_list_entry_that_is_neither_a_key_nor_a_setting_is_refused_naming_the_configmap() {
    let (spec, source) = weighted_source("jobs: [a, {key: b, cost: 5}]\n");
    let problem = inputs::job_list_and_settings("demo", &spec, &source).unwrap_err();
    assert_eq!(problem.reason, "JobConfigMapInvalid");
    assert!(
        problem.message.contains("ConfigMap streams key config.yml")
            && problem.message.contains("cost"),
        "{}",
        problem.message
    );
}

#[test]
fn weights_under_a_stateless_strategy_are_refused_and_the_slices_in_force_stay() {
    let mut swarm = spec(jobs(10));
    swarm.strategy.type_ = StrategyType::Bounded;
    let mut cluster = Cluster::new(swarm, 2);
    cluster.settle();
    let before = slices_in_force(&cluster).member_jobs();
    cluster.obs.spec.job_settings.insert(
        "stream:003".to_owned(),
        crate::api::swarm::JobSettingSpec {
            weight: Some(4),
            dedicated: None,
        },
    );
    cluster.obs.generation = Some(2);
    let decision = cluster.step();
    assert!(decision.operations.is_empty(), "{:?}", decision.operations);
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.warning && e.reason == "InvalidJobSettings")
    );
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "InvalidJobSettings", "{degraded:?}");
    assert!(
        degraded
            .message
            .contains("Swarm demo: strategy bounded cannot honour job weights"),
        "{}",
        degraded.message
    );
    assert_eq!(slices_in_force(&cluster).member_jobs(), before);
}

#[test]
fn a_dedicated_job_gets_a_member_of_its_own_and_releases_it_when_removed() {
    let mut spec = spec(jobs(9));
    spec.strategy.type_ = StrategyType::Sticky;
    spec.job_settings.insert(
        "stream:000".to_owned(),
        crate::api::swarm::JobSettingSpec {
            weight: None,
            dedicated: Some(true),
        },
    );
    spec.job_settings.insert(
        "stream:001".to_owned(),
        crate::api::swarm::JobSettingSpec {
            weight: Some(2),
            dedicated: None,
        },
    );
    let mut cluster = Cluster::new(spec, 3);
    cluster.settle();
    let holder = slices_in_force(&cluster)
        .owner_of("stream:000")
        .unwrap()
        .pod_name();
    assert_eq!(cluster.slice_of(&holder), vec!["stream:000".to_owned()]);
    // The other two share weight 2 + 7 = 9: each within T ± w_max = 4.5 ± 2.
    for member in ["worker-0", "worker-1", "worker-2"] {
        let weight: usize = cluster
            .slice_of(member)
            .iter()
            .map(|key| if key == "stream:001" { 2 } else { 1 })
            .sum();
        assert!(
            member == holder || (3..=6).contains(&weight),
            "{member}: {weight}"
        );
    }
    // The history record keeps the settings it was computed with, and a restarted
    // controller plans nothing.
    let record = &cluster.obs.history[&cluster.obs.status.current_revision];
    assert!(
        record.job_settings.get("stream:000").dedicated,
        "{record:?}"
    );
    assert_eq!(record.job_settings.get("stream:001").weight, 2);
    let restarted = decide(&cluster.obs.clone());
    assert!(
        restarted.operations.is_empty(),
        "{:?}",
        restarted.operations
    );

    // The job goes: its member takes shared jobs again (8 jobs of weight 9 over
    // three: T = 3, w_max = 2, so every member holds at least weight 1).
    cluster.obs.spec.jobs.retain(|key| key != "stream:000");
    cluster.obs.spec.job_settings.remove("stream:000");
    cluster.obs.generation = Some(2);
    cluster.settle();
    assert!(
        !cluster.slice_of(&holder).is_empty(),
        "{holder} was not released"
    );
    assert!(!cluster.slice_of(&holder).contains(&"stream:000".to_owned()));
}

#[test]
fn a_pending_weighted_revision_reports_the_weight_it_moves() {
    // 12 jobs, one of weight 3: 14 over 2 members, then 3 (T = 4.67, w_max = 3).
    let mut spec = spec(jobs(12));
    spec.strategy.type_ = StrategyType::Sticky;
    spec.approval.policy = ApprovalPolicy::Manual;
    spec.job_settings.insert(
        "stream:002".to_owned(),
        crate::api::swarm::JobSettingSpec {
            weight: Some(3),
            dedicated: None,
        },
    );
    let mut cluster = Cluster::new(spec, 2);
    cluster.settle();
    cluster.approve_pending();
    cluster.settle();
    cluster.scale(3);
    cluster.settle();
    let pending = cluster
        .obs
        .status
        .pending_revision
        .clone()
        .expect("scaling up waits");
    assert!(pending.summary.jobs_moved > 0, "{pending:?}");
    assert!(
        cluster
            .obs
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "AwaitingApproval" && c.status == "True")
    );
    let before = slices_in_force(&cluster);
    cluster.approve_pending();
    cluster.settle();
    let change = shoal_core::diff(&before, &slices_in_force(&cluster));
    let weight: u64 = change
        .moved
        .iter()
        .map(|moved| {
            if moved.key.as_str() == "stream:002" {
                3
            } else {
                1
            }
        })
        .sum();
    assert_eq!(pending.summary.jobs_moved, change.moved.len() as u64);
    assert_eq!(pending.summary.weight_moved, Some(weight), "{pending:?}");
}

mod cordon;
mod deployment_pools;
mod pools;

/// A daily maintenance window at 02:00 UTC for an hour; the fixture's time
/// (2026-01-01T00:00:00Z) is outside it.
fn nightly() -> Vec<crate::api::swarm::MaintenanceWindow> {
    vec![crate::api::swarm::MaintenanceWindow {
        start: "0 2 * * *".to_owned(),
        duration: "1h".to_owned(),
        time_zone: None,
    }]
}

fn at(text: &str) -> Timestamp {
    text.parse().expect("a time")
}

#[test]
fn an_approved_revision_waits_for_a_maintenance_window_and_starts_at_its_opening() {
    let mut spec = spec(jobs(20));
    spec.approval.windows = nightly();
    let mut cluster = Cluster::new(spec, 2);
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None);
    assert!(
        cluster.obs.slices.is_empty(),
        "nothing written while closed"
    );
    let status = &cluster.obs.status;
    assert_eq!(status.phase.as_deref(), Some("WaitingForWindow"));
    assert_eq!(status.next_window.as_deref(), Some("2026-01-01T02:00:00Z"));
    assert!(
        status.pending_revision.is_some(),
        "kubectl shoal diff shows it"
    );
    let waiting = cluster.condition("WaitingForWindow");
    assert_eq!(waiting.status, "True");
    assert!(
        waiting.message.contains("2026-01-01T02:00:00Z")
            && waiting
                .message
                .contains("window 1 (\"0 2 * * *\" for 1h in UTC)"),
        "{}",
        waiting.message
    );
    assert_eq!(cluster.condition("AwaitingApproval").status, "False");
    assert_eq!(
        decision.requeue_after,
        Some(Duration::from_secs(2 * 3600)),
        "the next pass is at the opening"
    );
    assert_eq!(reasons(&decision), ["RevisionWaitsForWindow"]);
    cluster.obs.now = at("2026-01-01T01:59:59Z");
    assert!(cluster.step().events.is_empty(), "announced once");
    cluster.obs.now = at("2026-01-01T02:00:00Z");
    assert_eq!(cluster.step().applied_revision, Some(1));
    assert_eq!(cluster.obs.status.next_window, None);
    assert_eq!(cluster.condition("WaitingForWindow").status, "False");
}

#[test]
fn a_revision_put_in_force_in_a_window_converges_after_it_closes() {
    let mut spec = spec(jobs(30));
    spec.approval.windows = nightly();
    let mut cluster = Cluster::new(spec, 3);
    cluster.obs.now = at("2026-01-01T02:10:00Z");
    cluster.settle();
    // A scale-up moves jobs between running members: revokes first, grants later.
    cluster.scale(4);
    cluster.obs.now = at("2026-01-01T02:59:00Z");
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, Some(2));
    cluster.obs.now = at("2026-01-01T03:00:00Z");
    cluster.settle();
    assert_eq!(cluster.condition("Ready").status, "True");
    assert!(
        !cluster.slice_of("worker-3").is_empty(),
        "granted after the window closed"
    );
    assert_eq!(cluster.obs.status.phase.as_deref(), Some("Ready"));
}

#[test]
fn rehoming_the_jobs_of_members_that_are_gone_does_not_wait_for_a_window() {
    let mut spec = spec(jobs(30));
    spec.strategy.type_ = StrategyType::Jump;
    spec.approval.windows = nightly();
    let mut cluster = Cluster::new(spec, 3);
    cluster.obs.now = at("2026-01-01T02:10:00Z");
    cluster.settle();
    cluster.obs.now = at("2026-01-01T05:00:00Z");
    cluster.scale(2);
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, Some(2), "{:?}", decision.events);
    // Scaling up again moves jobs of running members: that waits.
    cluster.settle();
    cluster.scale(3);
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None);
    assert_eq!(
        cluster.obs.status.next_window.as_deref(),
        Some("2026-01-02T02:00:00Z")
    );
}

#[test]
fn a_window_that_cannot_be_read_is_refused_naming_it_and_nothing_new_applies() {
    let mut spec = spec(jobs(20));
    spec.approval.windows = nightly();
    spec.approval.windows[0].start = "0 25 * * *".to_owned();
    let mut cluster = Cluster::new(spec, 2);
    cluster.obs.now = at("2026-01-01T02:10:00Z");
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None);
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "InvalidWindow");
    assert!(
        degraded.message.contains("Swarm demo")
            && degraded.message.contains("window 1")
            && degraded.message.contains("\"0 25 * * *\"")
            && degraded.message.contains("hour 25"),
        "{}",
        degraded.message
    );
}
