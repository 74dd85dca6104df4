//! Blue-green rollouts: a complete second set beside the running one, the
//! old set removed only once every new copy is installed and the switch approved.

use super::*;
use crate::api::deployment_plan::RolloutType;

fn blue_green_rollout(instances: u32, policy: &str) -> PlanObservation {
    let mut obs = settled(instances, policy);
    let mut next = spec(instances, policy, "nginx:2");
    next.deployment.rollout.type_ = RolloutType::BlueGreen;
    obs.spec = next;
    obs
}

#[test]
fn a_blue_green_deployment_comes_up_beside_the_old_set_which_leaves_only_after_the_approved_switch()
{
    let mut obs = blue_green_rollout(2, "Manual");
    let blue: BTreeSet<String> = obs
        .status
        .instances
        .iter()
        .map(|e| e.member.clone())
        .collect();
    let first = pass(&mut obs);
    assert!(
        !first
            .events
            .iter()
            .any(|e| e.reason == "RolloutNotSupported")
    );
    let relocations = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(relocations.len(), 2, "{:?}", obs.status.operations);
    assert!(
        relocations
            .iter()
            .all(|op| op.type_ == "RELOCATE" && op.deployment == 2)
    );
    let green: BTreeSet<String> = relocations
        .iter()
        .map(|op| op.to_member.clone().expect("a target"))
        .collect();
    assert_eq!(green.len(), 2);
    assert!(
        green.is_disjoint(&blue),
        "the green set is on other members: {green:?} {blue:?}"
    );
    assert_eq!(
        obs.status.rollout.as_ref().map(|r| r.phase.as_str()),
        Some("Deploying")
    );

    let whole = obs.status.approve_deployment_with.clone().expect("a value");
    approve(&mut obs, &whole);
    pass(&mut obs);
    assert_eq!(
        obs.status.instances.len(),
        4,
        "both sets: {:?}",
        entries(&obs)
    );
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    // Every green copy installed: the blue set still runs, and its removal waits.
    let states = entries(&obs);
    assert_eq!(states.len(), 4, "{states:?}");
    assert!(
        states.iter().all(|(_, _, _, state)| state == "installed"),
        "{states:?}"
    );
    assert_eq!(
        obs.status.rollout.as_ref().map(|r| r.phase.as_str()),
        Some("Switching")
    );
    let switch = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(switch.len(), 2, "{:?}", obs.status.operations);
    assert!(
        switch.iter().all(|op| op.type_ == "DELETE"
            && blue.contains(op.from_member.as_deref().unwrap_or_default()))
    );

    let whole = obs.status.approve_deployment_with.clone().expect("a value");
    approve(&mut obs, &whole);
    pass(&mut obs);
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    let states = entries(&obs);
    assert_eq!(states.len(), 2, "only the green set is left: {states:?}");
    assert!(
        states
            .iter()
            .all(|(_, member, deployment, _)| green.contains(member) && *deployment == 2)
    );
    assert_eq!(
        obs.status.rollout.as_ref().map(|r| r.phase.as_str()),
        Some("Complete")
    );
    assert_eq!(obs.status.phase.as_deref(), Some("Ready"));
}

#[test]
fn a_green_set_that_cannot_fit_beside_the_blue_one_is_unplaced_with_the_reason_and_nothing_is_removed()
 {
    // Three blue instances on three of the four GPU members: one member is left.
    let mut obs = blue_green_rollout(3, "Automatic");
    pass(&mut obs);
    assert_eq!(obs.status.unplaced.len(), 2, "{:?}", obs.status.unplaced);
    assert!(
        obs.status
            .unplaced
            .iter()
            .all(|u| u.reason.contains("green copy for deployment 2")),
        "{:?}",
        obs.status.unplaced
    );
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    pass(&mut obs);
    assert!(
        !obs.status.operations.iter().any(|op| op.type_ == "DELETE"),
        "no blue copy leaves while the green set is incomplete: {:?}",
        obs.status.operations
    );
    assert!(
        obs.status
            .instances
            .iter()
            .filter(|e| e.deployment == 1)
            .count()
            == 3
    );
}

#[test]
fn a_green_copy_that_fails_halts_the_rollout_and_is_not_retried() {
    let mut obs = blue_green_rollout(2, "Automatic");
    pass(&mut obs);
    let green: Vec<String> = ops_in(&obs, "APPROVED")
        .iter()
        .map(|op| op.to_member.clone().expect("a green member"))
        .collect();
    assert_eq!(green.len(), 2, "{:?}", obs.status.operations);
    report_entries(&mut obs, "installed", &[]);
    let failing = green[0].clone();
    let instance = obs
        .status
        .instances
        .iter()
        .find(|e| e.member == failing)
        .map(|e| e.name.clone())
        .expect("the green entry");
    report(
        &mut obs,
        &failing,
        serde_json::json!({instance.clone(): {"state": "failed", "deployment": 2, "code": "ExitCode1"}}),
    );
    let halted = pass(&mut obs);
    assert_eq!(
        obs.status.rollout.as_ref().map(|r| r.phase.as_str()),
        Some("Halted")
    );
    assert!(
        halted
            .events
            .iter()
            .any(|e| e.warning && e.reason == "BlueGreenHalted")
    );
    for _ in 0..3 {
        pass(&mut obs);
    }
    let relocations = obs
        .status
        .operations
        .iter()
        .filter(|op| op.type_ == "RELOCATE")
        .count();
    assert_eq!(
        relocations, 2,
        "the failed green copy is not retried: {:?}",
        obs.status.operations
    );
    assert!(
        !obs.status.operations.iter().any(|op| op.type_ == "DELETE"),
        "no switch"
    );
    assert_eq!(
        obs.status
            .instances
            .iter()
            .filter(|e| e.deployment == 1)
            .count(),
        2
    );
}

fn rollout_phase(obs: &PlanObservation) -> String {
    obs.status
        .rollout
        .as_ref()
        .map(|r| r.phase.clone())
        .unwrap_or_default()
}

fn of_type(obs: &PlanObservation, type_: &str) -> usize {
    obs.status
        .operations
        .iter()
        .filter(|op| op.type_ == type_)
        .count()
}

#[test]
fn a_users_pause_holds_the_green_copies_and_the_switch_of_a_blue_green_rollout() {
    let mut obs = blue_green_rollout(2, "Automatic");
    obs.spec.paused = true;
    let paused = pass(&mut obs);
    assert_eq!(of_type(&obs, "RELOCATE"), 0, "{:?}", obs.status.operations);
    assert_eq!(rollout_phase(&obs), "Paused");
    assert!(paused.events.iter().any(|e| e.reason == "RolloutPaused"));
    obs.spec.paused = false;
    pass(&mut obs);
    assert_eq!(rollout_phase(&obs), "Deploying");
    assert_eq!(of_type(&obs, "RELOCATE"), 2);
    report_entries(&mut obs, "installed", &[]);
    // Every green copy is installed; paused before the switch.
    obs.spec.paused = true;
    pass(&mut obs);
    pass(&mut obs);
    assert_eq!(rollout_phase(&obs), "Paused");
    assert_eq!(of_type(&obs, "DELETE"), 0, "{:?}", obs.status.operations);
    assert_eq!(obs.status.instances.len(), 4, "{:?}", entries(&obs));
    obs.spec.paused = false;
    pass(&mut obs);
    assert_eq!(rollout_phase(&obs), "Switching");
    assert_eq!(of_type(&obs, "DELETE"), 2);
}

#[test]
fn a_halted_blue_green_rollout_names_the_green_copy_not_a_canary() {
    let mut obs = blue_green_rollout(1, "Automatic");
    pass(&mut obs);
    let green = obs
        .status
        .instances
        .iter()
        .find(|e| e.deployment == 2)
        .expect("a green copy")
        .member
        .clone();
    report(
        &mut obs,
        &green,
        serde_json::json!({"web-0": {"state": "failed", "deployment": 2, "code": "ExitCode1"}}),
    );
    pass(&mut obs);
    assert_eq!(rollout_phase(&obs), "Halted");
    let halted = status::previous_condition(&obs.status, "RolloutHalted").expect("RolloutHalted");
    assert_eq!(
        (halted.status.as_str(), halted.reason.as_str()),
        ("True", "GreenCopyFailed")
    );
}

#[test]
fn a_green_copy_whose_member_leaves_before_it_is_installed_is_placed_again_elsewhere() {
    let mut obs = blue_green_rollout(2, "Manual");
    obs.pools = pools(3, 0);
    pass(&mut obs);
    let whole = obs.status.approve_deployment_with.clone().expect("a value");
    approve(&mut obs, &whole);
    pass(&mut obs);
    let green = obs
        .status
        .operations
        .iter()
        .find(|op| op.type_ == "RELOCATE" && op.state == "APPROVED")
        .cloned()
        .expect("an approved green copy");
    let departed = green.to_member.clone().expect("a target");
    // Its member leaves before the copy is installed.
    leave(&mut obs, &departed);
    for _ in 0..3 {
        pass(&mut obs);
    }
    let again: Vec<_> = obs
        .status
        .operations
        .iter()
        .filter(|op| {
            op.type_ == "RELOCATE"
                && op.instance == green.instance
                && op.id != green.id
                && op.deployment == 2
        })
        .cloned()
        .collect();
    assert_eq!(again.len(), 1, "{:#?}", obs.status.operations);
    let target = again[0].to_member.clone().expect("a target");
    assert_ne!(target, departed, "placed again on the member that left");
    let entries = entries(&obs);
    assert!(
        !entries.iter().any(|(_, member, _, _)| *member == departed),
        "an entry stays on the member that left: {entries:?}"
    );
}

#[test]
fn a_green_copy_waiting_for_approval_whose_target_leaves_is_offered_again_elsewhere() {
    let mut obs = blue_green_rollout(2, "Manual");
    obs.pools = pools(3, 0);
    pass(&mut obs);
    let green = ops_in(&obs, "PENDING_APPROVAL")
        .into_iter()
        .find(|op| op.type_ == "RELOCATE")
        .expect("a green copy waiting");
    let departed = green.to_member.clone().expect("a target");
    leave(&mut obs, &departed);
    for _ in 0..3 {
        pass(&mut obs);
    }
    let waiting: Vec<_> = ops_in(&obs, "PENDING_APPROVAL")
        .into_iter()
        .filter(|op| op.type_ == "RELOCATE" && op.instance == green.instance)
        .collect();
    assert_eq!(waiting.len(), 1, "{:#?}", obs.status.operations);
    assert_ne!(
        waiting[0].to_member.as_deref(),
        Some(departed.as_str()),
        "still offered on the member that left"
    );
}
