//! The cluster as both controllers observe it, in plain data: pods, pools, member Leases
//! and slice ConfigMaps. The shared readers (`crate::cluster`) fill these in; the pure
//! decisions of both kinds read them.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use shoal_core::MemberId;

/// One pod of a pool, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    /// Pod uid.
    pub uid: String,
    /// Ready condition is True.
    pub ready: bool,
    /// Has a deletion timestamp.
    pub deleting: bool,
    /// Its IP (`status.podIP`), once it has one.
    pub ip: Option<String>,
    /// The Node it is bound to (`spec.nodeName`), if any.
    pub node: Option<String>,
}

/// A StatefulSet or a Deployment labelled for this Swarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolState {
    /// StatefulSet (or Deployment) name.
    pub name: String,
    /// `spec.replicas`.
    pub replicas: u32,
    /// A StatefulSet's pods by ordinal (empty for a Deployment).
    pub pods: BTreeMap<u32, PodState>,
    /// `Some` for a Deployment pool: its pods (owned through one of its ReplicaSets) by
    /// their generated names. Its members are these pods, not `0..replicas`.
    pub deployment_pods: Option<BTreeMap<String, PodState>>,
    /// The StatefulSet controller has seen its latest spec (`status.observedGeneration`
    /// is its `metadata.generation`): a pool read otherwise is never taken as done by a
    /// restart rollout.
    pub observed_current: bool,
}

impl PoolState {
    /// The pods of the pool's members by name: a StatefulSet's in `0..replicas`, a
    /// Deployment's that are not terminating.
    pub fn member_pods(&self) -> Vec<(String, &PodState)> {
        match &self.deployment_pods {
            Some(pods) => pods
                .iter()
                .filter(|(_, pod)| !pod.deleting)
                .map(|(name, pod)| (name.clone(), pod))
                .collect(),
            None => self
                .pods
                .range(..self.replicas)
                .map(|(ordinal, pod)| (format!("{}-{ordinal}", self.name), pod))
                .collect(),
        }
    }

    /// The pod of this pool named `pod`, if the pool has one.
    pub fn pod(&self, pod: &str) -> Option<&PodState> {
        match &self.deployment_pods {
            Some(pods) => pods.get(pod),
            None => {
                let id = MemberId::from_pod_name(&self.name, pod).ok()?;
                self.pods.get(&id.ordinal()?)
            }
        }
    }
}

/// A member Lease written by the sidecar.
///
/// Nothing in it is taken on its word. Liveness is measured on the controller's own clock:
/// the Lease counts as renewed whenever it changes, and expires when it has not changed
/// for its duration (the longest the controller saw), so a `renewTime` moved back or
/// forward by hand proves nothing. Acknowledgements count only from a Lease held by the
/// member's pod itself (`holderIdentity`, and the pod uid the sidecar records).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseState {
    /// `holderIdentity`: the pod name the sidecar writes.
    pub holder: Option<String>,
    /// Uid of the pod the Lease belongs to (its ownerReference), if the sidecar records it.
    pub pod_uid: Option<String>,
    /// `shoal.dev/acked-revision`.
    pub acked_revision: Option<u64>,
    /// `shoal.dev/acked-hash`.
    pub acked_hash: Option<String>,
    /// `renewTime`, as written (shown, never trusted).
    pub renew_time: Option<Timestamp>,
    /// `leaseDurationSeconds`: the longest the controller has seen for this member.
    pub duration_seconds: Option<i64>,
    /// `resourceVersion`: it changes whenever anyone writes the Lease.
    pub version: String,
    /// Since when, by the controller's clock, the Lease is as observed now; `None` when
    /// unknown (a one-off observation, such as a preview): it is then never expired.
    pub unchanged_since: Option<Timestamp>,
}

impl LeaseState {
    /// The Lease has not changed for its duration, as the controller measured it.
    pub fn expired(&self, now: Timestamp) -> bool {
        match (self.unchanged_since, self.duration_seconds) {
            (Some(since), Some(seconds)) => since + SignedDuration::from_secs(seconds) < now,
            // No measure: a Lease is never called expired on a guess.
            _ => false,
        }
    }

    /// The Lease is the one this pod's own sidecar writes.
    pub fn speaks_for(&self, pod: &str, pod_uid: &str) -> bool {
        self.holder.as_deref() == Some(pod)
            && self.pod_uid.as_deref().is_none_or(|uid| uid == pod_uid)
    }

    /// The pod's sidecar acknowledged exactly this slice (revision and hash).
    pub fn acknowledges(&self, pod: &str, pod_uid: &str, revision: u64, hash: &str) -> bool {
        self.speaks_for(pod, pod_uid)
            && self.acked_revision == Some(revision)
            && self.acked_hash.as_deref() == Some(hash)
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

/// The member a pod name (of a slice, or of a revision record) stands for: the member of
/// an observed pool that has this pod, else, for a pod no pool has any more, `<pool>-<ordinal>`
/// when the name has that shape and a generated name otherwise. Either way its
/// [`MemberId::pod_name`] is `pod` again, so the slice `<pod>-slice` is the one found.
pub fn member_of_pod(pools: &[PoolState], pod: &str) -> MemberId {
    for pool in pools {
        match &pool.deployment_pods {
            Some(pods) if pods.contains_key(pod) => {
                return MemberId::generated(pool.name.clone(), pod);
            }
            Some(_) => {}
            None => {
                if let Ok(id) = MemberId::from_pod_name(&pool.name, pod) {
                    return id;
                }
            }
        }
    }
    departed_member(pod)
}

/// The member a pod name stands for with no pool to ask: `<pool>-<ordinal>` when the name
/// has that shape, else a generated name in the pool its name suggests (a Deployment's
/// pods are `<deployment>-<template hash>-<suffix>`).
fn departed_member(pod: &str) -> MemberId {
    if let Some(id) = ordinal_member(pod) {
        return id;
    }
    let mut parts = pod.rsplitn(3, '-');
    let pool = match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(_), Some(deployment)) => deployment,
        _ => pod,
    };
    MemberId::generated(pool, pod)
}

/// The member a pod name `<pool>-<ordinal>` stands for, when the name has that shape (a
/// StatefulSet's pod): the part before the last `-` is the pool. The one shape rule of
/// both kinds: a DeploymentPlan places only on StatefulSet members, so a name of another
/// shape names none of its members.
pub fn ordinal_member(pod: &str) -> Option<MemberId> {
    let (pool, _) = pod.rsplit_once('-')?;
    MemberId::from_pod_name(pool, pod).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statefulset(name: &str, ordinals: &[u32]) -> PoolState {
        let pod = PodState {
            uid: "u".to_owned(),
            ready: true,
            deleting: false,
            ip: None,
            node: None,
        };
        PoolState {
            name: name.to_owned(),
            replicas: ordinals.len() as u32,
            pods: ordinals
                .iter()
                .map(|ordinal| (*ordinal, pod.clone()))
                .collect(),
            deployment_pods: None,
            observed_current: true,
        }
    }

    #[test]
    fn a_statefulset_pod_name_is_its_pool_and_ordinal() {
        assert_eq!(ordinal_member("web-0"), Some(MemberId::new("web", 0)));
        assert_eq!(
            ordinal_member("my-web-12"),
            Some(MemberId::new("my-web", 12))
        );
    }

    #[test]
    fn a_name_without_a_canonical_ordinal_names_no_statefulset_member() {
        assert_eq!(ordinal_member("web"), None);
        assert_eq!(ordinal_member("web-01"), None);
        assert_eq!(ordinal_member("web-x1"), None);
    }

    #[test]
    fn a_pod_of_an_observed_pool_is_that_pools_member_whatever_its_shape() {
        let mut deployment = statefulset("web", &[]);
        deployment.deployment_pods = Some(BTreeMap::from([(
            "web-5c9d-24567".to_owned(),
            PodState {
                uid: "u".to_owned(),
                ready: true,
                deleting: false,
                ip: None,
                node: None,
            },
        )]));
        let pools = [statefulset("db", &[0]), deployment];
        // All digits after the last `-`: the shape alone would say pool `web-5c9d`.
        assert_eq!(
            member_of_pod(&pools, "web-5c9d-24567"),
            MemberId::generated("web", "web-5c9d-24567")
        );
        assert_eq!(member_of_pod(&pools, "db-0"), MemberId::new("db", 0));
    }

    #[test]
    fn a_departed_pod_is_read_by_its_shape_and_keeps_its_name() {
        assert_eq!(member_of_pod(&[], "db-3"), MemberId::new("db", 3));
        let generated = member_of_pod(&[], "web-5c9d-xk2p7");
        assert_eq!(generated, MemberId::generated("web", "web-5c9d-xk2p7"));
        assert_eq!(generated.pod_name(), "web-5c9d-xk2p7");
    }
}
