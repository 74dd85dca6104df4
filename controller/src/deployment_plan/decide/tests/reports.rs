//! Reports are evidence, not commands: what a member writes on its Lease moves
//! an instance only along the transitions an approved operation allows.

use super::*;

/// The member of `instance` and its entry's state.
fn entry_of(obs: &PlanObservation, instance: &str) -> (String, String) {
    let entry = obs
        .status
        .instances
        .iter()
        .find(|e| e.name == instance)
        .unwrap_or_else(|| panic!("{instance} is in status.instances: {:?}", entries(obs)));
    (entry.member.clone(), entry.state.clone())
}

fn ignored_events(decision: &PlanDecision) -> Vec<&PlannedEvent> {
    decision
        .events
        .iter()
        .filter(|e| e.reason == "ReportIgnored")
        .collect()
}

#[test]
fn a_report_of_removed_for_an_installed_instance_changes_nothing_and_is_reported_once() {
    let mut obs = settled(2, "Manual");
    let (member, _) = entry_of(&obs, "web-0");
    report(
        &mut obs,
        &member,
        serde_json::json!({"web-0": {"state": "removed", "deployment": 1}}),
    );
    let first = pass(&mut obs);
    let second = pass(&mut obs);
    let third = pass(&mut obs);
    // The instance is still placed, installed and delivered: nothing removed it.
    assert_eq!(
        entry_of(&obs, "web-0"),
        (member.clone(), "installed".to_owned())
    );
    assert!(obs.status.instances.iter().all(|e| e.delivered()));
    assert!(obs.status.operations.iter().all(|op| op.type_ == "CREATE"));
    let warnings = ignored_events(&first);
    assert_eq!(warnings.len(), 1, "{:?}", first.events);
    assert!(warnings[0].warning);
    assert!(
        warnings[0].note.contains(&member) && warnings[0].note.contains("\"removed\""),
        "names the member and the value: {}",
        warnings[0].note
    );
    assert!(ignored_events(&second).is_empty() && ignored_events(&third).is_empty());
    assert_eq!(obs.status.ignored_reports.count, 1);
    assert_eq!(obs.status.ignored_reports.current.len(), 1);
    assert_eq!(obs.status.ignored_reports.current[0].member, member);
    assert_eq!(obs.status.ignored_reports.current[0].state, "removed");
}

#[test]
fn a_state_off_the_enumeration_such_as_stopped_leaves_the_instance_delivered_and_is_counted() {
    let mut obs = settled(2, "Manual");
    let (member, _) = entry_of(&obs, "web-1");
    for (value, count) in [("stopped", 1), ("paused-by-me", 2)] {
        report(
            &mut obs,
            &member,
            serde_json::json!({"web-1": {"state": value, "deployment": 1}}),
        );
        let decision = pass(&mut obs);
        assert_eq!(entry_of(&obs, "web-1").1, "installed");
        assert_eq!(ignored_events(&decision).len(), 1, "{:?}", decision.events);
        assert!(ignored_events(&decision)[0].note.contains(value));
        assert_eq!(obs.status.ignored_reports.count, count);
    }
    assert_eq!(obs.status.pending_operations, 0);
    assert_eq!(obs.status.ready.as_deref(), Some("2/2"));
}

#[test]
fn a_member_reporting_an_instance_placed_on_another_member_is_ignored_and_counted() {
    let mut obs = settled(1, "Manual");
    let (placed_on, _) = entry_of(&obs, "web-0");
    let other = ["gpu-0", "gpu-1", "gpu2-0", "gpu2-1"]
        .into_iter()
        .find(|pod| *pod != placed_on)
        .expect("another member");
    report(
        &mut obs,
        other,
        serde_json::json!({"web-0": {"state": "installed", "deployment": 1}}),
    );
    let decision = pass(&mut obs);
    assert_eq!(entry_of(&obs, "web-0").0, placed_on);
    assert_eq!(obs.status.instances.len(), 1);
    let warnings = ignored_events(&decision);
    assert_eq!(warnings.len(), 1, "{:?}", decision.events);
    assert!(warnings[0].note.contains(other));
    assert_eq!(obs.status.ignored_reports.count, 1);
}

#[test]
fn an_entry_left_in_a_state_no_operation_gives_is_delivered_again() {
    let mut obs = settled(1, "Manual");
    obs.status.instances[0].state = "stopped-by-report".to_owned();
    pass(&mut obs);
    assert_eq!(obs.status.instances[0].state, "pending");
    assert!(obs.status.instances[0].delivered());
}

#[test]
fn the_last_removed_of_a_restarted_copy_is_not_held_against_its_member() {
    let mut obs = settled(1, "Automatic");
    let (member, _) = entry_of(&obs, "web-0");
    obs.status.instances[0].state = "pending".to_owned();
    report(
        &mut obs,
        &member,
        serde_json::json!({"web-0": {"state": "removed", "deployment": 1}}),
    );
    let decision = pass(&mut obs);
    assert_eq!(entry_of(&obs, "web-0").1, "pending");
    assert!(
        ignored_events(&decision).is_empty(),
        "{:?}",
        decision.events
    );
    assert_eq!(obs.status.ignored_reports.count, 0);
}

#[test]
fn an_approved_delete_still_ends_with_the_members_removed_report() {
    let mut obs = settled(2, "Automatic");
    obs.spec.deployment.instances = 1;
    pass(&mut obs);
    let removing: Vec<_> = obs
        .status
        .instances
        .iter()
        .filter(|e| e.state == "removing")
        .cloned()
        .collect();
    assert_eq!(removing.len(), 1, "{:?}", entries(&obs));
    report(
        &mut obs,
        &removing[0].member,
        serde_json::json!({removing[0].name.clone(): {"state": "removed", "deployment": 1}}),
    );
    let decision = pass(&mut obs);
    assert_eq!(obs.status.instances.len(), 1, "{:?}", entries(&obs));
    assert!(
        ignored_events(&decision).is_empty(),
        "{:?}",
        decision.events
    );
}

#[test]
fn an_instance_whose_pool_was_deleted_is_no_longer_counted_installed() {
    let mut obs = settled(2, "Manual");
    let (member, _) = entry_of(&obs, "web-0");
    let pool = member.rsplit_once('-').expect("a pod name").0.to_owned();
    obs.pools.retain(|p| p.name != pool);
    pass(&mut obs);
    assert_eq!(entry_of(&obs, "web-0"), (member, "pending".to_owned()));
    assert_eq!(obs.status.ready.as_deref(), Some("1/2"));
    assert_ne!(obs.status.phase.as_deref(), Some("Ready"));
    let ready = status::previous_condition(&obs.status, "Ready").expect("Ready");
    assert_eq!(ready.status, "False");
}
