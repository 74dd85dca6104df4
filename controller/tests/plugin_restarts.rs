//! Under `reload: Restart`, what `kubectl shoal diff` says will restart is what
//! restarts: for a new Swarm, a scale up, a job-list edit and a scale down,
//! each pod's restarts (new uids seen) equal the preview's count, and the
//! pending summary's `restartsNeeded` is their sum.

mod common;
mod plugin_common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use shoal_controller::plugin::preview::DiffReport;

use common::{Env, eventually, job_keys, swarm_yaml};
use plugin_common::shoal_json;

const WAIT: Duration = Duration::from_secs(60);
const SPEC: &str =
    "  reload: Restart\n  rollout:\n    maxUnavailable: 2\n  approval:\n    policy: Manual\n";

/// Every uid each pod name had, from a watch started now.
fn uid_recorder(env: &Env) -> Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> {
    let seen: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> = Arc::default();
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let sink = seen.clone();
    tokio::spawn(async move {
        let mut pods = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(pod)) = pods.next().await {
            if let Some(uid) = pod.uid() {
                sink.lock()
                    .unwrap()
                    .entry(pod.name_any())
                    .or_default()
                    .insert(uid);
            }
        }
    });
    seen
}

/// Previews the pending revision, approves it, waits until it is in force, and checks
/// that every pod restarted exactly as previewed.
async fn approve_and_compare(env: &Env, step: &str, created: &[&str]) {
    let pending = eventually(&format!("{step}: a pending revision"), WAIT, || async {
        env.swarm("demo").await.status?.pending_revision
    })
    .await;
    let preview: DiffReport = shoal_json(env, &["diff", "demo"]).await;
    assert_eq!(preview.revision, Some(pending.revision), "{step}");
    let previewed: BTreeMap<String, u32> = preview
        .restarts
        .iter()
        .map(|restart| (restart.pod.clone(), restart.times))
        .collect();
    assert_eq!(
        u64::from(previewed.values().sum::<u32>()),
        pending.summary.restarts_needed,
        "{step}: the pending summary and the preview disagree"
    );
    let uids_before = env.pod_uids().await;
    let seen = uid_recorder(env);
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.approve_pending("demo").await;
    env.in_force("demo", pending.revision, WAIT).await;
    // Nothing more happens after convergence.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = seen.lock().unwrap().clone();
    let mut done = BTreeMap::new();
    for (pod, uids) in &seen {
        let restarts = match uids_before.get(pod) {
            Some(before) => uids.iter().filter(|uid| *uid != before).count(),
            // A pod the scale up created: its first uid is its creation.
            None if created.contains(&pod.as_str()) => uids.len().saturating_sub(1),
            None => uids.len(),
        };
        if restarts > 0 {
            done.insert(pod.clone(), restarts as u32);
        }
    }
    if done != previewed {
        eprintln!("PREVIEW {:#?}", preview.members);
        eprintln!("EVENTS {}", env.event_messages().await);
    }
    assert_eq!(
        done, previewed,
        "{step}: restarts done (left) vs previewed (right)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_and_the_summary_count_exactly_the_restarts_done() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.ready_pool("worker", 3).await;

    env.apply(&swarm_yaml("demo", &job_keys(27), SPEC)).await;
    approve_and_compare(&env, "a new Swarm", &[]).await;

    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    env.ready_pool("worker", 4).await;
    approve_and_compare(&env, "scale 3 -> 4", &["worker-3"]).await;

    env.apply(&swarm_yaml("demo", &job_keys(30), SPEC)).await;
    approve_and_compare(&env, "3 jobs added", &[]).await;

    env.kubectl(&["scale", "statefulset", "worker", "--replicas=3"])
        .await;
    approve_and_compare(&env, "scale 4 -> 3", &[]).await;
    controller.stop().await;
    env.finish().await;
}
