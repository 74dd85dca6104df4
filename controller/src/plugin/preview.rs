//! `kubectl shoal diff`: what a change would do, computed by the controller's
//! own planner on an observation of the cluster with the change applied in
//! memory. Nothing is written.
//!
//! The planner is run three times on the same observation: as it is (does the
//! approval gate let the revision through?), with the gate closed (the
//! revision number and the summary the controller would publish as pending),
//! and with the gate open (the revision record the controller would write,
//! which is replayed into the exact assignment). The moves are the core's
//! [`shoal_core::diff`] between the assignment in force and that one — the
//! same diff the planner summarises.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use shoal_core::format::parse_slice;
use shoal_core::names::ANNOTATION_APPROVE;
use shoal_core::{Assignment, Diff, JobSet, diff};

use super::Report;
use super::table::{Table, fields};
use crate::api::swarm::{ApprovalPolicy, ReloadPolicy, RevisionSummary};
use crate::swarm::decide::{self, JobSource, Observation, Operation, replay};

/// A change to preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// No change: what the controller does with the cluster as it is (e.g. the pending revision).
    AsIs,
    /// Scale a pool.
    Replicas {
        /// The pool; `None` when the Swarm has exactly one.
        pool: Option<String>,
        /// The new `spec.replicas`.
        replicas: u32,
    },
    /// Replace the whole job list.
    Jobs {
        /// Where the list came from (for messages).
        source: String,
        /// The keys.
        jobs: Vec<String>,
    },
    /// Rewrite the strategy, and with `jobs` the job list, to those of a recorded
    /// revision (`undo`; without `jobs` the job list stays where the Swarm reads it).
    RollbackTo {
        /// The recorded revision.
        revision: u64,
        /// Whether the job list is rewritten too (inline, `jobsFrom` dropped).
        jobs: bool,
    },
}

/// Why a change cannot be previewed.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// The jobs file could not be read.
    #[error("cannot read jobs file {path}: {source}")]
    ReadJobsFile {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The jobs file holds an invalid job list.
    #[error("jobs file {path}: {message}; fix the file and run the diff again")]
    ParseJobsFile {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// `--replicas` on a Swarm without pools.
    #[error(
        "Swarm {namespace}/{swarm} has no pool; label a StatefulSet with `kubectl label statefulset <name> shoal.dev/swarm={swarm} -n {namespace}`"
    )]
    NoPools {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
    },
    /// `--replicas` of a Deployment pool: its members are pods whose names do not exist yet.
    #[error(
        "pool {pool} of Swarm {namespace}/{swarm} is a Deployment: its members are its pods, whose generated names are unknown until they exist, so a scale cannot be previewed; scale it and review the pending revision (Manual approval) instead"
    )]
    DeploymentPoolScale {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The Deployment.
        pool: String,
    },
    /// `--replicas` without `--pool` on a Swarm with several pools.
    #[error(
        "Swarm {namespace}/{swarm} has {} pools ({}); say which one to scale with --pool",
        pools.len(), pools.join(", ")
    )]
    AmbiguousPool {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Its pools.
        pools: Vec<String>,
    },
    /// `--pool` names no pool of the Swarm.
    #[error(
        "Swarm {namespace}/{swarm} has no pool {pool:?} (pools: {}); a pool is a StatefulSet labelled shoal.dev/swarm={swarm}",
        pools.join(", ")
    )]
    UnknownPool {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The name given.
        pool: String,
        /// Its pools.
        pools: Vec<String>,
    },
    /// The revision to roll back to is not recorded with its job list.
    #[error(
        "Swarm {namespace}/{swarm}: revision {revision} is not in the history with its job list; list the revisions with `kubectl shoal history {swarm} -n {namespace}`"
    )]
    NoRecord {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The revision.
        revision: u64,
    },
    /// The planner computes no revision from these inputs (bad input, no members).
    #[error(
        "Swarm {namespace}/{swarm}: with this change the controller would apply nothing and report {reason}: {message}"
    )]
    NoRevision {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The Degraded reason the controller would report.
        reason: String,
        /// Its message.
        message: String,
    },
    /// A revision record the preview needs cannot be replayed.
    #[error("Swarm {namespace}/{swarm}: revision {revision} cannot be recomputed: {message}")]
    Replay {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The revision.
        revision: u64,
        /// Why.
        message: String,
    },
}

/// A job that changes owner.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct JobMove {
    /// The job key.
    pub job: String,
    /// Its owner now (pod name).
    pub from: String,
    /// Its owner after the change (pod name).
    pub to: String,
}

/// A job that appears or disappears, and the member concerned.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct JobPlacement {
    /// The job key.
    pub job: String,
    /// The member that receives it (created) or gives it up (deleted).
    pub member: String,
}

/// One member before and after.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MemberChangeRow {
    /// Pod name.
    pub member: String,
    /// Jobs it owns now.
    pub before: usize,
    /// Jobs it owns after.
    pub after: usize,
    /// Jobs it gains.
    pub gains: Vec<String>,
    /// Jobs it loses.
    pub loses: Vec<String>,
    /// `unchanged`, `revoke`, `grant after revokes are acknowledged`, or `revoke, then grant`.
    pub step: String,
}

/// A pod the change restarts (reload policy Restart).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PodRestart {
    /// Pod name.
    pub pod: String,
    /// Its uid now (the eviction is conditional on it).
    pub uid: String,
    /// 1, or 2 when the member both gives jobs away and receives jobs.
    pub times: u32,
    /// Why.
    pub reason: String,
}

/// What a change would do.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DiffReport {
    /// Swarm.
    pub swarm: String,
    /// Namespace.
    pub namespace: String,
    /// The change, in words.
    pub change: String,
    /// Revision in force.
    pub current_revision: u64,
    /// The revision the change becomes; `None` when nothing would change.
    pub revision: Option<u64>,
    /// The summary the controller publishes for it.
    pub summary: Option<RevisionSummary>,
    /// Whether it waits for `kubectl shoal approve`.
    pub needs_approval: bool,
    /// What the approval gate does with it, in words.
    pub decision: String,
    /// Jobs that change owner, in job order.
    pub moves: Vec<JobMove>,
    /// New jobs and who receives them.
    pub created: Vec<JobPlacement>,
    /// Removed jobs and who gives them up.
    pub deleted: Vec<JobPlacement>,
    /// Every member before and after.
    pub members: Vec<MemberChangeRow>,
    /// Pods restarted (reload policy Restart).
    pub restarts: Vec<PodRestart>,
    /// Anything else worth knowing.
    pub notes: Vec<String>,
}

/// The seed's job-list document.
#[derive(Deserialize)]
struct JobListDocument {
    jobs: Vec<String>,
}

/// Reads a jobs file: a `jobs: [...]` document, a YAML list, or one key per line
/// (blank lines and `#` comments skipped). The keys are validated like the controller does.
pub fn read_jobs_file(path: &Path) -> Result<Vec<String>, PreviewError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PreviewError::ReadJobsFile {
        path: shown.clone(),
        source,
    })?;
    let keys = parse_jobs_text(&text);
    JobSet::parse(keys.iter().cloned()).map_err(|invalid| PreviewError::ParseJobsFile {
        path: shown,
        message: invalid.to_string(),
    })?;
    Ok(keys)
}

fn parse_jobs_text(text: &str) -> Vec<String> {
    let options = || shoal_core::format::yaml_options_for(text.len());
    if let Ok(document) = serde_saphyr::from_str_with_options::<JobListDocument>(text, options()) {
        return document.jobs;
    }
    if let Ok(list) = serde_saphyr::from_str_with_options::<Vec<String>>(text, options()) {
        return list;
    }
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Applies `change` to the observation (in memory) and says what it is.
fn apply_change(
    obs: &mut Observation,
    namespace: &str,
    change: &Change,
) -> Result<String, PreviewError> {
    match change {
        Change::AsIs => Ok("none: what the controller does with the cluster as it is".to_owned()),
        Change::Replicas { pool, replicas } => {
            let pools: Vec<String> = obs.pools.iter().map(|pool| pool.name.clone()).collect();
            let index = match pool {
                Some(name) => obs
                    .pools
                    .iter()
                    .position(|pool| &pool.name == name)
                    .ok_or_else(|| PreviewError::UnknownPool {
                        swarm: obs.swarm.clone(),
                        namespace: namespace.to_owned(),
                        pool: name.clone(),
                        pools: pools.clone(),
                    })?,
                None if pools.is_empty() => {
                    return Err(PreviewError::NoPools {
                        swarm: obs.swarm.clone(),
                        namespace: namespace.to_owned(),
                    });
                }
                None if pools.len() > 1 => {
                    return Err(PreviewError::AmbiguousPool {
                        swarm: obs.swarm.clone(),
                        namespace: namespace.to_owned(),
                        pools,
                    });
                }
                None => 0,
            };
            let pool = &mut obs.pools[index];
            if pool.deployment_pods.is_some() {
                return Err(PreviewError::DeploymentPoolScale {
                    swarm: obs.swarm.clone(),
                    namespace: namespace.to_owned(),
                    pool: pool.name.clone(),
                });
            }
            let description = format!(
                "scale StatefulSet {} from {} to {replicas} replicas",
                pool.name, pool.replicas
            );
            pool.replicas = *replicas;
            Ok(description)
        }
        Change::Jobs { source, jobs } => {
            obs.spec.jobs = jobs.clone();
            obs.spec.jobs_from = None;
            obs.job_source = JobSource::NotReferenced;
            // What observe merged is the job list replaced here.
            obs.parsed.job_list = None;
            Ok(format!(
                "replace the job list with the {} jobs of {source}",
                jobs.len()
            ))
        }
        Change::RollbackTo { revision, jobs } => {
            let record = obs
                .history
                .get(revision)
                .filter(|record| !record.jobs_omitted)
                .map(|record| crate::swarm::decide::RevisionRecord::clone(record))
                .ok_or_else(|| PreviewError::NoRecord {
                    swarm: obs.swarm.clone(),
                    namespace: namespace.to_owned(),
                    revision: *revision,
                })?;
            obs.spec.strategy = record.strategy;
            // What observe merged was for the spec changed here.
            obs.parsed.job_list = None;
            if !jobs {
                return Ok(format!(
                    "rewrite the Swarm's strategy to that of revision {revision}"
                ));
            }
            obs.spec.jobs = record.jobs.to_vec();
            obs.spec.jobs_from = None;
            obs.job_source = JobSource::NotReferenced;
            Ok(format!(
                "rewrite the Swarm's job list and strategy to those of revision {revision}"
            ))
        }
    }
}

/// The assignment in force, as the planner sees it: the replayed current
/// revision, else what the slices in the cluster say (nothing, when two slices
/// claim one job).
fn in_force(obs: &Observation) -> Option<Assignment> {
    let current = obs.status.current_revision;
    if let Some(record) = obs.history.get(&current).filter(|r| !r.jobs_omitted)
        && let Ok(assignment) = replay(record)
    {
        return Some(assignment);
    }
    let slices = obs.slices.iter().filter_map(|(name, object)| {
        let slice = parse_slice(object.text.as_deref()?).ok()?;
        Some((
            crate::swarm::decide::member_of_pod(&obs.pools, name),
            slice.jobs,
        ))
    });
    Assignment::from_slices(slices)
        .or_else(|_| Assignment::from_slices(std::iter::empty()))
        .ok()
}

/// The planner's three answers on one observation (see the module docs).
struct Planned {
    /// As it is: does the approval gate let the revision through?
    as_is: decide::Decision,
    /// With the gate closed: the pending revision and its summary.
    held: decide::Decision,
    /// With the gate open: the revision record the controller would write.
    opened: decide::Decision,
}

impl Planned {
    fn of(obs: &Observation) -> Planned {
        let mut gated = obs.clone();
        gated.spec.approval.policy = ApprovalPolicy::Manual;
        gated.annotations.remove(ANNOTATION_APPROVE);
        let mut open = obs.clone();
        open.spec.approval.policy = ApprovalPolicy::Automatic;
        // The open gate is open at any time: what the revision is, window or not.
        open.spec.approval.windows.clear();
        gated.spec.approval.windows.clear();
        Planned {
            as_is: decide::decide(obs),
            held: decide::decide(&gated),
            opened: decide::decide(&open),
        }
    }
}

/// Previews `change` on an observation of the cluster. Pure: no I/O.
pub fn preview(
    obs: &mut Observation,
    namespace: &str,
    change: &Change,
) -> Result<DiffReport, PreviewError> {
    let description = apply_change(obs, namespace, change)?;
    let planned = Planned::of(obs);
    let mut report = DiffReport {
        swarm: obs.swarm.clone(),
        namespace: namespace.to_owned(),
        change: description,
        current_revision: obs.status.current_revision,
        revision: None,
        summary: None,
        needs_approval: false,
        decision: String::new(),
        moves: Vec::new(),
        created: Vec::new(),
        deleted: Vec::new(),
        members: Vec::new(),
        restarts: Vec::new(),
        notes: Vec::new(),
    };
    let Some(revision) = planned.opened.applied_revision else {
        no_revision(obs, &planned, &mut report)?;
        return Ok(report);
    };
    let desired = replayed_target(obs, namespace, &planned.opened, revision)?;
    // As in the planner: with nothing readable in force, every member starts empty.
    let before = in_force(obs)
        .or_else(|| Assignment::from_slices(std::iter::empty()).ok())
        .unwrap_or_else(|| desired.clone());
    let change = diff(&before, &desired);
    let summary = summary_of(&planned, revision, &change);
    let window = planned
        .as_is
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "WaitingForWindow" && c.status == "True")
        .map(|c| c.message.clone());
    report.needs_approval = planned.as_is.applied_revision != Some(revision) && window.is_none();
    report.decision = window.unwrap_or_else(|| {
        decision(
            obs,
            namespace,
            &planned.as_is,
            revision,
            report.needs_approval,
        )
    });
    if let Some(superseded) = summary.supersedes {
        report.notes.push(format!(
            "revision {revision} supersedes pending revision {superseded}, which will never apply"
        ));
    }
    report.moves = job_moves(&change);
    (report.created, report.deleted) = created_and_deleted(&change, &before, &desired);
    member_rows(obs, &planned.opened, &change, &desired, &mut report);
    if obs.spec.reload == ReloadPolicy::HotReload && !change.affected.is_empty() {
        report.notes.push(format!(
            "reload policy HotReload: no pod restarts; {} members reload their slice in place",
            change.affected.len()
        ));
    }
    report.revision = Some(revision);
    report.summary = Some(summary);
    Ok(report)
}

/// The report when the inputs give no new revision: an error naming why the planner
/// refuses them (Degraded), else what the controller is still doing.
fn no_revision(
    obs: &Observation,
    planned: &Planned,
    report: &mut DiffReport,
) -> Result<(), PreviewError> {
    let current_revision = obs.status.current_revision;
    let degraded = planned
        .opened
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True" && c.reason != "SliceEdited");
    if let Some(degraded) = degraded {
        return Err(PreviewError::NoRevision {
            swarm: obs.swarm.clone(),
            namespace: report.namespace.clone(),
            reason: degraded.reason.clone(),
            message: degraded.message.clone(),
        });
    }
    if !planned.as_is.operations.is_empty() {
        report.notes.push(format!(
            "the controller is still applying revision {current_revision}: {} writes to go (`kubectl shoal status {} -n {}` lists them)",
            planned.as_is.operations.len(),
            obs.swarm,
            report.namespace
        ));
    }
    report.decision = if current_revision == 0 {
        "nothing to apply".to_owned()
    } else {
        format!("nothing changes: the inputs give revision {current_revision}, which is in force")
    };
    Ok(())
}

/// The assignment of `revision`, replayed from the record the open planner would write:
/// exactly what the controller would put in force.
fn replayed_target(
    obs: &Observation,
    namespace: &str,
    opened: &decide::Decision,
    revision: u64,
) -> Result<Assignment, PreviewError> {
    let failed = |message: String| PreviewError::Replay {
        swarm: obs.swarm.clone(),
        namespace: namespace.to_owned(),
        revision,
        message,
    };
    let record = opened
        .operations
        .iter()
        .find_map(|operation| match operation {
            Operation::WriteRevision(record) if record.revision == revision => Some(record),
            _ => None,
        })
        .ok_or_else(|| failed("the planner applied it without recording it".to_owned()))?;
    replay(record).map_err(failed)
}

/// The summary the controller publishes for `revision` (pending, or proposed), else one
/// counted from the diff.
fn summary_of(planned: &Planned, revision: u64, change: &Diff) -> RevisionSummary {
    planned
        .held
        .status
        .pending_revision
        .as_ref()
        .filter(|pending| pending.revision == revision)
        .map(|pending| pending.summary.clone())
        .or_else(|| {
            planned
                .as_is
                .proposal
                .as_ref()
                .filter(|proposal| proposal.revision == revision)
                .map(|proposal| proposal.summary.clone())
        })
        .unwrap_or_else(|| RevisionSummary {
            jobs_moved: change.moved.len() as u64,
            members_affected: change.affected.len() as u64,
            lower_bound: change.lower_bound as u64,
            ..RevisionSummary::default()
        })
}

/// What happens to `revision`: it waits for approval (with the plugin's command to give
/// it), or it applies at once and why.
fn decision(
    obs: &Observation,
    namespace: &str,
    as_is: &decide::Decision,
    revision: u64,
    needs_approval: bool,
) -> String {
    if needs_approval {
        let waiting = as_is
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "AwaitingApproval" && c.status == "True")
            .map(|c| without_annotate_command(&c.message))
            .unwrap_or_else(|| format!("revision {revision} waits for approval"));
        return format!(
            "{waiting}; approve with `kubectl shoal approve {} -n {namespace} --revision {revision}`",
            obs.swarm
        );
    }
    match obs.spec.approval.policy {
        ApprovalPolicy::Automatic => {
            format!("revision {revision} applies at once (approval policy Automatic)")
        }
        ApprovalPolicy::Budget => {
            format!("revision {revision} applies at once (within the approval budget)")
        }
        ApprovalPolicy::Manual => format!(
            "revision {revision} applies at once (already approved with {ANNOTATION_APPROVE}={revision})"
        ),
    }
}

/// The controller's AwaitingApproval message without its `; approve with `kubectl
/// annotate …`` part (the plugin gives its own, shorter command), keeping whatever
/// follows the closing backtick.
fn without_annotate_command(message: &str) -> String {
    let Some(cut) = message.find("; approve with `kubectl annotate") else {
        return message.to_owned();
    };
    let rest = &message[cut..];
    let after = rest
        .find('`')
        .and_then(|open| {
            let close = rest[open + 1..].find('`')?;
            Some(&rest[open + 1 + close + 1..])
        })
        .unwrap_or("");
    format!("{}{after}", &message[..cut])
}

/// Every job that changes owner.
fn job_moves(change: &Diff) -> Vec<JobMove> {
    change
        .moved
        .iter()
        .map(|moved| JobMove {
            job: moved.key.as_str().to_owned(),
            from: moved.from.pod_name(),
            to: moved.to.pod_name(),
        })
        .collect()
}

/// The jobs that appear (no owner `before`) and disappear (no owner in `desired`), each
/// with its member, by job.
fn created_and_deleted(
    change: &Diff,
    before: &Assignment,
    desired: &Assignment,
) -> (Vec<JobPlacement>, Vec<JobPlacement>) {
    let mut created = Vec::new();
    let mut deleted = Vec::new();
    for (member, member_change) in &change.members {
        let placed = |key: &shoal_core::JobKey| JobPlacement {
            job: key.as_str().to_owned(),
            member: member.pod_name(),
        };
        created.extend(
            member_change
                .added
                .iter()
                .filter(|key| before.owner_of(key.as_str()).is_none())
                .map(placed),
        );
        deleted.extend(
            member_change
                .removed
                .iter()
                .filter(|key| desired.owner_of(key.as_str()).is_none())
                .map(placed),
        );
    }
    created.sort_by(|a, b| a.job.cmp(&b.job));
    deleted.sort_by(|a, b| a.job.cmp(&b.job));
    (created, deleted)
}

/// The step a member takes: revoke-then-grant order as the controller applies it.
fn member_step_words(loses: bool, gains: bool, any_revoke: bool) -> &'static str {
    match (loses, gains) {
        (false, false) => "unchanged",
        (true, false) => "revoke",
        (false, true) if any_revoke => "grant after revokes are acknowledged",
        (false, true) => "grant",
        (true, true) => "revoke, then grant",
    }
}

/// One row per member the diff names, the planner's restarts, and a note for each
/// member whose pod does not exist yet.
fn member_rows(
    obs: &Observation,
    opened: &decide::Decision,
    change: &Diff,
    desired: &Assignment,
    report: &mut DiffReport,
) {
    let pods: BTreeMap<String, &decide::PodState> = obs
        .pools
        .iter()
        .flat_map(decide::PoolState::member_pods)
        .collect();
    let any_revoke = change
        .members
        .values()
        .any(|member_change| !member_change.removed.is_empty());
    for (member, member_change) in &change.members {
        let name = member.pod_name();
        let keys = |keys: &[shoal_core::JobKey]| -> Vec<String> {
            keys.iter().map(|key| key.as_str().to_owned()).collect()
        };
        let gains = keys(&member_change.added);
        let loses = keys(&member_change.removed);
        // The planner's own restarts: what the summary counts and the controller does.
        let planned = opened.restarts.get(member);
        if let Some(restart) = planned {
            report.restarts.push(PodRestart {
                pod: name.clone(),
                uid: pods.get(&name).map_or_else(
                    || "(created by the StatefulSet)".to_owned(),
                    |pod| pod.uid.clone(),
                ),
                times: restart.times,
                reason: restart.reason.to_owned(),
            });
        }
        if member_change.is_changed()
            && !pods.contains_key(&name)
            && desired.members().contains(member)
            && planned.is_none()
        {
            report.notes.push(format!(
                "pod {name} does not exist yet; it starts with its slice"
            ));
        }
        report.members.push(MemberChangeRow {
            member: name,
            before: member_change.unchanged + loses.len(),
            after: member_change.unchanged + gains.len(),
            step: member_step_words(!loses.is_empty(), !gains.is_empty(), any_revoke).to_owned(),
            gains,
            loses,
        });
    }
}

fn limited(keys: &[String], limit: usize) -> String {
    let mut shown: Vec<String> = keys.iter().take(limit).cloned().collect();
    if keys.len() > limit {
        shown.push(format!("… {} more (-o yaml lists all)", keys.len() - limit));
    }
    shown.join("\n")
}

impl Report for DiffReport {
    fn table(&self) -> String {
        let mut out = String::from("Swarm Diff\n");
        let mut pairs = vec![
            ("Swarm", format!("{}/{}", self.namespace, self.swarm)),
            ("Change", self.change.clone()),
            ("Revision in force", self.current_revision.to_string()),
        ];
        match (&self.revision, &self.summary) {
            (Some(revision), Some(summary)) => {
                pairs.push(("New revision", revision.to_string()));
                pairs.push(("Jobs moved", summary.jobs_moved.to_string()));
                pairs.push(("Lower bound", summary.lower_bound.to_string()));
                pairs.push(("Members affected", summary.members_affected.to_string()));
                pairs.push(("Restarts needed", summary.restarts_needed.to_string()));
                pairs.push(("Jobs created", self.created.len().to_string()));
                pairs.push(("Jobs deleted", self.deleted.len().to_string()));
            }
            _ => pairs.push(("New revision", "none".to_owned())),
        }
        pairs.push(("Approval", self.decision.clone()));
        out.push_str(&fields(&pairs));
        if self.revision.is_none() {
            for note in &self.notes {
                out.push_str(&format!("Note: {note}\n"));
            }
            return out;
        }

        out.push_str("\nMoves\n");
        let mut moves = Table::new(["Job", "From", "To"]);
        for moved in &self.moves {
            moves.row([moved.job.clone(), moved.from.clone(), moved.to.clone()]);
        }
        out.push_str(&moves.render("No job changes owner"));

        if !self.created.is_empty() || !self.deleted.is_empty() {
            out.push_str("\nCreated and Deleted Jobs\n");
            let mut jobs = Table::new(["Job", "Change", "Member"]);
            for placement in &self.created {
                jobs.row([
                    placement.job.clone(),
                    "created".to_owned(),
                    placement.member.clone(),
                ]);
            }
            for placement in &self.deleted {
                jobs.row([
                    placement.job.clone(),
                    "deleted".to_owned(),
                    placement.member.clone(),
                ]);
            }
            out.push_str(&jobs.render(""));
        }

        out.push_str("\nMembers\n");
        let mut members =
            Table::new(["Member", "Jobs Now", "Jobs After", "Gains", "Loses", "Step"]);
        for member in &self.members {
            members.row([
                member.member.clone(),
                member.before.to_string(),
                member.after.to_string(),
                limited(&member.gains, 10),
                limited(&member.loses, 10),
                member.step.clone(),
            ]);
        }
        out.push_str(&members.render("No members"));

        out.push_str("\nPod Restarts\n");
        let mut restarts = Table::new(["Pod", "Uid", "Times", "Reason"]);
        for restart in &self.restarts {
            restarts.row([
                restart.pod.clone(),
                restart.uid.clone(),
                restart.times.to_string(),
                restart.reason.clone(),
            ]);
        }
        out.push_str(&restarts.render("No pod restarts"));
        for note in &self.notes {
            out.push_str(&format!("Note: {note}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::testing::{converge, observation, owners, pool};

    #[test]
    fn the_controllers_annotate_command_is_cut_from_the_waiting_message() {
        assert_eq!(
            without_annotate_command(
                "revision 4 waits for approval; approve with `kubectl annotate swarm demo shoal.dev/approve=4/sha256:ab` (policy Manual)"
            ),
            "revision 4 waits for approval (policy Manual)"
        );
        assert_eq!(
            without_annotate_command("revision 4 waits for approval"),
            "revision 4 waits for approval"
        );
    }

    #[test]
    fn a_member_that_only_gains_waits_for_the_revokes_of_others() {
        assert_eq!(
            member_step_words(false, true, true),
            "grant after revokes are acknowledged"
        );
        assert_eq!(member_step_words(false, true, false), "grant");
        assert_eq!(member_step_words(true, true, true), "revoke, then grant");
        assert_eq!(member_step_words(true, false, true), "revoke");
        assert_eq!(member_step_words(false, false, true), "unchanged");
    }

    #[test]
    fn the_preview_of_a_scale_is_what_the_planner_then_does() {
        let mut obs = observation(30, vec![pool("worker", 3)]);
        converge(&mut obs);
        assert_eq!(obs.status.current_revision, 1);
        let before = owners(&obs);

        let mut copy = obs.clone();
        let change = Change::Replicas {
            pool: None,
            replicas: 5,
        };
        let report = preview(&mut copy, "ns", &change).unwrap();
        assert_eq!(report.revision, Some(2));
        assert!(!report.needs_approval);
        assert!(!report.moves.is_empty());

        obs.pools = vec![pool("worker", 5)];
        converge(&mut obs);
        assert_eq!(obs.status.current_revision, 2);
        assert_eq!(report.moves, moves_between(&before, &owners(&obs)));
    }

    /// Jobs of `before` whose owner in `after` differs.
    fn moves_between(
        before: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
    ) -> Vec<JobMove> {
        before
            .iter()
            .filter(|(job, from)| after.get(*job).is_some_and(|to| to != *from))
            .map(|(job, from)| JobMove {
                job: job.clone(),
                from: from.clone(),
                to: after[job].clone(),
            })
            .collect()
    }

    #[test]
    fn the_preview_of_a_sticky_swarm_is_exactly_what_the_planner_then_does() {
        // In force: 3 -> 4 members, which a computation from the inputs alone would
        // not reproduce; the preview must read it from the revision record.
        let mut obs = observation(27, vec![pool("worker", 3)]);
        obs.spec.strategy.type_ = crate::api::swarm::StrategyType::Sticky;
        converge(&mut obs);
        obs.pools = vec![pool("worker", 4)];
        converge(&mut obs);
        assert_eq!(obs.status.current_revision, 2);
        let changes = [
            Change::Replicas {
                pool: None,
                replicas: 5,
            },
            Change::Replicas {
                pool: None,
                replicas: 3,
            },
            Change::Jobs {
                source: "jobs.txt".to_owned(),
                jobs: (3..31).map(|i| format!("stream:{i:03}")).collect(),
            },
        ];
        for change in changes {
            let mut copy = obs.clone();
            let report = preview(&mut copy, "ns", &change).unwrap();
            let summary = report.summary.clone().expect("a revision");
            assert_eq!(report.moves.len() as u64, summary.lower_bound, "{change:?}");

            let mut actual = obs.clone();
            let before = owners(&actual);
            match &change {
                Change::Replicas { replicas, .. } => {
                    actual.pools = vec![pool("worker", *replicas)];
                }
                Change::Jobs { jobs, .. } => actual.spec.jobs = jobs.clone(),
                _ => unreachable!("only scales and job lists are previewed here"),
            }
            converge(&mut actual);
            assert_eq!(actual.status.current_revision, 3, "{change:?}");
            assert_eq!(
                report.moves,
                moves_between(&before, &owners(&actual)),
                "{change:?}"
            );
        }
    }

    #[test]
    fn a_converged_swarm_previews_no_change() {
        let mut obs = observation(8, vec![pool("worker", 2)]);
        converge(&mut obs);
        let report = preview(&mut obs, "ns", &Change::AsIs).unwrap();
        assert_eq!(report.revision, None);
        assert!(report.decision.contains("revision 1, which is in force"));
    }

    #[test]
    fn scaling_needs_a_known_pool_and_says_which_when_there_are_several() {
        let mut obs = observation(8, vec![pool("a", 1), pool("b", 1)]);
        let ambiguous = Change::Replicas {
            pool: None,
            replicas: 2,
        };
        let error = preview(&mut obs.clone(), "ns", &ambiguous).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Swarm ns/demo has 2 pools (a, b); say which one to scale with --pool"
        );
        let unknown = Change::Replicas {
            pool: Some("c".to_owned()),
            replicas: 2,
        };
        let error = preview(&mut obs, "ns", &unknown).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("has no pool \"c\" (pools: a, b)")
        );
        let mut empty = observation(8, Vec::new());
        let error = preview(&mut empty, "ns", &ambiguous).unwrap_err();
        assert!(matches!(error, PreviewError::NoPools { .. }), "{error}");
    }

    #[test]
    fn a_scale_of_a_deployment_pool_is_refused_naming_why() {
        let mut web = pool("web", 2);
        web.pods.clear();
        web.deployment_pods = Some(BTreeMap::new());
        let mut obs = observation(8, vec![web]);
        let scale = Change::Replicas {
            pool: None,
            replicas: 3,
        };
        let error = preview(&mut obs, "ns", &scale).unwrap_err();
        assert!(
            matches!(error, PreviewError::DeploymentPoolScale { ref pool, .. } if pool == "web"),
            "{error}"
        );
        assert!(error.to_string().contains("is a Deployment"), "{error}");
    }

    #[test]
    fn an_invalid_job_list_is_reported_as_the_controller_would_report_it() {
        let mut obs = observation(4, vec![pool("worker", 2)]);
        converge(&mut obs);
        let change = Change::Jobs {
            source: "jobs.txt".to_owned(),
            jobs: vec!["a".to_owned(), "a".to_owned()],
        };
        let error = preview(&mut obs, "ns", &change).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("would apply nothing and report InvalidJobs"),
            "{text}"
        );
    }

    #[test]
    fn a_jobs_file_may_be_a_jobs_document_a_yaml_list_or_plain_lines() {
        assert_eq!(
            parse_jobs_text("jobs:\n- stream:a\n- stream:b\n"),
            ["stream:a", "stream:b"]
        );
        assert_eq!(parse_jobs_text("- x\n- y\n"), ["x", "y"]);
        assert_eq!(
            parse_jobs_text("# streams\nstream:a\n\nstream:b\n"),
            ["stream:a", "stream:b"]
        );
    }

    #[test]
    fn long_key_lists_are_cut_short_in_tables() {
        let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
        let text = limited(&keys, 10);
        assert_eq!(text.lines().count(), 11);
        assert!(text.ends_with("… 2 more (-o yaml lists all)"));
    }
}
