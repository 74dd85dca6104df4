//! In-memory fixtures for the plugin's unit tests: observations, and a
//! convergence loop that applies each plan's writes the way the I/O layer does.

use std::collections::BTreeMap;

use shoal_core::format::parse_slice;

use crate::swarm::decide::{self, Observation, PoolState};
use crate::swarm::fixtures;

pub(crate) use crate::swarm::fixtures::pool;

/// A Swarm `demo` with `jobs` inline jobs over `pools`, never reconciled.
pub(crate) fn observation(jobs: usize, pools: Vec<PoolState>) -> Observation {
    let spec = fixtures::spec_with_jobs(fixtures::stream_keys(jobs, 3));
    fixtures::observation("demo", spec, pools)
}

/// Plans and applies the plan's writes in memory until nothing is left to do.
pub(crate) fn converge(obs: &mut Observation) {
    for _ in 0..20 {
        let next = decide::decide(obs);
        obs.status = next.status.clone();
        if next.operations.is_empty() {
            return;
        }
        decide::apply_in_memory(obs, &next);
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
