//! Revoke then grant on member Lease acknowledgements: a job moves to its new
//! owner only after the old owner acknowledged giving it up.

use crate::common;

use std::time::Duration;

use common::{Env, acknowledge, all_jobs, eventually, job_keys, slice_hash, swarm_yaml};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_granted_only_after_their_old_owners_acknowledged_the_revoke() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(30), "")).await;
    eventually("revision 1 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.phase.as_deref() == Some("Ready") && env.ready_pods().await == 3).then_some(())
    })
    .await;
    for pod in ["worker-0", "worker-1", "worker-2"] {
        let (revision, hash) = slice_hash(&env, pod).await;
        acknowledge(&env, pod, revision, &hash).await;
    }
    let before = env.slices("demo").await;

    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    eventually("the revokes written", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        let revoked = ["worker-0", "worker-1", "worker-2"]
            .iter()
            .any(|pod| slices.get(*pod) != before.get(*pod));
        (status.current_revision == 2 && revoked).then_some(())
    })
    .await;
    // Without acknowledgements nothing is granted, however long we wait.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let slices = env.slices("demo").await;
    assert!(
        slices.get("worker-3").is_none_or(Vec::is_empty),
        "worker-3 was granted jobs before the revokes were acknowledged: {slices:?}"
    );
    assert!(
        all_jobs(&slices).len() < 30,
        "the revoked jobs must be unowned meanwhile"
    );
    assert_eq!(
        env.swarm("demo").await.status.unwrap().phase.as_deref(),
        Some("Progressing")
    );

    for pod in ["worker-0", "worker-1", "worker-2"] {
        let (revision, hash) = slice_hash(&env, pod).await;
        acknowledge(&env, pod, revision, &hash).await;
    }
    let status = eventually("worker-3 granted once acknowledged", WAIT, || async {
        let slices = env.slices("demo").await;
        let status = env.swarm("demo").await.status?;
        (all_jobs(&slices) == job_keys(30) && status.phase.as_deref() == Some("Ready"))
            .then_some(status)
    })
    .await;
    let acked: Vec<Option<u64>> = status.members.iter().map(|m| m.acked_revision).collect();
    assert!(acked[..3].iter().all(Option::is_some), "{acked:?}");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_time_moved_back_by_hand_does_not_release_a_live_members_jobs() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(20), "")).await;
    env.in_force("demo", 1, WAIT).await;
    for pod in ["worker-0", "worker-1"] {
        let (revision, hash) = slice_hash(&env, pod).await;
        acknowledge(&env, pod, revision, &hash).await;
    }
    let before = env.slices("demo").await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
        .await;
    eventually("both revokes written", WAIT, || async {
        let slices = env.slices("demo").await;
        (slices.get("worker-0") != before.get("worker-0")
            && slices.get("worker-1") != before.get("worker-1"))
        .then_some(())
    })
    .await;
    // worker-0 lets go; worker-1 still runs its jobs (no acknowledgement). Someone moves
    // worker-1's renewTime an hour back, as if its sidecar had died.
    let (revision, hash) = slice_hash(&env, "worker-0").await;
    acknowledge(&env, "worker-0", revision, &hash).await;
    let an_hour_ago = (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1))
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    env.kubectl(&[
        "patch",
        "lease",
        "worker-1-member",
        "--type",
        "merge",
        "-p",
        &format!(r#"{{"spec":{{"renewTime":"{an_hour_ago}"}}}}"#),
    ])
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let slices = env.slices("demo").await;
    let held_by_1 = &slices["worker-1"];
    let moved_away: Vec<&String> = before["worker-1"]
        .iter()
        .filter(|job| !held_by_1.contains(job))
        .collect();
    assert!(!moved_away.is_empty());
    for job in moved_away {
        assert!(
            !slices
                .get("worker-2")
                .is_some_and(|jobs| jobs.contains(job)),
            "{job} granted to worker-2 while worker-1 may still run it"
        );
    }
    let events = eventually("a LeaseNotTrusted Warning", WAIT, || async {
        let events = env.event_messages().await;
        events.contains("LeaseNotTrusted").then_some(events)
    })
    .await;
    assert!(
        events.contains("Lease worker-1-member says it was renewed"),
        "{events}"
    );
    // The honest way still works: worker-1 acknowledges and the grant follows.
    let (revision, hash) = slice_hash(&env, "worker-1").await;
    acknowledge(&env, "worker-1", revision, &hash).await;
    eventually("granted once worker-1 acknowledged", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == job_keys(20)).then_some(())
    })
    .await;
    controller.stop().await;
    env.finish().await;
}
