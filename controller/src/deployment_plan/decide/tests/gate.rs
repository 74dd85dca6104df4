//! The plan's side of the one gate (`shoal_core::gate`): approvals name
//! what pends now, numbers are never given twice, and placement is checked
//! again when an operation is approved.

use shoal_core::MemberId;
use shoal_core::deploy::{InstanceId, Operation, OperationType, operation_hash};
use shoal_core::names::ANNOTATION_APPROVE;

use super::*;

fn refused(decision: &PlanDecision) -> Vec<&str> {
    decision
        .events
        .iter()
        .filter(|event| event.reason == "ApprovalRefused")
        .map(|event| event.note.as_str())
        .collect()
}

/// The UPDATEs of a new payload, as the status would publish them.
fn waiting_updates(obs: &PlanObservation) -> Vec<OperationStatus> {
    obs.status
        .operations
        .iter()
        .filter(|op| op.type_ == "UPDATE" && op.state != "FAILED")
        .cloned()
        .collect()
}

/// The `status.approveDeploymentWith` a pass would publish after `edit`,
/// computed in advance on a copy (as anyone who reads the plan can).
fn published_after(obs: &PlanObservation, edit: impl FnOnce(&mut PlanObservation)) -> String {
    let mut preview = obs.clone();
    edit(&mut preview);
    pass(&mut preview);
    preview
        .status
        .approve_deployment_with
        .clone()
        .expect("the preview has operations waiting")
}

#[test]
fn an_approval_of_a_deployment_that_does_not_exist_yet_is_refused_and_never_approves_it() {
    let mut obs = settled(2, "Manual");
    assert_eq!(obs.status.latest_deployment, 1);
    // The value revision 2 would publish, computed in advance (the set hash covers
    // ids, members and revision, not the payload).
    let in_advance = published_after(&obs, |preview| {
        preview.spec.deployment.payloads[0]
            .coordinates
            .insert("image".to_owned(), "nginx:2".to_owned());
    });
    assert!(in_advance.starts_with("deployment-2/"), "{in_advance}");

    approve(&mut obs, &in_advance);
    let decision = pass(&mut obs);
    let notes = refused(&decision);
    assert_eq!(notes.len(), 1, "{:?}", decision.events);
    assert!(notes[0].contains("does not exist yet"), "{}", notes[0]);
    assert_eq!(
        obs.status.refused_annotations.get(ANNOTATION_APPROVE),
        Some(&in_advance)
    );
    // An editor now changes the payload: nothing of it may run unreviewed.
    obs.spec.deployment.payloads[0]
        .coordinates
        .insert("image".to_owned(), "evil:latest".to_owned());
    let decision = pass(&mut obs);
    assert_ne!(
        obs.status.latest_deployment, 2,
        "the revision took the number named in advance"
    );
    // (A Rolling rollout releases one update domain at a time.)
    let updates = waiting_updates(&obs);
    assert!(!updates.is_empty(), "{:?}", obs.status.operations);
    assert!(
        updates.iter().all(|op| op.state == "PENDING_APPROVAL"),
        "{updates:?}"
    );
    assert!(
        obs.status
            .instances
            .iter()
            .all(|entry| entry.deployment == 1),
        "{:?}",
        obs.status.instances
    );
    assert!(refused(&decision).is_empty(), "announced once per value");
    assert_eq!(
        obs.status.refused_annotations.get(ANNOTATION_APPROVE),
        Some(&in_advance),
        "still refused"
    );
    // Still nothing on a later pass; the honest approval of what pends works.
    pass(&mut obs);
    assert!(obs.status.instances.iter().all(|e| e.deployment == 1));
    let honest = obs.status.approve_deployment_with.clone().expect("waits");
    approve(&mut obs, &honest);
    pass(&mut obs);
    assert_eq!(ops_in(&obs, "APPROVED").len(), updates.len());
}

#[test]
fn a_deployment_approval_read_before_its_operations_exist_never_approves_them_later() {
    let mut obs = settled(1, "Manual");
    // Scaling is not a new revision: the CREATE of web-1 joins revision 1.
    let in_advance = published_after(&obs, |preview| preview.spec.deployment.instances = 2);
    assert!(in_advance.starts_with("deployment-1/"), "{in_advance}");
    approve(&mut obs, &in_advance);
    let decision = pass(&mut obs);
    assert_eq!(refused(&decision).len(), 1, "{:?}", decision.events);
    obs.spec.deployment.instances = 2;
    pass(&mut obs);
    pass(&mut obs);
    assert_eq!(
        ops_in(&obs, "PENDING_APPROVAL").len(),
        1,
        "{:?}",
        obs.status.operations
    );
    assert!(ops_in(&obs, "APPROVED").is_empty());
}

#[test]
fn an_approval_naming_an_operation_number_not_given_yet_burns_it() {
    let mut obs = observation(spec(1, "Manual", "nginx:1"));
    pass(&mut obs);
    let counter = obs.status.operation_counter;
    let create = ops_in(&obs, "PENDING_APPROVAL")[0].clone();
    let (id, hash) = create.approve_with.split_once('/').expect("id/hash");
    let (base, _) = id.rsplit_once('-').expect("a numbered id");
    let future = format!("{base}-{}/{hash}", counter + 1);
    approve(&mut obs, &future);
    let decision = pass(&mut obs);
    assert_eq!(refused(&decision).len(), 1, "{:?}", decision.events);
    assert!(obs.status.operation_counter > counter);
    assert!(ops_in(&obs, "APPROVED").is_empty());
}

#[test]
fn an_approved_operation_whose_target_cannot_hold_the_instance_fails_and_places_nothing() {
    let mut obs = observation(spec(1, "Manual", "nginx:1"));
    pass(&mut obs);
    // A hand-forged operation: web-1 onto a member without the required GPU.
    let forged = Operation::planned(
        OperationType::Create,
        InstanceId::new("web", 1),
        None,
        Some(MemberId::new("cpu", 0)),
        1,
    );
    let mut entry = ops_in(&obs, "PENDING_APPROVAL")[0].clone();
    entry.id = forged.id.clone();
    entry.instance = "web-1".to_owned();
    entry.to_member = Some("cpu-0".to_owned());
    entry.hash = operation_hash(&forged);
    entry.approve_with = format!("{}/{}", forged.id, entry.hash);
    obs.status.operations.push(entry.clone());
    approve(&mut obs, &entry.approve_with);
    pass(&mut obs);
    assert!(
        obs.status.instances.iter().all(|e| e.member != "cpu-0"),
        "{:?}",
        obs.status.instances
    );
    let failed = obs
        .status
        .operations
        .iter()
        .find(|op| op.id == forged.id)
        .expect("the forged operation is kept, failed");
    assert_eq!(failed.state, "FAILED");
    assert_eq!(failed.reason.as_deref(), Some("Unfit"));
    assert!(failed.message.contains("GPU"), "{}", failed.message);
}
