//! Job lists over several ConfigMaps (`jobsFrom.configMapKeyRefs`, `jobsFrom.selector`):
//! a list far past what one object carries (the API server refuses a ConfigMap over
//! 1 MiB, the emulator as a real one) converges, a key repeated in two parts is refused
//! naming both, a missing part is named and the list in force kept, and removing a part
//! shrinks the list, as `kubectl shoal diff` previews. Runs on the emulator and on a real
//! cluster.

mod common;
mod plugin_common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use shoal_controller::crd::SwarmStatus;
use shoal_controller::plugin::preview::DiffReport;

use common::{Env, all_jobs, eventually, swarm_yaml};
use plugin_common::shoal_json;

/// The API server refuses a ConfigMap whose data exceeds 1 MiB.
const CONFIGMAP_LIMIT: usize = 1024 * 1024;

/// The label the test's job-list parts carry.
const PART_LABEL: (&str, &str) = ("shoal.dev/test-job-list", "demo");

/// A ConfigMap `name` labelled [`PART_LABEL`] whose `config.yml` lists `keys`.
fn part(name: &str, keys: &[String]) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {PART_LABEL.0: PART_LABEL.1}},
        "data": {"config.yml": format!("jobs: [{}]", keys.join(","))},
    }))
    .expect("a job-list ConfigMap")
}

/// Keys `j0000000`… from `first`, `count` of them.
fn keys(first: usize, count: usize) -> Vec<String> {
    (first..first + count).map(|i| format!("j{i:07}")).collect()
}

async fn create(env: &Env, cm: &ConfigMap) {
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), cm)
        .await
        .expect("create a job-list ConfigMap");
}

async fn delete(env: &Env, name: &str) {
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete a job-list ConfigMap");
}

async fn status(env: &Env) -> SwarmStatus {
    env.swarm("demo").await.status.unwrap_or_default()
}

/// Waits for a condition `kind` (e.g. Degraded) whose message holds every one of `words`.
async fn condition_naming(env: &Env, kind: &str, words: &[&str]) -> String {
    eventually(
        &format!("a {kind} condition naming {words:?}"),
        Duration::from_secs(60),
        || async {
            status(env)
                .await
                .conditions
                .into_iter()
                .find(|condition| condition.type_ == kind && condition.status == "True")
                .map(|condition| condition.message)
                .filter(|message| words.iter().all(|word| message.contains(word)))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_jobs_over_ten_config_maps_converge_and_removing_one_shrinks_the_list_as_diff_previews()
 {
    const PARTS: usize = 10;
    const PER_PART: usize = 100_000;
    let env = Env::start().await;
    let mut total_bytes = 0;
    for index in 0..PARTS {
        let cm = part(&format!("jobs-{index}"), &keys(index * PER_PART, PER_PART));
        let bytes = cm.data.as_ref().expect("data")["config.yml"].len();
        assert!(bytes < CONFIGMAP_LIMIT, "part {index} holds {bytes} bytes");
        total_bytes += bytes;
        create(&env, &cm).await;
    }
    assert!(
        total_bytes > 8 * CONFIGMAP_LIMIT,
        "the list must be far past one object: {total_bytes} bytes"
    );
    let controller = env.start_controller();
    env.pool("worker", "demo", 4).await;
    let from = format!(
        "  approval:\n    policy: Manual\n  jobsFrom:\n    selector:\n      matchLabels:\n        {}: {}\n      key: config.yml\n",
        PART_LABEL.0, PART_LABEL.1
    );
    env.apply(&swarm_yaml("demo", &[], &from)).await;
    eventually("revision 1 pending", Duration::from_secs(600), || async {
        status(&env)
            .await
            .pending_revision
            .filter(|p| p.revision == 1)
    })
    .await;
    env.approve_pending("demo").await;
    env.in_force("demo", 1, Duration::from_secs(600)).await;
    assert_eq!(status(&env).await.jobs, (PARTS * PER_PART) as u64);

    // The last part goes: the pending revision stops exactly its jobs, and the plugin,
    // reading the same parts, previews the same revision.
    delete(&env, &format!("jobs-{}", PARTS - 1)).await;
    let pending = eventually("revision 2 pending", Duration::from_secs(600), || async {
        status(&env)
            .await
            .pending_revision
            .filter(|p| p.revision == 2)
    })
    .await;
    assert_eq!(pending.summary.jobs_stopped, PER_PART as u64);
    assert_eq!(pending.summary.jobs_started, 0);
    let preview: DiffReport = shoal_json(&env, &["diff", "demo"]).await;
    assert_eq!(preview.revision, Some(2));
    assert_eq!(preview.summary.as_ref(), Some(&pending.summary));
    assert_eq!(preview.deleted.len(), PER_PART);
    let first_removed = format!("j{:07}", (PARTS - 1) * PER_PART);
    assert!(
        preview.deleted.iter().any(|job| job.job == first_removed),
        "{first_removed} is not among the deleted jobs"
    );
    env.approve_pending("demo").await;
    env.in_force("demo", 2, Duration::from_secs(600)).await;
    assert_eq!(status(&env).await.jobs, ((PARTS - 1) * PER_PART) as u64);
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_two_listed_config_maps_is_refused_naming_both_and_the_list_in_force_is_kept() {
    let env = Env::start().await;
    create(&env, &part("jobs-a", &keys(0, 4))).await;
    create(&env, &part("jobs-b", &keys(4, 4))).await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 2).await;
    let from = "  jobsFrom:\n    configMapKeyRefs:\n    - {name: jobs-a, key: config.yml}\n    - {name: jobs-b, key: config.yml}\n";
    env.apply(&swarm_yaml("demo", &[], from)).await;
    env.in_force("demo", 1, Duration::from_secs(60)).await;
    let in_force = env.slices("demo").await;
    assert_eq!(all_jobs(&in_force), keys(0, 8));

    // jobs-b now repeats jobs-a's j0000002 at its position 1.
    let mut repeated = keys(4, 4);
    repeated.insert(1, "j0000002".to_owned());
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .replace("jobs-b", &PostParams::default(), &{
            let mut cm = part("jobs-b", &repeated);
            cm.metadata.resource_version = None;
            cm
        })
        .await
        .expect("replace jobs-b");
    let message = condition_naming(
        &env,
        "Degraded",
        &[
            "ConfigMap jobs-b key config.yml jobs[1] \"j0000002\" repeats ConfigMap jobs-a key config.yml jobs[2]",
        ],
    )
    .await;
    assert!(message.contains("demo"), "{message}");
    assert_eq!(status(&env).await.current_revision, 1);
    assert_eq!(env.slices("demo").await, in_force);

    // A listed part that does not exist is named; the list in force stays.
    env.apply(&swarm_yaml(
        "demo",
        &[],
        "  jobsFrom:\n    configMapKeyRefs:\n    - {name: jobs-a, key: config.yml}\n    - {name: jobs-gone, key: config.yml}\n",
    ))
    .await;
    condition_naming(
        &env,
        "Degraded",
        &["jobsFrom ConfigMap jobs-gone does not exist"],
    )
    .await;
    assert_eq!(status(&env).await.current_revision, 1);
    assert_eq!(env.slices("demo").await, in_force);

    // Back to the two good parts, with jobs-b without the repeat: a new revision with both.
    delete(&env, "jobs-b").await;
    create(&env, &part("jobs-b", &keys(4, 2))).await;
    env.apply(&swarm_yaml("demo", &[], from)).await;
    env.in_force("demo", 2, Duration::from_secs(60)).await;
    assert_eq!(all_jobs(&env.slices("demo").await), keys(0, 6));
    controller.stop().await;
    env.finish().await;
}
