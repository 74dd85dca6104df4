//! Ordered rollouts: step 5 of `decide` for `spec.deployment.rollout.type:
//! Rolling` (the default), between the operations a placement change needs
//! and the gate. Canary and blue-green rollouts keep their own rules and are
//! not ordered by domain.
//!
//! A new deployment revision reaches the instances one update domain at a
//! time, in `spec.deployment.rollout.domainOrder` (the domains listed, as
//! listed, then the others in byte order; see
//! `shoal_core::deploy::domains::rollout_order`). The decision is
//! `shoal_core::rollout::rollout_step` over what `status.instances` says now,
//! so it survives restarts and needs no remembered step:
//!
//! * a domain is **done** when every instance delivered there runs the latest
//!   revision and its member reports it `installed`;
//! * only the **active** domain (the first not done) has its `UPDATE`s
//!   released to the gate; the `UPDATE`s of later domains are held (not
//!   planned; `status.rollout.domains` shows them `Waiting`);
//! * a domain with an instance reported `failed` at the latest revision
//!   **halts** the rollout there: condition `RolloutHalted` (reason
//!   `DomainFailed`) and one Warning `DomainFailed` naming the domain and the
//!   cause. It stays halted until the failure is gone: the user restarts the
//!   instance (`kubectl shoal restart`), undoes (`kubectl shoal plan-undo`,
//!   a new revision with older payloads) or deploys a newer revision;
//! * **paused** (`spec.paused: true`): no `UPDATE` is released; the active
//!   domain is reported `Paused`;
//! * a **newer revision supersedes**: progress is measured against the
//!   latest revision only, so the rollout starts again from the first domain
//!   of the order; instances caught half-way keep what they run until their
//!   domain's turn. Nothing is reverted.
//!
//! `CREATE`s (scale-up), `DELETE`s, relocations and user operations are
//! never held: they change no running instance's payload.

use std::collections::BTreeMap;

use shoal_core::deploy::domains::rollout_order;
use shoal_core::deploy::{Operation, OperationType, PlanRequest};
use shoal_core::rollout::{PartProgress, PartState, RolloutPhase, rollout_step};

use crate::api::deployment_plan::{DomainRollout, InstanceStatus, RolloutStatus};
use crate::planned::PlannedEvent;

/// What the ordered step looks at.
pub(super) struct OrderedInput<'a> {
    /// The plan's name.
    pub plan: &'a str,
    /// `spec.deployment.rollout.domainOrder`.
    pub domain_order: &'a [String],
    /// `spec.paused`.
    pub paused: bool,
    /// The latest deployment revision.
    pub latest: u64,
    /// `status.instances` as this pass has it.
    pub entries: &'a [InstanceStatus],
    /// `status.rollout` as last written.
    pub previous: Option<&'a RolloutStatus>,
}

/// What the ordered step decided.
#[derive(Debug, Default)]
pub(super) struct OrderedDecision {
    /// The planned operations that may go to the gate now.
    pub planned: Vec<Operation>,
    /// `status.rollout`.
    pub status: Option<RolloutStatus>,
    /// Events of the rollout's transitions.
    pub events: Vec<PlannedEvent>,
}

/// Holds the `UPDATE`s of domains whose turn has not come (see the module docs).
pub(super) fn ordered(
    input: &OrderedInput<'_>,
    request: &PlanRequest,
    planned: Vec<Operation>,
) -> OrderedDecision {
    let progress = domain_progress(input.entries, input.latest);
    // The order was checked with the inputs (`check_domain_order`); byte order if not.
    let order = rollout_order(progress.keys().map(String::as_str), input.domain_order)
        .unwrap_or_else(|_| progress.keys().cloned().collect());
    let step = rollout_step(&order, &progress, input.paused);
    let domain_of: BTreeMap<String, &str> = request
        .members
        .iter()
        .map(|member| (member.id.pod_name(), member.update_domain.as_str()))
        .collect();
    let planned = planned
        .into_iter()
        .filter(|operation| {
            operation.operation_type != OperationType::Update
                || operation
                    .to
                    .as_ref()
                    .and_then(|to| domain_of.get(&to.pod_name()))
                    .is_some_and(|domain| step.may_change(domain))
        })
        .collect();
    let (phase, message) = phase_in_words(input.latest, &step.phase);
    let mut events = Vec::new();
    let previous = input
        .previous
        .filter(|previous| previous.deployment == input.latest);
    if previous.is_none_or(|previous| previous.message != message) {
        events.extend(transition_event(input.plan, &step.phase, &message));
    }
    let domains = step
        .parts
        .iter()
        .map(|(name, state)| domain_row(name, state, &progress))
        .collect();
    OrderedDecision {
        planned,
        status: Some(RolloutStatus {
            deployment: input.latest,
            phase: phase.to_owned(),
            canaries: Vec::new(),
            canaries_installed_at: None,
            message,
            domains,
        }),
        events,
    }
}

/// Each update domain's progress towards `latest`, from the entries
/// delivered to members. An instance being restarted by its user counts as
/// disrupted (its domain is not done meanwhile); stopped and leaving entries
/// do not count.
fn domain_progress(entries: &[InstanceStatus], latest: u64) -> BTreeMap<String, PartProgress> {
    let mut progress: BTreeMap<String, PartProgress> = BTreeMap::new();
    for entry in entries
        .iter()
        .filter(|entry| entry.delivered() || entry.state == "restarting")
    {
        let part = progress.entry(entry.update_domain.clone()).or_default();
        part.desired += 1;
        // `status.instances` is this plan's own record, current by construction.
        part.observed_current = true;
        if entry.state == "restarting" {
            part.disrupted += 1;
            continue;
        }
        if entry.deployment != latest {
            continue;
        }
        part.updated += 1;
        match entry.state.as_str() {
            "installed" => part.available += 1,
            "failed" => {
                let reported = entry.error.as_ref().map_or_else(
                    || "reported failed".to_owned(),
                    |error| format!("{}: {}", error.code, error.message),
                );
                part.failure.get_or_insert_with(|| {
                    format!("instance {} on {}: {reported}", entry.name, entry.member)
                });
            }
            _ => part.disrupted += 1,
        }
    }
    progress
}

/// `status.rollout.phase` and message for the phase; the message names no
/// counts, so that it changes (and an Event is due) only on a transition.
fn phase_in_words(latest: u64, phase: &RolloutPhase) -> (&'static str, String) {
    match phase {
        RolloutPhase::Complete => (
            "Complete",
            format!("deployment {latest} is installed in every update domain"),
        ),
        RolloutPhase::Progressing { part } => (
            "Progressing",
            format!("deployment {latest}: updating update domain {part:?}"),
        ),
        RolloutPhase::Paused { part } => (
            "Paused",
            format!("deployment {latest}: paused at update domain {part:?} (spec.paused)"),
        ),
        RolloutPhase::Failed { part, cause } => (
            "Halted",
            format!("deployment {latest}: halted in update domain {part:?}: {cause}"),
        ),
    }
}

/// The Event of entering `phase` (none for completion: the plan's Ready says it).
fn transition_event(plan: &str, phase: &RolloutPhase, message: &str) -> Option<PlannedEvent> {
    let (warning, reason) = match phase {
        RolloutPhase::Complete => return None,
        RolloutPhase::Progressing { .. } => (false, "DomainUpdating"),
        RolloutPhase::Paused { .. } => (false, "RolloutPaused"),
        RolloutPhase::Failed { .. } => (true, "DomainFailed"),
    };
    Some(PlannedEvent {
        warning,
        reason: reason.to_owned(),
        note: format!("DeploymentPlan {plan}: {message}"),
    })
}

/// One row of `status.rollout.domains`.
fn domain_row(
    name: &str,
    state: &PartState,
    progress: &BTreeMap<String, PartProgress>,
) -> DomainRollout {
    let part = progress.get(name).cloned().unwrap_or_default();
    DomainRollout {
        name: name.to_owned(),
        state: state.to_string(),
        installed: format!("{}/{}", part.available, part.desired),
        cause: match state {
            PartState::Failed { cause } => cause.clone(),
            _ => String::new(),
        },
    }
}

/// Whether `domain_order` can be used: no domain twice, no empty name.
pub(super) fn check_domain_order(plan: &str, domain_order: &[String]) -> Result<(), String> {
    rollout_order(std::iter::empty(), domain_order)
        .map(|_| ())
        .map_err(|error| {
            format!("DeploymentPlan {plan}: spec.deployment.rollout.domainOrder: {error}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, domain: &str, deployment: u64, state: &str) -> InstanceStatus {
        InstanceStatus {
            name: name.to_owned(),
            member: format!("{domain}-0"),
            update_domain: domain.to_owned(),
            deployment,
            state: state.to_owned(),
            error: None,
        }
    }

    #[test]
    fn a_domain_with_an_instance_being_restarted_is_not_done_and_a_stopped_one_does_not_hold_it() {
        let progress = domain_progress(
            &[
                entry("web-0", "a", 2, "installed"),
                entry("web-1", "a", 2, "restarting"),
                entry("web-2", "b", 2, "installed"),
                entry("web-3", "b", 1, "stopped"),
            ],
            2,
        );
        assert!(!progress["a"].done(), "{:?}", progress["a"]);
        assert!(progress["b"].done(), "{:?}", progress["b"]);
    }
}
