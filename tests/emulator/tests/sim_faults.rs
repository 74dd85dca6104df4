//! The simulated controllers under injected API faults: failed writes,
//! forced conflicts and dropped watches must delay them, not wedge them.
//! Emulator-only: fault injection exists only in the emulated API server
//! (each test skips, saying so, on `SHOAL_TEST_KUBECONFIG`).

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use shoal_emulator::Faults;
use shoal_emulator::harness::fixtures::{PAUSE_IMAGE, statefulset, wait_for_ready_pods};
use shoal_emulator::harness::{Check, TestCluster};
use shoal_emulator::sim::{ClusterOptions, KubeletConfig, is_running_and_ready};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The cluster and its fault handle, or `None` (after saying why) on a real
/// cluster.
async fn emulated(options: ClusterOptions) -> Option<(TestCluster, Faults)> {
    let cluster = TestCluster::start_with(options).await.expect("cluster");
    match cluster.faults() {
        Some(faults) => Some((cluster, faults)),
        None => {
            println!("skipped: fault injection needs the emulated API server");
            None
        }
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "terminationGracePeriodSeconds": 10,
            "containers": [{ "name": "app", "image": PAUSE_IMAGE }],
        }
    }))
    .expect("pod literal")
}

async fn wait_until_ready(cluster: &TestCluster, name: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    cluster
        .wait_for(&format!("{name} Running and Ready"), TIMEOUT, || async {
            match api.get_opt(name).await {
                Ok(Some(pod)) if is_running_and_ready(&pod) => Check::Done(pod),
                Ok(Some(pod)) => Check::Pending(format!("{:?}", pod.status)),
                Ok(None) => Check::Pending("absent".to_owned()),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("pod ready")
}

#[tokio::test]
async fn the_kubelet_starts_a_pod_even_when_its_status_writes_fail_at_first() {
    let Some((cluster, faults)) = emulated(ClusterOptions::default()).await else {
        return;
    };
    faults.fail_next(3, Some("patch"), Some("pods/status"), 500);
    let api: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    api.create(&PostParams::default(), &pod("stubborn"))
        .await
        .expect("create");
    wait_until_ready(&cluster, "stubborn").await;
    // Had the kubelet not met (and retried through) all three, this write
    // would now get an armed 500.
    api.patch_status(
        "stubborn",
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "message": "checked" } })),
    )
    .await
    .expect("no injected failure left");
    cluster.cleanup().await;
}

#[tokio::test]
async fn the_kubelet_confirms_a_deletion_even_when_its_deletes_fail_at_first() {
    let Some((cluster, faults)) = emulated(ClusterOptions {
        kubelet: KubeletConfig {
            grace_scale: 0.05,
            ..KubeletConfig::default()
        },
        ..ClusterOptions::default()
    })
    .await
    else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    api.create(&PostParams::default(), &pod("leaving"))
        .await
        .expect("create");
    wait_until_ready(&cluster, "leaving").await;
    api.delete("leaving", &DeleteParams::default())
        .await
        .expect("delete");
    // Armed after the test's own delete: the kubelet's confirmation (after
    // the 0.5 s scaled grace period) meets them.
    faults.fail_next(2, Some("delete"), Some("pods"), 500);
    cluster
        .wait_for("the pod gone", TIMEOUT, || async {
            match api.get_opt("leaving").await {
                Ok(None) => Check::Done(()),
                Ok(Some(pod)) => Check::Pending(format!(
                    "still there, deletionTimestamp {:?}",
                    pod.metadata.deletion_timestamp
                )),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("termination confirmed");
    let left = api.delete("never-existed", &DeleteParams::default()).await;
    assert!(
        matches!(left, Err(kube::Error::Api(ref status)) if status.code == 404),
        "the kubelet met both injected failures: {left:?}"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn the_statefulset_controller_creates_its_pods_through_failed_creates_and_a_status_conflict()
{
    let Some((cluster, faults)) = emulated(ClusterOptions::default()).await else {
        return;
    };
    faults.fail_next(3, Some("create"), Some("pods"), 500);
    faults.conflict_next_update("statefulsets/status");
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client(), cluster.namespace());
    sets.create(&PostParams::default(), &statefulset("web", 2))
        .await
        .expect("create");
    wait_for_ready_pods(&cluster.client(), cluster.namespace(), "web", 2, TIMEOUT)
        .await
        .expect("two ready pods");
    cluster
        .wait_for("status readyReplicas 2", TIMEOUT, || async {
            match sets.get("web").await {
                Ok(set)
                    if set
                        .status
                        .as_ref()
                        .is_some_and(|status| status.ready_replicas == Some(2)) =>
                {
                    Check::Done(())
                }
                Ok(set) => Check::Pending(format!("{:?}", set.status)),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("status current");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    pods.create(&PostParams::default(), &pod("probe"))
        .await
        .expect("the controller met all three injected failures");
    cluster.cleanup().await;
}

#[tokio::test]
async fn the_controllers_keep_working_after_every_watch_is_dropped() {
    let Some((cluster, faults)) = emulated(ClusterOptions::default()).await else {
        return;
    };
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    sets.create(&PostParams::default(), &statefulset("web", 1))
        .await
        .expect("create");
    let before = wait_for_ready_pods(&client, &namespace, "web", 1, TIMEOUT)
        .await
        .expect("one pod");

    faults.drop_all_watches();
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "replicas": 3 } })),
    )
    .await
    .expect("scale");
    wait_for_ready_pods(&client, &namespace, "web", 3, TIMEOUT)
        .await
        .expect("three pods after the watches were dropped");

    faults.drop_all_watches();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    pods.delete("web-0", &DeleteParams::default())
        .await
        .expect("delete web-0");
    let old_uid = before[&0].uid();
    let after = cluster
        .wait_for("web-0 recreated", TIMEOUT, || async {
            match pods.get_opt("web-0").await {
                Ok(Some(pod)) if pod.uid() != old_uid && is_running_and_ready(&pod) => {
                    Check::Done(pod)
                }
                Ok(other) => Check::Pending(format!("{:?}", other.map(|pod| pod.uid()))),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("recreated");
    assert_eq!(after.name_any(), "web-0");
    cluster.cleanup().await;
}
