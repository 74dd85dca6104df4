//! The writes of one pass go out together, at most `--max-concurrent-writes` at once,
//! and stay correct when the API server throttles (429 with `Retry-After`, retried by the
//! client) or fails (500, the pass fails and is retried): no job is ever in two slices,
//! and the Swarm converges. Emulator only: these tests set latency and inject faults.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shoal_controller::Settings;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml, two_owner_sightings};

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slice_writes_go_out_together_but_never_more_than_max_concurrent_writes_at_once() {
    let Some(env) = Env::start_emulated("sets the API server's latency").await else {
        return;
    };
    let _controller = env.start_controller_with(Settings {
        namespace: Some(env.namespace.clone()),
        resync: Duration::from_secs(5),
        max_concurrent_writes: 4,
        ..Settings::default()
    });
    env.pool("worker", "demo", 10).await;
    env.ready_pool("worker", 10).await;
    // Every request waits a moment: writes sent together are held together.
    env.faults().set_latency(Duration::from_millis(100));
    env.apply(&swarm_yaml("demo", &job_keys(100), "")).await;
    env.in_force("demo", 1, WAIT).await;
    assert_eq!(env.slices("demo").await.len(), 10);
    let peak = env.faults().peak_writes_in_flight("configmaps");
    assert!(
        (2..=4).contains(&peak),
        "{peak} ConfigMap writes in flight at once, wanted 2 to 4"
    );
    env.finish().await;
}

/// Arms 429s (retried by the client after `Retry-After`) and 500s (the pass fails) for
/// the next ConfigMap patches and creates.
fn throttle_and_fail_configmap_writes(env: &Env) {
    let faults = env.faults();
    faults.fail_next(2, Some("patch"), Some("configmaps"), 429);
    faults.fail_next(2, Some("patch"), Some("configmaps"), 500);
    faults.fail_next(2, Some("create"), Some("configmaps"), 500);
}

/// Waits until the Swarm is Ready with exactly `members` slices holding every job once.
async fn converged(env: &Env, members: usize) {
    eventually(&format!("every job on {members} members"), WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.phase.as_deref() == Some("Ready")
            && slices.len() == members
            && all_jobs(&slices) == job_keys(60))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_while_the_api_server_throttles_and_fails_writes_never_gives_a_job_two_owners() {
    let Some(env) = Env::start_emulated("injects 429 and 500 answers").await else {
        return;
    };
    let _controller = env.start_controller();
    env.pool("worker", "demo", 4).await;
    env.ready_pool("worker", 4).await;
    env.apply(&swarm_yaml("demo", &job_keys(60), "  reload: HotReload\n"))
        .await;
    converged(&env, 4).await;
    let stop = AtomicBool::new(false);
    let changes = async {
        throttle_and_fail_configmap_writes(&env);
        env.kubectl(&["scale", "statefulset", "worker", "--replicas=7"])
            .await;
        converged(&env, 7).await;
        assert_eq!(env.faults().unserved_failures(), 0, "every fault was met");
        throttle_and_fail_configmap_writes(&env);
        env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
            .await;
        converged(&env, 3).await;
        stop.store(true, Ordering::Relaxed);
    };
    let (sightings, ()) = tokio::join!(two_owner_sightings(&env, "demo", &stop), changes);
    assert!(sightings.is_empty(), "a job had two owners: {sightings:?}");
    let events = env.events().await;
    assert!(
        events.contains("WriteSliceFailed"),
        "no failed slice write reported:\n{events}"
    );
    env.finish().await;
}
