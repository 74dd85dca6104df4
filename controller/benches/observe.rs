//! What one Swarm pass's observe costs at fleet size, and where: each list it sends, and
//! the whole observe with and without the memo of decoded revision records
//! (`cluster::decoded`).
//!
//! The cluster is the emulator with its simulated StatefulSet controller and kubelet
//! (members are real pods); the Swarm's ConfigMaps are written as the controller writes
//! them (one slice per member, the index, `revisionHistoryLimit` = 10 records of the
//! whole assignment, split past the size limit), and every member has its Lease. No
//! controller runs: the bench calls `swarm::observe::observe` itself, over HTTPS with the
//! kube client, as a pass does.
//!
//! The last figure is what the controller's pass costs: the memo, and the pools, pods and
//! member Leases read from its watch caches (`cluster::watched`).
//!
//! `cargo bench -p shoal-controller --bench observe` (1,000 members × 100,000 jobs;
//! `-- --quick` for 100 × 10,000). Prints medians over the rounds.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use shoal_controller::api::swarm::Swarm;
use shoal_controller::cluster::decoded::Decoded;
use shoal_controller::cluster::watched;
use shoal_controller::swarm::decide;
use shoal_controller::swarm::observe::observe;
use shoal_core::format;
use shoal_core::names;
use shoal_emulator::harness::{Check, KubectlOutput, TestCluster};
use shoal_emulator::sim::is_running_and_ready;

const SWARM: &str = "bench";
const HISTORY: u64 = 10;
const ROUNDS: usize = 10;

async fn apply(cluster: &TestCluster, yaml: &str) {
    cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(yaml))
        .await
        .and_then(KubectlOutput::ok)
        .expect("kubectl apply");
}

async fn wait_for_pods(cluster: &TestCluster, count: usize) {
    let api: Api<Pod> = Api::namespaced(cluster.client(), cluster.namespace());
    cluster
        .wait_for("the pool's pods", Duration::from_secs(900), || {
            let api = api.clone();
            async move {
                let ready = api
                    .list(&ListParams::default().labels("app=worker"))
                    .await
                    .map(|pods| {
                        pods.items
                            .iter()
                            .filter(|pod| is_running_and_ready(pod))
                            .count()
                    })
                    .unwrap_or(0);
                if ready >= count {
                    Check::Done(())
                } else {
                    Check::Pending(format!("{ready} of {count} pods ready"))
                }
            }
        })
        .await
        .expect("pods ready");
}

/// A ConfigMap of the Swarm (labels, owner) named `name`.
fn owned(
    swarm: &Swarm,
    name: &str,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    data: serde_json::Value,
    binary_data: serde_json::Value,
) -> ConfigMap {
    let mut all = BTreeMap::from([(names::LABEL_SWARM.to_owned(), SWARM.to_owned())]);
    all.extend(labels);
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": all,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "shoal.dev/v1alpha1", "kind": "Swarm", "name": SWARM,
                "uid": swarm.uid().unwrap_or_default(), "controller": true,
            }],
        },
        "data": data,
        "binaryData": binary_data,
    }))
    .expect("a ConfigMap")
}

/// The ConfigMaps of revision `revision`'s record over `members` × `jobs`, as
/// `apply::write_revision` writes them.
fn record_maps(swarm: &Swarm, revision: u64, members: u32, jobs: usize) -> Vec<ConfigMap> {
    let text = json!({
        "revision": revision,
        "hash": format!("h{revision}"),
        "strategy": {"type": "sticky"},
        "members": (0..members).map(|i| format!("worker-{i}")).collect::<Vec<_>>(),
        "jobs": (0..jobs).map(|i| format!("j{i:06}")).collect::<Vec<_>>(),
        "owners": (0..jobs).map(|i| (i + revision as usize) % members as usize).collect::<Vec<_>>(),
    })
    .to_string();
    let labels = BTreeMap::from([
        (names::LABEL_REVISION_HISTORY.to_owned(), "true".to_owned()),
        (names::LABEL_REVISION.to_owned(), revision.to_string()),
    ]);
    match decide::store_record(&text, format::MAX_PLAIN_BYTES, format::MAX_BINARY_BYTES) {
        decide::StoredRecord::Plain(text) => vec![owned(
            swarm,
            &names::revision_configmap(SWARM, revision),
            labels,
            BTreeMap::new(),
            json!({ names::REVISION_DATA_KEY: text }),
            json!({}),
        )],
        decide::StoredRecord::Gzip(bytes) => vec![owned(
            swarm,
            &names::revision_configmap(SWARM, revision),
            labels,
            BTreeMap::new(),
            json!({}),
            json!({ format!("{}.gz", names::REVISION_DATA_KEY): k8s_openapi::ByteString(bytes) }),
        )],
        decide::StoredRecord::Split { chunks, checksum } => {
            let count = chunks.len();
            chunks
                .into_iter()
                .enumerate()
                .map(|(part, chunk)| {
                    let annotations = if part == 0 {
                        BTreeMap::from([
                            (names::ANNOTATION_PARTS.to_owned(), count.to_string()),
                            (names::ANNOTATION_CHECKSUM.to_owned(), checksum.clone()),
                        ])
                    } else {
                        BTreeMap::new()
                    };
                    owned(
                        swarm,
                        &decide::record_part_configmap(SWARM, revision, part),
                        labels.clone(),
                        annotations,
                        json!({}),
                        json!({ decide::record_part_key(part): k8s_openapi::ByteString(chunk) }),
                    )
                })
                .collect()
        }
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn timed<T, F: std::future::Future<Output = T>>(work: F) -> (Duration, T) {
    let started = Instant::now();
    let output = work.await;
    (started.elapsed(), output)
}

async fn scenario(members: u32, jobs: usize) {
    let cluster = TestCluster::start().await.expect("emulated cluster");
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crd.yaml");
    cluster
        .install_crd_file(Path::new(crd))
        .await
        .expect("the Swarm CRD");
    let sts = format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: worker\n  labels:\n    shoal.dev/swarm: {SWARM}\nspec:\n  replicas: {members}\n  podManagementPolicy: Parallel\n  serviceName: worker\n  selector:\n    matchLabels:\n      app: worker\n  template:\n    metadata:\n      labels:\n        app: worker\n    spec:\n      terminationGracePeriodSeconds: 0\n      containers:\n      - name: app\n        image: registry.k8s.io/pause:3.10\n"
    );
    apply(&cluster, &sts).await;
    let swarm_yaml = format!(
        "apiVersion: shoal.dev/v1alpha1\nkind: Swarm\nmetadata:\n  name: {SWARM}\nspec:\n  jobs: [a]\n"
    );
    apply(&cluster, &swarm_yaml).await;
    wait_for_pods(&cluster, members as usize).await;
    let swarm: Swarm = Api::namespaced(client.clone(), &namespace)
        .get(SWARM)
        .await
        .expect("the Swarm");

    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let lease_api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    // Written as the controller writes them: under its field manager, or they read as
    // edited by someone else and are refused.
    let as_controller = PostParams {
        field_manager: Some(names::CONTROLLER_FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let per_member = jobs / members as usize;
    let mut bytes = 0usize;
    for member in 0..members {
        let pod = format!("worker-{member}");
        let keys: Vec<String> = (0..per_member)
            .map(|i| format!("  - j{:06}", member as usize * per_member + i))
            .collect();
        let text = format!(
            "version: 1\nswarm: {SWARM}\nmember: {pod}\nrevision: {HISTORY}\nhash: h\njobs:\n{}\n",
            keys.join("\n")
        );
        bytes += text.len();
        let slice = owned(
            &swarm,
            &names::slice_configmap(&pod),
            BTreeMap::from([(names::LABEL_MEMBER.to_owned(), pod.clone())]),
            BTreeMap::new(),
            json!({ names::SLICE_DATA_KEY: text }),
            json!({}),
        );
        cm_api
            .create(&as_controller, &slice)
            .await
            .expect("a slice");
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": format!("{pod}-member"), "labels": {names::LABEL_MEMBER: pod}},
            "spec": {"holderIdentity": pod, "leaseDurationSeconds": 15,
                     "renewTime": jiff::Timestamp::now().to_string()},
        }))
        .expect("a Lease");
        lease_api
            .create(&as_controller, &lease)
            .await
            .expect("a Lease");
    }
    let mut record_configmaps = 0;
    for revision in 1..=HISTORY {
        for cm in record_maps(&swarm, revision, members, jobs) {
            bytes += serde_json::to_vec(&cm).expect("json").len();
            record_configmaps += 1;
            cm_api
                .create(&as_controller, &cm)
                .await
                .expect("a record part");
        }
    }
    println!(
        "{members} members x {jobs} jobs: {members} slices, {HISTORY} records in {record_configmaps} ConfigMaps, {:.1} MB of ConfigMap JSON; load {}",
        bytes as f64 / 1e6,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );

    let selector = format!("{}={SWARM}", names::LABEL_SWARM);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut lists: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    for _ in 0..ROUNDS {
        let (took, _) = timed(pod_api.list(&ListParams::default().labels("app=worker"))).await;
        lists.entry("pods (one pool)").or_default().push(took);
        let (took, _) =
            timed(lease_api.list(&ListParams::default().labels(names::LABEL_MEMBER))).await;
        lists.entry("member Leases").or_default().push(took);
        let (took, _) = timed(cm_api.list(&ListParams::default().labels(&selector))).await;
        lists
            .entry("the Swarm's ConfigMaps (slices, index, history)")
            .or_default()
            .push(took);
        let history = format!("{selector},{}=true", names::LABEL_REVISION_HISTORY);
        let (took, _) = timed(cm_api.list(&ListParams::default().labels(&history))).await;
        lists
            .entry("  of which history records")
            .or_default()
            .push(took);
        let (took, _) = timed(cm_api.list_metadata(&ListParams::default().labels(&history))).await;
        lists
            .entry("  history records, metadata only")
            .or_default()
            .push(took);
        let others = format!("{selector},{}!=true", names::LABEL_REVISION_HISTORY);
        let (took, _) = timed(cm_api.list(&ListParams::default().labels(&others))).await;
        lists
            .entry("  of which slices and index")
            .or_default()
            .push(took);
        let (took, _) = timed(cm_api.list_metadata(&ListParams::default().labels(&others))).await;
        lists
            .entry("  slices and index, metadata only")
            .or_default()
            .push(took);
    }
    for (what, samples) in lists {
        println!("  list {what}: median {:.1?}", median(samples));
    }

    let mut uncached = Vec::new();
    for _ in 0..ROUNDS {
        let (took, observed) = timed(observe(&swarm, &client, None, None)).await;
        let observed = observed.expect("observe");
        assert_eq!(observed.history.len(), HISTORY as usize);
        uncached.push(took);
    }
    let memo = Decoded::default();
    let (first, _) = timed(observe(&swarm, &client, Some(&memo), None)).await;
    let mut cached = Vec::new();
    for _ in 0..ROUNDS {
        let (took, observed) = timed(observe(&swarm, &client, Some(&memo), None)).await;
        assert_eq!(observed.expect("observe").history.len(), HISTORY as usize);
        cached.push(took);
    }
    println!(
        "  observe, every record decoded (before): median {:.1?}",
        median(uncached)
    );
    println!(
        "  observe with the memo: first pass {first:.1?}, then median {:.1?} ({} entries kept)",
        median(cached),
        memo.len()
    );
    // What the controller does: the memo, and pools, pods and Leases from its watch caches.
    let (watched, triggers) = watched::watch(&client, Some(&namespace));
    let drains = triggers.drain();
    let filled = loop {
        if let Some(filled) = watched.ready() {
            break filled.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut from_caches = Vec::new();
    for _ in 0..ROUNDS {
        let (took, observed) = timed(observe(&swarm, &client, Some(&memo), Some(&filled))).await;
        let observed = observed.expect("observe");
        assert_eq!(observed.leases.len(), members as usize);
        from_caches.push(took);
    }
    println!(
        "  observe with the memo and the watch caches: median {:.1?}",
        median(from_caches)
    );
    for drain in drains {
        drain.abort();
    }
    cluster.cleanup().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sizes: Vec<(u32, usize)> = match std::env::args().any(|arg| arg == "--quick") {
        true => vec![(100, 10_000)],
        false => vec![(100, 10_000), (1_000, 100_000)],
    };
    for (members, jobs) in sizes {
        runtime.block_on(scenario(members, jobs));
    }
}
