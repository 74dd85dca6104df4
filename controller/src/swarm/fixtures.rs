//! Fixtures of the Swarm's unit tests, the plugin's and the benchmarks: one in-memory
//! Swarm observation, built in one place so that a field added to
//! [`Observation`] is filled in once.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::api::swarm::{SwarmSpec, SwarmStatus};
use crate::observed::{PodState, PoolState};
use crate::swarm::decide::{JobSource, Observation};

/// The time every fixture observation is made at: 2026-01-01T00:00:00Z.
pub fn epoch() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A StatefulSet pool `name` of `replicas` Ready pods (uid `<pod>-uid`).
pub fn pool(name: &str, replicas: u32) -> PoolState {
    PoolState {
        name: name.to_owned(),
        replicas,
        deployment_pods: None,
        pods: (0..replicas)
            .map(|ordinal| {
                let pod = PodState {
                    uid: format!("{name}-{ordinal}-uid"),
                    ready: true,
                    deleting: false,
                    ip: None,
                    node: None,
                };
                (ordinal, pod)
            })
            .collect(),
        observed_current: true,
    }
}

/// The keys `stream:<i>` for `i` in `0..count`, zero-padded to `width` digits.
pub fn stream_keys(count: usize, width: usize) -> Vec<String> {
    (0..count).map(|i| format!("stream:{i:0width$}")).collect()
}

/// A spec with these inline jobs and every other field at the default the API server
/// fills in.
pub fn spec_with_jobs(jobs: Vec<String>) -> SwarmSpec {
    serde_json::from_value(serde_json::json!({ "jobs": jobs }))
        .expect("a spec of inline job keys deserializes")
}

/// Swarm `swarm` (generation 1, never reconciled) with `spec` over `pools`, observed at
/// [`epoch`] with nothing else in the cluster.
pub fn observation(swarm: &str, spec: SwarmSpec, pools: Vec<PoolState>) -> Observation {
    Observation {
        swarm: swarm.to_owned(),
        generation: Some(1),
        spec,
        annotations: BTreeMap::new(),
        status: SwarmStatus::default(),
        pools,
        job_source: JobSource::NotReferenced,
        slices: BTreeMap::new(),
        leases: BTreeMap::new(),
        history: BTreeMap::new(),
        damaged_history: BTreeMap::new(),
        index: None,
        owned_config_maps: BTreeMap::new(),
        foreign_config_maps: BTreeMap::new(),
        edited_config_maps: BTreeMap::new(),
        blocked_evictions: BTreeMap::new(),
        plans: Ok(Vec::new()),
        approved_by_policy: false,
        parsed: crate::swarm::decide::Parsed::default(),
        now: epoch(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_epoch_is_the_first_of_january_2026() {
        assert_eq!(epoch().to_string(), "2026-01-01T00:00:00Z");
    }

    #[test]
    fn a_fixture_pool_has_its_replicas_ready() {
        let pool = pool("worker", 3);
        let members: Vec<String> = pool
            .member_pods()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(members, ["worker-0", "worker-1", "worker-2"]);
        assert!(pool.pods.values().all(|pod| pod.ready && !pod.deleting));
    }
}
