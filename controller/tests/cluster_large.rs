//! Large job lists: no object the controller writes exceeds the API's 1 MiB
//! limit, the index becomes a summary, and the slices still hold every job
//! exactly once.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use shoal_controller::reconcile::observe;
use shoal_core::format::parse_slice;

use common::{Env, swarm_yaml};

/// The API server refuses a ConfigMap whose data exceeds 1 MiB.
const CONFIGMAP_LIMIT: usize = 1024 * 1024;

fn data_bytes(cm: &ConfigMap) -> usize {
    let text: usize = cm
        .data
        .iter()
        .flatten()
        .map(|(key, value)| key.len() + value.len())
        .sum();
    let binary: usize = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(key, value)| key.len() + value.0.len())
        .sum();
    text + binary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_jobs_on_four_members_fit_in_objects_under_the_size_limit() {
    let Some(env) = Env::start_emulated(
        "a 1,000,000-job list does not fit in the one ConfigMap a real API server accepts as input",
    )
    .await
    else {
        return;
    };
    const JOBS: usize = 1_000_000;
    let keys: Vec<String> = (0..JOBS).map(|i| format!("j{i:07}")).collect();
    let jobs: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "jobs"},
        "data": {"config.yml": format!("jobs: [{}]", keys.join(","))},
    }))
    .expect("jobs ConfigMap");
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &jobs)
        .await
        .expect("create the job ConfigMap");
    let controller = env.start_controller();
    env.pool("worker", "demo", 4).await;
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
        written.items.len() >= 4 + 2,
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
    assert!(index_text.contains("jobCount: 250000"), "{index_text:.300}");

    // What a member reads, reassembled from parts or gzip, holds every job once.
    let swarm = env.swarm("demo").await;
    let observation = observe(&swarm, &env.client).await.expect("observe");
    assert_eq!(observation.slices.len(), 4);
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for (member, object) in &observation.slices {
        assert_eq!(object.decode_error, None, "{member}");
        let text = object.text.as_deref().expect("slice text");
        let slice = parse_slice(text).expect("a valid slice");
        assert_eq!(slice.jobs.len(), JOBS / 4, "{member}");
        total += slice.jobs.len();
        seen.extend(slice.jobs.iter().map(|key| key.as_str().to_owned()));
    }
    assert_eq!(total, JOBS);
    assert_eq!(seen.len(), JOBS);
    controller.stop().await;
    env.finish().await;
}
