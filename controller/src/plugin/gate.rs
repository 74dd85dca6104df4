//! `kubectl shoal approve` and `kubectl shoal undo`: one annotation each on
//! the Swarm; the controller's approval gate does the rest.

use kube::api::Api;
use serde::{Deserialize, Serialize};
use serde_json::json;
use shoal_core::names::{ANNOTATION_APPROVE, ANNOTATION_CHANGE_CAUSE};

use super::preview::{self, Change, DiffReport};
use super::table::fields;
use super::write::merge_patch;
use super::{Error, Report, Target};
use crate::api::swarm::{JobsFrom, RevisionSummary, Swarm};
use crate::approvers::approval_annotations;
use crate::swarm::decide::{Observation, RevisionRecord, job_list};

use super::annotate::{ATTEMPTS as APPROVE_ATTEMPTS, AnnotateError, annotate_guarded, is_conflict};

/// Why `approve` or `undo` refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// Nothing waits for approval.
    #[error(
        "Swarm {namespace}/{swarm} has no pending revision (revision {current} is in force, approval policy {policy}); nothing to approve. Preview a change with `kubectl shoal diff {swarm} -n {namespace}`"
    )]
    NothingPending {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Revision in force.
        current: u64,
        /// Approval policy.
        policy: String,
    },
    /// The revision named is not the pending one.
    #[error(
        "Swarm {namespace}/{swarm}: revision {requested} is not the pending revision ({why}); the pending revision is {pending}: review it with `kubectl shoal diff {swarm} -n {namespace}` and approve it with `kubectl shoal approve {swarm} -n {namespace} --revision {pending}`"
    )]
    NotPending {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The revision asked for.
        requested: u64,
        /// The pending revision.
        pending: u64,
        /// Why the requested one is not it.
        why: String,
    },
    /// The Swarm kept changing while approving.
    #[error(
        "Swarm {namespace}/{swarm} changed {APPROVE_ATTEMPTS} times while approving; run `kubectl shoal status {swarm} -n {namespace}` and approve again"
    )]
    KeptChanging {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
    },
    /// Writing the annotation failed.
    #[error(
        "annotating Swarm {namespace}/{swarm} with {annotation}: {source}{}",
        super::hint(source)
    )]
    Annotate {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// `key=value`.
        annotation: String,
        /// Cause.
        source: kube::Error,
    },
    /// `undo` without `--to-revision` and no earlier revision recorded.
    #[error(
        "Swarm {namespace}/{swarm}: no revision before {current} is recorded (history: {}); nothing to undo",
        list(kept)
    )]
    NoEarlierRevision {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Revision in force.
        current: u64,
        /// Revisions recorded.
        kept: Vec<u64>,
    },
    /// `undo --to-revision R` with R not recorded.
    #[error(
        "Swarm {namespace}/{swarm}: revision {revision} is not in the history (recorded: {}); list them with `kubectl shoal history {swarm} -n {namespace}`",
        list(kept)
    )]
    UnknownRevision {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The revision asked for.
        revision: u64,
        /// Revisions recorded.
        kept: Vec<u64>,
    },
    /// The recorded revision has no job list.
    #[error(
        "Swarm {namespace}/{swarm}: revision {revision} was too large to record its job list (jobsOmitted), so it cannot be restored; pick another with `kubectl shoal history {swarm} -n {namespace}`"
    )]
    NotReplayable {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The revision.
        revision: u64,
    },
    /// The job list of the revision is too large to put inline in the Swarm.
    #[error(
        "Swarm {namespace}/{swarm}: revision {revision} has {jobs} jobs ({bytes} bytes), too many to write inline into the Swarm (the API server refuses objects over about 1 MiB); restore the job list in the ConfigMap the Swarm reads instead (`kubectl shoal history {swarm} -n {namespace} --revision {revision}` lists it)"
    )]
    TooLargeToInline {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The revision.
        revision: u64,
        /// Its job count.
        jobs: usize,
        /// The size of the rewrite.
        bytes: usize,
    },
    /// The Swarm changed between reading it and rewriting it.
    #[error(
        "Swarm {namespace}/{swarm} changed while undoing (someone else edited it); review `kubectl shoal status {swarm} -n {namespace}` and undo again"
    )]
    ChangedWhileUndoing {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
    },
    /// Rewriting the Swarm failed.
    #[error("rewriting Swarm {namespace}/{swarm}: {source}{}", super::hint(source))]
    Rewrite {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
    /// The job list lives in the `jobsFrom` ConfigMaps, which Shoal does not write, and
    /// the revision's differs from it.
    #[error(
        "Swarm {namespace}/{swarm} takes its job list from {source_name} (spec.jobsFrom), which Shoal does not write, and revision {revision}'s job list ({then} jobs) differs from the one there now ({now}); undo leaves spec.jobsFrom alone so that a GitOps tool has nothing to fight. Restore the job list where it is kept (revert the change in Git, or edit {source_name}): `kubectl shoal history {swarm} -n {namespace} --revision {revision} -o yaml` lists revision {revision}'s jobs and `kubectl shoal diff {swarm} -n {namespace} --jobs-file <file>` previews a list. To write revision {revision}'s jobs inline into the Swarm instead, dropping spec.jobsFrom, run `kubectl shoal undo {swarm} -n {namespace} --to-revision {revision} --inline-jobs`"
    )]
    JobsFromElsewhere {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The revision asked for.
        revision: u64,
        /// `ConfigMap a`, `ConfigMaps a, b` or `the ConfigMaps labelled k=v`.
        source_name: String,
        /// Jobs of the revision.
        then: usize,
        /// The job list now, in words: `N jobs`, or why it cannot be read.
        now: String,
    },
    /// Rolling back would change nothing.
    #[error(
        "Swarm {namespace}/{swarm}: rolling back to revision {revision} changes nothing ({decision}); a rollback restores a revision's job list and strategy, not its members, and revision {revision} has the job list and strategy in force"
    )]
    NothingToUndo {
        /// Swarm.
        swarm: String,
        /// Namespace.
        namespace: String,
        /// The revision.
        revision: u64,
        /// What the planner says.
        decision: String,
    },
}

fn list(revisions: &[u64]) -> String {
    if revisions.is_empty() {
        return "none".to_owned();
    }
    revisions
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `approve` did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalReport {
    /// Swarm.
    pub swarm: String,
    /// Namespace.
    pub namespace: String,
    /// The approved revision.
    pub revision: u64,
    /// Its summary.
    pub summary: RevisionSummary,
    /// The annotation written.
    pub annotation: String,
    /// The approver named in `shoal.dev/approved-by` (the user the API server says this
    /// is), if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// Anything worth knowing.
    pub notes: Vec<String>,
}

impl Report for ApprovalReport {
    fn table(&self) -> String {
        let mut out = format!(
            "Approved revision {} of Swarm {}/{} ({}).\n",
            self.revision, self.namespace, self.swarm, self.annotation
        );
        out.push_str(&fields(&[
            (
                "Approved by",
                self.approved_by
                    .clone()
                    .unwrap_or_else(|| "(the server did not say who you are)".to_owned()),
            ),
            ("Jobs moved", self.summary.jobs_moved.to_string()),
            (
                "Members affected",
                self.summary.members_affected.to_string(),
            ),
            ("Restarts needed", self.summary.restarts_needed.to_string()),
        ]));
        for note in &self.notes {
            out.push_str(&format!("Note: {note}\n"));
        }
        out.push_str(&format!(
            "Follow it with `kubectl shoal status {} -n {}`.\n",
            self.swarm, self.namespace
        ));
        out
    }
}

/// Approves the pending revision (or exactly `revision`, which must be the pending one).
///
/// The annotation is written with the Swarm's resourceVersion as a
/// precondition (`annotate::annotate_guarded`, as every changing command), so
/// it lands only if the pending revision checked is still the one in the
/// status; on a conflict the check is made again.
pub async fn approve(
    target: &Target,
    swarm: &str,
    revision: Option<u64>,
) -> Result<ApprovalReport, Error> {
    let api: Api<Swarm> = Api::namespaced(target.client.clone(), &target.namespace);
    let approver = crate::approvers::approver_name(&target.client).await;
    let namespace = target.namespace.clone();
    let written = annotate_guarded(&target.writes, &api, swarm, |object: &Swarm| {
        let status = object.status.clone().unwrap_or_default();
        let Some(pending) = status.pending_revision.clone() else {
            return Err(GateError::NothingPending {
                swarm: swarm.to_owned(),
                namespace: namespace.clone(),
                current: status.current_revision,
                policy: format!("{:?}", object.spec.approval.policy),
            });
        };
        if let Some(requested) = revision
            && requested != pending.revision
        {
            let why = if requested <= status.current_revision {
                format!(
                    "revision {} is in force; {requested} is not waiting",
                    status.current_revision
                )
            } else if requested < pending.revision {
                format!("it was superseded by revision {}", pending.revision)
            } else {
                "no such revision has been computed".to_owned()
            };
            return Err(GateError::NotPending {
                swarm: swarm.to_owned(),
                namespace: namespace.clone(),
                requested,
                pending: pending.revision,
                why,
            });
        }
        // Revision and hash: the approval stands for exactly the plan in the status.
        let value = crate::swarm::decide::approval_value(pending.revision, &pending.hash);
        let annotation = format!("{ANNOTATION_APPROVE}={value}");
        let mut notes = Vec::new();
        if object.metadata.generation != status.observed_generation {
            notes.push(format!(
                "the Swarm changed since the controller last looked (generation {}, observed {}); if the change gives another assignment, revision {} is superseded and this approval is ignored",
                object.metadata.generation.unwrap_or_default(),
                status.observed_generation.unwrap_or_default(),
                pending.revision
            ));
        }
        // The approval and who gives it, in one request (policy shoal-approved-by).
        Ok((
            approval_annotations(&value, approver.as_deref()),
            ApprovalReport {
                swarm: swarm.to_owned(),
                namespace: namespace.clone(),
                revision: pending.revision,
                summary: pending.summary,
                annotation,
                approved_by: approver.clone(),
                notes,
            },
        ))
    })
    .await;
    match written {
        Ok(report) => Ok(report),
        Err(AnnotateError::Refused(error)) => Err(error.into()),
        Err(AnnotateError::NotFound) => Err(Error::SwarmNotFound {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
        }),
        Err(AnnotateError::Api(source)) => Err(GateError::Annotate {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            annotation: ANNOTATION_APPROVE.to_owned(),
            source,
        }
        .into()),
        Err(AnnotateError::KeptChanging) => Err(GateError::KeptChanging {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
        }
        .into()),
    }
}

/// What `undo` did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UndoReport {
    /// Swarm.
    pub swarm: String,
    /// Namespace.
    pub namespace: String,
    /// The revision whose strategy (and, unless the Swarm reads `jobsFrom`, job list) comes back.
    pub to_revision: u64,
    /// The `jobsFrom` ConfigMaps the Swarm no longer reads (`--inline-jobs`: its job list is
    /// now inline), as `ConfigMap a`, `ConfigMaps a, b` or `the ConfigMaps labelled k=v`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_jobs_from: Option<String>,
    /// The `jobsFrom` ConfigMaps the Swarm still reads: only the strategy was rewritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_jobs_from: Option<String>,
    /// What the rollback does, computed before writing.
    pub preview: DiffReport,
}

impl Report for UndoReport {
    fn table(&self) -> String {
        let what = if self.kept_jobs_from.is_some() {
            "strategy"
        } else {
            "job list and strategy"
        };
        let mut out = format!(
            "Swarm {}/{}: {what} rewritten to those of revision {}; the change goes through the approval gate like any edit.\n",
            self.namespace, self.swarm, self.to_revision
        );
        if let Some(config_maps) = &self.kept_jobs_from {
            out.push_str(&format!(
                "The job list is still read from {config_maps} (spec.jobsFrom), which holds revision {}'s jobs already.\n",
                self.to_revision
            ));
        }
        if let Some(config_maps) = &self.replaced_jobs_from {
            out.push_str(&format!(
                "The job list is now inline in the Swarm (spec.jobs); it no longer reads {config_maps} (spec.jobsFrom). Put jobsFrom back to read them again.\n"
            ));
        }
        out.push('\n');
        out.push_str(&self.preview.table());
        out
    }
}

/// Largest Swarm `undo` writes: a real API server refuses objects much over 1 MiB.
const MAX_UNDO_BYTES: usize = 1024 * 1024;

/// The revision `undo` returns to: `to_revision`, else the latest recorded before the one
/// in force; refused when it is not recorded or cannot be replayed.
fn undo_record(
    target: &Target,
    swarm: &str,
    observation: &Observation,
    to_revision: Option<u64>,
) -> Result<RevisionRecord, GateError> {
    let current = observation.status.current_revision;
    let kept: Vec<u64> = observation.history.keys().copied().collect();
    let revision = match to_revision {
        Some(revision) => revision,
        None => kept
            .iter()
            .copied()
            .filter(|revision| *revision < current)
            .max()
            .ok_or_else(|| GateError::NoEarlierRevision {
                swarm: swarm.to_owned(),
                namespace: target.namespace.clone(),
                current,
                kept: kept.clone(),
            })?,
    };
    let Some(record) = observation
        .history
        .get(&revision)
        .map(|record| RevisionRecord::clone(record))
    else {
        return Err(GateError::UnknownRevision {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            revision,
            kept,
        });
    };
    if record.jobs_omitted {
        return Err(GateError::NotReplayable {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            revision,
        });
    }
    Ok(record)
}

/// Whether `undo` rewrites the job list. A Swarm reading `jobsFrom` keeps it: the job list
/// lives in ConfigMaps its owner (often Git) writes, so only the strategy is rolled back,
/// and only when those ConfigMaps hold the revision's jobs already; otherwise it is refused
/// unless `--inline-jobs` asks for the list inline.
fn rewrites_jobs(
    target: &Target,
    object: &Swarm,
    observation: &Observation,
    record: &RevisionRecord,
    inline_jobs: bool,
) -> Result<bool, GateError> {
    let Some(from) = object.spec.jobs_from.as_ref().filter(|_| !inline_jobs) else {
        return Ok(true);
    };
    let now = job_list(
        &observation.swarm,
        &observation.spec,
        &observation.job_source,
    );
    let same = now.as_ref().is_ok_and(|jobs| {
        jobs.len() == record.jobs.len()
            && jobs
                .iter()
                .zip(record.jobs.iter())
                .all(|(key, job)| key.as_str() == job)
    });
    if same {
        return Ok(false);
    }
    Err(GateError::JobsFromElsewhere {
        swarm: observation.swarm.clone(),
        namespace: target.namespace.clone(),
        revision: record.revision,
        source_name: from.describe(),
        then: record.jobs.len(),
        now: match now {
            Ok(jobs) => format!("{} jobs", jobs.len()),
            Err(problem) => format!("unreadable: {}", problem.message),
        },
    })
}

/// The merge patch `undo` writes: the strategy, the job list when `jobs`, and the
/// change cause; the Swarm's resourceVersion as precondition.
fn undo_patch(object: &Swarm, record: &RevisionRecord, jobs: bool) -> serde_json::Value {
    let swarm = object.metadata.name.as_deref().unwrap_or_default();
    let revision = record.revision;
    let mut spec = json!({ "strategy": record.strategy });
    if jobs {
        spec["jobs"] = json!(record.jobs);
        spec["jobsFrom"] = serde_json::Value::Null;
    }
    json!({
        "metadata": {
            "resourceVersion": object.metadata.resource_version,
            "annotations": {
                ANNOTATION_CHANGE_CAUSE: format!("kubectl shoal undo {swarm} --to-revision {revision}"),
            },
        },
        "spec": spec,
    })
}

/// Rolls back by rewriting the Swarm's strategy, and its job list unless that is read
/// from `jobsFrom` (see [`rewrites_jobs`]), to those of a recorded revision, as `kubectl
/// rollout undo` rewrites a Deployment's template: one write, with the Swarm's
/// resourceVersion as precondition. The controller then treats it as any edit (a new
/// revision, through the approval gate); nothing stays behind to undo the undo.
pub async fn undo(
    target: &Target,
    swarm: &str,
    to_revision: Option<u64>,
    inline_jobs: bool,
) -> Result<UndoReport, Error> {
    let (object, mut observation) = super::observe(target, swarm).await?;
    let record = undo_record(target, swarm, &observation, to_revision)?;
    let revision = record.revision;
    let jobs = rewrites_jobs(target, &object, &observation, &record, inline_jobs)?;
    let report = preview::preview(
        &mut observation,
        &target.namespace,
        &Change::RollbackTo { revision, jobs },
    )?;
    if report.revision.is_none() {
        return Err(GateError::NothingToUndo {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            revision,
            decision: report.decision,
        }
        .into());
    }
    let patch = undo_patch(&object, &record, jobs);
    let bytes = patch.to_string().len();
    if bytes > MAX_UNDO_BYTES {
        return Err(GateError::TooLargeToInline {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            revision,
            jobs: record.jobs.len(),
            bytes,
        }
        .into());
    }
    write_undo(target, swarm, patch).await?;
    let jobs_from = object.spec.jobs_from.as_ref().map(JobsFrom::describe);
    Ok(UndoReport {
        swarm: swarm.to_owned(),
        namespace: target.namespace.clone(),
        to_revision: revision,
        replaced_jobs_from: jobs_from.clone().filter(|_| jobs),
        kept_jobs_from: jobs_from.filter(|_| !jobs),
        preview: report,
    })
}

/// Sends `undo`'s patch; a conflict means someone else edited the Swarm since it was read.
async fn write_undo(target: &Target, swarm: &str, patch: serde_json::Value) -> Result<(), Error> {
    let api: Api<Swarm> = Api::namespaced(target.client.clone(), &target.namespace);
    match merge_patch(&target.writes, &api, swarm, patch).await {
        Ok(_) => Ok(()),
        Err(error) if is_conflict(&error) => Err(GateError::ChangedWhileUndoing {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
        }
        .into()),
        Err(source) => Err(GateError::Rewrite {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            source,
        }
        .into()),
    }
}
