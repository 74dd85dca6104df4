//! Restart policy: exactly the affected pods are evicted, once each, even across a
//! controller crash, and a PodDisruptionBudget holds an eviction back. A restart
//! is the real sequence: eviction, the StatefulSet controller recreates the pod
//! (a new uid), the kubelet reports it Ready.

use crate::common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};

const WAIT: Duration = Duration::from_secs(60);

/// A PodDisruptionBudget over the pool `worker` that allows no disruption.
const BLOCKING_PDB: &str = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: worker\nspec:\n  maxUnavailable: 0\n  selector:\n    matchLabels:\n      app: worker\n";

/// Relaxes [`BLOCKING_PDB`] (one pod may be down) without deleting it.
async fn relax_pdb(env: &Env) {
    env.kubectl(&[
        "patch",
        "pdb",
        "worker",
        "--type=merge",
        "-p",
        r#"{"spec":{"maxUnavailable":1}}"#,
    ])
    .await;
}

/// Waits for Swarm demo's Progressing condition to report a blocked eviction; its message.
async fn eviction_blocked(env: &Env) -> String {
    eventually("the refusal in the Progressing condition", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let progressing = status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Progressing" && c.reason == "EvictionBlocked")?;
        Some(progressing.message)
    })
    .await
}

async fn scale_and_count_restarts(env: &Env, kill_midway: bool) {
    let restart = "  reload: Restart\n  rollout:\n    maxUnavailable: 1\n";
    let mut controller = env.start_controller();
    env.pool("worker", "demo", 3).await;
    env.ready_pool("worker", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(30), restart)).await;
    eventually("revision 1 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.current_revision == 1 && status.phase.as_deref() == Some("Ready")).then_some(())
    })
    .await;
    let before = env.slices("demo").await;
    let seen = common::record_pod_uids(env);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let uids_before = env.pod_uids().await;

    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    if kill_midway {
        // Kill the controller as soon as the first eviction happened.
        eventually("a first restart", WAIT, || async {
            let seen = seen.lock().unwrap();
            seen.values().any(|uids| uids.len() > 1).then_some(())
        })
        .await;
        controller.kill().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        controller = env.start_controller();
    }
    let after = eventually("revision 2 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.current_revision == 2
            && status.phase.as_deref() == Some("Ready")
            && all_jobs(&slices) == job_keys(30))
        .then_some(slices)
    })
    .await;
    let changed: BTreeSet<String> = after
        .iter()
        .filter(|(member, jobs)| before.get(*member) != Some(*jobs))
        .map(|(member, _)| member.clone())
        .collect();
    assert!(
        changed.len() >= 2,
        "scaling 3 -> 4 changed too few slices: {changed:?}"
    );
    let seen = seen.lock().unwrap().clone();
    for (pod, uid) in &uids_before {
        let uids = seen.get(pod).cloned().unwrap_or_default();
        let restarts = uids.iter().filter(|seen_uid| *seen_uid != uid).count();
        if changed.contains(pod) {
            assert_eq!(
                restarts, 1,
                "{pod} (slice changed) restarted {restarts} times: {uids:?}"
            );
        } else {
            assert_eq!(restarts, 0, "{pod} (slice unchanged) was restarted");
        }
    }
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policy_restarts_exactly_the_pods_whose_slice_changed() {
    let env = Env::start().await;
    scale_and_count_restarts(&env, false).await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_rollout_resumes_without_repeating_a_restart() {
    let env = Env::start().await;
    scale_and_count_restarts(&env, true).await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_disruption_budget_holds_back_the_eviction() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    env.ready_pool("worker", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(10), "  reload: Restart\n"))
        .await;
    eventually("revision 1 in force", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.current_revision == 1 && status.phase.as_deref() == Some("Ready")).then_some(())
    })
    .await;
    env.apply(BLOCKING_PDB).await;
    let uids = env.pod_uids().await;
    let seen = common::record_pod_uids(&env);
    env.apply(&swarm_yaml("demo", &job_keys(11), "  reload: Restart\n"))
        .await;
    eventually("revision 2 written", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        (status.current_revision == 2).then_some(())
    })
    .await;
    // The refusal is visible while it lasts: the condition names the pod, and a Warning
    // names the pod and the budget.
    let message = eviction_blocked(&env).await;
    let blocked = message
        .split("pod ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the condition names the pod")
        .to_owned();
    assert!(
        uids.contains_key(&blocked),
        "{blocked} is no pod: {message}"
    );
    assert!(
        message.contains(&format!("pod {blocked} waits to restart"))
            && message.contains("its eviction was refused")
            && message.contains("disruption budget worker"),
        "{message}"
    );
    let events = eventually("an EvictionBlocked Warning", WAIT, || async {
        let events = env.event_messages().await;
        events.contains("EvictionBlocked").then_some(events)
    })
    .await;
    let warning = events
        .lines()
        .find(|line| line.starts_with("EvictionBlocked:"))
        .expect("the Warning");
    assert!(
        warning.contains(&format!(
            "pod {blocked} waits to restart with its new slice"
        )) && warning.contains("disruption budget worker"),
        "{warning}"
    );
    // Blocked across several passes (the controller looks again every 2s): nothing is
    // deleted around the budget, and the refusal stays reported.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            env.pod_uids().await,
            uids,
            "a pod was evicted (or deleted) despite the PDB"
        );
        let status = env.swarm("demo").await.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Progressing"));
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == "Progressing" && c.message.contains(&blocked)),
            "{:?}",
            status.conditions
        );
    }
    assert!(
        seen.lock().unwrap().values().all(|uids| uids.len() == 1),
        "a pod was replaced while the budget refused: {:?}",
        seen.lock().unwrap()
    );
    // The budget is relaxed (not deleted): the rollout finishes.
    relax_pdb(&env).await;
    let slices = eventually("the rollout finished once the PDB allows", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.phase.as_deref() == Some("Ready") && all_jobs(&slices) == job_keys(11))
            .then_some(slices)
    })
    .await;
    assert_eq!(all_jobs(&slices), job_keys(11));
    let now = env.pod_uids().await;
    assert_ne!(
        now.get(&blocked),
        uids.get(&blocked),
        "{blocked} was never restarted"
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_scaled_to_a_billion_replicas_keeps_the_revision_in_force() {
    let env = Env::start().await;
    let controller = env.start_controller();
    // Gated pods: the StatefulSet creates the next pod only once the last is Ready, so a
    // scale to a billion creates one pod that stays unready.
    env.statefulset("worker", Some("demo"), 2, true).await;
    for pod in ["worker-0", "worker-1"] {
        env.set_ready_once_running(pod).await;
    }
    env.ready_pool("worker", 2).await;
    // HotReload: a restarted gated pod would stay unready.
    env.apply(&swarm_yaml("demo", &job_keys(10), "")).await;
    env.in_force("demo", 1, WAIT).await;
    let before = env.slices("demo").await;
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=1000000000"])
        .await;
    let degraded = eventually("Degraded/TooManyMembers", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "TooManyMembers")
    })
    .await;
    assert!(
        degraded
            .message
            .contains("StatefulSet worker: 1000000000 replicas"),
        "{}",
        degraded.message
    );
    let status = env.swarm("demo").await.status.unwrap();
    assert_eq!(status.current_revision, 1);
    assert_eq!(status.pending_revision, None);
    assert_eq!(env.slices("demo").await, before);
    // Still alive and answering: scaled back, the Swarm recovers.
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=2"])
        .await;
    eventually("Degraded cleared after scaling back", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "False")
            .then_some(())
    })
    .await;
    env.in_force("demo", 1, WAIT).await;
    assert_eq!(env.slices("demo").await, before);
    controller.stop().await;
    env.finish().await;
}

/// `shoal_controller::run` takes a client as the caller built it, and kube's default client
/// retries 429 inside the call: the eviction is sent once all the same, so the refusal is
/// reported at once, naming the budget, and the reconcile is not held in a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_reported_through_run_even_with_a_client_that_retries_429() {
    let env = Env::start().await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let settings = shoal_controller::Settings {
        namespace: Some(env.namespace.clone()),
        resync: Duration::from_secs(5),
        ..shoal_controller::Settings::default()
    };
    let client = env.client.clone();
    let controller = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        shoal_controller::run(client, settings, shutdown).await
    });
    env.pool("worker", "demo", 2).await;
    env.ready_pool("worker", 2).await;
    env.apply(&swarm_yaml("demo", &job_keys(10), "  reload: Restart\n"))
        .await;
    env.in_force("demo", 1, WAIT).await;
    env.apply(BLOCKING_PDB).await;
    let uids = env.pod_uids().await;
    env.apply(&swarm_yaml("demo", &job_keys(11), "  reload: Restart\n"))
        .await;
    let message = eviction_blocked(&env).await;
    assert!(
        message.contains("waits to restart") && message.contains("disruption budget worker"),
        "{message}"
    );
    assert_eq!(
        env.pod_uids().await,
        uids,
        "a pod was replaced despite the PDB"
    );
    relax_pdb(&env).await;
    eventually("the rollout finished once the PDB allows", WAIT, || async {
        let status = env.swarm("demo").await.status?;
        let slices = env.slices("demo").await;
        (status.phase.as_deref() == Some("Ready") && all_jobs(&slices) == job_keys(11))
            .then_some(())
    })
    .await;
    let _ = stop.send(());
    let _ = controller.await;
    env.finish().await;
}

/// Marks Ready, as soon as the kubelet reports them running, the gated pods whose names
/// `names` holds at the time: a kubelet whose readiness probe passes for those.
fn auto_ready(env: &Env, names: Arc<Mutex<BTreeSet<String>>>) -> tokio::task::JoinHandle<()> {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let client = env.client.clone();
    let namespace = env.namespace.clone();
    tokio::spawn(async move {
        loop {
            let pods = api
                .list(&kube::api::ListParams::default())
                .await
                .map(|list| list.items)
                .unwrap_or_default();
            for pod in pods {
                let running = pod
                    .status
                    .as_ref()
                    .and_then(|status| status.phase.as_deref())
                    == Some("Running");
                let wanted = names.lock().unwrap().contains(&pod.name_any());
                if wanted
                    && running
                    && pod.metadata.deletion_timestamp.is_none()
                    && !shoal_emulator::sim::is_running_and_ready(&pod)
                {
                    let _ = shoal_emulator::sim::set_pod_ready(
                        &client,
                        &namespace,
                        &pod.name_any(),
                        true,
                    )
                    .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// Under Restart a failed-over member's pod may still run the share its application read
/// at start-up (NotReady is not stopped): its jobs go to the others only once that pod is
/// gone, here held back by a PodDisruptionBudget that refuses its eviction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_over_pod_keeps_its_jobs_from_the_others_until_it_is_gone() {
    let env = Env::start().await;
    let controller = env.start_controller();
    // Gated pods, so that worker-1 can be made NotReady while it runs.
    let ready_ones: Arc<Mutex<BTreeSet<String>>> = Arc::new(Mutex::new(
        ["worker-0", "worker-1", "worker-2"]
            .map(str::to_owned)
            .into(),
    ));
    let kubelet = auto_ready(&env, ready_ones.clone());
    env.statefulset("worker", Some("demo"), 3, true).await;
    env.ready_pool("worker", 3).await;
    let spec = "  reload: Restart\n  failover:\n    after: 3s\n";
    env.apply(&swarm_yaml("demo", &job_keys(30), spec)).await;
    env.in_force("demo", 1, WAIT).await;
    let before = env.slices("demo").await;
    let held = before["worker-1"].clone();
    assert!(!held.is_empty());
    env.apply(BLOCKING_PDB).await;
    let uid = env.pod_uids().await["worker-1"].clone();
    // worker-1 turns NotReady (and so does any pod in its place from now on).
    ready_ones.lock().unwrap().remove("worker-1");
    env.set_ready("worker-1", false).await;
    eventually(
        "worker-1 failed over and its slice revoked",
        WAIT,
        || async {
            let status = env.swarm("demo").await.status?;
            let failed_over = status
                .members
                .iter()
                .any(|member| member.name == "worker-1" && member.failed_over);
            let slices = env.slices("demo").await;
            (failed_over && slices.get("worker-1").is_some_and(Vec::is_empty)).then_some(())
        },
    )
    .await;
    // Several passes while the budget refuses to evict it: nobody else gets its jobs.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(env.pod_uids().await.get("worker-1"), Some(&uid));
        let slices = env.slices("demo").await;
        let granted: Vec<&String> = slices
            .iter()
            .filter(|(member, _)| *member != "worker-1")
            .flat_map(|(_, jobs)| jobs)
            .filter(|job| held.contains(job))
            .collect();
        assert!(
            granted.is_empty(),
            "{granted:?} granted to others while the failed-over worker-1 still runs: {slices:?}"
        );
    }
    env.kubectl(&["delete", "pdb", "worker"]).await;
    let slices = eventually(
        "worker-1's jobs moved once its pod is gone",
        WAIT,
        || async {
            let slices = env.slices("demo").await;
            (all_jobs(&slices) == job_keys(30)).then_some(slices)
        },
    )
    .await;
    assert!(slices.get("worker-1").is_none_or(Vec::is_empty));
    assert_ne!(env.pod_uids().await.get("worker-1"), Some(&uid));
    kubelet.abort();
    controller.stop().await;
    env.finish().await;
}

/// An eviction carries the uid of the pod it was planned for: a pod of that name with
/// another uid (a replacement, which started with its new slice) is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_planned_for_a_replaced_pod_evicts_nothing() {
    let env = Env::start().await;
    env.pool("worker", "demo", 1).await;
    let uids = env.ready_pool("worker", 1).await;
    let params = kube::api::EvictParams {
        delete_options: Some(kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some("uid-of-the-pod-before".to_owned()),
                resource_version: None,
            }),
            ..kube::api::DeleteParams::default()
        }),
        ..kube::api::EvictParams::default()
    };
    let answer =
        shoal_controller::eviction::evict_once(&env.client, &env.namespace, "worker-0", &params)
            .await;
    assert!(
        matches!(&answer, Err(kube::Error::Api(status)) if status.code == 409),
        "{answer:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.pod_uids().await, uids, "the pod was evicted");
    env.finish().await;
}
