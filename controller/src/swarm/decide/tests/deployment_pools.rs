//! Deployment pools in the pure plan: members are the pods, keyed by their
//! generated names; a replaced pod moves only its own jobs (with `sticky`), and
//! only to its successor (its place is held while the Deployment is short of
//! replicas); jobs are handed over with the same revoke-before-grant protocol,
//! and the slice of a pod that is gone is deleted.

use super::*;
use crate::api::swarm::StrategyType;

/// A Deployment pool `web` with Ready pods of these generated names.
fn deployment(pods: &[&str]) -> PoolState {
    PoolState {
        name: "web".to_owned(),
        replicas: pods.len() as u32,
        pods: BTreeMap::new(),
        deployment_pods: Some(
            pods.iter()
                .map(|pod| {
                    let state = PodState {
                        uid: format!("{pod}-uid"),
                        ready: true,
                        deleting: false,
                        ip: None,
                        node: None,
                    };
                    ((*pod).to_owned(), state)
                })
                .collect(),
        ),
        observed_current: true,
    }
}

/// A new Ready pod of the Deployment, as its ReplicaSet creates one.
fn add_ready_pod(cluster: &mut Cluster, pod: &str) {
    let state = PodState {
        uid: format!("{pod}-uid"),
        ready: true,
        deleting: false,
        ip: None,
        node: None,
    };
    pods_of(cluster).insert(pod.to_owned(), state);
}

fn pods_of(cluster: &mut Cluster) -> &mut BTreeMap<String, PodState> {
    cluster.obs.pools[0]
        .deployment_pods
        .as_mut()
        .expect("a Deployment pool")
}

/// A converged Swarm of 30 jobs over the Deployment pods `web-5c9d-aaaaa`, `-bbbbb`, `-ccccc`.
fn converged_sticky() -> Cluster {
    let mut swarm = spec(jobs(30));
    swarm.strategy.type_ = StrategyType::Sticky;
    let mut cluster = Cluster::new(swarm, 0);
    cluster.obs.pools = vec![deployment(&[
        "web-5c9d-aaaaa",
        "web-5c9d-bbbbb",
        "web-5c9d-ccccc",
    ])];
    cluster.settle();
    cluster
}

#[test]
fn the_pods_of_a_deployment_pool_are_members_under_their_generated_names() {
    let cluster = converged_sticky();
    let members: Vec<&String> = cluster.obs.slices.keys().collect();
    assert_eq!(
        members,
        ["web-5c9d-aaaaa", "web-5c9d-bbbbb", "web-5c9d-ccccc"]
    );
    assert_eq!(all_jobs_once(&cluster), jobs(30));
    for member in cluster.obs.slices.keys() {
        assert_eq!(cluster.slice_of(member).len(), 10, "{member}");
    }
    assert_eq!(cluster.obs.status.ready.as_deref(), Some("3/3"));
    let record = &cluster.obs.history[&1];
    assert_eq!(
        record
            .generated_members
            .get("web-5c9d-bbbbb")
            .map(String::as_str),
        Some("web")
    );
}

#[test]
fn a_replaced_pod_moves_only_its_own_jobs_to_its_successor_and_its_slice_is_deleted() {
    let mut cluster = converged_sticky();
    let kept_a = cluster.slice_of("web-5c9d-aaaaa");
    let kept_c = cluster.slice_of("web-5c9d-ccccc");
    let replaced = cluster.slice_of("web-5c9d-bbbbb");
    cluster.writes.clear();
    // The ReplicaSet replaces the pod under a new name.
    pods_of(&mut cluster).remove("web-5c9d-bbbbb");
    add_ready_pod(&mut cluster, "web-5c9d-ddddd");
    let plans = cluster.settle();
    assert_eq!(plans[0].applied_revision, Some(2));
    assert_eq!(cluster.slice_of("web-5c9d-ddddd"), replaced);
    assert_eq!(cluster.slice_of("web-5c9d-aaaaa"), kept_a);
    assert_eq!(cluster.slice_of("web-5c9d-ccccc"), kept_c);
    assert_eq!(
        cluster.writes,
        ["web-5c9d-ddddd"],
        "only the successor is written"
    );
    assert!(!cluster.obs.slices.contains_key("web-5c9d-bbbbb"));
    assert!(
        plans
            .iter()
            .any(|decision| decision.operations.iter().any(|op| matches!(
                op,
                Operation::DeleteSlice { member, .. } if member == "web-5c9d-bbbbb"
            )))
    );
    assert_eq!(all_jobs_once(&cluster), jobs(30));
}

#[test]
fn a_terminating_pod_keeps_its_jobs_until_it_acknowledges_the_revoke() {
    let mut cluster = converged_sticky();
    for pod in ["web-5c9d-aaaaa", "web-5c9d-bbbbb", "web-5c9d-ccccc"] {
        let hash = parse_slice(cluster.obs.slices[pod].text.as_deref().unwrap())
            .unwrap()
            .hash;
        cluster
            .obs
            .leases
            .insert(pod.to_owned(), sidecar_lease(pod, Some(1), Some(hash), 30));
    }
    // A scale-down: the pod is terminating, its sidecar still runs and has not let go.
    cluster.obs.pools[0].replicas = 2;
    pods_of(&mut cluster)
        .get_mut("web-5c9d-bbbbb")
        .expect("pod")
        .deleting = true;
    let first = cluster.step();
    assert_eq!(first.applied_revision, Some(2));
    for _ in 0..3 {
        let decision = cluster.step();
        assert!(
            !decision
                .operations
                .iter()
                .any(|op| matches!(op, Operation::WriteSlice { phase: "grant", .. })),
            "granted before the leaving pod let go: {:?}",
            decision.operations
        );
    }
    assert!(
        cluster.slice_of("web-5c9d-bbbbb").is_empty(),
        "the leaving pod's slice is revoked"
    );
    // Its pod is gone: the revoke settles, the jobs are granted, the slice is deleted.
    pods_of(&mut cluster).remove("web-5c9d-bbbbb");
    cluster.obs.leases.remove("web-5c9d-bbbbb");
    cluster.settle();
    assert!(!cluster.obs.slices.contains_key("web-5c9d-bbbbb"));
    assert_eq!(all_jobs_once(&cluster), jobs(30));
    assert_eq!(cluster.slice_of("web-5c9d-aaaaa").len(), 15);
}

#[test]
fn an_unready_pod_of_a_deployment_is_failed_over_after_the_configured_time() {
    let mut cluster = converged_sticky();
    cluster.obs.spec.failover.after = Some("30s".to_owned());
    pods_of(&mut cluster)
        .get_mut("web-5c9d-ccccc")
        .expect("pod")
        .ready = false;
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None, "not before failover.after");
    cluster.obs.now = t0() + SignedDuration::from_secs(31);
    cluster.settle();
    assert!(cluster.slice_of("web-5c9d-ccccc").is_empty());
    assert_eq!(all_jobs_once(&cluster), jobs(30));
}

#[test]
fn a_generated_name_that_looks_like_an_ordinal_replays_as_the_pod_it_was() {
    let mut swarm = spec(jobs(12));
    swarm.strategy.type_ = StrategyType::Jump;
    let mut cluster = Cluster::new(swarm, 0);
    // The random suffix of a generated name may be all digits.
    cluster.obs.pools = vec![deployment(&["web-5c9d-24567", "web-5c9d-bbbbb"])];
    cluster.settle();
    let record = &cluster.obs.history[&1];
    let replayed = replay(record).expect("replays");
    assert!(
        replayed
            .members()
            .contains(&MemberId::generated("web", "web-5c9d-24567")),
        "{:?}",
        replayed.members()
    );
    assert_eq!(
        member_of_pod(&cluster.obs.pools, "web-5c9d-24567"),
        MemberId::generated("web", "web-5c9d-24567")
    );
    let owned = replayed
        .slice_of(&MemberId::generated("web", "web-5c9d-24567"))
        .map(|jobs| {
            jobs.iter()
                .map(|key| key.as_str().to_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    assert_eq!(owned, cluster.slice_of("web-5c9d-24567"));
}

#[test]
fn a_deleted_pods_jobs_wait_for_its_successor_while_the_deployment_is_short_of_replicas() {
    let mut cluster = converged_sticky();
    let replaced = cluster.slice_of("web-5c9d-bbbbb");
    let kept_a = cluster.slice_of("web-5c9d-aaaaa");
    pods_of(&mut cluster).remove("web-5c9d-bbbbb");
    // Gone, not replaced yet: it holds its place (unavailable); nothing moves.
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None, "{:?}", decision.operations);
    assert_eq!(cluster.obs.status.ready.as_deref(), Some("2/3"));
    assert_eq!(cluster.slice_of("web-5c9d-bbbbb"), replaced);
    // The successor comes: the place is its own, with exactly those jobs.
    add_ready_pod(&mut cluster, "web-5c9d-ddddd");
    cluster.settle();
    assert_eq!(cluster.obs.status.current_revision, 2);
    assert_eq!(cluster.slice_of("web-5c9d-ddddd"), replaced);
    assert_eq!(cluster.slice_of("web-5c9d-aaaaa"), kept_a);
    assert!(!cluster.obs.slices.contains_key("web-5c9d-bbbbb"));
}

#[test]
fn a_deleted_pod_never_replaced_loses_its_jobs_after_failover_after() {
    let mut cluster = converged_sticky();
    cluster.obs.spec.failover.after = Some("30s".to_owned());
    pods_of(&mut cluster).remove("web-5c9d-bbbbb");
    assert_eq!(cluster.step().applied_revision, None);
    cluster.obs.now = t0() + SignedDuration::from_secs(31);
    cluster.settle();
    assert!(
        cluster
            .obs
            .slices
            .get("web-5c9d-bbbbb")
            .is_none_or(|_| cluster.slice_of("web-5c9d-bbbbb").is_empty())
    );
    assert_eq!(cluster.slice_of("web-5c9d-aaaaa").len(), 15);
    assert_eq!(all_jobs_once(&cluster), jobs(30));
}

#[test]
fn restart_mode_with_a_deployment_pool_is_refused_naming_the_pool_and_nothing_is_evicted() {
    let mut swarm = spec(jobs(30));
    swarm.strategy.type_ = StrategyType::Sticky;
    swarm.reload = ReloadPolicy::Restart;
    let mut cluster = Cluster::new(swarm, 0);
    cluster.obs.pools = vec![deployment(&["web-5c9d-aaaaa", "web-5c9d-bbbbb"])];
    let decision = cluster.step();
    assert_eq!(decision.applied_revision, None, "no revision applies");
    assert!(
        !decision
            .operations
            .iter()
            .any(|operation| matches!(operation, Operation::Evict { .. })),
        "{:?}",
        decision.operations
    );
    let degraded = cluster.condition("Degraded");
    assert_eq!(degraded.reason, "InvalidRollout");
    assert!(
        degraded
            .message
            .contains("reload: Restart needs StatefulSet pools, but web is a Deployment"),
        "{}",
        degraded.message
    );
}
