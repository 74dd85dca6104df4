//! The StatefulSet controller's behaviour, driven only through `kube` on a
//! [`TestCluster`], so the same tests run on a real cluster
//! (`SHOAL_TEST_KUBECONFIG`): pod naming and ownership, OrderedReady and
//! Parallel creation, scaling from the highest ordinal, recreation, status,
//! RollingUpdate with a partition, and OnDelete.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{
    ControllerRevision, RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use shoal_emulator::harness::fixtures::{
    describe_pods, gated, parallel, pods_of, statefulset, wait_for_ready_pods,
};
use shoal_emulator::harness::{Check, TestCluster};
use shoal_emulator::sim::{
    CONTROLLER_REVISION_HASH_LABEL, POD_NAME_LABEL, fail_pod, is_running_and_ready, set_pod_ready,
};

/// Generous enough for a real cluster pulling the pause image.
const TIMEOUT: Duration = Duration::from_secs(60);

async fn cluster() -> TestCluster {
    TestCluster::start().await.expect("a test cluster")
}

async fn create_set(cluster: &TestCluster, set: &StatefulSet) -> StatefulSet {
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client(), cluster.namespace());
    sets.create(&PostParams::default(), set)
        .await
        .expect("create statefulset")
}

fn sets(cluster: &TestCluster) -> Api<StatefulSet> {
    Api::namespaced(cluster.client(), cluster.namespace())
}

async fn pods(cluster: &TestCluster, set: &str) -> BTreeMap<u32, Pod> {
    pods_of(&cluster.client(), cluster.namespace(), set)
        .await
        .expect("list pods")
}

/// Waits until the set's pods are exactly `names` (any readiness).
async fn wait_for_pod_names(
    cluster: &TestCluster,
    set: &str,
    names: &[&str],
) -> BTreeMap<u32, Pod> {
    let wanted: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    cluster
        .wait_for(&format!("pods {wanted:?}"), TIMEOUT, || async {
            let current = pods(cluster, set).await;
            let names: Vec<String> = current.values().map(|pod| pod.name_any()).collect();
            if names == wanted {
                Check::Done(current)
            } else {
                Check::Pending(describe_pods(&current))
            }
        })
        .await
        .expect("pods appear")
}

async fn scale(cluster: &TestCluster, set: &str, replicas: i32) {
    sets(cluster)
        .patch(
            set,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .expect("scale");
}

async fn change_template(cluster: &TestCluster, set: &str, version: &str) {
    sets(cluster)
        .patch(
            set,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "template": { "metadata": {
                "annotations": { "example.com/version": version }
            } } } })),
        )
        .await
        .expect("change template");
}

/// Waits for the set's status to satisfy `done`, returning it.
async fn wait_for_status(
    cluster: &TestCluster,
    set: &str,
    what: &str,
    done: impl Fn(&StatefulSet) -> bool,
) -> StatefulSet {
    cluster
        .wait_for(what, TIMEOUT, || async {
            match sets(cluster).get(set).await {
                Ok(object) if done(&object) => Check::Done(object),
                Ok(object) => Check::Pending(format!(
                    "generation {:?}, status {:?}",
                    object.metadata.generation,
                    serde_json::to_string(&object.status)
                )),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("status converges")
}

fn revision_of(pod: &Pod) -> String {
    pod.labels()
        .get(CONTROLLER_REVISION_HASH_LABEL)
        .cloned()
        .unwrap_or_default()
}

fn update_revision(set: &StatefulSet) -> String {
    set.status
        .as_ref()
        .and_then(|status| status.update_revision.clone())
        .unwrap_or_default()
}

fn current_revision(set: &StatefulSet) -> String {
    set.status
        .as_ref()
        .and_then(|status| status.current_revision.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_statefulset_creates_ordinal_named_pods_from_its_template_owned_by_the_set() {
    let cluster = cluster().await;
    let mut set = statefulset("web", 2);
    if let Some(meta) = set
        .spec
        .as_mut()
        .and_then(|spec| spec.template.metadata.as_mut())
    {
        meta.labels
            .get_or_insert_default()
            .insert("tier".to_owned(), "front".to_owned());
        meta.annotations = Some([("example.com/note".to_owned(), "kept".to_owned())].into());
    }
    let created = create_set(&cluster, &set).await;
    let set_uid = created.uid().expect("set uid");

    let pods = wait_for_ready_pods(&cluster.client(), cluster.namespace(), "web", 2, TIMEOUT)
        .await
        .expect("two ready pods");

    for (ordinal, pod) in &pods {
        let name = format!("web-{ordinal}");
        assert_eq!(pod.name_any(), name);
        let labels = pod.labels();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("front"));
        assert_eq!(labels.get(POD_NAME_LABEL), Some(&name));
        assert!(
            !revision_of(pod).is_empty(),
            "{name} carries its revision label"
        );
        assert_eq!(
            pod.annotations()
                .get("example.com/note")
                .map(String::as_str),
            Some("kept")
        );
        let owners = pod.owner_references();
        assert_eq!(owners.len(), 1, "{name}: {owners:?}");
        assert_eq!(owners[0].kind, "StatefulSet");
        assert_eq!(owners[0].api_version, "apps/v1");
        assert_eq!(owners[0].name, "web");
        assert_eq!(owners[0].uid, set_uid);
        assert_eq!(owners[0].controller, Some(true));
        let spec = pod.spec.as_ref().expect("pod spec");
        assert_eq!(spec.containers[0].name, "app");
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some(shoal_emulator::harness::fixtures::PAUSE_IMAGE)
        );
        assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("web"));
    }
    cluster.cleanup().await;
}

#[tokio::test]
async fn ordered_ready_creates_the_next_pod_only_after_the_previous_is_ready() {
    let cluster = cluster().await;
    create_set(&cluster, &gated(statefulset("web", 3))).await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();

    wait_for_pod_names(&cluster, "web", &["web-0"]).await;
    // The gate holds web-0 unready; give the controller time to (wrongly)
    // go on before checking that it did not.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let seen = pods(&cluster, "web").await;
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![0],
        "{}",
        describe_pods(&seen)
    );
    assert!(!is_running_and_ready(&seen[&0]));

    set_pod_ready(&client, &namespace, "web-0", true)
        .await
        .expect("web-0 ready");
    wait_for_pod_names(&cluster, "web", &["web-0", "web-1"]).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let seen = pods(&cluster, "web").await;
    assert_eq!(seen.len(), 2, "{}", describe_pods(&seen));

    set_pod_ready(&client, &namespace, "web-1", true)
        .await
        .expect("web-1 ready");
    wait_for_pod_names(&cluster, "web", &["web-0", "web-1", "web-2"]).await;
    cluster.cleanup().await;
}

#[tokio::test]
async fn parallel_creates_every_pod_without_waiting_for_readiness() {
    let cluster = cluster().await;
    create_set(&cluster, &parallel(gated(statefulset("web", 3)))).await;
    let seen = wait_for_pod_names(&cluster, "web", &["web-0", "web-1", "web-2"]).await;
    assert!(
        seen.values().all(|pod| !is_running_and_ready(pod)),
        "the gate holds all of them unready: {}",
        describe_pods(&seen)
    );
    cluster.cleanup().await;
}

/// Records, in order, the first time each pod is seen terminating or gone.
fn record_removals(cluster: &TestCluster) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let api: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            let pod = match event {
                watcher::Event::Apply(pod) if pod.metadata.deletion_timestamp.is_some() => pod,
                watcher::Event::Delete(pod) => pod,
                _ => continue,
            };
            let uid = pod.uid().unwrap_or_default();
            if seen.insert(uid) && sender.send(pod.name_any()).is_err() {
                return;
            }
        }
    });
    receiver
}

#[tokio::test]
async fn scaling_down_removes_the_highest_ordinals_first_and_scaling_up_adds_after_the_highest() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &statefulset("web", 4)).await;
    let before = wait_for_ready_pods(&client, &namespace, "web", 4, TIMEOUT)
        .await
        .expect("four ready pods");
    let mut removals = record_removals(&cluster);
    // Let the watcher list first, so it sees the removals as changes.
    tokio::time::sleep(Duration::from_millis(300)).await;

    scale(&cluster, "web", 1).await;
    let after = wait_for_ready_pods(&client, &namespace, "web", 1, TIMEOUT)
        .await
        .expect("one ready pod");
    assert_eq!(
        after[&0].uid(),
        before[&0].uid(),
        "the lowest ordinal is untouched"
    );
    let mut order = Vec::new();
    while order.len() < 3 {
        let name = tokio::time::timeout(TIMEOUT, removals.recv())
            .await
            .expect("removal seen")
            .expect("watcher alive");
        order.push(name);
    }
    assert_eq!(order, vec!["web-3", "web-2", "web-1"]);

    scale(&cluster, "web", 3).await;
    let grown = wait_for_ready_pods(&client, &namespace, "web", 3, TIMEOUT)
        .await
        .expect("three ready pods");
    assert_eq!(grown[&0].uid(), before[&0].uid());
    assert_ne!(grown[&1].uid(), before[&1].uid(), "web-1 is a new pod");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_deleted_pod_is_recreated_under_the_same_name_with_a_new_uid() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &statefulset("web", 2)).await;
    let before = wait_for_ready_pods(&client, &namespace, "web", 2, TIMEOUT)
        .await
        .expect("two ready pods");
    let old_uid = before[&1].uid().expect("uid");

    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    api.delete("web-1", &DeleteParams::default())
        .await
        .expect("delete web-1");
    let replaced = cluster
        .wait_for("web-1 replaced and ready", TIMEOUT, || async {
            match api.get_opt("web-1").await {
                Ok(Some(pod))
                    if pod.uid().as_ref() != Some(&old_uid) && is_running_and_ready(&pod) =>
                {
                    Check::Done(pod)
                }
                Ok(Some(pod)) => Check::Pending(format!(
                    "uid {:?}, ready {}",
                    pod.uid(),
                    is_running_and_ready(&pod)
                )),
                Ok(None) => Check::Pending("absent".to_owned()),
                Err(error) => Check::Pending(error.to_string()),
            }
        })
        .await
        .expect("recreated");
    assert_eq!(
        replaced.labels().get(POD_NAME_LABEL).map(String::as_str),
        Some("web-1")
    );
    let now = pods(&cluster, "web").await;
    assert_eq!(now[&0].uid(), before[&0].uid(), "web-0 was not touched");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_failed_pod_is_replaced_with_a_new_one() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &statefulset("web", 1)).await;
    let before = wait_for_ready_pods(&client, &namespace, "web", 1, TIMEOUT)
        .await
        .expect("one ready pod");
    fail_pod(&client, &namespace, "web-0", "Crashed")
        .await
        .expect("fail web-0");
    let after = cluster
        .wait_for("web-0 replaced", TIMEOUT, || async {
            let now = pods(&cluster, "web").await;
            match now.get(&0) {
                Some(pod) if pod.uid() != before[&0].uid() && is_running_and_ready(pod) => {
                    Check::Done(pod.clone())
                }
                _ => Check::Pending(describe_pods(&now)),
            }
        })
        .await
        .expect("replacement");
    assert_eq!(after.name_any(), "web-0");
    cluster.cleanup().await;
}

#[tokio::test]
async fn status_tracks_replicas_readiness_revisions_and_observed_generation() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &parallel(gated(statefulset("web", 2)))).await;
    let unready = wait_for_status(&cluster, "web", "two unready replicas", |set| {
        set.status
            .as_ref()
            .is_some_and(|status| status.replicas == 2 && status.ready_replicas.unwrap_or(0) == 0)
    })
    .await;
    let first_revision = update_revision(&unready);
    assert_eq!(current_revision(&unready), first_revision);
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let revision = revisions
        .get(&first_revision)
        .await
        .expect("the update revision names a ControllerRevision");
    assert_eq!(
        revision.owner_references().first().map(|owner| &owner.uid),
        unready.uid().as_ref()
    );

    set_pod_ready(&client, &namespace, "web-0", true)
        .await
        .expect("web-0 ready");
    wait_for_status(&cluster, "web", "one ready replica", |set| {
        set.status
            .as_ref()
            .is_some_and(|status| status.ready_replicas == Some(1))
    })
    .await;
    set_pod_ready(&client, &namespace, "web-1", true)
        .await
        .expect("web-1 ready");
    wait_for_status(&cluster, "web", "two ready replicas", |set| {
        set.status
            .as_ref()
            .is_some_and(|status| status.ready_replicas == Some(2))
    })
    .await;
    set_pod_ready(&client, &namespace, "web-1", false)
        .await
        .expect("web-1 unready");
    wait_for_status(&cluster, "web", "back to one ready replica", |set| {
        set.status
            .as_ref()
            .is_some_and(|status| status.ready_replicas == Some(1))
    })
    .await;

    scale(&cluster, "web", 3).await;
    let scaled = wait_for_status(&cluster, "web", "observedGeneration of the scale", |set| {
        set.status.as_ref().is_some_and(|status| {
            status.observed_generation == set.metadata.generation && status.replicas == 3
        })
    })
    .await;
    assert!(
        scaled.metadata.generation > unready.metadata.generation,
        "a spec change moves the generation"
    );

    change_template(&cluster, "web", "2").await;
    let changed = wait_for_status(&cluster, "web", "a new update revision", |set| {
        set.status.as_ref().is_some_and(|status| {
            status.observed_generation == set.metadata.generation
                && status.update_revision.as_deref() != Some(first_revision.as_str())
        })
    })
    .await;
    assert_eq!(
        current_revision(&changed),
        first_revision,
        "the current revision stays until every pod runs the update"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_rolling_update_replaces_pods_from_the_highest_ordinal_down_to_the_partition() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let mut set = statefulset("web", 3);
    if let Some(spec) = set.spec.as_mut() {
        spec.update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("RollingUpdate".to_owned()),
            rolling_update: Some(RollingUpdateStatefulSetStrategy {
                partition: Some(1),
                max_unavailable: None,
            }),
        });
    }
    create_set(&cluster, &set).await;
    let before = wait_for_ready_pods(&client, &namespace, "web", 3, TIMEOUT)
        .await
        .expect("three ready pods");
    let old_revision = revision_of(&before[&0]);
    let mut removals = record_removals(&cluster);
    tokio::time::sleep(Duration::from_millis(300)).await;

    change_template(&cluster, "web", "2").await;
    let partial = wait_for_status(&cluster, "web", "two updated replicas", |set| {
        set.status.as_ref().is_some_and(|status| {
            status.updated_replicas == Some(2) && status.ready_replicas == Some(3)
        })
    })
    .await;
    let new_revision = update_revision(&partial);
    assert_ne!(new_revision, old_revision);
    assert_eq!(current_revision(&partial), old_revision);
    let now = wait_for_ready_pods(&client, &namespace, "web", 3, TIMEOUT)
        .await
        .expect("three ready pods");
    assert_eq!(revision_of(&now[&2]), new_revision);
    assert_eq!(revision_of(&now[&1]), new_revision);
    assert_eq!(
        now[&2]
            .annotations()
            .get("example.com/version")
            .map(String::as_str),
        Some("2"),
        "the replacement carries the new template"
    );
    assert_eq!(revision_of(&now[&0]), old_revision, "below the partition");
    assert_eq!(now[&0].uid(), before[&0].uid());
    let mut order = Vec::new();
    while order.len() < 2 {
        order.push(
            tokio::time::timeout(TIMEOUT, removals.recv())
                .await
                .expect("removal seen")
                .expect("watcher alive"),
        );
    }
    assert_eq!(order, vec!["web-2", "web-1"]);

    sets(&cluster)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "updateStrategy": {
                "rollingUpdate": { "partition": 0 }
            } } })),
        )
        .await
        .expect("lower the partition");
    let done = wait_for_status(&cluster, "web", "the update complete", |set| {
        set.status.as_ref().is_some_and(|status| {
            status.updated_replicas == Some(3)
                && status.ready_replicas == Some(3)
                && status.current_revision == status.update_revision
        })
    })
    .await;
    assert_eq!(current_revision(&done), new_revision);
    let now = wait_for_ready_pods(&client, &namespace, "web", 3, TIMEOUT)
        .await
        .expect("three ready pods");
    assert!(now.values().all(|pod| revision_of(pod) == new_revision));
    cluster.cleanup().await;
}

#[tokio::test]
async fn on_delete_keeps_outdated_pods_until_something_deletes_them() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let mut set = statefulset("web", 2);
    if let Some(spec) = set.spec.as_mut() {
        spec.update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("OnDelete".to_owned()),
            rolling_update: None,
        });
    }
    create_set(&cluster, &set).await;
    let before = wait_for_ready_pods(&client, &namespace, "web", 2, TIMEOUT)
        .await
        .expect("two ready pods");
    let old_revision = revision_of(&before[&0]);

    change_template(&cluster, "web", "2").await;
    let changed = wait_for_status(&cluster, "web", "a new update revision", |set| {
        update_revision(set) != old_revision
            && set
                .status
                .as_ref()
                .and_then(|status| status.observed_generation)
                == set.metadata.generation
    })
    .await;
    let new_revision = update_revision(&changed);
    // Give a (wrong) rolling replacement time to start before checking.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let untouched = pods(&cluster, "web").await;
    for ordinal in [0, 1] {
        assert_eq!(untouched[&ordinal].uid(), before[&ordinal].uid());
        assert_eq!(revision_of(&untouched[&ordinal]), old_revision);
    }

    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    api.delete("web-1", &DeleteParams::default())
        .await
        .expect("delete web-1");
    let after = cluster
        .wait_for("web-1 recreated at the new revision", TIMEOUT, || async {
            let now = pods(&cluster, "web").await;
            match now.get(&1) {
                Some(pod) if revision_of(pod) == new_revision && is_running_and_ready(pod) => {
                    Check::Done(now)
                }
                _ => Check::Pending(describe_pods(&now)),
            }
        })
        .await
        .expect("web-1 recreated");
    assert_eq!(revision_of(&after[&0]), old_revision);
    assert_eq!(after[&0].uid(), before[&0].uid());
    cluster.cleanup().await;
}

#[tokio::test]
async fn pods_are_listed_by_the_set_selector_only() {
    // Two sets side by side: each controls only its own pods.
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &statefulset("web", 1)).await;
    create_set(&cluster, &statefulset("db", 2)).await;
    wait_for_ready_pods(&client, &namespace, "web", 1, TIMEOUT)
        .await
        .expect("web");
    wait_for_ready_pods(&client, &namespace, "db", 2, TIMEOUT)
        .await
        .expect("db");
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    let all = api.list(&ListParams::default()).await.expect("list");
    let mut names: Vec<String> = all.items.iter().map(|pod| pod.name_any()).collect();
    names.sort();
    assert_eq!(names, vec!["db-0", "db-1", "web-0"]);
    cluster.cleanup().await;
}

#[tokio::test]
async fn old_controller_revisions_are_pruned_to_the_history_limit() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let mut set = statefulset("web", 1);
    if let Some(spec) = set.spec.as_mut() {
        spec.revision_history_limit = Some(1);
    }
    create_set(&cluster, &set).await;
    let mut seen_revisions = Vec::new();
    for version in ["1", "2", "3", "4"] {
        change_template(&cluster, "web", version).await;
        let settled = wait_for_status(&cluster, "web", "the update rolled out", |set| {
            set.status.as_ref().is_some_and(|status| {
                status.observed_generation == set.metadata.generation
                    && status.current_revision == status.update_revision
                    && status.ready_replicas == Some(1)
            })
        })
        .await;
        seen_revisions.push(update_revision(&settled));
    }
    let distinct: std::collections::BTreeSet<&String> = seen_revisions.iter().collect();
    assert_eq!(distinct.len(), 4, "each template got its own revision");
    let revisions: Api<ControllerRevision> = Api::namespaced(client, &namespace);
    let remaining = cluster
        .wait_for(
            "history truncated to one idle revision",
            TIMEOUT,
            || async {
                match revisions
                    .list(&ListParams::default().labels("app=web"))
                    .await
                {
                    Ok(list) if list.items.len() == 2 => Check::Done(list.items),
                    Ok(list) => Check::Pending(
                        list.items
                            .iter()
                            .map(|revision| {
                                format!("{}#{}", revision.name_any(), revision.revision)
                            })
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                    Err(error) => Check::Pending(error.to_string()),
                }
            },
        )
        .await
        .expect("pruned");
    let mut names: Vec<String> = remaining
        .iter()
        .map(|revision| revision.name_any())
        .collect();
    names.sort();
    let mut expected = vec![seen_revisions[2].clone(), seen_revisions[3].clone()];
    expected.sort();
    assert_eq!(
        names, expected,
        "the live revision and the newest idle one are kept"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn describe_statefulset_shows_the_pod_creations_and_deletions_as_events() {
    let cluster = cluster().await;
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    create_set(&cluster, &parallel(statefulset("web", 2))).await;
    wait_for_ready_pods(&client, &namespace, "web", 2, TIMEOUT)
        .await
        .expect("two ready pods");
    scale(&cluster, "web", 1).await;
    wait_for_pod_names(&cluster, "web", &["web-0"]).await;

    // The real controller's reasons and wording.
    let expected = [
        (
            "SuccessfulCreate",
            "create Pod web-0 in StatefulSet web successful",
        ),
        (
            "SuccessfulCreate",
            "create Pod web-1 in StatefulSet web successful",
        ),
        (
            "SuccessfulDelete",
            "delete Pod web-1 in StatefulSet web successful",
        ),
    ];
    cluster
        .wait_for("the events in kubectl describe", TIMEOUT, || async {
            let output = cluster
                .kubectl(&["describe", "statefulset", "web"])
                .await
                .expect("kubectl");
            let Some(events) = output.stdout.split("\nEvents:").nth(1) else {
                return Check::Pending(format!("no Events section: {}", output.stdout));
            };
            let all_there = expected.iter().all(|(reason, message)| {
                events
                    .lines()
                    .any(|line| line.contains(reason) && line.contains(message))
            });
            if all_there {
                Check::Done(())
            } else {
                Check::Pending(events.to_owned())
            }
        })
        .await
        .expect("every pod creation and deletion is an Event of the StatefulSet");
    cluster.cleanup().await;
}
