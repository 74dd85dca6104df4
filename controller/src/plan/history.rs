//! Revision history: the inputs of each revision kept as `<swarm>-rev-<n>`, so the
//! assignment in force can be recomputed exactly after a controller restart.
//!
//! A `sticky` revision depends on the revision before it, so recomputing it from its
//! inputs alone is not possible: its record also keeps the assignment itself (`owners`,
//! the owner of each job as an index into `members`), and replaying it reads that back.
//! The stateless strategies are recomputed from their inputs as before.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use shoal_core::{Assignment, JobSet, JobSettings, Member, MemberId, Slice, assign};

use super::inputs::strategy_of;
use super::members::member_of_pod;
use super::{InputProblem, Observation, Operation};
use crate::approvers::ApprovalRecord;
use crate::crd::StrategySpec;

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
    /// `sticky` only: the owner of each job (aligned with `jobs`) as an index into
    /// `members`. Empty for the stateless strategies, which are recomputed from the inputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<u32>,
    /// Members with generated names (pods of a Deployment pool): pod name → pool. Every
    /// other member is `<pool>-<ordinal>`. A generated name can look like one (its suffix
    /// may be all digits), so replay needs the pool said, not guessed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub generated_members: BTreeMap<String, String>,
    /// Who approved the revision and when (none in records of earlier releases, and in
    /// a record rewritten after it went missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
    /// Weights and dedication the revision was computed with (`sticky` only; replay
    /// reads `owners`, these say what the loads were).
    #[serde(default, skip_serializing_if = "JobSettings::is_plain")]
    pub job_settings: JobSettings,
}

impl RevisionRecord {
    /// The record without its job list (and so without its assignment), for a list too
    /// large to keep: the slices in the cluster then stand for the revision.
    pub fn without_jobs(&self) -> RevisionRecord {
        RevisionRecord {
            jobs: Vec::new(),
            owners: Vec::new(),
            jobs_omitted: true,
            ..self.clone()
        }
    }

    /// Keeps `assignment` (the revision's own) in the record when the strategy needs it
    /// to be replayed (`sticky`).
    pub(super) fn keep_assignment(&mut self, assignment: &Assignment) {
        if !strategy_of(&self.strategy).is_stateful() {
            return;
        }
        let position: BTreeMap<&str, u32> = self
            .members
            .iter()
            .enumerate()
            .map(|(index, name)| (name.as_str(), index as u32))
            .collect();
        let member_position: Vec<u32> = assignment
            .members()
            .iter()
            .map(|member| {
                position
                    .get(member.pod_name().as_str())
                    .copied()
                    .unwrap_or(u32::MAX)
            })
            .collect();
        self.owners = assignment
            .owner_indices()
            .iter()
            .map(|&owner| member_position[owner as usize])
            .collect();
    }
}

/// The data key of a revision history ConfigMap.
pub const REVISION_DATA_KEY: &str = "revision.json";

pub(super) fn revision_record(
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
        owners: Vec::new(),
        generated_members: members
            .iter()
            .filter(|member| member.id.ordinal().is_none())
            .map(|member| (member.id.pod_name(), member.id.pool.clone()))
            .collect(),
        approval: None,
        job_settings: JobSettings::new(),
    }
}

/// Records in the history records a plan writes the job settings their assignment was
/// computed with (every record a plan writes is of the desired inputs).
pub(super) fn keep_settings(operations: &mut [Operation], settings: &JobSettings) {
    for operation in operations {
        if let Operation::WriteRevision(record) = operation {
            record.job_settings = settings.clone();
        }
    }
}

/// Completes the history records a plan writes with the assignment of their revision,
/// for strategies whose replay needs it (see the module docs). `target` is the revision
/// the plan converges to: the only one whose record a plan writes.
pub(super) fn keep_assignments(operations: &mut [Operation], target: Option<&(u64, Assignment)>) {
    let Some((revision, assignment)) = target else {
        return;
    };
    for operation in operations {
        if let Operation::WriteRevision(record) = operation
            && record.revision == *revision
        {
            record.keep_assignment(assignment);
        }
    }
}

/// The assignment of a recorded revision: recomputed from its inputs, or for `sticky`,
/// read from the record (checked: every job owned by a listed, available member).
pub fn replay(record: &RevisionRecord) -> Result<Assignment, String> {
    let jobs = JobSet::parse(record.jobs.iter().cloned()).map_err(|error| error.to_string())?;
    let unavailable: BTreeSet<&str> = record.unavailable.iter().map(String::as_str).collect();
    let mut members = Vec::new();
    for name in &record.members {
        let id = match record.generated_members.get(name) {
            Some(pool) => MemberId::generated(pool.clone(), name.clone()),
            None => name
                .rsplit_once('-')
                .and_then(|(pool, ordinal)| Some(MemberId::new(pool, ordinal.parse().ok()?)))
                .ok_or_else(|| format!("revision {}: bad member name {name}", record.revision))?,
        };
        members.push(Member::of(id).with_available(!unavailable.contains(name.as_str())));
    }
    let strategy = strategy_of(&record.strategy);
    if strategy.is_stateful() {
        return Assignment::from_owners(&members, jobs, &record.owners).map_err(|error| {
            format!(
                "revision {}: the recorded {strategy} assignment is inconsistent: {error}",
                record.revision
            )
        });
    }
    assign(&jobs, &members, &strategy).map_err(|error| error.to_string())
}

/// The revision in force, as far as the cluster tells.
pub(super) struct InForce {
    /// The revision in force recomputed from its history record, when it can be.
    pub replayed: Option<Assignment>,
    /// What is in force: the replayed revision, else what the slices in the cluster say.
    pub assignment: Option<Assignment>,
}

/// Recovers the assignment in force from the history (or, failing that, the slices).
pub(super) fn in_force(
    obs: &Observation,
    observed: &BTreeMap<String, Result<Slice, String>>,
    problems: &mut Vec<InputProblem>,
) -> InForce {
    let current_revision = obs.status.current_revision;
    let replayed = match obs.history.get(&current_revision) {
        _ if current_revision == 0 => None,
        // Reported by the gate unless the inputs still match it, in which case it is rewritten.
        None => None,
        // Too large to keep: the slices in the cluster stand for it.
        Some(record) if record.jobs_omitted => None,
        Some(record) => match replay(record) {
            Ok(assignment) => Some(assignment),
            Err(error) => {
                problems.push(InputProblem {
                    reason: "HistoryInvalid",
                    message: format!("revision {current_revision} cannot be replayed: {error}"),
                });
                None
            }
        },
    };
    let assignment = match &replayed {
        Some(assignment) => Some(assignment.clone()),
        None => {
            let slices = observed.iter().filter_map(|(name, slice)| {
                let slice = slice.as_ref().ok()?;
                Some((member_of_pod(&obs.pools, name), slice.jobs.clone()))
            });
            // Two slices claiming one job (hand edits) leave nothing trustworthy to diff against.
            Assignment::from_slices(slices)
                .or_else(|_| Assignment::from_slices(std::iter::empty()))
                .ok()
        }
    };
    InForce {
        replayed,
        assignment,
    }
}

/// Deletes history beyond `limit` revisions, never the revision in force.
pub(super) fn prune(
    obs: &Observation,
    limit: u32,
    applied_revision: Option<u64>,
    current_revision: u64,
) -> Vec<Operation> {
    let limit = limit.max(1) as usize;
    let mut kept: Vec<u64> = obs.history.keys().copied().collect();
    if let Some(applied) = applied_revision {
        kept.push(applied);
    }
    kept.sort_unstable();
    kept.dedup();
    if kept.len() <= limit {
        return Vec::new();
    }
    kept[..kept.len() - limit]
        .iter()
        .filter(|revision| **revision != current_revision && obs.history.contains_key(revision))
        .map(|revision| Operation::PruneRevision {
            revision: *revision,
        })
        .collect()
}
