//! Scale event → every member acknowledged (issue 5's second benchmark), for
//! 100 members × 10,000 jobs, target ≤ 2 s p95 on the emulated cluster.
//!
//! Everything runs in this process on the harness's cluster
//! ([`TestCluster`]: the emulated API server with the simulated StatefulSet
//! controller and kubelet, or the cluster in `SHOAL_TEST_KUBECONFIG`): the
//! real controller (`shoal_controller::run`), and one real
//! `shoal_worker::Worker` per member pod (file mode, acknowledging at once),
//! started when its pod appears and stopped when its pod is deleted, as a
//! sidecar container would be.
//!
//! A Swarm of 10,000 jobs (from a ConfigMap) runs over a 100-replica
//! StatefulSet. Each round patches the StatefulSet's `scale` subresource (what
//! `kubectl scale` does) 100 → 101 → 100 → 99 → 100. For each event the clock
//! runs from the patch to the moment every member of the new size has a Lease
//! carrying the acknowledgement (revision and hash) of the slice it holds once
//! the controller reports the revision in force; acknowledgement times are
//! taken from a Lease watch as the events arrive. Also reported, as a
//! breakdown: patch → the new pod Ready (or the removed pod marked for
//! deletion), → the controller's first and last slice write (from a
//! ConfigMap watch), → Swarm `Ready` seen (the revision in force; polled
//! every 20 ms, so it can trail the acknowledgements).
//!
//! `cargo bench -p shoal-worker --bench scale_ack` (env: SHOAL_BENCH_MEMBERS,
//! default 100; SHOAL_BENCH_JOBS, default 10000; SHOAL_BENCH_ROUNDS, default 20).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use shoal_controller::api::swarm::Swarm;
use shoal_emulator::harness::{TestCluster, fixtures};
use shoal_worker::{Settings, Worker, slice_doc};
use tokio::time::Instant;

const POOL: &str = "pool";
const SWARM: &str = "bench";
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An acknowledgement as a Lease carries it.
type Ack = (u64, String);

/// Every change of a member's acknowledgement, with when the watch saw it.
#[derive(Default)]
struct AckLog {
    current: BTreeMap<String, Ack>,
    changes: BTreeMap<String, Vec<(Instant, Ack)>>,
}

impl AckLog {
    fn record(&mut self, member: &str, ack: Ack) {
        if self.current.get(member) == Some(&ack) {
            return;
        }
        self.current.insert(member.to_owned(), ack.clone());
        self.changes
            .entry(member.to_owned())
            .or_default()
            .push((Instant::now(), ack));
    }

    /// When `member`'s Lease last came to carry `target` (no earlier than
    /// `since`), if it carries it now.
    fn acked_at(&self, member: &str, target: &Ack, since: Instant) -> Option<Instant> {
        if self.current.get(member) != Some(target) {
            return None;
        }
        let changes = self.changes.get(member)?;
        let at = changes.iter().rev().find(|(_, ack)| ack == target)?.0;
        Some(at.max(since))
    }
}

/// Milestones of a scale event, for the breakdown.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Milestone {
    /// A member pod became Ready.
    PodReady(String),
    /// A member pod was marked for deletion.
    PodLeaving(String),
    /// The controller wrote a member's slice ConfigMap.
    SliceWritten,
}

/// Milestones with when this process saw them.
type Timeline = Arc<Mutex<Vec<(Instant, Milestone)>>>;

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// Records every write of a slice ConfigMap as the watch delivers it.
fn watch_slices(
    client: Client,
    namespace: &str,
    timeline: Timeline,
) -> tokio::task::JoinHandle<()> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client, namespace);
    tokio::spawn(async move {
        let config = watcher::Config::default().labels(&format!("shoal.dev/swarm={SWARM}"));
        let mut events = watcher(config_maps, config).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(config_map)) = event
                && config_map.name_any().ends_with("-slice")
            {
                lock(&timeline).push((Instant::now(), Milestone::SliceWritten));
            }
        }
    })
}

fn lease_ack(lease: &Lease) -> Option<(String, Ack)> {
    let member = lease.name_any().strip_suffix("-member")?.to_owned();
    let annotations = lease.metadata.annotations.as_ref()?;
    let revision = annotations.get("shoal.dev/acked-revision")?.parse().ok()?;
    let hash = annotations.get("shoal.dev/acked-hash")?.clone();
    Some((member, (revision, hash)))
}

/// Records every member Lease's acknowledgement as the watch delivers it.
fn watch_acks(
    client: Client,
    namespace: &str,
    log: Arc<Mutex<AckLog>>,
) -> tokio::task::JoinHandle<()> {
    let leases: Api<Lease> = Api::namespaced(client, namespace);
    tokio::spawn(async move {
        let mut events = watcher(leases, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let lease = match event {
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => lease,
                _ => continue,
            };
            if let Some((member, ack)) = lease_ack(&lease) {
                lock(&log).record(&member, ack);
            }
        }
    })
}

/// One sidecar per live member pod: started when the pod appears, stopped
/// when it is marked for deletion (the kubelet stops its containers).
fn follow_pods(
    client: Client,
    namespace: String,
    dir: PathBuf,
    workers: Arc<tokio::sync::Mutex<BTreeMap<String, Worker>>>,
    timeline: Timeline,
) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    tokio::spawn(async move {
        // Pod uids already seen Ready / leaving, to record each transition once.
        let mut seen_ready = std::collections::BTreeSet::new();
        let mut seen_leaving = std::collections::BTreeSet::new();
        let config = watcher::Config::default().labels(&format!("app={POOL}"));
        let mut events = watcher(pods, config).boxed();
        while let Some(event) = events.next().await {
            let (pod, alive) = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                    let alive = pod.metadata.deletion_timestamp.is_none();
                    (pod, alive)
                }
                Ok(watcher::Event::Delete(pod)) => (pod, false),
                _ => continue,
            };
            let member = pod.name_any();
            let uid = pod.uid().unwrap_or_default();
            if alive && is_ready(&pod) && seen_ready.insert(uid.clone()) {
                lock(&timeline).push((Instant::now(), Milestone::PodReady(member.clone())));
            }
            if !alive && seen_leaving.insert(uid) {
                lock(&timeline).push((Instant::now(), Milestone::PodLeaving(member.clone())));
            }
            let mut running = workers.lock().await;
            if alive && !running.contains_key(&member) {
                let mut settings = Settings::for_member(&member, &namespace);
                settings.slice_file = Some(dir.join(format!("{member}.yaml")));
                settings.ack_on_apply = true;
                match Worker::start(client.clone(), settings).await {
                    Ok(worker) => {
                        running.insert(member, worker);
                    }
                    Err(error) => panic!("cannot start the sidecar of {member}: {error}"),
                }
            } else if !alive && let Some(worker) = running.remove(&member) {
                drop(running);
                if let Err(error) = worker.stop().await {
                    panic!("the sidecar of {member} failed: {error}");
                }
            }
        }
    })
}

/// What a settled Swarm holds: its revision and every member's slice.
struct Settled {
    revision: u64,
    slices: BTreeMap<String, Ack>,
}

/// Whether the controller reports a revision newer than `after` in
/// force on exactly `members` Ready members, and returns it with the slices
/// the members hold; otherwise says what it saw.
async fn settled(
    client: &Client,
    namespace: &str,
    members: usize,
    after: u64,
) -> Result<Settled, String> {
    let swarm = Api::<Swarm>::namespaced(client.clone(), namespace)
        .get(SWARM)
        .await
        .map_err(|error| format!("get Swarm: {error}"))?;
    let status = swarm.status.unwrap_or_default();
    let ready = format!("{members}/{members}");
    if status.phase.as_deref() != Some("Ready")
        || status.current_revision <= after
        || status.ready.as_deref() != Some(ready.as_str())
        || status.members.len() != members
    {
        return Err(format!(
            "phase {:?}, revision {}, ready {:?}, {} members",
            status.phase,
            status.current_revision,
            status.ready,
            status.members.len()
        ));
    }
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("shoal.dev/swarm={SWARM}")))
        .await
        .map_err(|error| format!("list slices: {error}"))?;
    let mut slices = BTreeMap::new();
    for ordinal in 0..members {
        let member = format!("{POOL}-{ordinal}");
        let name = shoal_worker::names::slice_config_map(&member);
        let config_map = config_maps
            .items
            .iter()
            .find(|config_map| config_map.name_any() == name)
            .ok_or_else(|| format!("no slice ConfigMap {name}"))?;
        let slice =
            slice_doc::decode(config_map, &member).map_err(|problem| problem.to_string())?;
        slices.insert(member, (slice.revision, slice.hash));
    }
    Ok(Settled {
        revision: status.current_revision,
        slices,
    })
}

/// Times of one scale event, from the patch.
struct Measured {
    in_force: Duration,
    all_acked: Duration,
    revision: u64,
    /// When the controller was done: the acknowledgement was seen.
    done: Instant,
}

/// Where the time of one scale event went, from the patch.
struct Breakdown {
    /// The new pod Ready (scale up) or the removed pod marked for deletion.
    pod: Option<Duration>,
    /// The controller's first and last slice write.
    first_write: Option<Duration>,
    last_write: Option<Duration>,
}

fn breakdown(timeline: &Timeline, started: Instant, done: Instant, pod: &Milestone) -> Breakdown {
    let events = lock(timeline);
    let window = || {
        events
            .iter()
            .filter(|(at, _)| *at >= started && *at <= done)
    };
    let writes: Vec<Instant> = window()
        .filter(|(_, milestone)| *milestone == Milestone::SliceWritten)
        .map(|(at, _)| *at)
        .collect();
    Breakdown {
        pod: window()
            .find(|(_, milestone)| milestone == pod)
            .map(|(at, _)| at.duration_since(started)),
        first_write: writes.first().map(|at| at.duration_since(started)),
        last_write: writes.last().map(|at| at.duration_since(started)),
    }
}

/// Waits for the Swarm to settle at `members` after `revision` and for every
/// member's acknowledgement of the slice it holds.
async fn until_acked(
    client: &Client,
    namespace: &str,
    members: usize,
    revision: u64,
    acks: &Mutex<AckLog>,
    started: Instant,
) -> Measured {
    let mut last_seen = String::new();
    let mut in_force = None;
    loop {
        assert!(
            started.elapsed() < SETTLE_LIMIT,
            "{members} members not settled and acknowledged after {SETTLE_LIMIT:?}; last saw: {last_seen}"
        );
        match settled(client, namespace, members, revision).await {
            Err(seen) => last_seen = seen,
            Ok(settled) => {
                let in_force = *in_force.get_or_insert_with(|| started.elapsed());
                let log = lock(acks);
                let acked: Option<Vec<Instant>> = settled
                    .slices
                    .iter()
                    .map(|(member, target)| log.acked_at(member, target, started))
                    .collect();
                match acked {
                    Some(times) => {
                        let last = times.into_iter().max().unwrap_or(started);
                        return Measured {
                            in_force,
                            all_acked: last.duration_since(started),
                            revision: settled.revision,
                            done: Instant::now(),
                        };
                    }
                    None => {
                        let waiting = settled
                            .slices
                            .iter()
                            .filter(|(member, target)| log.current.get(*member) != Some(target))
                            .count();
                        last_seen = format!(
                            "revision {} in force, {waiting} members not acknowledged",
                            settled.revision
                        );
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The figures of one step of the round (e.g. 100 → 101), over all rounds.
#[derive(Default)]
struct Samples {
    from: usize,
    to: usize,
    in_force: Vec<Duration>,
    all_acked: Vec<Duration>,
    pod: Vec<Duration>,
    first_write: Vec<Duration>,
    last_write: Vec<Duration>,
}

async fn scale(client: &Client, namespace: &str, replicas: usize) {
    let patch = serde_json::json!({ "spec": { "replicas": replicas } });
    if let Err(error) = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .patch_scale(POOL, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        panic!("cannot scale {POOL} to {replicas}: {error}");
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    if samples.is_empty() {
        println!("{what}: not observed");
        return;
    }
    samples.sort();
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    println!(
        "{what}: n={} p50={:.0} ms p95={:.0} ms p99={:.0} ms max={:.0} ms",
        samples.len(),
        ms(percentile(&samples, 0.50)),
        ms(percentile(&samples, 0.95)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap_or(&Duration::ZERO)),
    );
}

async fn bench() {
    let members = env_number("SHOAL_BENCH_MEMBERS", 100);
    let jobs = env_number("SHOAL_BENCH_JOBS", 10_000);
    let rounds = env_number("SHOAL_BENCH_ROUNDS", 20);

    let cluster = TestCluster::start()
        .await
        .unwrap_or_else(|error| panic!("cannot start the cluster: {error}"));
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crd.yaml");
    if let Err(error) = cluster
        .kubectl(&["apply", "-f", crd])
        .await
        .and_then(|output| output.ok())
    {
        panic!("cannot install the Swarm CRD: {error}");
    }

    let mut text = String::from("jobs:\n");
    for index in 0..jobs {
        text.push_str(&format!("- stream:{index:08}\n"));
    }
    let mut jobs_map = ConfigMap::default();
    jobs_map.metadata.name = Some("jobs".to_owned());
    jobs_map.data = Some([("config.yml".to_owned(), text)].into());
    Api::<ConfigMap>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &jobs_map)
        .await
        .unwrap_or_else(|error| panic!("cannot create the jobs ConfigMap: {error}"));

    let acks = Arc::new(Mutex::new(AckLog::default()));
    let lease_watch = watch_acks(client.clone(), &namespace, acks.clone());
    let timeline: Timeline = Arc::default();
    let slice_watch = watch_slices(client.clone(), &namespace, timeline.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let workers = Arc::new(tokio::sync::Mutex::new(BTreeMap::new()));
    let pod_follower = follow_pods(
        client.clone(),
        namespace.clone(),
        dir.path().to_path_buf(),
        workers.clone(),
        timeline.clone(),
    );

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(shoal_controller::run(
        client.clone(),
        shoal_controller::Settings {
            namespace: Some(namespace.clone()),
            ..shoal_controller::Settings::default()
        },
        async move {
            let _ = stopped.await;
        },
    ));

    let mut set = fixtures::parallel(fixtures::statefulset(POOL, members as i32));
    set.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("shoal.dev/swarm".to_owned(), SWARM.to_owned());
    Api::<StatefulSet>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &set)
        .await
        .unwrap_or_else(|error| panic!("cannot create the StatefulSet: {error}"));
    let swarm: Swarm = serde_json::from_value(serde_json::json!({
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "Swarm",
        "metadata": { "name": SWARM },
        "spec": { "jobsFrom": { "configMapKeyRef": { "name": "jobs", "key": "config.yml" } } },
    }))
    .expect("Swarm manifest");
    Api::<Swarm>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &swarm)
        .await
        .unwrap_or_else(|error| panic!("cannot create the Swarm: {error}"));

    let setup = Instant::now();
    let first = until_acked(&client, &namespace, members, 0, &acks, setup).await;
    println!(
        "{members} members × {jobs} jobs: revision {} in force after {:.2} s, every member acknowledged after {:.2} s",
        first.revision,
        first.in_force.as_secs_f64(),
        first.all_acked.as_secs_f64()
    );

    let mut revision = first.revision;
    let mut samples: Vec<Samples> = Vec::new();
    let steps = [members + 1, members, members - 1, members];
    for round in 0..rounds {
        let mut from = members;
        for (step, to) in steps.into_iter().enumerate() {
            let started = Instant::now();
            scale(&client, &namespace, to).await;
            let measured = until_acked(&client, &namespace, to, revision, &acks, started).await;
            revision = measured.revision;
            if samples.len() <= step {
                samples.push(Samples {
                    from,
                    to,
                    ..Samples::default()
                });
            }
            let pod = if to > from {
                Milestone::PodReady(format!("{POOL}-{from}"))
            } else {
                Milestone::PodLeaving(format!("{POOL}-{to}"))
            };
            let phases = breakdown(&timeline, started, measured.done, &pod);
            let sample = &mut samples[step];
            sample.in_force.push(measured.in_force);
            sample.all_acked.push(measured.all_acked);
            sample.pod.extend(phases.pod);
            sample.first_write.extend(phases.first_write);
            sample.last_write.extend(phases.last_write);
            from = to;
        }
        if round == 0 {
            println!("round 1 done (revision {revision})");
        }
    }
    for sample in samples {
        let (from, to) = (sample.from, sample.to);
        report(
            &format!("scale {from} → {to}: patch → every member's Lease acks its slice"),
            sample.all_acked,
        );
        let pod = if to > from {
            "new pod Ready"
        } else {
            "removed pod marked for deletion"
        };
        report(&format!("  breakdown: patch → {pod}"), sample.pod);
        report(
            "  breakdown: patch → first slice written",
            sample.first_write,
        );
        report("  breakdown: patch → last slice written", sample.last_write);
        report(
            "  breakdown: patch → revision in force seen (Swarm Ready)",
            sample.in_force,
        );
    }

    let _ = stop.send(());
    let _ = controller.await;
    pod_follower.abort();
    lease_watch.abort();
    slice_watch.abort();
    let running: Vec<Worker> = std::mem::take(&mut *workers.lock().await)
        .into_values()
        .collect();
    for worker in running {
        let _ = worker.stop().await;
    }
    cluster.cleanup().await;
}

fn main() {
    // Two worker threads: the machine the target is stated for has two cores.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(bench());
}
