//! `kubectl shoal history`: the revisions recorded in `<swarm>-rev-<n>`
//! ConfigMaps, as the controller reads them, with the movement between
//! consecutive revisions recomputed by the core.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::{Deserialize, Serialize};
use shoal_core::names;

use super::gate::GateError;
use super::preview::PreviewError;
use super::status::age;
use super::table::{Table, fields, short_hash};
use super::{Error, Report, Target};
use crate::approvers::ApprovalRecord;
use crate::swarm::decide::{Observation, RevisionRecord, replay};

/// One recorded (or pending) revision.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRow {
    /// Revision number.
    pub revision: u64,
    /// `in force`, `pending approval`, `unreadable`, or empty.
    pub state: String,
    /// When its history ConfigMap was created (RFC 3339); none for a pending revision.
    pub recorded: Option<String>,
    /// Jobs (none when the record omitted them).
    pub jobs: Option<usize>,
    /// Members that could own work.
    pub members: usize,
    /// Members failed over at that revision.
    pub unavailable: usize,
    /// Strategy type.
    pub strategy: String,
    /// Jobs whose owner changed from the previous recorded revision.
    pub moved_from_previous: Option<usize>,
    /// Assignment hash.
    pub hash: String,
    /// Who approved it, as its record says (none for a pending revision, and for records
    /// that predate the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
}

/// `kubectl shoal history`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryReport {
    /// Swarm.
    pub swarm: String,
    /// Namespace.
    pub namespace: String,
    /// Revision in force.
    pub current_revision: u64,
    /// Revisions, oldest first.
    pub revisions: Vec<RevisionRow>,
    /// One revision in detail (`--revision`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<RevisionDetail>,
}

/// One member at a recorded revision.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MemberSlice {
    /// Pod name.
    pub member: String,
    /// Jobs it owned.
    pub jobs: usize,
    /// Whether it could own work (not failed over).
    pub available: bool,
}

/// A job and its owner at a recorded revision.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct JobOwner {
    /// The job key.
    pub job: String,
    /// Its owner (pod name).
    pub member: String,
}

/// One recorded revision recomputed from its inputs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionDetail {
    /// Revision number.
    pub revision: u64,
    /// Strategy type.
    pub strategy: String,
    /// Assignment hash.
    pub hash: String,
    /// Members and their slice sizes.
    pub members: Vec<MemberSlice>,
    /// Every job and its owner (empty when the record omitted the job list).
    pub jobs: Vec<JobOwner>,
    /// The record is too large to hold its job list.
    pub jobs_omitted: bool,
}

/// Recomputes one recorded revision; `Err` names why it cannot be.
pub fn detail(record: &RevisionRecord) -> Result<RevisionDetail, String> {
    let strategy = format!("{:?}", record.strategy.type_).to_lowercase();
    if record.jobs_omitted {
        return Ok(RevisionDetail {
            revision: record.revision,
            strategy,
            hash: record.hash.clone(),
            members: record
                .members
                .iter()
                .map(|member| MemberSlice {
                    member: member.clone(),
                    jobs: 0,
                    available: !record.unavailable.contains(member),
                })
                .collect(),
            jobs: Vec::new(),
            jobs_omitted: true,
        });
    }
    let assignment = replay(record)?;
    let loads = assignment.loads();
    Ok(RevisionDetail {
        revision: record.revision,
        strategy,
        hash: record.hash.clone(),
        members: assignment
            .members()
            .iter()
            .map(|member| MemberSlice {
                member: member.pod_name(),
                jobs: loads.get(member).copied().unwrap_or_default(),
                available: assignment.is_available(member),
            })
            .collect(),
        jobs: assignment
            .iter()
            .map(|(key, member)| JobOwner {
                job: key.as_str().to_owned(),
                member: member.pod_name(),
            })
            .collect(),
        jobs_omitted: false,
    })
}

/// Builds the history from an observation and the history ConfigMaps' creation times
/// (by revision; revisions present there but absent from the observation failed to parse).
pub fn report(
    obs: &Observation,
    namespace: &str,
    recorded: &BTreeMap<u64, Option<String>>,
) -> HistoryReport {
    let current = obs.status.current_revision;
    let mut revisions = Vec::new();
    let mut previous: Option<&RevisionRecord> = None;
    let numbers: std::collections::BTreeSet<u64> =
        obs.history.keys().chain(recorded.keys()).copied().collect();
    for revision in numbers {
        let recorded_at = recorded.get(&revision).cloned().flatten();
        let Some(record) = obs.history.get(&revision) else {
            revisions.push(RevisionRow {
                revision,
                state: "unreadable".to_owned(),
                recorded: recorded_at,
                jobs: None,
                members: 0,
                unavailable: 0,
                strategy: String::new(),
                moved_from_previous: None,
                hash: String::new(),
                approval: None,
            });
            continue;
        };
        let moved_from_previous = previous.and_then(|before| {
            let before = replay(before).ok()?;
            let after = replay(record).ok()?;
            Some(shoal_core::diff(&before, &after).moved.len())
        });
        revisions.push(RevisionRow {
            revision,
            state: if revision == current {
                "in force".to_owned()
            } else {
                String::new()
            },
            recorded: recorded_at,
            jobs: (!record.jobs_omitted).then_some(record.jobs.len()),
            members: record.members.len(),
            unavailable: record.unavailable.len(),
            strategy: format!("{:?}", record.strategy.type_).to_lowercase(),
            moved_from_previous,
            hash: record.hash.clone(),
            approval: record.approval.clone(),
        });
        previous = Some(record);
    }
    if let Some(pending) = &obs.status.pending_revision {
        revisions.push(RevisionRow {
            revision: pending.revision,
            state: "pending approval".to_owned(),
            recorded: None,
            jobs: None,
            members: 0,
            unavailable: 0,
            strategy: format!("{:?}", obs.spec.strategy.type_).to_lowercase(),
            moved_from_previous: Some(pending.summary.jobs_moved as usize),
            hash: pending.hash.clone(),
            approval: None,
        });
    }
    HistoryReport {
        swarm: obs.swarm.clone(),
        namespace: namespace.to_owned(),
        current_revision: current,
        revisions,
        detail: None,
    }
}

/// Reads the Swarm's history, and one revision in detail if asked.
pub async fn history(
    target: &Target,
    swarm: &str,
    revision: Option<u64>,
) -> Result<HistoryReport, Error> {
    let (_, observation) = super::observe(target, swarm).await?;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &target.namespace);
    let selector = format!(
        "{}={swarm},{}=true",
        names::LABEL_SWARM,
        names::LABEL_REVISION_HISTORY
    );
    let maps = api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::ListConfigMaps {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            source,
        })?;
    let recorded: BTreeMap<u64, Option<String>> = maps
        .items
        .iter()
        .filter_map(|cm| {
            let revision = cm.labels().get(names::LABEL_REVISION)?.parse().ok()?;
            let created = cm
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|time| time.0.to_string());
            Some((revision, created))
        })
        .collect();
    let mut history = report(&observation, &target.namespace, &recorded);
    if let Some(revision) = revision {
        let Some(record) = observation.history.get(&revision) else {
            return Err(GateError::UnknownRevision {
                swarm: swarm.to_owned(),
                namespace: target.namespace.clone(),
                revision,
                kept: observation.history.keys().copied().collect(),
            }
            .into());
        };
        history.detail = Some(detail(record).map_err(|message| PreviewError::Replay {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            revision,
            message,
        })?);
    }
    Ok(history)
}

fn optional<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| value.to_string())
}

impl Report for HistoryReport {
    fn table(&self) -> String {
        self.render(false)
    }

    fn wide(&self) -> String {
        self.render(true)
    }
}

impl HistoryReport {
    /// The revisions (`Unavailable`, `Strategy` and `Hash` only when `wide`) and the detail
    /// asked for.
    fn render(&self, wide: bool) -> String {
        let now = Timestamp::now();
        let mut out = format!(
            "Revision History of Swarm {}/{} (revision {} in force)\n",
            self.namespace, self.swarm, self.current_revision
        );
        let mut table = Table::new([
            "Revision",
            "State",
            "Recorded",
            "Jobs",
            "Members",
            "Unavailable",
            "Strategy",
            "Moved From Previous",
            "Approved-By",
            "Hash",
        ])
        .wide_only(&["Unavailable", "Strategy", "Hash"], wide);
        for row in &self.revisions {
            table.row([
                row.revision.to_string(),
                row.state.clone(),
                row.recorded
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |time| age(Some(time), now)),
                optional(row.jobs),
                row.members.to_string(),
                row.unavailable.to_string(),
                row.strategy.clone(),
                optional(row.moved_from_previous),
                row.approval
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), ApprovalRecord::display),
                short_hash(&row.hash),
            ]);
        }
        out.push_str(&table.render("No revision recorded yet"));
        if let Some(detail) = &self.detail {
            out.push_str(&format!("\nRevision {}\n", detail.revision));
            out.push_str(&fields(&[
                ("Strategy", detail.strategy.clone()),
                ("Hash", detail.hash.clone()),
            ]));
            let mut members = Table::new(["Member", "Jobs", "Available"]);
            for member in &detail.members {
                members.row([
                    member.member.clone(),
                    member.jobs.to_string(),
                    if member.available { "yes" } else { "no" }.to_owned(),
                ]);
            }
            out.push_str(&members.render("No members"));
            let mut jobs = Table::new(["Job", "Member"]);
            for owner in &detail.jobs {
                jobs.row([owner.job.clone(), owner.member.clone()]);
            }
            out.push_str(&jobs.render(if detail.jobs_omitted {
                "The job list was too large to record (jobsOmitted)"
            } else {
                "No jobs"
            }));
        }
        out
    }
}
