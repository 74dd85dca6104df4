//! The pure heart of the controller: observed cluster state in, operations,
//! status and Events out. No I/O, no clock (the time is an input).
//!
//! # How a revision is applied
//!
//! A *revision* is an assignment of the job list to the members, numbered
//! from 1. Its inputs (job list, strategy, members and their availability)
//! are kept in a history ConfigMap, so the assignment can be recomputed
//! exactly (the core is deterministic) after a controller restart.
//!
//! Applying revision `N` (the *target*) is a convergence of the slice
//! ConfigMaps found in the cluster towards the target's slices, computed
//! afresh on every reconcile from cluster state alone, so a restarted
//! controller neither repeats nor forgets a step:
//!
//! 1. **Revoke.** A member whose slice holds keys the target gives to someone
//!    else gets `slice ∩ target` (annotated `shoal.dev/phase: revoke`).
//! 2. **Wait.** Each slice revoked at revision `N` (and, with a sidecar or
//!    under `Restart`, any older revoke still standing) must be *settled*
//!    (`converge::settled`): the pod is gone or replaced; under `HotReload`
//!    also its Lease stopped changing for its duration, or its own sidecar
//!    acknowledged exactly that revision and hash (without a sidecar, pod
//!    readiness stands in, and a failed-over member counts as stopped). Under
//!    `Restart` nothing but the pod's replacement settles a revoke.
//! 3. **Grant.** Only then do members receive the keys they gain, and only
//!    members whose pod is Ready.
//! 4. **Restart** (`reload: Restart`): a pod is restarted when it is the very
//!    pod (by uid) that was running when its slice was last written
//!    (`shoal.dev/written-for-uid` on the slice ConfigMap). After the
//!    eviction the replacement pod has another uid, so no restart is ever
//!    repeated. At most `rollout.maxUnavailable` members are unavailable.
//!    A member that both gives jobs away and receives jobs is restarted
//!    twice: once to release (revoke), once to pick up (grant); one restart
//!    could only do both by granting before the revoke settled. The module
//!    `restarts` states the rule once for the summary, the preview and this.
//!
//! A member whose slice does not change is never written and never restarted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use shoal_core::format::{Index, render_index, render_slice};
use shoal_core::names::{ANNOTATION_APPROVE, ANNOTATION_FAILOVER_NOW, ANNOTATION_ROLLBACK_TO};
use shoal_core::slice::canonical_hash;
use shoal_core::{Assignment, JobSet, JobSettings, MemberId, Slice};

use crate::api::swarm::{Condition, SwarmSpec, SwarmStatus};

mod converge;
mod cordon;
mod gate;
mod history;
mod inputs;
mod instances;
mod members;
mod ownership;
mod pool_rollout;
mod restarts;
mod status;

pub use converge::parsed_slice;
pub use gate::{MAX_REVISION, approval_value};
pub use history::{
    RecordJobs, RevisionRecord, StoredRecord, join_record, record_part_configmap, record_part_key,
    replay, store_record,
};
pub use inputs::{
    DEFAULT_VNODES, DocumentJobs, job_list, observed_inputs, parsed_job_document, read_job_list,
    strategy_of,
};
pub use instances::{Delivery, PlanForDelivery, deliveries};
pub use members::member_of_pod;
pub use ownership::unchecked_targets;
pub use pool_rollout::DEFAULT_PROGRESS_DEADLINE;
pub use restarts::PlannedRestart;

pub use crate::api::swarm::MAX_MEMBERS;
pub use crate::observed::{LeaseState, PodState, PoolState, SliceObject};
pub use crate::planned::PlannedEvent;
pub(crate) use crate::planned::condition;

/// Where the Swarm's `jobsFrom` ConfigMaps stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobSource {
    /// The Swarm has no `jobsFrom`.
    NotReferenced,
    /// The ConfigMap does not exist.
    MissingConfigMap {
        /// Its name.
        name: String,
    },
    /// The ConfigMap exists but lacks the key.
    MissingKey {
        /// ConfigMap name.
        name: String,
        /// The missing key.
        key: String,
    },
    /// The text under the key.
    Text {
        /// ConfigMap name.
        name: String,
        /// The key.
        key: String,
        /// The YAML document (`jobs: [...]`).
        text: String,
    },
    /// A list in several ConfigMaps (`configMapKeyRefs`, or a `selector`): each part is
    /// one of the single-ConfigMap variants above, in merge order.
    Parts(Vec<JobSource>),
    /// `jobsFrom.selector` matched no ConfigMap.
    NoMatch {
        /// The label selector, `k=v,...`.
        selector: String,
    },
}

/// Everything `plan` looks at.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Swarm name.
    pub swarm: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The spec.
    pub spec: SwarmSpec,
    /// Swarm annotations.
    pub annotations: BTreeMap<String, String>,
    /// The status as last written.
    pub status: SwarmStatus,
    /// Pools (labelled StatefulSets and Deployments).
    pub pools: Vec<PoolState>,
    /// The `jobsFrom` ConfigMaps.
    pub job_source: JobSource,
    /// Slice ConfigMaps by member pod name.
    pub slices: BTreeMap<String, SliceObject>,
    /// Member Leases by pod name.
    pub leases: BTreeMap<String, LeaseState>,
    /// Revision history by revision (records that failed to parse are absent). Shared
    /// (`Arc`): the controller's memo keeps the same records between passes, and each
    /// holds a whole assignment (megabytes at 100,000 jobs), so a pass never copies one.
    pub history: BTreeMap<u64, Arc<RevisionRecord>>,
    /// Records split over several ConfigMaps that cannot be used (a part missing, a
    /// checksum mismatch): revision → why, naming the ConfigMaps. Never read as records.
    pub damaged_history: BTreeMap<u64, String>,
    /// The index ConfigMap's `config.yml`, if any.
    pub index: Option<String>,
    /// ConfigMaps this Swarm owns (a controller ownerReference to its uid): name → uid.
    /// Slices, history and index are read from these only, and only these are written
    /// over or deleted.
    pub owned_config_maps: BTreeMap<String, String>,
    /// ConfigMaps with a name the plan would use that this Swarm does not own: name →
    /// who owns it. They are never written or deleted.
    pub foreign_config_maps: BTreeMap<String, String>,
    /// Owned ConfigMaps whose data someone other than the controller changed: name → that
    /// field manager. Their content is not trusted (history records and the index are not
    /// read); they are written back and reported.
    pub edited_config_maps: BTreeMap<String, String>,
    /// Evictions a PodDisruptionBudget refused in the previous pass: pod → what the API
    /// server said. Shown in the Progressing condition while they wait.
    pub blocked_evictions: BTreeMap<String, String>,
    /// The DeploymentPlans naming this Swarm: their instances go into the slices. An
    /// error when they could not be read (say, a role without access to them): the
    /// instances in the slices are then kept as they are.
    pub plans: Result<Vec<PlanForDelivery>, String>,
    /// Whether the admission policy `shoal-approved-by` is in force, so that
    /// `shoal.dev/approved-by` names who set the approval (see [`crate::approvers`]).
    /// Read only in a pass where the approval annotation can approve something; `false`
    /// otherwise.
    pub approved_by_policy: bool,
    /// Now.
    pub now: Timestamp,
    /// What observe already parsed of the texts above ([`Parsed`]); empty where nothing
    /// was (tests, one-off readers), and then `decide` parses the texts itself.
    pub parsed: Parsed,
}

/// Texts of an [`Observation`] already parsed, by the very rules `decide` applies to
/// them, so that `decide` does not parse them again: at 100,000 jobs, parsing the job
/// list and every slice was most of a pass. Observe fills it from the same ConfigMaps the
/// texts come from, once per ConfigMap version (the controller's memo,
/// [`crate::cluster::decoded`]). Whoever changes a text, the spec or the history in an
/// Observation drops what was parsed of it ([`apply_in_memory`] drops it all; the
/// plugin's preview drops `job_list` when it replaces the job list or the strategy).
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    /// Member pod name → what [`parsed_slice`] says of its slice.
    pub slices: BTreeMap<String, Arc<Result<Slice, String>>>,
    /// (ConfigMap, key) of a `jobsFrom` part → what [`parsed_job_document`] says of it.
    pub job_documents: BTreeMap<(String, String), Arc<Result<DocumentJobs, InputProblem>>>,
    /// The revision in force (the status's) → what [`replay`] says of its record.
    pub replayed: Option<(u64, Arc<Result<Assignment, String>>)>,
    /// What [`read_job_list`] says of the Observation's spec and job source: the merged,
    /// checked job list and its settings.
    pub job_list: Option<Arc<Result<(JobSet, JobSettings), InputProblem>>>,
}

/// One write (or delete) the controller is to make, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// Create or replace the history ConfigMap of a revision.
    WriteRevision(RevisionRecord),
    /// Create or replace a member's slice ConfigMap.
    WriteSlice {
        /// The member.
        member: MemberId,
        /// The slice (rendered in slice format v1).
        slice: Slice,
        /// Uid of the member's pod now (empty: no pod).
        written_for_uid: String,
        /// `revoke` or `grant`.
        phase: &'static str,
        /// ConfigMaps the slice occupied before (stale parts beyond the new count are deleted).
        previous_parts: usize,
        /// Only the slice's plan instances change (its jobs and revision are as held):
        /// `written_for_uid` and `phase` are the slice's own, kept as they are, and no pod
        /// found in the member's place is made to answer for the write (it loses and gains
        /// no job; its sidecar picks up the instances as it watches the slice).
        instances_only: bool,
    },
    /// Delete the slice ConfigMap of a member that left.
    DeleteSlice {
        /// Pod name.
        member: String,
        /// ConfigMaps the slice occupies.
        parts: usize,
    },
    /// Restart a pod through the eviction API, only if it still has this uid.
    Evict {
        /// Pod name.
        pod: String,
        /// Pod uid (precondition).
        uid: String,
    },
    /// Create or replace the index ConfigMap.
    WriteIndex {
        /// The `config.yml` text.
        text: String,
    },
    /// Delete a history ConfigMap past `revisionHistoryLimit`.
    PruneRevision {
        /// Revision number.
        revision: u64,
    },
}

/// What `plan` decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Writes, in the order they must happen: history, slices (revokes before grants), evictions, index, pruning.
    pub operations: Vec<Operation>,
    /// The status to write.
    pub status: SwarmStatus,
    /// Events for transitions.
    pub events: Vec<PlannedEvent>,
    /// Reconcile again after this long (failover deadlines, rollout waits).
    pub requeue_after: Option<Duration>,
    /// Numbers of revisions newly put in force by this plan.
    pub applied_revision: Option<u64>,
    /// Jobs moved by the revision newly put in force.
    pub jobs_moved: u64,
    /// The revision the inputs ask for when it differs from the one in force, whether
    /// the gate let it through or not, with what applying it does.
    pub proposal: Option<crate::api::swarm::PendingRevision>,
    /// The pods that proposal restarts (`reload: Restart`), by member: what the summary
    /// counts, what `kubectl shoal diff` lists, and what the controller evicts.
    pub restarts: BTreeMap<MemberId, PlannedRestart>,
}

/// A problem with the Swarm's inputs; the last good revision stays in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputProblem {
    /// Condition and Event reason.
    pub reason: &'static str,
    /// What is wrong, naming the object.
    pub message: String,
}

/// The hash of a whole assignment: which member holds which slice hash.
pub fn assignment_hash(assignment: &Assignment) -> String {
    let lines = assignment
        .member_jobs()
        .into_iter()
        .map(|(member, jobs)| format!("{member}={}", canonical_hash(&jobs)));
    match JobSet::parse(lines) {
        Ok(lines) => canonical_hash(&lines),
        // Pod names and hashes are always valid keys; fall back to something stable anyway.
        Err(_) => String::from("sha256:invalid"),
    }
}

pub(crate) fn previous_condition<'a>(
    status: &'a SwarmStatus,
    type_: &str,
) -> Option<&'a Condition> {
    status
        .conditions
        .iter()
        .find(|condition| condition.type_ == type_)
}

/// An annotation the controller does not act on, and why.
struct Refusal {
    annotation: &'static str,
    reason: &'static str,
    why: String,
}

/// The annotations refused in this pass.
fn refusals(obs: &Observation, roster: &members::Roster, approval: Option<String>) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    if let Some(why) = approval {
        refusals.push(Refusal {
            annotation: ANNOTATION_APPROVE,
            reason: "ApprovalRefused",
            why,
        });
    }
    if !roster.unknown_failover_targets.is_empty() {
        refusals.push(Refusal {
            annotation: ANNOTATION_FAILOVER_NOW,
            reason: "FailoverTargetUnknown",
            why: format!(
                "Swarm {}: {ANNOTATION_FAILOVER_NOW} names {}, which {} no member of the Swarm's pools (members: {})",
                obs.swarm,
                roster.unknown_failover_targets.join(", "),
                if roster.unknown_failover_targets.len() == 1 { "is" } else { "are" },
                roster
                    .views
                    .iter()
                    .map(|view| view.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    refusals
}

/// A standing rollback annotation of an earlier release is an input problem: while it is
/// there no new revision applies (it asked for the revision it names to stay in force), so
/// nothing changes under the user's feet when it is removed after `kubectl shoal undo`.
fn rollback_problem(obs: &Observation) -> Option<InputProblem> {
    let value = obs.annotations.get(ANNOTATION_ROLLBACK_TO)?;
    Some(InputProblem {
        reason: "RollbackAnnotationRefused",
        message: format!(
            "Swarm {}: {ANNOTATION_ROLLBACK_TO}={value} is not read, and no new revision applies while it is there; roll back with `kubectl shoal undo {} --to-revision <revision>`, which rewrites the Swarm's job list and strategy to those of the revision (through the approval gate), then remove the annotation",
            obs.swarm, obs.swarm
        ),
    })
}

/// One Warning Event per refused annotation value; the status remembers what was refused.
fn announce_refusals(
    obs: &Observation,
    refusals: Vec<Refusal>,
    status: &mut SwarmStatus,
    events: &mut Vec<PlannedEvent>,
) {
    for refusal in refusals {
        let Some(value) = obs.annotations.get(refusal.annotation) else {
            continue;
        };
        crate::refusals::record_refusal(
            &obs.status.refused_annotations,
            refusal.annotation,
            value,
            (refusal.reason, refusal.why),
            &mut status.refused_annotations,
            events,
        );
    }
}

/// Computes what to do. Pure: the same observation gives the same plan.
pub fn decide(obs: &Observation) -> Decision {
    let mut events = Vec::new();
    let mut problems: Vec<InputProblem> = Vec::new();

    let failover_after = inputs::failover_after(obs, &mut problems);
    let progress_deadline = inputs::progress_deadline(obs, &mut problems);
    let windows = inputs::windows(obs, &mut problems);
    let window = match &windows {
        Some(windows) => windows.standing(obs.now),
        None => shoal_core::window::Standing::Closed { next: None },
    };
    let roster = members::observe_members(obs, failover_after);
    let observed = converge::observed_slices(obs);
    let in_force = history::in_force(obs, &observed, &mut problems);
    let desired = match (rollback_problem(obs), &roster.over_limit) {
        (Some(problem), _) => Err(problem),
        (None, over_limit) => match over_limit {
            Some(pools) => Err(InputProblem {
                reason: "TooManyMembers",
                message: format!(
                    "Swarm {}: its pools ask for more than {} members ({}); the revision in force stays until they are scaled down",
                    obs.swarm,
                    members::MAX_MEMBERS,
                    pools
                        .iter()
                        .map(|(pool, replicas)| format!("{pool}: {replicas} replicas"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
            None => match inputs::rollout_problem(obs) {
                Some(problem) => Err(problem),
                None => inputs::desired(
                    obs,
                    &roster.members(),
                    &roster.cordon.cordoned,
                    in_force.assignment(),
                ),
            },
        },
    };
    let settings = desired
        .as_ref()
        .ok()
        .map(|desired| desired.settings.clone());
    let mut gate = gate::decide(
        obs,
        (&roster, in_force, &window),
        desired,
        &mut events,
        &mut problems,
    );
    history::keep_cordon(&mut gate.operations, &roster.cordon.cordoned);
    history::keep_assignments(&mut gate.operations, gate.target.as_ref());
    if let Some(settings) = &settings {
        history::keep_settings(&mut gate.operations, settings);
    }
    let refusals = refusals(obs, &roster, gate.refused_approval.clone());
    let delivery = match &obs.plans {
        Ok(plans) => instances::deliveries(plans, &observed),
        Err(why) => instances::kept_as_held(&observed, why),
    };
    let convergence = converge::converge(
        obs,
        &roster,
        &observed,
        gate.target.as_ref(),
        obs.status.current_revision,
        &delivery.by_member,
        progress_deadline,
    );
    let mut status = gate.status;
    status.jobs = convergence.jobs;
    status.next_window = gate.next_window.clone();
    announce_refusals(obs, refusals, &mut status, &mut events);
    let mut operations = gate.operations;
    operations.extend(convergence.operations);
    ownership::guard(obs, &mut operations, &mut problems);
    ownership::edits(obs, &mut operations, &mut problems);
    problems.extend(delivery.problems.into_iter().map(|message| InputProblem {
        reason: "InstanceNotDelivered",
        message: format!("Swarm {}: {message}", obs.swarm),
    }));
    operations.extend(history::prune(
        obs,
        obs.spec.revision_history_limit,
        gate.applied_revision,
        status.current_revision,
    ));
    status::member_statuses(
        obs,
        &roster,
        &convergence.target_slices,
        &mut events,
        &mut status,
    );
    status::conditions(
        obs,
        status::Findings {
            problems: &problems,
            slice_problems: &convergence.slice_problems,
            has_target: gate.target.is_some(),
            rollout_done: convergence.rollout_done,
            awaiting: gate.awaiting,
            waiting_for_window: gate.waiting_for_window.or_else(|| status::window_open(obs)),
            applied_revision: gate.applied_revision,
            members: roster.views.len(),
            serving: roster
                .views
                .iter()
                .filter(|view| !view.failed_over && view.available(obs.now))
                .count(),
            unowned: status::unowned_jobs(gate.target.as_ref(), &roster),
        },
        &mut events,
        &mut status,
    );
    status.observed_inputs = Some(observed_inputs(
        obs.pools
            .iter()
            .map(|pool| (pool.name.as_str(), pool.replicas)),
        &obs.job_source,
    ));
    let summary = status.cordoned.clone();
    if let Some(found) =
        cordon::cordon_condition(obs, &roster.cordon, summary.as_deref(), &mut events)
    {
        status.conditions.push(found);
    }
    if let Some(pools) = convergence.pools {
        status.conditions.push(pools.condition(obs));
        status.rollout = pools.status;
        events.extend(pools.events);
    }
    Decision {
        operations,
        status,
        events,
        // While a revision waits for a window, the next pass is at its opening.
        requeue_after: convergence
            .requeue_after
            .into_iter()
            .chain(gate.wake_after)
            .min(),
        applied_revision: gate.applied_revision,
        jobs_moved: gate.jobs_moved,
        proposal: gate.proposal,
        restarts: gate.restarts,
    }
}

/// Largest index document written in the seed's `workloads:` shape; beyond it a summary.
pub const MAX_INDEX_BYTES: usize = 900 * 1024;

/// The index document: seed-compatible `workloads:` while it fits, else a per-member summary.
pub fn index_text(slices: &BTreeMap<MemberId, Slice>, revision: u64) -> String {
    // The full index holds every key at least once: past the limit in keys alone, it is
    // not rendered (at a million jobs, tens of megabytes) only to be thrown away.
    let key_bytes: usize = slices
        .values()
        .flat_map(|slice| slice.jobs.iter())
        .map(|key| key.as_str().len())
        .sum();
    if key_bytes <= MAX_INDEX_BYTES {
        let full = render_index(&Index::from_slices(slices, revision));
        if full.len() <= MAX_INDEX_BYTES {
            return full;
        }
    }
    let mut summary = format!(
        "# The full index exceeds {MAX_INDEX_BYTES} bytes; each member's jobs are in its <pod>-slice ConfigMap.\nsummary: true\nversion: {revision}\nworkloads:\n"
    );
    for (member, slice) in slices {
        summary.push_str(&format!(
            "  {member}:\n    jobCount: {}\n    hash: {}\n    version: {}\n",
            slice.jobs.len(),
            slice.hash,
            slice.revision
        ));
    }
    summary
}

/// After a slice was written for the pod with uid `written_for_uid`: the uid of the pod
/// that must answer for the write instead, when another pod is found in the member's
/// place right after it. That pod may have started between the controller's read and the
/// write and read the slice as it was before, so the slice is re-pointed at it: it is
/// restarted (`Restart`) or must acknowledge (`HotReload`) like the pod the slice was
/// written for. `None` when the pod found is the one written for, or there is none (a pod
/// created later reads the slice as written).
pub fn pod_answering_for_write(
    written_for_uid: &str,
    pod_now: Option<&PodState>,
) -> Option<String> {
    pod_now
        .filter(|pod| pod.uid != written_for_uid)
        .map(|pod| pod.uid.clone())
}

/// Renders a slice as the text of its ConfigMap.
pub fn slice_text(slice: &Slice) -> String {
    render_slice(slice)
}

#[cfg(test)]
mod tests;

/// Carries out a plan's ConfigMap operations on an observation, in memory, as the I/O
/// layer does on the cluster (written ConfigMaps become owned). Evictions are returned
/// for the caller to simulate. For tests, previews and benchmarks.
pub fn apply_in_memory(obs: &mut Observation, plan: &Decision) -> Vec<(String, String)> {
    // The texts change below: what was parsed of them no longer holds.
    obs.parsed = Parsed::default();
    let mut evictions = Vec::new();
    let own = |obs: &mut Observation, name: String| {
        obs.foreign_config_maps.remove(&name);
        obs.edited_config_maps.remove(&name);
        obs.owned_config_maps
            .insert(name.clone(), format!("uid-of-{name}"));
    };
    for operation in &plan.operations {
        match operation {
            Operation::WriteRevision(record) => {
                obs.history
                    .insert(record.revision, Arc::new(record.clone()));
                own(
                    obs,
                    shoal_core::names::revision_configmap(&obs.swarm, record.revision),
                );
            }
            Operation::WriteSlice {
                slice,
                written_for_uid,
                phase,
                instances_only,
                ..
            } => {
                // As `apply` does right after the write: the pod in the member's place now.
                let pod_now = obs.pools.iter().find_map(|pool| pool.pod(&slice.member));
                let written_for_uid = pod_answering_for_write(written_for_uid, pod_now)
                    .filter(|_| !instances_only)
                    .unwrap_or_else(|| written_for_uid.clone());
                obs.slices.insert(
                    slice.member.clone(),
                    SliceObject {
                        text: Some(slice_text(slice)),
                        written_for_uid: Some(written_for_uid),
                        phase: Some((*phase).to_owned()),
                        parts: 1,
                        decode_error: None,
                    },
                );
                own(obs, shoal_core::names::slice_configmap(&slice.member));
            }
            Operation::DeleteSlice { member, .. } => {
                obs.slices.remove(member);
                let name = shoal_core::names::slice_configmap(member);
                obs.owned_config_maps.remove(&name);
                obs.edited_config_maps.remove(&name);
            }
            Operation::WriteIndex { text } => {
                obs.index = Some(text.clone());
                own(obs, shoal_core::names::index_configmap(&obs.swarm));
            }
            Operation::PruneRevision { revision } => {
                obs.history.remove(revision);
                let name = shoal_core::names::revision_configmap(&obs.swarm, *revision);
                obs.owned_config_maps.remove(&name);
                obs.edited_config_maps.remove(&name);
            }
            Operation::Evict { pod, uid } => evictions.push((pod.clone(), uid.clone())),
        }
    }
    evictions
}
