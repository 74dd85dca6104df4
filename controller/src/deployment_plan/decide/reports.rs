//! What members report about their instances, trusted only from the member's
//! own Lease, and taken as evidence of an approved change, never as a change.
//!
//! A member's sidecar says how the instances the controller delivered to it
//! are doing. What the plan records (`status.instances[].state`) moves on a
//! report only along the transitions an approved operation allows
//! ([`judge`]):
//!
//! * a delivered entry (`pending`, `installing`, `installed`, `failed`) takes
//!   a reported `pending`, `installing`, `installed` or `failed` at its
//!   deployment: none of them changes what is delivered (an instance is
//!   installed, or fails, or its member's new pod installs it again);
//! * leaving entries (`removing`, `removed`: an approved `DELETE` or the old
//!   copy of a relocation), `stopped` and `restarting` entries follow their
//!   operations in `decide` (step 3), not this rule;
//! * anything else is ignored: `removing`, `removed` or `stopped` for an
//!   instance no operation is removing, any string off the enumeration, and a
//!   member saying it runs an instance of the plan not placed on it. The entry
//!   stays as it was (so a delivered one stays in its member's slice: it is
//!   delivered again), the report is listed in `status.ignoredReports`,
//!   counted, and announced once by a Warning `ReportIgnored` naming the
//!   member and the value.
//!
//! One report is expected and not held against the member: `removing` or
//! `removed` for a `pending` entry, the member's last word on the copy it ran
//! before a restart, until it has the slice again.

use std::collections::BTreeMap;

use serde::Deserialize;
use shoal_core::slice::InstanceState;

use super::{MemberLease, MemberPod};
use crate::api::deployment_plan::{IgnoredReport, IgnoredReports};
use crate::planned::PlannedEvent;

/// One instance's state as its member reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct InstanceReport {
    /// `pending`, `installing`, `installed`, `removing`, `removed` or `failed`.
    pub state: String,
    /// The deployment revision whose payload the member has (or tried).
    pub deployment: u64,
    /// Error code when `failed`.
    #[serde(default)]
    pub code: Option<String>,
    /// Error message when `failed`.
    #[serde(default)]
    pub message: Option<String>,
}

/// At most this many ignored reports are listed in `status.ignoredReports.current`
/// (and so announced and counted); a member writing more is still ignored.
pub const MAX_LISTED_IGNORED: usize = crate::api::limits::MAX_LISTED_IGNORED as usize;

/// A reported state as the sidecar's enumeration (`shoal_core::slice::InstanceState`,
/// the one the sidecar writes); `None` for any other string.
fn reported_state(reported: &str) -> Option<InstanceState> {
    serde_json::from_value(serde_json::Value::String(reported.to_owned())).ok()
}

/// What a report does to a delivered entry at its deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Evidence {
    /// The entry takes the reported state.
    Taken,
    /// The member has not caught up yet (a copy it ran before a restart): nothing
    /// changes, nothing is held against it.
    Stale,
    /// No approved operation allows it: nothing changes, and why.
    Ignored(String),
}

/// What the report `reported` does to an entry in state `recorded` that the
/// controller delivers (see the module docs).
pub(super) fn judge(recorded: &str, reported: &str) -> Evidence {
    match reported_state(reported) {
        None => Evidence::Ignored(format!(
            "{reported:?} is not an instance state (pending, installing, installed, removing, removed or failed)"
        )),
        Some(
            InstanceState::Pending
            | InstanceState::Installing
            | InstanceState::Installed
            | InstanceState::Failed,
        ) => Evidence::Taken,
        Some(InstanceState::Removing | InstanceState::Removed) if recorded == "pending" => {
            Evidence::Stale
        }
        Some(InstanceState::Removing | InstanceState::Removed) => Evidence::Ignored(format!(
            "no approved operation removes it (recorded {recorded}); it stays delivered"
        )),
    }
}

/// Whether a report claims the member runs (or installs) the instance.
pub(super) fn claims_to_run(reported: &str) -> bool {
    matches!(
        reported_state(reported),
        Some(InstanceState::Pending | InstanceState::Installing | InstanceState::Installed)
    )
}

/// `status.ignoredReports` from the reports ignored in this pass: the first
/// [`MAX_LISTED_IGNORED`] listed; each one not listed before counted and announced,
/// one Warning `ReportIgnored` per member naming the instances and values.
pub(super) fn record_ignored(
    plan: &str,
    previous: &IgnoredReports,
    mut now: Vec<IgnoredReport>,
    events: &mut Vec<PlannedEvent>,
) -> IgnoredReports {
    now.sort();
    now.dedup_by(|a, b| same_report(a, b));
    now.truncate(MAX_LISTED_IGNORED);
    let fresh: Vec<&IgnoredReport> = now
        .iter()
        .filter(|report| !previous.current.iter().any(|old| same_report(old, report)))
        .collect();
    let mut by_member: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for report in &fresh {
        by_member.entry(&report.member).or_default().push(format!(
            "{} {:?} (deployment {}): {}",
            report.instance, report.state, report.deployment, report.why
        ));
    }
    for (member, reports) in by_member {
        events.push(PlannedEvent {
            warning: true,
            reason: "ReportIgnored".to_owned(),
            note: format!(
                "DeploymentPlan {plan}: member {member} reported {}; a report is evidence of an approved operation, not a change: ignored",
                reports.join("; ")
            ),
        });
    }
    IgnoredReports {
        count: previous.count.saturating_add(fresh.len() as u64),
        current: now,
    }
}

/// The same report (member, instance, state, deployment), whatever the words of why.
fn same_report(a: &IgnoredReport, b: &IgnoredReport) -> bool {
    (&a.member, &a.instance, &a.state, a.deployment)
        == (&b.member, &b.instance, &b.state, b.deployment)
}

/// The instance states one member reports, by instance name.
pub(super) type MemberReports = BTreeMap<String, InstanceReport>;

/// The reports of a member, from its Lease, when the Lease speaks for the
/// member's pod (held by the pod, recording its uid if any). A Lease of
/// another holder, a pod that is gone, or an annotation that is not the
/// documented JSON gives no reports: nothing is taken on a stranger's word.
pub(super) fn trusted_reports(
    pod_name: &str,
    pod: Option<&MemberPod>,
    lease: Option<&MemberLease>,
) -> Option<MemberReports> {
    let pod = pod?;
    let lease = lease?;
    if !lease.lease.speaks_for(pod_name, &pod.uid) {
        return None;
    }
    let text = lease.instance_states.as_deref()?;
    serde_json::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::LeaseState;

    fn pod() -> MemberPod {
        MemberPod {
            uid: "uid-1".into(),
            ready: true,
            deleting: false,
            node_zone: None,
            ip: None,
        }
    }

    fn lease(holder: &str, uid: Option<&str>, states: &str) -> MemberLease {
        MemberLease {
            lease: LeaseState {
                holder: Some(holder.into()),
                pod_uid: uid.map(Into::into),
                ..LeaseState::default()
            },
            instance_states: Some(states.into()),
        }
    }

    const INSTALLED: &str = r#"{"web-0": {"state": "installed", "deployment": 1}}"#;

    #[test]
    fn reports_count_only_from_the_lease_the_members_own_pod_holds() {
        let own = lease("pool-0", Some("uid-1"), INSTALLED);
        let reports = trusted_reports("pool-0", Some(&pod()), Some(&own)).expect("trusted");
        assert_eq!(reports["web-0"].state, "installed");
        let stranger = lease("pool-1", Some("uid-1"), INSTALLED);
        assert_eq!(
            trusted_reports("pool-0", Some(&pod()), Some(&stranger)),
            None
        );
        let old_pod = lease("pool-0", Some("uid-0"), INSTALLED);
        assert_eq!(
            trusted_reports("pool-0", Some(&pod()), Some(&old_pod)),
            None
        );
        assert_eq!(trusted_reports("pool-0", None, Some(&own)), None);
    }

    #[test]
    fn an_instance_states_annotation_that_is_not_the_documented_json_reports_nothing() {
        let garbled = lease("pool-0", None, "installed");
        assert_eq!(
            trusted_reports("pool-0", Some(&pod()), Some(&garbled)),
            None
        );
    }
}
