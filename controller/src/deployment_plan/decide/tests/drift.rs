//! A direct edit of the placement record (`status.instances`) put back from
//! the member slices; nothing moves because of it.

use super::*;
use crate::deployment_plan::decide::drift::HeldInstance;

/// Three instances settled and installed; the slices hold exactly the record.
fn held_as_recorded() -> PlanObservation {
    let mut obs = settled(3, "Automatic");
    obs.held_instances = Ok(obs
        .status
        .instances
        .iter()
        .map(|entry| HeldInstance {
            member: entry.member.clone(),
            name: entry.name.clone(),
            deployment: entry.deployment,
        })
        .collect());
    obs
}

/// The record as [`entries`], sorted.
fn placement(status: &DeploymentPlanStatus) -> Vec<(String, String, u64, String)> {
    let mut entries = entries(&PlanObservation {
        status: status.clone(),
        ..observation(spec(1, "Automatic", "nginx:1"))
    });
    entries.sort();
    entries
}

fn edited_by(obs: &mut PlanObservation, manager: &str) {
    obs.record_editors
        .insert("instances".to_owned(), manager.to_owned());
}

#[test]
fn an_edited_placement_record_is_put_back_from_the_slices_with_one_warning_and_no_operation() {
    let mut obs = held_as_recorded();
    let before = obs.status.clone();
    let operations_before = obs.status.operations.clone();
    // Someone moves web-0 to web-2's member at a revision that does not exist, and drops web-1.
    let target = obs.status.instances[2].member.clone();
    obs.status.instances[0].member = target.clone();
    obs.status.instances[0].deployment = 7;
    obs.status.instances.remove(1);
    edited_by(&mut obs, "intruder");

    let decision = decide(&obs);
    assert_eq!(placement(&decision.status), placement(&before));
    assert_eq!(
        decision.status.operations, operations_before,
        "nothing is relocated, created or restarted"
    );
    let warnings: Vec<&PlannedEvent> = decision
        .events
        .iter()
        .filter(|e| e.reason == "PlacementRestored")
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", decision.events);
    assert!(warnings[0].warning);
    for word in [
        "status.instances",
        "intruder",
        "web-0",
        "web-1",
        "deployment 7",
    ] {
        assert!(
            warnings[0].note.contains(word),
            "{word}: {}",
            warnings[0].note
        );
    }
    assert!(!decision.leave_edited_record);
}

#[test]
fn a_restored_entry_takes_its_state_from_its_members_report_not_from_the_edit() {
    let mut obs = held_as_recorded();
    // Marking an instance failed (or installed before its member says so) changes nothing.
    obs.status.instances[0].state = "failed".to_owned();
    edited_by(&mut obs, "kubectl-patch");
    let decision = decide(&obs);
    assert_eq!(decision.status.instances[0].state, "installed");
    assert!(decision.status.instances[0].error.is_none());
}

#[test]
fn an_entry_in_no_slice_that_is_delivered_to_no_member_is_kept_as_written() {
    let mut obs = held_as_recorded();
    // A stopped instance is in no slice: the slices cannot say it is wrong.
    let stopped = obs.status.instances[1].clone();
    obs.status.instances[1].state = "stopped".to_owned();
    obs.held_instances
        .as_mut()
        .expect("read")
        .retain(|held| held.name != stopped.name);
    edited_by(&mut obs, "kubectl-edit");
    let decision = decide(&obs);
    let entry = decision
        .status
        .instances
        .iter()
        .find(|e| e.name == stopped.name)
        .expect("kept");
    assert_eq!(
        (entry.member.as_str(), entry.state.as_str()),
        (stopped.member.as_str(), "stopped")
    );
}

#[test]
fn a_record_that_cannot_be_put_back_is_left_alone_with_a_condition_and_one_warning() {
    let mut obs = held_as_recorded();
    obs.status.instances.remove(0);
    edited_by(&mut obs, "intruder");
    obs.held_instances = Err("the slice of member gpu-0 was edited by kubectl-edit".to_owned());
    let decision = decide(&obs);
    assert!(decision.leave_edited_record);
    assert_eq!(placement(&decision.status), placement(&obs.status));
    let condition =
        status::previous_condition(&decision.status, "PlacementRestored").expect("a condition");
    assert_eq!(condition.status, "False");
    assert!(
        condition.message.contains("intruder"),
        "{}",
        condition.message
    );
    assert!(condition.message.contains("gpu-0"), "{}", condition.message);
    assert_eq!(decision.events.len(), 1, "{:?}", decision.events);
    assert_eq!(decision.events[0].reason, "PlacementNotRestored");
    // Said once: the same observation again publishes nothing.
    obs.status = decision.status;
    assert!(decide(&obs).events.is_empty());

    // Once the slices can be read, the record is put back and the condition goes.
    obs.held_instances = held_as_recorded().held_instances;
    let decision = decide(&obs);
    assert_eq!(decision.status.instances.len(), 3);
    assert!(status::previous_condition(&decision.status, "PlacementRestored").is_none());
}

#[test]
fn an_edited_deployments_record_is_not_made_the_controllers_own() {
    let mut obs = held_as_recorded();
    obs.status.deployments[0].payloads[0].coordinates =
        serde_json::from_value(serde_json::json!({"image": "evil:1"})).expect("coordinates");
    obs.record_editors
        .insert("deployments".to_owned(), "intruder".to_owned());
    let decision = decide(&obs);
    assert!(decision.leave_edited_record);
    let condition =
        status::previous_condition(&decision.status, "PlacementRestored").expect("a condition");
    assert!(
        condition.message.contains("status.deployments"),
        "{}",
        condition.message
    );
}

#[test]
fn a_plan_whose_later_spec_is_not_observed_is_not_ready() {
    let mut obs = held_as_recorded();
    assert_eq!(obs.status.phase.as_deref(), Some("Ready"));
    obs.record_editors
        .insert("deployments".to_owned(), "intruder".to_owned());
    obs.generation = Some(2);
    obs.spec.deployment.instances = 5;
    let decision = decide(&obs);
    assert_eq!(decision.status.observed_generation, Some(1));
    let ready = status::previous_condition(&decision.status, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "SpecNotObserved"),
        "{ready:?}"
    );
    assert!(ready.message.contains("generation 2"), "{}", ready.message);
    assert_ne!(decision.status.phase.as_deref(), Some("Ready"));
}

#[test]
fn the_editor_of_a_record_field_is_the_manager_owning_it_while_the_controller_does_not() {
    use crate::deployment_plan::decide::drift::record_editors;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    let entry = |manager: &str, fields: serde_json::Value| ManagedFieldsEntry {
        manager: Some(manager.to_owned()),
        fields_v1: Some(FieldsV1(serde_json::json!({ "f:status": fields }))),
        ..ManagedFieldsEntry::default()
    };
    let controller = entry(
        "shoal-controller",
        serde_json::json!({"f:deployments": {}, "f:phase": {}}),
    );
    let intruder = entry("intruder", serde_json::json!({"f:instances": {}}));
    let editors = record_editors(&[controller.clone(), intruder]);
    assert_eq!(
        editors.into_iter().collect::<Vec<_>>(),
        [("instances".to_owned(), "intruder".to_owned())]
    );
    // Shared with the controller (it applied the same value since): not an edit.
    let shared = entry(
        "shoal-controller",
        serde_json::json!({"f:instances": {}, "f:deployments": {}}),
    );
    let co_owner = entry("intruder", serde_json::json!({"f:instances": {}}));
    assert!(record_editors(&[shared, co_owner]).is_empty());
    // Other status fields are not the placement record.
    let phase = entry("kubectl-patch", serde_json::json!({"f:phase": {}}));
    assert!(record_editors(&[controller, phase]).is_empty());
}
