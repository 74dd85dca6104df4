//! Restarts one pool at a time (`pool_rollout`): order, pause, halt, supersede.

use super::*;
use shoal_core::names::ANNOTATION_RETRY_ROLLOUT;

/// Three pools of two members under `Restart`, converged on 12 jobs; pools
/// listed in `obs.pools` in byte order, `poolOrder` as given.
fn three_pools(pool_order: &[&str], max_unavailable: u32) -> Cluster {
    let mut spec = spec(jobs(12));
    spec.reload = ReloadPolicy::Restart;
    spec.rollout.max_unavailable = max_unavailable;
    spec.rollout.pool_order = pool_order.iter().map(|pool| (*pool).to_owned()).collect();
    spec.rollout.progress_deadline = Some("1m".to_owned());
    let mut cluster = Cluster::new(spec, 0);
    cluster.obs.pools = vec![pool("a", 2), pool("b", 2), pool("c", 2)];
    cluster.settle();
    cluster.evicted.clear();
    cluster
}

/// Replaces every job: each member gives all its jobs away and receives new
/// ones, so each is restarted twice (release, then pick up).
fn replace_every_job(cluster: &mut Cluster) {
    cluster.obs.spec.jobs = (0..12).map(|i| format!("other:{i:03}")).collect();
    cluster.obs.generation = cluster.obs.generation.map(|generation| generation + 1);
}

impl Cluster {
    /// Plans and applies once; evicted pods are replaced by pods that are not
    /// Ready yet. Returns the plan and the pods evicted.
    fn step_replacing_unready(&mut self) -> (Decision, Vec<String>) {
        let decision = decide(&self.obs);
        let mut evicted = Vec::new();
        for (pod, uid) in apply_in_memory(&mut self.obs, &decision) {
            for pool in &mut self.obs.pools {
                for (ordinal, state) in &mut pool.pods {
                    if format!("{}-{ordinal}", pool.name) == pod && state.uid == uid {
                        state.uid = format!("{uid}-next");
                        state.ready = false;
                    }
                }
            }
            evicted.push(pod);
        }
        self.obs.status = decision.status.clone();
        (decision, evicted)
    }

    fn make_every_pod_ready(&mut self) {
        for pool in &mut self.obs.pools {
            for pod in pool.pods.values_mut() {
                pod.ready = true;
            }
        }
    }

    fn rollout(&self) -> crate::api::swarm::SwarmRolloutStatus {
        self.obs.status.rollout.clone().expect("status.rollout")
    }

    fn pool_states(&self) -> Vec<String> {
        self.rollout()
            .pools
            .iter()
            .map(|pool| format!("{}={}", pool.name, pool.state))
            .collect()
    }
}

fn pool_of(pod: &str) -> String {
    pod.rsplit_once('-').map_or("", |(pool, _)| pool).to_owned()
}

#[test]
fn restarts_go_one_pool_at_a_time_in_pool_order_each_after_the_previous_pool_is_ready() {
    // c is listed; a and b follow in byte order. maxUnavailable 3 would allow
    // two pools at once: only the pool order keeps them apart.
    let mut cluster = three_pools(&["c"], 3);
    replace_every_job(&mut cluster);
    let mut pools_in_turn: Vec<String> = Vec::new();
    let mut every_eviction: Vec<String> = Vec::new();
    for _ in 0..40 {
        let (decision, evicted) = cluster.step_replacing_unready();
        every_eviction.extend(evicted.iter().cloned());
        let pools: BTreeSet<String> = evicted.iter().map(|pod| pool_of(pod)).collect();
        assert!(pools.len() <= 1, "two pools restarted at once: {evicted:?}");
        if let Some(pool) = pools.into_iter().next() {
            if pools_in_turn.last() != Some(&pool) {
                pools_in_turn.push(pool.clone());
            }
            // While the pods just evicted are not Ready, no other pool starts.
            let (_, meanwhile) = cluster.step_replacing_unready();
            every_eviction.extend(meanwhile.iter().cloned());
            assert!(
                meanwhile.iter().all(|pod| pool_of(pod) == pool),
                "{meanwhile:?} evicted while pool {pool} was not Ready again"
            );
            let rollout = cluster.rollout();
            assert_eq!(rollout.phase, "Progressing", "{rollout:?}");
            assert!(
                cluster.pool_states().contains(&format!("{pool}=Updating")),
                "{:?}",
                cluster.pool_states()
            );
        }
        cluster.make_every_pod_ready();
        if decision.operations.is_empty() && cluster.rollout().phase == "Complete" {
            break;
        }
    }
    // The release pass, then (once every revoke settled) the pick-up pass. Pool
    // b, the last released, is still the active pool when the grants come: it
    // picks up at once, then the order starts again from its first pool.
    assert_eq!(pools_in_turn, ["c", "a", "b", "c", "a"]);
    for pod in ["a-0", "a-1", "b-0", "b-1", "c-0", "c-1"] {
        let times = every_eviction
            .iter()
            .filter(|evicted| *evicted == pod)
            .count();
        assert_eq!(
            times, 2,
            "{pod} restarted {times} times: {every_eviction:?}"
        );
    }
    cluster.settle();
    assert_eq!(cluster.rollout().phase, "Complete");
    assert_eq!(cluster.pool_states(), ["c=Done", "a=Done", "b=Done"]);
    assert_eq!(
        all_jobs_once(&cluster),
        (0..12).map(|i| format!("other:{i:03}")).collect::<Vec<_>>()
    );
}

#[test]
fn a_paused_rollout_evicts_and_grants_nothing_and_resuming_finishes_it() {
    let mut cluster = three_pools(&[], 3);
    replace_every_job(&mut cluster);
    // Pool a is released; then the rollout is paused.
    let (_, evicted) = cluster.step_replacing_unready();
    assert!(evicted.iter().all(|pod| pool_of(pod) == "a"), "{evicted:?}");
    cluster.obs.spec.paused = true;
    cluster.make_every_pod_ready();
    let writes_before = cluster.writes.len();
    for _ in 0..5 {
        let (decision, evicted) = cluster.step_replacing_unready();
        assert!(evicted.is_empty(), "evicted while paused: {evicted:?}");
        assert!(
            !decision
                .operations
                .iter()
                .any(|operation| matches!(operation, Operation::WriteSlice { phase: "grant", .. })),
            "granted while paused: {:?}",
            decision.operations
        );
    }
    assert_eq!(cluster.writes.len(), writes_before);
    assert_eq!(cluster.rollout().phase, "Paused");
    assert_eq!(cluster.pool_states(), ["a=Done", "b=Paused", "c=Waiting"]);
    cluster.obs.spec.paused = false;
    cluster.settle();
    assert_eq!(cluster.rollout().phase, "Complete");
    assert_eq!(
        all_jobs_once(&cluster),
        (0..12).map(|i| format!("other:{i:03}")).collect::<Vec<_>>()
    );
}

#[test]
fn a_pod_not_ready_past_the_progress_deadline_halts_before_the_next_pool_until_retried() {
    let mut cluster = three_pools(&[], 3);
    replace_every_job(&mut cluster);
    let (_, evicted) = cluster.step_replacing_unready();
    assert!(evicted.contains(&"a-0".to_owned()), "{evicted:?}");
    // a-1 comes back; a-0 never does.
    cluster.obs.pools[0].pods.get_mut(&1).unwrap().ready = true;
    cluster.step_replacing_unready();
    cluster.obs.now = t0() + SignedDuration::from_secs(61);
    let (decision, evicted) = cluster.step_replacing_unready();
    assert!(evicted.is_empty(), "{evicted:?}");
    let warnings: Vec<&PlannedEvent> = decision
        .events
        .iter()
        .filter(|event| event.reason == "PoolRestartFailed")
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", decision.events);
    assert!(warnings[0].warning);
    assert!(
        warnings[0].note.contains("pool a") && warnings[0].note.contains("pod a-0 is not Ready"),
        "{}",
        warnings[0].note
    );
    let halted = cluster.rollout().halted.expect("halted");
    assert_eq!((halted.pool.as_str(), halted.pod.as_str()), ("a", "a-0"));
    assert_eq!(cluster.condition("RolloutHalted").status, "True");
    assert_eq!(
        cluster.pool_states(),
        ["a=Failed", "b=Waiting", "c=Waiting"]
    );
    // A pass later, the pod still not Ready: halted still, no second Event.
    cluster.obs.now = t0() + SignedDuration::from_secs(90);
    let (decision, _) = cluster.step_replacing_unready();
    assert!(
        !reasons(&decision).contains(&"PoolRestartFailed"),
        "{:?}",
        decision.events
    );
    // It stays halted, without a second Event, even once the pod is Ready.
    cluster.make_every_pod_ready();
    for _ in 0..3 {
        let (decision, evicted) = cluster.step_replacing_unready();
        assert!(evicted.is_empty(), "{evicted:?}");
        assert!(!reasons(&decision).contains(&"PoolRestartFailed"));
    }
    assert_eq!(cluster.rollout().phase, "Halted");
    // The user retries this revision: the rollout goes on to the end.
    let revision = cluster.rollout().revision;
    cluster
        .obs
        .annotations
        .insert(ANNOTATION_RETRY_ROLLOUT.to_owned(), revision.to_string());
    cluster.settle();
    assert_eq!(cluster.rollout().phase, "Complete");
    assert_eq!(cluster.condition("RolloutHalted").status, "False");
}

#[test]
fn a_newer_revision_finishes_the_pool_in_progress_then_starts_again_from_the_first_pool() {
    // One at a time: b-0 is restarted, b-1 still waits when revision 3 arrives.
    let mut cluster = three_pools(&["b"], 1);
    replace_every_job(&mut cluster);
    let (_, evicted) = cluster.step_replacing_unready();
    assert_eq!(evicted, ["b-0"]);
    cluster.make_every_pod_ready();
    let superseded = cluster.rollout().revision;
    cluster.obs.spec.jobs = (0..12).map(|i| format!("third:{i:03}")).collect();
    let mut order_seen: Vec<String> = Vec::new();
    for _ in 0..60 {
        let (decision, evicted) = cluster.step_replacing_unready();
        order_seen.extend(evicted);
        cluster.make_every_pod_ready();
        if decision.operations.is_empty() && cluster.rollout().phase == "Complete" {
            break;
        }
    }
    assert!(cluster.rollout().revision > superseded);
    // b-1 (the rest of pool b) goes first, then the order from its first pool.
    assert_eq!(order_seen.first().map(String::as_str), Some("b-1"));
    let second_pool = order_seen.iter().find(|pod| pool_of(pod) != "b");
    assert_eq!(second_pool.map(|pod| pool_of(pod)), Some("a".to_owned()));
    assert_eq!(cluster.rollout().phase, "Complete");
    assert_eq!(
        all_jobs_once(&cluster),
        (0..12).map(|i| format!("third:{i:03}")).collect::<Vec<_>>()
    );
}

#[test]
fn a_pool_whose_statefulset_has_not_seen_its_latest_spec_is_not_done_and_the_next_pool_waits() {
    let mut cluster = three_pools(&[], 3);
    cluster.obs.pools[0].observed_current = false;
    replace_every_job(&mut cluster);
    for _ in 0..5 {
        let (_, evicted) = cluster.step_replacing_unready();
        assert!(
            evicted.iter().all(|pod| pool_of(pod) == "a"),
            "{evicted:?} while StatefulSet a is not observed current"
        );
        cluster.make_every_pod_ready();
    }
    assert_eq!(
        cluster.pool_states(),
        ["a=Updating", "b=Waiting", "c=Waiting"]
    );
    cluster.obs.pools[0].observed_current = true;
    let (_, evicted) = cluster.step_replacing_unready();
    assert!(evicted.iter().all(|pod| pool_of(pod) == "b"), "{evicted:?}");
    assert!(!evicted.is_empty());
}
