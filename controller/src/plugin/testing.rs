//! In-memory fixtures for the plugin's unit tests: observations, and a
//! convergence loop that applies each plan's writes the way the I/O layer does.

use std::collections::BTreeMap;

use shoal_core::format::parse_slice;

use crate::crd::{SwarmSpec, SwarmStatus};
use crate::plan::{self, JobSource, Observation, PodState, PoolState};

/// A pool of `replicas` Ready pods.
pub(crate) fn pool(name: &str, replicas: u32) -> PoolState {
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
                };
                (ordinal, pod)
            })
            .collect(),
        observed_current: true,
    }
}

/// A Swarm `demo` with `jobs` inline jobs over `pools`, never reconciled.
pub(crate) fn observation(jobs: usize, pools: Vec<PoolState>) -> Observation {
    let spec: SwarmSpec = serde_json::from_value(serde_json::json!({
        "jobs": (0..jobs).map(|i| format!("stream:{i:03}")).collect::<Vec<_>>(),
    }))
    .unwrap();
    Observation {
        swarm: "demo".to_owned(),
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
        now: "2026-01-01T00:00:00Z".parse().unwrap(),
    }
}

/// Plans and applies the plan's writes in memory until nothing is left to do.
pub(crate) fn converge(obs: &mut Observation) {
    for _ in 0..20 {
        let next = plan::plan(obs);
        obs.status = next.status.clone();
        if next.operations.is_empty() {
            return;
        }
        plan::apply_in_memory(obs, &next);
    }
    panic!("no convergence in 20 plans");
}

/// Owner of every job, from the slices.
pub(crate) fn owners(obs: &Observation) -> BTreeMap<String, String> {
    obs.slices
        .iter()
        .flat_map(|(member, object)| {
            let slice = parse_slice(object.text.as_deref().unwrap()).unwrap();
            let member = member.clone();
            slice
                .jobs
                .iter()
                .map(move |key| (key.as_str().to_owned(), member.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}
