//! How long one Swarm `decide` takes on a scale event (one more member), for
//! 100 members × 10,000 jobs and 500 members × 100,000 jobs.
//!
//! `cargo bench -p shoal-controller --bench decide`

use criterion::{Criterion, criterion_group, criterion_main};
use shoal_controller::swarm::decide::{Observation, Operation, apply_in_memory, decide};
use shoal_controller::swarm::fixtures;

/// A Swarm converged on `members` members, then scaled to one more.
fn scaled(members: u32, jobs: usize) -> Observation {
    let spec = fixtures::spec_with_jobs(fixtures::stream_keys(jobs, 8));
    let mut obs = fixtures::observation("bench", spec, vec![fixtures::pool("worker", members)]);
    for _ in 0..4 {
        let planned = decide(&obs);
        apply_in_memory(&mut obs, &planned);
        obs.status = planned.status;
    }
    obs.pools = vec![fixtures::pool("worker", members + 1)];
    obs
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide_scale_event");
    group.sample_size(10);
    for (members, jobs) in [(100u32, 10_000usize), (500, 100_000)] {
        let obs = scaled(members, jobs);
        let planned = decide(&obs);
        let writes = planned
            .operations
            .iter()
            .filter(|op| matches!(op, Operation::WriteSlice { .. }))
            .count();
        println!(
            "{members} members x {jobs} jobs: first decision after scale writes {writes} slices (revoke phase), moves {} jobs",
            planned.jobs_moved
        );
        group.bench_function(format!("{members}x{jobs}"), |b| b.iter(|| decide(&obs)));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
