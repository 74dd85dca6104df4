//! The controller writes and deletes only ConfigMaps its Swarm owns: a user's
//! ConfigMap (or another Swarm's) under a name Shoal would use is left alone,
//! reported as Degraded with a Warning naming both objects, and survives the
//! Swarm's deletion.

use crate::common;

use std::time::Duration;

use common::{Env, all_jobs, eventually, job_keys, swarm_yaml};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

const WAIT: Duration = Duration::from_secs(30);

async fn config_map(env: &Env, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .get_opt(name)
        .await
        .expect("get ConfigMap")
}

async fn degraded_message(env: &Env, swarm: &str) -> Option<String> {
    let status = env.swarm(swarm).await.status?;
    status
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "OwnershipConflict")
        .map(|c| c.message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_list_configmap_named_like_its_swarm_is_never_taken_over_nor_deleted() {
    let env = Env::start().await;
    let controller = env.start_controller();
    // The layout users bring from the seed operator: the job list in a ConfigMap named like
    // the Swarm, which is also the name of Shoal's index.
    env.kubectl(&[
        "create",
        "configmap",
        "demo",
        "--from-literal=config.yml=jobs: [stream:a, stream:b, stream:c]",
    ])
    .await;
    env.pool("worker", "demo", 2).await;
    env.apply(&swarm_yaml(
        "demo",
        &[],
        "  jobsFrom:\n    configMapKeyRef: {name: demo, key: config.yml}\n",
    ))
    .await;
    let message = eventually("Degraded: OwnershipConflict", WAIT, || async {
        degraded_message(&env, "demo").await
    })
    .await;
    assert!(
        message.contains("ConfigMap demo exists and is not owned by Swarm demo"),
        "{message}"
    );
    // The jobs run all the same.
    eventually("every job in a slice", WAIT, || async {
        (all_jobs(&env.slices("demo").await) == ["stream:a", "stream:b", "stream:c"]).then_some(())
    })
    .await;
    let events = eventually("an OwnershipConflict Warning", WAIT, || async {
        let events = env.event_messages().await;
        events.contains("OwnershipConflict").then_some(events)
    })
    .await;
    assert!(events.contains("ConfigMap demo exists"), "{events}");
    let user_map = config_map(&env, "demo")
        .await
        .expect("the user's ConfigMap");
    assert_eq!(
        user_map
            .data
            .unwrap_or_default()
            .get("config.yml")
            .map(String::as_str),
        Some("jobs: [stream:a, stream:b, stream:c]"),
        "written over"
    );
    assert!(
        user_map
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    env.kubectl(&["delete", "swarm", "demo", "--wait=false"])
        .await;
    eventually("the Swarm's own ConfigMaps collected", WAIT, || async {
        env.slice_maps("demo").await.is_empty().then_some(())
    })
    .await;
    assert!(
        config_map(&env, "demo").await.is_some(),
        "deleting the Swarm deleted the user's ConfigMap"
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_swarms_never_fight_over_one_configmap() {
    let env = Env::start().await;
    let controller = env.start_controller();
    env.pool("worker", "a", 1).await;
    env.apply(&swarm_yaml("a", &job_keys(4), "")).await;
    env.in_force("a", 1, WAIT).await;
    let slice = config_map(&env, "worker-0-slice").await.expect("a's slice");
    // A second Swarm whose index is named like the first one's slice.
    env.pool("other", "worker-0-slice", 1).await;
    env.apply(&swarm_yaml("worker-0-slice", &job_keys(2), ""))
        .await;
    let message = eventually("the second Swarm Degraded", WAIT, || async {
        degraded_message(&env, "worker-0-slice").await
    })
    .await;
    assert!(message.contains("it is owned by Swarm a"), "{message}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = config_map(&env, "worker-0-slice").await.expect("a's slice");
    assert_eq!(
        after.metadata.resource_version, slice.metadata.resource_version,
        "the second Swarm wrote over the first one's slice"
    );
    assert_eq!(env.slices("a").await["worker-0"], job_keys(4));
    controller.stop().await;
    env.finish().await;
}

/// A Swarm under Manual approval with revision 1 (6 jobs over 2 members) in force.
async fn manual_swarm_in_force(env: &Env) {
    env.pool("worker", "demo", 2).await;
    let manual = "  approval:\n    policy: Manual\n";
    env.apply(&swarm_yaml("demo", &job_keys(6), manual)).await;
    eventually("revision 1 pending", WAIT, || async {
        env.swarm("demo").await.status?.pending_revision
    })
    .await;
    env.approve_pending("demo").await;
    env.in_force("demo", 1, WAIT).await;
}

/// A history record of revision 1 giving every job to nobody but `stream:evil`.
fn forged_record() -> String {
    serde_json::json!({
        "revision": 1,
        "hash": format!("sha256:{}", "0".repeat(64)),
        "strategy": {"type": "bounded"},
        "members": ["worker-0", "worker-1"],
        "jobs": ["stream:evil"],
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_history_record_labelled_like_shoals_is_not_read_and_moves_nothing() {
    let env = Env::start().await;
    let controller = env.start_controller();
    manual_swarm_in_force(&env).await;
    let before = env.slices("demo").await;
    // While the controller is down, the record of the revision in force is replaced by
    // one labelled exactly like Shoal's own, with another job list.
    controller.stop().await;
    env.kubectl(&["delete", "configmap", "demo-rev-1"]).await;
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-rev-1\n  labels:\n    shoal.dev/swarm: demo\n    shoal.dev/revision-history: \"true\"\n    shoal.dev/revision: \"1\"\ndata:\n  revision.json: '{}'\n",
        forged_record()
    ))
    .await;
    let controller = env.start_controller();
    let message = eventually("the forged record reported", WAIT, || async {
        degraded_message(&env, "demo").await
    })
    .await;
    assert!(message.contains("ConfigMap demo-rev-1"), "{message}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.slices("demo").await,
        before,
        "a forged record moved jobs"
    );
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_record_edited_by_hand_is_not_read_and_is_written_back() {
    let env = Env::start().await;
    let controller = env.start_controller();
    manual_swarm_in_force(&env).await;
    let before = env.slices("demo").await;
    let patch = serde_json::json!({"data": {"revision.json": forged_record()}}).to_string();
    env.kubectl(&[
        "patch",
        "configmap",
        "demo-rev-1",
        "--type",
        "merge",
        "-p",
        &patch,
    ])
    .await;
    let events = eventually("a ConfigMapEdited Warning", WAIT, || async {
        let events = env.event_messages().await;
        events.contains("ConfigMapEdited").then_some(events)
    })
    .await;
    assert!(events.contains("changed by kubectl-patch"), "{events}");
    eventually("the record written back", WAIT, || async {
        let text = env
            .kubectl(&[
                "get",
                "configmap",
                "demo-rev-1",
                "-o",
                "jsonpath={.data.revision\\.json}",
            ])
            .await;
        (!text.contains("stream:evil") && text.contains("stream:005")).then_some(())
    })
    .await;
    eventually("Recovered", WAIT, || async {
        env.event_messages()
            .await
            .contains("Recovered")
            .then_some(())
    })
    .await;
    assert_eq!(
        env.slices("demo").await,
        before,
        "an edited record moved jobs"
    );
    controller.stop().await;
    env.finish().await;
}
