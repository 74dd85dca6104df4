//! Maintenance windows (`approval.windows`): approved operations wait for a
//! window, with the time injected; re-homing and a rollout under way do not.

use super::*;
use crate::api::swarm::MaintenanceWindow;

/// The fixture's time is 2023-11-14T22:13:20Z: a daily window at 02:00 UTC for an hour
/// is closed, and opens next at 2023-11-15T02:00:00Z.
const OPENS: &str = "2023-11-15T02:00:00Z";

fn nightly() -> Vec<MaintenanceWindow> {
    vec![MaintenanceWindow {
        start: "0 2 * * *".to_owned(),
        duration: "1h".to_owned(),
        time_zone: Some("UTC".to_owned()),
    }]
}

fn at(obs: &mut PlanObservation, time: &str) {
    obs.now = time.parse().expect("a time");
}

fn condition<'a>(obs: &'a PlanObservation, type_: &str) -> &'a crate::api::swarm::Condition {
    obs.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition: {:?}", obs.status.conditions))
}

#[test]
fn operations_the_policy_approves_wait_for_the_window_and_start_at_its_opening() {
    let mut plan = spec(2, "Automatic", "nginx:1");
    plan.approval.windows = nightly();
    let mut obs = observation(plan);
    let decision = pass(&mut obs);
    assert!(
        obs.status.instances.is_empty(),
        "nothing placed while closed"
    );
    let held = ops_in(&obs, "PENDING");
    assert_eq!(held.len(), 2, "{:?}", obs.status.operations);
    for op in &held {
        assert!(op.message.contains(OPENS), "{}", op.message);
        assert_eq!(
            op.approval.as_ref().map(|a| a.by.as_str()),
            Some("shoal-controller (Automatic)")
        );
    }
    assert_eq!(obs.status.phase.as_deref(), Some("WaitingForWindow"));
    assert_eq!(
        obs.status.pending_operations, 0,
        "nothing waits for a person"
    );
    assert_eq!(obs.status.next_window.as_deref(), Some(OPENS));
    let waiting = condition(&obs, "WaitingForWindow");
    assert_eq!(waiting.status, "True");
    assert!(
        waiting.message.contains(OPENS) && waiting.message.contains("window 1 (\"0 2 * * *\""),
        "{}",
        waiting.message
    );
    assert_eq!(
        decision.requeue_after,
        Some(std::time::Duration::from_secs(3 * 3600 + 46 * 60 + 40)),
        "the next pass is at the opening"
    );
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.reason == "OperationsWaitForWindow"),
        "{:?}",
        decision.events
    );
    // A pass before the opening changes nothing and announces nothing again.
    at(&mut obs, "2023-11-15T01:59:59Z");
    let again = pass(&mut obs);
    assert_eq!(ops_in(&obs, "PENDING").len(), 2);
    assert!(
        !again
            .events
            .iter()
            .any(|e| e.reason == "OperationsWaitForWindow")
    );
    at(&mut obs, OPENS);
    pass(&mut obs);
    assert_eq!(
        ops_in(&obs, "APPROVED").len(),
        2,
        "{:?}",
        obs.status.operations
    );
    assert_eq!(obs.status.instances.len(), 2);
    assert_eq!(obs.status.next_window, None);
    assert_eq!(condition(&obs, "WaitingForWindow").status, "False");
}

#[test]
fn an_approval_written_while_every_window_is_closed_is_kept_and_carried_out_at_the_opening() {
    let mut plan = spec(2, "Manual", "nginx:1");
    plan.approval.windows = nightly();
    let mut obs = observation(plan);
    pass(&mut obs);
    let value = obs
        .status
        .approve_deployment_with
        .clone()
        .expect("a set to approve");
    approve(&mut obs, &value);
    let decision = pass(&mut obs);
    assert!(
        !decision.events.iter().any(|e| e.warning),
        "the approval is not refused: {:?}",
        decision.events
    );
    assert!(obs.status.instances.is_empty());
    let held = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(held.len(), 2);
    assert!(held.iter().all(|op| op.approval.is_some()), "{held:?}");
    assert_eq!(obs.status.pending_operations, 0);
    assert_eq!(obs.status.phase.as_deref(), Some("WaitingForWindow"));
    // The approval counts once read: removing the annotation does not take it back.
    obs.annotations.clear();
    at(&mut obs, "2023-11-15T02:30:00Z");
    pass(&mut obs);
    assert_eq!(
        ops_in(&obs, "APPROVED").len(),
        2,
        "{:?}",
        obs.status.operations
    );
    assert_eq!(obs.status.instances.len(), 2);
}

#[test]
fn instances_of_a_member_that_left_are_placed_again_at_once_whatever_the_windows() {
    let mut obs = settled(2, "Automatic");
    obs.spec.approval.windows = nightly();
    let member = obs.status.instances[0].member.clone();
    leave(&mut obs, &member);
    pass(&mut obs);
    let under_way = ops_in(&obs, "APPROVED");
    assert_eq!(under_way.len(), 1, "{:?}", obs.status.operations);
    assert_eq!(under_way[0].from_member.as_deref(), Some(member.as_str()));
    assert_eq!(obs.status.next_window, None);
}

#[test]
fn a_rolling_rollout_started_in_a_window_finishes_after_it_closes() {
    let mut obs = settled(4, "Automatic");
    let mut next = spec(4, "Automatic", "nginx:2");
    next.deployment.rollout.domain_order = vec!["a".to_owned(), "b".to_owned()];
    next.approval.windows = nightly();
    obs.spec = next;
    at(&mut obs, "2023-11-15T02:59:00Z");
    pass(&mut obs);
    let first: Vec<_> = ops_in(&obs, "APPROVED");
    assert!(!first.is_empty(), "{:?}", obs.status.operations);
    // The window closes; domain a reports the new deployment installed.
    at(&mut obs, "2023-11-15T03:30:00Z");
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    assert!(
        obs.status.instances.iter().all(|e| e.deployment == 2),
        "the rollout finished outside the window: {:?}",
        obs.status.instances
    );
    assert_eq!(
        obs.status.phase.as_deref(),
        Some("Ready"),
        "{:?}",
        obs.status.operations
    );
}

#[test]
fn a_window_that_cannot_be_read_keeps_the_last_good_status_and_names_the_window() {
    let mut obs = settled(2, "Automatic");
    obs.spec.approval.windows = nightly();
    obs.spec.approval.windows.push(MaintenanceWindow {
        start: "0 2 * * *".to_owned(),
        duration: "1h".to_owned(),
        time_zone: Some("Mars/Olympus".to_owned()),
    });
    let before = obs.status.instances.clone();
    pass(&mut obs);
    assert_eq!(obs.status.instances, before);
    let degraded = condition(&obs, "Degraded");
    assert_eq!(degraded.status, "True");
    assert!(
        degraded.message.contains("DeploymentPlan web")
            && degraded.message.contains("window 2")
            && degraded.message.contains("Mars/Olympus"),
        "{}",
        degraded.message
    );
}
