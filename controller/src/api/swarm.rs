//! The `Swarm` custom resource (`shoal.dev/v1alpha1`).
//!
//! The CRD YAML in `manifests/crd.yaml` is generated from these types:
//! `cargo run -p shoal-controller -- crd > manifests/crd.yaml`.

// Several `printcolumn(type_ = "string")` attributes are distinct columns, not duplicates.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::limits;

/// What a Swarm shards and how.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "shoal.dev",
    version = "v1alpha1",
    kind = "Swarm",
    namespaced,
    status = "SwarmStatus",
    shortname = "sw",
    doc = "A Swarm shards a list of jobs across the pods of StatefulSets labelled shoal.dev/swarm=<name>.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "members ready / members",
        json_path = ".status.ready"
    ),
    printcolumn(
        name = "Jobs",
        type_ = "integer",
        description = "jobs in the current revision",
        json_path = ".status.jobs"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        description = "revision in force",
        json_path = ".status.currentRevision"
    ),
    printcolumn(
        name = "Pending",
        type_ = "integer",
        description = "revision waiting for approval",
        json_path = ".status.pendingRevision.revision"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Next-Window",
        type_ = "string",
        description = "when the next maintenance window opens, while an approved revision waits for it",
        json_path = ".status.nextWindow"
    ),
    printcolumn(
        name = "Cordoned",
        type_ = "string",
        description = "cordoned members and their state (-o wide)",
        json_path = ".status.cordoned",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SwarmSpec {
    /// Job keys listed inline. Combined with `jobsFrom`; a key may appear only once overall.
    /// Each key is 1 to 253 bytes without control characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_INLINE_JOBS), inner(length(min = 1, max = limits::MAX_JOB_KEY), pattern(JOB_KEY_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub jobs: Vec<String>,
    /// A job list read from ConfigMap keys holding YAML documents `jobs: [...]`: one
    /// ConfigMap, several, or those a label selector picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_from: Option<JobsFrom>,
    /// Per-job weight and dedication, keyed by job key (a key of `jobs` or of the
    /// `jobsFrom` list). Honoured by the `sticky` strategy only: any other strategy
    /// refuses them. A key that names no listed job is refused by the controller.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_INLINE_JOBS))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.all(k, size(k) >= 1 && size(k) <= 253)",
        "message": "job settings keys are job keys: 1 to 253 bytes"
    }]))]
    pub job_settings: BTreeMap<String, JobSettingSpec>,
    /// How jobs are assigned to members.
    #[serde(default)]
    pub strategy: StrategySpec,
    /// How members pick up a changed slice.
    #[serde(default)]
    pub reload: ReloadPolicy,
    /// When a computed revision may be applied.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "!has(self.policy) || self.policy != 'Budget' || has(self.maxDisruptedMembers) || has(self.maxMovedJobs)",
        "message": "the Budget policy needs maxDisruptedMembers or maxMovedJobs (without either, use Manual)"
    }]))]
    pub approval: ApprovalSpec,
    /// Limits on disruption while applying a revision.
    #[serde(default)]
    pub rollout: RolloutSpec,
    /// When an unavailable member's jobs move elsewhere.
    #[serde(default)]
    pub failover: FailoverSpec,
    /// How many revisions are kept as `<swarm>-rev-<n>` ConfigMaps.
    #[serde(default = "default_revision_history_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub revision_history_limit: u32,
    /// While true, a `reload: Restart` rollout is held: no further eviction starts and
    /// no job is granted (what is in flight completes; `status.rollout` shows the pool
    /// that waits as `Paused`). `kubectl shoal pause|resume swarm/<name>` sets it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Members taken out of placement, by pod name: a cordoned member keeps the jobs and
    /// plan instances it holds but gets no new ones; with `drain: true` its work moves to
    /// the other members through the approval gate. Kept on the Swarm (not on the pod) so
    /// that it outlives the pod; an entry naming no member is kept and reported.
    /// `kubectl shoal cordon|uncordon|drain <member>` edits it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_MEMBERS))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["member"]))]
    pub cordon: Vec<CordonSpec>,
}

/// One cordoned (or draining) member of `spec.cordon`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CordonSpec {
    /// The member's pod name, e.g. `worker-2`.
    #[schemars(length(min = 1, max = limits::MAX_NAME), pattern(DNS_SUBDOMAIN_PATTERN))]
    pub member: String,
    /// Also move the member's jobs and plan instances off it (through the gate).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drain: bool,
    /// Why, for the people reading `kubectl describe` (e.g. a ticket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub reason: Option<String>,
}

/// Most job keys listed inline in `spec.jobs` (longer lists belong in `jobsFrom`): a
/// bound the API server needs to estimate the cost of checking the list, and far below
/// what fits in one object.
pub const MAX_INLINE_JOBS: u32 = 100_000;

/// The most members a Swarm's pools may have in all (the schema bounds `replicas` and
/// update budgets by it; the planner refuses more, `TooManyMembers`).
pub const MAX_MEMBERS: u32 = 10_000;

/// A job key has no control characters (the controller refuses them too).
const JOB_KEY_PATTERN: &str = r"^[^\x00-\x1F\x7F-\x9F]*$";

/// A ConfigMap name: a DNS subdomain (lowercase alphanumerics, `-` and `.`).
pub(crate) const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A ConfigMap data key: alphanumerics, `-`, `_` and `.`.
const CONFIG_MAP_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";

/// A duration as `failover.after` takes it: numbers with units `ms`, `s`, `m`, `h`.
const DURATION_PATTERN: &str = r"^([0-9]+(ms|s|m|h))+$";

fn default_revision_history_limit() -> u32 {
    10
}

/// The weight and dedication of one job (`spec.jobSettings.<key>`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobSettingSpec {
    /// Cost of the job in the balance, 1 to 1000000 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = shoal_core::job::MAX_WEIGHT))]
    pub weight: Option<u32>,
    /// The job gets a member of its own, released when the job goes (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedicated: Option<bool>,
}

/// Where to read a job list from: exactly one of `configMapKeyRef` (one ConfigMap),
/// `configMapKeyRefs` (several, merged in the order listed) or `selector` (every
/// ConfigMap of the namespace with these labels, merged in name order). A list longer
/// than one object can carry (1 MiB) is split over several ConfigMaps this way.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.configMapKeyRef) ? 1 : 0) + (has(self.configMapKeyRefs) ? 1 : 0) + (has(self.selector) ? 1 : 0) == 1",
    "message": "jobsFrom takes exactly one of configMapKeyRef, configMapKeyRefs and selector"
}]))]
pub struct JobsFrom {
    /// A key of a ConfigMap in the Swarm's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeyRef>,
    /// Keys of several ConfigMaps in the Swarm's namespace, merged in this order; a job
    /// key may appear only once over all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = MAX_JOB_LIST_PARTS))]
    pub config_map_key_refs: Vec<ConfigMapKeyRef>,
    /// The ConfigMaps of the Swarm's namespace carrying these labels, merged in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<JobConfigMapSelector>,
}

/// Most ConfigMaps `jobsFrom.configMapKeyRefs` lists.
pub const MAX_JOB_LIST_PARTS: u32 = 1000;

impl JobsFrom {
    /// The ConfigMap keys named one by one (`configMapKeyRef` or `configMapKeyRefs`), in
    /// order; empty for a selector.
    pub fn named(&self) -> Vec<&ConfigMapKeyRef> {
        self.config_map_key_ref
            .iter()
            .chain(self.config_map_key_refs.iter())
            .collect()
    }

    /// Whether ConfigMap `name` with `labels` is (or, for a selector, would be) part of
    /// this job list.
    pub fn reads(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.named().iter().any(|reference| reference.name == name)
            || self
                .selector
                .as_ref()
                .is_some_and(|selector| selector.matches(labels))
    }

    /// The ConfigMaps named in user-facing text: `ConfigMap a`, `ConfigMaps a, b`, or
    /// `the ConfigMaps labelled k=v`.
    pub fn describe(&self) -> String {
        if let Some(selector) = &self.selector {
            return format!("the ConfigMaps labelled {}", selector.label_selector());
        }
        let names: Vec<&str> = self
            .named()
            .iter()
            .map(|reference| reference.name.as_str())
            .collect();
        match names.as_slice() {
            [one] => format!("ConfigMap {one}"),
            many => format!("ConfigMaps {}", many.join(", ")),
        }
    }
}

/// ConfigMaps chosen by label, each holding part of a job list under the same key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "size(self.matchLabels) > 0",
    "message": "matchLabels needs at least one label (an empty selector would read every ConfigMap of the namespace)"
}]))]
pub struct JobConfigMapSelector {
    /// Labels every part carries (all must match; at least one).
    #[schemars(extend("maxProperties" = limits::MAX_MATCH_LABELS))]
    #[schemars(extend("additionalProperties" = {"type": "string", "maxLength": limits::MAX_LABEL}))]
    pub match_labels: BTreeMap<String, String>,
    /// Data key holding `jobs: [...]` in each part.
    #[schemars(length(min = 1, max = limits::MAX_NAME), pattern(CONFIG_MAP_KEY_PATTERN))]
    pub key: String,
}

impl JobConfigMapSelector {
    /// Whether an object with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.match_labels.is_empty()
            && self
                .match_labels
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value))
    }

    /// The selector as the API takes it: `k=v,k2=v2`.
    pub fn label_selector(&self) -> String {
        self.match_labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A ConfigMap and one of its data keys.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ConfigMapKeyRef {
    /// ConfigMap name (in the Swarm's namespace).
    #[schemars(length(min = 1, max = limits::MAX_NAME), pattern(DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// Data key holding `jobs: [...]`.
    #[schemars(length(min = 1, max = limits::MAX_NAME), pattern(CONFIG_MAP_KEY_PATTERN))]
    pub key: String,
}

/// The assignment strategy and its parameters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.vnodes) || (has(self.type) && self.type == 'ring')",
    "message": "vnodes applies only to the ring strategy"
}]))]
pub struct StrategySpec {
    /// `sticky` (default), `bounded`, `jump` or `ring`.
    #[serde(default, rename = "type")]
    pub type_: StrategyType,
    /// Balance factor of `bounded`: slices stay within `ceil((1+epsilon)*k/n)`; 0 means perfectly balanced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub epsilon: Option<f64>,
    /// Virtual nodes per member for `ring`, 1 to 4096.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = shoal_core::strategy::MAX_VNODES))]
    pub vnodes: Option<u32>,
}

/// The name of an assignment strategy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum StrategyType {
    /// Balanced consistent hashing with bounded loads (largest slice `ceil(k/n)` at epsilon 0).
    Bounded,
    /// Jump consistent hash.
    Jump,
    /// Consistent hash ring with virtual nodes.
    Ring,
    /// Perfectly balanced (every slice `floor(k/n)` or `ceil(k/n)` jobs), moving exactly the
    /// fewest jobs balance allows from the assignment in force, which it reads from the
    /// revision history. The default.
    #[default]
    Sticky,
}

/// How a member picks up its changed slice.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum ReloadPolicy {
    /// The sidecar applies the slice in place; nothing restarts.
    #[default]
    HotReload,
    /// Pods whose slice changed are evicted (PodDisruptionBudgets apply), `rollout.maxUnavailable` at a time.
    Restart,
}

/// The approval gate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalSpec {
    /// `Automatic` (default), `Manual` or `Budget`.
    #[serde(default)]
    pub policy: ApprovalPolicy,
    /// Budget: approve alone when at most this many members are disrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_MEMBERS))]
    pub max_disrupted_members: Option<u32>,
    /// Budget: approve alone when at most this many jobs move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1_000_000_000))]
    pub max_moved_jobs: Option<u64>,
    /// Maintenance windows: with any listed, an approved change starts applying only while
    /// one is open (a change that only re-homes the work of members that are gone applies
    /// at once); once started it runs to its end, window or not. Empty: no windows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_WINDOWS))]
    pub windows: Vec<MaintenanceWindow>,
}

/// The most maintenance windows one object lists (`shoal_core::window::MAX_WINDOWS`).
const MAX_WINDOWS: u32 = shoal_core::window::MAX_WINDOWS as u32;

/// A 5-field cron expression (or an `@daily`-style macro): its characters only; the
/// controller checks the rest and refuses it by a condition naming the window.
const CRON_PATTERN: &str = r"^(@[a-z]+|[0-9A-Za-z*,/-]+( +[0-9A-Za-z*,/-]+){4})$";

/// An IANA time zone name: `Area/Location` words.
const TIME_ZONE_PATTERN: &str = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$";

/// One maintenance window (`shoal_core::window`): open from each `start` for `duration`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// When it opens: a 5-field cron expression `minute hour day-of-month month
    /// day-of-week` (e.g. `0 2 * * SAT`, `30 22 * * MON-FRI`), or `@daily`, `@weekly`, ….
    #[schemars(length(min = 1, max = 128), pattern(CRON_PATTERN))]
    pub start: String,
    /// How long it stays open, e.g. `4h`, `90m` (1m to 744h).
    #[schemars(length(min = 1, max = limits::MAX_DURATION), pattern(DURATION_PATTERN))]
    pub duration: String,
    /// The IANA time zone `start` is read in, e.g. `Europe/Berlin`. Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), pattern(TIME_ZONE_PATTERN))]
    pub time_zone: Option<String>,
}

impl ApprovalSpec {
    /// The windows, checked by the one window rule; the error names the window and input.
    pub fn windows(&self) -> Result<shoal_core::window::Windows, shoal_core::window::WindowError> {
        shoal_core::window::Windows::parse(self.windows.iter().map(|window| {
            shoal_core::window::WindowText {
                start: &window.start,
                duration: &window.duration,
                time_zone: window.time_zone.as_deref(),
            }
        }))
    }
}

/// Who approves a revision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum ApprovalPolicy {
    /// Every revision applies at once.
    #[default]
    Automatic,
    /// A revision applies once the Swarm is annotated `shoal.dev/approve: "<revision>/<hash>"` (the value in `status.pendingRevision.approveWith`).
    Manual,
    /// Small revisions (within `maxDisruptedMembers` or `maxMovedJobs`) apply at once, others wait for approval.
    Budget,
}

/// Rollout limits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// At most this many members unavailable because of restarts (Restart policy); at least 1.
    #[serde(default = "default_max_unavailable")]
    #[schemars(range(min = 1, max = MAX_MEMBERS))]
    pub max_unavailable: u32,
    /// Restart policy: the pools (StatefulSet names) restarted one at a time, in this
    /// order; pools not listed follow in byte order. Empty: byte order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_POOL_ORDER), inner(length(min = 1, max = limits::MAX_NAME)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub pool_order: Vec<String>,
    /// Restart policy: how long a member of the pool being restarted may stay unavailable
    /// before the rollout halts (`RolloutHalted`), e.g. `90s`, `10m`. Default `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_DURATION), pattern(DURATION_PATTERN))]
    pub progress_deadline: Option<String>,
}

impl Default for RolloutSpec {
    fn default() -> Self {
        RolloutSpec {
            max_unavailable: default_max_unavailable(),
            pool_order: Vec::new(),
            progress_deadline: None,
        }
    }
}

fn default_max_unavailable() -> u32 {
    1
}

/// Failover settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// How long a member may be unavailable (pod not Ready, or its Lease not renewed) before
    /// its jobs move to the other members, e.g. `30s`, `5m`, `1h`. Default `5m`. A member
    /// is granted jobs only while its pod is Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_DURATION), pattern(DURATION_PATTERN))]
    pub after: Option<String>,
}

/// What the controller observed and did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct SwarmStatus {
    /// Ready, Progressing, AwaitingApproval, Degraded; WaitingForWindow with maintenance windows.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_CONDITIONS))]
    pub conditions: Vec<Condition>,
    /// The Swarm generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Revision in force (0: nothing applied yet).
    #[serde(default)]
    pub current_revision: u64,
    /// Assignment hash of the revision in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_HASH))]
    pub current_hash: Option<String>,
    /// A computed revision waiting for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_revision: Option<PendingRevision>,
    /// The highest revision number given so far: to a revision in force, pending,
    /// superseded or withdrawn, or named by a refused approval. A number is never given
    /// to a second plan, so an approval can never stand for a plan nobody reviewed.
    #[serde(default)]
    pub latest_revision: u64,
    /// Annotations the controller refused, with the value refused (e.g. an approval that
    /// names no pending revision). Each refusal is announced by one Warning Event.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = limits::MAX_REFUSED_ANNOTATIONS))]
    #[schemars(extend("additionalProperties" = {"type": "string", "maxLength": limits::MAX_ENTRY_MESSAGE}))]
    pub refused_annotations: BTreeMap<String, String>,
    /// When the inputs of the revision being applied were first seen changed (RFC 3339), for the change-to-applied metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_TIMESTAMP))]
    pub changed_at: Option<String>,
    /// Per-member state.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_STATUS_MEMBERS))]
    pub members: Vec<MemberStatus>,
    /// Members ready / members, e.g. `2/2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_WORD))]
    pub ready: Option<String>,
    /// Jobs in the revision in force.
    #[serde(default)]
    pub jobs: u64,
    /// Jobs of the revision in force owned by no member of the pools now (their owner left
    /// the pools and the revision that re-homes them is not in force yet). The Swarm is not
    /// Ready while any is.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unowned_jobs: u64,
    /// `Pending`, `AwaitingApproval`, `WaitingForWindow`, `Progressing`, `Ready` or `Degraded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_WORD))]
    pub phase: Option<String>,
    /// The members of `spec.cordon` and their state, e.g. `worker-1 Draining, worker-2
    /// Cordoned` (the `Cordoned` column of `kubectl get swarm -o wide`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub cordoned: Option<String>,
    /// The last problem, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_MESSAGE))]
    pub last_error: Option<String>,
    /// The inputs outside the Swarm this status was computed from (pool sizes, the
    /// `jobsFrom` documents): a scale or a job list change does not move the Swarm's
    /// generation, so `kubectl shoal wait` compares these with what it reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_inputs: Option<ObservedInputs>,
    /// Restart policy: where the pool-by-pool restarts of the revision in force stand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<SwarmRolloutStatus>,
    /// While an approved revision waits for a maintenance window: when the next one opens
    /// (RFC 3339). The WaitingForWindow condition names the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_TIMESTAMP))]
    pub next_window: Option<String>,
}

/// What a Swarm's status was computed from besides its spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObservedInputs {
    /// Each pool (StatefulSet or Deployment labelled for the Swarm) with its `spec.replicas`.
    #[serde(default)]
    #[schemars(extend("maxProperties" = limits::MAX_STATUS_MEMBERS))]
    pub pools: BTreeMap<String, u32>,
    /// Fingerprint of the `jobsFrom` ConfigMaps as read (names, keys, documents; absent
    /// without `jobsFrom`): `plan::observed_inputs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_HASH))]
    pub job_sources: Option<String>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Where the pool-by-pool restarts of a revision stand (`reload: Restart`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct SwarmRolloutStatus {
    /// The revision whose restarts these are.
    pub revision: u64,
    /// `Complete`, `Progressing`, `Paused` or `Halted`.
    #[schemars(length(max = limits::MAX_WORD))]
    pub phase: String,
    /// What the rollout does or waits for, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = limits::MAX_MESSAGE))]
    pub message: String,
    /// Every pool in rollout order with its state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_ROLLOUT_POOLS))]
    pub pools: Vec<PoolRollout>,
    /// A pool an older revision was restarting when this one superseded it: it finishes
    /// first, then the order starts again from its first pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_NAME))]
    pub finishing: Option<String>,
    /// Why the rollout halted. It stays halted until a newer revision, or the Swarm is
    /// annotated `shoal.dev/retry-rollout: "<revision>"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<RolloutHalt>,
}

/// One pool of a Swarm's rollout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolRollout {
    /// The pool (StatefulSet).
    #[schemars(length(max = limits::MAX_NAME))]
    pub name: String,
    /// `Waiting`, `Updating`, `Paused`, `Done` or `Failed`.
    #[schemars(length(max = limits::MAX_WORD))]
    pub state: String,
    /// Members restarted (or not needing it) and available / members, e.g. `1/2`.
    #[schemars(length(max = limits::MAX_WORD))]
    pub ready: String,
}

/// Why a Swarm's rollout halted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHalt {
    /// The pool.
    #[schemars(length(max = limits::MAX_NAME))]
    pub pool: String,
    /// The member pod that did not become Ready.
    #[schemars(length(max = limits::MAX_NAME))]
    pub pod: String,
    /// What was observed, in words.
    #[schemars(length(max = limits::MAX_ENTRY_MESSAGE))]
    pub cause: String,
}

/// A status condition (the Kubernetes convention).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Progressing`, `AwaitingApproval` or `Degraded`.
    #[serde(rename = "type")]
    #[schemars(length(max = limits::MAX_CONDITION_TYPE))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(length(max = limits::MAX_WORD))]
    pub status: String,
    /// One CamelCase word.
    #[schemars(length(max = limits::MAX_REASON))]
    pub reason: String,
    /// What happened, in words.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_MESSAGE))]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_TIMESTAMP))]
    pub last_transition_time: Option<String>,
    /// Generation the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A revision computed but not yet approved.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingRevision {
    /// Its number; approve with `shoal.dev/approve: "<revision>/<hash>"`.
    pub revision: u64,
    /// Assignment hash of this revision; an approval must name it.
    #[schemars(length(max = limits::MAX_HASH))]
    pub hash: String,
    /// The value of `shoal.dev/approve` that approves exactly this revision.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_APPROVE_VALUE))]
    pub approve_with: String,
    /// What applying it would do.
    pub summary: RevisionSummary,
}

/// What applying a revision does.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSummary {
    /// Jobs whose owner changes.
    pub jobs_moved: u64,
    /// Of those, jobs whose owner left the pools or was failed over: moving them stops
    /// nothing that runs.
    #[serde(default)]
    pub jobs_rehomed: u64,
    /// Jobs new in the job list, started on their member.
    #[serde(default)]
    pub jobs_started: u64,
    /// Jobs gone from the job list, stopped on their member.
    #[serde(default)]
    pub jobs_stopped: u64,
    /// Members whose slice changes.
    pub members_affected: u64,
    /// Members that stay and are disrupted: they give up jobs (HotReload) or restart
    /// (Restart).
    #[serde(default)]
    pub members_disrupted: u64,
    /// Pods restarted (Restart policy), 0 for HotReload.
    pub restarts_needed: u64,
    /// The fewest moves any assignment of the new inputs could make.
    pub lower_bound: u64,
    /// The pending revision this one replaced, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<u64>,
    /// Total weight of the jobs moved, when jobs carry weights (`spec.jobSettings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_moved: Option<u64>,
}

/// One member as last observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Pod name.
    #[schemars(length(max = limits::MAX_NAME))]
    pub name: String,
    /// StatefulSet name.
    #[schemars(length(max = limits::MAX_NAME))]
    pub pool: String,
    /// Pod Ready.
    pub ready: bool,
    /// Jobs in the member's target slice.
    pub slice_size: u64,
    /// Hash of the member's target slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_HASH))]
    pub slice_hash: Option<String>,
    /// Revision acknowledged on the member Lease, if a sidecar runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acked_revision: Option<u64>,
    /// Since when the member is unavailable (RFC 3339); drives failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_TIMESTAMP))]
    pub unavailable_since: Option<String>,
    /// The member's jobs were moved away because it was unavailable too long.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed_over: bool,
    /// `Cordoned` (no new work), `Draining` (its work is being moved off, until the
    /// revision that moves it is in force) or `Drained` (it holds no job); absent when
    /// the member is not in `spec.cordon`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_WORD))]
    pub state: Option<String>,
}

/// The CRD as YAML, exactly as written to `manifests/crd.yaml`.
pub fn crd_yaml() -> String {
    render_crd::<Swarm>("crd > manifests/crd.yaml")
}

/// A custom resource's CRD as YAML under a "generated by" line naming `command`
/// (the `shoal-controller` subcommand that regenerates the committed file).
pub(crate) fn render_crd<K: CustomResourceExt>(command: &str) -> String {
    let value = serde_json::to_value(K::crd()).unwrap_or_default();
    let mut out =
        format!("# Generated by `cargo run -p shoal-controller -- {command}`; do not edit.\n");
    out.push_str(&serde_saphyr::to_string(&value).unwrap_or_default());
    out
}

/// Labels and annotations of a Swarm, as a map (never absent).
pub fn annotations(swarm: &Swarm) -> BTreeMap<String, String> {
    swarm.metadata.annotations.clone().unwrap_or_default()
}
