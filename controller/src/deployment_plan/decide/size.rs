//! A plan's status within its size budget (`crate::api::limits::budget`, shared with
//! the Swarm's): what goes first when the status is too large, and how many new
//! operations one pass may open.
//!
//! A plan's status holds the placement in force (one entry per instance) and
//! every open operation; neither may be dropped. What may is history: finished
//! operations and deployment records no longer in use (see
//! [`PrunableStatus`](crate::api::limits::budget::PrunableStatus) below). So that a
//! large plan (10,000 instances) keeps working rather than writing a status
//! the API server refuses, a pass opens only as many new operations as the
//! budget has room for ([`room_for_new_operations`]); the others wait, the
//! `Progressing` condition says how many and why, and they are opened as
//! earlier ones finish. When nothing is open and still nothing fits, the plan
//! is `Degraded` (`StatusTooLarge`): it cannot progress by itself.

use std::collections::BTreeSet;

use shoal_core::deploy::Operation;

use super::PlanObservation;
use super::status::set_condition;
use crate::api::deployment_plan::{DeploymentPlanStatus, InstanceStatus};
use crate::api::limits::budget::{self, PrunableStatus, entry_bytes, json_bytes};
use crate::planned::PlannedEvent;

/// A generous estimate of one operation's entry in `status.operations` (its
/// id, hash, `approveWith`, message, approver and times).
pub const OPERATION_ENTRY_BYTES: usize = 1024;

/// Room for the metadata of a plan (name, uid, labels, managedFields), beside
/// its spec and annotations, when the budget is estimated from an observation.
pub const METADATA_BYTES: usize = 8 * 1024;

/// Room for the status fields of bounded size (conditions, rollout, refusals,
/// handled requests, counters).
pub const FIXED_STATUS_BYTES: usize = 32 * 1024;

fn finished(state: &str) -> bool {
    matches!(state, "SUCCEEDED" | "FAILED")
}

/// What a plan's status loses first when it is over its size budget, one
/// entry at a time: the oldest finished operation; then the oldest deployment
/// record no instance or open operation uses (never the latest or current),
/// with its status document; then, last, the tail of `status.unplaced`
/// (recomputed every pass, so only the listing shortens: the `Ready` condition
/// still counts those instances). The placement in force (`instances`), open
/// operations and conditions never go.
impl PrunableStatus for DeploymentPlanStatus {
    fn drop_first_to_go(&mut self) -> Option<(&'static str, usize)> {
        if let Some(index) = self.operations.iter().position(|op| finished(&op.state)) {
            let gone = self.operations.remove(index);
            return Some(("operations", entry_bytes(&gone)));
        }
        let in_use = revisions_in_use(self);
        let unused = self
            .deployments
            .iter()
            .position(|record| !in_use.contains(&record.revision));
        if let Some(index) = unused {
            let gone = self.deployments.remove(index);
            let revision = gone.revision;
            let mut bytes = entry_bytes(&gone);
            self.deployment_status.retain(|document| {
                let of_gone = document.adopted_manifest_version == Some(revision);
                if of_gone {
                    bytes += entry_bytes(document);
                }
                !of_gone
            });
            return Some(("deployments", bytes));
        }
        let gone = self.unplaced.pop()?;
        Some(("unplaced", entry_bytes(&gone)))
    }
}

/// Deployment revisions whose records must stay: used by an instance or an
/// open operation, the latest and the current one.
fn revisions_in_use(status: &DeploymentPlanStatus) -> BTreeSet<u64> {
    status
        .instances
        .iter()
        .map(|entry| entry.deployment)
        .chain(
            status
                .operations
                .iter()
                .filter(|op| !finished(&op.state))
                .map(|op| op.deployment),
        )
        .chain([status.latest_deployment, status.current_deployment])
        .collect()
}

/// The status budget of the observed plan: what its spec, annotations and
/// metadata leave (an estimate; the write is fitted to the exact one).
pub(super) fn budget_of(obs: &PlanObservation) -> usize {
    let rest = json_bytes(&obs.spec) + json_bytes(&obs.annotations) + METADATA_BYTES;
    budget::status_budget(rest)
}

/// How many new operations this pass may open: each takes an operation entry
/// and may add an instance entry, within what the budget leaves beside the
/// placement in force (`instances`), the open operations (`open`), the
/// deployment records in use and one for the latest revision.
pub(super) fn room_for_new_operations(
    obs: &PlanObservation,
    instances: &[InstanceStatus],
    operations: &[Operation],
) -> usize {
    let open: Vec<&Operation> = operations
        .iter()
        .filter(|op| !op.state.is_terminal())
        .collect();
    let in_use: BTreeSet<u64> = instances
        .iter()
        .map(|entry| entry.deployment)
        .chain(open.iter().map(|op| op.revision))
        .collect();
    let records: usize = obs
        .status
        .deployments
        .iter()
        .filter(|record| in_use.contains(&record.revision))
        .map(entry_bytes)
        .sum();
    let instance_entry = instances
        .iter()
        .map(entry_bytes)
        .max()
        .unwrap_or(0)
        .max(256);
    let taken = FIXED_STATUS_BYTES
        + json_bytes(instances)
        + records
        + json_bytes(&obs.spec.deployment)
        + json_bytes(&obs.status.deployment_status)
        + open.len() * OPERATION_ENTRY_BYTES;
    budget_of(obs).saturating_sub(taken) / (OPERATION_ENTRY_BYTES + instance_entry)
}

/// Says that `deferred` new operations wait for room in the status: in the
/// `Progressing` condition while operations are open (they make room as they
/// finish), else `Degraded` (`StatusTooLarge`: nothing will make room), with a
/// Warning when that begins.
pub(super) fn note_deferred(
    obs: &PlanObservation,
    deferred: usize,
    status: &mut DeploymentPlanStatus,
    events: &mut Vec<PlannedEvent>,
) {
    if deferred == 0 {
        return;
    }
    let open = status
        .operations
        .iter()
        .filter(|op| !finished(&op.state))
        .count();
    let words = format!(
        "{deferred} operation(s) wait for room in the status: with {} instance entries and {open} open operation(s) it is near its budget of {} bytes (what the 1.5 MiB an object may take leaves beside spec and metadata)",
        status.instances.len(),
        budget_of(obs),
    );
    if open > 0 {
        set_condition(
            obs,
            status,
            "Progressing",
            true,
            "WaitingForStatusRoom",
            format!("{words}; they are opened as the open ones finish"),
        );
        return;
    }
    let message = format!(
        "DeploymentPlan {}: {words}, and none is open to make room; reduce spec.deployment.instances or what each deployment record holds",
        obs.name
    );
    let was = super::status::previous_condition(&obs.status, "Degraded")
        .is_some_and(|c| c.status == "True" && c.reason == budget::STATUS_TOO_LARGE);
    if !was {
        events.push(PlannedEvent {
            warning: true,
            reason: budget::STATUS_TOO_LARGE.to_owned(),
            note: message.clone(),
        });
    }
    set_condition(
        obs,
        status,
        "Degraded",
        true,
        budget::STATUS_TOO_LARGE,
        message.clone(),
    );
    status.phase = Some("Degraded".to_owned());
    status.last_error = Some(message);
}
