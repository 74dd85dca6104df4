//! Step 8 of `decide`: the operation history, the refusals, the conditions
//! and phase, with the Events of their transitions.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::MemberId;
use shoal_core::deploy::{Operation, OperationState, operation_hash};
use shoal_core::names::{ANNOTATION_APPROVE, ANNOTATION_APPROVED_BY};

use super::PlanObservation;
use super::gate::approval_value;
use crate::api::approval_record::ApprovalRecord;
use crate::api::deployment_plan::{DeploymentPlanStatus, OperationStatus, RolloutType};
use crate::api::swarm::Condition;
use crate::planned::PlannedEvent;

/// What the conditions and phase are computed from.
pub(super) struct Counts {
    /// Operations waiting for approval.
    pub pending: usize,
    /// Approved operations waiting for a maintenance window.
    pub held: usize,
    /// Approved operations waiting for their members.
    pub under_way: usize,
    /// Instances in force reported installed.
    pub installed: usize,
    /// Instances asked for.
    pub desired: u32,
    /// Failed instances, in words.
    pub failed: Vec<String>,
    /// Members that open operations target but the Swarm's revision in force
    /// does not hold (see [`members_not_in_force`]).
    pub waiting_for_swarm: Vec<String>,
}

/// The members that open operations (waiting for approval or approved) put
/// instances on but that the Swarm's revision in force does not hold: an
/// instance reaches a member only in the member's slice, so those operations
/// cannot finish until the Swarm puts the member in force.
pub(super) fn members_not_in_force(obs: &PlanObservation, operations: &[Operation]) -> Vec<String> {
    let Some(swarm) = &obs.swarm else {
        return Vec::new();
    };
    let open = operations.iter().filter(|op| {
        matches!(
            op.state,
            OperationState::Pending | OperationState::PendingApproval | OperationState::Approved
        )
    });
    let targets: BTreeSet<String> = open
        .filter_map(|op| op.to.as_ref().map(|member| member.to_string()))
        .filter(|member| !swarm.members_in_force.contains(member))
        .collect();
    targets.into_iter().collect()
}

/// At most ten names, then how many more: a condition message stays small
/// whatever the pool size.
pub(super) fn first_few(names: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut listed = names
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        listed.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    listed
}

/// `WaitingForSwarm`: True while open operations target members the Swarm's
/// revision in force does not hold, naming them and what to approve on the
/// Swarm (its pending revision and `approveWith`) when a revision waits.
fn swarm_condition(obs: &PlanObservation, members: &[String], status: &mut DeploymentPlanStatus) {
    let swarm = &obs.spec.swarm;
    let on = (!members.is_empty()).then(|| {
        let what = match obs.swarm.as_ref().and_then(|view| view.pending.as_ref()) {
            Some(pending) => format!(
                "Swarm {swarm} revision {} waits for approval: kubectl shoal approve {swarm} (or kubectl annotate swarm {swarm} --overwrite {ANNOTATION_APPROVE}={})",
                pending.revision, pending.approve_with
            ),
            None => format!(
                "no revision of Swarm {swarm} waits for approval yet; see kubectl describe swarm {swarm}"
            ),
        };
        (
            "MembersNotInForce",
            format!(
                "operations target member(s) {} that Swarm {swarm}'s revision in force does not hold yet; their instances are delivered once it does. {what}",
                first_few(members)
            ),
        )
    });
    flag(obs, status, "WaitingForSwarm", on, "MembersInForce");
}

pub(super) fn previous_condition<'a>(
    status: &'a DeploymentPlanStatus,
    type_: &str,
) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Sets a condition, keeping its transition time while its status stays.
pub(super) fn set_condition(
    obs: &PlanObservation,
    status: &mut DeploymentPlanStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: String,
) {
    let mut condition = crate::planned::condition(type_, value, reason, message);
    condition.observed_generation = obs.generation;
    condition.last_transition_time = match previous_condition(&obs.status, type_) {
        Some(old) if old.status == condition.status => old.last_transition_time.clone(),
        _ => Some(obs.now.to_string()),
    };
    status.conditions.retain(|c| c.type_ != type_);
    status.conditions.push(condition);
}

/// A condition that is True with `on` (reason, message) or False with reason `off`.
fn flag(
    obs: &PlanObservation,
    status: &mut DeploymentPlanStatus,
    type_: &str,
    on: Option<(&str, String)>,
    off: &str,
) {
    match on {
        Some((reason, message)) => set_condition(obs, status, type_, true, reason, message),
        None => set_condition(obs, status, type_, false, off, String::new()),
    }
}

/// The operations as status records them: every open one, the newest
/// finished ones up to `operationHistoryLimit`; an Event for each new
/// operation and each change of state.
pub(super) fn operation_history(
    obs: &PlanObservation,
    operations: &[Operation],
    approved_now: &BTreeMap<String, ApprovalRecord>,
    events: &mut Vec<PlannedEvent>,
) -> Vec<OperationStatus> {
    let now = obs.now.to_string();
    let previous: BTreeMap<&str, &OperationStatus> = obs
        .status
        .operations
        .iter()
        .map(|op| (op.id.as_str(), op))
        .collect();
    let limit = obs.spec.operation_history_limit as usize;
    let finished = operations
        .iter()
        .filter(|op| op.state.is_terminal())
        .count();
    let mut to_drop = finished.saturating_sub(limit);
    let mut kept = Vec::new();
    for op in operations {
        if op.state.is_terminal() && to_drop > 0 {
            to_drop -= 1;
            continue;
        }
        let before = previous.get(op.id.as_str());
        let changed = before.is_none_or(|before| before.state != op.state.as_str());
        if changed {
            events.push(operation_event(&obs.name, op, before.is_none()));
        }
        kept.push(OperationStatus {
            id: op.id.clone(),
            type_: op.operation_type.to_string(),
            instance: op.instance.to_string(),
            from_member: op.from.as_ref().map(MemberId::pod_name),
            to_member: op.to.as_ref().map(MemberId::pod_name),
            deployment: op.revision,
            state: op.state.to_string(),
            hash: operation_hash(op),
            approve_with: approval_value(op),
            message: op.message.clone(),
            reason: op.reason.as_ref().map(|reason| reason.kind().to_owned()),
            error_code: op
                .reason
                .as_ref()
                .and_then(|reason| reason.code().map(str::to_owned)),
            request: op.request.clone(),
            last_transition_time: if changed {
                Some(now.clone())
            } else {
                before.and_then(|before| before.last_transition_time.clone())
            },
            approval: approved_now
                .get(&op.id)
                .cloned()
                .or_else(|| before.and_then(|before| before.approval.clone())),
        });
    }
    kept
}

/// Records a refused approval annotation; one Warning per annotation value
/// (`crate::refusals`, shared with the Swarm's refusals).
pub(super) fn record_refusal(
    obs: &PlanObservation,
    refused: &[String],
    status: &mut DeploymentPlanStatus,
    events: &mut Vec<PlannedEvent>,
) {
    let Some(value) = obs.annotations.get(ANNOTATION_APPROVE) else {
        return;
    };
    if refused.is_empty() {
        return;
    }
    crate::refusals::record_refusal(
        &obs.status.refused_annotations,
        ANNOTATION_APPROVE,
        value,
        ("ApprovalRefused", crate::refusals::summarize(refused)),
        &mut status.refused_annotations,
        events,
    );
    status.last_error = Some(crate::refusals::summarize(refused));
}

/// Refused `shoal.dev/operate` requests: one Warning `OperationRequestRefused`
/// each (a request is handled once, so this is once per request), and the
/// last error.
pub(super) fn record_request_refusals(
    refusals: &[String],
    status: &mut DeploymentPlanStatus,
    events: &mut Vec<PlannedEvent>,
) {
    for refusal in refusals {
        events.push(PlannedEvent {
            warning: true,
            reason: "OperationRequestRefused".to_owned(),
            note: refusal.clone(),
        });
    }
    if !refusals.is_empty() {
        status.last_error = Some(refusals.join("; "));
    }
}

/// Degraded, AwaitingApproval, Progressing, WaitingForSwarm, Ready and the
/// phase; the Event of inputs becoming valid again.
pub(super) fn conditions(
    obs: &PlanObservation,
    counts: &Counts,
    status: &mut DeploymentPlanStatus,
    events: &mut Vec<PlannedEvent>,
) {
    let Counts {
        pending,
        held,
        under_way,
        installed,
        desired,
        failed,
        waiting_for_swarm,
    } = counts;
    let (pending, under_way, installed, desired) = (*pending, *under_way, *installed, *desired);
    let ready = installed as u32 == desired
        && pending == 0
        && *held == 0
        && under_way == 0
        && status.unplaced.is_empty()
        && failed.is_empty();
    let failures = format!("failed instances: {}", failed.join("; "));
    let degraded = (!failed.is_empty()).then(|| ("InstanceFailed", failures.clone()));
    flag(obs, status, "Degraded", degraded, "AsPlanned");
    let awaiting = (pending > 0).then(|| {
        (
            "OperationsPending",
            format!(
                "{pending} operation(s) wait for {ANNOTATION_APPROVE}; see status.operations[].approveWith"
            ),
        )
    });
    flag(obs, status, "AwaitingApproval", awaiting, "NothingPending");
    let progressing = (under_way > 0).then(|| {
        (
            "OperationsUnderWay",
            format!("{under_way} approved operation(s) wait for their members to report"),
        )
    });
    flag(obs, status, "Progressing", progressing, "Settled");
    swarm_condition(obs, waiting_for_swarm, status);
    let (reason, message) = if ready {
        ("AllInstalled", format!("{installed} instance(s) installed"))
    } else if !status.unplaced.is_empty() {
        (
            "NotAllInstalled",
            format!(
                "{} instance(s) cannot be placed; see status.unplaced",
                status.unplaced.len()
            ),
        )
    } else {
        (
            "NotAllInstalled",
            format!("{installed} of {desired} instance(s) installed"),
        )
    };
    set_condition(obs, status, "Ready", ready, reason, message);
    let phase = if !failed.is_empty() {
        "Degraded"
    } else if pending > 0 {
        "AwaitingApproval"
    } else if *held > 0 {
        "WaitingForWindow"
    } else if !waiting_for_swarm.is_empty() {
        "WaitingForSwarm"
    } else if under_way > 0 {
        "Progressing"
    } else if ready {
        "Ready"
    } else {
        "Pending"
    };
    status.phase = Some(phase.to_owned());
    if status.last_error.is_none() && !failed.is_empty() {
        status.last_error = Some(failures);
    }
    let previously_invalid = previous_condition(&obs.status, "Degraded")
        .is_some_and(|c| c.status == "True" && c.reason == "InvalidInput");
    if previously_invalid {
        events.push(PlannedEvent {
            warning: false,
            reason: "InputAccepted".to_owned(),
            note: format!("DeploymentPlan {}: its inputs are valid again", obs.name),
        });
    }
}

/// `WaitingForWindow` (only for a plan with maintenance windows): True while `held`
/// approved operations wait for a window, naming it and its opening (`because`), with
/// one Event when they start waiting.
pub(super) fn window_condition(
    obs: &PlanObservation,
    held: usize,
    because: Option<&str>,
    status: &mut DeploymentPlanStatus,
    events: &mut Vec<PlannedEvent>,
) {
    if obs.spec.approval.windows.is_empty() {
        status.conditions.retain(|c| c.type_ != "WaitingForWindow");
        return;
    }
    let on = because.filter(|_| held > 0).map(|because| {
        (
            "WindowClosed",
            format!(
                "{held} approved operation(s) start when a maintenance window opens: {because}"
            ),
        )
    });
    let was_on =
        previous_condition(&obs.status, "WaitingForWindow").is_some_and(|c| c.status == "True");
    if let (Some((_, message)), false) = (&on, was_on) {
        events.push(PlannedEvent {
            warning: false,
            reason: "OperationsWaitForWindow".to_owned(),
            note: format!("DeploymentPlan {}: {message}", obs.name),
        });
    }
    flag(obs, status, "WaitingForWindow", on, "NothingWaits");
}

/// `ReportsIgnored`: True while some member report changes nothing because no approved
/// operation allows it (`status.ignoredReports.current`), naming member, instance and value.
pub(super) fn reports_condition(obs: &PlanObservation, status: &mut DeploymentPlanStatus) {
    let current = &status.ignored_reports.current;
    let on = (!current.is_empty()).then(|| {
        let listed: Vec<String> = current
            .iter()
            .map(|report| {
                format!(
                    "{} reports {} {:?} (deployment {})",
                    report.member, report.instance, report.state, report.deployment
                )
            })
            .collect();
        (
            "ReportsIgnored",
            format!(
                "{} member report(s) change nothing (no approved operation allows them): {}",
                current.len(),
                listed.join("; ")
            ),
        )
    });
    flag(obs, status, "ReportsIgnored", on, "NoneIgnored");
}

/// A status kept from an earlier pass (bad input, a placement record that
/// cannot be put back) describes an earlier spec: the plan is not Ready while
/// `observedGeneration` is behind `metadata.generation`, whatever it was.
pub(super) fn spec_not_observed(obs: &PlanObservation, status: &mut DeploymentPlanStatus) {
    let Some(generation) = obs.generation else {
        return;
    };
    if status
        .observed_generation
        .is_some_and(|seen| seen >= generation)
    {
        return;
    }
    let why = status
        .conditions
        .iter()
        .find(|c| {
            (c.type_ == "Degraded" && c.status == "True")
                || (c.type_ == super::drift::PLACEMENT_RESTORED && c.status == "False")
        })
        .map_or_else(String::new, |c| format!(": {}", c.message));
    let seen = status
        .observed_generation
        .map_or_else(|| "none".to_owned(), |seen| seen.to_string());
    let message = format!(
        "DeploymentPlan {}: generation {generation} of the spec is not observed (the status describes generation {seen}){why}",
        obs.name
    );
    // Keep the transition time of a Ready condition that was already False.
    let mut condition = crate::planned::condition("Ready", false, "SpecNotObserved", message);
    condition.observed_generation = status.observed_generation;
    condition.last_transition_time = match previous_condition(&obs.status, "Ready") {
        Some(old) if old.status == "False" => old.last_transition_time.clone(),
        _ => Some(obs.now.to_string()),
    };
    status.conditions.retain(|c| c.type_ != "Ready");
    status.conditions.push(condition);
    if status.phase.as_deref() == Some("Ready") {
        status.phase = Some("Degraded".to_owned());
    }
}

/// `RolloutHalted`: True once a canary failed (reason `CanaryFailed`, until
/// the next deployment), a green copy failed (reason `GreenCopyFailed`, until
/// the next deployment; see `blue_green`) or an update domain failed (reason
/// `DomainFailed`, until the failure is gone; see `ordered`).
pub(super) fn rollout_condition(obs: &PlanObservation, status: &mut DeploymentPlanStatus) {
    let Some(rollout) = status.rollout.clone() else {
        status.conditions.retain(|c| c.type_ != "RolloutHalted");
        return;
    };
    let reason = match obs.spec.deployment.rollout.type_ {
        RolloutType::Canary => "CanaryFailed",
        RolloutType::BlueGreen => "GreenCopyFailed",
        RolloutType::Rolling => "DomainFailed",
    };
    let halted = (rollout.phase == "Halted").then(|| (reason, rollout.message.clone()));
    flag(obs, status, "RolloutHalted", halted, "NotHalted");
}

/// The Event of an operation's transition (or of a new operation).
fn operation_event(plan: &str, op: &Operation, new: bool) -> PlannedEvent {
    let what = format!(
        "{}operation {} ({} {}{}{}, deployment {})",
        if new { "new " } else { "" },
        op.id,
        op.operation_type,
        op.instance,
        op.from
            .as_ref()
            .map_or(String::new(), |m| format!(" from {m}")),
        op.to.as_ref().map_or(String::new(), |m| format!(" to {m}")),
        op.revision
    );
    let (warning, reason, note) = match op.state {
        OperationState::Pending => (false, "OperationCreated", format!("{what} created")),
        OperationState::PendingApproval => (
            false,
            "OperationPending",
            format!(
                "{what} waits for approval: kubectl shoal approve-op {plan} {} (writes {ANNOTATION_APPROVE}={} with your name in {ANNOTATION_APPROVED_BY})",
                op.id,
                approval_value(op)
            ),
        ),
        OperationState::Approved => (
            false,
            "OperationApproved",
            format!("{what}: {}", op.message),
        ),
        OperationState::Succeeded => (
            false,
            "OperationSucceeded",
            format!("{what}: {}", op.message),
        ),
        OperationState::Failed => (
            true,
            "OperationFailed",
            format!("{what} failed: {}", op.message),
        ),
    };
    PlannedEvent {
        warning,
        reason: reason.to_owned(),
        note,
    }
}
