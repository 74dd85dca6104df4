//! Who approved a change, recorded honestly.
//!
//! Kubernetes records no user on an object, so an approval annotation
//! (`shoal.dev/approve`) by itself says nothing about who wrote it. The approver
//! names themself in [`ANNOTATION_APPROVED_BY`] in the same request (`kubectl shoal
//! approve` and `approve-op` learn the name from a SelfSubjectReview and set both),
//! and the admission policy [`APPROVED_BY_POLICY`] (`manifests/admission/approvers.yaml`)
//! refuses a request that sets or changes the approval unless that name is the
//! requester's own, and refuses changing the name alone. While the policy is in
//! force the name is therefore the user who last set the approval.
//!
//! The controller cannot see which requests the policy judged, only whether it is in
//! force now: it records the name as verified only when it reads the policy and its
//! binding (Deny, failurePolicy Fail) in the pass that applies the approval. Without
//! them (not installed, or not readable, as in a namespace-scoped install) the name is
//! recorded as a claim (`verified: false`), and an approval without a name as
//! [`UNNAMED_APPROVER`]. Approvals the controller makes itself under the approval
//! policy name the controller and the policy, e.g. `shoal-controller (Automatic)`.
//! ARCHITECTURE.md ("Who approved") gives the trust argument in full.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use shoal_core::names::{ANNOTATION_APPROVE, ANNOTATION_APPROVED_BY};

use crate::api::deployment_plan::DeploymentPlanStatus;
use crate::api::swarm::SwarmStatus;

/// The admission policy (and its binding) that makes [`ANNOTATION_APPROVED_BY`] true.
pub const APPROVED_BY_POLICY: &str = "shoal-approved-by";

pub use crate::api::approval_record::{ApprovalRecord, UNNAMED_APPROVER};

/// Whether the admission policy [`APPROVED_BY_POLICY`] is in force: the policy exists
/// with `failurePolicy: Fail` (the default) and a binding of it denies. Any failure to
/// read them (not installed, not allowed, the API unavailable) answers `false`: a name
/// the controller cannot vouch for is recorded as a claim, never as verified.
pub async fn approved_by_policy_in_force(client: &Client) -> bool {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let (Ok(Some(policy)), Ok(Some(binding))) = (
        policies.get_opt(APPROVED_BY_POLICY).await,
        bindings.get_opt(APPROVED_BY_POLICY).await,
    ) else {
        return false;
    };
    policy_and_binding_deny(&policy, &binding)
}

/// The policy fails closed and the binding applies it everywhere with `Deny`.
fn policy_and_binding_deny(
    policy: &ValidatingAdmissionPolicy,
    binding: &ValidatingAdmissionPolicyBinding,
) -> bool {
    let Some(policy_spec) = &policy.spec else {
        return false;
    };
    let Some(binding_spec) = &binding.spec else {
        return false;
    };
    let fails_closed = policy_spec
        .failure_policy
        .as_deref()
        .is_none_or(|failure| failure == "Fail");
    let denies = binding_spec
        .validation_actions
        .as_ref()
        .is_some_and(|actions| actions.iter().any(|action| action == "Deny"));
    // A binding narrowed to some objects leaves the others unchecked.
    let everywhere = binding_spec.match_resources.is_none();
    policy.metadata.deletion_timestamp.is_none()
        && policy.name_any() == APPROVED_BY_POLICY
        && binding_spec.policy_name.as_deref() == Some(APPROVED_BY_POLICY)
        && fails_closed
        && denies
        && everywhere
}

/// Whether the admission policy vouches for the approver's name in a pass that may apply
/// an approval (`may_approve`, see [`swarm_may_approve`] and [`plan_may_approve`]). The
/// policy is read only then (an approval annotation stays after it was applied; reading
/// on every pass would cost two requests each), and only by a cluster-wide controller:
/// a namespace-scoped one has no right to read cluster-scoped policies (asking would
/// only be refused), so its approvers' names stay claims.
pub async fn vouched_for(client: &Client, cluster_wide: bool, may_approve: bool) -> bool {
    cluster_wide && may_approve && approved_by_policy_in_force(client).await
}

/// Whether a Swarm's approval annotation can approve anything in the next pass: only an
/// approval of the pending revision, exactly as `status.pendingRevision.approveWith`
/// gives it, ever does (the gate refuses any other).
pub fn swarm_may_approve(annotations: &BTreeMap<String, String>, status: &SwarmStatus) -> bool {
    let pending = status.pending_revision.as_ref();
    annotations
        .get(ANNOTATION_APPROVE)
        .is_some_and(|value| pending.is_some_and(|pending| value.trim() == pending.approve_with))
}

/// Whether a plan's approval annotation can approve anything in the next pass: unless
/// every item names an operation that left `PENDING_APPROVAL` already (items stay in the
/// annotation after they were applied), it may.
pub fn plan_may_approve(
    annotations: &BTreeMap<String, String>,
    status: &DeploymentPlanStatus,
) -> bool {
    let Some(value) = annotations.get(ANNOTATION_APPROVE) else {
        return false;
    };
    // An item naming an operation past PENDING_APPROVAL, or a deployment item its
    // revision's record judged already, can approve nothing more.
    let settled = |item: &str| {
        status
            .operations
            .iter()
            .any(|op| op.approve_with == item && op.state != "PENDING_APPROVAL")
            || status.deployments.iter().any(|record| {
                record.approved_with.iter().any(|used| used == item)
                    || record.refused_with.iter().any(|refused| refused == item)
            })
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .any(|item| !settled(item))
}

/// The annotations an approval request sets: `shoal.dev/approve` = `value` and, in the
/// same request (the policy refuses one without the other), `shoal.dev/approved-by` =
/// `approver`, the user the API server says the client is ([`approver_name`]). Without
/// a name the approval goes alone, and the policy, where installed, refuses it saying why.
pub fn approval_annotations(value: &str, approver: Option<&str>) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([(ANNOTATION_APPROVE.to_owned(), value.to_owned())]);
    if let Some(name) = approver {
        annotations.insert(ANNOTATION_APPROVED_BY.to_owned(), name.to_owned());
    }
    annotations
}

/// The user the API server authenticates `client` as, `None` when it would not say (a
/// server without SelfSubjectReview, Kubernetes before 1.28).
pub async fn approver_name(client: &Client) -> Option<String> {
    who_am_i(client).await.ok().filter(|name| !name.is_empty())
}

/// The user name the API server authenticates `client` as (a SelfSubjectReview).
pub async fn who_am_i(client: &Client) -> Result<String, kube::Error> {
    let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review
        .status
        .and_then(|status| status.user_info)
        .and_then(|user| user.username)
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::admissionregistration::v1::{
        MatchResources, ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec,
    };

    fn policy(failure: Option<&str>) -> ValidatingAdmissionPolicy {
        let mut policy = ValidatingAdmissionPolicy {
            spec: Some(ValidatingAdmissionPolicySpec {
                failure_policy: failure.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        };
        policy.metadata.name = Some(APPROVED_BY_POLICY.to_owned());
        policy
    }

    fn binding(actions: &[&str], narrowed: bool) -> ValidatingAdmissionPolicyBinding {
        ValidatingAdmissionPolicyBinding {
            spec: Some(ValidatingAdmissionPolicyBindingSpec {
                policy_name: Some(APPROVED_BY_POLICY.to_owned()),
                validation_actions: Some(actions.iter().map(|a| (*a).to_owned()).collect()),
                match_resources: narrowed.then(MatchResources::default),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_policy_counts_only_when_it_fails_closed_and_its_binding_denies_everywhere() {
        assert!(policy_and_binding_deny(
            &policy(None),
            &binding(&["Deny"], false)
        ));
        assert!(policy_and_binding_deny(
            &policy(Some("Fail")),
            &binding(&["Deny", "Audit"], false)
        ));
        assert!(!policy_and_binding_deny(
            &policy(Some("Ignore")),
            &binding(&["Deny"], false)
        ));
        assert!(!policy_and_binding_deny(
            &policy(None),
            &binding(&["Warn", "Audit"], false)
        ));
        assert!(!policy_and_binding_deny(
            &policy(None),
            &binding(&["Deny"], true)
        ));
    }

    #[test]
    fn a_named_approver_is_verified_only_while_the_policy_is_in_force() {
        let annotations = BTreeMap::from([
            ("shoal.dev/approve".to_owned(), "4/sha256:abc".to_owned()),
            (ANNOTATION_APPROVED_BY.to_owned(), "alice".to_owned()),
        ]);
        let vouched = ApprovalRecord::from_annotations(&annotations, true, "t");
        assert_eq!((vouched.by.as_str(), vouched.verified), ("alice", true));
        assert_eq!(vouched.display(), "alice");
        let claimed = ApprovalRecord::from_annotations(&annotations, false, "t");
        assert_eq!((claimed.by.as_str(), claimed.verified), ("alice", false));
        assert_eq!(claimed.display(), "alice (unverified)");
    }

    #[test]
    fn an_approval_that_names_nobody_is_recorded_as_unknown_even_with_the_policy() {
        let annotations = BTreeMap::from([
            ("shoal.dev/approve".to_owned(), "4/sha256:abc".to_owned()),
            (ANNOTATION_APPROVED_BY.to_owned(), "  ".to_owned()),
        ]);
        let record = ApprovalRecord::from_annotations(&annotations, true, "t");
        assert_eq!(record.by, UNNAMED_APPROVER);
        assert!(!record.verified);
    }

    fn approving(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("shoal.dev/approve".to_owned(), value.to_owned())])
    }

    #[test]
    fn a_swarm_approval_is_weighed_only_while_it_names_the_pending_revision() {
        let mut status = SwarmStatus::default();
        assert!(!swarm_may_approve(&approving("1/sha256:a"), &status));
        status.pending_revision = Some(crate::api::swarm::PendingRevision {
            revision: 2,
            hash: "sha256:b".to_owned(),
            approve_with: "2/sha256:b".to_owned(),
            summary: Default::default(),
        });
        assert!(swarm_may_approve(&approving("2/sha256:b"), &status));
        assert!(!swarm_may_approve(&approving("1/sha256:a"), &status));
        assert!(!swarm_may_approve(&BTreeMap::new(), &status));
    }

    #[test]
    fn a_plan_approval_is_weighed_until_every_item_names_a_settled_operation() {
        let operation = |approve_with: &str, state: &str| {
            let id = approve_with.split('/').next().unwrap_or_default();
            serde_json::from_value::<crate::api::deployment_plan::OperationStatus>(
                serde_json::json!({
                    "id": id, "type": "CREATE", "instance": "web-0", "deployment": 1,
                    "state": state, "hash": "", "approveWith": approve_with,
                }),
            )
            .expect("an operation status")
        };
        let status = DeploymentPlanStatus {
            operations: vec![
                operation("create-web-0-r1/sha256:a", "SUCCEEDED"),
                operation("create-web-1-r1/sha256:b", "PENDING_APPROVAL"),
            ],
            ..Default::default()
        };
        assert!(!plan_may_approve(
            &approving("create-web-0-r1/sha256:a"),
            &status
        ));
        assert!(plan_may_approve(
            &approving("create-web-0-r1/sha256:a,create-web-1-r1/sha256:b"),
            &status
        ));
        assert!(plan_may_approve(
            &approving("deployment-1/sha256:c"),
            &status
        ));
        assert!(!plan_may_approve(&BTreeMap::new(), &status));
    }

    #[test]
    fn the_controllers_own_approvals_name_the_policy() {
        let record = ApprovalRecord::by_policy("Automatic", "2026-01-01T00:00:00Z");
        assert_eq!(record.display(), "shoal-controller (Automatic)");
        assert!(record.verified);
    }
}
