//! The members of a Swarm as the plan sees them: pool pods in `0..replicas`,
//! their pods and Leases, how long each has been unavailable, and failover.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use shoal_core::{Member, MemberId};

use super::{FAILOVER_NOW_ANNOTATION, LeaseState, Observation, PodState};
use crate::crd::MemberStatus;

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

/// The most members a Swarm's pools may have in all.
pub const MAX_MEMBERS: u32 = 10_000;

/// The members in `0..replicas` of every pool, and when the next failover deadline falls.
pub(super) struct Roster {
    /// Every member, in pool and ordinal order.
    pub views: Vec<MemberView>,
    /// Time until the next member would be failed over, if one is waiting for it.
    pub next_deadline: Option<Duration>,
    /// Pods named by `failover-now` that are not members.
    pub unknown_failover_targets: Vec<String>,
    /// The pools ask for more than [`MAX_MEMBERS`] members: `(pool, replicas)` of each.
    pub over_limit: Option<Vec<(String, u32)>>,
}

impl Roster {
    /// The members as the core assigns to them (failed-over members own nothing).
    pub fn members(&self) -> Vec<Member> {
        self.views
            .iter()
            .map(|view| {
                Member::new(view.id.pool.clone(), view.id.ordinal).with_available(!view.failed_over)
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
pub(super) fn observe_members(obs: &Observation, failover_after: Option<Duration>) -> Roster {
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
        // `spec.replicas` is input like any other: a typo of a few zeros must not make the
        // controller build millions of members.
        let room = MAX_MEMBERS.saturating_sub(views.len() as u32);
        for ordinal in 0..pool.replicas.min(room) {
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
    let unknown_failover_targets = forced
        .iter()
        .filter(|pod| !views.iter().any(|view| view.name() == **pod))
        .map(|pod| (*pod).to_owned())
        .collect();
    let asked: u64 = obs.pools.iter().map(|pool| u64::from(pool.replicas)).sum();
    let over_limit = (asked > u64::from(MAX_MEMBERS)).then(|| {
        obs.pools
            .iter()
            .map(|pool| (pool.name.clone(), pool.replicas))
            .collect()
    });
    Roster {
        views,
        next_deadline,
        unknown_failover_targets,
        over_limit,
    }
}

/// Pods of pool members beyond `spec.replicas` (the StatefulSet scaled down, the pod not
/// gone yet) that still have a slice, by pod name, as views with their Leases.
pub(super) fn members_leaving(
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
