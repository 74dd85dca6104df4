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

use super::PlanObservation;
use crate::approvers::ApprovalRecord;
use crate::deployment_plan::{DeploymentRecord, InstanceStatus};

/// The annotation `kubectl rollout`-style tooling (and `kubectl annotate`)
/// uses to say why a change was made.
pub const CHANGE_CAUSE_ANNOTATION: &str = "kubernetes.io/change-cause";

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
    records
        .into_iter()
        .enumerate()
        .filter(|(index, record)| *index >= newest_kept || in_use.contains(&record.revision))
        .map(|(_, record)| record)
        .collect()
}

/// The record of `revision`, taken from the spec as observed now.
fn record_of_spec(obs: &PlanObservation, revision: u64, hash: &str) -> DeploymentRecord {
    let deployment = &obs.spec.deployment;
    DeploymentRecord {
        revision,
        hash: hash.to_owned(),
        payloads: deployment.payloads.clone(),
        rollout: deployment.rollout.clone(),
        instances: deployment.instances,
        change_cause: obs.annotations.get(CHANGE_CAUSE_ANNOTATION).cloned(),
        created: obs.now.to_string(),
        approvals: Vec::new(),
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
        if !known {
            record.approvals.push(approval.clone());
        }
    }
}
