//! Job lists over several ConfigMaps (`jobsFrom.configMapKeyRefs`, `jobsFrom.selector`):
//! a list far past what one object carries (the API server refuses a ConfigMap over
//! 1 MiB, the emulator as a real one) converges, a key repeated in two parts is refused
//! naming both, a missing part is named and the list in force kept, and removing a part
//! shrinks the list, as `kubectl shoal diff` previews. The `sticky` record of such a list
//! (past 1 MiB even compressed) is split over several ConfigMaps, so a controller
//! restarted mid-rollout recovers the owners and moves no more than the lower bound.
//! Runs on the emulator and on a real cluster.

use crate::common;
use crate::plugin_common;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use shoal_controller::api::swarm::SwarmStatus;
use shoal_controller::plugin::preview::DiffReport;
use shoal_controller::swarm::observe::observe;
use shoal_core::format::parse_slice;
use shoal_core::{Assignment, MemberId, Slice, diff};

use common::{Env, acknowledge, all_jobs, eventually, swarm_yaml};
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

/// Creates the ten parts of a 1,000,000-job list, each under the object limit.
async fn million_job_parts(env: &Env, parts: usize, per_part: usize) {
    let mut total_bytes = 0;
    for index in 0..parts {
        let cm = part(&format!("jobs-{index}"), &keys(index * per_part, per_part));
        let bytes = cm.data.as_ref().expect("data")["config.yml"].len();
        assert!(bytes < CONFIGMAP_LIMIT, "part {index} holds {bytes} bytes");
        total_bytes += bytes;
        create(env, &cm).await;
    }
    assert!(
        total_bytes > 8 * CONFIGMAP_LIMIT,
        "the list must be far past one object: {total_bytes} bytes"
    );
}

/// The `jobsFrom` of a Swarm reading the parts by label.
fn selector_spec() -> String {
    format!(
        "  jobsFrom:\n    selector:\n      matchLabels:\n        {}: {}\n      key: config.yml\n",
        PART_LABEL.0, PART_LABEL.1
    )
}

/// Every member's slice as the controller reads it (parts and gzip reassembled).
async fn read_slices(env: &Env) -> BTreeMap<String, Slice> {
    let swarm = env.swarm("demo").await;
    let observation = observe(&swarm, &env.client, None, None)
        .await
        .expect("observe");
    observation
        .slices
        .iter()
        .map(|(member, object)| {
            let text = object.text.as_deref().expect("slice text");
            (member.clone(), parse_slice(text).expect("a valid slice"))
        })
        .collect()
}

fn assignment_of(slices: &BTreeMap<String, Slice>) -> Assignment {
    Assignment::from_slices(slices.iter().map(|(pod, slice)| {
        (
            MemberId::from_pod_name("worker", pod).expect("a worker pod"),
            slice.jobs.clone(),
        )
    }))
    .expect("one owner per job")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_restarted_mid_rollout_of_a_million_sticky_jobs_moves_only_the_lower_bound() {
    const PARTS: usize = 10;
    const PER_PART: usize = 100_000;
    const JOBS: usize = PARTS * PER_PART;
    let env = Env::start().await;
    million_job_parts(&env, PARTS, PER_PART).await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 4).await;
    env.ready_pool("worker", 4).await;
    let spec = format!("  strategy:\n    type: sticky\n{}", selector_spec());
    env.apply(&swarm_yaml("demo", &[], &spec)).await;
    env.in_force("demo", 1, Duration::from_secs(900)).await;

    let first = read_slices(&env).await;
    assert_eq!(first.len(), 4);

    // Every member runs a sidecar that has applied revision 1: revokes now wait for it.
    for (pod, slice) in &first {
        acknowledge(&env, pod, slice.revision, &slice.hash).await;
    }
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=5"])
        .await;
    env.ready_pool("worker", 5).await;
    // Mid-rollout: the four revokes of revision 2 written, none acknowledged, nothing granted.
    let revoked = eventually("revision 2 revoked", Duration::from_secs(600), || async {
        let slices = read_slices(&env).await;
        let old: Vec<&Slice> = first.keys().filter_map(|pod| slices.get(pod)).collect();
        (old.len() == 4 && old.iter().all(|slice| slice.revision == 2)).then_some(slices)
    })
    .await;
    assert!(
        revoked
            .get("worker-4")
            .is_none_or(|slice| slice.jobs.is_empty()),
        "the newcomer was granted before the revokes settled"
    );

    // A new controller, with only the cluster to go by, finds the owners of revision 2
    // in its record: no new revision, and the revoked slices stay as they are. (Before
    // records were split, the record of revision 2 had no owners and the restarted
    // controller started from these half-revoked slices; for this scale-up `sticky`
    // happened to recompute the same target from them, so on that code the test fails
    // only where it checks the record kept whole, at the end.)
    controller.kill().await;
    let controller = env.start_controller();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let status = status(&env).await;
    assert_eq!((status.current_revision, status.latest_revision), (2, 2));
    assert!(
        status
            .conditions
            .iter()
            .all(|condition| !condition.message.contains("HistoryDamaged")
                && !condition.reason.starts_with("History")),
        "{:?}",
        status.conditions
    );
    let after_restart = read_slices(&env).await;
    for pod in first.keys() {
        assert_eq!(after_restart[pod].hash, revoked[pod].hash, "{pod} changed");
    }

    // The sidecars apply the revokes; the grant follows and the rollout ends.
    for pod in first.keys() {
        let slice = &after_restart[pod];
        acknowledge(&env, pod, slice.revision, &slice.hash).await;
    }
    env.in_force("demo", 2, Duration::from_secs(600)).await;
    let second = eventually("the newcomer granted", Duration::from_secs(600), || async {
        let slices = read_slices(&env).await;
        (slices.len() == 5 && slices.values().map(|slice| slice.jobs.len()).sum::<usize>() == JOBS)
            .then_some(slices)
    })
    .await;
    let change = diff(&assignment_of(&first), &assignment_of(&second));
    // 4 -> 5 members: each old member gives up its surplus over 200,000.
    assert_eq!(change.lower_bound, JOBS / 5);
    assert_eq!(change.moved.len(), change.lower_bound);
    // The record (jobs and owners) is past 1 MiB even compressed: kept in parts, each
    // under the limit, the first naming how many.
    let history = Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .list(&ListParams::default().labels("shoal.dev/revision-history=true"))
        .await
        .expect("list the history");
    let head = history
        .items
        .iter()
        .find(|cm| cm.name_any() == "demo-rev-2")
        .expect("the record of revision 2");
    let parts: usize = head.annotations()["shoal.dev/parts"]
        .parse()
        .expect("a count");
    assert!(parts > 1, "the record of 1,000,000 jobs fits one object?");
    for cm in &history.items {
        let bytes = serde_json::to_vec(cm).expect("serialize").len();
        assert!(
            bytes < CONFIGMAP_LIMIT,
            "{} is {bytes} bytes",
            cm.name_any()
        );
    }
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_jobs_over_ten_config_maps_converge_and_removing_one_shrinks_the_list_as_diff_previews()
 {
    const PARTS: usize = 10;
    const PER_PART: usize = 100_000;
    let env = Env::start().await;
    million_job_parts(&env, PARTS, PER_PART).await;
    let controller = env.start_controller();
    env.pool("worker", "demo", 4).await;
    let from = format!("  approval:\n    policy: Manual\n{}", selector_spec());
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
