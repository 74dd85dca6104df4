//! A plan's approvals (`shoal.dev/approve: <operation-id>/<hash>[,…]` and
//! `deployment-<revision>/<hash>` items), judged by the one gate the
//! Swarm uses too (`shoal_core::gate`): this module only says where each
//! subject stands in the plan.
//!
//! * `<operation id>/<hash>` approves exactly the `PENDING_APPROVAL`
//!   operation with that id and hash. An item naming an operation approved
//!   before (or one whose record left the history: its number is never given
//!   again) is used up: it approves nothing and is not refused, so the
//!   annotation may stay. An operation withdrawn or superseded, an id the
//!   plan never had, a hash that is not the operation's: refused.
//! * `deployment-<revision>/<hash>` approves every operation of that
//!   revision awaiting approval at once, when `<hash>` is [`deployment_hash`]
//!   of exactly those operations (`status.approveDeploymentWith`). Such a set
//!   can grow after the item was written (scaling adds operations to the
//!   revision), so an item is judged once, in the first pass that reads it:
//!   its revision's record keeps it (`approvedWith` or `refusedWith`), and it
//!   is used up or stays refused while it stands.
//! * Numbers: an operation id ends in its number (`status.operationCounter`)
//!   and a deployment revision is one (`status.deploymentCounter`). An item
//!   naming a number above the counter as it was before this pass is refused
//!   and the number burnt ([`burnt`]), before this pass gives any number, so
//!   an approval written in advance never approves what comes next.
//!
//! Every refusal is one line; the refusals of one annotation value are one
//! Warning (see `decide`).

use shoal_core::deploy::{FailureReason, Operation, OperationState, operation_hash};
use shoal_core::gate::{self, Approval, Grammar, Judgement, Refusal, Standing, Subject};

use crate::api::deployment_plan::DeploymentRecord;

/// The latest numbers published, of deployment revisions and of operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counters {
    /// Every deployment number up to this one was given or burnt.
    pub deployments: u64,
    /// Every operation number up to this one was given or burnt.
    pub operations: u64,
}

/// The value of `shoal.dev/approve` that approves exactly `operation`.
pub(super) fn approval_value(operation: &Operation) -> String {
    gate::approval_value(
        &operation_subject(&operation.id),
        &operation_hash(operation),
    )
}

fn operation_subject(id: &str) -> Subject {
    Subject::Operation {
        id: id.to_owned(),
        number: gate::operation_number(id),
    }
}

/// The counters after the refusals of `value` burnt the numbers they name
/// above `published` (see the module docs). Call before the pass gives numbers.
pub(super) fn burnt(value: Option<&str>, published: Counters) -> Counters {
    let mut counters = published;
    let Some(value) = value else {
        return counters;
    };
    for item in gate::parse(Grammar::Plan, value) {
        let refusal = match item {
            Err(refusal) => refusal,
            Ok(approval) => {
                match gate::published_before(&approval, published_of(&approval.subject, published))
                {
                    Err(refusal) => refusal,
                    Ok(()) => continue,
                }
            }
        };
        let counter = match &refusal {
            Refusal::Malformed { text, .. } if text.starts_with(gate::DEPLOYMENT_PREFIX) => {
                &mut counters.deployments
            }
            Refusal::Future {
                approval:
                    Approval {
                        subject: Subject::Deployment(_),
                        ..
                    },
                ..
            } => &mut counters.deployments,
            _ => &mut counters.operations,
        };
        *counter = gate::burn(*counter, [&refusal]);
    }
    counters
}

fn published_of(subject: &Subject, published: Counters) -> u64 {
    match subject {
        Subject::Deployment(_) => published.deployments,
        _ => published.operations,
    }
}

/// What the approval annotation did in this pass.
#[derive(Debug, Default)]
pub(super) struct Judged {
    /// Indices of the operations approved now.
    pub approved: Vec<usize>,
    /// Indices of the operations approved now that wait for a maintenance window: left
    /// in their state (the approval is recorded by the caller).
    pub held: Vec<usize>,
    /// Why each refused item was refused, one line each.
    pub refused: Vec<String>,
    /// `deployment-<revision>/<hash>` items judged now for the first time:
    /// (revision, item, approved).
    pub deployment_items: Vec<(u64, String, bool)>,
}

/// Applies the approval annotation `value` to `operations`, with the
/// counters as published before this pass and the deployment records
/// (which remember the deployment items judged before). An operation `hold` names is
/// approved but not advanced: it waits for a maintenance window (see `pass`).
pub(super) fn apply_approvals(
    plan: &str,
    value: &str,
    operations: &mut [Operation],
    (published, records): (Counters, &[DeploymentRecord]),
    hold: &dyn Fn(&Operation) -> bool,
) -> Judged {
    let mut judged = Judged::default();
    for item in gate::parse(Grammar::Plan, value) {
        let approval = match item {
            Ok(approval) => approval,
            Err(refusal) => {
                judged.refused.push(refusal.to_string());
                continue;
            }
        };
        let numbers = published_of(&approval.subject, published);
        let judgement = match &approval.subject {
            Subject::Deployment(revision) => {
                let record = records.iter().find(|record| record.revision == *revision);
                let standing = deployment_standing(&approval, *revision, operations, record);
                let first_time = record.is_none_or(|record| {
                    !record.approved_with.contains(&approval.text)
                        && !record.refused_with.contains(&approval.text)
                });
                let judgement = gate::judge(&approval, numbers, standing);
                if first_time && record.is_some() {
                    judged.deployment_items.push((
                        *revision,
                        approval.text.clone(),
                        judgement == Judgement::Approves,
                    ));
                }
                if judgement == Judgement::Approves {
                    let (approved, held) = approve_deployment(*revision, operations, hold);
                    judged.approved.extend(approved);
                    judged.held.extend(held);
                }
                judgement
            }
            Subject::Operation { id, .. } => {
                let position = operations.iter().position(|op| op.id == *id);
                let standing = position.map_or_else(
                    || {
                        if approval.subject.number().is_some() {
                            Standing::Forgotten
                        } else {
                            Standing::Unknown
                        }
                    },
                    |index| operation_standing(&operations[index]),
                );
                let judgement = gate::judge(&approval, numbers, standing);
                if let (Judgement::Approves, Some(index)) = (&judgement, position)
                    && hold(&operations[index])
                {
                    judged.held.push(index);
                } else if let (Judgement::Approves, Some(index)) = (&judgement, position)
                    && operations[index]
                        .advance(OperationState::Approved, "approved by shoal.dev/approve")
                        .is_ok()
                {
                    judged.approved.push(index);
                }
                judgement
            }
            Subject::Revision(_) => continue,
        };
        if let Judgement::Refused(refusal) = judgement {
            judged.refused.push(refusal.to_string());
        }
    }
    judged.refused = judged
        .refused
        .into_iter()
        .map(|why| format!("DeploymentPlan {plan}: {why}"))
        .collect();
    judged
}

/// Where one operation stands for the gate.
fn operation_standing(op: &Operation) -> Standing {
    let hash = operation_hash(op);
    match op.state {
        OperationState::PendingApproval => Standing::Pending {
            approve_with: approval_value(op),
            hash,
        },
        OperationState::Approved | OperationState::Succeeded => Standing::Approved { hash },
        // Failed after it was approved (reported, or its member left): used up.
        OperationState::Failed
            if matches!(
                op.reason,
                Some(FailureReason::Reported { .. } | FailureReason::TargetLeft)
            ) =>
        {
            Standing::Approved { hash }
        }
        OperationState::Failed | OperationState::Pending => Standing::Closed {
            why: format!(
                "it is {}{}",
                op.state,
                if op.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", op.message)
                }
            ),
        },
    }
}

/// Where a deployment item stands: used up or refused when its revision's
/// record judged it before, else the set of that revision's operations
/// awaiting approval now.
fn deployment_standing(
    approval: &Approval,
    revision: u64,
    operations: &[Operation],
    record: Option<&DeploymentRecord>,
) -> Standing {
    if let Some(record) = record {
        if record.approved_with.contains(&approval.text) {
            return Standing::Approved {
                hash: approval.hash.clone(),
            };
        }
        if record.refused_with.contains(&approval.text) {
            return Standing::Closed {
                why: "it was refused when first read, and an approval of a set of operations counts only for the set waiting when it is read".to_owned(),
            };
        }
    }
    match deployment_hash(operations, revision) {
        Some(hash) => Standing::Pending {
            approve_with: deployment_approval_value(revision, &hash),
            hash,
        },
        None => Standing::Closed {
            why: if record.is_some() {
                format!("no operation of deployment {revision} waits for approval")
            } else {
                format!(
                    "the plan keeps no record of deployment {revision}: it is not the latest and nothing of it waits"
                )
            },
        },
    }
}

/// The hash of the operations of `revision` awaiting approval (their ids and
/// hashes), `None` when none waits.
pub(super) fn deployment_hash(operations: &[Operation], revision: u64) -> Option<String> {
    let lines: Vec<String> = operations
        .iter()
        .filter(|op| op.revision == revision && op.state == OperationState::PendingApproval)
        .map(|op| format!("{}={}", op.id, operation_hash(op)))
        .collect();
    if lines.is_empty() {
        return None;
    }
    shoal_core::JobSet::parse(lines)
        .ok()
        .map(|set| shoal_core::slice::canonical_hash(&set))
}

/// The value of `shoal.dev/approve` approving every waiting operation of `revision`.
pub(super) fn deployment_approval_value(revision: u64, hash: &str) -> String {
    gate::approval_value(&Subject::Deployment(revision), hash)
}

/// Approves every operation of `revision` awaiting approval; the indices of those
/// advanced, and of those `hold` keeps waiting for a window.
fn approve_deployment(
    revision: u64,
    operations: &mut [Operation],
    hold: &dyn Fn(&Operation) -> bool,
) -> (Vec<usize>, Vec<usize>) {
    let mut approved = Vec::new();
    let mut held = Vec::new();
    for (index, op) in operations.iter_mut().enumerate() {
        if op.revision != revision || op.state != OperationState::PendingApproval {
            continue;
        }
        if hold(op) {
            held.push(index);
        } else if op
            .advance(
                OperationState::Approved,
                "approved with its deployment by shoal.dev/approve",
            )
            .is_ok()
        {
            approved.push(index);
        }
    }
    (approved, held)
}
