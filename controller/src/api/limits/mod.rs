//! Size budgets of the two custom resources, in one place.
//!
//! Every list, map and string of the `Swarm` and `DeploymentPlan` schemas takes its
//! bound from a constant here (`#[schemars(length(max = ...))]`,
//! `extend("maxProperties" = ...)`), for two reasons:
//!
//! * A real API server estimates each CEL rule's worst-case cost from the bounds of
//!   what the rule can reach (and of every list around it); a list, map or string
//!   without a bound counts as large as a request can be (3 MiB), which made the
//!   DeploymentPlan CRD's rollout rule too expensive to install. With bounds, every rule
//!   is cheap by construction.
//! * Each entry the controller writes has a known largest size, so the size budgets
//!   of the status (history entries, operations, instances, approvals, refusals,
//!   reports) can be stated and kept.
//!
//! The counts follow from what the controller writes (a plan has at most
//! [`shoal_core::deploy::placement::MAX_INSTANCES`] instances, twice that during a blue-green
//! switch; a Swarm at most [`crate::api::swarm::MAX_MEMBERS`] members); the strings from the
//! names Kubernetes allows and from the controller's own texts. Text that comes from
//! users or members (annotation values, a change-cause, an approver's name, a member's
//! report) is cut to its bound by [`cut_to_schema`] before a status is written, which
//! applies the generated schema itself, so the schema and what the controller writes
//! cannot disagree.
//!
//! A bound on counts is not a bound on bytes: 10,000 instances of the longest names
//! exceed what one object can hold (etcd's 1.5 MiB, [`MAX_OBJECT_BYTES`]). Keeping the
//! whole object under that is the byte budget's job ([`budget`]). Both writers of a
//! status (the Swarm's and the plan's) pass it through the one [`fit`], which applies
//! the schema's bounds and then the byte budget, and record a write the server still
//! refuses for its size with `crate::cluster::too_large::record_too_large`.

pub mod budget;

use std::sync::LazyLock;

use serde_json::Value;

/// Largest object etcd stores by default (`--max-request-bytes`, 1.5 MiB).
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// Largest request body a real API server reads (3 MiB).
pub const MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;

// ---- strings ----------------------------------------------------------------------

/// An object name (DNS subdomain): Swarms, plans, pools, pods, ConfigMaps.
pub const MAX_NAME: u32 = 253;

/// A job key, in bytes (the controller refuses longer ones too).
pub const MAX_JOB_KEY: u32 = shoal_core::job::MAX_KEY_BYTES as u32;

/// A DNS label or a label value: application names, capability types.
pub const MAX_LABEL: u32 = 63;

/// A label or annotation key: an optional DNS-subdomain prefix, `/`, a 63-character name.
pub const MAX_QUALIFIED_NAME: u32 = MAX_NAME + 1 + MAX_LABEL;

/// A plan instance name, `<plan>-<n>` (`n` a u64 in decimal).
pub const MAX_INSTANCE_NAME: u32 = MAX_NAME + 1 + 20;

/// An operation id, `<type>-<instance>-r<deployment>` with `.<k>` on a repeat.
pub const MAX_OPERATION_ID: u32 = 16 + MAX_INSTANCE_NAME + 2 + 20 + 1 + 20;

/// A hash as the controller writes it (`sha256:` and 64 hex digits) or a fingerprint.
pub const MAX_HASH: u32 = 128;

/// An approval value, `<revision>/<hash>` or `deployment-<revision>/<hash>`, or an
/// operation's `approveWith` (`<operation id>/<hash>`).
pub const MAX_APPROVE_VALUE: u32 = MAX_OPERATION_ID + 1 + MAX_HASH;

/// An RFC 3339 timestamp.
pub const MAX_TIMESTAMP: u32 = 64;

/// One word of the controller's: a phase, a state, a condition status, a type, `2/3`.
pub const MAX_WORD: u32 = 64;

/// A condition's type (as `metav1.Condition`).
pub const MAX_CONDITION_TYPE: u32 = 316;

/// A condition's reason (as `metav1.Condition`).
pub const MAX_REASON: u32 = 1024;

/// A condition's message or `lastError` (as `metav1.Condition`).
pub const MAX_MESSAGE: u32 = 32 * 1024;

/// A message of one entry among many: an operation's, a halted pool's cause, why an
/// instance fits nowhere, an annotation value the controller refused.
pub const MAX_ENTRY_MESSAGE: u32 = 1024;

/// An error code a member or the controller reports (`ExitCode1`, `SpawnFailed`).
pub const MAX_ERROR_CODE: u32 = 128;

/// An instance error's message, as a member reports it (in bytes there, so at most as
/// many characters here).
pub const MAX_REPORT_MESSAGE: u32 = shoal_core::slice::MAX_REPORT_MESSAGE_BYTES as u32;

/// Who approved: a user name (from `shoal.dev/approved-by`) or
/// `shoal-controller (<policy>)`.
pub const MAX_APPROVER: u32 = 512;

/// A plan's `kubernetes.io/change-cause`, as kept in its deployment record.
pub const MAX_CHANGE_CAUSE: u32 = 1024;

/// One request of the `shoal.dev/operate` annotation (`relocate web-1 to west-0 #tag`):
/// room for the longest instance and member names.
pub const MAX_REQUEST_TEXT: u32 = 1024;

/// A payload coordinate's key (an environment variable name in exec mode).
pub const MAX_COORDINATE_KEY: u32 = MAX_NAME;

/// A payload coordinate's value: an image, a version, a config reference.
pub const MAX_COORDINATE_VALUE: u32 = 1024;

/// A duration such as `failover.after` (`90s`, `10m`).
pub const MAX_DURATION: u32 = 32;

/// Text, words and components of a Margo status document (`status.deploymentStatus`):
/// declared in `shoal_core::deploy::status`, beside the document's types.
pub use shoal_core::deploy::status::{
    MAX_DOCUMENT_COMPONENTS, MAX_DOCUMENT_TEXT, MAX_DOCUMENT_WORD,
};

// ---- spec counts ------------------------------------------------------------------

/// Labels a `jobsFrom.selector` matches on.
pub const MAX_MATCH_LABELS: u32 = 64;

/// Applications of a plan (and so payloads, and components of a status document).
pub const MAX_APPLICATIONS: u32 = 32;

/// Ports of one application.
pub const MAX_PORTS: u32 = 64;

/// Resource demands of one application.
pub const MAX_RESOURCES: u32 = 32;

/// Coordinates of one payload. With [`MAX_APPLICATIONS`] payloads of the longest keys
/// and values, a plan's payloads stay under 1.5 MiB: 32 × 32 × (253 + 1024) bytes.
pub const MAX_COORDINATES: u32 = 32;

/// Capability requirements of a plan, and names of one requirement.
pub const MAX_REQUIREMENTS: u32 = 32;

/// Update domains a Rolling rollout orders.
pub const MAX_DOMAIN_ORDER: u32 = 256;

/// Pools a Swarm's Restart rollout orders.
pub const MAX_POOL_ORDER: u32 = 1000;

// ---- status counts ----------------------------------------------------------------

/// Conditions of a status (one per type; the controller sets fewer than ten).
pub const MAX_CONDITIONS: u32 = 16;

/// Annotations refused at once (the controller reads only its own few).
pub const MAX_REFUSED_ANNOTATIONS: u32 = 16;

/// Members of a Swarm's status.
pub const MAX_STATUS_MEMBERS: u32 = crate::api::swarm::MAX_MEMBERS;

/// Pools of a Swarm's rollout: every pool is a StatefulSet or Deployment with members,
/// or one waiting for them; no more than members can be, plus those listed by
/// `rollout.poolOrder`.
pub const MAX_ROLLOUT_POOLS: u32 = crate::api::swarm::MAX_MEMBERS + MAX_POOL_ORDER;

/// Instances of a plan's status: every instance, twice during a blue-green switch.
pub const MAX_PLAN_INSTANCES: u32 = 2 * shoal_core::deploy::placement::MAX_INSTANCES;

/// Operations of a plan's status: open ones (at most two per instance: a blue-green
/// copy and the old one's removal), the finished ones kept (`operationHistoryLimit`,
/// at most [`MAX_OPERATION_HISTORY`]) and one pass's user requests.
pub const MAX_OPERATIONS: u32 = MAX_PLAN_INSTANCES + MAX_OPERATION_HISTORY + MAX_REQUESTS;

/// The largest `spec.operationHistoryLimit`.
pub const MAX_OPERATION_HISTORY: u32 = 1000;

/// The largest `spec.deploymentHistoryLimit`.
pub const MAX_DEPLOYMENT_HISTORY: u32 = 100;

/// Deployment records of a plan's status (and status documents): the newest
/// `deploymentHistoryLimit` and those still in use. The controller keeps at most this
/// many, dropping the oldest first ([`crate::deployment_plan`]'s history step).
pub const MAX_DEPLOYMENT_RECORDS: u32 = 1000;

/// Approvers recorded per deployment revision (each once); later ones are not recorded.
pub const MAX_APPROVALS: u32 = 64;

/// Requests of `shoal.dev/operate` read and remembered as handled: the first this many
/// of the annotation's value (a refusal says the rest are ignored).
pub const MAX_HANDLED_REQUESTS: u32 = 1000;

/// New requests of `shoal.dev/operate` one pass reads; a value with more is refused
/// whole (each request may run a placement).
pub const MAX_REQUESTS: u32 = 100;

/// Canary instances of a rollout.
pub const MAX_CANARIES: u32 = shoal_core::deploy::placement::MAX_INSTANCES;

/// Update domains of a Rolling rollout's status: one per member at most.
pub const MAX_STATUS_DOMAINS: u32 = crate::api::swarm::MAX_MEMBERS;

/// Ignored member reports a plan's status lists (`status.ignoredReports.current`; the
/// rest are only counted).
pub const MAX_LISTED_IGNORED: u32 = 20;

/// Instances that fit on no member (a blue-green switch places a second set).
pub const MAX_UNPLACED: u32 = MAX_PLAN_INSTANCES;

/// Cuts `text` to at most `max` characters (the unit of a schema's `maxLength`),
/// marking a cut with `…`.
pub fn clip(text: &str, max: u32) -> String {
    let max = max as usize;
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// What [`cut_to_schema`] had to cut, by JSON path (`status.operations[3].message`).
pub type Cuts = Vec<String>;

/// The status schema (`openAPIV3Schema.properties.status`) of a CRD, as JSON.
fn status_schema<K: kube::CustomResourceExt>() -> Value {
    let crd = serde_json::to_value(K::crd()).unwrap_or_default();
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/status")
        .cloned()
        .unwrap_or_default()
}

static SWARM_STATUS_SCHEMA: LazyLock<Value> =
    LazyLock::new(status_schema::<crate::api::swarm::Swarm>);
static PLAN_STATUS_SCHEMA: LazyLock<Value> =
    LazyLock::new(status_schema::<crate::api::deployment_plan::DeploymentPlan>);

/// A status type whose bounds come from its CRD's schema.
pub trait BoundedStatus: serde::Serialize + serde::de::DeserializeOwned + Clone {
    /// The generated schema of `.status`.
    fn schema() -> &'static Value;
}

impl BoundedStatus for crate::api::swarm::SwarmStatus {
    fn schema() -> &'static Value {
        &SWARM_STATUS_SCHEMA
    }
}

impl BoundedStatus for crate::api::deployment_plan::DeploymentPlanStatus {
    fn schema() -> &'static Value {
        &PLAN_STATUS_SCHEMA
    }
}

/// `status` as the schema lets the controller write it: every string cut to its
/// `maxLength` (see [`clip`]), every list to its `maxItems` and every map to its
/// `maxProperties` (the first entries kept), with the paths of what was cut. The
/// controller's own lists stay within their bounds by construction; a cut list is a
/// defect reported by the caller, better than a write the API server refuses whole.
pub fn cut_to_schema<S: BoundedStatus>(status: &S) -> (S, Cuts) {
    let Ok(mut value) = serde_json::to_value(status) else {
        return (status.clone(), Vec::new());
    };
    let mut cuts = Vec::new();
    cut_value(&mut value, S::schema(), "status", &mut cuts);
    if cuts.is_empty() {
        return (status.clone(), cuts);
    }
    match serde_json::from_value(value) {
        Ok(fitted) => (fitted, cuts),
        // Not reachable for the controller's own types; keep what it built.
        Err(_) => (status.clone(), cuts),
    }
}

fn bound(schema: &Value, key: &str) -> Option<usize> {
    schema
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
}

/// Cuts `value` to the bounds `schema` declares, recursively.
fn cut_value(value: &mut Value, schema: &Value, path: &str, cuts: &mut Cuts) {
    match value {
        Value::String(text) => {
            if let Some(max) = bound(schema, "maxLength")
                && text.chars().count() > max
            {
                *text = clip(text, max as u32);
                cuts.push(path.to_owned());
            }
        }
        Value::Array(items) => {
            if let Some(max) = bound(schema, "maxItems")
                && items.len() > max
            {
                items.truncate(max);
                cuts.push(path.to_owned());
            }
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    cut_value(item, item_schema, &format!("{path}[{index}]"), cuts);
                }
            }
        }
        Value::Object(fields) => {
            if let Some(entry_schema) = schema.get("additionalProperties").filter(|s| s.is_object())
            {
                if let Some(max) = bound(schema, "maxProperties")
                    && fields.len() > max
                {
                    let extra: Vec<String> = fields.keys().skip(max).cloned().collect();
                    for key in extra {
                        fields.remove(&key);
                    }
                    cuts.push(path.to_owned());
                }
                for (key, entry) in fields.iter_mut() {
                    cut_value(entry, entry_schema, &format!("{path}.{key}"), cuts);
                }
            } else if let Some(properties) = schema.get("properties") {
                for (key, field) in fields.iter_mut() {
                    if let Some(field_schema) = properties.get(key) {
                        cut_value(field, field_schema, &format!("{path}.{key}"), cuts);
                    }
                }
            }
        }
        _ => {}
    }
}

/// A status as it may be written: cut to its schema's bounds, then pruned to its byte
/// budget, with what each step took away.
#[derive(Debug, Clone)]
pub struct Fitted<S> {
    /// The status to compare with the stored one and to write.
    pub status: S,
    /// Paths cut to the schema's bounds (see [`cut_to_schema`]).
    pub cuts: Cuts,
    /// What the byte budget took (see [`budget::prune`]).
    pub pruned: budget::Pruned,
}

impl<S> Fitted<S> {
    /// Logs what fitting took away, naming the object (`Swarm ns/name`): a schema cut
    /// means the controller built more than its own bounds allow (a defect to report);
    /// pruning is history given up for room.
    pub fn log(&self, object: &str) {
        if !self.cuts.is_empty() {
            tracing::warn!(
                object,
                cut = %self.cuts.join(", "),
                "status cut to its schema's bounds"
            );
        }
        if !self.pruned.dropped.is_empty() {
            tracing::info!(
                object,
                dropped = ?self.pruned.dropped,
                bytes = self.pruned.bytes,
                budget = self.pruned.budget,
                "status history pruned to its size budget"
            );
        }
    }
}

/// The one way a status is made fit to write, for both kinds: [`cut_to_schema`], then
/// [`budget::prune`] to what `rest_of_object` bytes of metadata and spec leave of
/// [`MAX_OBJECT_BYTES`] ([`budget::status_budget`]).
pub fn fit<S: BoundedStatus + budget::PrunableStatus>(
    status: &S,
    rest_of_object: usize,
) -> Fitted<S> {
    let (mut status, cuts) = cut_to_schema(status);
    let pruned = budget::prune(&mut status, budget::status_budget(rest_of_object));
    Fitted {
        status,
        cuts,
        pruned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_text_and_marks_a_cut_within_the_bound() {
        assert_eq!(clip("abc", 3), "abc");
        let cut = clip("äöüß-long", 5);
        assert_eq!(cut, "äöüß…");
        assert_eq!(cut.chars().count(), 5);
    }

    fn condition(message: String) -> crate::api::swarm::Condition {
        crate::api::swarm::Condition {
            type_: "Degraded".to_owned(),
            status: "True".to_owned(),
            reason: "InvalidJobs".to_owned(),
            message,
            last_transition_time: None,
            observed_generation: None,
        }
    }

    #[test]
    fn a_swarm_status_with_oversize_user_text_is_cut_to_the_schema_and_then_fits() {
        let mut status = crate::api::swarm::SwarmStatus {
            conditions: vec![condition("m".repeat(MAX_MESSAGE as usize * 2))],
            last_error: Some("e".repeat(MAX_MESSAGE as usize + 1)),
            ..Default::default()
        };
        status
            .refused_annotations
            .insert("shoal.dev/approve".to_owned(), "v".repeat(100_000));
        let (fitted, cuts) = cut_to_schema(&status);
        assert_eq!(
            cuts,
            [
                "status.conditions[0].message",
                "status.lastError",
                "status.refusedAnnotations.shoal.dev/approve",
            ]
        );
        assert_eq!(
            fitted.conditions[0].message.chars().count(),
            MAX_MESSAGE as usize
        );
        assert_eq!(
            fitted.refused_annotations["shoal.dev/approve"]
                .chars()
                .count(),
            MAX_ENTRY_MESSAGE as usize
        );
        let (same, none) = cut_to_schema(&fitted);
        assert!(none.is_empty() && same == fitted, "fitted fits: {none:?}");
    }

    #[test]
    fn a_plan_status_over_its_list_bounds_keeps_the_first_entries_within_them() {
        use crate::api::deployment_plan::{DeploymentPlanStatus, InstanceError, InstanceStatus};
        let instance = |n: u32| InstanceStatus {
            name: format!("web-{n}"),
            member: "west-0".to_owned(),
            update_domain: String::new(),
            deployment: 1,
            state: "failed".to_owned(),
            error: Some(InstanceError {
                code: "c".repeat(1000),
                source: "west-0".to_owned(),
                message: "boom".to_owned(),
            }),
        };
        let status = DeploymentPlanStatus {
            instances: (0..MAX_PLAN_INSTANCES + 2).map(instance).collect(),
            handled_requests: vec!["r".repeat(5000)],
            ..Default::default()
        };
        let (fitted, cuts) = cut_to_schema(&status);
        assert_eq!(fitted.instances.len(), MAX_PLAN_INSTANCES as usize);
        assert_eq!(fitted.instances[0].name, "web-0");
        assert!(cuts.contains(&"status.instances".to_owned()));
        assert!(cuts.contains(&"status.instances[0].error.code".to_owned()));
        assert!(cuts.contains(&"status.handledRequests[0]".to_owned()));
        let code = &fitted.instances[0].error.as_ref().expect("kept").code;
        assert_eq!(code.chars().count(), MAX_ERROR_CODE as usize);
        assert!(cut_to_schema(&fitted).1.is_empty(), "fitted fits");
    }

    #[test]
    fn a_status_within_its_bounds_is_left_as_it_is() {
        let status = crate::api::swarm::SwarmStatus {
            conditions: vec![condition("all good".to_owned())],
            ..Default::default()
        };
        let (fitted, cuts) = cut_to_schema(&status);
        assert!(cuts.is_empty());
        assert_eq!(fitted, status);
    }
}
