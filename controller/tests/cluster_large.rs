//! Large job lists: the largest list one ConfigMap can carry to a real API server
//! (1 MiB of data) is split into objects under the limit, the index becomes a
//! summary, and the slices still hold every job exactly once. A list beyond what
//! one ConfigMap carries (the 1,000,000-job list this test used to feed through a
//! 9 MB ConfigMap) is refused by the API server itself, on the emulator as on a
//! real cluster, so Shoal never sees it; such a list is split over several
//! ConfigMaps (`cluster_joblists.rs`). Runs on the emulator and on a real cluster.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use shoal_controller::swarm::observe::observe;
use shoal_core::format::parse_slice;

use common::{Env, swarm_yaml};

/// The API server refuses a ConfigMap whose data exceeds 1 MiB.
const CONFIGMAP_LIMIT: usize = 1024 * 1024;

/// The most `j000000`-style keys (7 bytes and a comma each) one ConfigMap's
/// `jobs: [...]` document holds within [`CONFIGMAP_LIMIT`].
const LARGEST_LIST: usize = (CONFIGMAP_LIMIT - "jobs: []".len() + 1) / 8;

/// The data of a ConfigMap as the API server counts it: values, not keys.
fn data_bytes(cm: &ConfigMap) -> usize {
    let text: usize = cm.data.iter().flatten().map(|(_, value)| value.len()).sum();
    let binary: usize = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(_, value)| value.0.len())
        .sum();
    text + binary
}

/// A ConfigMap `name` whose `config.yml` lists `count` jobs `j0000000`-style
/// (`digits` wide).
fn jobs_config_map(name: &str, count: usize, digits: usize) -> ConfigMap {
    let keys: Vec<String> = (0..count).map(|i| format!("j{i:0digits$}")).collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": {"config.yml": format!("jobs: [{}]", keys.join(","))},
    }))
    .expect("jobs ConfigMap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_job_list_in_one_config_map_is_refused_by_the_api_server() {
    let env = Env::start().await;
    let refused = Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .create(
            &PostParams::default(),
            &jobs_config_map("jobs", 1_000_000, 7),
        )
        .await;
    // 9 MB of request body: over the server's 3 MiB request limit, refused before
    // the 1 MiB ConfigMap limit is even checked.
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 413, "{}", status.message);
            assert_eq!(status.reason, "RequestEntityTooLarge");
        }
        other => panic!("a 9 MB ConfigMap was not refused: {other:?}"),
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_list_one_config_map_carries_is_split_into_objects_under_the_limit() {
    let env = Env::start().await;
    const JOBS: usize = LARGEST_LIST;
    const MEMBERS: usize = 2;
    let jobs = jobs_config_map("jobs", JOBS, 6);
    assert!(
        data_bytes(&jobs) <= CONFIGMAP_LIMIT,
        "the input itself must fit: {} bytes",
        data_bytes(&jobs)
    );
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &jobs)
        .await
        .expect("create the job ConfigMap");
    let controller = env.start_controller();
    env.pool("worker", "demo", MEMBERS as u32).await;
    let from = "  jobsFrom:\n    configMapKeyRef:\n      name: jobs\n      key: config.yml\n";
    env.apply(&swarm_yaml("demo", &[], from)).await;
    let started = std::time::Instant::now();
    loop {
        let status = env.swarm("demo").await.status.unwrap_or_default();
        if status.current_revision == 1 && status.phase.as_deref() == Some("Ready") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "revision 1 not in force after 10 minutes: phase {:?}, last error {:?}",
            status.phase,
            status.last_error
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let written = Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .list(&ListParams::default().labels("shoal.dev/swarm=demo"))
        .await
        .expect("list ConfigMaps");
    assert!(
        written.items.len() > MEMBERS,
        "expected slices, index and history: {:?}",
        written
            .items
            .iter()
            .map(|cm| cm.name_any())
            .collect::<Vec<_>>()
    );
    for cm in &written.items {
        let size = data_bytes(cm);
        let object = serde_json::to_vec(cm).expect("serialize").len();
        assert!(
            size <= CONFIGMAP_LIMIT && object <= CONFIGMAP_LIMIT + 64 * 1024,
            "{} holds {size} bytes of data ({object} bytes as JSON)",
            cm.name_any()
        );
    }
    let index = written
        .items
        .iter()
        .find(|cm| cm.name_any() == "demo")
        .expect("index ConfigMap");
    let index_text = index
        .data
        .as_ref()
        .and_then(|data| data.get("config.yml"))
        .expect("index config.yml");
    assert!(index_text.contains("summary: true"), "{index_text:.300}");
    assert!(
        index_text.contains(&format!("jobCount: {}", JOBS / MEMBERS)),
        "{index_text:.300}"
    );

    // What a member reads, reassembled from parts or gzip, holds every job once.
    let swarm = env.swarm("demo").await;
    let observation = observe(&swarm, &env.client, None, None)
        .await
        .expect("observe");
    assert_eq!(observation.slices.len(), MEMBERS);
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for (member, object) in &observation.slices {
        assert_eq!(object.decode_error, None, "{member}");
        let text = object.text.as_deref().expect("slice text");
        let slice = parse_slice(text).expect("a valid slice");
        assert!(slice.jobs.len().abs_diff(JOBS / MEMBERS) <= 1, "{member}");
        total += slice.jobs.len();
        seen.extend(slice.jobs.iter().map(|key| key.as_str().to_owned()));
    }
    assert_eq!(total, JOBS);
    assert_eq!(seen.len(), JOBS);
    controller.stop().await;
    env.finish().await;
}
