//! The members of a Swarm as the plan sees them: StatefulSet pool pods in `0..replicas`
//! and Deployment pool pods (keyed by their generated names), their pods and Leases, how long each has been unavailable, and failover.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use shoal_core::names::ANNOTATION_FAILOVER_NOW;
use shoal_core::{Member, MemberId};

use super::{LeaseState, Observation, PodState, PoolState};
use crate::api::swarm::MemberStatus;

/// A member as the plan sees it.
pub(super) struct MemberView {
    pub id: MemberId,
    pub pod: Option<PodState>,
    pub lease: Option<LeaseState>,
    pub unavailable_since: Option<Timestamp>,
    pub failed_over: bool,
}

impl MemberView {
    pub fn name(&self) -> String {
        self.id.pod_name()
    }

    /// Pod exists, is Ready, is not being deleted, and its Lease (if any) is live.
    pub fn available(&self, now: Timestamp) -> bool {
        let pod_ok = self
            .pod
            .as_ref()
            .is_some_and(|pod| pod.ready && !pod.deleting);
        let lease_ok = self.lease.as_ref().is_none_or(|lease| !lease.expired(now));
        pod_ok && lease_ok
    }
}

pub use crate::api::swarm::MAX_MEMBERS;
pub use crate::observed::member_of_pod;

/// The members of every pool, and when the next failover deadline falls.
pub(super) struct Roster {
    /// Every member, in pool and ordinal order.
    pub views: Vec<MemberView>,
    /// Time until the next member would be failed over, if one is waiting for it.
    pub next_deadline: Option<Duration>,
    /// Pods named by `failover-now` that are not members.
    pub unknown_failover_targets: Vec<String>,
    /// The pools ask for more than [`MAX_MEMBERS`] members: `(<kind> <pool>, replicas)` of
    /// each (kind `StatefulSet` or `Deployment`).
    pub over_limit: Option<Vec<(String, u32)>>,
    /// `spec.cordon` resolved against the members.
    pub cordon: super::cordon::Cordon,
}

impl Roster {
    /// The members as the core assigns to them (failed-over and draining members own
    /// nothing).
    pub fn members(&self) -> Vec<Member> {
        self.views
            .iter()
            .map(|view| {
                let draining = self.cordon.draining.contains(&view.id);
                Member::of(view.id.clone()).with_available(!view.failed_over && !draining)
            })
            .collect()
    }

    /// Members by pod name.
    pub fn by_name(&self) -> BTreeMap<String, &MemberView> {
        self.views.iter().map(|view| (view.name(), view)).collect()
    }
}

/// Observes every member: its pod, its Lease, since when it is unavailable, and whether
/// it is failed over (unavailable past `failover_after`, or named by `failover-now`).
///
/// A StatefulSet's members are its ordinals `0..replicas`, pod or not (a missing pod comes
/// back under the same name); a Deployment's are its pods that are not terminating (a pod
/// replaced comes back under a new name, so a terminating one is leaving for good).
pub(super) fn observe_members(obs: &Observation, failover_after: Option<Duration>) -> Roster {
    let previous: BTreeMap<&str, &MemberStatus> = obs
        .status
        .members
        .iter()
        .map(|member| (member.name.as_str(), member))
        .collect();
    let forced: BTreeSet<&str> = obs
        .annotations
        .get(ANNOTATION_FAILOVER_NOW)
        .map(|pods| {
            pods.split(',')
                .map(str::trim)
                .filter(|pod| !pod.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let mut views = Vec::new();
    let mut next_deadline: Option<Duration> = None;
    let mut view_of = |id: MemberId, pod: Option<PodState>| {
        let name = id.pod_name();
        let mut view = MemberView {
            id,
            pod,
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
                let after_signed = SignedDuration::try_from(after).unwrap_or(SignedDuration::MAX);
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
        view
    };
    for pool in &obs.pools {
        // `spec.replicas` is input like any other: a typo of a few zeros must not make the
        // controller build millions of members.
        let room = MAX_MEMBERS.saturating_sub(views.len() as u32);
        match &pool.deployment_pods {
            Some(pods) => {
                let staying: Vec<&String> = pods
                    .iter()
                    .filter(|(_, pod)| !pod.deleting)
                    .map(|(name, _)| name)
                    .collect();
                let vacancies = (pool.replicas as usize).saturating_sub(staying.len());
                let held = vacancy_holders(obs, &pool.name, &staying, vacancies);
                for name in staying.into_iter().chain(&held).take(room as usize) {
                    let id = MemberId::generated(pool.name.clone(), name.clone());
                    views.push(view_of(id, pods.get(name).cloned()));
                }
            }
            None => {
                for ordinal in 0..pool.replicas.min(room) {
                    let id = MemberId::new(pool.name.clone(), ordinal);
                    views.push(view_of(id, pool.pods.get(&ordinal).cloned()));
                }
            }
        }
    }
    let unknown_failover_targets = forced
        .iter()
        .filter(|pod| !views.iter().any(|view| view.name() == **pod))
        .map(|pod| (*pod).to_owned())
        .collect();
    let asked: u64 = obs
        .pools
        .iter()
        .map(|pool| u64::from(pool_size(pool)))
        .sum();
    let over_limit = (asked > u64::from(MAX_MEMBERS)).then(|| {
        obs.pools
            .iter()
            .map(|pool| {
                let kind = match pool.deployment_pods {
                    Some(_) => "Deployment",
                    None => "StatefulSet",
                };
                (format!("{kind} {}", pool.name), pool_size(pool))
            })
            .collect()
    });
    let cordon = super::cordon::read(obs, &views);
    Roster {
        views,
        next_deadline,
        unknown_failover_targets,
        over_limit,
        cordon,
    }
}

/// The departed pods of Deployment `pool` that keep their place (and their jobs) while the
/// Deployment has fewer pods than `spec.replicas`: at most `vacancies` of the members of the
/// revision in force (its record names each generated member's pool) that are no pod of
/// the pool now, or only a terminating one, in name order.
///
/// This is how a replaced pod's jobs go to its successor and nowhere else: while the
/// ReplicaSet has not replaced it yet, the departed pod holds its place, unavailable, as a
/// StatefulSet member whose pod restarts does (and `failover.after` applies to it the same
/// way); when the successor comes, the place is the successor's in the same pass.
fn vacancy_holders(
    obs: &Observation,
    pool: &str,
    staying: &[&String],
    vacancies: usize,
) -> Vec<String> {
    if vacancies == 0 {
        return Vec::new();
    }
    let Some(record) = obs.history.get(&obs.status.current_revision) else {
        return Vec::new();
    };
    record
        .generated_members
        .iter()
        .filter(|(pod, member_pool)| member_pool.as_str() == pool && !staying.contains(pod))
        .map(|(pod, _)| pod.clone())
        .take(vacancies)
        .collect()
}

/// How many members a pool asks for: a StatefulSet's `spec.replicas`; a Deployment's pods
/// that are not terminating, or `spec.replicas` when more (departed pods hold the places).
fn pool_size(pool: &PoolState) -> u32 {
    match &pool.deployment_pods {
        Some(pods) => {
            let staying = pods.values().filter(|pod| !pod.deleting).count();
            u32::try_from(staying)
                .unwrap_or(u32::MAX)
                .max(pool.replicas)
        }
        None => pool.replicas,
    }
}

/// Pods of pools that are not members but still have a slice (a StatefulSet scaled down,
/// the pod beyond `spec.replicas` not gone yet; a Deployment's pod terminating), by pod
/// name, as views with their Leases: they keep their jobs until they acknowledge the
/// revoke or are gone.
pub(super) fn members_leaving(
    obs: &Observation,
    members: &BTreeMap<String, &MemberView>,
) -> BTreeMap<String, MemberView> {
    let mut leaving = BTreeMap::new();
    for pool in &obs.pools {
        let pods: Vec<(MemberId, &PodState)> = match &pool.deployment_pods {
            Some(pods) => pods
                .iter()
                .map(|(name, pod)| (MemberId::generated(pool.name.clone(), name.clone()), pod))
                .collect(),
            None => pool
                .pods
                .iter()
                .map(|(ordinal, pod)| (MemberId::new(pool.name.clone(), *ordinal), pod))
                .collect(),
        };
        for (id, pod) in pods {
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
