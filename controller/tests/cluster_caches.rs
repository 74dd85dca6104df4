//! The Swarm controller's watch caches (`cluster::watched`): a pass reads pools and pods
//! from them as it would have listed them, and a controller whose caches are filled lists
//! neither per pass. Slices, records, the index and member Leases (liveness) are still
//! read from the API server every pass.

use crate::common;

use std::time::Duration;

use shoal_controller::cluster::watched::{self, Watched};
use shoal_controller::swarm::decide::Observation;
use shoal_controller::swarm::observe::observe;
use shoal_controller::{Clients, Settings, run_with_clients};

use common::{Env, acknowledge, eventually, job_keys, swarm_yaml};
use shoal_emulator::{RequestCounts, RequestStats};

const WAIT: Duration = Duration::from_secs(60);

/// What a pass reads from the caches instead of the API server, and the Leases read
/// beside them.
fn cached_part(observation: &Observation) -> impl PartialEq + std::fmt::Debug + '_ {
    (&observation.pools, &observation.leases)
}

/// Waits until an observation through the caches reads the pools, pods and Leases a
/// listing observation reads, and `also` holds of it; returns it.
async fn caches_agree(
    env: &Env,
    watched: &Watched,
    what: &str,
    also: impl Fn(&Observation) -> bool,
) -> Observation {
    eventually(what, WAIT, || async {
        let swarm = env.swarm("demo").await;
        let cached = observe(&swarm, &env.client, None, Some(watched))
            .await
            .ok()?;
        let listed = observe(&swarm, &env.client, None, None).await.ok()?;
        (cached_part(&cached) == cached_part(&listed) && also(&cached)).then_some(cached)
    })
    .await
}

fn pods_of(observation: &Observation) -> usize {
    observation.pools.iter().map(|pool| pool.pods.len()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_reads_from_the_watch_caches_the_pools_and_pods_it_would_list() {
    let env = Env::start().await;
    env.pool("worker", "demo", 3).await;
    // Not the Swarm's: neither its pool nor its pods may be read through the caches.
    env.statefulset("other", None, 2, false).await;
    env.apply(&swarm_yaml("demo", &job_keys(6), "")).await;
    env.ready_pool("worker", 3).await;
    env.ready_pool("other", 2).await;
    acknowledge(&env, "worker-0", 1, "first").await;
    acknowledge(&env, "worker-1", 1, "first").await;

    let (watched, triggers) = watched::watch(&env.client, Some(&env.namespace));
    let tasks = triggers.drain();
    let filled = eventually("the caches filled by their first lists", WAIT, || async {
        watched.ready().cloned()
    })
    .await;
    let first = caches_agree(&env, &filled, "caches read as lists", |observed| {
        pods_of(observed) == 3 && observed.leases.len() == 2
    })
    .await;
    assert_eq!(first.pools.len(), 1, "{:?}", first.pools);
    assert_eq!(first.pools[0].name, "worker");

    // Every kind of change a pass reads: a scale, a pod no longer Ready, a new
    // acknowledgement and a new Lease.
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=4"])
        .await;
    env.ready_pool("worker", 4).await;
    env.set_ready("worker-2", false).await;
    acknowledge(&env, "worker-0", 2, "second").await;
    acknowledge(&env, "worker-3", 2, "second").await;
    let changed = caches_agree(&env, &filled, "caches follow every change", |observed| {
        let worker_2_ready = observed.pools[0].pods.get(&2).is_some_and(|pod| pod.ready);
        pods_of(observed) == 4
            && observed.pools[0].replicas == 4
            && !worker_2_ready
            && observed.leases.len() == 3
            && observed.leases["worker-0"].acked_hash.as_deref() == Some("second")
    })
    .await;
    assert_eq!(changed.pools[0].pods.len(), 4);
    for task in tasks {
        task.abort();
    }
    env.finish().await;
}

/// A controller of `env`'s namespace, as user `shoal-controller`, whose requests the
/// emulator counts: the counts, and the controller, stopped by sending on the channel.
async fn counted_controller(
    env: &Env,
) -> (
    RequestStats,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), shoal_controller::RunError>>,
) {
    let stats = env
        .cluster
        .request_stats()
        .expect("the emulator counts requests");
    let client = env
        .cluster
        .client_as("shoal-controller", &["system:masters"])
        .await
        .expect("a client for the controller");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let settings = Settings {
        namespace: Some(env.namespace.clone()),
        resync: Duration::from_secs(5),
        ..Settings::default()
    };
    let controller = tokio::spawn(run_with_clients(
        Clients {
            api: client.clone(),
            evictions: client,
        },
        settings,
        async move {
            let _ = stopped.await;
        },
    ));
    (stats, stop, controller)
}

/// Until each cache is filled, a pass lists (and on a loaded machine a first list may be
/// backed off past revision 1). A watch is opened only after its first list is in the
/// cache, so once the controller has opened all three, the caches are filled.
async fn caches_filled(stats: &RequestStats) {
    eventually("the controller's watch caches filled", WAIT, || async {
        let opened = stats.snapshot();
        ["statefulsets", "deployments", "pods"]
            .iter()
            .all(|resource| {
                opened
                    .total(|key| {
                        key.user == "shoal-controller"
                            && key.verb == "watch"
                            && key.resource == *resource
                    })
                    .requests
                    > 0
            })
            .then_some(())
    })
    .await;
}

/// Swarm `demo` over `jobs` on pool `worker` of 3 (created by the caller), revision 1 in
/// force and the controller's caches filled; then the pool scaled to 5: the requests
/// counted until revision 2 is in force.
async fn scale_3_to_5_counted(env: &Env, stats: &RequestStats, jobs: &[String]) -> RequestCounts {
    env.apply(&swarm_yaml("demo", jobs, "")).await;
    env.in_force("demo", 1, WAIT).await;
    caches_filled(stats).await;
    let before = stats.snapshot();
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=5"])
        .await;
    env.in_force("demo", 2, WAIT).await;
    stats.snapshot().since(&before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_with_filled_caches_lists_no_pools_per_pass_but_lists_leases() {
    let Some(env) = Env::start_emulated("counts requests by user").await else {
        return;
    };
    let (stats, stop, controller) = counted_controller(&env).await;
    env.pool("worker", "demo", 3).await;
    let during = scale_3_to_5_counted(&env, &stats, &job_keys(30)).await;
    let by_controller = |verb: &str, resource: &str| {
        during
            .total(|key| {
                key.user == "shoal-controller" && key.verb == verb && key.resource == resource
            })
            .requests
    };
    let config_map_lists = by_controller("list", "configmaps");
    assert!(
        config_map_lists >= 2,
        "passes ran and read their slices from the API server: {config_map_lists} lists"
    );
    // A Lease is a member's liveness: a stalled watch must not make a live member look
    // dead, so every pass lists them.
    let lease_lists = by_controller("list", "leases");
    assert!(
        lease_lists >= 1,
        "member Leases are listed by each pass, not read from a cache: {lease_lists} lists"
    );
    for resource in ["statefulsets", "deployments"] {
        assert_eq!(
            by_controller("list", resource),
            0,
            "{resource} are read from the watch cache"
        );
    }
    // Pods are listed only to re-read, by name, the pod a slice was just written for.
    let slice_writes = by_controller("create", "configmaps") + by_controller("patch", "configmaps");
    let pod_lists = by_controller("list", "pods");
    assert!(
        pod_lists <= slice_writes,
        "{pod_lists} pod lists for {slice_writes} ConfigMap writes"
    );
    let _ = stop.send(());
    let _ = controller.await;
    env.finish().await;
}

/// Bytes the emulator answered `user`'s `verb` requests on ConfigMaps with, and how many.
fn config_map_reads(counts: &RequestCounts, user: &str, verb: &str) -> (u64, u64) {
    let tally =
        counts.total(|key| key.user == user && key.verb == verb && key.resource == "configmaps");
    (tally.requests, tally.response_bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_lists_configmaps_by_metadata_and_reads_back_no_slice_it_wrote() {
    let Some(env) = Env::start_emulated("counts response bytes by user").await else {
        return;
    };
    let (stats, stop, controller) = counted_controller(&env).await;
    env.pool("worker", "demo", 3).await;
    // Long keys: a slice's data outweighs its metadata, as at scale.
    let jobs: Vec<String> = (0..600)
        .map(|i| {
            format!(
                "stream:{i:04}:{:032x}",
                u128::from(i as u32) * 0x9e37_79b9_7f4a_7c15
            )
        })
        .collect();
    let during = scale_3_to_5_counted(&env, &stats, &jobs).await;

    // What the Swarm's ConfigMaps cost to read now: listed by metadata, and each slice
    // and the record in force read in full.
    let cm_api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.clone(), &env.namespace);
    let measured = stats.snapshot();
    let labelled = kube::api::ListParams::default().labels("shoal.dev/swarm=demo");
    cm_api
        .list_metadata(&labelled)
        .await
        .expect("a metadata list");
    for member in 0..5 {
        cm_api
            .get(&format!("worker-{member}-slice"))
            .await
            .expect("a slice");
    }
    let measured = stats.snapshot().since(&measured);
    // The test's own requests (its client is the only other one reading ConfigMaps).
    let admin = measured
        .iter()
        .map(|(key, _)| key.user.clone())
        .find(|user| user != "shoal-controller")
        .expect("the test's reads counted");
    let (_, metadata_list) = config_map_reads(&measured, &admin, "list");
    let (_, slices) = config_map_reads(&measured, &admin, "get");

    let (lists, listed) = config_map_reads(&during, "shoal-controller", "list");
    assert!(lists >= 2, "passes ran: {lists} ConfigMap lists");
    assert!(
        listed <= lists * metadata_list,
        "every pass lists the ConfigMaps by metadata only: {listed} bytes in {lists} lists, \
         where one metadata list is {metadata_list} bytes"
    );
    // Read in full: the new record and index (and the names of the new members' slices,
    // looked up before they exist), never a slice the controller wrote itself.
    let (gets, read) = config_map_reads(&during, "shoal-controller", "get");
    let record = cm_api
        .get("demo-rev-2")
        .await
        .expect("the record of revision 2");
    let record_bytes = serde_json::to_vec(&record).expect("JSON").len() as u64;
    assert!(
        read < record_bytes + slices / 2,
        "{gets} ConfigMap reads of {read} bytes: more than the record ({record_bytes} bytes) \
         and some of the slices the controller wrote ({slices} bytes in all)"
    );
    let _ = stop.send(());
    let _ = controller.await;
    env.finish().await;
}
