//! How long one `plan` takes on a scale event (one more member), for
//! 100 members × 10,000 jobs and 500 members × 100,000 jobs.
//!
//! `cargo bench -p shoal-controller --bench plan`

use std::collections::BTreeMap;

use criterion::{Criterion, criterion_group, criterion_main};
use shoal_controller::crd::SwarmSpec;
use shoal_controller::plan::{
    JobSource, Observation, Operation, PodState, PoolState, apply_in_memory, plan,
};

fn pool(replicas: u32) -> PoolState {
    PoolState {
        name: "worker".to_owned(),
        replicas,
        deployment_pods: None,
        pods: (0..replicas)
            .map(|ordinal| {
                let pod = PodState {
                    uid: format!("uid-{ordinal}"),
                    ready: true,
                    deleting: false,
                };
                (ordinal, pod)
            })
            .collect(),
        observed_current: true,
    }
}

/// A Swarm converged on `members` members, then scaled to one more.
fn scaled(members: u32, jobs: usize) -> Observation {
    let spec: SwarmSpec = serde_json::from_value(serde_json::json!({
        "jobs": (0..jobs).map(|i| format!("stream:{i:08}")).collect::<Vec<_>>(),
    }))
    .expect("valid spec");
    let mut obs = Observation {
        swarm: "bench".to_owned(),
        generation: Some(1),
        spec,
        annotations: BTreeMap::new(),
        status: Default::default(),
        pools: vec![pool(members)],
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
        now: "2026-01-01T00:00:00Z".parse().expect("timestamp"),
    };
    for _ in 0..4 {
        let planned = plan(&obs);
        apply_in_memory(&mut obs, &planned);
        obs.status = planned.status;
    }
    obs.pools = vec![pool(members + 1)];
    obs
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan_scale_event");
    group.sample_size(10);
    for (members, jobs) in [(100u32, 10_000usize), (500, 100_000)] {
        let obs = scaled(members, jobs);
        let planned = plan(&obs);
        let writes = planned
            .operations
            .iter()
            .filter(|op| matches!(op, Operation::WriteSlice { .. }))
            .count();
        println!(
            "{members} members x {jobs} jobs: first plan after scale writes {writes} slices (revoke phase), moves {} jobs",
            planned.jobs_moved
        );
        group.bench_function(format!("{members}x{jobs}"), |b| b.iter(|| plan(&obs)));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
