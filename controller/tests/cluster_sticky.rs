//! The `sticky` strategy on a cluster: each revision moves exactly the lower bound, and
//! a restarted controller reads the assignment in force back from the cluster (the
//! revision record), so it moves nothing, and its next revision is still minimal.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use shoal_core::{Assignment, JobSet, MemberId, diff};

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};

const WAIT: Duration = Duration::from_secs(60);

fn assignment(slices: &BTreeMap<String, Vec<String>>) -> Assignment {
    Assignment::from_slices(slices.iter().map(|(pod, jobs)| {
        (
            MemberId::from_pod_name("worker", pod).expect("a worker pod"),
            JobSet::parse(jobs.iter().cloned()).expect("valid jobs"),
        )
    }))
    .expect("one owner per job")
}

/// Waits for `revision` in force, Ready, with every job in exactly `members` slices.
async fn in_force(env: &Env, revision: u64, members: usize) -> BTreeMap<String, Vec<String>> {
    eventually(&format!("revision {revision} in force"), WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.current_revision == revision
            && status.phase.as_deref() == Some("Ready")
            && slices.len() == members
            && all_jobs(&slices) == job_keys(27))
        .then_some(slices)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_moves_nothing_and_keeps_moving_exactly_the_lower_bound() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.ready_pool("worker", 3).await;
    env.apply(&swarm_yaml(
        "demo",
        &job_keys(27),
        "  strategy:\n    type: sticky\n",
    ))
    .await;
    let first = in_force(&env, 1, 3).await;
    assert!(first.values().all(|jobs| jobs.len() == 9), "{first:?}");

    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    env.ready_pool("worker", 4).await;
    let second = in_force(&env, 2, 4).await;
    let change = diff(&assignment(&first), &assignment(&second));
    assert_eq!(change.moved.len(), change.lower_bound);
    assert_eq!(change.moved.len(), 6, "the newcomer takes 6 of 27");

    // Restart: a new controller process state, with only the cluster to go by.
    controller.kill().await;
    let controller = env.start_controller();
    // Several passes (resync is 5 s in tests) change nothing.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let status = env.swarm("demo").await.status.expect("status");
    assert_eq!(
        (status.current_revision, status.latest_revision),
        (2, 2),
        "{status:?}"
    );
    assert_eq!(env.slices("demo").await, second);

    // And its next revision is computed from the recorded assignment: still minimal.
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
        .await;
    let third = in_force(&env, 3, 3).await;
    let change = diff(&assignment(&second), &assignment(&third));
    assert_eq!(change.moved.len(), change.lower_bound);
    assert_eq!(change.moved.len(), second["worker-3"].len());
    assert!(third.values().all(|jobs| jobs.len() == 9), "{third:?}");
    controller.stop().await;
}
