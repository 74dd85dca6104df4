//! `spec.cordon`: cordon changes no assignment, drain moves exactly the member's jobs
//! through the gate, and the member's state and Events follow.

use super::*;
use crate::api::swarm::CordonSpec;

fn cordon(cluster: &mut Cluster, member: &str, drain: bool) {
    cluster
        .obs
        .spec
        .cordon
        .retain(|entry| entry.member != member);
    cluster.obs.spec.cordon.push(CordonSpec {
        member: member.to_owned(),
        drain,
        reason: None,
    });
}

fn state_of(cluster: &Cluster, member: &str) -> Option<String> {
    cluster
        .obs
        .status
        .members
        .iter()
        .find(|status| status.name == member)
        .and_then(|status| status.state.clone())
}

fn sticky(job_count: usize, replicas: u32) -> Cluster {
    let mut spec = spec(jobs(job_count));
    spec.strategy.type_ = StrategyType::Sticky;
    let mut cluster = Cluster::new(spec, replicas);
    cluster.settle();
    cluster.writes.clear();
    cluster
}

#[test]
fn a_cordon_makes_no_revision_and_writes_no_slice() {
    for type_ in [
        StrategyType::Sticky,
        StrategyType::Bounded,
        StrategyType::Jump,
    ] {
        let mut spec = spec(jobs(30));
        spec.strategy.type_ = type_;
        let mut cluster = Cluster::new(spec, 3);
        cluster.settle();
        cluster.writes.clear();
        let revision = cluster.obs.status.current_revision;
        cordon(&mut cluster, "worker-1", false);
        let decision = cluster.step();
        assert!(
            decision.operations.is_empty(),
            "{type_:?}: {:?}",
            decision.operations
        );
        assert_eq!(decision.status.current_revision, revision);
        assert_eq!(reasons(&decision), vec!["MemberCordoned"]);
        assert_eq!(state_of(&cluster, "worker-1").as_deref(), Some("Cordoned"));
        assert_eq!(
            cluster.obs.status.cordoned.as_deref(),
            Some("worker-1 Cordoned")
        );
        assert_eq!(cluster.condition("Cordon").reason, "MembersCordoned");
        // Events on transitions only.
        assert!(cluster.step().events.is_empty());
    }
}

#[test]
fn jobs_added_after_a_cordon_never_land_on_the_cordoned_member() {
    let mut cluster = sticky(30, 3);
    let held = cluster.slice_of("worker-1");
    cordon(&mut cluster, "worker-1", false);
    cluster.step();
    cluster.obs.spec.jobs = jobs(60);
    cluster.settle();
    assert_eq!(cluster.slice_of("worker-1"), held);
    assert_eq!(all_jobs_once(&cluster), jobs(60));
    assert_eq!(cluster.slice_of("worker-0").len(), 25);
}

#[test]
fn a_drain_under_manual_approval_moves_nothing_until_approved_then_only_its_jobs() {
    let mut cluster = manual(30, 3);
    cluster.obs.spec.strategy.type_ = StrategyType::Sticky;
    cluster.step();
    cluster.approve_pending();
    cluster.settle();
    let before: Vec<Vec<String>> = (0..3)
        .map(|i| cluster.slice_of(&format!("worker-{i}")))
        .collect();
    cluster.writes.clear();

    cordon(&mut cluster, "worker-2", true);
    let decision = cluster.step();
    assert!(decision.operations.is_empty(), "{:?}", decision.operations);
    let pending = decision.status.pending_revision.clone().expect("pending");
    assert_eq!(pending.summary.jobs_moved, before[2].len() as u64);
    assert_eq!(state_of(&cluster, "worker-2").as_deref(), Some("Draining"));
    assert!(reasons(&decision).contains(&"MemberDraining"));
    cluster.step();
    assert!(cluster.writes.is_empty());

    cluster.approve_pending();
    let plans = cluster.settle();
    assert!(cluster.slice_of("worker-2").is_empty());
    for (i, old) in before.iter().enumerate().take(2) {
        let now = cluster.slice_of(&format!("worker-{i}"));
        assert!(
            old.iter().all(|key| now.contains(key)),
            "worker-{i} lost a job"
        );
    }
    assert_eq!(all_jobs_once(&cluster), jobs(30));
    assert_eq!(state_of(&cluster, "worker-2").as_deref(), Some("Drained"));
    let drained_events = plans
        .iter()
        .flat_map(|plan| reasons(plan))
        .filter(|reason| *reason == "MemberDrained")
        .count();
    assert_eq!(drained_events, 1);
}

#[test]
fn an_uncordon_makes_the_member_a_candidate_again() {
    let mut cluster = sticky(30, 3);
    cordon(&mut cluster, "worker-1", false);
    cluster.step();
    cluster.obs.spec.cordon.clear();
    let decision = cluster.step();
    assert_eq!(reasons(&decision), vec!["MemberUncordoned"]);
    assert_eq!(state_of(&cluster, "worker-1"), None);
    assert!(previous_condition(&cluster.obs.status, "Cordon").is_none());
    cluster.obs.spec.jobs = jobs(33);
    cluster.settle();
    assert_eq!(cluster.slice_of("worker-1").len(), 11);
}

#[test]
fn a_drained_member_whose_pod_is_recreated_stays_drained_and_gets_nothing_back() {
    let mut cluster = sticky(30, 3);
    cordon(&mut cluster, "worker-0", true);
    cluster.settle();
    assert_eq!(state_of(&cluster, "worker-0").as_deref(), Some("Drained"));
    let revision = cluster.obs.status.current_revision;
    let pod = cluster.obs.pools[0].pods.get_mut(&0).expect("pod 0");
    pod.uid = "recreated".to_owned();
    cluster.settle();
    assert_eq!(cluster.obs.status.current_revision, revision);
    assert!(cluster.slice_of("worker-0").is_empty());
    assert_eq!(state_of(&cluster, "worker-0").as_deref(), Some("Drained"));
    // The record of the revision in force replays to the same assignment (a restarted
    // controller computes the same plan).
    assert_eq!(decide(&cluster.obs), decide(&cluster.obs));
}

#[test]
fn a_cordoned_stateless_revision_replays_from_its_recorded_owners() {
    let mut spec = spec(jobs(30));
    spec.strategy.type_ = StrategyType::Jump;
    let mut cluster = Cluster::new(spec, 3);
    cluster.settle();
    cordon(&mut cluster, "worker-1", false);
    cluster.step();
    let held = cluster.slice_of("worker-1");
    cluster.obs.spec.jobs = jobs(60);
    cluster.settle();
    assert_eq!(cluster.slice_of("worker-1"), held);
    let record = &cluster.obs.history[&cluster.obs.status.current_revision];
    assert_eq!(record.cordoned, vec!["worker-1".to_owned()]);
    assert!(!record.owners.is_empty());
    // Nothing more to do: replaying the record gives what the slices hold.
    assert!(cluster.step().operations.is_empty());
}

#[test]
fn a_cordon_naming_no_member_is_kept_and_reported_once() {
    let mut cluster = sticky(10, 2);
    cordon(&mut cluster, "worker-9", false);
    let decision = cluster.step();
    assert!(decision.operations.is_empty());
    assert_eq!(reasons(&decision), vec!["CordonNotAMember"]);
    let found = cluster.condition("Cordon");
    assert_eq!(found.reason, "NotAMember");
    assert!(found.message.contains("worker-9"), "{}", found.message);
    assert_eq!(
        cluster.obs.status.cordoned.as_deref(),
        Some("worker-9 NotAMember")
    );
    assert!(cluster.step().events.is_empty());
}

#[test]
fn every_member_cordoned_refuses_new_jobs_and_keeps_the_revision_in_force() {
    let mut cluster = sticky(10, 2);
    cordon(&mut cluster, "worker-0", false);
    cordon(&mut cluster, "worker-1", false);
    cluster.step();
    let revision = cluster.obs.status.current_revision;
    cluster.obs.spec.jobs = jobs(11);
    let decision = cluster.step();
    assert_eq!(decision.status.current_revision, revision);
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "AllMembersCordoned");
    assert!(
        degraded.message.contains("worker-0, worker-1"),
        "{}",
        degraded.message
    );
}
