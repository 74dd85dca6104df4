//! Load figures for the emulated API server: create 1,000 pods and 10,000
//! ConfigMaps through the real `kube` client with several writers at once,
//! while 10 watchers each watch both kinds. Prints create throughput
//! (requests per second) and watch-event latency (p50/p99 of the time from
//! a create's response reaching the writer to each watcher receiving the
//! ADDED event). A bench binary (`harness = false`), not a timed test:
//!
//! `cargo bench -p shoal-emulator --bench api_load`
//!
//! Server, writers and watchers share one 2-thread tokio runtime in one
//! process, as in the tests that use the emulator.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use shoal_emulator::ApiServer;

/// Objects created by a full run (`cargo bench`).
const FULL: Sizes = Sizes {
    pods: 1_000,
    config_maps: 10_000,
};
/// Objects created when run without `--bench` (`cargo test --benches`), so
/// that the bench stays a quick smoke check there.
const SMOKE: Sizes = Sizes {
    pods: 20,
    config_maps: 200,
};
const WATCHERS: usize = 10;
/// Writers creating at once (each waits for its response before the next).
const WRITERS: usize = 16;
const NAMESPACE: &str = "bench";
/// How long watchers may lag behind the last write before the run counts
/// the rest as missed.
const DRAIN: Duration = Duration::from_secs(60);

#[derive(Clone, Copy)]
struct Sizes {
    pods: usize,
    config_maps: usize,
}

/// When each object's create response reached its writer.
type Responses = Vec<(String, Instant)>;
/// When one watcher received each object's ADDED event.
type Arrivals = Vec<(String, Instant)>;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": "bench" } },
        "spec": { "containers": [{ "name": "app", "image": "registry.k8s.io/pause:3.10" }] },
    }))
    .unwrap_or_default()
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": "bench" } },
        "data": { "key": name, "payload": "x".repeat(256) },
    }))
    .unwrap_or_default()
}

/// Creates `count` objects named `<prefix>-<i>` with [`WRITERS`] concurrent
/// writers; returns the response times and the wall time taken.
async fn create_all<K>(
    api: Api<K>,
    prefix: &'static str,
    count: usize,
    build: fn(&str) -> K,
) -> Result<(Responses, Duration), kube::Error>
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K: Send + Sync + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let writers = (0..WRITERS).map(|_| {
        let api = api.clone();
        let next = Arc::clone(&next);
        tokio::spawn(async move {
            let mut responses = Vec::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count {
                    return Ok::<Responses, kube::Error>(responses);
                }
                let name = format!("{prefix}-{index}");
                api.create(&PostParams::default(), &build(&name)).await?;
                responses.push((name, Instant::now()));
            }
        })
    });
    let mut responses = Vec::with_capacity(count);
    for writer in futures::future::join_all(writers).await {
        match writer {
            Ok(result) => responses.extend(result?),
            Err(join_error) => panic!("writer task failed: {join_error}"),
        }
    }
    Ok((responses, started.elapsed()))
}

/// Watches one kind from `version`, recording each ADDED event's arrival,
/// until `expected` arrived or `stop` says the run is over.
async fn watch_kind<K>(
    api: Api<K>,
    version: String,
    expected: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Arrivals, kube::Error>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut arrivals = Vec::with_capacity(expected);
    let mut version = version;
    while arrivals.len() < expected && !*stop.borrow() {
        let params = WatchParams::default().timeout(290);
        let mut stream = api.watch(&params, &version).await?.boxed();
        let mut stop = stop.clone();
        loop {
            let event = tokio::select! {
                event = stream.try_next() => event?,
                _ = stop.changed() => None,
            };
            match event {
                Some(WatchEvent::Added(object)) => {
                    let now = Instant::now();
                    version = object.resource_version().unwrap_or_default();
                    arrivals.push((object.name_any(), now));
                    if arrivals.len() >= expected {
                        break;
                    }
                }
                Some(WatchEvent::Bookmark(bookmark)) => {
                    version = bookmark.metadata.resource_version;
                }
                Some(WatchEvent::Error(status)) => {
                    eprintln!("watch error: {status:?}");
                    return Ok(arrivals);
                }
                Some(_) => {}
                None => break,
            }
        }
    }
    Ok(arrivals)
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * fraction).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn millis(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

struct Latencies {
    sorted: Vec<Duration>,
    /// Events that reached a watcher before the create's response reached
    /// its writer (counted as zero latency).
    before_response: usize,
    missed: usize,
}

fn latencies(responses: &Responses, arrivals: &[Arrivals]) -> Latencies {
    let responded: HashMap<&str, Instant> = responses
        .iter()
        .map(|(name, at)| (name.as_str(), *at))
        .collect();
    let mut sorted = Vec::new();
    let mut before_response = 0;
    let mut received = 0;
    for watcher in arrivals {
        for (name, at) in watcher {
            let Some(response) = responded.get(name.as_str()) else {
                continue;
            };
            received += 1;
            match at.checked_duration_since(*response) {
                Some(latency) => sorted.push(latency),
                None => {
                    before_response += 1;
                    sorted.push(Duration::ZERO);
                }
            }
        }
    }
    sorted.sort();
    Latencies {
        sorted,
        before_response,
        missed: responses.len() * arrivals.len() - received,
    }
}

fn report(kind: &str, count: usize, elapsed: Duration, latency: &Latencies) {
    println!(
        "{kind:<11} {count:>6} creates in {:>7.2} s = {:>7.0} req/s | watch latency p50 {} p99 {} max {} \
         ({} events, {} before the response, {} missed)",
        elapsed.as_secs_f64(),
        count as f64 / elapsed.as_secs_f64(),
        millis(percentile(&latency.sorted, 0.50)),
        millis(percentile(&latency.sorted, 0.99)),
        millis(latency.sorted.last().copied().unwrap_or_default()),
        latency.sorted.len(),
        latency.before_response,
        latency.missed,
    );
}

async fn run(sizes: Sizes) -> Result<(), Box<dyn std::error::Error>> {
    let Sizes {
        pods: pod_count,
        config_maps: map_count,
    } = sizes;
    let server = ApiServer::start().await?;
    let client: Client = server.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let pod_version = pods
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let map_version = maps
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        // Each watcher has its own client (own connections), as separate
        // processes would.
        let watcher_client = server.client().await?;
        let pod_watch = watch_kind(
            Api::<Pod>::namespaced(watcher_client.clone(), NAMESPACE),
            pod_version.clone(),
            pod_count,
            stopped.clone(),
        );
        let map_watch = watch_kind(
            Api::<ConfigMap>::namespaced(watcher_client, NAMESPACE),
            map_version.clone(),
            map_count,
            stopped.clone(),
        );
        watchers.push(tokio::spawn(async move {
            let (pods, maps) = tokio::join!(pod_watch, map_watch);
            Ok::<(Arrivals, Arrivals), kube::Error>((pods?, maps?))
        }));
    }
    // Let every watch be established before the first write.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let total_started = Instant::now();
    let (pod_responses, pod_elapsed) = create_all(pods, "pod", pod_count, pod).await?;
    let (map_responses, map_elapsed) = create_all(maps, "cm", map_count, config_map).await?;
    let total_elapsed = total_started.elapsed();

    let drain = tokio::spawn(async move {
        tokio::time::sleep(DRAIN).await;
        let _ = stop.send(true);
    });
    let mut pod_arrivals = Vec::new();
    let mut map_arrivals = Vec::new();
    for watcher in futures::future::join_all(watchers).await {
        let (pods, maps) = watcher??;
        pod_arrivals.push(pods);
        map_arrivals.push(maps);
    }
    drain.abort();

    let pod_latency = latencies(&pod_responses, &pod_arrivals);
    let map_latency = latencies(&map_responses, &map_arrivals);
    println!(
        "emulated API server, {WRITERS} concurrent writers, {WATCHERS} watchers (each on pods and configmaps)"
    );
    report("pods", pod_count, pod_elapsed, &pod_latency);
    report("configmaps", map_count, map_elapsed, &map_latency);
    let mut all = pod_latency.sorted.clone();
    all.extend(map_latency.sorted.iter().copied());
    all.sort();
    let combined = Latencies {
        sorted: all,
        before_response: pod_latency.before_response + map_latency.before_response,
        missed: pod_latency.missed + map_latency.missed,
    };
    report("all", pod_count + map_count, total_elapsed, &combined);
    server.shutdown().await;
    Ok(())
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (`cargo test --benches`)
    // gets a small smoke run.
    let sizes = if std::env::args().any(|arg| arg == "--bench") {
        FULL
    } else {
        println!("smoke run (no --bench): figures below are not the bench's");
        SMOKE
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start a tokio runtime: {error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = runtime.block_on(run(sizes)) {
        eprintln!("bench failed: {error}");
        std::process::exit(1);
    }
}
