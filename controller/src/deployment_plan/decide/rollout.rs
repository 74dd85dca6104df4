//! Canary rollouts: step 5 of `decide`, between the operations a placement
//! change needs and the gate.
//!
//! With `spec.deployment.rollout.type: Canary`, a new deployment revision
//! first goes to `canaryInstances` (default 1) of the instances that run an
//! earlier one, chosen when the revision is first seen
//! (`shoal_core::deploy::canary::choose_canaries`: spread over update
//! domains, lowest ordinals first) and kept in `status.rollout.canaries`, so
//! the choice survives restarts. The `UPDATE`s of the other instances are
//! held (not planned) while:
//!
//! * **Canary**: a canary has not reported `installed` for the revision;
//! * **CanaryWait**: every canary is installed (first seen at
//!   `status.rollout.canariesInstalledAt`) and `pauseSeconds` have not passed;
//! * **Halted**: a canary failed (its member reported it `failed` for the
//!   revision, or its operation failed so): nothing more of this revision is
//!   rolled out, with a Warning `CanaryFailed` and the condition
//!   `RolloutHalted`, until the next deployment revision starts a new rollout.
//!
//! Then **Promoted**: the other instances' `UPDATE`s are planned; after a
//! `pauseSeconds` period through the approval policy, without one they wait
//! for approval whatever the policy (`status.approveDeploymentWith` approves
//! them together). A revision no instance ran before (the first deployment,
//! or every instance already updated) has nothing to try first and is
//! Promoted at once. `CREATE`s (scale-up), `DELETE`s and relocations are
//! never held.
//!
//! **Paused** is the user's pause and nothing else (`spec.paused`, `kubectl
//! shoal pause`): no `UPDATE` is released, the canaries' included, whatever
//! the canary phase, until it is lifted; the canary wait goes on counting
//! meanwhile. A halted rollout stays `Halted` (the failure is what holds it),
//! and a rollout with no instance left on an earlier deployment has nothing
//! to hold.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use shoal_core::deploy::canary::choose_canaries;
use shoal_core::deploy::{FailureReason, InstanceId, Operation, OperationType};

use crate::api::deployment_plan::{DeploymentRollout, InstanceStatus, RolloutStatus, RolloutType};
use crate::planned::PlannedEvent;

/// What the rollout steps look at (canary here, and `blue_green`).
pub(super) struct RolloutInput<'a> {
    /// The plan's name.
    pub plan: &'a str,
    /// `spec.deployment.rollout`.
    pub rollout: &'a DeploymentRollout,
    /// The latest deployment revision.
    pub latest: u64,
    /// `status.instances` as this pass has it.
    pub entries: &'a [InstanceStatus],
    /// Every operation of the plan.
    pub operations: &'a [Operation],
    /// `status.rollout` as last written.
    pub previous: Option<&'a RolloutStatus>,
    /// `spec.paused`: the user's pause.
    pub paused: bool,
    /// Now.
    pub now: Timestamp,
}

/// What the canary step decided.
#[derive(Debug, Default)]
pub(super) struct CanaryDecision {
    /// The planned operations that may go to the gate now.
    pub planned: Vec<Operation>,
    /// Instances whose operations wait for approval whatever the policy.
    pub must_review: BTreeSet<InstanceId>,
    /// `status.rollout`.
    pub status: Option<RolloutStatus>,
    /// Events of the rollout's transitions.
    pub events: Vec<PlannedEvent>,
    /// Look again after this long (a pause running out).
    pub requeue_after: Option<Duration>,
}

/// Holds the `UPDATE`s of a canary rollout (see the module docs).
pub(super) fn canary(input: &RolloutInput<'_>, planned: Vec<Operation>) -> CanaryDecision {
    if input.rollout.type_ != RolloutType::Canary {
        return CanaryDecision {
            planned,
            ..CanaryDecision::default()
        };
    }
    let previous = input
        .previous
        .filter(|previous| previous.deployment == input.latest);
    let canaries: BTreeSet<String> = match previous {
        Some(previous) => previous.canaries.iter().cloned().collect(),
        None => first_canaries(input),
    };
    let failed = canaries.iter().find_map(|name| canary_failure(input, name));
    let waiting_for: Vec<&String> = canaries
        .iter()
        .filter(|name| !canary_installed(input, name))
        .collect();
    let installed_at = previous
        .and_then(|previous| previous.canaries_installed_at.as_deref())
        .and_then(|at| at.parse::<Timestamp>().ok())
        .or_else(|| waiting_for.is_empty().then_some(input.now));
    let was = previous.map(|previous| previous.phase.as_str());
    let mut decision = CanaryDecision::default();
    let (phase, message) = if canaries.is_empty() {
        (
            "Promoted",
            format!(
                "no instance ran an earlier deployment: deployment {} has nothing to try first",
                input.latest
            ),
        )
    } else if was == Some("Halted") || failed.is_some() {
        let why = failed.unwrap_or_else(|| {
            previous
                .map(|previous| previous.message.clone())
                .unwrap_or_default()
        });
        ("Halted", why)
    } else if !waiting_for.is_empty() {
        (
            "Canary",
            format!(
                "deployment {} waits for its canaries to report installed: {}",
                input.latest,
                names(&waiting_for)
            ),
        )
    } else {
        let remaining = input.rollout.pause_seconds.and_then(|pause| {
            let since = installed_at.map_or(Duration::ZERO, |at| {
                Duration::try_from(input.now.duration_since(at)).unwrap_or(Duration::ZERO)
            });
            Duration::from_secs(u64::from(pause)).checked_sub(since)
        });
        match remaining.filter(|left| !left.is_zero()) {
            Some(left) => {
                decision.requeue_after = Some(left);
                (
                    "CanaryWait",
                    format!(
                        "the canaries of deployment {} are installed; the other instances follow in {}s",
                        input.latest,
                        left.as_secs().max(1)
                    ),
                )
            }
            None => ("Promoted", promoted_message(input)),
        }
    };
    let (phase, message) = match user_pause(input, phase, &message) {
        Some(paused) => ("Paused", paused),
        None => (phase, message),
    };
    let holds = phase != "Promoted";
    for op in planned {
        let canary = canaries.contains(&op.instance.to_string());
        if op.operation_type == OperationType::Update && phase == "Paused" {
            continue;
        }
        if op.operation_type == OperationType::Update && !canary {
            if holds {
                continue;
            }
            if input.rollout.pause_seconds.is_none() {
                decision.must_review.insert(op.instance.clone());
            }
        }
        decision.planned.push(op);
    }
    if was != Some(phase) {
        decision
            .events
            .push(transition_event(input.plan, input.latest, phase, &message));
    }
    decision.status = Some(RolloutStatus {
        deployment: input.latest,
        phase: phase.to_owned(),
        canaries: canaries.into_iter().collect(),
        canaries_installed_at: installed_at.map(|at| at.to_string()),
        message,
        domains: Vec::new(),
    });
    decision
}

/// The message of the user's pause when it holds the rollout in `phase`: not
/// a halted one (its failure holds it), nor one with no instance left on an
/// earlier deployment.
fn user_pause(input: &RolloutInput<'_>, phase: &str, message: &str) -> Option<String> {
    let to_update = input.entries.iter().any(|entry| {
        entry.deployment < input.latest && !matches!(entry.state.as_str(), "removing" | "removed")
    });
    (input.paused && phase != "Halted" && to_update).then(|| {
        format!(
            "deployment {}: paused by the user (spec.paused; `kubectl shoal resume` goes on), no update is released; it stood at {phase}: {message}",
            input.latest
        )
    })
}

/// The canaries of a revision first seen: chosen among the instances in
/// force that run an earlier deployment.
fn first_canaries(input: &RolloutInput<'_>) -> BTreeSet<String> {
    let candidates: BTreeMap<InstanceId, String> = input
        .entries
        .iter()
        .filter(|entry| entry.deployment < input.latest)
        .filter(|entry| !matches!(entry.state.as_str(), "removing" | "removed" | "stopped"))
        .filter_map(|entry| {
            let instance = InstanceId::parse(input.plan, &entry.name).ok()?;
            Some((instance, entry.update_domain.clone()))
        })
        .collect();
    let count = input.rollout.canary_instances.unwrap_or(1) as usize;
    choose_canaries(&candidates, count)
        .into_iter()
        .map(|instance| instance.to_string())
        .collect()
}

/// Whether canary `name` reports installed for the latest revision.
fn canary_installed(input: &RolloutInput<'_>, name: &str) -> bool {
    input.entries.iter().any(|entry| {
        entry.name == name && entry.deployment == input.latest && entry.state == "installed"
    })
}

/// Why canary `name` failed for the latest revision, if it did.
fn canary_failure(input: &RolloutInput<'_>, name: &str) -> Option<String> {
    let reported = input.entries.iter().find(|entry| {
        entry.name == name && entry.deployment == input.latest && entry.state == "failed"
    });
    if let Some(entry) = reported {
        let error = entry
            .error
            .as_ref()
            .map_or(String::new(), |e| format!(": {}: {}", e.code, e.message));
        return Some(format!(
            "canary {name} failed on {}{error}; deployment {} is halted until the next deployment",
            entry.member, input.latest
        ));
    }
    input
        .operations
        .iter()
        .find(|op| {
            op.instance.to_string() == name
                && op.revision == input.latest
                && matches!(op.reason, Some(FailureReason::Reported { .. }))
        })
        .map(|op| {
            format!(
                "canary {name} failed ({}: {}); deployment {} is halted until the next deployment",
                op.id, op.message, input.latest
            )
        })
}

fn promoted_message(input: &RolloutInput<'_>) -> String {
    if input.rollout.pause_seconds.is_some() {
        format!(
            "deployment {} goes to the other instances through the approval policy",
            input.latest
        )
    } else {
        format!(
            "deployment {} waits for approval of the other instances (status.approveDeploymentWith)",
            input.latest
        )
    }
}

fn names(names: &[&String]) -> String {
    names
        .iter()
        .map(|name| name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Event of entering `phase`.
fn transition_event(plan: &str, revision: u64, phase: &str, message: &str) -> PlannedEvent {
    let (warning, reason) = match phase {
        "Halted" => (true, "CanaryFailed"),
        "CanaryWait" => (false, "CanariesInstalled"),
        "Paused" => (false, "RolloutPaused"),
        "Promoted" => (false, "CanaryPromoted"),
        _ => (false, "CanaryStarted"),
    };
    PlannedEvent {
        warning,
        reason: reason.to_owned(),
        note: format!("DeploymentPlan {plan}: deployment {revision}: {message}"),
    }
}
