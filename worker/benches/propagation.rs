//! Propagation benchmark (issue 5), in-process on the emulated API server:
//!
//! 1. slice ConfigMap written → slice file replaced in the member, p50/p99,
//!    for N members (default 100): one write at a time, then all members'
//!    writes at once (as a controller writing a new revision does);
//! 2. all N slices of a new revision written (N × jobs-per-member keys,
//!    default 100 × 100 = 10,000 jobs) → every member's acknowledgement on its
//!    Lease.
//!
//! `cargo bench -p shoal-worker --bench propagation` (env: SHOAL_BENCH_MEMBERS,
//! SHOAL_BENCH_ROUNDS, SHOAL_BENCH_JOBS_PER_MEMBER).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use shoal_worker::{Settings, SliceView, Worker, slice_doc};
use tokio::time::Instant;

use common::Cluster;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn slice(member: &str, revision: u64, jobs: Vec<String>) -> SliceView {
    SliceView::new("bench", member, revision, jobs).expect("valid job keys")
}

async fn write_slice(api: &Api<ConfigMap>, slice: &SliceView) {
    let document = slice_doc::render(slice).expect("renderable slice");
    let client = api.clone().into_client();
    let namespace = api.namespace().unwrap_or_default().to_owned();
    if let Err(error) = common::owner::apply_slice_config_map(
        &client,
        &namespace,
        &slice.member,
        slice.revision,
        document,
    )
    .await
    {
        panic!("cannot write slice ConfigMap: {error}");
    }
}

/// Writes the slice and returns the time until the member's file holds it.
async fn propagate(
    api: &Api<ConfigMap>,
    worker: &Worker,
    path: &PathBuf,
    slice: &SliceView,
) -> Duration {
    let mut slices = worker.slices();
    let revision = slice.revision;
    let started = Instant::now();
    write_slice(api, slice).await;
    // The worker publishes a slice only after its file was renamed into place.
    slices
        .wait_for(|delivered| {
            delivered
                .slice
                .as_ref()
                .is_some_and(|slice| slice.revision == revision)
        })
        .await
        .expect("worker running");
    let elapsed = started.elapsed();
    let on_disk = std::fs::read_to_string(path).expect("slice file");
    assert_eq!(
        on_disk,
        slice_doc::render(slice).expect("renderable slice"),
        "the file holds the written slice"
    );
    elapsed
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    println!(
        "{what}: n={} p50={:.2} ms p95={:.2} ms p99={:.2} ms max={:.2} ms",
        samples.len(),
        ms(percentile(&samples, 0.50)),
        ms(percentile(&samples, 0.95)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap_or(&Duration::ZERO)),
    );
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let members = env_number("SHOAL_BENCH_MEMBERS", 100);
    let rounds = env_number("SHOAL_BENCH_ROUNDS", 5) as u64;
    let jobs_per_member = env_number("SHOAL_BENCH_JOBS_PER_MEMBER", 100);

    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client(), cluster.namespace());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut workers = Vec::new();
    let mut paths = Vec::new();
    for ordinal in 0..members {
        let member = format!("bench-{ordinal}");
        let path = dir.path().join(format!("{member}.yaml"));
        let mut settings = Settings::for_member(&member, cluster.namespace());
        settings.slice_file = Some(path.clone());
        settings.ack_on_apply = true;
        workers.push((
            member,
            Worker::start(cluster.client(), settings)
                .await
                .expect("start worker"),
        ));
        paths.push(path);
    }
    let setup = Instant::now();
    for (_, worker) in &workers {
        while !worker.readiness().ready {
            assert!(
                setup.elapsed() < Duration::from_secs(60),
                "workers not ready within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    println!(
        "{members} sidecars ready in {:.2} s",
        setup.elapsed().as_secs_f64()
    );

    let mut revision = 0;
    let mut one_at_a_time = Vec::new();
    for _ in 0..rounds {
        revision += 1;
        for ((member, worker), path) in workers.iter().zip(&paths) {
            let jobs = vec![format!("job:{member}:{revision}")];
            one_at_a_time.push(propagate(&api, worker, path, &slice(member, revision, jobs)).await);
        }
    }
    report("write → file replaced, one write at a time", one_at_a_time);

    let mut burst = Vec::new();
    for _ in 0..rounds {
        revision += 1;
        let slices: Vec<SliceView> = workers
            .iter()
            .map(|(member, _)| slice(member, revision, vec![format!("job:{member}:{revision}")]))
            .collect();
        let latencies = join_all(
            workers
                .iter()
                .zip(&paths)
                .zip(&slices)
                .map(|(((_, worker), path), slice)| propagate(&api, worker, path, slice)),
        )
        .await;
        burst.extend(latencies);
    }
    report(
        &format!("write → file replaced, {members} writes at once"),
        burst,
    );

    // A new revision of every slice, N × jobs-per-member keys in all.
    let mut all_acked = Vec::new();
    for _ in 0..rounds {
        revision += 1;
        let slices: Vec<SliceView> = workers
            .iter()
            .map(|(member, _)| {
                let mut jobs: Vec<String> = (0..jobs_per_member)
                    .map(|index| format!("stream:{member}:{revision}:{index:05}"))
                    .collect();
                jobs.sort();
                slice(member, revision, jobs)
            })
            .collect();
        let started = Instant::now();
        join_all(workers.iter().zip(&slices).map(|((_, worker), slice)| {
            let api = api.clone();
            let mut acked = worker.acked();
            async move {
                write_slice(&api, slice).await;
                let target = slice.ack_target();
                acked
                    .wait_for(|acked| acked.as_ref() == Some(&target))
                    .await
                    .expect("worker running");
            }
        }))
        .await;
        all_acked.push(started.elapsed());
    }
    report(
        &format!(
            "{members} slices × {jobs_per_member} jobs written → every member acked on its Lease"
        ),
        all_acked,
    );

    for (_, worker) in workers {
        worker.stop().await.expect("stop worker");
    }
}
