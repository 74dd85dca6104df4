//! `kubectl shoal cordon|drain|uncordon <member>` end to end: the real plugin against
//! the emulated cluster with the controller in-process.

use crate::common;
use crate::plugin_common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};
use plugin_common::{shoal, shoal_ok, shoal_refused};

const WAIT: Duration = Duration::from_secs(30);
const STICKY_MANUAL: &str = "  strategy:\n    type: sticky\n  approval:\n    policy: Manual\n";

async fn state_of(env: &Env, member: &str) -> Option<String> {
    env.swarm("demo")
        .await
        .status?
        .members
        .into_iter()
        .find(|status| status.name == member)?
        .state
}

async fn wait_state(env: &Env, member: &str, want: Option<&str>) {
    eventually(&format!("{member} state {want:?}"), WAIT, || async {
        (state_of(env, member).await.as_deref() == want).then_some(())
    })
    .await;
}

async fn approve_next(env: &Env, revision: u64) {
    eventually(&format!("revision {revision} pending"), WAIT, || async {
        let pending = env.swarm("demo").await.status?.pending_revision?;
        (pending.revision == revision).then_some(())
    })
    .await;
    env.approve_pending("demo").await;
    env.in_force("demo", revision, WAIT).await;
}

fn slice<'a>(slices: &'a BTreeMap<String, Vec<String>>, member: &str) -> &'a [String] {
    slices.get(member).map_or(&[], Vec::as_slice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_keeps_work_drain_moves_only_its_jobs_through_the_gate_and_uncordon_restores() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(30), STICKY_MANUAL))
        .await;
    approve_next(&env, 1).await;
    let before = env.slices("demo").await;

    // A dry run writes nothing and shows the patch of spec.cordon alone.
    let dry = shoal_ok(&env, &["cordon", "pod/worker-1", "--dry-run=client"]).await;
    assert!(dry.contains("\"cordon\""), "{dry}");
    assert!(env.swarm("demo").await.spec.cordon.is_empty());

    // Cordon: no revision, no slice written.
    let out = shoal_ok(&env, &["cordon", "worker-1", "--reason", "disk swap"]).await;
    assert!(
        out.contains("member worker-1 of Swarm demo: Cordoned"),
        "{out}"
    );
    wait_state(&env, "worker-1", Some("Cordoned")).await;
    env.passes_change_nothing("demo", 1, &before).await;
    let wide = env.kubectl(&["get", "swarm", "demo", "-o", "wide"]).await;
    assert!(wide.contains("worker-1 Cordoned"), "{wide}");
    let status = shoal_ok(&env, &["status", "demo"]).await;
    assert!(status.contains("Cordoned"), "{status}");

    // Jobs added land elsewhere; a later `kubectl apply` keeps the cordon.
    env.apply(&swarm_yaml("demo", &job_keys(45), STICKY_MANUAL))
        .await;
    approve_next(&env, 2).await;
    let grown = env.slices("demo").await;
    assert_eq!(slice(&grown, "worker-1"), slice(&before, "worker-1"));
    assert_eq!(all_jobs(&grown), job_keys(45));

    // Drain: a revision moving exactly its jobs waits for approval; nothing moves before.
    shoal_ok(&env, &["drain", "worker-1"]).await;
    let pending = eventually("revision 3 pending", WAIT, || async {
        let pending = env.swarm("demo").await.status?.pending_revision?;
        (pending.revision == 3).then_some(pending)
    })
    .await;
    assert_eq!(
        pending.summary.jobs_moved,
        slice(&grown, "worker-1").len() as u64
    );
    wait_state(&env, "worker-1", Some("Draining")).await;
    assert_eq!(
        env.slices("demo").await,
        grown,
        "nothing moves before approval"
    );
    approve_next(&env, 3).await;
    let drained = env.slices("demo").await;
    assert!(slice(&drained, "worker-1").is_empty());
    for member in ["worker-0", "worker-2"] {
        let now = slice(&drained, member);
        assert!(
            slice(&grown, member).iter().all(|key| now.contains(key)),
            "{member} lost a job it held"
        );
    }
    assert_eq!(all_jobs(&drained), job_keys(45));
    wait_state(&env, "worker-1", Some("Drained")).await;

    // The pod deleted and recreated stays drained.
    let uid = env.pod_uids().await["worker-1"].clone();
    env.kubectl(&["delete", "pod", "worker-1", "--wait=false"])
        .await;
    eventually(
        "worker-1 recreated and Ready",
        Duration::from_secs(60),
        || async {
            let pods = env.ready_pool("worker", 3).await;
            pods.get("worker-1").filter(|now| **now != uid).map(|_| ())
        },
    )
    .await;
    env.passes_change_nothing("demo", 3, &drained).await;
    assert_eq!(state_of(&env, "worker-1").await.as_deref(), Some("Drained"));
    let events = env.events().await;
    for reason in ["MemberCordoned", "MemberDraining", "MemberDrained"] {
        assert!(events.contains(reason), "{reason} in {events}");
    }

    // Uncordon: a candidate again; sticky's balance brings jobs back, through the gate.
    shoal_ok(&env, &["uncordon", "worker-1"]).await;
    wait_state(&env, "worker-1", None).await;
    approve_next(&env, 4).await;
    assert_eq!(slice(&env.slices("demo").await, "worker-1").len(), 15);
    let wide = env.kubectl(&["get", "swarm", "demo", "-o", "wide"]).await;
    assert!(!wide.contains("Drained"), "{wide}");
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_no_swarm_lists_needs_swarm_and_is_then_kept_and_reported() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(10), "")).await;
    env.in_force("demo", 1, WAIT).await;

    shoal_refused(&env, &["cordon", "worker-7"], "give its Swarm with --swarm").await;
    shoal_refused(&env, &["drain", "deployment/web"], "is not a pod").await;
    let run = shoal(&env, &["cordon", "worker-7", "--swarm", "demo"]).await;
    assert!(run.success, "{}", run.stderr);
    let reported = eventually("the Cordon condition names worker-7", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let condition = status
            .conditions
            .into_iter()
            .find(|condition| condition.type_ == "Cordon")?;
        (condition.reason == "NotAMember").then_some(condition.message)
    })
    .await;
    assert!(reported.contains("worker-7"), "{reported}");
    // Uncordoning the name finds its Swarm from spec.cordon alone.
    shoal_ok(&env, &["uncordon", "worker-7"]).await;
    assert!(env.swarm("demo").await.spec.cordon.is_empty());
    controller.stop().await;
    env.finish().await;
}
