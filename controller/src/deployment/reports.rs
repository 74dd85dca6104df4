//! What members report about their instances, trusted only from the member's
//! own Lease.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{MemberLease, MemberPod};

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
