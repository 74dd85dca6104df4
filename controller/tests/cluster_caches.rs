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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_with_filled_caches_lists_no_pools_per_pass_but_lists_leases() {
    let Some(env) = Env::start_emulated("counts requests by user").await else {
        return;
    };
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
    env.pool("worker", "demo", 3).await;
    env.apply(&swarm_yaml("demo", &job_keys(30), "")).await;
    env.in_force("demo", 1, WAIT).await;
    // Until each cache is filled, a pass lists (and on a loaded machine a first list may
    // be backed off past revision 1). A watch is opened only after its first list is in
    // the cache, so once the controller has opened all three, the caches are filled.
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

    let before = stats.snapshot();
    env.kubectl(&["scale", "statefulset", "worker", "--replicas=5"])
        .await;
    env.in_force("demo", 2, WAIT).await;
    let during = stats.snapshot().since(&before);
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
