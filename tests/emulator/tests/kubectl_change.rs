//! kubectl conformance, part 3: changing things. `scale statefulset` (pods
//! follow), `annotate` (with and without `--overwrite`), `patch` of each
//! type, `delete` (a configmap; a statefulset with its pods collected), and
//! `rollout status statefulset` returning once the set is ready. Runs on the
//! emulator and on a real cluster.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use shoal_emulator::harness::fixtures::{
    describe_pods, gated, parallel, pods_of, statefulset, wait_for_ready_pods,
};
use shoal_emulator::harness::{Check, TestCluster};
use shoal_emulator::sim::{is_running_and_ready, set_pod_ready};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn cluster() -> TestCluster {
    TestCluster::start().await.expect("a test cluster")
}

async fn kubectl_ok(cluster: &TestCluster, args: &[&str]) -> String {
    cluster
        .kubectl(args)
        .await
        .expect("kubectl runs")
        .ok()
        .unwrap_or_else(|error| panic!("kubectl {args:?}: {error}"))
        .stdout
}

fn maps(cluster: &TestCluster) -> Api<ConfigMap> {
    Api::namespaced(cluster.client(), cluster.namespace())
}

async fn config_map(cluster: &TestCluster, name: &str, data: Value) {
    let object: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": name },
        "data": data,
    }))
    .expect("configmap literal");
    maps(cluster)
        .create(&PostParams::default(), &object)
        .await
        .expect("create configmap");
}

async fn create_set(cluster: &TestCluster, set: &StatefulSet) {
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client(), cluster.namespace());
    sets.create(&PostParams::default(), set)
        .await
        .expect("create statefulset");
}

#[tokio::test]
async fn scale_statefulset_makes_the_pods_follow() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &statefulset("web", 1)).await;
    wait_for_ready_pods(&client, &namespace, "web", 1, TIMEOUT)
        .await
        .expect("one pod");

    let printed = kubectl_ok(&cluster, &["scale", "statefulset", "web", "--replicas=3"]).await;
    assert_eq!(printed.trim(), "statefulset.apps/web scaled");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    let set = sets.get("web").await.expect("get");
    assert_eq!(set.spec.and_then(|spec| spec.replicas), Some(3));
    wait_for_ready_pods(&client, &namespace, "web", 3, TIMEOUT)
        .await
        .expect("three pods");

    kubectl_ok(&cluster, &["scale", "statefulset/web", "--replicas=2"]).await;
    wait_for_ready_pods(&client, &namespace, "web", 2, TIMEOUT)
        .await
        .expect("two pods: web-2 removed");

    let refused = cluster
        .kubectl(&[
            "scale",
            "statefulset",
            "web",
            "--current-replicas=5",
            "--replicas=1",
        ])
        .await
        .expect("kubectl");
    assert!(!refused.success(), "a wrong --current-replicas is refused");
    assert_eq!(
        sets.get("web")
            .await
            .expect("get")
            .spec
            .and_then(|spec| spec.replicas),
        Some(2)
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn annotate_refuses_to_overwrite_without_the_flag_and_overwrites_with_it() {
    let cluster = cluster().await;
    config_map(&cluster, "settings", json!({ "a": "1" })).await;
    let annotation = |map: ConfigMap| map.annotations().get("example.com/owner").cloned();

    let printed = kubectl_ok(
        &cluster,
        &[
            "annotate",
            "configmap",
            "settings",
            "example.com/owner=alice",
        ],
    )
    .await;
    assert_eq!(printed.trim(), "configmap/settings annotated");
    let map = maps(&cluster).get("settings").await.expect("get");
    assert_eq!(annotation(map).as_deref(), Some("alice"));

    let refused = cluster
        .kubectl(&["annotate", "configmap", "settings", "example.com/owner=bob"])
        .await
        .expect("kubectl");
    assert!(!refused.success());
    assert!(refused.stderr.contains("--overwrite"), "{}", refused.stderr);
    let map = maps(&cluster).get("settings").await.expect("get");
    assert_eq!(annotation(map).as_deref(), Some("alice"));

    kubectl_ok(
        &cluster,
        &[
            "annotate",
            "--overwrite",
            "configmap",
            "settings",
            "example.com/owner=bob",
        ],
    )
    .await;
    let map = maps(&cluster).get("settings").await.expect("get");
    assert_eq!(annotation(map).as_deref(), Some("bob"));

    kubectl_ok(
        &cluster,
        &["annotate", "configmap", "settings", "example.com/owner-"],
    )
    .await;
    let map = maps(&cluster).get("settings").await.expect("get");
    assert_eq!(annotation(map), None, "a trailing dash removes it");
    cluster.cleanup().await;
}

#[tokio::test]
async fn patch_of_each_type_changes_what_the_cluster_holds() {
    let cluster = cluster().await;
    config_map(&cluster, "settings", json!({ "a": "1", "b": "2" })).await;
    let data = |map: ConfigMap| map.data.unwrap_or_default();

    kubectl_ok(
        &cluster,
        &[
            "patch",
            "configmap",
            "settings",
            "--type=merge",
            "-p",
            r#"{"data":{"a":"10","b":null,"c":"3"}}"#,
        ],
    )
    .await;
    assert_eq!(
        data(maps(&cluster).get("settings").await.expect("get")),
        [
            ("a".to_owned(), "10".to_owned()),
            ("c".to_owned(), "3".to_owned())
        ]
        .into()
    );

    kubectl_ok(
        &cluster,
        &[
            "patch",
            "configmap",
            "settings",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/data/a","value":"10"},{"op":"remove","path":"/data/c"}]"#,
        ],
    )
    .await;
    assert_eq!(
        data(maps(&cluster).get("settings").await.expect("get")),
        [("a".to_owned(), "10".to_owned())].into()
    );
    let failed_test = cluster
        .kubectl(&[
            "patch",
            "configmap",
            "settings",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/data/a","value":"nope"},{"op":"remove","path":"/data/a"}]"#,
        ])
        .await
        .expect("kubectl");
    assert!(
        !failed_test.success(),
        "a failed test operation rejects the patch"
    );
    assert_eq!(
        data(maps(&cluster).get("settings").await.expect("get")),
        [("a".to_owned(), "10".to_owned())].into()
    );

    // Strategic merge (kubectl's default type) merges containers by name.
    let mut set = statefulset("web", 1);
    if let Some(spec) = set
        .spec
        .as_mut()
        .and_then(|spec| spec.template.spec.as_mut())
    {
        let mut second = spec.containers[0].clone();
        second.name = "helper".to_owned();
        spec.containers.push(second);
    }
    create_set(&cluster, &set).await;
    kubectl_ok(
        &cluster,
        &[
            "patch",
            "statefulset",
            "web",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"helper","image":"registry.k8s.io/pause:3.9"}]}}}}"#,
        ],
    )
    .await;
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client(), cluster.namespace());
    let patched = sets.get("web").await.expect("get");
    let containers: Vec<(String, String)> = patched
        .spec
        .and_then(|spec| spec.template.spec)
        .map(|spec| spec.containers)
        .unwrap_or_default()
        .into_iter()
        .map(|container| (container.name, container.image.unwrap_or_default()))
        .collect();
    assert_eq!(
        containers,
        vec![
            (
                "app".to_owned(),
                shoal_emulator::harness::fixtures::PAUSE_IMAGE.to_owned()
            ),
            ("helper".to_owned(), "registry.k8s.io/pause:3.9".to_owned()),
        ]
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn delete_removes_a_configmap_and_a_statefulset_with_its_pods() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    config_map(&cluster, "settings", json!({ "a": "1" })).await;
    let printed = kubectl_ok(&cluster, &["delete", "configmap", "settings"]).await;
    assert_eq!(printed.trim(), "configmap \"settings\" deleted");
    assert!(
        maps(&cluster)
            .get_opt("settings")
            .await
            .expect("get")
            .is_none()
    );
    let missing = cluster
        .kubectl(&["delete", "configmap", "settings"])
        .await
        .expect("kubectl");
    assert!(!missing.success());
    assert!(missing.stderr.contains("NotFound"), "{}", missing.stderr);

    create_set(&cluster, &statefulset("web", 2)).await;
    wait_for_ready_pods(&client, &namespace, "web", 2, TIMEOUT)
        .await
        .expect("two pods");
    kubectl_ok(&cluster, &["delete", "statefulset", "web"]).await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    assert!(sets.get_opt("web").await.expect("get").is_none());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    cluster
        .wait_for("the set's pods collected", TIMEOUT, || async {
            match pods.list(&ListParams::default().labels("app=web")).await {
                Ok(list) if list.items.is_empty() => Check::Done(()),
                Ok(list) => Check::Pending(
                    list.items
                        .iter()
                        .map(|pod| pod.name_any())
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("pods collected");
    cluster.cleanup().await;
}

#[tokio::test]
async fn rollout_status_waits_for_the_statefulset_to_be_ready() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &parallel(gated(statefulset("web", 2)))).await;
    cluster
        .wait_for("both pods created", TIMEOUT, || async {
            match pods_of(&client, &namespace, "web").await {
                Ok(pods) if pods.len() == 2 => Check::Done(()),
                Ok(pods) => Check::Pending(describe_pods(&pods)),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("pods");

    let early = cluster
        .kubectl(&["rollout", "status", "statefulset/web", "--timeout=2s"])
        .await
        .expect("kubectl");
    assert!(
        !early.success(),
        "rollout status must not report an unready set done: {early:?}"
    );
    assert!(
        early.stdout.contains("Waiting for 2 pods to be ready"),
        "{}",
        early.stdout
    );

    let waiting = cluster.kubectl(&["rollout", "status", "statefulset/web", "--timeout=60s"]);
    let readying = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for name in ["web-0", "web-1"] {
            set_pod_ready(&client, &namespace, name, true)
                .await
                .expect("ready");
        }
    };
    let (done, ()) = tokio::join!(waiting, readying);
    let done = done
        .expect("kubectl")
        .ok()
        .expect("rollout status succeeds");
    // The fixture says RollingUpdate without a rollingUpdate block, which
    // the API server leaves as it is, so kubectl reports the revision.
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    let revision = sets
        .get("web")
        .await
        .expect("get")
        .status
        .and_then(|status| status.current_revision)
        .expect("current revision");
    assert!(
        done.stdout.contains(&format!(
            "statefulset rolling update complete 2 pods at revision {revision}"
        )),
        "{}",
        done.stdout
    );
    let pods = pods_of(&client, &namespace, "web").await.expect("pods");
    assert!(
        pods.values().all(is_running_and_ready),
        "done only once both are ready: {}",
        describe_pods(&pods)
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_defaulted_update_strategy_gets_partition_zero_and_rollout_status_says_so() {
    let cluster = cluster().await;
    let mut manifest = serde_json::to_value(statefulset("web", 1)).expect("json");
    manifest["apiVersion"] = json!("apps/v1");
    manifest["kind"] = json!("StatefulSet");
    if let Some(spec) = manifest["spec"].as_object_mut() {
        spec.remove("updateStrategy");
    }
    cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string()))
        .await
        .expect("kubectl")
        .ok()
        .expect("apply");
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client(), cluster.namespace());
    let strategy = sets
        .get("web")
        .await
        .expect("get")
        .spec
        .and_then(|spec| spec.update_strategy)
        .expect("a defaulted strategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    assert_eq!(
        strategy
            .rolling_update
            .and_then(|rolling| rolling.partition),
        Some(0)
    );
    let done = kubectl_ok(
        &cluster,
        &["rollout", "status", "statefulset/web", "--timeout=60s"],
    )
    .await;
    assert!(
        done.contains("partitioned roll out complete: 1 new pods have been updated"),
        "{done}"
    );
    wait_for_ready_pods(&cluster.client(), cluster.namespace(), "web", 1, TIMEOUT)
        .await
        .expect("the pod is ready once rollout status is done");
    cluster.cleanup().await;
}

#[tokio::test]
async fn set_image_then_rollout_history_and_undo_bring_the_old_template_back() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &statefulset("web", 2)).await;
    wait_for_ready_pods(&client, &namespace, "web", 2, TIMEOUT)
        .await
        .expect("two pods");
    let old_image = shoal_emulator::harness::fixtures::PAUSE_IMAGE;
    let new_image = "registry.k8s.io/pause:3.9";
    kubectl_ok(
        &cluster,
        &[
            "set",
            "image",
            "statefulset/web",
            &format!("app={new_image}"),
        ],
    )
    .await;
    let images = |pods: &std::collections::BTreeMap<u32, Pod>| -> Vec<String> {
        pods.values()
            .map(|pod| {
                pod.spec
                    .as_ref()
                    .and_then(|spec| spec.containers[0].image.clone())
                    .unwrap_or_default()
            })
            .collect()
    };
    let pods_now = |image: &'static str| {
        let client = client.clone();
        let namespace = namespace.clone();
        async move {
            match pods_of(&client, &namespace, "web").await {
                Ok(pods)
                    if pods.len() == 2
                        && images(&pods).iter().all(|found| found == image)
                        && pods.values().all(is_running_and_ready) =>
                {
                    Check::Done(())
                }
                Ok(pods) => Check::Pending(format!("{} {:?}", describe_pods(&pods), images(&pods))),
                Err(error) => Check::Pending(error.to_string()),
            }
        }
    };
    cluster
        .wait_for("pods on the new image", TIMEOUT, || pods_now(new_image))
        .await
        .expect("rolled forward");

    let history = kubectl_ok(&cluster, &["rollout", "history", "statefulset/web"]).await;
    let numbers: Vec<&str> = history
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|first| first.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(numbers, vec!["1", "2"], "{history}");
    let first = kubectl_ok(
        &cluster,
        &["rollout", "history", "statefulset/web", "--revision=1"],
    )
    .await;
    assert!(first.contains(old_image), "{first}");

    let undone = kubectl_ok(&cluster, &["rollout", "undo", "statefulset/web"]).await;
    assert_eq!(undone.trim(), "statefulset.apps/web rolled back");
    cluster
        .wait_for("pods back on the old image", TIMEOUT, || {
            pods_now(old_image)
        })
        .await
        .expect("rolled back");
    cluster.cleanup().await;
}
