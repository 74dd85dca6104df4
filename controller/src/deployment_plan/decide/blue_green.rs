//! Blue-green rollouts: step 5 of `decide` for `rollout.type: BlueGreen`.
//!
//! A new deployment revision comes up as a complete second set (green)
//! beside the instances running an earlier one (blue), and the blue set is
//! removed only once every green copy reports installed, through the gate:
//!
//! 1. **Deploying.** Every instance with a blue entry and no green one gets a
//!    `RELOCATE` to the revision, from its blue member to a green member
//!    chosen by placement among the members that run no blue copy (so the
//!    two sets never share a member, and capacity is held for both: blue
//!    members take nothing new). An instance that fits nowhere is in
//!    `status.unplaced` with the reason, and the switch waits. Unlike a
//!    plain relocation, the blue copy keeps running when its green copy is
//!    installed.
//! 2. **Switching.** Once every instance's green copy reports installed, one
//!    `DELETE` per blue entry (from its member), through the approval policy
//!    (`Manual`: `status.approveDeploymentWith` approves the switch at once).
//! 3. **Complete.** No blue entry is left.
//!
//! **Halted**: a green copy whose member reported it failed (its `RELOCATE`
//! failed as `Reported`) stops the rollout: no more green copies, no
//! switch, the blue set keeps running, a Warning `BlueGreenHalted`, until
//! the next deployment revision (retrying would fail again on the same
//! report).
//!
//! **Paused** (`spec.paused`, `kubectl shoal pause`: the user's pause, and
//! only it): no green copy is started and no switch is made while it holds a
//! rollout in `Deploying` or `Switching`; operations already approved go on,
//! and the message says where the rollout stood. A halted rollout stays
//! `Halted`.
//!
//! A new revision while one is rolling out starts over from what runs: the
//! entries of the superseded revision are blue too.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::MemberId;
use shoal_core::deploy::{
    FailureReason, InstanceId, Operation, OperationType, PlanRequest, place_plan,
};

use super::rollout::RolloutInput;
use crate::api::deployment_plan::{InstanceStatus, RolloutStatus, UnplacedInstance};
use crate::observed::ordinal_member;
use crate::planned::PlannedEvent;

/// What the blue-green step decided.
#[derive(Debug, Default)]
pub(super) struct BlueGreenDecision {
    /// The operations to plan this pass (the placement's own ones on
    /// instances without a blue entry, then the rollout's).
    pub planned: Vec<Operation>,
    /// Green copies that fit nowhere.
    pub unplaced: Vec<UnplacedInstance>,
    /// `status.rollout`.
    pub status: Option<RolloutStatus>,
    /// Events of the rollout's transitions.
    pub events: Vec<PlannedEvent>,
}

/// Whether an entry is on its way out.
fn leaving(entry: &InstanceStatus) -> bool {
    matches!(entry.state.as_str(), "removing" | "removed")
}

/// The blue-green operations of `latest` (see the module docs). `planned`
/// are the placement's operations; those on instances with a blue entry are
/// replaced by the rollout's.
pub(super) fn blue_green(
    input: &RolloutInput<'_>,
    placement: &PlanRequest,
    planned: Vec<Operation>,
) -> BlueGreenDecision {
    let RolloutInput {
        plan,
        latest,
        entries,
        operations,
        previous,
        paused,
        ..
    } = *input;
    let mut blue: BTreeMap<InstanceId, Vec<MemberId>> = BTreeMap::new();
    let mut green: BTreeMap<InstanceId, (MemberId, bool)> = BTreeMap::new();
    for entry in entries.iter().filter(|entry| !leaving(entry)) {
        let (Ok(instance), Some(member)) = (
            InstanceId::parse(plan, &entry.name),
            ordinal_member(&entry.member),
        ) else {
            continue;
        };
        if entry.deployment == latest {
            green.insert(instance, (member, entry.state == "installed"));
        } else {
            blue.entry(instance).or_default().push(member);
        }
    }
    let mut decision = BlueGreenDecision {
        planned: planned
            .into_iter()
            .filter(|op| !blue.contains_key(&op.instance))
            .collect(),
        ..BlueGreenDecision::default()
    };
    let needs_green: BTreeSet<&InstanceId> =
        blue.keys().filter(|i| !green.contains_key(*i)).collect();
    let failed_green = operations.iter().find(|op| {
        op.revision == latest
            && op.operation_type == OperationType::Relocate
            && matches!(op.reason, Some(FailureReason::Reported { .. }))
    });
    let (phase, message) = if let Some(failed) = failed_green.filter(|_| !blue.is_empty()) {
        (
            "Halted",
            format!(
                "a green copy failed ({}: {}); deployment {latest} is halted, the running set stays, until the next deployment",
                failed.id, failed.message
            ),
        )
    } else if blue.is_empty() {
        (
            "Complete",
            format!("every instance runs deployment {latest}"),
        )
    } else if needs_green.is_empty() && blue.keys().all(|i| green[i].1) {
        for (instance, members) in &blue {
            for member in members {
                decision.planned.push(Operation::planned(
                    OperationType::Delete,
                    instance.clone(),
                    Some(member.clone()),
                    None,
                    latest,
                ));
            }
        }
        (
            "Switching",
            format!(
                "every green copy of deployment {latest} is installed; the blue set is removed through the approval policy"
            ),
        )
    } else {
        let targets = green_targets(placement, &blue, &green, &needs_green);
        for instance in &needs_green {
            let from = blue[*instance].first().cloned();
            match targets.get(*instance) {
                Some(Ok(to)) => decision.planned.push(Operation::planned(
                    OperationType::Relocate,
                    (*instance).clone(),
                    from,
                    Some(to.clone()),
                    latest,
                )),
                Some(Err(reason)) => decision.unplaced.push(UnplacedInstance {
                    name: instance.to_string(),
                    reason: format!("green copy for deployment {latest}: {reason}"),
                }),
                None => {}
            }
        }
        let installed = green.values().filter(|(_, installed)| *installed).count();
        (
            "Deploying",
            format!(
                "deployment {latest} comes up beside the running set: {installed} of {} green copies installed",
                blue.len()
            ),
        )
    };
    let (phase, message) = if paused && matches!(phase, "Deploying" | "Switching") {
        // The rollout's own operations wait; the placement's (scaling) do not.
        decision
            .planned
            .retain(|op| !blue.contains_key(&op.instance));
        decision.unplaced.clear();
        (
            "Paused",
            format!(
                "deployment {latest}: paused by the user (spec.paused; `kubectl shoal resume` goes on), no green copy is started and no switch made; it stood at {phase}: {message}"
            ),
        )
    } else {
        (phase, message)
    };
    let was = previous
        .filter(|previous| previous.deployment == latest)
        .map(|previous| previous.phase.as_str());
    if was != Some(phase) && !(was.is_none() && phase == "Complete") {
        decision.events.push(PlannedEvent {
            warning: phase == "Halted",
            reason: if phase == "Paused" {
                "RolloutPaused".to_owned()
            } else {
                format!("BlueGreen{phase}")
            },
            note: format!("DeploymentPlan {plan}: {message}"),
        });
    }
    decision.status = Some(RolloutStatus {
        deployment: latest,
        phase: phase.to_owned(),
        canaries: Vec::new(),
        canaries_installed_at: None,
        message,
        domains: Vec::new(),
    });
    decision
}

/// Where each instance in `needs_green` gets its green copy: placement over
/// the members that run no blue copy, with the green copies in place
/// counted; the reason when it fits nowhere.
fn green_targets(
    placement: &PlanRequest,
    blue: &BTreeMap<InstanceId, Vec<MemberId>>,
    green: &BTreeMap<InstanceId, (MemberId, bool)>,
    needs_green: &BTreeSet<&InstanceId>,
) -> BTreeMap<InstanceId, Result<MemberId, String>> {
    let blue_members: BTreeSet<&MemberId> = blue.values().flatten().collect();
    let mut request = placement.clone();
    for member in request.members.iter_mut() {
        if blue_members.contains(&member.id) {
            member.available = false;
        }
    }
    request.in_force = green
        .iter()
        .map(|(instance, (member, _))| (instance.clone(), member.clone()))
        .collect();
    let highest = needs_green
        .iter()
        .chain(green.keys().collect::<Vec<_>>().iter())
        .map(|instance| instance.ordinal + 1)
        .max()
        .unwrap_or(0);
    request.instances = highest;
    let placed = match place_plan(&request) {
        Ok(placed) => placed,
        Err(error) => {
            return needs_green
                .iter()
                .map(|instance| ((*instance).clone(), Err(error.to_string())))
                .collect();
        }
    };
    needs_green
        .iter()
        .map(|instance| {
            let target = match placed.target.get(*instance) {
                Some(member) => Ok(member.clone()),
                None => Err(placed
                    .unplaced
                    .iter()
                    .find(|unplaced| &&unplaced.instance == instance)
                    .map_or_else(
                        || "no member outside the running set can hold it".to_owned(),
                        |unplaced| unplaced.reason.to_string(),
                    )),
            };
            ((*instance).clone(), target)
        })
        .collect()
}
