//! User operations on one instance (`shoal.dev/operate`): relocate, stop,
//! start, restart, each through the gate, each request handled once.

use super::*;
use shoal_core::names::ANNOTATION_OPERATE;

fn operate(obs: &mut PlanObservation, value: &str) {
    obs.annotations
        .insert(ANNOTATION_OPERATE.to_owned(), value.to_owned());
}

fn entry(obs: &PlanObservation, name: &str) -> Vec<(String, String)> {
    obs.status
        .instances
        .iter()
        .filter(|e| e.name == name)
        .map(|e| (e.member.clone(), e.state.clone()))
        .collect()
}

fn member_of(obs: &PlanObservation, name: &str) -> String {
    entry(obs, name)[0].0.clone()
}

/// The member's Lease reports exactly `states` (instance → state) at deployment 1.
fn report_states(obs: &mut PlanObservation, member: &str, states: &[(&str, &str)]) {
    let mut map = serde_json::Map::new();
    for (name, state) in states {
        map.insert(
            (*name).to_owned(),
            serde_json::json!({"state": state, "deployment": 1}),
        );
    }
    report(obs, member, serde_json::Value::Object(map));
}

fn refusals(decision: &PlanDecision) -> Vec<String> {
    decision
        .events
        .iter()
        .filter(|e| e.warning && e.reason == "OperationRequestRefused")
        .map(|e| e.note.clone())
        .collect()
}

#[test]
fn a_stop_waits_for_approval_then_keeps_the_placement_and_a_start_brings_the_instance_back() {
    let mut obs = settled(2, "Manual");
    let member = member_of(&obs, "web-1");
    operate(&mut obs, "stop web-1 #t1");
    pass(&mut obs);
    let waiting = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(waiting.len(), 1, "{:?}", obs.status.operations);
    assert_eq!(waiting[0].type_, "STOP");
    assert_eq!(waiting[0].from_member.as_deref(), Some(member.as_str()));
    assert_eq!(waiting[0].request.as_deref(), Some("stop web-1 #t1"));
    assert_eq!(obs.status.handled_requests, ["stop web-1 #t1"]);
    assert_eq!(
        entry(&obs, "web-1"),
        [(member.clone(), "installed".to_owned())]
    );
    // The standing annotation is not a second request.
    let again = pass(&mut obs);
    assert!(again.events.is_empty(), "{:?}", again.events);
    assert_eq!(
        obs.status
            .operations
            .iter()
            .filter(|op| op.type_ == "STOP")
            .count(),
        1
    );
    approve(&mut obs, &waiting[0].approve_with);
    pass(&mut obs);
    assert_eq!(
        entry(&obs, "web-1"),
        [(member.clone(), "stopped".to_owned())]
    );
    // Reports of the old process do not revive it; it succeeds once the member no longer runs it.
    pass(&mut obs);
    assert_eq!(entry(&obs, "web-1")[0].1, "stopped");
    assert_eq!(ops_in(&obs, "APPROVED").len(), 1);
    report_states(&mut obs, &member, &[]);
    pass(&mut obs);
    assert_eq!(
        ops_in(&obs, "SUCCEEDED")
            .iter()
            .filter(|op| op.type_ == "STOP")
            .count(),
        1
    );
    // The placement and its capacity stay: no instance is created elsewhere.
    assert_eq!(
        entry(&obs, "web-1"),
        [(member.clone(), "stopped".to_owned())]
    );
    assert!(
        ops_in(&obs, "PENDING_APPROVAL").is_empty(),
        "{:?}",
        obs.status.operations
    );
    assert_ne!(obs.status.phase.as_deref(), Some("Ready"));

    // Start: a RESTART of the stopped instance, through the gate again.
    operate(&mut obs, "start web-1 #t2");
    pass(&mut obs);
    assert_eq!(obs.status.handled_requests, ["start web-1 #t2"]);
    let start = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(start.len(), 1);
    assert_eq!(start[0].type_, "RESTART");
    approve(&mut obs, &start[0].approve_with);
    pass(&mut obs);
    assert_eq!(entry(&obs, "web-1")[0].1, "restarting");
    pass(&mut obs);
    assert_eq!(
        entry(&obs, "web-1")[0].1,
        "pending",
        "its member no longer runs it"
    );
    report_states(&mut obs, &member, &[("web-1", "installed")]);
    pass(&mut obs);
    assert_eq!(entry(&obs, "web-1")[0].1, "installed");
    assert_eq!(
        ops_in(&obs, "SUCCEEDED")
            .iter()
            .filter(|op| op.type_ == "RESTART")
            .count(),
        1
    );
    assert_eq!(obs.status.phase.as_deref(), Some("Ready"));
}

#[test]
fn a_restart_keeps_the_instance_out_until_its_member_reports_it_removed_then_runs_it_again() {
    let mut obs = settled(1, "Automatic");
    let member = member_of(&obs, "web-0");
    operate(&mut obs, "restart web-0 #t1");
    pass(&mut obs);
    let restart = ops_in(&obs, "APPROVED");
    assert_eq!(restart.len(), 1);
    assert_eq!(restart[0].type_, "RESTART");
    assert_eq!(
        entry(&obs, "web-0"),
        [(member.clone(), "restarting".to_owned())]
    );
    // Still running there: it stays restarting, and an `installed` of the old process
    // does not finish the operation.
    pass(&mut obs);
    assert_eq!(entry(&obs, "web-0")[0].1, "restarting");
    assert_eq!(ops_in(&obs, "APPROVED").len(), 1);
    report_states(&mut obs, &member, &[("web-0", "removed")]);
    pass(&mut obs);
    assert_eq!(entry(&obs, "web-0")[0].1, "pending");
    assert_eq!(ops_in(&obs, "APPROVED").len(), 1);
    report_states(&mut obs, &member, &[("web-0", "installed")]);
    pass(&mut obs);
    assert_eq!(
        ops_in(&obs, "SUCCEEDED")
            .iter()
            .filter(|op| op.type_ == "RESTART")
            .count(),
        1
    );
    // The same request text again is not repeated; a new tag is a new request.
    pass(&mut obs);
    assert!(ops_in(&obs, "APPROVED").is_empty());
    operate(&mut obs, "restart web-0 #t2");
    pass(&mut obs);
    let second = ops_in(&obs, "APPROVED");
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].id, restart[0].id, "an id is never given twice");
}

#[test]
fn a_relocation_goes_to_the_named_member_or_elsewhere_and_is_make_before_break() {
    let mut obs = settled(1, "Automatic");
    let old = member_of(&obs, "web-0");
    let named = ["gpu-0", "gpu-1", "gpu2-0", "gpu2-1"]
        .into_iter()
        .find(|m| *m != old)
        .expect("another GPU member");
    operate(&mut obs, &format!("relocate web-0 to {named} #t1"));
    pass(&mut obs);
    let relocate = ops_in(&obs, "APPROVED");
    assert_eq!(relocate.len(), 1, "{:?}", obs.status.operations);
    assert_eq!(relocate[0].type_, "RELOCATE");
    assert_eq!(relocate[0].to_member.as_deref(), Some(named));
    assert_eq!(
        entry(&obs, "web-0"),
        [
            (old.clone(), "installed".to_owned()),
            (named.to_owned(), "pending".to_owned())
        ]
    );
    // The placement does not move it back while it relocates.
    pass(&mut obs);
    assert_eq!(
        ops_in(&obs, "APPROVED").len(),
        1,
        "{:?}",
        obs.status.operations
    );
    report_states(&mut obs, named, &[("web-0", "installed")]);
    pass(&mut obs);
    report_states(&mut obs, &old, &[]);
    pass(&mut obs);
    assert_eq!(
        entry(&obs, "web-0"),
        [(named.to_owned(), "installed".to_owned())]
    );

    // Without `to`: the member placement chooses, never the current one.
    operate(&mut obs, "relocate web-0 #t2");
    pass(&mut obs);
    let second = ops_in(&obs, "APPROVED");
    assert_eq!(second.len(), 1, "{:?}", obs.status.operations);
    let chosen = second[0].to_member.clone().expect("a target");
    assert_ne!(chosen, named);
    assert!(
        chosen.starts_with("gpu"),
        "only GPU members are capable: {chosen}"
    );
}

#[test]
fn bad_requests_are_refused_once_each_with_a_warning_naming_the_request() {
    let mut obs = settled(1, "Manual");
    let member = member_of(&obs, "web-0");
    let value = format!(
        "explode web-0, stop web-7, start web-0, relocate web-0 to cpu-0, relocate web-0 to {member}, relocate web-0 to nosuch-3, stop web-0 to gpu-0, stop"
    );
    operate(&mut obs, &value);
    let decision = pass(&mut obs);
    let refused = refusals(&decision);
    assert_eq!(refused.len(), 8, "{refused:#?}");
    for (note, fragment) in refused.iter().zip([
        "\"explode\" is not a verb",
        "web-7 is not in force",
        "not stopped",
        "member cpu-0 cannot hold instance web-0",
        "already runs on",
        "not a member of the plan's Swarm",
        "only relocate takes",
        "expected",
    ]) {
        assert!(note.contains(fragment), "{note:?} should say {fragment:?}");
        assert!(note.contains("shoal.dev/operate request"), "{note}");
    }
    assert!(obs.status.operations.iter().all(|op| op.request.is_none()));
    assert_eq!(obs.status.handled_requests.len(), 8);
    assert!(obs.status.last_error.is_some());
    // Standing, they are not refused again.
    assert!(refusals(&pass(&mut obs)).is_empty());
}

#[test]
fn a_second_request_for_an_instance_with_an_open_operation_is_refused_and_the_first_is_never_withdrawn()
 {
    let mut obs = settled(2, "Manual");
    operate(&mut obs, "stop web-0 #a, restart web-0 #b");
    let decision = pass(&mut obs);
    let refused = refusals(&decision);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("has operation stop-web-0-r1"),
        "{}",
        refused[0]
    );
    // A placement change (scaling down) does not withdraw the user's waiting STOP.
    obs.spec.deployment.instances = 1;
    pass(&mut obs);
    let stop = obs
        .status
        .operations
        .iter()
        .find(|op| op.type_ == "STOP")
        .expect("the STOP");
    assert_eq!(stop.state, "PENDING_APPROVAL");
}

#[test]
fn a_flood_of_requests_is_refused_whole_once_and_nothing_is_done() {
    let mut obs = settled(1, "Automatic");
    let flood: Vec<String> = (0..=crate::deployment_plan::decide::requests::MAX_REQUESTS)
        .map(|n| format!("restart web-0 #{n}"))
        .collect();
    operate(&mut obs, &flood.join(","));
    let decision = pass(&mut obs);
    let refused = refusals(&decision);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].contains("at most 100"), "{}", refused[0]);
    assert!(obs.status.operations.iter().all(|op| op.request.is_none()));
    assert!(refusals(&pass(&mut obs)).is_empty(), "said once");
}

#[test]
fn a_value_with_more_requests_than_the_status_remembers_is_read_up_to_its_bound_and_said_once() {
    use crate::api::limits::MAX_HANDLED_REQUESTS;
    let mut obs = settled(1, "Automatic");
    let written = MAX_HANDLED_REQUESTS as usize + 500;
    let flood: Vec<String> = (0..written)
        .map(|n| format!("restart web-0 #{n}"))
        .collect();
    operate(&mut obs, &flood.join(","));
    let decision = pass(&mut obs);
    assert_eq!(
        obs.status.handled_requests.len(),
        MAX_HANDLED_REQUESTS as usize,
        "status.handledRequests stays within the schema's maxItems"
    );
    let refused = refusals(&decision);
    assert!(
        refused
            .iter()
            .any(|why| why.contains(&format!("holds {written} requests; only the first"))),
        "{refused:?}"
    );
    assert!(obs.status.operations.iter().all(|op| op.request.is_none()));
    assert!(refusals(&pass(&mut obs)).is_empty(), "said once");
}

#[test]
fn a_request_longer_than_the_status_keeps_is_refused_once_and_remembered_cut() {
    use crate::api::limits::MAX_REQUEST_TEXT;
    let mut obs = settled(1, "Automatic");
    let long = format!(
        "restart web-0 #{}",
        "x".repeat(2 * MAX_REQUEST_TEXT as usize)
    );
    operate(&mut obs, &long);
    let first = refusals(&pass(&mut obs));
    assert!(
        obs.status
            .handled_requests
            .iter()
            .all(|item| item.chars().count() <= MAX_REQUEST_TEXT as usize),
        "every handled request within the schema's maxLength"
    );
    assert_eq!(obs.status.handled_requests.len(), 1);
    assert!(
        first.len() == 1 && first[0].contains("longer than"),
        "{first:?}"
    );
    assert!(obs.status.operations.iter().all(|op| op.request.is_none()));
    assert!(refusals(&pass(&mut obs)).is_empty(), "handled once");
}
