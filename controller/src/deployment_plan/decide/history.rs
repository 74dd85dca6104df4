//! The plan's deployment history (`status.deployments`): one record per
//! deployment revision, saying what that revision deploys.
//!
//! A revision's record is written in the pass that takes the revision, from
//! the spec that pass saw, and never changed afterwards: an instance that
//! still runs revision 3 is delivered revision 3's payload coordinates even
//! after the spec moved on. A record is kept while any `status.instances`
//! entry or open operation (`PENDING`, `PENDING_APPROVAL`, `APPROVED`) uses
//! its revision, and the newest `spec.deploymentHistoryLimit` records are kept
//! besides (the latest revision is always among them).

use std::collections::BTreeSet;

use shoal_core::deploy::Operation;
use shoal_core::names::ANNOTATION_CHANGE_CAUSE;

use super::PlanObservation;
use crate::api::approval_record::ApprovalRecord;
use crate::api::deployment_plan::{ApplicationPorts, DeploymentRecord, InstanceStatus};
use crate::api::limits::{MAX_APPROVALS, MAX_CHANGE_CAUSE, MAX_DEPLOYMENT_RECORDS, clip};

/// `status.deployments` after a pass: the records kept from the last status,
/// plus a record of `latest` (taken now, for fingerprint `hash`) when it has
/// none, pruned to those in use and the newest `deploymentHistoryLimit`.
pub(super) fn deployment_records(
    obs: &PlanObservation,
    latest: u64,
    hash: &str,
    instances: &[InstanceStatus],
    operations: &[Operation],
) -> Vec<DeploymentRecord> {
    let mut records = obs.status.deployments.clone();
    if latest > 0 && !records.iter().any(|record| record.revision == latest) {
        records.push(record_of_spec(obs, latest, hash));
    }
    records.sort_by_key(|record| record.revision);
    records.dedup_by_key(|record| record.revision);
    let in_use: BTreeSet<u64> = instances
        .iter()
        .map(|entry| entry.deployment)
        .chain(
            operations
                .iter()
                .filter(|op| !op.state.is_terminal())
                .map(|op| op.revision),
        )
        .collect();
    let limit = obs.spec.deployment_history_limit.max(1) as usize;
    let newest_kept = records.len().saturating_sub(limit);
    let kept: Vec<DeploymentRecord> = records
        .into_iter()
        .enumerate()
        .filter(|(index, record)| *index >= newest_kept || in_use.contains(&record.revision))
        .map(|(_, record)| record)
        .collect();
    // The schema's bound: past it the oldest go, even in use (an instance whose record
    // is gone is reported, `swarm::decide::instances`), never the write refused whole.
    let over = kept.len().saturating_sub(MAX_DEPLOYMENT_RECORDS as usize);
    kept.into_iter().skip(over).collect()
}

/// The record of `revision`, taken from the spec as observed now.
fn record_of_spec(obs: &PlanObservation, revision: u64, hash: &str) -> DeploymentRecord {
    let deployment = &obs.spec.deployment;
    DeploymentRecord {
        revision,
        hash: hash.to_owned(),
        payloads: deployment.payloads.clone(),
        rollout: deployment.rollout.clone(),
        ports: obs
            .spec
            .applications
            .iter()
            .filter(|application| !application.ports.is_empty())
            .map(|application| ApplicationPorts {
                application: application.name.clone(),
                ports: application.ports.clone(),
            })
            .collect(),
        instances: deployment.instances,
        change_cause: obs
            .annotations
            .get(ANNOTATION_CHANGE_CAUSE)
            .map(|cause| clip(cause, MAX_CHANGE_CAUSE)),
        created: obs.now.to_string(),
        approvals: Vec::new(),
        approved_with: Vec::new(),
        refused_with: Vec::new(),
    }
}

/// Adds the approvals given in this pass (`(revision, approval)`, in order) to the
/// records of their revisions: each approver once per revision, the first time kept.
pub(super) fn record_approvals<'a>(
    records: &mut [DeploymentRecord],
    approved: impl IntoIterator<Item = (u64, &'a ApprovalRecord)>,
) {
    for (revision, approval) in approved {
        let Some(record) = records
            .iter_mut()
            .find(|record| record.revision == revision)
        else {
            continue;
        };
        let known = record
            .approvals
            .iter()
            .any(|earlier| earlier.by == approval.by && earlier.verified == approval.verified);
        // Each approver once, and at most `MAX_APPROVALS` of them: later ones are
        // still recorded on their operations (`status.operations[].approval`).
        if !known && record.approvals.len() < MAX_APPROVALS as usize {
            record.approvals.push(approval.clone());
        }
    }
}

/// Keeps the `deployment-<revision>/<hash>` items judged for the first time in this
/// pass (`(revision, item, approved)`) in their revisions' records: an approved one is
/// used up, a refused one stays refused (see `gate`).
pub(super) fn record_deployment_items(
    records: &mut [DeploymentRecord],
    items: &[(u64, String, bool)],
) {
    for (revision, item, approved) in items {
        let Some(record) = records
            .iter_mut()
            .find(|record| record.revision == *revision)
        else {
            continue;
        };
        let list = if *approved {
            &mut record.approved_with
        } else {
            &mut record.refused_with
        };
        if !list.contains(item) {
            list.push(item.clone());
        }
    }
}
