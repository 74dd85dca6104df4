//! The `sticky` strategy on a cluster: each revision moves exactly the lower bound, and
//! a restarted controller reads the assignment in force back from the cluster (the
//! revision record), so it moves nothing, and its next revision is still minimal.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use shoal_core::{Assignment, JobSet, MemberId, diff};

use shoal_controller::api::swarm::StrategyType;

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
    env.passes_change_nothing("demo", 2, &second).await;

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

/// A `(jobs, members)` pair for which `bounded` leaves a member under `floor(k/n)`, so
/// that a switch to `sticky` would move jobs.
fn bounded_leaves_a_member_short() -> (usize, u32) {
    use shoal_core::{Member, Strategy, assign};
    for (jobs, members) in [(100, 7), (50, 7), (40, 6), (60, 7), (30, 4)] {
        let keys = JobSet::parse(job_keys(jobs)).expect("valid jobs");
        let pods: Vec<Member> = (0..members).map(|i| Member::new("worker", i)).collect();
        let bounded = assign(&keys, &pods, &Strategy::Bounded { epsilon: 0.0 }).expect("assigned");
        if bounded.load_range().0 < jobs / members as usize {
            return (jobs, members);
        }
    }
    panic!("no candidate leaves a member short under bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swarm_created_under_the_bounded_default_keeps_it_after_the_upgrade_and_a_new_one_is_sticky()
 {
    let env = Env::start().await;
    // The Swarm CRD as released before `sticky` was the default: the same schema with
    // `bounded` as the strategy default. The API server stores the default it fills in.
    let current = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/crd.yaml"
    ))
    .expect("the CRD manifest");
    let released = current
        .replace(
            "                default:\n                  type: sticky\n",
            "                default:\n                  type: bounded\n",
        )
        .replace("default: sticky", "default: bounded");
    assert_ne!(
        released, current,
        "the strategy defaults were found and replaced"
    );
    let released_path =
        std::env::temp_dir().join(format!("swarm-crd-bounded-{}.yaml", std::process::id()));
    std::fs::write(&released_path, &released).expect("a temporary CRD file");
    env.kubectl(&["apply", "-f", released_path.to_str().expect("a UTF-8 path")])
        .await;
    let (jobs, members) = bounded_leaves_a_member_short();
    // A CRD update takes effect a moment later on a real server: create until the
    // stored Swarm carries the released default.
    eventually(
        "a Swarm stored under the released default",
        WAIT,
        || async {
            env.apply(&swarm_yaml("demo", &job_keys(jobs), "")).await;
            let stored = env.swarm("demo").await.spec.strategy.type_;
            if stored == StrategyType::Bounded {
                return Some(());
            }
            env.kubectl(&["delete", "swarm", "demo", "--wait=true"])
                .await;
            None
        },
    )
    .await;
    let controller = env.start_controller();
    env.pool("worker", "demo", members).await;
    env.ready_pool("worker", members).await;
    let before = eventually("revision 1 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.current_revision == 1 && status.phase.as_deref() == Some("Ready")).then_some(slices)
    })
    .await;

    // The upgrade: the current CRD, whose default is `sticky`.
    env.kubectl(&[
        "apply",
        "-f",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crd.yaml"),
    ])
    .await;
    env.passes_change_nothing("demo", 1, &before).await;
    assert_eq!(
        env.swarm("demo").await.spec.strategy.type_,
        StrategyType::Bounded
    );

    // A Swarm created now gets `sticky`.
    eventually(
        "a new Swarm stored with the sticky default",
        WAIT,
        || async {
            env.apply(&swarm_yaml("fresh", &job_keys(3), "")).await;
            (env.swarm("fresh").await.spec.strategy.type_ == StrategyType::Sticky).then_some(())
        },
    )
    .await;
    let _ = std::fs::remove_file(&released_path);
    controller.stop().await;
}
