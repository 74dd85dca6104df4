//! The harness on a control plane without kubelets (`SHOAL_TEST_KUBECONFIG` with
//! `SHOAL_TEST_NO_KUBELET=1`): its kubelet stand-in registers a Node, binds the
//! test namespace's pods through `pods/binding`, reports them Running and Ready
//! through `pods/status`, confirms their termination, and leaves other
//! namespaces' pods alone. The control plane here is the emulated API server with
//! its StatefulSet controller and no kubelet, which refuses a `spec.nodeName`
//! patch as a real server does; emulator-only, as it starts that control plane.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use shoal_emulator::harness::fixtures::PAUSE_IMAGE;
use shoal_emulator::harness::{Check, STAND_IN_NODE, TestCluster, wait_for};
use shoal_emulator::sim::{Cluster, ClusterOptions, is_running_and_ready};

const WAIT: Duration = Duration::from_secs(30);

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "app", "image": PAUSE_IMAGE}],
        },
    }))
    .expect("a pod")
}

async fn control_plane_without_kubelets() -> Cluster {
    Cluster::start_with(ClusterOptions {
        without_kubelet: true,
        ..ClusterOptions::default()
    })
    .await
    .expect("the emulated control plane starts")
}

async fn wait_until_ready(client: &Client, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_for("the pod to be Running and Ready", WAIT, || async {
        match pods.get(name).await {
            Ok(pod) if is_running_and_ready(&pod) => Check::Done(pod),
            Ok(pod) => Check::Pending(format!("{:?}", pod.status)),
            Err(error) => Check::Pending(error.to_string()),
        }
    })
    .await
    .expect("ready")
}

#[tokio::test]
async fn without_kubelets_the_stand_in_binds_starts_and_removes_only_the_tests_pods() {
    let control_plane = control_plane_without_kubelets().await;
    let cluster = TestCluster::connect(control_plane.kubeconfig_path(), true)
        .await
        .expect("the harness connects");
    assert!(!cluster.is_emulated(), "connected as to a real cluster");
    let client = cluster.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), cluster.namespace());
    let elsewhere: Api<Pod> = Api::namespaced(client.clone(), "default");
    elsewhere
        .create(&PostParams::default(), &pod("not-the-tests"))
        .await
        .expect("create a pod outside the test namespace");
    pods.create(&PostParams::default(), &pod("runs"))
        .await
        .expect("create");

    let ready = wait_until_ready(&client, cluster.namespace(), "runs").await;
    assert_eq!(
        ready.spec.and_then(|spec| spec.node_name).as_deref(),
        Some(STAND_IN_NODE)
    );
    let node = Api::<Node>::all(client.clone())
        .get(STAND_IN_NODE)
        .await
        .expect("the stand-in registered its Node");
    assert!(
        node.status
            .iter()
            .flat_map(|status| status.conditions.iter().flatten())
            .any(|condition| condition.type_ == "Ready" && condition.status == "True"),
        "{:?}",
        node.status
    );
    let other = elsewhere.get("not-the-tests").await.expect("get");
    assert_eq!(other.spec.and_then(|spec| spec.node_name), None);

    // A graceful delete completes only when a kubelet confirms it.
    pods.delete("runs", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("the deleted pod to be gone", WAIT, || async {
        match pods.get_opt("runs").await {
            Ok(None) => Check::Done(()),
            Ok(Some(pod)) => Check::Pending(format!(
                "terminating since {:?}",
                pod.metadata.deletion_timestamp
            )),
            Err(error) => Check::Pending(error.to_string()),
        }
    })
    .await
    .expect("termination confirmed");

    pods.create(&PostParams::default(), &pod("left-running"))
        .await
        .expect("create");
    wait_until_ready(&client, cluster.namespace(), "left-running").await;
    let namespace = cluster.namespace().to_owned();
    cluster.cleanup().await;
    let gone = Api::<Namespace>::all(client.clone())
        .get_opt(&namespace)
        .await
        .expect("get namespace");
    assert!(
        gone.is_none(),
        "cleanup returned with the namespace still there: {gone:?}"
    );
    control_plane.shutdown().await;
}

#[tokio::test]
async fn without_the_stand_in_a_pod_on_that_control_plane_stays_pending_and_unbound() {
    let control_plane = control_plane_without_kubelets().await;
    let cluster = TestCluster::connect(control_plane.kubeconfig_path(), false)
        .await
        .expect("the harness connects");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    pods.create(&PostParams::default(), &pod("waits"))
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waiting = pods.get("waits").await.expect("get");
    assert!(!is_running_and_ready(&waiting));
    assert_eq!(waiting.spec.and_then(|spec| spec.node_name), None);
    cluster.cleanup().await;
    control_plane.shutdown().await;
}
