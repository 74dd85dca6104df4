//! Approvals of single operations: `shoal.dev/approve: <operation-id>/<hash>[,…]`
//! on the plan.
//!
//! Each item approves exactly the `PENDING_APPROVAL` operation with that id
//! whose hash ([`operation_hash`]) is the one named, through
//! `shoal_core::deploy::operation::approve`. An item naming an operation
//! that was approved already (by this annotation in an earlier pass, or by
//! the policy) changes nothing and is not refused, so the annotation may
//! stay. Every other item (malformed, unknown id, a hash that is not that
//! operation's, an operation that is not awaiting approval such as a
//! superseded one) is refused; the refusals of one annotation value are one
//! Warning (see `decide`).
//!
//! An item `deployment-<revision>/<hash>` approves at once every operation
//! of that deployment revision awaiting approval, when `<hash>` is
//! [`deployment_hash`] of exactly those operations (as
//! `status.approveDeploymentWith` gives it): if the set changed
//! since it was reviewed, the hash differs and the item is refused. When
//! none of that revision's operations waits any more, the item approves
//! nothing and is not refused. The Swarm's gate parses `<revision>/<hash>`;
//! operation ids are another grammar, so the parsing here is its own.

use shoal_core::deploy::operation::{ApprovalError, approve};
use shoal_core::deploy::{FailureReason, Operation, OperationState, operation_hash};
use shoal_core::names::ANNOTATION_APPROVE;

/// The value of `shoal.dev/approve` that approves exactly `operation`.
pub(super) fn approval_value(operation: &Operation) -> String {
    format!("{}/{}", operation.id, operation_hash(operation))
}

/// Applies the approval annotation `value` to `operations`; returns the
/// indices approved now and why the other items were refused (empty when
/// none was).
pub(super) fn apply_approvals(
    plan: &str,
    value: &str,
    operations: &mut [Operation],
) -> (Vec<usize>, Vec<String>) {
    let mut approved = Vec::new();
    let mut refused = Vec::new();
    for item in value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        let whole = item
            .strip_prefix(DEPLOYMENT_PREFIX)
            .and_then(|rest| rest.split_once('/'));
        if let Some((revision, hash)) = whole {
            match approve_deployment(item, revision, hash, operations) {
                Ok(indices) => approved.extend(indices),
                Err(why) => refused.push(why),
            }
            continue;
        }
        match approve_one(item, operations) {
            Ok(Some(index)) => approved.push(index),
            Ok(None) => {}
            Err(why) => refused.push(why),
        }
    }
    if value.trim().is_empty() {
        refused.push(format!(
            "DeploymentPlan {plan}: {ANNOTATION_APPROVE} is empty; it takes `<operation id>/<hash>` items, as status.operations[].approveWith gives them"
        ));
    }
    let refused = refused
        .into_iter()
        .map(|why| format!("DeploymentPlan {plan}: {ANNOTATION_APPROVE}: {why}"))
        .collect();
    (approved, refused)
}

/// Prefix of an item approving a whole deployment revision.
const DEPLOYMENT_PREFIX: &str = "deployment-";

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
    format!("{DEPLOYMENT_PREFIX}{revision}/{hash}")
}

/// A `deployment-<revision>/<hash>` item: the indices approved now.
fn approve_deployment(
    item: &str,
    revision: &str,
    hash: &str,
    operations: &mut [Operation],
) -> Result<Vec<usize>, String> {
    let revision: u64 = revision
        .parse()
        .map_err(|_| format!("{item:?} is not `deployment-<revision>/<hash>`"))?;
    let Some(expected) = deployment_hash(operations, revision) else {
        return Ok(Vec::new());
    };
    if expected != hash {
        return Err(format!(
            "{item:?}: the operations of deployment {revision} awaiting approval are not those reviewed (their hash is {expected}); review them again"
        ));
    }
    let mut approved = Vec::new();
    for (index, op) in operations.iter_mut().enumerate() {
        if op.revision == revision
            && op.state == OperationState::PendingApproval
            && op
                .advance(
                    OperationState::Approved,
                    "approved with its deployment by shoal.dev/approve",
                )
                .is_ok()
        {
            approved.push(index);
        }
    }
    Ok(approved)
}

/// One `<id>/<hash>` item: `Ok(Some(index))` approved now, `Ok(None)`
/// approved before, `Err(why)` refused.
fn approve_one(item: &str, operations: &mut [Operation]) -> Result<Option<usize>, String> {
    let (id, hash) = item.split_once('/').ok_or_else(|| {
        format!(
            "{item:?} is not `<operation id>/<hash>` (as status.operations[].approveWith gives it)"
        )
    })?;
    let Some(position) = operations.iter().position(|operation| operation.id == id) else {
        return Err(format!(
            "{item:?} names operation {id:?}, which the plan does not have"
        ));
    };
    let operation = &operations[position];
    if operation_hash(operation) != hash {
        return Err(format!(
            "{item:?}: {hash:?} is not the hash of operation {id} (it is {}); an approval must name the operation as it was reviewed",
            operation_hash(operation)
        ));
    }
    let superseded = operation.reason == Some(FailureReason::Superseded);
    if matches!(
        operation.state,
        OperationState::Approved | OperationState::Succeeded | OperationState::Failed
    ) && !superseded
    {
        return Ok(None);
    }
    approve(operations, hash, "approved by shoal.dev/approve")
        .map(Some)
        .map_err(|error| match error {
            ApprovalError::NotAwaitingApproval { id, state } => format!(
                "operation {id} is {state}{}, not awaiting approval",
                if superseded {
                    format!(" ({})", operations[position].message)
                } else {
                    String::new()
                }
            ),
            other => format!("{item:?}: {other}"),
        })
}
