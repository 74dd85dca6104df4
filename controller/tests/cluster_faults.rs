//! API failures and dropped watches: the controller reports the failing step,
//! retries, and converges. Emulator only: these tests inject faults into the
//! API server (skipped with a printed reason on `SHOAL_TEST_KUBECONFIG`).

use crate::common;

use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_configmap_writes_are_reported_and_retried_until_the_revision_is_in_force() {
    let Some(env) = Env::start_emulated("injects API failures").await else {
        return;
    };
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(10), "")).await;
    eventually("revision 1 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.phase.as_deref() == Some("Ready")).then_some(())
    })
    .await;
    // A new revision's history ConfigMap is created (the Swarm does not own one of that
    // name yet), so the injected failures hit its creation.
    env.faults()
        .fail_next(3, Some("create"), Some("configmaps"), 500);
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
        .await;
    eventually("revision 2 in force despite the failures", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.current_revision == 2
            && status.phase.as_deref() == Some("Ready")
            && slices.len() == 3
            && all_jobs(&slices) == job_keys(10))
        .then_some(())
    })
    .await;
    let (ok, events) = env.kubectl_status(&["get", "events", "-o", "yaml"]).await;
    assert!(
        ok && events.contains("WriteRevisionFailed"),
        "no WriteRevisionFailed Event:\n{events}"
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_do_not_stop_the_controller_from_seeing_changes() {
    let Some(env) = Env::start_emulated("drops every watch of the API server").await else {
        return;
    };
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(10), "")).await;
    eventually("revision 1 in force", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == job_keys(10)).then_some(())
    })
    .await;
    env.faults().drop_all_watches();
    env.apply(&swarm_yaml("demo", &job_keys(12), "")).await;
    eventually(
        "the edit applied after the watches dropped",
        WAIT,
        || async { (all_jobs(&env.slices("demo").await) == job_keys(12)).then_some(()) },
    )
    .await;
    controller.stop().await;
    env.finish().await;
}
