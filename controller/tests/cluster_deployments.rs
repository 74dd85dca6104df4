//! A Deployment as a pool, on a cluster: its pods are members under their generated
//! names. A pod deleted (its ReplicaSet replaces it under a new name) moves only its own
//! jobs, to its successor; a scale-down moves only the leaving pod's jobs; a rolling
//! update hands every job to the new pods; the slice of a pod that is gone is deleted; a
//! pod that only looks like the Deployment's (its labels) is no member; and no job is
//! ever in two slices meanwhile (watched by a poller throughout). Runs on the emulator (its simulated Deployment and ReplicaSet
//! controllers) and on a real control plane alike.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use shoal_emulator::harness::fixtures::PAUSE_IMAGE;
use shoal_emulator::sim::is_running_and_ready;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml, two_owner_sightings};

const WAIT: Duration = Duration::from_secs(90);

/// A Deployment `web` of `replicas` pause pods labelled for Swarm `demo`.
fn deployment_yaml(replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    shoal.dev/swarm: demo
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: {PAUSE_IMAGE}
"#
    )
}

/// The names of the pods labelled `app=web` when all are Ready and none is terminating.
async fn settled_pods(env: &Env) -> Option<BTreeSet<String>> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let listed = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .ok()?;
    listed
        .items
        .iter()
        .all(|pod| is_running_and_ready(pod) && pod.metadata.deletion_timestamp.is_none())
        .then(|| listed.items.iter().map(ResourceExt::name_any).collect())
}

/// The names of the Deployment's pods once exactly `count` exist, all Ready, none terminating.
async fn ready_pods(env: &Env, count: usize) -> BTreeSet<String> {
    eventually(&format!("{count} ready pods of web"), WAIT, || async {
        settled_pods(env).await.filter(|pods| pods.len() == count)
    })
    .await
}

/// Waits for `revision` in force, Ready, with the slices held by exactly `pods`.
async fn in_force(
    env: &Env,
    revision: u64,
    pods: &BTreeSet<String>,
) -> BTreeMap<String, Vec<String>> {
    eventually(
        &format!("revision {revision} on {pods:?}"),
        WAIT,
        || async {
            let status = env.swarm("demo").await.status?;
            let slices = env.slices("demo").await;
            (status.current_revision == revision
                && status.phase.as_deref() == Some("Ready")
                && slices.keys().eq(pods.iter())
                && all_jobs(&slices) == job_keys(27))
            .then_some(slices)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployments_replaced_pod_moves_only_its_own_jobs_and_a_scale_down_only_the_leavers() {
    let env = Env::start().await;
    let _controller = env.start_controller();
    env.apply(&deployment_yaml(3)).await;
    let pods = ready_pods(&env, 3).await;
    env.apply(&swarm_yaml(
        "demo",
        &job_keys(27),
        "  strategy:\n    type: sticky\n",
    ))
    .await;
    let first = in_force(&env, 1, &pods).await;
    assert!(first.values().all(|jobs| jobs.len() == 9), "{first:?}");
    let stop = AtomicBool::new(false);
    let changes = async {
        // Delete one pod: its ReplicaSet replaces it under a new name.
        let victim = pods.iter().next().expect("a pod").clone();
        env.kubectl(&["delete", "pod", &victim, "--wait=false"])
            .await;
        let now = ready_pods(&env, 3).await;
        assert!(!now.contains(&victim), "{now:?}");
        let successor = now.difference(&pods).next().expect("a new pod").clone();
        let second = in_force(&env, 2, &now).await;
        assert_eq!(
            second[&successor], first[&victim],
            "the successor took its jobs"
        );
        for pod in pods.iter().filter(|pod| **pod != victim) {
            assert_eq!(second[pod], first[pod], "{pod} is untouched");
        }

        // Scale 3 → 2: only the leaving pod's jobs move, and its slice is deleted.
        env.kubectl(&["scale", "deployment", "web", "--replicas=2"])
            .await;
        let staying = ready_pods(&env, 2).await;
        let leaver = now.difference(&staying).next().expect("a pod left").clone();
        let third = in_force(&env, 3, &staying).await;
        for pod in &staying {
            assert!(
                second[pod].iter().all(|job| third[pod].contains(job)),
                "{pod} lost a job to a pod that stays"
            );
        }
        let gained: usize = staying
            .iter()
            .map(|pod| third[pod].len() - second[pod].len())
            .sum();
        assert_eq!(
            gained,
            second[&leaver].len(),
            "only the leaver's jobs moved"
        );
        stop.store(true, Ordering::Relaxed);
    };
    let (sightings, ()) = tokio::join!(two_owner_sightings(&env, "demo", &stop), changes);
    assert!(sightings.is_empty(), "a job had two owners: {sightings:?}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_hands_every_job_to_the_new_pods_and_a_look_alike_pod_is_no_member() {
    let env = Env::start().await;
    let _controller = env.start_controller();
    env.apply(&deployment_yaml(3)).await;
    let old = ready_pods(&env, 3).await;
    env.apply(&swarm_yaml(
        "demo",
        &job_keys(27),
        "  strategy:\n    type: sticky\n",
    ))
    .await;
    in_force(&env, 1, &old).await;
    // A pod with the Deployment's labels that no ReplicaSet of it controls.
    env.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: look-alike\n  labels:\n    app: web\nspec:\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: app\n    image: {PAUSE_IMAGE}\n"
    ))
    .await;
    let stop = AtomicBool::new(false);
    let changes = async {
        // A new template: new ReplicaSet, new pods, the old ones leave.
        env.kubectl(&[
            "patch",
            "deployment",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"metadata":{"annotations":{"revision":"2"}}}}}"#,
        ])
        .await;
        let new = eventually("the old pods replaced", WAIT, || async {
            let pods = settled_pods(&env).await?;
            let fresh: BTreeSet<String> = pods
                .iter()
                .filter(|pod| *pod != "look-alike" && !old.contains(*pod))
                .cloned()
                .collect();
            (pods.len() == 4 && fresh.len() == 3).then_some(fresh)
        })
        .await;
        eventually("every job on the new pods", WAIT, || async {
            let status = env.swarm("demo").await.status?;
            let slices = env.slices("demo").await;
            (status.phase.as_deref() == Some("Ready")
                && slices.keys().eq(new.iter())
                && all_jobs(&slices) == job_keys(27))
            .then_some(())
        })
        .await;
        stop.store(true, Ordering::Relaxed);
    };
    let (sightings, ()) = tokio::join!(two_owner_sightings(&env, "demo", &stop), changes);
    assert!(sightings.is_empty(), "a job had two owners: {sightings:?}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_labelled_for_a_missing_swarm_gets_a_warning_event() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.apply(&deployment_yaml(1).replace("shoal.dev/swarm: demo", "shoal.dev/swarm: nobody"))
        .await;
    let events = eventually("an Event SwarmNotFound", WAIT, || async {
        let (ok, text) = env.kubectl_status(&["get", "events", "-o", "yaml"]).await;
        (ok && text.contains("SwarmNotFound")).then_some(text)
    })
    .await;
    assert!(
        events.contains("Deployment") && events.contains("nobody"),
        "{events}"
    );
    controller.stop().await;
    env.finish().await;
}
