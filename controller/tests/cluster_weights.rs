//! Weighted and dedicated jobs on a cluster: a dedicated job gets a member of its own
//! and the others balance by weight; a restarted controller moves nothing; removing the
//! dedicated job releases its member to the shared jobs.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};

const WAIT: Duration = Duration::from_secs(60);

/// Spec lines: sticky, `stream:000` dedicated (unless `released`), `stream:001` weight 2.
fn settings(released: bool) -> String {
    let mut spec = "  strategy:\n    type: sticky\n  jobSettings:\n".to_owned();
    if !released {
        spec.push_str("    \"stream:000\":\n      dedicated: true\n");
    }
    spec.push_str("    \"stream:001\":\n      weight: 2\n");
    spec
}

/// Waits for `revision` in force and Ready with exactly `jobs` in the slices.
async fn converged(env: &Env, revision: u64, jobs: &[String]) -> BTreeMap<String, Vec<String>> {
    eventually(&format!("revision {revision} in force"), WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.current_revision == revision
            && status.phase.as_deref() == Some("Ready")
            && slices.len() == 3
            && all_jobs(&slices) == jobs)
            .then_some(slices)
    })
    .await
}

/// Weight of a slice: `stream:001` weighs 2, every other job 1.
fn weight(jobs: &[String]) -> usize {
    jobs.iter()
        .map(|key| if key == "stream:001" { 2 } else { 1 })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedicated_job_gets_a_member_of_its_own_until_it_goes_and_a_restart_moves_nothing() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.ready_pool("worker", 3).await;
    let jobs = job_keys(9);
    env.apply(&swarm_yaml("demo", &jobs, &settings(false)))
        .await;
    let first = converged(&env, 1, &jobs).await;
    let (holder, _) = first
        .iter()
        .find(|(_, slice)| slice.contains(&"stream:000".to_owned()))
        .expect("the dedicated job runs");
    let holder = holder.clone();
    assert_eq!(first[&holder], vec!["stream:000".to_owned()], "{first:?}");
    // The other two share weight 2 + 7 = 9: T = 4.5, w_max = 2.
    for (member, slice) in &first {
        if *member != holder {
            assert!((3..=6).contains(&weight(slice)), "{first:?}");
        }
    }

    // A restarted controller has only the cluster to go by: nothing changes.
    controller.kill().await;
    let controller = env.start_controller();
    env.passes_change_nothing("demo", 1, &first).await;

    // The dedicated job goes: its member takes shared jobs again.
    let fewer: Vec<String> = jobs[1..].to_vec();
    env.apply(&swarm_yaml("demo", &fewer, &settings(true)))
        .await;
    let second = converged(&env, 2, &fewer).await;
    assert!(
        weight(&second[&holder]) >= 1 && !second[&holder].contains(&"stream:000".to_owned()),
        "{second:?}"
    );
    controller.stop().await;
}
