//! Who approved a revision or an operation, as recorded in a revision's history record and
//! a plan's status: plain data both kinds' pure decisions build. Reading whether the
//! admission policy vouches for the name is I/O and lives in [`crate::approvers`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use shoal_core::names::ANNOTATION_APPROVED_BY;

/// Recorded as the approver of an annotation approval that names nobody.
pub const UNNAMED_APPROVER: &str = "unknown (no shoal.dev/approved-by)";

/// Who approved a revision or an operation, and when.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// The user who set `shoal.dev/approve` (as `shoal.dev/approved-by` named them), or
    /// `shoal-controller (<policy>)` when the approval policy let the change through.
    #[schemars(length(max = crate::api::limits::MAX_APPROVER))]
    pub by: String,
    /// Whether `by` is known to be true: the controller's own approvals, and a user's
    /// while the admission policy `shoal-approved-by` was in force. Otherwise `by` is
    /// only what the annotation claims.
    pub verified: bool,
    /// When the controller applied the approval (RFC 3339).
    #[schemars(length(max = crate::api::limits::MAX_TIMESTAMP))]
    pub at: String,
}

impl ApprovalRecord {
    /// An approval the controller made itself under the approval policy `policy`
    /// (`Automatic`, `Budget`, or why no approval was needed).
    pub fn by_policy(policy: &str, at: &str) -> ApprovalRecord {
        ApprovalRecord {
            by: format!("shoal-controller ({policy})"),
            verified: true,
            at: at.to_owned(),
        }
    }

    /// The approval written in `annotations` (`shoal.dev/approve` with
    /// `shoal.dev/approved-by`); `policy_in_force` says whether the admission policy
    /// vouches for the name.
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
        policy_in_force: bool,
        at: &str,
    ) -> ApprovalRecord {
        match annotations
            .get(ANNOTATION_APPROVED_BY)
            .map(|name| name.trim())
            .filter(|name| !name.is_empty())
        {
            // A user's text: cut to the schema's bound here, so that the record
            // compares equal to the one stored.
            Some(name) => ApprovalRecord {
                by: crate::api::limits::clip(name, crate::api::limits::MAX_APPROVER),
                verified: policy_in_force,
                at: at.to_owned(),
            },
            None => ApprovalRecord {
                by: UNNAMED_APPROVER.to_owned(),
                verified: false,
                at: at.to_owned(),
            },
        }
    }

    /// The approver as tables show it: the name, marked when it is only a claim.
    pub fn display(&self) -> String {
        if self.verified || self.by == UNNAMED_APPROVER {
            self.by.clone()
        } else {
            format!("{} (unverified)", self.by)
        }
    }
}
