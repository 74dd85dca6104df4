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
//! 2. **Wait.** Each slice revoked at revision `N` must be *settled*: the
//!    member Lease acknowledges its hash, or the Lease expired, or the pod is
//!    gone, or the member was failed over. Until the sidecar runs (no Lease),
//!    pod readiness stands in: a Ready pod (for `Restart`, a Ready pod that is
//!    not the one that was running when the slice was written) counts as
//!    having applied it.
//! 3. **Grant.** Only then do members receive the keys they gain.
//! 4. **Restart** (`reload: Restart`): a pod is restarted when it is the very
//!    pod (by uid) that was running when its slice was last written
//!    (`shoal.dev/written-for-uid` on the slice ConfigMap). After the
//!    eviction the replacement pod has another uid, so no restart is ever
//!    repeated. At most `rollout.maxUnavailable` members are unavailable.
//!    A member that both gives jobs away and receives jobs is restarted
//!    twice: once to release (revoke), once to pick up (grant); one restart
//!    could only do both by granting before the revoke settled.
//!
//! A member whose slice does not change is never written and never restarted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use shoal_core::format::{Index, parse_slice, render_index, render_slice};
use shoal_core::slice::canonical_hash;
use shoal_core::{Assignment, JobSet, Member, MemberId, Slice, Strategy, assign, diff};

use crate::crd::{
    ApprovalPolicy, Condition, MemberStatus, PendingRevision, ReloadPolicy, RevisionSummary,
    StrategySpec, StrategyType, SwarmSpec, SwarmStatus,
};

/// Annotation approving a pending revision.
pub const APPROVE_ANNOTATION: &str = "shoal.dev/approve";
/// Annotation rolling back to the job list and strategy of a recorded revision
/// (`kubectl annotate swarm X shoal.dev/rollback-to=<revision>`); the result goes through
/// the approval gate like any change, and stays in force while the annotation is present.
pub const ROLLBACK_ANNOTATION: &str = "shoal.dev/rollback-to";
/// Annotation forcing failover of the named pods (comma separated).
pub const FAILOVER_NOW_ANNOTATION: &str = "shoal.dev/failover-now";
/// Annotation on a slice ConfigMap: the uid of the member pod when the slice was written.
pub const WRITTEN_FOR_UID_ANNOTATION: &str = "shoal.dev/written-for-uid";
/// Annotation on a slice ConfigMap: `revoke` or `grant`, the step that wrote it.
pub const PHASE_ANNOTATION: &str = "shoal.dev/phase";
/// Default virtual nodes of the ring strategy.
pub const DEFAULT_VNODES: u32 = 64;

/// Where the Swarm's `jobsFrom` ConfigMap stands.
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
}

/// One pod of a pool, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    /// Pod uid.
    pub uid: String,
    /// Ready condition is True.
    pub ready: bool,
    /// Has a deletion timestamp.
    pub deleting: bool,
}

/// A StatefulSet labelled for this Swarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolState {
    /// StatefulSet name.
    pub name: String,
    /// `spec.replicas`.
    pub replicas: u32,
    /// Its pods by ordinal.
    pub pods: BTreeMap<u32, PodState>,
}

/// A member Lease written by the sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseState {
    /// `shoal.dev/acked-revision`.
    pub acked_revision: Option<u64>,
    /// `shoal.dev/acked-hash`.
    pub acked_hash: Option<String>,
    /// `renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `leaseDurationSeconds`.
    pub duration_seconds: Option<i64>,
}

impl LeaseState {
    /// The Lease was not renewed within its duration.
    pub fn expired(&self, now: Timestamp) -> bool {
        match (self.renew_time, self.duration_seconds) {
            (Some(renewed), Some(seconds)) => renewed + SignedDuration::from_secs(seconds) < now,
            // A Lease that never said when it was renewed proves nothing about liveness.
            _ => true,
        }
    }
}

/// A slice ConfigMap found in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceObject {
    /// The `slice.yaml` text, if the key is present.
    pub text: Option<String>,
    /// `shoal.dev/written-for-uid`.
    pub written_for_uid: Option<String>,
    /// `shoal.dev/phase`.
    pub phase: Option<String>,
    /// ConfigMaps the slice occupies (more than 1 when split into parts).
    pub parts: usize,
    /// Why the stored data could not be decoded, if it could not.
    pub decode_error: Option<String>,
}

/// Inputs of one revision, stored as `<swarm>-rev-<n>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRecord {
    /// Revision number.
    pub revision: u64,
    /// Assignment hash.
    pub hash: String,
    /// Strategy as written in the Swarm.
    pub strategy: StrategySpec,
    /// Members (pod names) that could own work.
    pub members: Vec<String>,
    /// Members listed but failed over (own nothing).
    #[serde(default)]
    pub unavailable: Vec<String>,
    /// Job keys, sorted (empty when `jobsOmitted`).
    pub jobs: Vec<String>,
    /// The job list was too large to keep in a ConfigMap even compressed; this
    /// revision cannot be replayed and the slices in the cluster stand for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub jobs_omitted: bool,
}

/// The data key of a revision history ConfigMap.
pub const REVISION_DATA_KEY: &str = "revision.json";

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
    /// Pools (labelled StatefulSets).
    pub pools: Vec<PoolState>,
    /// The `jobsFrom` ConfigMap.
    pub job_source: JobSource,
    /// Slice ConfigMaps by member pod name.
    pub slices: BTreeMap<String, SliceObject>,
    /// Member Leases by pod name.
    pub leases: BTreeMap<String, LeaseState>,
    /// Revision history by revision (records that failed to parse are absent).
    pub history: BTreeMap<u64, RevisionRecord>,
    /// The index ConfigMap's `config.yml`, if any.
    pub index: Option<String>,
    /// Now.
    pub now: Timestamp,
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

/// An Event to emit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: String,
    /// What happened.
    pub note: String,
}

/// What `plan` decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
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
}

/// A problem with the Swarm's inputs; the last good revision stays in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputProblem {
    /// Condition and Event reason.
    pub reason: &'static str,
    /// What is wrong, naming the object.
    pub message: String,
}

/// The seed's job-list document: `jobs: [...]`.
#[derive(Deserialize)]
struct JobListDocument {
    jobs: Option<Vec<String>>,
}

/// Reads the job list of a Swarm: inline keys plus the `jobsFrom` document.
pub fn job_list(swarm: &str, spec: &SwarmSpec, source: &JobSource) -> Result<JobSet, InputProblem> {
    let mut keys: Vec<String> = spec.jobs.clone();
    match source {
        JobSource::NotReferenced => {}
        JobSource::MissingConfigMap { name } => {
            return Err(InputProblem {
                reason: "JobConfigMapMissing",
                message: format!("Swarm {swarm}: jobsFrom ConfigMap {name} does not exist"),
            });
        }
        JobSource::MissingKey { name, key } => {
            return Err(InputProblem {
                reason: "JobConfigMapMissing",
                message: format!("Swarm {swarm}: jobsFrom ConfigMap {name} has no key {key}"),
            });
        }
        JobSource::Text { name, key, text } => {
            let document: JobListDocument = serde_saphyr::from_str_with_options(
                text,
                shoal_core::format::yaml_options_for(text.len()),
            )
            .map_err(|error| InputProblem {
                    reason: "JobConfigMapInvalid",
                    message: format!(
                        "Swarm {swarm}: ConfigMap {name} key {key} is not a `jobs: [...]` YAML document: {error}"
                    ),
                })?;
            let Some(listed) = document.jobs else {
                return Err(InputProblem {
                    reason: "JobConfigMapInvalid",
                    message: format!(
                        "Swarm {swarm}: ConfigMap {name} key {key} has no `jobs` list"
                    ),
                });
            };
            keys.extend(listed);
        }
    }
    JobSet::parse(keys).map_err(|invalid| InputProblem {
        reason: "InvalidJobs",
        message: format!("Swarm {swarm}: {invalid}"),
    })
}

/// The core strategy for a strategy spec.
pub fn strategy_of(spec: &StrategySpec) -> Strategy {
    match spec.type_ {
        StrategyType::Bounded => Strategy::Bounded {
            epsilon: spec.epsilon.unwrap_or(0.0),
        },
        StrategyType::Jump => Strategy::Jump,
        StrategyType::Ring => Strategy::Ring {
            vnodes: spec.vnodes.unwrap_or(DEFAULT_VNODES),
        },
    }
}

/// Parses a duration such as `90s`, `5m`, `1h30m`, `250ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".to_owned());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return Err(format!("duration {text:?}: expected a number at {rest:?}"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("duration {text:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            "" => return Err(format!("duration {text:?}: missing unit (ms, s, m, h)")),
            other => {
                return Err(format!(
                    "duration {text:?}: unknown unit {other:?} (ms, s, m, h)"
                ));
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
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

/// A member as the plan sees it.
struct MemberView {
    id: MemberId,
    pod: Option<PodState>,
    lease: Option<LeaseState>,
    unavailable_since: Option<Timestamp>,
    failed_over: bool,
}

impl MemberView {
    fn name(&self) -> String {
        self.id.pod_name()
    }

    /// Pod exists, is Ready, is not being deleted, and its Lease (if any) is live.
    fn available(&self, now: Timestamp) -> bool {
        let pod_ok = self
            .pod
            .as_ref()
            .is_some_and(|pod| pod.ready && !pod.deleting);
        let lease_ok = self.lease.as_ref().is_none_or(|lease| !lease.expired(now));
        pod_ok && lease_ok
    }
}

fn observe_members(
    obs: &Observation,
    failover_after: Option<Duration>,
) -> (Vec<MemberView>, Option<Duration>) {
    let previous: BTreeMap<&str, &MemberStatus> = obs
        .status
        .members
        .iter()
        .map(|member| (member.name.as_str(), member))
        .collect();
    let forced: BTreeSet<&str> = obs
        .annotations
        .get(FAILOVER_NOW_ANNOTATION)
        .map(|pods| {
            pods.split(',')
                .map(str::trim)
                .filter(|pod| !pod.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let mut views = Vec::new();
    let mut next_deadline: Option<Duration> = None;
    for pool in &obs.pools {
        for ordinal in 0..pool.replicas {
            let id = MemberId::new(pool.name.clone(), ordinal);
            let name = id.pod_name();
            let mut view = MemberView {
                id,
                pod: pool.pods.get(&ordinal).cloned(),
                lease: obs.leases.get(&name).cloned(),
                unavailable_since: None,
                failed_over: false,
            };
            if !view.available(obs.now) {
                let since = previous
                    .get(name.as_str())
                    .and_then(|member| member.unavailable_since.as_deref())
                    .and_then(|since| since.parse::<Timestamp>().ok())
                    .unwrap_or(obs.now);
                view.unavailable_since = Some(since);
                if let Some(after) = failover_after {
                    let elapsed = obs.now.duration_since(since);
                    let after_signed =
                        SignedDuration::try_from(after).unwrap_or(SignedDuration::MAX);
                    if elapsed >= after_signed {
                        view.failed_over = true;
                    } else {
                        let left = Duration::try_from(after_signed - elapsed).unwrap_or_default();
                        next_deadline = Some(next_deadline.map_or(left, |d| d.min(left)));
                    }
                }
            }
            if forced.contains(name.as_str()) {
                view.failed_over = true;
            }
            views.push(view);
        }
    }
    (views, next_deadline)
}

/// Parses a slice ConfigMap's text into jobs, or says what is wrong with it.
fn parse_observed(swarm: &str, member: &str, object: &SliceObject) -> Result<Slice, String> {
    if let Some(error) = &object.decode_error {
        return Err(format!("slice of {member}: {error}"));
    }
    let Some(text) = &object.text else {
        return Err(format!("slice ConfigMap of {member} has no slice.yaml"));
    };
    let slice = parse_slice(text).map_err(|error| format!("slice of {member}: {error}"))?;
    if slice.swarm != swarm || slice.member != member {
        return Err(format!(
            "slice of {member} names swarm {} member {}",
            slice.swarm, slice.member
        ));
    }
    if canonical_hash(&slice.jobs) != slice.hash {
        return Err(format!(
            "slice of {member}: hash does not match its jobs (edited by hand?)"
        ));
    }
    Ok(slice)
}

fn revision_record(
    revision: u64,
    hash: &str,
    strategy: &StrategySpec,
    members: &[Member],
    jobs: &JobSet,
) -> RevisionRecord {
    RevisionRecord {
        revision,
        hash: hash.to_owned(),
        strategy: strategy.clone(),
        members: members.iter().map(|member| member.id.pod_name()).collect(),
        unavailable: members
            .iter()
            .filter(|member| !member.available)
            .map(|member| member.id.pod_name())
            .collect(),
        jobs: jobs.iter().map(|key| key.as_str().to_owned()).collect(),
        jobs_omitted: false,
    }
}

/// Recomputes the assignment of a recorded revision.
pub fn replay(record: &RevisionRecord) -> Result<Assignment, String> {
    let jobs = JobSet::parse(record.jobs.iter().cloned()).map_err(|error| error.to_string())?;
    let unavailable: BTreeSet<&str> = record.unavailable.iter().map(String::as_str).collect();
    let mut members = Vec::new();
    for name in &record.members {
        let (pool, ordinal) = name
            .rsplit_once('-')
            .and_then(|(pool, ordinal)| Some((pool, ordinal.parse::<u32>().ok()?)))
            .ok_or_else(|| format!("revision {}: bad member name {name}", record.revision))?;
        members
            .push(Member::new(pool, ordinal).with_available(!unavailable.contains(name.as_str())));
    }
    assign(&jobs, &members, &strategy_of(&record.strategy)).map_err(|error| error.to_string())
}

fn condition(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: None,
        observed_generation: None,
    }
}

fn previous_condition<'a>(status: &'a SwarmStatus, type_: &str) -> Option<&'a Condition> {
    status
        .conditions
        .iter()
        .find(|condition| condition.type_ == type_)
}

/// Computes what to do. Pure: the same observation gives the same plan.
pub fn plan(obs: &Observation) -> Plan {
    let mut events = Vec::new();
    let mut problems: Vec<InputProblem> = Vec::new();
    let spec = &obs.spec;
    let previous = &obs.status;

    let failover_after = match spec.failover.after.as_deref() {
        None => None,
        Some(text) => match parse_duration(text) {
            Ok(after) => Some(after),
            Err(error) => {
                problems.push(InputProblem {
                    reason: "InvalidFailover",
                    message: format!("Swarm {}: failover.after: {error}", obs.swarm),
                });
                None
            }
        },
    };
    let (views, failover_deadline) = observe_members(obs, failover_after);
    let members: Vec<Member> = views
        .iter()
        .map(|view| {
            Member::new(view.id.pool.clone(), view.id.ordinal).with_available(!view.failed_over)
        })
        .collect();

    // What is in the cluster now.
    let mut observed: BTreeMap<String, Result<Slice, String>> = BTreeMap::new();
    for (member, object) in &obs.slices {
        observed.insert(member.clone(), parse_observed(&obs.swarm, member, object));
    }

    // The revision in force, recomputed from its recorded inputs.
    let current_revision = previous.current_revision;
    let current_target: Option<Assignment> = if current_revision == 0 {
        None
    } else {
        match obs.history.get(&current_revision).map(|record| {
            if record.jobs_omitted {
                Err(String::new())
            } else {
                replay(record)
            }
        }) {
            Some(Ok(assignment)) => Some(assignment),
            Some(Err(_))
                if obs
                    .history
                    .get(&current_revision)
                    .is_some_and(|record| record.jobs_omitted) =>
            {
                None
            }
            Some(Err(error)) => {
                problems.push(InputProblem {
                    reason: "HistoryInvalid",
                    message: format!("revision {current_revision} cannot be replayed: {error}"),
                });
                None
            }
            // Reported below unless the inputs still match it, in which case it is rewritten.
            None => None,
        }
    };
    // Without a replayable revision, what the slices say is what is in force.
    let in_force: Option<Assignment> = match &current_target {
        Some(assignment) => Some(assignment.clone()),
        None => {
            let slices = observed.iter().filter_map(|(name, slice)| {
                let slice = slice.as_ref().ok()?;
                let (pool, ordinal) = name.rsplit_once('-')?;
                Some((
                    MemberId::new(pool, ordinal.parse().ok()?),
                    slice.jobs.clone(),
                ))
            });
            // Two slices claiming one job (hand edits) leave nothing trustworthy to diff against.
            Assignment::from_slices(slices)
                .or_else(|_| Assignment::from_slices(std::iter::empty()))
                .ok()
        }
    };

    // What the inputs ask for.
    // A rollback takes the job list and strategy of a recorded revision instead of the spec's.
    let (inputs, strategy_spec): (Result<JobSet, InputProblem>, StrategySpec) = match obs
        .annotations
        .get(ROLLBACK_ANNOTATION)
    {
        None => (
            job_list(&obs.swarm, spec, &obs.job_source),
            spec.strategy.clone(),
        ),
        Some(text) => {
            let record = text
                .trim()
                .parse::<u64>()
                .ok()
                .and_then(|revision| obs.history.get(&revision))
                .filter(|record| !record.jobs_omitted);
            match record {
                Some(record) => (
                    JobSet::parse(record.jobs.iter().cloned()).map_err(|invalid| InputProblem {
                        reason: "RollbackUnavailable",
                        message: format!("revision {}: {invalid}", record.revision),
                    }),
                    record.strategy.clone(),
                ),
                None => (
                    Err(InputProblem {
                        reason: "RollbackUnavailable",
                        message: format!(
                            "Swarm {}: {ROLLBACK_ANNOTATION}={text:?} names no revision in the history (kept: {:?})",
                            obs.swarm,
                            obs.history.keys().collect::<Vec<_>>()
                        ),
                    }),
                    spec.strategy.clone(),
                ),
            }
        }
    };
    let desired: Result<(JobSet, Assignment), InputProblem> = inputs.and_then(|jobs| {
        let assignment =
            assign(&jobs, &members, &strategy_of(&strategy_spec)).map_err(|error| {
                InputProblem {
                    reason: if members.is_empty() {
                        "NoMembers"
                    } else {
                        "AssignmentFailed"
                    },
                    message: format!("Swarm {}: {error}", obs.swarm),
                }
            })?;
        Ok((jobs, assignment))
    });

    let mut operations = Vec::new();
    let mut status = SwarmStatus {
        observed_generation: obs.generation,
        current_revision,
        current_hash: previous.current_hash.clone(),
        pending_revision: previous.pending_revision.clone(),
        changed_at: previous.changed_at.clone(),
        ..SwarmStatus::default()
    };
    let mut applied_revision = None;
    let mut jobs_moved = 0;
    let mut awaiting: Option<Condition> = None;
    let mut target: Option<(u64, Assignment)> =
        current_target.clone().map(|a| (current_revision, a));

    match desired {
        Err(problem) => problems.push(problem),
        Ok((jobs, desired)) => {
            let desired_hash = assignment_hash(&desired);
            let same_as_current = current_revision != 0
                && previous.current_hash.as_deref() == Some(desired_hash.as_str());
            if same_as_current {
                if !obs.history.contains_key(&current_revision) {
                    operations.push(Operation::WriteRevision(revision_record(
                        current_revision,
                        &desired_hash,
                        &strategy_spec,
                        &members,
                        &jobs,
                    )));
                }
                if let Some(pending) = status.pending_revision.take() {
                    events.push(PlannedEvent {
                        warning: false,
                        reason: "RevisionWithdrawn".to_owned(),
                        note: format!(
                            "pending revision {} withdrawn: the inputs are back to revision {current_revision}",
                            pending.revision
                        ),
                    });
                }
                if target.is_none() {
                    target = Some((current_revision, desired));
                }
            } else {
                if current_revision != 0 && !obs.history.contains_key(&current_revision) {
                    problems.push(InputProblem {
                        reason: "HistoryMissing",
                        message: format!(
                            "history ConfigMap {} of the revision in force is missing; the slices in the cluster stand for it",
                            shoal_core::names::revision_configmap(&obs.swarm, current_revision)
                        ),
                    });
                }
                let change = match &in_force {
                    Some(in_force) => diff(in_force, &desired),
                    None => diff(&desired, &desired),
                };
                let restarts_needed = match spec.reload {
                    ReloadPolicy::HotReload => 0,
                    ReloadPolicy::Restart => change
                        .affected
                        .iter()
                        .filter(|member| {
                            views.iter().any(|view| {
                                &view.id == *member
                                    && view.pod.as_ref().is_some_and(|pod| !pod.deleting)
                            })
                        })
                        .count() as u64,
                };
                let previous_pending = status.pending_revision.clone();
                let (revision, supersedes) = match &previous_pending {
                    Some(pending) if pending.hash == desired_hash => {
                        (pending.revision, pending.summary.supersedes)
                    }
                    Some(pending) => (
                        pending.revision.max(current_revision) + 1,
                        Some(pending.revision),
                    ),
                    None => (current_revision + 1, None),
                };
                let summary = RevisionSummary {
                    jobs_moved: change.moved.len() as u64,
                    members_affected: change.affected.len() as u64,
                    restarts_needed,
                    lower_bound: change.lower_bound as u64,
                    supersedes,
                };
                let disrupted = match spec.reload {
                    ReloadPolicy::HotReload => summary.members_affected,
                    ReloadPolicy::Restart => summary.restarts_needed,
                };
                let approval = obs.annotations.get(APPROVE_ANNOTATION);
                let approved_number = approval.and_then(|text| text.trim().parse::<u64>().ok());
                let (approved, waiting_reason, waiting_message) = match spec.approval.policy {
                    ApprovalPolicy::Automatic => (true, "", String::new()),
                    ApprovalPolicy::Manual => (
                        approved_number == Some(revision),
                        "ManualApproval",
                        String::from("the approval policy is Manual"),
                    ),
                    ApprovalPolicy::Budget => {
                        let within_members = spec
                            .approval
                            .max_disrupted_members
                            .is_some_and(|max| disrupted <= u64::from(max));
                        let within_jobs = spec
                            .approval
                            .max_moved_jobs
                            .is_some_and(|max| summary.jobs_moved <= max);
                        (
                            within_members || within_jobs || approved_number == Some(revision),
                            "OverBudget",
                            format!(
                                "it disrupts {disrupted} members (budget {}) and moves {} jobs (budget {})",
                                spec.approval
                                    .max_disrupted_members
                                    .map_or("none".to_owned(), |max| max.to_string()),
                                summary.jobs_moved,
                                spec.approval
                                    .max_moved_jobs
                                    .map_or("none".to_owned(), |max| max.to_string()),
                            ),
                        )
                    }
                };
                if let Some(superseded) = supersedes.filter(|_| {
                    previous_pending
                        .as_ref()
                        .is_some_and(|pending| pending.hash != desired_hash)
                }) {
                    events.push(PlannedEvent {
                        warning: false,
                        reason: "RevisionSuperseded".to_owned(),
                        note: format!(
                            "revision {revision} supersedes pending revision {superseded}"
                        ),
                    });
                }
                if approved {
                    let record =
                        revision_record(revision, &desired_hash, &strategy_spec, &members, &jobs);
                    operations.push(Operation::WriteRevision(record));
                    status.current_revision = revision;
                    status.current_hash = Some(desired_hash.clone());
                    status.pending_revision = None;
                    if status.changed_at.is_none() {
                        status.changed_at = Some(obs.now.to_string());
                    }
                    applied_revision = Some(revision);
                    jobs_moved = summary.jobs_moved;
                    events.push(PlannedEvent {
                        warning: false,
                        reason: "RevisionApproved".to_owned(),
                        note: format!(
                            "applying revision {revision}: {} jobs moved, {} members affected, {} restarts",
                            summary.jobs_moved, summary.members_affected, summary.restarts_needed
                        ),
                    });
                    target = Some((revision, desired));
                } else {
                    let is_new = previous_pending
                        .as_ref()
                        .is_none_or(|pending| pending.revision != revision);
                    if is_new {
                        events.push(PlannedEvent {
                            warning: false,
                            reason: "RevisionPending".to_owned(),
                            note: format!(
                                "revision {revision} waits for approval: {} jobs moved, {} members affected, {} restarts; approve with `kubectl annotate swarm {} {APPROVE_ANNOTATION}={revision} --overwrite`",
                                summary.jobs_moved, summary.members_affected, summary.restarts_needed, obs.swarm
                            ),
                        });
                    }
                    if status.changed_at.is_none() {
                        status.changed_at = Some(obs.now.to_string());
                    }
                    let mut message = format!(
                        "revision {revision} waits for approval because {waiting_message}; approve with `kubectl annotate swarm {} {APPROVE_ANNOTATION}={revision} --overwrite`",
                        obs.swarm
                    );
                    match (approval, approved_number) {
                        (Some(text), None) => {
                            message.push_str(&format!("; annotation {APPROVE_ANNOTATION}={text:?} is not a revision number and is ignored"));
                        }
                        (Some(_), Some(number))
                            if number > current_revision && number != revision =>
                        {
                            message.push_str(&format!(
                                "; the approval of revision {number} is stale and ignored (pending revision is {revision})"
                            ));
                        }
                        _ => {}
                    }
                    awaiting = Some(condition("AwaitingApproval", true, waiting_reason, message));
                    status.pending_revision = Some(PendingRevision {
                        revision,
                        hash: desired_hash,
                        summary,
                    });
                }
            }
        }
    }

    // Converge the slices towards the target.
    let mut rollout_done = true;
    let mut requeue_after = failover_deadline;
    let mut slice_problems: Vec<String> = Vec::new();
    let mut member_statuses = Vec::new();
    let mut target_slices: BTreeMap<MemberId, Slice> = BTreeMap::new();
    if let Some((revision, assignment)) = &target {
        let revision = *revision;
        let by_name: BTreeMap<String, &MemberView> =
            views.iter().map(|view| (view.name(), view)).collect();
        let member_jobs = assignment.member_jobs();
        let mut revokes = Vec::new();
        let mut grants = Vec::new();
        let mut deletes = Vec::new();
        let mut unsettled: Vec<String> = Vec::new();
        // Post-write state of every slice, to decide restarts and the index.
        let mut written_for: BTreeMap<String, String> = BTreeMap::new();
        let names: BTreeSet<String> = member_jobs
            .keys()
            .map(MemberId::pod_name)
            .chain(observed.keys().cloned())
            .collect();
        // Members that left the pools (scaled down) but whose pod still exists, terminating or
        // not: until the pod is gone it may still run its jobs, so they are revoked and must
        // settle like any other revoke before anyone else is granted them.
        let leaving: BTreeMap<String, MemberView> = members_leaving(obs, &by_name);
        for name in &names {
            let view = by_name.get(name).copied().or_else(|| leaving.get(name));
            let target_jobs: Option<&JobSet> = member_jobs
                .iter()
                .find(|(member, _)| &member.pod_name() == name)
                .map(|(_, jobs)| jobs);
            let object = obs.slices.get(name);
            let held: Result<Option<Slice>, String> = match observed.get(name) {
                None => Ok(None),
                Some(Ok(slice)) => Ok(Some(slice.clone())),
                Some(Err(problem)) => Err(problem.clone()),
            };
            if let Err(problem) = &held {
                slice_problems.push(problem.clone());
            }
            // A slice written before (the last status lists its hash) but now gone was deleted by hand.
            let was_converged =
                previous_condition(previous, "Ready").is_some_and(|ready| ready.status == "True");
            let written_before = was_converged
                && previous
                    .members
                    .iter()
                    .any(|member| &member.name == name && member.slice_hash.is_some());
            if object.is_none() && target_jobs.is_some() && written_before {
                slice_problems.push(format!(
                    "slice ConfigMap {} of member {name} was deleted",
                    shoal_core::names::slice_configmap(name)
                ));
            }
            let pod_uid = view
                .and_then(|view| view.pod.as_ref())
                .map(|pod| pod.uid.clone());
            let empty = JobSet::default();
            let want = target_jobs.unwrap_or(&empty);
            let held_jobs: JobSet = match &held {
                Ok(Some(slice)) => slice.jobs.clone(),
                // An unreadable slice is treated as empty; it is rewritten when granting is safe.
                _ => JobSet::default(),
            };
            if let Some(object) = object {
                written_for.insert(
                    name.clone(),
                    object.written_for_uid.clone().unwrap_or_default(),
                );
            }
            let member_id = view.map(|view| view.id.clone()).or_else(|| {
                let (pool, ordinal) = name.rsplit_once('-')?;
                Some(MemberId::new(pool, ordinal.parse().ok()?))
            });
            let Some(member_id) = member_id else { continue };
            let keep: Vec<String> = held_jobs
                .iter()
                .filter(|key| want.contains(key.as_str()))
                .map(|key| key.as_str().to_owned())
                .collect();
            let loses = keep.len() != held_jobs.len();
            // Slices revoked by this rollout (or by the one it superseded) must be settled before
            // anything is granted. With a sidecar (a Lease) so must any older revoke: once a newer
            // revision is approved, `current_revision` moves past revokes that may still be in
            // flight, and an acknowledged revoke stays settled, so checking it costs nothing.
            let has_lease = view.is_some_and(|view| view.lease.is_some());
            let revoked_here = object
                .is_some_and(|object| object.phase.as_deref() == Some("revoke"))
                && held
                    .as_ref()
                    .ok()
                    .and_then(|slice| slice.as_ref())
                    .is_some_and(|slice| {
                        slice.revision >= current_revision.min(revision) || has_lease
                    });
            if revoked_here {
                let settled = match view {
                    None => true,
                    Some(view) => {
                        let revoked = held
                            .as_ref()
                            .ok()
                            .and_then(|s| s.as_ref())
                            .map(|s| (s.revision, s.hash.as_str()));
                        settled(
                            view,
                            revoked,
                            object.and_then(|o| o.written_for_uid.as_deref()),
                            spec.reload,
                            obs.now,
                        )
                    }
                };
                if !settled {
                    unsettled.push(name.clone());
                }
            }
            if target_jobs.is_none() {
                // The member left the pools.
                let pod_gone = view.is_none_or(|view| view.pod.is_none());
                if pod_gone || held_jobs.is_empty() && held.is_ok() {
                    if pod_gone {
                        deletes.push(name.clone());
                    }
                    continue;
                }
            }
            if loses {
                let reduced = JobSet::parse(keep).unwrap_or_default();
                let slice = Slice::new(obs.swarm.clone(), name.clone(), revision, reduced);
                written_for.insert(name.clone(), pod_uid.clone().unwrap_or_default());
                revokes.push(Operation::WriteSlice {
                    member: member_id.clone(),
                    slice,
                    written_for_uid: pod_uid.clone().unwrap_or_default(),
                    phase: "revoke",
                    previous_parts: object.map_or(0, |object| object.parts),
                });
                unsettled.push(name.clone());
                continue;
            }
            let held_hash = held
                .as_ref()
                .ok()
                .and_then(|slice| slice.as_ref())
                .map(|slice| slice.hash.clone());
            let want_hash = canonical_hash(want);
            if target_jobs.is_some() && held_hash.as_deref() != Some(want_hash.as_str()) {
                let slice = Slice::new(obs.swarm.clone(), name.clone(), revision, want.clone());
                grants.push((
                    name.clone(),
                    pod_uid.clone().unwrap_or_default(),
                    Operation::WriteSlice {
                        member: member_id.clone(),
                        slice,
                        written_for_uid: pod_uid.clone().unwrap_or_default(),
                        phase: "grant",
                        previous_parts: object.map_or(0, |object| object.parts),
                    },
                ));
            }
        }
        let slices_changing = !revokes.is_empty() || !grants.is_empty();
        operations.extend(revokes);
        if unsettled.is_empty() {
            for (name, uid, grant) in grants {
                written_for.insert(name, uid);
                operations.push(grant);
            }
        } else if !grants.is_empty() {
            requeue_after = Some(
                requeue_after.map_or(Duration::from_secs(2), |d| d.min(Duration::from_secs(2))),
            );
        }
        if slices_changing || !unsettled.is_empty() {
            rollout_done = false;
        }
        for name in deletes {
            let parts = obs
                .slices
                .get(&name)
                .map_or(1, |object| object.parts.max(1));
            operations.push(Operation::DeleteSlice {
                member: name,
                parts,
            });
        }

        // Restarts: the pod that was running when its slice was written.
        if spec.reload == ReloadPolicy::Restart {
            let unavailable_now = views
                .iter()
                .filter(|view| !view.failed_over && !view.available(obs.now))
                .count();
            let mut budget =
                (spec.rollout.max_unavailable.max(1) as usize).saturating_sub(unavailable_now);
            for view in &views {
                let Some(pod) = &view.pod else { continue };
                if pod.deleting || view.failed_over {
                    continue;
                }
                let needs = written_for
                    .get(&view.name())
                    .is_some_and(|uid| !uid.is_empty() && uid == &pod.uid);
                if !needs {
                    continue;
                }
                rollout_done = false;
                if budget > 0 && pod.ready {
                    budget -= 1;
                    operations.push(Operation::Evict {
                        pod: view.name(),
                        uid: pod.uid.clone(),
                    });
                }
            }
            if !rollout_done {
                requeue_after = Some(
                    requeue_after.map_or(Duration::from_secs(2), |d| d.min(Duration::from_secs(2))),
                );
            }
        }

        // The index, once every slice is in place.
        let previous_slices: BTreeMap<MemberId, Slice> = observed
            .iter()
            .filter_map(|(name, slice)| {
                let slice = slice.as_ref().ok()?;
                let (pool, ordinal) = name.rsplit_once('-')?;
                Some((MemberId::new(pool, ordinal.parse().ok()?), slice.clone()))
            })
            .collect();
        target_slices = assignment.slices_since(&previous_slices, &obs.swarm, revision);
        if rollout_done {
            let index_text = index_text(&target_slices, revision);
            if obs.index.as_deref() != Some(index_text.as_str()) {
                operations.push(Operation::WriteIndex { text: index_text });
            }
        }
        if !slice_problems.is_empty() {
            events.push(PlannedEvent {
                warning: true,
                reason: "SliceRestored".to_owned(),
                note: format!("putting back slices: {}", slice_problems.join("; ")),
            });
        }
        status.jobs = assignment.jobs().len() as u64;
    } else if !obs.slices.is_empty() {
        rollout_done = true;
    }

    // Prune history beyond the limit (never the revision in force).
    let limit = spec.revision_history_limit.max(1) as usize;
    let mut kept: Vec<u64> = obs.history.keys().copied().collect();
    if let Some(applied) = applied_revision {
        kept.push(applied);
    }
    kept.sort_unstable();
    kept.dedup();
    if kept.len() > limit {
        for revision in &kept[..kept.len() - limit] {
            if *revision != status.current_revision && obs.history.contains_key(revision) {
                operations.push(Operation::PruneRevision {
                    revision: *revision,
                });
            }
        }
    }

    // Members.
    let mut ready = 0;
    for view in &views {
        let name = view.name();
        let is_ready = view
            .pod
            .as_ref()
            .is_some_and(|pod| pod.ready && !pod.deleting);
        if is_ready {
            ready += 1;
        }
        let slice = target_slices.get(&view.id);
        member_statuses.push(MemberStatus {
            name: name.clone(),
            pool: view.id.pool.clone(),
            ready: is_ready,
            slice_size: slice.map_or(0, |slice| slice.jobs.len() as u64),
            slice_hash: slice.map(|slice| slice.hash.clone()),
            acked_revision: view.lease.as_ref().and_then(|lease| lease.acked_revision),
            unavailable_since: view.unavailable_since.map(|since| since.to_string()),
            failed_over: view.failed_over,
        });
        let was_failed_over = previous
            .members
            .iter()
            .any(|member| member.name == name && member.failed_over);
        if view.failed_over && !was_failed_over {
            events.push(PlannedEvent {
                warning: true,
                reason: "MemberFailedOver".to_owned(),
                note: format!("member {name} is unavailable; its jobs move to the other members"),
            });
        } else if !view.failed_over && was_failed_over {
            events.push(PlannedEvent {
                warning: false,
                reason: "MemberReturned".to_owned(),
                note: format!("member {name} is available again; its jobs return to it"),
            });
        }
    }
    status.members = member_statuses;
    status.ready = Some(format!("{ready}/{}", views.len()));

    // Conditions.
    let degraded = match problems.first() {
        Some(problem) => {
            let message = problems
                .iter()
                .map(|p| p.message.clone())
                .collect::<Vec<_>>()
                .join("; ");
            condition("Degraded", true, problem.reason, message)
        }
        None if !slice_problems.is_empty() => {
            condition("Degraded", true, "SliceEdited", slice_problems.join("; "))
        }
        None => condition("Degraded", false, "AsExpected", String::new()),
    };
    let has_target = target.is_some();
    let progressing = if has_target && !rollout_done {
        condition(
            "Progressing",
            true,
            "RollingOut",
            format!("applying revision {}", status.current_revision),
        )
    } else {
        condition("Progressing", false, "Converged", String::new())
    };
    let ready_condition = if has_target && rollout_done {
        condition(
            "Ready",
            true,
            "Converged",
            format!(
                "revision {} is in force on every member",
                status.current_revision
            ),
        )
    } else if has_target {
        condition(
            "Ready",
            false,
            "RollingOut",
            format!("revision {} is being applied", status.current_revision),
        )
    } else {
        condition(
            "Ready",
            false,
            "NoRevision",
            "no revision has been applied yet".to_owned(),
        )
    };
    let awaiting = awaiting
        .unwrap_or_else(|| condition("AwaitingApproval", false, "NothingPending", String::new()));
    status.phase = Some(
        if degraded.status == "True" && !has_target {
            "Degraded"
        } else if awaiting.status == "True" {
            "AwaitingApproval"
        } else if degraded.status == "True" {
            "Degraded"
        } else if progressing.status == "True" {
            "Progressing"
        } else if has_target {
            "Ready"
        } else {
            "Pending"
        }
        .to_owned(),
    );
    status.last_error = problems
        .first()
        .map(|problem| problem.message.clone())
        .or_else(|| slice_problems.first().cloned());

    // Events for condition transitions.
    let previous_degraded = previous_condition(previous, "Degraded");
    if degraded.status == "True"
        && previous_degraded
            .is_none_or(|old| old.status != "True" || old.message != degraded.message)
        && degraded.reason != "SliceEdited"
    {
        events.push(PlannedEvent {
            warning: true,
            reason: degraded.reason.clone(),
            note: degraded.message.clone(),
        });
    }
    if degraded.status == "False" && previous_degraded.is_some_and(|old| old.status == "True") {
        events.push(PlannedEvent {
            warning: false,
            reason: "Recovered".to_owned(),
            note: "the Swarm's inputs are valid again".to_owned(),
        });
    }
    let previous_awaiting = previous_condition(previous, "AwaitingApproval");
    if awaiting.status == "True"
        && awaiting.message.contains("stale")
        && previous_awaiting.is_none_or(|old| old.message != awaiting.message)
    {
        events.push(PlannedEvent {
            warning: true,
            reason: "StaleApproval".to_owned(),
            note: awaiting.message.clone(),
        });
    }
    let previous_progressing = previous_condition(previous, "Progressing");
    if progressing.status == "False"
        && has_target
        && (previous_progressing.is_some_and(|old| old.status == "True")
            || applied_revision.is_some())
    {
        events.push(PlannedEvent {
            warning: false,
            reason: "RevisionApplied".to_owned(),
            note: format!(
                "revision {} is in force on every member",
                status.current_revision
            ),
        });
        status.changed_at = None;
    }

    let mut conditions = vec![ready_condition, progressing, awaiting, degraded];
    for new in &mut conditions {
        new.observed_generation = obs.generation;
        new.last_transition_time = match previous_condition(previous, &new.type_) {
            Some(old) if old.status == new.status => old.last_transition_time.clone(),
            _ => Some(obs.now.to_string()),
        };
    }
    status.conditions = conditions;

    Plan {
        operations,
        status,
        events,
        requeue_after,
        applied_revision,
        jobs_moved,
    }
}

/// Pods of pool members beyond `spec.replicas` (the StatefulSet scaled down, the pod not
/// gone yet) that still have a slice, by pod name, as views with their Leases.
fn members_leaving(
    obs: &Observation,
    members: &BTreeMap<String, &MemberView>,
) -> BTreeMap<String, MemberView> {
    let mut leaving = BTreeMap::new();
    for pool in &obs.pools {
        for (ordinal, pod) in &pool.pods {
            let id = MemberId::new(pool.name.clone(), *ordinal);
            let name = id.pod_name();
            if members.contains_key(&name) || !obs.slices.contains_key(&name) {
                continue;
            }
            leaving.insert(
                name.clone(),
                MemberView {
                    id,
                    pod: Some(pod.clone()),
                    lease: obs.leases.get(&name).cloned(),
                    unavailable_since: None,
                    failed_over: false,
                },
            );
        }
    }
    leaving
}

/// Whether a member has let go of what its revoked slice (revision, hash) took away.
fn settled(
    view: &MemberView,
    revoked: Option<(u64, &str)>,
    written_for_uid: Option<&str>,
    reload: ReloadPolicy,
    now: Timestamp,
) -> bool {
    if view.failed_over {
        return true;
    }
    let Some(pod) = &view.pod else { return true };
    if let Some(lease) = &view.lease {
        if lease.expired(now) {
            return true;
        }
        // The acknowledgement must be of this revoke: the same hash at an older revision
        // (the member held these very jobs before, then was granted more) says nothing
        // about whether it has let go of what it was granted since.
        return revoked.is_some_and(|(revision, hash)| {
            lease.acked_hash.as_deref() == Some(hash)
                && lease.acked_revision.is_some_and(|acked| acked >= revision)
        });
    }
    // No sidecar: pod readiness stands in for an acknowledgement.
    match reload {
        ReloadPolicy::HotReload => pod.ready && !pod.deleting,
        ReloadPolicy::Restart => {
            pod.ready && !pod.deleting && written_for_uid != Some(pod.uid.as_str())
        }
    }
}

/// Largest index document written in the seed's `workloads:` shape; beyond it a summary.
pub const MAX_INDEX_BYTES: usize = 900 * 1024;

/// The index document: seed-compatible `workloads:` while it fits, else a per-member summary.
pub fn index_text(slices: &BTreeMap<MemberId, Slice>, revision: u64) -> String {
    let full = render_index(&Index::from_slices(slices, revision));
    if full.len() <= MAX_INDEX_BYTES {
        return full;
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

/// Renders a slice as the text of its ConfigMap.
pub fn slice_text(slice: &Slice) -> String {
    render_slice(slice)
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
