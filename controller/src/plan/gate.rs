//! The approval gate: whether the assignment the inputs ask for becomes the
//! revision in force now, waits for approval, or is already in force.

use shoal_core::{Assignment, diff};

use super::history::{InForce, revision_record};
use super::inputs::Desired;
use super::members::Roster;
use super::{
    APPROVE_ANNOTATION, InputProblem, Observation, Operation, PlannedEvent, assignment_hash,
    condition,
};
use crate::crd::{
    ApprovalPolicy, Condition, PendingRevision, ReloadPolicy, RevisionSummary, SwarmStatus,
};

/// What the gate decided.
pub(super) struct GateOutcome {
    /// History writes (the record of a revision put in force).
    pub operations: Vec<Operation>,
    /// The revision fields of the status: current, pending, `changedAt`.
    pub status: SwarmStatus,
    /// The revision newly put in force, if any.
    pub applied_revision: Option<u64>,
    /// Jobs moved by that revision.
    pub jobs_moved: u64,
    /// The AwaitingApproval condition when a revision waits.
    pub awaiting: Option<Condition>,
    /// The revision the slices converge to, and its assignment.
    pub target: Option<(u64, Assignment)>,
}

impl GateOutcome {
    /// Nothing new: the revision in force stays the target.
    pub fn unchanged(obs: &Observation, in_force: &InForce) -> GateOutcome {
        let previous = &obs.status;
        GateOutcome {
            operations: Vec::new(),
            status: SwarmStatus {
                observed_generation: obs.generation,
                current_revision: previous.current_revision,
                current_hash: previous.current_hash.clone(),
                pending_revision: previous.pending_revision.clone(),
                changed_at: previous.changed_at.clone(),
                ..SwarmStatus::default()
            },
            applied_revision: None,
            jobs_moved: 0,
            awaiting: None,
            target: in_force
                .replayed
                .clone()
                .map(|assignment| (previous.current_revision, assignment)),
        }
    }
}

/// Runs the desired assignment through the gate.
pub(super) fn decide(
    obs: &Observation,
    roster: &Roster,
    in_force: &InForce,
    desired: Desired,
    events: &mut Vec<PlannedEvent>,
    problems: &mut Vec<InputProblem>,
) -> GateOutcome {
    let mut outcome = GateOutcome::unchanged(obs, in_force);
    let current_revision = obs.status.current_revision;
    let desired_hash = assignment_hash(&desired.assignment);
    let same_as_current =
        current_revision != 0 && obs.status.current_hash.as_deref() == Some(desired_hash.as_str());
    if same_as_current {
        keep_current(obs, roster, desired, &desired_hash, events, &mut outcome);
        return outcome;
    }
    if current_revision != 0 && !obs.history.contains_key(&current_revision) {
        problems.push(InputProblem {
            reason: "HistoryMissing",
            message: format!(
                "history ConfigMap {} of the revision in force is missing; the slices in the cluster stand for it",
                shoal_core::names::revision_configmap(&obs.swarm, current_revision)
            ),
        });
    }
    let previous_pending = outcome.status.pending_revision.clone();
    let (revision, supersedes) = match &previous_pending {
        Some(pending) if pending.hash == desired_hash => {
            (pending.revision, pending.summary.supersedes)
        }
        Some(pending) => (
            pending.revision.max(current_revision) + 1,
            Some(pending.revision),
        ),
        None => (current_revision + 1, None),
    };
    let summary = summarize(obs, roster, in_force, &desired, supersedes);
    let (approved, waiting_reason, waiting_message) = approval(obs, &summary, revision);
    if let Some(superseded) = supersedes.filter(|_| {
        previous_pending
            .as_ref()
            .is_some_and(|pending| pending.hash != desired_hash)
    }) {
        events.push(PlannedEvent {
            warning: false,
            reason: "RevisionSuperseded".to_owned(),
            note: format!("revision {revision} supersedes pending revision {superseded}"),
        });
    }
    if outcome.status.changed_at.is_none() {
        outcome.status.changed_at = Some(obs.now.to_string());
    }
    if approved {
        put_in_force(
            obs,
            roster,
            desired,
            revision,
            desired_hash,
            &summary,
            events,
            &mut outcome,
        );
    } else {
        let is_new = previous_pending
            .as_ref()
            .is_none_or(|pending| pending.revision != revision);
        if is_new {
            events.push(PlannedEvent {
                warning: false,
                reason: "RevisionPending".to_owned(),
                note: format!(
                    "revision {revision} waits for approval: {} jobs moved, {} members affected, {} restarts; approve with `kubectl annotate swarm {} {APPROVE_ANNOTATION}={revision} --overwrite`",
                    summary.jobs_moved, summary.members_affected, summary.restarts_needed, obs.swarm
                ),
            });
        }
        let message = waiting_condition_message(obs, revision, &waiting_message);
        outcome.awaiting = Some(condition("AwaitingApproval", true, waiting_reason, message));
        outcome.status.pending_revision = Some(PendingRevision {
            revision,
            hash: desired_hash,
            summary,
        });
    }
    outcome
}

/// The inputs give the revision in force: rewrite its history record if it went missing,
/// and withdraw a pending revision.
fn keep_current(
    obs: &Observation,
    roster: &Roster,
    desired: Desired,
    desired_hash: &str,
    events: &mut Vec<PlannedEvent>,
    outcome: &mut GateOutcome,
) {
    let current_revision = obs.status.current_revision;
    if !obs.history.contains_key(&current_revision) {
        outcome
            .operations
            .push(Operation::WriteRevision(revision_record(
                current_revision,
                desired_hash,
                &desired.strategy,
                &roster.members(),
                &desired.jobs,
            )));
    }
    if let Some(pending) = outcome.status.pending_revision.take() {
        events.push(PlannedEvent {
            warning: false,
            reason: "RevisionWithdrawn".to_owned(),
            note: format!(
                "pending revision {} withdrawn: the inputs are back to revision {current_revision}",
                pending.revision
            ),
        });
    }
    if outcome.target.is_none() {
        outcome.target = Some((current_revision, desired.assignment));
    }
}

/// What applying the desired assignment would do, against what is in force.
fn summarize(
    obs: &Observation,
    roster: &Roster,
    in_force: &InForce,
    desired: &Desired,
    supersedes: Option<u64>,
) -> RevisionSummary {
    let change = match &in_force.assignment {
        Some(in_force) => diff(in_force, &desired.assignment),
        None => diff(&desired.assignment, &desired.assignment),
    };
    let restarts_needed = match obs.spec.reload {
        ReloadPolicy::HotReload => 0,
        ReloadPolicy::Restart => change
            .affected
            .iter()
            .filter(|member| {
                roster.views.iter().any(|view| {
                    &view.id == *member && view.pod.as_ref().is_some_and(|pod| !pod.deleting)
                })
            })
            .count() as u64,
    };
    RevisionSummary {
        jobs_moved: change.moved.len() as u64,
        members_affected: change.affected.len() as u64,
        restarts_needed,
        lower_bound: change.lower_bound as u64,
        supersedes,
    }
}

/// Whether the policy (or an approval annotation) lets `revision` through; if not, the
/// AwaitingApproval reason and why.
fn approval(
    obs: &Observation,
    summary: &RevisionSummary,
    revision: u64,
) -> (bool, &'static str, String) {
    let spec = &obs.spec;
    let disrupted = match spec.reload {
        ReloadPolicy::HotReload => summary.members_affected,
        ReloadPolicy::Restart => summary.restarts_needed,
    };
    let approved_number = obs
        .annotations
        .get(APPROVE_ANNOTATION)
        .and_then(|text| text.trim().parse::<u64>().ok());
    match spec.approval.policy {
        ApprovalPolicy::Automatic => (true, "", String::new()),
        ApprovalPolicy::Manual => (
            approved_number == Some(revision),
            "ManualApproval",
            String::from("the approval policy is Manual"),
        ),
        ApprovalPolicy::Budget => {
            let within_members = spec
                .approval
                .max_disrupted_members
                .is_some_and(|max| disrupted <= u64::from(max));
            let within_jobs = spec
                .approval
                .max_moved_jobs
                .is_some_and(|max| summary.jobs_moved <= max);
            (
                within_members || within_jobs || approved_number == Some(revision),
                "OverBudget",
                format!(
                    "it disrupts {disrupted} members (budget {}) and moves {} jobs (budget {})",
                    spec.approval
                        .max_disrupted_members
                        .map_or("none".to_owned(), |max| max.to_string()),
                    summary.jobs_moved,
                    spec.approval
                        .max_moved_jobs
                        .map_or("none".to_owned(), |max| max.to_string()),
                ),
            )
        }
    }
}

/// The AwaitingApproval message: why the revision waits, how to approve it, and what is
/// wrong with an approval annotation that is there.
fn waiting_condition_message(obs: &Observation, revision: u64, waiting_message: &str) -> String {
    let mut message = format!(
        "revision {revision} waits for approval because {waiting_message}; approve with `kubectl annotate swarm {} {APPROVE_ANNOTATION}={revision} --overwrite`",
        obs.swarm
    );
    let approval = obs.annotations.get(APPROVE_ANNOTATION);
    match (
        approval,
        approval.and_then(|text| text.trim().parse::<u64>().ok()),
    ) {
        (Some(text), None) => {
            message.push_str(&format!(
                "; annotation {APPROVE_ANNOTATION}={text:?} is not a revision number and is ignored"
            ));
        }
        (Some(_), Some(number)) if number > obs.status.current_revision && number != revision => {
            message.push_str(&format!(
                "; the approval of revision {number} is stale and ignored (pending revision is {revision})"
            ));
        }
        _ => {}
    }
    message
}

/// Records the approved revision and makes it the target.
#[allow(clippy::too_many_arguments)]
fn put_in_force(
    obs: &Observation,
    roster: &Roster,
    desired: Desired,
    revision: u64,
    desired_hash: String,
    summary: &RevisionSummary,
    events: &mut Vec<PlannedEvent>,
    outcome: &mut GateOutcome,
) {
    let _ = obs;
    let record = revision_record(
        revision,
        &desired_hash,
        &desired.strategy,
        &roster.members(),
        &desired.jobs,
    );
    outcome.operations.push(Operation::WriteRevision(record));
    outcome.status.current_revision = revision;
    outcome.status.current_hash = Some(desired_hash);
    outcome.status.pending_revision = None;
    outcome.applied_revision = Some(revision);
    outcome.jobs_moved = summary.jobs_moved;
    events.push(PlannedEvent {
        warning: false,
        reason: "RevisionApproved".to_owned(),
        note: format!(
            "applying revision {revision}: {} jobs moved, {} members affected, {} restarts",
            summary.jobs_moved, summary.members_affected, summary.restarts_needed
        ),
    });
    outcome.target = Some((revision, desired.assignment));
}
