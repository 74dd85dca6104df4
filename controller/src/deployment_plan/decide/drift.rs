//! A direct edit of a plan's placement record put back.
//!
//! The controller is the only writer of `status.instances` and
//! `status.deployments` (server-side apply, field manager `shoal-controller`).
//! Someone allowed to write the status subresource can still change them;
//! `metadata.managedFields` then names that field manager as the owner of the
//! field in place of the controller ([`record_editors`]). The Swarm delivers
//! nothing new from such a record (it keeps what the slices hold, so nothing
//! moves), and this controller puts the record back from an honest source,
//! not from the edited record nor from memory (which a restart loses):
//!
//! * `status.instances`: the member slices, written by the Swarm controller
//!   only from a record it trusted (a hand edit of a slice is itself put back,
//!   `SliceRestored`), carry each delivered instance with its member and
//!   deployment revision. Every delivered entry (`pending`, `installing`,
//!   `installed`, `failed`) is rebuilt from them, `pending` until its member's
//!   own report says more (step 3 of `decide`). Entries that are delivered to
//!   no member (`stopped`, `restarting`, `removing`) are in no slice and cannot
//!   be checked: they are kept as written unless a slice holds that instance
//!   on that member; they deliver nothing either way.
//! * `status.deployments` has no copy outside the record, so it is not put
//!   back: condition `PlacementRestored` False says so, and the controller
//!   leaves the edited fields alone (writing them would make the edit its own
//!   and have it delivered).
//!
//! One Warning `PlacementRestored` names the field, who edited it and every
//! instance put back. Nothing is relocated or restarted: the restored record
//! is what the members already hold.
//!
//! Known limits: the slices lag the record by one Swarm pass, so an edit that
//! lands between an approval and its delivery puts back the entry as it was
//! before that approval, and the approved operation then waits for a report
//! that does not come (it is not re-applied from `status.operations`). Other
//! status fields (`operations` among them) are not checked here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::members::deploy_members;
use super::{PlanDecision, PlanObservation, status};
use crate::api::deployment_plan::InstanceStatus;
use crate::planned::PlannedEvent;

/// The condition type (and the Event reason) of a put-back placement record.
pub const PLACEMENT_RESTORED: &str = "PlacementRestored";

/// How soon to look again while the record cannot be put back (a slice being
/// restored by the Swarm controller, say).
const RETRY: Duration = Duration::from_secs(5);

/// One instance of the plan as a member's slice holds it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeldInstance {
    /// The member (pod name) whose slice holds it.
    pub member: String,
    /// The instance name, `<plan>-<n>`.
    pub name: String,
    /// The deployment revision it is delivered at.
    pub deployment: u64,
}

pub use crate::managed_fields::plan_record_editors as record_editors;

/// The observation with `status.instances` put back from the slices, and the
/// Warning saying so; `Err` with why when the record cannot be put back.
pub(super) fn restore(
    obs: &PlanObservation,
) -> Result<(PlanObservation, Option<PlannedEvent>), String> {
    if let Some(editor) = obs.record_editors.get("deployments") {
        return Err(format!(
            "DeploymentPlan {}: status.deployments was written by {editor}, not by the controller, and has no copy to be put back from; the members keep what they run and the plan's instances are not delivered until the plan is recreated",
            obs.name
        ));
    }
    let mut restored = obs.clone();
    restored
        .status
        .conditions
        .retain(|condition| condition.type_ != PLACEMENT_RESTORED);
    let Some(editor) = obs.record_editors.get("instances") else {
        return Ok((restored, None));
    };
    let held = obs.held_instances.as_ref().map_err(|why| {
        format!(
            "DeploymentPlan {}: status.instances was written by {editor}, not by the controller, and cannot be put back yet: {why}",
            obs.name
        )
    })?;
    let (instances, changes) = instances_from_slices(obs, held);
    restored.status.instances = instances;
    let note = format!(
        "DeploymentPlan {}: status.instances was written by {editor}; put back from the member slices (nothing moved): {}",
        obs.name,
        if changes.is_empty() {
            "every entry already matched them".to_owned()
        } else {
            changes.join("; ")
        }
    );
    let event = PlannedEvent {
        warning: true,
        reason: PLACEMENT_RESTORED.to_owned(),
        note,
    };
    Ok((restored, Some(event)))
}

/// The record rebuilt from what the slices hold, and each difference from
/// the edited record in words.
fn instances_from_slices(
    obs: &PlanObservation,
    held: &[HeldInstance],
) -> (Vec<InstanceStatus>, Vec<String>) {
    let domains: BTreeMap<String, String> = deploy_members(obs)
        .map(|members| {
            members
                .into_iter()
                .map(|member| (member.id.pod_name(), member.update_domain))
                .collect()
        })
        .unwrap_or_default();
    let edited = &obs.status.instances;
    let mut instances = Vec::new();
    let mut changes = Vec::new();
    for instance in held {
        let same = edited.iter().find(|entry| {
            entry.delivered()
                && entry.name == instance.name
                && entry.member == instance.member
                && entry.deployment == instance.deployment
        });
        let update_domain = domains
            .get(&instance.member)
            .cloned()
            .or_else(|| same.map(|entry| entry.update_domain.clone()))
            .unwrap_or_default();
        if same.is_none() {
            changes.push(format!(
                "instance {} on member {} at deployment {} put back",
                instance.name, instance.member, instance.deployment
            ));
        }
        instances.push(InstanceStatus {
            name: instance.name.clone(),
            member: instance.member.clone(),
            update_domain,
            deployment: instance.deployment,
            // What the member reports decides the rest (step 3 of `decide`).
            state: "pending".to_owned(),
            error: None,
        });
    }
    let held_on: BTreeSet<(&str, &str)> = held
        .iter()
        .map(|instance| (instance.name.as_str(), instance.member.as_str()))
        .collect();
    for entry in edited {
        let in_slices = held_on.contains(&(entry.name.as_str(), entry.member.as_str()));
        if !entry.delivered() && !in_slices {
            instances.push(entry.clone());
        } else if entry.delivered()
            && !held.iter().any(|instance| {
                instance.name == entry.name
                    && instance.member == entry.member
                    && instance.deployment == entry.deployment
            })
        {
            changes.push(format!(
                "instance {} on member {} at deployment {} ({}) is held by no slice and was taken out",
                entry.name, entry.member, entry.deployment, entry.state
            ));
        }
    }
    (instances, changes)
}

/// The last status kept as it is, with condition `PlacementRestored` False
/// saying why, and a Warning when that is new.
pub(super) fn not_restored(obs: &PlanObservation, problem: String) -> PlanDecision {
    let mut status = obs.status.clone();
    let previous = status::previous_condition(&obs.status, PLACEMENT_RESTORED);
    let new = previous
        .is_none_or(|condition| condition.status != "False" || condition.message != problem);
    status::set_condition(
        obs,
        &mut status,
        PLACEMENT_RESTORED,
        false,
        "NotRestored",
        problem.clone(),
    );
    PlanDecision {
        status,
        events: new
            .then(|| PlannedEvent {
                warning: true,
                reason: "PlacementNotRestored".to_owned(),
                note: problem,
            })
            .into_iter()
            .collect(),
        requeue_after: Some(RETRY),
        leave_edited_record: true,
        service: Default::default(),
    }
}
