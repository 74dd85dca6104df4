//! Canary rollouts: a few instances first, the rest after they are installed
//! and approved (or a pause); a failed canary halts the rollout.

use super::*;
use crate::api::deployment_plan::RolloutType;

/// Four instances over domains `a` and `b`, settled at deployment 1, then a
/// new payload rolled out canary-first with `canaries` canaries.
fn canary_rollout(policy: &str, canaries: u32, pause: Option<u32>) -> PlanObservation {
    let mut obs = settled(4, policy);
    let mut next = spec(4, policy, "nginx:2");
    next.deployment.rollout.type_ = RolloutType::Canary;
    next.deployment.rollout.canary_instances = Some(canaries);
    next.deployment.rollout.pause_seconds = pause;
    obs.spec = next;
    obs
}

fn updates(obs: &PlanObservation) -> Vec<OperationStatus> {
    obs.status
        .operations
        .iter()
        .filter(|op| op.type_ == "UPDATE")
        .cloned()
        .collect()
}

fn rollout_halted(obs: &PlanObservation) -> crate::api::swarm::Condition {
    obs.status
        .conditions
        .iter()
        .find(|c| c.type_ == "RolloutHalted")
        .cloned()
        .expect("the RolloutHalted condition")
}

fn rollout(obs: &PlanObservation) -> crate::api::deployment_plan::RolloutStatus {
    obs.status.rollout.clone().expect("a rollout status")
}

#[test]
fn a_canary_deployment_goes_to_the_canaries_spread_over_domains_and_the_rest_wait_for_approval() {
    let mut obs = canary_rollout("Automatic", 2, None);
    let first = pass(&mut obs);
    let canaries = rollout(&obs).canaries;
    assert_eq!(canaries.len(), 2);
    let domains: BTreeSet<String> = obs
        .status
        .instances
        .iter()
        .filter(|e| canaries.contains(&e.name))
        .map(|e| e.update_domain.clone())
        .collect();
    assert_eq!(domains.len(), 2, "one canary per domain: {canaries:?}");
    let first_updates = updates(&obs);
    assert_eq!(first_updates.len(), 2, "{:?}", obs.status.operations);
    assert!(
        first_updates
            .iter()
            .all(|op| canaries.contains(&op.instance))
    );
    assert_eq!(rollout(&obs).phase, "Canary");
    assert!(
        !first
            .events
            .iter()
            .any(|e| e.reason == "RolloutNotSupported")
    );
    // Not yet installed: still only the canaries.
    pass(&mut obs);
    assert_eq!(updates(&obs).len(), 2);
    report_entries(&mut obs, "installed", &[]);
    let promoted = pass(&mut obs);
    assert!(promoted.events.iter().any(|e| e.reason == "CanaryPromoted"));
    assert_eq!(rollout(&obs).phase, "Promoted");
    // The rest wait for approval although the policy is Automatic.
    let rest = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(rest.len(), 2, "{:?}", obs.status.operations);
    assert!(
        rest.iter()
            .all(|op| op.type_ == "UPDATE" && !canaries.contains(&op.instance))
    );
    let whole = obs.status.approve_deployment_with.clone().expect("a value");
    approve(&mut obs, &whole);
    pass(&mut obs);
    assert!(obs.status.instances.iter().all(|e| e.deployment == 2));
}

#[test]
fn a_failed_canary_halts_the_rollout_until_a_new_deployment() {
    let mut obs = canary_rollout("Automatic", 1, None);
    pass(&mut obs);
    let canary = rollout(&obs).canaries[0].clone();
    report_entries(&mut obs, "installed", &[(canary.as_str(), "failed")]);
    let halted = pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "Halted");
    assert_eq!(
        halted
            .events
            .iter()
            .filter(|e| e.warning && e.reason == "CanaryFailed")
            .count(),
        1,
        "{:?}",
        halted.events
    );
    let condition = rollout_halted(&obs);
    assert_eq!(condition.status, "True");
    assert!(condition.message.contains(&canary), "{}", condition.message);
    // Reports of the failed canary going away do not resume it; only one Warning.
    report_entries(&mut obs, "installed", &[]);
    let again = pass(&mut obs);
    assert!(!again.events.iter().any(|e| e.reason == "CanaryFailed"));
    assert_eq!(rollout(&obs).phase, "Halted");
    assert_eq!(
        updates(&obs).len(),
        1,
        "nothing beyond the canary: {:?}",
        obs.status.operations
    );
    // A new deployment starts a new rollout.
    obs.spec.deployment.payloads[0]
        .coordinates
        .insert("image".to_owned(), "nginx:3".to_owned());
    pass(&mut obs);
    assert_eq!(obs.status.latest_deployment, 3);
    assert_eq!(rollout(&obs).phase, "Canary");
    assert_eq!(rollout(&obs).deployment, 3);
    assert_eq!(rollout_halted(&obs).status, "False");
}

#[test]
fn with_a_pause_the_rest_follow_through_the_policy_once_it_has_passed() {
    let mut obs = canary_rollout("Automatic", 1, Some(60));
    pass(&mut obs);
    report_entries(&mut obs, "installed", &[]);
    let waiting = pass(&mut obs);
    // The canary wait is not the user's pause, and says so.
    assert_eq!(rollout(&obs).phase, "CanaryWait");
    assert!(
        waiting
            .requeue_after
            .is_some_and(|after| after <= std::time::Duration::from_secs(60))
    );
    assert_eq!(updates(&obs).len(), 1);
    obs.now = Timestamp::from_second(1_700_000_000 + 59).expect("a time");
    pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "CanaryWait");
    obs.now = Timestamp::from_second(1_700_000_000 + 61).expect("a time");
    pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "Promoted");
    assert_eq!(updates(&obs).len(), 4);
    assert!(
        ops_in(&obs, "PENDING_APPROVAL").is_empty(),
        "Automatic after the pause"
    );
}

#[test]
fn a_users_pause_holds_the_canaries_the_wait_and_the_promotion_of_a_canary_rollout() {
    let mut obs = canary_rollout("Automatic", 1, Some(60));
    obs.spec.paused = true;
    let paused = pass(&mut obs);
    assert!(updates(&obs).is_empty(), "{:?}", obs.status.operations);
    assert_eq!(rollout(&obs).phase, "Paused");
    assert!(rollout(&obs).message.contains("paused by the user"));
    assert!(paused.events.iter().any(|e| e.reason == "RolloutPaused"));
    // Resumed: the canary goes first.
    obs.spec.paused = false;
    pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "Canary");
    assert_eq!(updates(&obs).len(), 1);
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "CanaryWait");
    // Paused during the canary wait: the wait runs out, nothing more is released.
    obs.spec.paused = true;
    obs.now = Timestamp::from_second(1_700_000_000 + 120).expect("a time");
    pass(&mut obs);
    pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "Paused");
    assert_eq!(updates(&obs).len(), 1, "{:?}", obs.status.operations);
    assert_eq!(
        obs.status
            .instances
            .iter()
            .filter(|e| e.deployment == 2)
            .count(),
        1,
        "only the canary runs deployment 2: {:?}",
        entries(&obs)
    );
    obs.spec.paused = false;
    pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "Promoted");
    assert_eq!(updates(&obs).len(), 4);
}

#[test]
fn a_halted_canary_rollout_says_halted_when_the_user_also_pauses_it() {
    let mut obs = canary_rollout("Automatic", 1, None);
    pass(&mut obs);
    let canary = rollout(&obs).canaries[0].clone();
    report_entries(&mut obs, "installed", &[(canary.as_str(), "failed")]);
    pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "Halted");
    obs.spec.paused = true;
    pass(&mut obs);
    assert_eq!(rollout(&obs).phase, "Halted");
    assert_eq!(rollout_halted(&obs).reason, "CanaryFailed");
}
