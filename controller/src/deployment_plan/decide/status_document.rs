//! The last step of a pass: one deployment status document (Margo
//! `DeploymentStatus`, `shoal_core::deploy::status`) per deployment revision,
//! kept in `status.deploymentStatus`, and an Event on each change of a
//! deployment's overall state.
//!
//! * **Which revisions.** Every revision with a record in
//!   `status.deployments` (decided this pass), and the latest. The records
//!   are kept while instances or operations use their revision plus the
//!   newest `spec.deploymentHistoryLimit`, so a finished deployment's
//!   `removed` stays readable as long as its record, and a revision pruned
//!   from the records loses its document with it. A revision without a
//!   record (a plan written before the records existed) has no document,
//!   except the latest.
//! * **Components** are the plan's applications (every instance runs all of
//!   them, so a component's state is that of the instances running the
//!   revision). **Instances of a revision**: the `status.instances` entries
//!   of that revision; for the latest revision, instances the spec wants but
//!   that are not on it yet count as `pending`; an earlier revision no entry
//!   uses any more is `removed`. Instance states outside Margo's enumeration:
//!   `restarting` counts as `installing`, `stopped` as `removed`.
//! * **deploymentId**: `deploy::status::deployment_id(plan uid, revision)`.

use std::collections::BTreeSet;

use shoal_core::deploy::status::{
    ComponentInput, DeploymentState, DeploymentStatusDocument, StatusError, deployment_id,
    document_for,
};

use super::{PlanDecision, PlanObservation};
use crate::api::deployment_plan::{DeploymentPlanStatus, InstanceStatus};
use crate::planned::PlannedEvent;

/// Puts the documents into the decided status and adds the Events of their
/// state changes.
pub(super) fn attach(obs: &PlanObservation, mut decision: PlanDecision) -> PlanDecision {
    let documents = documents(obs, &decision.status);
    decision.events.extend(transitions(
        &obs.name,
        &obs.status.deployment_status,
        &documents,
    ));
    decision.status.deployment_status = documents;
    decision
}

/// The documents for `status` (decided this pass), oldest revision first.
fn documents(
    obs: &PlanObservation,
    status: &DeploymentPlanStatus,
) -> Vec<DeploymentStatusDocument> {
    let latest = status.latest_deployment;
    let revisions: BTreeSet<u64> = status
        .deployments
        .iter()
        .map(|record| record.revision)
        .chain((latest > 0).then_some(latest))
        .collect();
    let applications: Vec<&str> = obs
        .spec
        .applications
        .iter()
        .map(|application| application.name.as_str())
        .collect();
    revisions
        .into_iter()
        .map(|revision| {
            let entries: Vec<&InstanceStatus> = status
                .instances
                .iter()
                .filter(|entry| entry.deployment == revision)
                .collect();
            let missing = if revision == latest {
                wanted_but_absent(&entries, obs.spec.deployment.instances)
            } else {
                0
            };
            let mut states: Vec<DeploymentState> = entries
                .iter()
                .filter_map(|entry| state_of(&entry.state))
                .collect();
            states.extend(std::iter::repeat_n(DeploymentState::Pending, missing));
            if states.is_empty() && revision != latest {
                states.push(DeploymentState::Removed);
            }
            let error = entries.iter().find_map(|entry| {
                let error = entry.error.as_ref().filter(|_| entry.state == "failed")?;
                Some(StatusError {
                    code: error.code.clone(),
                    source: Some(format!("instance {} on {}", entry.name, entry.member)),
                    message: error.message.clone(),
                })
            });
            let components: Vec<ComponentInput> = applications
                .iter()
                .map(|name| ComponentInput {
                    name: (*name).to_owned(),
                    states: states.clone(),
                    error: error.clone(),
                })
                .collect();
            document_for(&deployment_id(&obs.uid, revision), revision, &components)
        })
        .collect()
}

/// How many of the `desired` instances have no entry of the revision yet.
fn wanted_but_absent(entries: &[&InstanceStatus], desired: u32) -> usize {
    let present: BTreeSet<&str> = entries
        .iter()
        .filter(|entry| !matches!(entry.state.as_str(), "removing" | "removed"))
        .map(|entry| entry.name.as_str())
        .collect();
    (desired as usize).saturating_sub(present.len())
}

/// An instance state as Margo knows it.
fn state_of(text: &str) -> Option<DeploymentState> {
    match text {
        "restarting" => Some(DeploymentState::Installing),
        "stopped" => Some(DeploymentState::Removed),
        other => DeploymentState::parse(other),
    }
}

/// One Event per deployment whose overall state changed (or that appears
/// in a state other than `pending`).
fn transitions(
    plan: &str,
    before: &[DeploymentStatusDocument],
    after: &[DeploymentStatusDocument],
) -> Vec<PlannedEvent> {
    after
        .iter()
        .filter_map(|document| {
            let previous = before
                .iter()
                .find(|old| old.deployment_id == document.deployment_id)
                .map(|old| old.status.state.as_str());
            let state = DeploymentState::parse(&document.status.state)?;
            let changed = match previous {
                Some(previous) => previous != document.status.state,
                None => state != DeploymentState::Pending,
            };
            changed.then(|| transition_event(plan, document, state))
        })
        .collect()
}

fn transition_event(
    plan: &str,
    document: &DeploymentStatusDocument,
    state: DeploymentState,
) -> PlannedEvent {
    let reason = match state {
        DeploymentState::Pending => "DeploymentPending",
        DeploymentState::Installing => "DeploymentInstalling",
        DeploymentState::Installed => "DeploymentInstalled",
        DeploymentState::Removing => "DeploymentRemoving",
        DeploymentState::Removed => "DeploymentRemoved",
        DeploymentState::Failed => "DeploymentFailed",
    };
    let revision = document.adopted_manifest_version.as_deref().unwrap_or("?");
    let mut note = format!(
        "DeploymentPlan {plan}: deployment {revision} (id {}) is {state}",
        document.deployment_id
    );
    if let Some(error) = &document.status.error {
        let source = error.source.as_deref().unwrap_or("unknown source");
        note.push_str(&format!(
            ": {} from {source}: {}",
            error.code, error.message
        ));
    }
    PlannedEvent {
        warning: state == DeploymentState::Failed,
        reason: reason.to_owned(),
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::deployment_plan::{DeploymentRecord, DeploymentRollout, InstanceError};
    use crate::deployment_plan::decide::tests::{observation, pass, report, spec};

    fn entry(name: &str, revision: u64, state: &str) -> InstanceStatus {
        InstanceStatus {
            name: name.into(),
            member: format!("pool-{}", &name[name.len() - 1..]),
            update_domain: String::new(),
            deployment: revision,
            state: state.into(),
            error: (state == "failed").then(|| InstanceError {
                code: "ExitCode1".into(),
                source: "pool-1".into(),
                message: "exited with status 1".into(),
            }),
        }
    }

    /// The revision a document reflects (`adoptedManifestVersion`).
    fn revision_of(document: &DeploymentStatusDocument) -> Option<u64> {
        document.adopted_manifest_version.as_deref()?.parse().ok()
    }

    fn record(revision: u64) -> DeploymentRecord {
        DeploymentRecord {
            revision,
            hash: format!("sha256:{revision}"),
            payloads: Vec::new(),
            rollout: DeploymentRollout::default(),
            instances: 1,
            change_cause: None,
            created: "2026-11-24T00:00:00Z".into(),
            approvals: Vec::new(),
            approved_with: Vec::new(),
            refused_with: Vec::new(),
        }
    }

    /// A decided status whose records are every revision up to `latest`.
    fn status(latest: u64, instances: Vec<InstanceStatus>) -> DeploymentPlanStatus {
        DeploymentPlanStatus {
            latest_deployment: latest,
            instances,
            deployments: (1..=latest).map(record).collect(),
            ..DeploymentPlanStatus::default()
        }
    }

    fn obs(desired: u32, previous: DeploymentPlanStatus) -> PlanObservation {
        let mut obs = observation(spec(desired, "Automatic", "nginx:1"));
        obs.status = previous;
        obs
    }

    fn states(documents: &[DeploymentStatusDocument]) -> Vec<(Option<u64>, String)> {
        documents
            .iter()
            .map(|d| (revision_of(d), d.status.state.clone()))
            .collect()
    }

    #[test]
    fn instances_not_placed_yet_keep_the_latest_deployment_installing() {
        let obs = obs(3, DeploymentPlanStatus::default());
        let decided = status(
            1,
            vec![
                entry("web-0", 1, "installed"),
                entry("web-1", 1, "installed"),
            ],
        );
        let documents = documents(&obs, &decided);
        assert_eq!(states(&documents), [(Some(1), "installing".to_owned())]);
        let names: Vec<&str> = documents[0]
            .components
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["nginx", "exporter"]);
        assert_eq!(documents[0].deployment_id, deployment_id("uid-web", 1));
    }

    #[test]
    fn a_failed_instance_fails_every_component_with_the_instance_and_member_as_source() {
        let obs = obs(2, DeploymentPlanStatus::default());
        let decided = status(
            1,
            vec![entry("web-0", 1, "installed"), entry("web-1", 1, "failed")],
        );
        let document = documents(&obs, &decided).remove(0);
        assert_eq!(document.status.state, "failed");
        let error = document.components[1].error.clone().expect("an error");
        assert_eq!(error.code, "ExitCode1");
        assert_eq!(error.source.as_deref(), Some("instance web-1 on pool-1"));
        assert_eq!(document.status.error, Some(error));
    }

    #[test]
    fn an_earlier_deployment_no_instance_runs_any_more_is_removed_and_kept_a_while() {
        let before = status(1, vec![]);
        let mut previous = before.clone();
        previous.deployment_status = documents(
            &obs(1, before),
            &status(1, vec![entry("web-0", 1, "installed")]),
        );
        let obs = obs(1, previous);
        let decided = status(2, vec![entry("web-0", 2, "installed")]);
        let documents = documents(&obs, &decided);
        assert_eq!(
            states(&documents),
            [
                (Some(1), "removed".to_owned()),
                (Some(2), "installed".to_owned())
            ]
        );
    }

    #[test]
    fn a_revision_pruned_from_the_records_loses_its_document() {
        let mut previous = status(2, vec![entry("web-0", 2, "installed")]);
        previous.deployment_status = documents(&obs(1, previous.clone()), &previous);
        assert_eq!(
            states(&previous.deployment_status),
            [
                (Some(1), "removed".to_owned()),
                (Some(2), "installed".to_owned())
            ]
        );
        let obs = obs(1, previous);
        let mut decided = status(3, vec![entry("web-0", 3, "installed")]);
        decided.deployments.retain(|record| record.revision != 1);
        assert_eq!(
            states(&documents(&obs, &decided)),
            [
                (Some(2), "removed".to_owned()),
                (Some(3), "installed".to_owned())
            ]
        );
    }

    #[test]
    fn a_revision_without_a_record_has_a_document_only_when_it_is_the_latest() {
        let mut decided = status(
            2,
            vec![
                entry("web-0", 1, "installed"),
                entry("web-1", 2, "installing"),
            ],
        );
        decided.deployments.clear();
        assert_eq!(
            states(&documents(
                &obs(2, DeploymentPlanStatus::default()),
                &decided
            )),
            [(Some(2), "installing".to_owned())]
        );
    }

    #[test]
    fn events_name_each_change_of_a_deployments_state_once() {
        let empty = DeploymentPlanStatus::default();
        let pending = documents(
            &obs(1, empty.clone()),
            &status(1, vec![entry("web-0", 1, "pending")]),
        );
        assert_eq!(transitions("web", &[], &pending), []);
        let installing = documents(
            &obs(1, empty.clone()),
            &status(1, vec![entry("web-0", 1, "installing")]),
        );
        let events = transitions("web", &pending, &installing);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "DeploymentInstalling");
        assert!(
            events[0].note.contains("deployment 1"),
            "{}",
            events[0].note
        );
        assert_eq!(transitions("web", &installing, &installing), []);
        let failed = documents(
            &obs(1, empty),
            &status(1, vec![entry("web-0", 1, "failed")]),
        );
        let events = transitions("web", &installing, &failed);
        assert_eq!(events[0].reason, "DeploymentFailed");
        assert!(events[0].warning);
        assert!(
            events[0]
                .note
                .contains("ExitCode1 from instance web-0 on pool-0"),
            "{}",
            events[0].note
        );
    }

    /// Through `decide`: instances created, then reported by their members' Leases.
    #[test]
    fn a_plan_pass_writes_the_document_from_what_members_report() {
        let mut obs = observation(spec(1, "Automatic", "nginx:1"));
        let first = pass(&mut obs);
        let document = &first.status.deployment_status[0];
        assert_eq!(document.status.state, "pending");
        let member = first.status.instances[0].member.clone();
        report(
            &mut obs,
            &member,
            serde_json::json!({"web-0": {"state": "installed", "deployment": 1}}),
        );
        let second = pass(&mut obs);
        assert_eq!(second.status.deployment_status[0].status.state, "installed");
        let reasons: Vec<&str> = second.events.iter().map(|e| e.reason.as_str()).collect();
        assert!(reasons.contains(&"DeploymentInstalled"), "{reasons:?}");
        report(
            &mut obs,
            &member,
            serde_json::json!({"web-0": {"state": "failed", "deployment": 1, "code": "ExitCode2", "message": "boom"}}),
        );
        let third = pass(&mut obs);
        let document = &third.status.deployment_status[0];
        assert_eq!(document.status.state, "failed");
        assert_eq!(
            document.components[0]
                .error
                .as_ref()
                .map(|e| e.code.as_str()),
            Some("ExitCode2")
        );
    }
}
