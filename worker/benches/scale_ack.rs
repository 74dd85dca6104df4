//! Scale event → every member acknowledged, with where the time goes and what
//! it costs the API server, on the emulated cluster (issue 26: 100 members ×
//! 10,000 jobs and 1,000 members × 100,000 jobs).
//!
//! ```text
//! cargo bench -p shoal-worker --bench scale_ack
//! SHOAL_BENCH_MEMBERS=1000 SHOAL_BENCH_JOBS=100000 SHOAL_BENCH_ROUNDS=10 \
//!   cargo bench -p shoal-worker --bench scale_ack
//! ```
//!
//! Env: `SHOAL_BENCH_MEMBERS` (default 100), `SHOAL_BENCH_JOBS` (10000),
//! `SHOAL_BENCH_ROUNDS` (10; each round is four events, one per direction),
//! `SHOAL_BENCH_LOG` (the controller's log level, default `warn`),
//! `SHOAL_BENCH_CONTROLLER_WRAPPER` (a command to run the controller under, a
//! heap profiler for instance: `'heaptrack -o /tmp/controller'`; see
//! `controller.rs`).
//!
//! What runs (the parts are in `benches/scale_ack/`): the harness's cluster ([`TestCluster`]: the emulated API server
//! with the simulated StatefulSet controller and kubelet; or the cluster in
//! `SHOAL_TEST_KUBECONFIG`, without request statistics); the real controller in
//! its own process (see `controller.rs`), as user `shoal-controller`; one real
//! `shoal_worker::Worker` per member pod in this process (file mode,
//! acknowledging at once), started when its pod appears and stopped when it is
//! marked for deletion, as user `shoal-sidecar`. The job list is one ConfigMap,
//! or several (`jobsFrom.configMapKeyRefs`) when it does not fit in one.
//!
//! The figures:
//! - first rollout: from creating the Swarm (members and sidecars already
//!   running) to revision 1 in force (Swarm `Ready`, seen by a watch) and to
//!   every member's Lease acknowledging its slice;
//! - per direction (N → N+1, N+1 → N, N → N−1, N−1 → N), over every round:
//!   p50 / p95 / max of patching the StatefulSet's `scale` subresource (what
//!   `kubectl scale` does) → every member of the new size acknowledging, on its
//!   Lease, the slice the Swarm's status says it holds (as a Lease watch
//!   delivers it);
//! - the breakdown, p50s from the patch: the new pod Ready (or the removed pod
//!   marked for deletion) → the controller's first and last slice write (a
//!   ConfigMap watch) → every acknowledgement → Swarm `Ready` seen;
//! - members whose slice changed, and the API requests per event of the
//!   controller and of the sidecars (all of them), counted at the API server
//!   from this event's patch to the next one's: writes (create, update, patch,
//!   delete) with their request body bytes, of which ConfigMap writes, reads
//!   (get, list), watches opened; the controller's requests by verb and
//!   resource (where its reads go); and the controller's own
//!   `shoal_api_writes_total` and `shoal_reconcile_phase_seconds` (when it has
//!   it) increases over the same span;
//! - the controller's peak memory (`VmHWM`) after the first rollout and at the
//!   end.

// The bench's parts, in `benches/scale_ack/` (a crate root's modules are looked
// up beside it, so each is named).
#[path = "scale_ack/controller.rs"]
mod controller;
#[path = "scale_ack/cost.rs"]
mod cost;
#[path = "scale_ack/report.rs"]
mod report;
#[path = "scale_ack/settle.rs"]
mod settle;
#[path = "scale_ack/setup.rs"]
mod setup;
#[path = "scale_ack/watches.rs"]
mod watches;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use shoal_controller::api::swarm::SwarmStatus;
use shoal_emulator::RequestStats;
use shoal_emulator::harness::TestCluster;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use controller::ControllerProcess;
use cost::{EventCost, Probe, SIDECAR_IDENTITY};
use report::{Direction, EventFigures};
use settle::{Measured, Settled, until_acked};
use watches::{Acks, Milestone, PodFollower, Sidecars, Timeline, lock};

/// The controller child runs with the allocator the `shoal-controller` binary
/// ships with, so that its peak memory is the shipped one's (the sidecars and
/// the emulator in the parent process run with it too).
#[global_allocator]
static ALLOCATOR: shoal_controller::Allocator = shoal_controller::Allocator;

pub const POOL: &str = "pool";
pub const SWARM: &str = "bench";

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Everything the bench runs and watches.
struct Bench {
    cluster: TestCluster,
    /// The bench's own client (the administrator).
    client: Client,
    namespace: String,
    stats: RequestStats,
    acks: Acks,
    timeline: Timeline,
    swarm: watch::Receiver<Option<SwarmStatus>>,
    sidecars: Sidecars,
    controller: ControllerProcess,
    watch_tasks: Vec<JoinHandle<()>>,
    /// The sidecars' slice files and the controller's kubeconfig.
    _directory: tempfile::TempDir,
}

/// Starts the cluster, the watches, `members` members with their sidecars and
/// the controller; returns the bench and the Swarm's `jobsFrom`.
async fn start(members: usize, jobs: usize) -> (Bench, serde_json::Value) {
    let cluster = TestCluster::start()
        .await
        .unwrap_or_else(|error| panic!("cannot start the cluster: {error}"));
    let stats = cluster
        .request_stats()
        .expect("request statistics (the emulator; SHOAL_TEST_KUBECONFIG has none)");
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    for crd in ["crd.yaml", "crd-deploymentplan.yaml"] {
        let path = format!("{}/../manifests/{crd}", env!("CARGO_MANIFEST_DIR"));
        let applied = cluster.kubectl(&["apply", "-f", &path]).await;
        if let Err(error) = applied.and_then(|output| output.ok()) {
            panic!("cannot install the CRD {path}: {error}");
        }
    }
    let jobs_from = setup::create_job_list(&client, &namespace, jobs).await;
    let acks = Acks::default();
    let timeline: Timeline = Arc::default();
    let (swarm_task, swarm) = watches::watch_swarm(client.clone(), &namespace);
    let directory = tempfile::tempdir().expect("temp dir");
    let sidecars: Sidecars = Arc::default();
    let sidecar_client = cluster
        .client_as(SIDECAR_IDENTITY, &["system:masters"])
        .await
        .unwrap_or_else(|error| panic!("the sidecars' client: {error}"));
    let watch_tasks = vec![
        swarm_task,
        watches::watch_acks(client.clone(), &namespace, acks.clone()),
        watches::watch_slices(client.clone(), &namespace, timeline.clone()),
        watches::follow_pods(PodFollower {
            client: sidecar_client,
            namespace: namespace.clone(),
            directory: directory.path().to_path_buf(),
            sidecars: sidecars.clone(),
            timeline: timeline.clone(),
        }),
    ];
    setup::create_members(&client, &namespace, members).await;
    setup::until_sidecars_run(&sidecars, members).await;
    let controller = ControllerProcess::start(&cluster, directory.path()).await;
    let bench = Bench {
        cluster,
        client,
        namespace,
        stats,
        acks,
        timeline,
        swarm,
        sidecars,
        controller,
        watch_tasks,
        _directory: directory,
    };
    (bench, jobs_from)
}

/// When the slice writes between `started` and `done` were seen, from `started`.
fn slice_writes(timeline: &Timeline, started: Instant, done: Instant) -> Vec<Duration> {
    lock(timeline)
        .iter()
        .filter(|(at, milestone)| {
            *at >= started && *at <= done && *milestone == Milestone::SliceWritten
        })
        .map(|(at, _)| at.duration_since(started))
        .collect()
}

/// When `milestone` was seen between `started` and `done`, from `started`.
fn seen(
    timeline: &Timeline,
    milestone: &Milestone,
    started: Instant,
    done: Instant,
) -> Option<Duration> {
    lock(timeline)
        .iter()
        .find(|(at, seen)| *at >= started && *at <= done && seen == milestone)
        .map(|(at, _)| at.duration_since(started))
}

/// Creates the Swarm and waits for revision 1 in force and acknowledged;
/// returns what settled and the probe taken just before the Swarm existed.
async fn first_rollout(
    bench: &mut Bench,
    members: usize,
    jobs: usize,
    jobs_from: serde_json::Value,
) -> (Settled, Probe) {
    let before = Probe::take(&bench.stats, &bench.controller).await;
    let started = Instant::now();
    setup::create_swarm(&bench.client, &bench.namespace, jobs_from).await;
    let first = until_acked(&mut bench.swarm, &bench.acks, members, 0, started).await;
    let writes = slice_writes(&bench.timeline, started, first.done);
    let memory = bench.controller.memory();
    println!(
        "{members} members × {jobs} jobs: first rollout: revision {} in force after {:.2} s, every member acknowledged after {:.2} s (slices written {:.2}–{:.2} s, {} writes); controller peak memory {:.1} MiB",
        first.settled.revision,
        first.in_force.as_secs_f64(),
        first.all_acked.as_secs_f64(),
        writes.first().copied().unwrap_or_default().as_secs_f64(),
        writes.last().copied().unwrap_or_default().as_secs_f64(),
        writes.len(),
        memory.peak_mib(),
    );
    (first.settled, before)
}

/// What one event took, with its cost left for the next probe.
fn figures(
    bench: &Bench,
    measured: &Measured,
    earlier: &Settled,
    pod: &Milestone,
    started: Instant,
) -> EventFigures {
    let writes = slice_writes(&bench.timeline, started, measured.done);
    EventFigures {
        all_acked: measured.all_acked,
        in_force: measured.in_force,
        pod: seen(&bench.timeline, pod, started, measured.done),
        first_write: writes.first().copied(),
        last_write: writes.last().copied(),
        slices_changed: measured.settled.slices_changed_since(earlier),
        cost: None,
    }
}

/// Patches the StatefulSet to `to` members and waits until the event settles.
async fn one_event(
    bench: &mut Bench,
    from: usize,
    to: usize,
    settled: &Settled,
) -> (EventFigures, Settled) {
    let started = Instant::now();
    setup::scale(&bench.client, &bench.namespace, to).await;
    let measured = until_acked(&mut bench.swarm, &bench.acks, to, settled.revision, started).await;
    let pod = if to > from {
        Milestone::PodReady(format!("{POOL}-{from}"))
    } else {
        Milestone::PodLeaving(format!("{POOL}-{to}"))
    };
    let figures = figures(bench, &measured, settled, &pod, started);
    (figures, measured.settled)
}

/// Gives the event whose span `open` began the cost up to `probe`.
fn close_span(directions: &mut [Direction], open: Option<(usize, Probe)>, probe: &Probe) {
    if let Some((step, before)) = open
        && let Some(event) = directions[step].events.last_mut()
    {
        event.cost = Some(EventCost::between(&before, probe));
    }
}

/// Runs the rounds of four scale events; returns the figures by direction.
/// Each event's cost spans from its patch to the next event's patch (the last
/// one's to a second after it settled).
async fn run_rounds(
    bench: &mut Bench,
    members: usize,
    rounds: usize,
    mut settled: Settled,
    first_rollout: Probe,
) -> Vec<Direction> {
    let sizes = [members, members + 1, members, members - 1, members];
    let mut directions: Vec<Direction> = sizes
        .windows(2)
        .map(|pair| Direction {
            from: pair[0],
            to: pair[1],
            events: Vec::new(),
        })
        .collect();
    let mut open: Option<(usize, Probe)> = None;
    let mut first_rollout = Some(first_rollout);
    for round in 0..rounds {
        for step in 0..directions.len() {
            let probe = Probe::take(&bench.stats, &bench.controller).await;
            if let Some(before) = first_rollout.take() {
                print_first_rollout_cost(&EventCost::between(&before, &probe));
            }
            close_span(&mut directions, open.take(), &probe);
            let (from, to) = (directions[step].from, directions[step].to);
            let (figures, now) = one_event(bench, from, to, &settled).await;
            directions[step].events.push(figures);
            settled = now;
            open = Some((step, probe));
        }
        println!(
            "round {} of {rounds} done (revision {})",
            round + 1,
            settled.revision
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let probe = Probe::take(&bench.stats, &bench.controller).await;
    close_span(&mut directions, open, &probe);
    directions
}

fn print_first_rollout_cost(cost: &EventCost) {
    let controller = &cost.controller;
    println!(
        "  first rollout, controller API requests: writes {} ({} KiB sent), of which ConfigMaps {} ({} KiB); reads {} ({} KiB answered); watches opened {}",
        controller.writes.requests,
        controller.writes.body_bytes / 1024,
        controller.config_map_writes.requests,
        controller.config_map_writes.body_bytes / 1024,
        controller.reads.requests,
        controller.reads.response_bytes / 1024,
        controller.watches,
    );
}

/// Stops the controller, the watches, the sidecars and the cluster.
async fn stop(bench: Bench) {
    bench.controller.stop().await;
    for task in &bench.watch_tasks {
        task.abort();
    }
    let running: Vec<shoal_worker::Worker> = std::mem::take(&mut *bench.sidecars.lock().await)
        .into_values()
        .collect();
    for worker in running {
        let _ = worker.stop().await;
    }
    bench.cluster.cleanup().await;
}

async fn bench() {
    let members = env_number("SHOAL_BENCH_MEMBERS", 100);
    let jobs = env_number("SHOAL_BENCH_JOBS", 10_000);
    let rounds = env_number("SHOAL_BENCH_ROUNDS", 10);
    let (mut bench, jobs_from) = start(members, jobs).await;
    let (settled, before_swarm) = first_rollout(&mut bench, members, jobs, jobs_from).await;
    let directions = run_rounds(&mut bench, members, rounds, settled, before_swarm).await;
    for direction in &directions {
        direction.print();
    }
    let memory = bench.controller.memory();
    println!(
        "controller peak memory (VmHWM) {:.1} MiB, resident now {:.1} MiB",
        memory.peak_mib(),
        memory.resident_mib()
    );
    stop(bench).await;
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    if arguments.first().map(String::as_str) == Some(controller::CHILD_FLAG) {
        controller::run_child(&arguments[1..]);
        return;
    }
    // Two worker threads: the machine the targets are stated for has two cores.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(bench());
}
