//! `kubectl shoal status`: the Swarm as the controller last described it
//! (status), what is in the cluster (pools, slices, Leases), what the
//! controller does next (its planner on the current observation), and recent
//! Events.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde::{Deserialize, Serialize};
use shoal_core::format::parse_slice;
use shoal_core::names::ANNOTATION_APPROVE;

use super::table::{Table, fields, short_hash};
use super::{Error, Report, Target};
use crate::api::swarm::{Condition, PendingRevision};
use crate::swarm::decide::{self, Observation, Operation};

/// Events shown.
pub const RECENT_EVENTS: usize = 10;

/// One pool.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    /// StatefulSet name.
    pub name: String,
    /// `spec.replicas`.
    pub replicas: u32,
    /// Pods that exist (ordinals below `replicas`).
    pub pods: usize,
    /// Of those, Ready and not terminating.
    pub ready: usize,
    /// Restart policy: where the pool stands in the rollout (`Waiting`, `Updating`,
    /// `Paused`, `Done`, `Failed`), from `status.rollout.pools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
}

/// One member.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MemberRow {
    /// Pod name.
    pub name: String,
    /// Pool.
    pub pool: String,
    /// Pod Ready (as the controller last saw it).
    pub ready: bool,
    /// Jobs in the member's target slice.
    pub slice_size: u64,
    /// Revision stamped on the slice ConfigMap in the cluster, if any.
    pub slice_revision: Option<u64>,
    /// Revision acknowledged on the member Lease, if a sidecar runs.
    pub acked_revision: Option<u64>,
    /// Whether the sidecar acknowledged the target slice: `yes`, `no`, or `no lease`.
    pub acknowledged: String,
    /// Jobs moved away because the member was unavailable too long.
    pub failed_over: bool,
    /// `Cordoned`, `Draining` or `Drained` (`spec.cordon`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// One step the controller takes on its next reconcile.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct OperationRow {
    /// What.
    pub step: String,
    /// On which object.
    pub object: String,
    /// Details.
    pub detail: String,
}

/// One Event about the Swarm.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    /// When it was last seen (RFC 3339).
    pub last_seen: Option<String>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// CamelCase reason.
    pub reason: String,
    /// How often.
    pub count: i32,
    /// The note.
    pub message: String,
}

/// `kubectl shoal status`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// Swarm.
    pub swarm: String,
    /// While an approved revision waits for a maintenance window: when the next opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<String>,
    /// Namespace.
    pub namespace: String,
    /// Phase from the status.
    pub phase: Option<String>,
    /// Members ready / members.
    pub ready: Option<String>,
    /// Jobs in the revision in force.
    pub jobs: u64,
    /// Revision in force.
    pub current_revision: u64,
    /// Its assignment hash.
    pub current_hash: Option<String>,
    /// Approval policy.
    pub approval_policy: String,
    /// Reload policy.
    pub reload_policy: String,
    /// Strategy type.
    pub strategy: String,
    /// The last problem, in words.
    pub last_error: Option<String>,
    /// Restart policy: the rollout's phase and message, from `status.rollout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    /// `shoal.dev/approve` on the Swarm.
    pub approved: Option<String>,
    /// Annotations the controller refused, with the value refused.
    pub refused_annotations: BTreeMap<String, String>,
    /// Pools.
    pub pools: Vec<PoolRow>,
    /// Members.
    pub members: Vec<MemberRow>,
    /// The revision waiting for approval.
    pub pending: Option<PendingRevision>,
    /// Conditions.
    pub conditions: Vec<Condition>,
    /// What the controller does on its next reconcile.
    pub operations: Vec<OperationRow>,
    /// The most recent Events about the Swarm, oldest first.
    pub events: Vec<EventRow>,
}

/// Describes the planner's operations for people.
pub fn operation_rows(swarm: &str, operations: &[Operation]) -> Vec<OperationRow> {
    operations
        .iter()
        .map(|operation| match operation {
            Operation::WriteRevision(record) => OperationRow {
                step: "record revision".to_owned(),
                object: format!(
                    "ConfigMap {}",
                    shoal_core::names::revision_configmap(swarm, record.revision)
                ),
                detail: format!(
                    "{} jobs, {} members",
                    record.jobs.len(),
                    record.members.len()
                ),
            },
            Operation::WriteSlice {
                member,
                slice,
                phase,
                ..
            } => OperationRow {
                step: format!("{phase} slice"),
                object: format!(
                    "ConfigMap {}",
                    shoal_core::names::slice_configmap(&member.pod_name())
                ),
                detail: format!("{} jobs at revision {}", slice.jobs.len(), slice.revision),
            },
            Operation::DeleteSlice { member, .. } => OperationRow {
                step: "delete slice".to_owned(),
                object: format!("ConfigMap {}", shoal_core::names::slice_configmap(member)),
                detail: "the member left its pool".to_owned(),
            },
            Operation::Evict { pod, uid } => OperationRow {
                step: "restart".to_owned(),
                object: format!("Pod {pod}"),
                detail: format!("eviction of uid {uid}"),
            },
            Operation::WriteIndex { .. } => OperationRow {
                step: "write index".to_owned(),
                object: format!("ConfigMap {}", shoal_core::names::index_configmap(swarm)),
                detail: "every slice is in place".to_owned(),
            },
            Operation::PruneRevision { revision } => OperationRow {
                step: "prune history".to_owned(),
                object: format!(
                    "ConfigMap {}",
                    shoal_core::names::revision_configmap(swarm, *revision)
                ),
                detail: "beyond revisionHistoryLimit".to_owned(),
            },
        })
        .collect()
}

/// Builds the report from an observation and the Swarm's Events. Pure.
pub fn report(obs: &Observation, namespace: &str, events: Vec<EventRow>) -> StatusReport {
    let status = &obs.status;
    let pools = obs
        .pools
        .iter()
        .map(|pool| {
            let pods: Vec<&decide::PodState> =
                pool.member_pods().into_iter().map(|(_, pod)| pod).collect();
            PoolRow {
                name: pool.name.clone(),
                replicas: pool.replicas,
                pods: pods.len(),
                ready: pods.iter().filter(|pod| pod.ready && !pod.deleting).count(),
                rollout: status.rollout.as_ref().and_then(|rollout| {
                    let row = rollout.pools.iter().find(|row| row.name == pool.name)?;
                    Some(row.state.clone())
                }),
            }
        })
        .collect();
    let members = status
        .members
        .iter()
        .map(|member| {
            let slice_revision = obs
                .slices
                .get(&member.name)
                .and_then(|object| object.text.as_deref())
                .and_then(|text| parse_slice(text).ok())
                .map(|slice| slice.revision);
            let acknowledged =
                super::acknowledgement(obs, &member.name, member.slice_hash.as_deref());
            MemberRow {
                name: member.name.clone(),
                pool: member.pool.clone(),
                ready: member.ready,
                slice_size: member.slice_size,
                slice_revision,
                acked_revision: member.acked_revision,
                acknowledged,
                failed_over: member.failed_over,
                state: member.state.clone(),
            }
        })
        .collect();
    let next = decide::decide(obs);
    StatusReport {
        swarm: obs.swarm.clone(),
        next_window: status.next_window.clone(),
        namespace: namespace.to_owned(),
        phase: status.phase.clone(),
        ready: status.ready.clone(),
        jobs: status.jobs,
        current_revision: status.current_revision,
        current_hash: status.current_hash.clone(),
        approval_policy: format!("{:?}", obs.spec.approval.policy),
        reload_policy: format!("{:?}", obs.spec.reload),
        strategy: format!("{:?}", obs.spec.strategy.type_).to_lowercase(),
        last_error: status.last_error.clone(),
        rollout: status
            .rollout
            .as_ref()
            .map(|rollout| format!("{}: {}", rollout.phase, rollout.message)),
        approved: obs.annotations.get(ANNOTATION_APPROVE).cloned(),
        refused_annotations: obs.status.refused_annotations.clone(),
        pools,
        members,
        pending: status.pending_revision.clone(),
        conditions: status.conditions.clone(),
        operations: operation_rows(&obs.swarm, &next.operations),
        events,
    }
}

/// Reads the Swarm, its objects and Events.
pub async fn status(target: &Target, swarm: &str) -> Result<StatusReport, Error> {
    let (_, observation) = super::observe(target, swarm).await?;
    let events = recent_events(target, swarm).await?;
    Ok(report(&observation, &target.namespace, events))
}

fn event_time(event: &Event) -> Option<Timestamp> {
    event
        .last_timestamp
        .as_ref()
        .map(|time| time.0)
        .or_else(|| {
            event
                .series
                .as_ref()
                .and_then(|series| series.last_observed_time.as_ref())
                .map(|time| time.0)
        })
        .or_else(|| event.event_time.as_ref().map(|time| time.0))
        .or_else(|| {
            event
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|time| time.0)
        })
}

/// The most recent Events about a Swarm, oldest first.
pub async fn recent_events(target: &Target, swarm: &str) -> Result<Vec<EventRow>, Error> {
    let api: Api<Event> = Api::namespaced(target.client.clone(), &target.namespace);
    let selector = format!("involvedObject.kind=Swarm,involvedObject.name={swarm}");
    let list = api
        .list(&ListParams::default().fields(&selector))
        .await
        .map_err(|source| Error::ListEvents {
            swarm: swarm.to_owned(),
            namespace: target.namespace.clone(),
            source,
        })?;
    let mut events: Vec<(Option<Timestamp>, EventRow)> = list
        .items
        .iter()
        .map(|event| {
            let time = event_time(event);
            (
                time,
                EventRow {
                    last_seen: time.map(|time| time.to_string()),
                    type_: event.type_.clone().unwrap_or_default(),
                    reason: event.reason.clone().unwrap_or_default(),
                    count: event
                        .count
                        .or_else(|| event.series.as_ref().and_then(|series| series.count))
                        .unwrap_or(1),
                    message: event.message.clone().unwrap_or_default(),
                },
            )
        })
        .collect();
    events.sort_by_key(|event| event.0);
    let skip = events.len().saturating_sub(RECENT_EVENTS);
    Ok(events.into_iter().skip(skip).map(|(_, row)| row).collect())
}

/// `12s`, `5m`, `3h`, `2d` since `time`, as kubectl prints ages.
pub fn age(time: Option<&str>, now: Timestamp) -> String {
    let Some(time) = time.and_then(|text| text.parse::<Timestamp>().ok()) else {
        return "<unknown>".to_owned();
    };
    let seconds = now.duration_since(time).as_secs().max(0);
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        7200..172_800 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

fn yes_no(value: bool) -> String {
    if value { "yes" } else { "no" }.to_owned()
}

fn optional<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "<none>".to_owned(), |value| value.to_string())
}

impl Report for StatusReport {
    fn table(&self) -> String {
        let now = Timestamp::now();
        let mut out = String::from("Swarm Info\n");
        let mut pairs = vec![
            ("Swarm", format!("{}/{}", self.namespace, self.swarm)),
            ("Phase", optional(self.phase.as_ref())),
            ("Ready", optional(self.ready.as_ref())),
            ("Jobs in force", self.jobs.to_string()),
            ("Revision in force", self.current_revision.to_string()),
            (
                "Assignment hash",
                optional(self.current_hash.as_deref().map(short_hash)),
            ),
            ("Strategy", self.strategy.clone()),
            ("Approval policy", self.approval_policy.clone()),
            ("Reload policy", self.reload_policy.clone()),
            ("Last error", optional(self.last_error.as_ref())),
        ];
        if let Some(rollout) = &self.rollout {
            pairs.push(("Rollout", rollout.clone()));
        }
        if let Some(next) = &self.next_window {
            pairs.push((
                "Next window",
                format!("{next} (an approved revision waits for it)"),
            ));
        }
        if let Some(approved) = &self.approved {
            pairs.push(("Approved", format!("{approved} ({ANNOTATION_APPROVE})")));
        }
        for (annotation, value) in &self.refused_annotations {
            pairs.push((
                "Refused",
                format!("{annotation}={value} (see the Warning Events)"),
            ));
        }
        out.push_str(&fields(&pairs));

        out.push_str("\nPending Revision\n");
        match &self.pending {
            None => out.push_str("No revision waits for approval\n"),
            Some(pending) => {
                let mut table = Table::new([
                    "Revision",
                    "Jobs Moved",
                    "Lower Bound",
                    "Members Affected",
                    "Restarts Needed",
                    "Supersedes",
                    "Hash",
                ]);
                table.row([
                    pending.revision.to_string(),
                    pending.summary.jobs_moved.to_string(),
                    pending.summary.lower_bound.to_string(),
                    pending.summary.members_affected.to_string(),
                    pending.summary.restarts_needed.to_string(),
                    optional(pending.summary.supersedes),
                    short_hash(&pending.hash),
                ]);
                out.push_str(&table.render(""));
                out.push_str(&format!(
                    "See the moves with `kubectl shoal diff {0} -n {1}`; approve with `kubectl shoal approve {0} -n {1} --revision {2}`\n",
                    self.swarm, self.namespace, pending.revision
                ));
            }
        }

        out.push_str("\nPools\n");
        let mut pools = Table::new(["Pool", "Replicas", "Pods", "Ready", "Rollout"]);
        for pool in &self.pools {
            pools.row([
                pool.name.clone(),
                pool.replicas.to_string(),
                pool.pods.to_string(),
                pool.ready.to_string(),
                pool.rollout.clone().unwrap_or_else(|| "-".to_owned()),
            ]);
        }
        out.push_str(&pools.render(&format!(
            "No pools: label a StatefulSet with shoal.dev/swarm={}",
            self.swarm
        )));

        out.push_str("\nMembers\n");
        let mut members = Table::new([
            "Member",
            "Pool",
            "Ready",
            "Slice Size",
            "Slice Revision",
            "Acked Revision",
            "Acknowledged",
            "Failed Over",
            "State",
        ]);
        for member in &self.members {
            members.row([
                member.name.clone(),
                member.pool.clone(),
                yes_no(member.ready),
                member.slice_size.to_string(),
                optional(member.slice_revision),
                optional(member.acked_revision),
                member.acknowledged.clone(),
                yes_no(member.failed_over),
                member.state.clone().unwrap_or_else(|| "-".to_owned()),
            ]);
        }
        out.push_str(&members.render("No members"));

        out.push_str("\nConditions\n");
        let mut conditions = Table::new(["Type", "Status", "Reason", "Since", "Message"]);
        for condition in &self.conditions {
            conditions.row([
                condition.type_.clone(),
                condition.status.clone(),
                condition.reason.clone(),
                age(condition.last_transition_time.as_deref(), now),
                condition.message.clone(),
            ]);
        }
        out.push_str(&conditions.render("No conditions yet: is the controller running?"));

        out.push_str("\nNext Operations (what the controller does on its next reconcile)\n");
        let mut operations = Table::new(["Step", "Object", "Detail"]);
        for operation in &self.operations {
            operations.row([
                operation.step.clone(),
                operation.object.clone(),
                operation.detail.clone(),
            ]);
        }
        out.push_str(&operations.render("No operations in flight"));

        out.push_str("\nRecent Events\n");
        let mut events = Table::new(["Last Seen", "Type", "Reason", "Count", "Message"]);
        for event in &self.events {
            events.row([
                age(event.last_seen.as_deref(), now),
                event.type_.clone(),
                event.reason.clone(),
                event.count.to_string(),
                event.message.clone(),
            ]);
        }
        out.push_str(&events.render("No Events"));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::testing::{converge, observation, pool};

    #[test]
    fn a_deployment_pool_counts_its_pods_that_are_not_terminating() {
        let pod = |deleting| decide::PodState {
            uid: "u".to_owned(),
            ready: true,
            deleting,
            ip: None,
            node: None,
        };
        let mut web = pool("web", 2);
        web.pods.clear();
        web.deployment_pods = Some(
            [
                ("web-5c-aaaaa".to_owned(), pod(false)),
                ("web-5c-bbbbb".to_owned(), pod(false)),
                ("web-5c-ccccc".to_owned(), pod(true)),
            ]
            .into(),
        );
        let obs = observation(4, vec![web]);
        let report = report(&obs, "ns", Vec::new());
        assert_eq!((report.pools[0].pods, report.pools[0].ready), (2, 2));
    }

    #[test]
    fn a_scale_in_progress_shows_the_revokes_the_controller_makes_next() {
        let mut obs = observation(12, vec![pool("worker", 2)]);
        converge(&mut obs);
        obs.pools = vec![pool("worker", 3)];
        let report = report(&obs, "ns", Vec::new());
        assert_eq!(report.current_revision, 1);
        assert_eq!(report.pools[0].replicas, 3);
        let steps: Vec<(&str, &str)> = report
            .operations
            .iter()
            .map(|row| (row.step.as_str(), row.object.as_str()))
            .collect();
        assert_eq!(steps[0], ("record revision", "ConfigMap demo-rev-2"));
        assert!(
            steps
                .iter()
                .any(|step| step.0 == "revoke slice" && step.1.starts_with("ConfigMap worker-")),
            "{steps:?}"
        );
        // Nothing is granted before the revokes are acknowledged.
        assert!(
            !steps.iter().any(|step| step.0 == "grant slice"),
            "{steps:?}"
        );
        let table = report.table();
        assert!(table.contains("| revoke slice "), "{table}");
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        assert_eq!(age(Some("2026-01-01T11:59:50Z"), now), "10s");
        assert_eq!(age(Some("2026-01-01T11:50:00Z"), now), "10m");
        assert_eq!(age(Some("2026-01-01T09:00:00Z"), now), "3h");
        assert_eq!(age(Some("2025-12-29T12:00:00Z"), now), "3d");
        assert_eq!(age(None, now), "<unknown>");
    }
}
