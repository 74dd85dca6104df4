//! Operations on plan instances: their types, their enforced state machine,
//! the hash an approval names, and the operations a placement change needs.
//!
//! # States
//!
//! Every operation starts `PENDING` and moves only along this table;
//! [`OperationState::advance`] refuses anything else, naming both states:
//!
//! | from               | to                                                                        |
//! |--------------------|---------------------------------------------------------------------------|
//! | `PENDING`          | `PENDING_APPROVAL` (needs review), `APPROVED` (the approval policy lets it through), `FAILED` (superseded) |
//! | `PENDING_APPROVAL` | `APPROVED`, `FAILED` (superseded or withdrawn)                            |
//! | `APPROVED`         | `SUCCEEDED`, `FAILED`                                                     |
//! | `SUCCEEDED`        | nothing (terminal)                                                        |
//! | `FAILED`           | nothing (terminal)                                                        |
//!
//! A state never "moves" to itself: a controller re-applying a step checks
//! the state first, so a repeated approval is visible rather than silent.
//!
//! # The operation hash
//!
//! [`operation_hash`] is `sha256:` + hex SHA-256 of the operation's identity
//! (id, type, instance, from, to, deployment revision; not its state or
//! message), so an approval naming the hash approves exactly the operation a
//! reviewer saw and never a later one for the same instance.
//!
//! # Operations for a placement change
//!
//! [`operations_for`] compares the placement in force with a target, one
//! operation per changed instance, in instance order:
//!
//! * in the target only: `CREATE` on its new member;
//! * in both on different members: `RELOCATE` from the old to the new member
//!   (the new placement runs the new payload revision, so a relocation also
//!   carries any update);
//! * in both on one member with another payload revision (or none known):
//!   `UPDATE` there;
//! * in force only: `DELETE` from its member.
//!
//! Every operation carries the new deployment revision. `STOP` and `RESTART`
//! are asked for by users and never derived from placements.
//!
//! # Approval and supersession
//!
//! [`approve`] approves the one `PENDING_APPROVAL` operation whose
//! [`operation_hash`] an approval names; a hash naming no operation (the
//! reviewed one was superseded, or never existed) or one not awaiting
//! approval is refused, so an approval never stands for anything but what
//! was reviewed. [`supersede`] fails every operation of an older revision
//! that has not been approved yet: a new deployment replaces them, and a
//! failed operation never blocks the plan.
//!
//! # Why an operation failed
//!
//! A `FAILED` operation carries a [`FailureReason`] beside its message, so
//! tools and reviewers read the cause as a field rather than from text:
//! `Superseded` (a newer deployment revision replaced it before approval),
//! `Withdrawn` (the plan no longer needs it), `Reported { code }` (its member
//! reported the instance failed, with the member's error code), `TargetLeft`
//! (the member it went to left before reporting), `Unfit` (its target
//! could not hold the instance when it was approved). [`Operation::fail`]
//! sets both.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::UnknownName;
use super::placement::InstanceId;
use crate::member::MemberId;
use crate::slice::HASH_PREFIX;

/// What an operation does to one instance. Written `CREATE`, `UPDATE`, …
/// (in serde and for users).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OperationType {
    /// Install a new instance on a member.
    Create,
    /// Install another payload revision in place.
    Update,
    /// Move an instance to another member (make-before-break).
    Relocate,
    /// Stop an instance's process (user operation).
    Stop,
    /// Restart an instance's process (user operation).
    Restart,
    /// Remove an instance from its member.
    Delete,
}

impl OperationType {
    /// Every type, in declaration order.
    pub const ALL: [OperationType; 6] = [
        OperationType::Create,
        OperationType::Update,
        OperationType::Relocate,
        OperationType::Stop,
        OperationType::Restart,
        OperationType::Delete,
    ];

    /// `CREATE`, `UPDATE`, … as shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationType::Create => "CREATE",
            OperationType::Update => "UPDATE",
            OperationType::Relocate => "RELOCATE",
            OperationType::Stop => "STOP",
            OperationType::Restart => "RESTART",
            OperationType::Delete => "DELETE",
        }
    }
}

impl fmt::Display for OperationType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses `CREATE`, `UPDATE`, … in any letter case (`relocate` works too).
impl FromStr for OperationType {
    type Err = UnknownName;

    fn from_str(text: &str) -> Result<OperationType, UnknownName> {
        OperationType::ALL
            .into_iter()
            .find(|kind| kind.as_str().eq_ignore_ascii_case(text))
            .ok_or_else(|| UnknownName {
                what: "operation type",
                text: text.to_owned(),
                expected: "CREATE, UPDATE, RELOCATE, STOP, RESTART, DELETE",
            })
    }
}

/// Where an operation is in its life (see the module docs for the table).
/// Written `PENDING`, `PENDING_APPROVAL`, … (in serde and for users).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OperationState {
    /// Decided, not yet through the approval policy.
    Pending,
    /// Waiting for a reviewer to approve it.
    PendingApproval,
    /// Approved; may be carried out.
    Approved,
    /// Carried out (terminal).
    Succeeded,
    /// Failed, superseded or withdrawn (terminal).
    Failed,
}

/// A transition outside the table, naming both states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an operation in state {from} cannot become {to}")]
pub struct InvalidTransition {
    /// The current state.
    pub from: OperationState,
    /// The state asked for.
    pub to: OperationState,
}

impl OperationState {
    /// Every state, in declaration order.
    pub const ALL: [OperationState; 5] = [
        OperationState::Pending,
        OperationState::PendingApproval,
        OperationState::Approved,
        OperationState::Succeeded,
        OperationState::Failed,
    ];

    /// `PENDING`, `PENDING_APPROVAL`, … as shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationState::Pending => "PENDING",
            OperationState::PendingApproval => "PENDING_APPROVAL",
            OperationState::Approved => "APPROVED",
            OperationState::Succeeded => "SUCCEEDED",
            OperationState::Failed => "FAILED",
        }
    }

    /// Whether the table allows `self → to`.
    pub fn can_become(self, to: OperationState) -> bool {
        use OperationState::*;
        matches!(
            (self, to),
            (Pending, PendingApproval | Approved | Failed)
                | (PendingApproval, Approved | Failed)
                | (Approved, Succeeded | Failed)
        )
    }

    /// `to` when the table allows `self → to`, else the refused transition.
    pub fn advance(self, to: OperationState) -> Result<OperationState, InvalidTransition> {
        if self.can_become(to) {
            Ok(to)
        } else {
            Err(InvalidTransition { from: self, to })
        }
    }

    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(self, OperationState::Succeeded | OperationState::Failed)
    }
}

impl fmt::Display for OperationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses `PENDING`, `PENDING_APPROVAL`, … in any letter case.
impl FromStr for OperationState {
    type Err = UnknownName;

    fn from_str(text: &str) -> Result<OperationState, UnknownName> {
        OperationState::ALL
            .into_iter()
            .find(|state| state.as_str().eq_ignore_ascii_case(text))
            .ok_or_else(|| UnknownName {
                what: "operation state",
                text: text.to_owned(),
                expected: "PENDING, PENDING_APPROVAL, APPROVED, SUCCEEDED, FAILED",
            })
    }
}

/// Why an operation ended `FAILED` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// A newer deployment revision replaced it before it was approved.
    Superseded,
    /// The plan no longer needs it (its deployment, members or instance
    /// count changed while it waited), or a user request behind it was
    /// overtaken.
    Withdrawn,
    /// Its member reported the instance failed, with this error code.
    Reported {
        /// The member's error code, e.g. `ExitCode1`.
        code: String,
    },
    /// The member it went to left before reporting the instance installed.
    TargetLeft,
    /// When it was approved, its target member could not hold the instance
    /// (not a member, or a requirement it does not meet): it never ran.
    Unfit,
}

impl FailureReason {
    /// `Superseded`, `Withdrawn`, `Reported`, `TargetLeft` or `Unfit`, as
    /// `status.operations[].reason` writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            FailureReason::Superseded => "Superseded",
            FailureReason::Withdrawn => "Withdrawn",
            FailureReason::Reported { .. } => "Reported",
            FailureReason::TargetLeft => "TargetLeft",
            FailureReason::Unfit => "Unfit",
        }
    }

    /// The member's error code of a `Reported` failure.
    pub fn code(&self) -> Option<&str> {
        match self {
            FailureReason::Reported { code } => Some(code),
            _ => None,
        }
    }

    /// The reason written as [`FailureReason::kind`] (and, for `Reported`,
    /// its code); `None` for a kind that is not one of these.
    pub fn from_kind(kind: &str, code: Option<&str>) -> Option<FailureReason> {
        match kind {
            "Superseded" => Some(FailureReason::Superseded),
            "Withdrawn" => Some(FailureReason::Withdrawn),
            "Reported" => Some(FailureReason::Reported {
                code: code.unwrap_or_default().to_owned(),
            }),
            "TargetLeft" => Some(FailureReason::TargetLeft),
            "Unfit" => Some(FailureReason::Unfit),
            _ => None,
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureReason::Reported { code } => write!(f, "Reported ({code})"),
            other => f.write_str(other.kind()),
        }
    }
}

/// One operation on one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Unique within the plan; [`Operation::planned`] derives it.
    pub id: String,
    /// What it does.
    pub operation_type: OperationType,
    /// The instance it acts on.
    pub instance: InstanceId,
    /// The member the instance is on before (none for `CREATE`).
    pub from: Option<MemberId>,
    /// The member the instance is on after (none for `DELETE`).
    pub to: Option<MemberId>,
    /// The deployment revision it belongs to.
    pub revision: u64,
    /// Where it is in its life.
    pub state: OperationState,
    /// Why it is in that state, for users.
    pub message: String,
    /// Why it failed, once `FAILED` through [`Operation::fail`].
    pub reason: Option<FailureReason>,
    /// The user request it was made for (`shoal.dev/operate`), if any;
    /// operations a placement change needs have none.
    pub request: Option<String>,
}

impl Operation {
    /// A `PENDING` operation with the id `<type>-<instance>-r<revision>`
    /// (type in lower case, e.g. `relocate-web-2-r3`);
    /// [`Operation::numbered`] makes it unique within the plan.
    pub fn planned(
        operation_type: OperationType,
        instance: InstanceId,
        from: Option<MemberId>,
        to: Option<MemberId>,
        revision: u64,
    ) -> Operation {
        Operation {
            id: format!(
                "{}-{instance}-r{revision}",
                operation_type.as_str().to_ascii_lowercase()
            ),
            operation_type,
            instance,
            from,
            to,
            revision,
            state: OperationState::Pending,
            message: String::new(),
            reason: None,
            request: None,
        }
    }

    /// The same operation with its number appended to its id:
    /// `<type>-<instance>-r<revision>-<number>` (e.g. `create-web-0-r3-7`).
    /// The number comes from a counter the plan keeps in its status and is
    /// never given twice, so neither is an id, even after the history that
    /// held it was pruned: an approval naming an earlier operation can never
    /// match a later one (see `crate::gate`).
    pub fn numbered(mut self, number: u64) -> Operation {
        self.id = format!("{}-{number}", self.id);
        self
    }

    /// Moves to `to` with a message, or refuses (and changes nothing).
    pub fn advance(
        &mut self,
        to: OperationState,
        message: impl Into<String>,
    ) -> Result<(), InvalidTransition> {
        self.state = self.state.advance(to)?;
        self.message = message.into();
        Ok(())
    }

    /// Moves to `FAILED` for `reason` with a message, or refuses (and
    /// changes nothing).
    pub fn fail(
        &mut self,
        reason: FailureReason,
        message: impl Into<String>,
    ) -> Result<(), InvalidTransition> {
        self.advance(OperationState::Failed, message)?;
        self.reason = Some(reason);
        Ok(())
    }
}

/// `sha256:<hex>` of the operation's identity (see the module docs). The
/// canonical text is one `name=<byte length>:<value>` line per field, so no
/// value can forge another field's boundary; an absent member is empty.
pub fn operation_hash(operation: &Operation) -> String {
    let member = |member: &Option<MemberId>| member.as_ref().map(ToString::to_string);
    let fields = [
        ("id", operation.id.clone()),
        ("type", operation.operation_type.to_string()),
        ("instance", operation.instance.to_string()),
        ("from", member(&operation.from).unwrap_or_default()),
        ("to", member(&operation.to).unwrap_or_default()),
        ("revision", operation.revision.to_string()),
    ];
    let mut hasher = Sha256::new();
    hasher.update(b"shoal.dev/operation v1\n");
    for (name, value) in fields {
        hasher.update(format!("{name}={}:{value}\n", value.len()).as_bytes());
    }
    format!("{HASH_PREFIX}{}", hex::encode(hasher.finalize()))
}

/// The operations that turn `in_force` into `target` (see the module docs),
/// `PENDING`, in instance order. `revisions_in_force` gives the payload
/// revision each instance in force runs.
pub fn operations_for(
    in_force: &BTreeMap<InstanceId, MemberId>,
    target: &BTreeMap<InstanceId, MemberId>,
    revisions_in_force: &BTreeMap<InstanceId, u64>,
    new_revision: u64,
) -> Vec<Operation> {
    let instances: BTreeSet<&InstanceId> = in_force.keys().chain(target.keys()).collect();
    instances
        .into_iter()
        .filter_map(|instance| {
            let before = in_force.get(instance);
            let after = target.get(instance);
            let operation_type = match (before, after) {
                (None, Some(_)) => OperationType::Create,
                (Some(_), None) => OperationType::Delete,
                (Some(old), Some(new)) if old != new => OperationType::Relocate,
                (Some(_), Some(_)) if revisions_in_force.get(instance) != Some(&new_revision) => {
                    OperationType::Update
                }
                _ => return None,
            };
            Some(Operation::planned(
                operation_type,
                instance.clone(),
                before.cloned(),
                after.cloned(),
                new_revision,
            ))
        })
        .collect()
}

/// An approval that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// No operation has this hash (superseded, or never planned).
    #[error(
        "no operation has hash {hash}; it may have been superseded, review the current operations"
    )]
    Unknown {
        /// The hash named.
        hash: String,
    },
    /// The operation is not awaiting approval.
    #[error("operation {id} is {state}, not PENDING_APPROVAL")]
    NotAwaitingApproval {
        /// The operation's id.
        id: String,
        /// Its state.
        state: OperationState,
    },
}

/// Approves the operation whose [`operation_hash`] is `hash` (it must be
/// `PENDING_APPROVAL`) with `message`; returns its index.
pub fn approve(
    operations: &mut [Operation],
    hash: &str,
    message: &str,
) -> Result<usize, ApprovalError> {
    let index = operations
        .iter()
        .position(|operation| operation_hash(operation) == hash)
        .ok_or_else(|| ApprovalError::Unknown {
            hash: hash.to_owned(),
        })?;
    let operation = &mut operations[index];
    let refused = ApprovalError::NotAwaitingApproval {
        id: operation.id.clone(),
        state: operation.state,
    };
    // PENDING → APPROVED is the policy's transition, not a reviewer's.
    if operation.state != OperationState::PendingApproval {
        return Err(refused);
    }
    operation
        .advance(OperationState::Approved, message)
        .map_err(|_| refused)?;
    Ok(index)
}

/// Fails every `PENDING` or `PENDING_APPROVAL` operation of a revision
/// below `revision` ([`FailureReason::Superseded`], "superseded by revision
/// N"); returns how many.
/// Approved operations are under way and finish on their own.
pub fn supersede(operations: &mut [Operation], revision: u64) -> usize {
    let mut superseded = 0;
    for operation in operations.iter_mut().filter(|op| op.revision < revision) {
        let waiting = matches!(
            operation.state,
            OperationState::Pending | OperationState::PendingApproval
        );
        if waiting
            && operation
                .fail(
                    FailureReason::Superseded,
                    format!("superseded by revision {revision}"),
                )
                .is_ok()
        {
            superseded += 1;
        }
    }
    superseded
}
