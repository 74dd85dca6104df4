//! The ownership oracle, end to end: the real controller (in-process,
//! restartable) and real sidecars in exec mode (one `shoal-worker` per pod,
//! run by `shoal_sandbox::members`) over a StatefulSet pool on the test
//! cluster, through a seeded random schedule of `kubectl scale`, job list
//! edits, pod deletions, sidecar kills, controller kills and restarts,
//! dropped watches and API error bursts (the last two on the emulator only).
//!
//! Every job's process appends `start`/`stop` lines (time, job, member, pid)
//! to one log; a monitor thread also notes when a process that logged no
//! `stop` (SIGKILLed with its sidecar) was first seen dead. Afterwards the
//! oracle asserts that no job ever had two live processes at once and that
//! every job of the final list runs exactly once, on the member whose slice
//! holds it, and it reports the handoff gap (a job continuously in the list
//! stopped on one member → started on another): p50/p99.
//!
//! Five schedules (one at a time, each deterministic by seed):
//!
//! - `HotReload`, exec-mode sidecars, the faults above;
//! - the same with hostile actions and no admission policy: a member writes
//!   another member's Lease with its own pod-bound token (an acknowledgement
//!   of a reduced slice the controller never wrote, or of the stored slice
//!   with itself as holder; `renewTime` a minute back), and a user
//!   `kubectl patch`es a member's slice with another member's jobs and a
//!   correct hash (the sidecar must never acknowledge it; a running controller
//!   must write it back). The controller must not believe what it cannot check;
//! - with `manifests/admission/` installed: every forgery (also a copy of the
//!   victim's real pending acknowledgement, which only the policy can stop) and
//!   every hand edit by a namespace editor must be refused;
//! - `reload: Restart` with an application that reads its slice once, when its
//!   pod starts, and runs those jobs until the pod goes
//!   (`shoal_sandbox::members::ReadOnceApplication`), through scales, edits,
//!   pod deletions, sidecar kills (the application lives on: only a pod
//!   restart can take its jobs away), controller kills, faults and
//!   PodDisruptionBudget steps; a job is owned from its process's start until
//!   the pod stopped it;
//! - DeploymentPlans (issue 23, `plans.rs` beside this file): the sidecars
//!   also run a Manual-approval plan's instances, through the faults above and
//!   plan actions (approvals, concurrent plugin calls, payloads under every
//!   rollout type with pauses, scaling, stale/future/reused approvals, hand
//!   edits of `status.instances`, forged instance reports); every instance
//!   process start and stop is checked against the operations the schedule
//!   approved, and two copies are allowed only inside an approved relocation.
//!
//! A short schedule runs by default. A long one:
//! `SHOAL_OWNERSHIP_ROUNDS=200 cargo test --release -p shoal-sandbox --test ownership -- --nocapture`
//! (`SHOAL_OWNERSHIP_SEED` replays another schedule, `SHOAL_OWNERSHIP_JOBS`
//! sizes the job list; a test name picks one schedule).
//!
//! The log only brackets each process's life from inside (first line after
//! spawn, last line before exit), so an overlap shorter than that logging
//! latency would go unseen; the protocol orders a revoke's exit before the
//! grant's spawn by whole API round trips, which is what the oracle checks.

/// Writing a slice as the controller does (the sidecar refuses anything else).
#[path = "../../../worker/tests/common/owner.rs"]
mod slice_writer;

/// The DeploymentPlan half: instance processes checked against approved operations.
#[path = "ownership/plans.rs"]
mod plans;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use shoal_controller::api::swarm::Swarm;
use shoal_core::JobSet;
use shoal_core::format::parse_slice;
use shoal_core::names;
use shoal_emulator::harness::TestCluster;
use shoal_emulator::harness::fixtures::{parallel, statefulset};
use shoal_sandbox::members::{Members, MembersError, MembersOptions, ReadOnceApplication};
use shoal_worker::Settings;

const SWARM: &str = "oracle";
const POOL: &str = "pool";
const JOBS_CONFIG_MAP: &str = "oracle-jobs";

/// A small deterministic generator (xorshift64*), so a failing schedule can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low + 1))
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// The process ledger.

/// One process event: when (ns since the epoch), start or stop, job, member,
/// pid; `seen_dead` marks a stop the monitor inferred (no `stop` line).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: u128,
    start: bool,
    job: String,
    member: String,
    pid: u32,
    seen_dead: bool,
}

/// `(state, start time)` from `/proc/<pid>/stat`, or `None` if there is no such process.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is field 3, starttime 22.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start_time = fields.get(19)?.parse().ok()?;
    Some((state, start_time))
}

/// Whether the process that logged `started` (with that /proc start time) still lives.
fn alive(pid: u32, started: Option<u64>) -> bool {
    match (proc_stat(pid), started) {
        (None, _) | (Some(('Z', _)), _) => false,
        // The pid was reused by another process.
        (Some((_, now)), Some(then)) => now == then,
        (Some(_), None) => false,
    }
}

#[derive(Default)]
struct Ledger {
    events: Vec<Event>,
    /// Processes that logged `start` and have not stopped, by pid, with their /proc start time.
    open: BTreeMap<u32, (Event, Option<u64>)>,
    offset: u64,
    partial: Vec<u8>,
    problems: Vec<String>,
}

impl Ledger {
    /// Reads new log lines, then closes processes found dead before the read
    /// (a dead process wrote all it ever will) at the time they were seen dead.
    fn poll(&mut self, log: &Path) {
        let dead: Vec<u32> = self
            .open
            .iter()
            .filter(|(pid, (_, started))| !alive(**pid, *started))
            .map(|(pid, _)| *pid)
            .collect();
        self.read(log);
        let now = now_ns();
        for pid in dead {
            if let Some((event, _)) = self.open.remove(&pid) {
                self.events.push(Event {
                    at: now,
                    start: false,
                    seen_dead: true,
                    ..event
                });
            }
        }
    }

    fn read(&mut self, log: &Path) {
        let Ok(mut file) = std::fs::File::open(log) else {
            return;
        };
        let mut fresh = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err() || file.read_to_end(&mut fresh).is_err()
        {
            return;
        }
        self.offset += fresh.len() as u64;
        self.partial.extend_from_slice(&fresh);
        let Some(end) = self.partial.iter().rposition(|byte| *byte == b'\n') else {
            return;
        };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        for line in String::from_utf8_lossy(&complete).lines() {
            self.apply(line);
        }
    }

    fn apply(&mut self, line: &str) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parsed = match fields.as_slice() {
            [at, kind @ ("start" | "stop"), job, member, pid] => {
                match (at.parse::<u128>(), pid.parse::<u32>()) {
                    (Ok(at), Ok(pid)) => Some(Event {
                        at,
                        start: *kind == "start",
                        job: (*job).to_owned(),
                        member: (*member).to_owned(),
                        pid,
                        seen_dead: false,
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some(event) = parsed else {
            self.problems.push(format!("unreadable log line {line:?}"));
            return;
        };
        if event.start {
            if let Some((earlier, _)) = self.open.remove(&event.pid) {
                // The pid was reused: the earlier process died before this one started.
                self.events.push(Event {
                    at: event.at,
                    start: false,
                    seen_dead: true,
                    ..earlier
                });
            }
            let started = proc_stat(event.pid).map(|(_, start_time)| start_time);
            self.open.insert(event.pid, (event.clone(), started));
            self.events.push(event);
        } else {
            match self.open.get(&event.pid) {
                Some((started, _)) if started.job == event.job => {
                    self.open.remove(&event.pid);
                    self.events.push(event);
                }
                // SIGTERM before the `start` line: the process never logged a start.
                None => {}
                Some((started, _)) => self.problems.push(format!(
                    "pid {} logged stop for {} but started {}",
                    event.pid, event.job, started.job
                )),
            }
        }
    }
}

/// The ledger, kept current by a monitor thread until dropped.
struct Monitor {
    ledger: Arc<Mutex<Ledger>>,
    log: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(log: &Path) -> Monitor {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (ledger, stop, log) = (ledger.clone(), stop.clone(), log.to_path_buf());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    lock(&ledger).poll(&log);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Monitor {
            ledger,
            log: log.to_path_buf(),
            stop,
            thread: Some(thread),
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        let mut ledger = lock(&self.ledger);
        ledger.poll(&self.log);
        ledger
    }

    /// Running processes: (job, member) pairs.
    fn running(&self) -> Vec<(String, String)> {
        self.ledger()
            .open
            .values()
            .map(|(event, _)| (event.job.clone(), event.member.clone()))
            .collect()
    }

    /// Waits until no process of `member` is running (after a sidecar kill).
    async fn wait_member_dead(&self, member: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = self
                .running()
                .into_iter()
                .filter(|(_, owner)| owner == member)
                .count();
            if left == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{left} processes of killed sidecar {member} still run after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn finish(mut self) -> Ledger {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let mut ledger = lock(&self.ledger);
        ledger.poll(&self.log);
        std::mem::take(&mut *ledger)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn lock(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    ledger
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The oracle: per job, process lifetimes never overlap. Returns the handoff
/// gaps (ns) of the jobs in `steady` (never removed from the list) that
/// stopped on one member and next started on another.
fn oracle(mut events: Vec<Event>, steady: &BTreeSet<String>) -> Result<Vec<u128>, String> {
    events.sort();
    let mut running: BTreeMap<&str, &Event> = BTreeMap::new();
    let mut released: BTreeMap<&str, &Event> = BTreeMap::new();
    let mut gaps = Vec::new();
    for event in &events {
        if event.start {
            if let Some(holder) = running.get(event.job.as_str()) {
                return Err(format!(
                    "{} started on {} (pid {}) at {} while {} (pid {}, since {}) still ran it",
                    event.job,
                    event.member,
                    event.pid,
                    event.at,
                    holder.member,
                    holder.pid,
                    holder.at
                ));
            }
            if let Some(stopped) = released.get(event.job.as_str())
                && stopped.member != event.member
                && steady.contains(&event.job)
            {
                gaps.push(event.at.saturating_sub(stopped.at));
            }
            running.insert(&event.job, event);
        } else {
            match running.get(event.job.as_str()) {
                Some(holder) if holder.pid == event.pid => {
                    running.remove(event.job.as_str());
                    released.insert(&event.job, event);
                }
                other => {
                    return Err(format!(
                        "{} stopped by pid {} on {} that did not run it (running: {other:?})",
                        event.job, event.pid, event.member
                    ));
                }
            }
        }
    }
    gaps.sort_unstable();
    Ok(gaps)
}

/// How many times a job started on another member than the one that ran it last.
fn moves(events: &[Event]) -> usize {
    let mut sorted: Vec<&Event> = events.iter().filter(|event| event.start).collect();
    sorted.sort();
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    sorted
        .into_iter()
        .filter(|event| {
            last.insert(&event.job, &event.member)
                .is_some_and(|member| member != event.member)
        })
        .count()
}

fn percentile(sorted: &[u128], percent: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = (sorted.len() * percent / 100).min(sorted.len() - 1);
    sorted[index] as f64 / 1e6
}

// ---------------------------------------------------------------------------
// The cluster side.

/// The controller running in-process.
struct Controller {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Controller {
    /// The controller as its binary runs it: evictions through a client that does
    /// not retry, so a PodDisruptionBudget's refusal is seen and reported.
    async fn clients(cluster: &TestCluster) -> shoal_controller::Clients {
        let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path())
            .expect("the cluster's kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a client configuration from the kubeconfig");
        shoal_controller::Clients::from_config(config).expect("the controller's clients")
    }

    fn start(clients: &shoal_controller::Clients, namespace: &str) -> Controller {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let settings = shoal_controller::Settings {
            namespace: Some(namespace.to_owned()),
            identity: "ownership-oracle".to_owned(),
            resync: Duration::from_secs(5),
            ..shoal_controller::Settings::default()
        };
        let clients = clients.clone();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(error) =
                shoal_controller::run_with_clients(clients, settings, shutdown).await
            {
                tracing::error!(%error, "controller failed");
            }
        });
        Controller {
            stop: Some(stop),
            task,
        }
    }

    /// A crash: stops between any two writes.
    async fn kill(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
        self.stop.take();
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
    }
}

/// kubectl, retried through injected API errors.
async fn kubectl(cluster: &TestCluster, args: &[&str], stdin: Option<&str>) -> String {
    let mut last = String::new();
    for _ in 0..40 {
        let output = cluster
            .kubectl_with_stdin(args, stdin)
            .await
            .expect("kubectl runs");
        if output.success() {
            return output.stdout;
        }
        last = output.stderr;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("kubectl {args:?} kept failing: {last}");
}

fn jobs_yaml(jobs: &BTreeSet<String>) -> String {
    let mut yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {JOBS_CONFIG_MAP}\ndata:\n  config.yml: |\n    jobs:\n"
    );
    for job in jobs {
        yaml.push_str(&format!("    - {job}\n"));
    }
    yaml
}

fn swarm_yaml(reload: &str) -> String {
    format!(
        "apiVersion: shoal.dev/v1alpha1\nkind: Swarm\nmetadata:\n  name: {SWARM}\nspec:\n  jobsFrom:\n    configMapKeyRef:\n      name: {JOBS_CONFIG_MAP}\n      key: config.yml\n  strategy:\n    type: bounded\n  reload: {reload}\n  approval:\n    policy: Automatic\n"
    )
}

/// Installs the CRD, the job list, the Swarm (with `reload`) and its pool of
/// `replicas` pods (with that termination grace, if given; else the fixture's).
async fn install_swarm(
    cluster: &TestCluster,
    jobs: &BTreeSet<String>,
    reload: &str,
    replicas: i32,
    termination_grace_seconds: Option<i64>,
) {
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests/crd.yaml");
    kubectl(cluster, &["apply", "-f", crd], None).await;
    kubectl(cluster, &["apply", "-f", "-"], Some(&jobs_yaml(jobs))).await;
    kubectl(cluster, &["apply", "-f", "-"], Some(&swarm_yaml(reload))).await;
    let mut pool = parallel(statefulset(POOL, replicas));
    pool.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(names::LABEL_SWARM.to_owned(), SWARM.to_owned());
    if let Some(spec) = pool
        .spec
        .as_mut()
        .and_then(|spec| spec.template.spec.as_mut())
        && termination_grace_seconds.is_some()
    {
        spec.termination_grace_period_seconds = termination_grace_seconds;
    }
    Api::<StatefulSet>::namespaced(cluster.client(), cluster.namespace())
        .create(&PostParams::default(), &pool)
        .await
        .expect("create the pool");
}

/// Writes the job script next to the log and returns the exec template
/// running it. bash's `EPOCHREALTIME` stamps lines without a `date` child,
/// which a SIGTERM to the process group could kill mid-line. The trap comes
/// first: a process stopped before logging its start logs nothing the
/// oracle would have to pair.
fn job_command(log: &Path) -> String {
    let script = log.with_extension("sh");
    let body = format!(
        "trap 'echo \"${{EPOCHREALTIME/[.,]/}}000 stop $SHOAL_JOB $SHOAL_MEMBER $$\" >> {log}; exit 0' TERM\n\
         echo \"${{EPOCHREALTIME/[.,]/}}000 start $SHOAL_JOB $SHOAL_MEMBER $$\" >> {log}\n\
         sleep 100000 &\n\
         wait\n",
        log = log.display()
    );
    std::fs::write(&script, body).expect("write the job script");
    format!("exec bash {}", script.display())
}

/// What the cluster says should run: job → member, from the slice ConfigMaps,
/// once every member acknowledged its slice. `Err` says what is not there yet.
async fn settled_assignment(
    client: &Client,
    namespace: &str,
    jobs: &BTreeSet<String>,
    replicas: u32,
) -> Result<BTreeMap<String, String>, String> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let listed = config_maps
        .list(&ListParams::default().labels(&format!("{}={SWARM}", names::LABEL_SWARM)))
        .await
        .map_err(|error| format!("listing slices: {error}"))?;
    let expected_members: BTreeSet<String> = (0..replicas)
        .map(|ordinal| format!("{POOL}-{ordinal}"))
        .collect();
    let mut owners = BTreeMap::new();
    let mut members = BTreeSet::new();
    for cm in listed.items {
        let Some(member) = cm.labels().get(names::LABEL_MEMBER).cloned() else {
            continue;
        };
        let text = cm
            .data
            .as_ref()
            .and_then(|data| data.get(names::SLICE_DATA_KEY))
            .ok_or_else(|| format!("slice of {member} has no {}", names::SLICE_DATA_KEY))?;
        let slice = parse_slice(text).map_err(|error| format!("slice of {member}: {error}"))?;
        let lease = leases
            .get_opt(&names::member_lease(&member))
            .await
            .map_err(|error| format!("reading the Lease of {member}: {error}"))?;
        let acked = lease.as_ref().and_then(|lease| {
            lease
                .annotations()
                .get(names::ANNOTATION_ACKED_HASH)
                .cloned()
        });
        if acked.as_deref() != Some(slice.hash.as_str()) {
            return Err(format!(
                "{member} acknowledged {acked:?}, its slice is revision {} {}",
                slice.revision, slice.hash
            ));
        }
        for job in slice.jobs.iter() {
            if let Some(other) = owners.insert(job.as_str().to_owned(), member.clone()) {
                return Err(format!("{job} is in the slices of {member} and {other}"));
            }
        }
        members.insert(member);
    }
    if members != expected_members {
        return Err(format!(
            "slices for {members:?}, members {expected_members:?}"
        ));
    }
    let assigned: BTreeSet<String> = owners.keys().cloned().collect();
    if assigned != *jobs {
        return Err(format!(
            "slices hold {} jobs, the list {} ({} missing, {} extra)",
            assigned.len(),
            jobs.len(),
            jobs.difference(&assigned).count(),
            assigned.difference(jobs).count()
        ));
    }
    Ok(owners)
}

async fn swarm_status(client: &Client, namespace: &str) -> String {
    let swarms: Api<Swarm> = Api::namespaced(client.clone(), namespace);
    match swarms.get_opt(SWARM).await {
        Ok(Some(swarm)) => serde_json::to_string(&swarm.status).unwrap_or_default(),
        other => format!("{other:?}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Scale,
    EditJobs,
    DeletePod,
    KillSidecar,
    KillController,
    DropWatches,
    ApiErrors,
    /// One member writes another member's Lease: a forged acknowledgement and
    /// a `renewTime` moved back.
    Forge,
    /// A user patches a member's slice with another member's jobs and a correct hash.
    HandEdit,
    /// The pool's PodDisruptionBudget is tightened, relaxed or deleted.
    Budget,
    /// The user approves waiting plan operations (`kubectl shoal approve-op`,
    /// several at once, or `approveDeploymentWith`).
    PlanApprove,
    /// Concurrent `kubectl shoal relocate | stop | start | restart` calls.
    PlanRequests,
    /// A new payload under the next rollout type (Rolling, Canary, BlueGreen), maybe paused.
    PlanPayload,
    /// `kubectl shoal pause` or `resume` of the plan.
    PlanPause,
    /// `spec.deployment.instances` changed.
    PlanScale,
    /// A stale, future, reused or wrong-hash `shoal.dev/approve` value.
    StaleApproval,
    /// Another field manager rewrites the plan's `status.instances`.
    StatusHandEdit,
    /// A member writes instance reports on its own Lease or another member's.
    ForgeReports,
}

impl Action {
    /// Needs the emulator (fault injection).
    fn emulator_only(self) -> bool {
        matches!(self, Action::DropWatches | Action::ApiErrors)
    }
}

/// What a schedule runs against and what it does.
#[derive(Debug, Clone, Copy)]
struct Mode {
    /// `reload: Restart` with an application that reads its slice once, at
    /// pod start; otherwise `HotReload` with exec-mode sidecars.
    restart: bool,
    /// `manifests/admission/` is installed: forgeries and hand edits must be refused.
    policies: bool,
    /// The sidecars also run the instances of a DeploymentPlan (`plans::PLAN`),
    /// checked by `plans::plan_oracle`.
    plans: bool,
    /// Rounds when `SHOAL_OWNERSHIP_ROUNDS` is not set.
    rounds: usize,
    /// Jobs when `SHOAL_OWNERSHIP_JOBS` is not set.
    jobs: usize,
    /// The actions drawn from (those needing the emulator are dropped elsewhere).
    actions: &'static [Action],
}

/// A deck holding every applicable action once, filled up to `rounds` at
/// random, shuffled.
fn schedule(rng: &mut Rng, rounds: usize, kinds: &[Action]) -> Vec<Action> {
    // Scaling and job edits drive most moves, and the hostile writes are what
    // their schedules test; weigh them up.
    let weighted: Vec<Action> = kinds
        .iter()
        .flat_map(|kind| {
            let weight = match kind {
                Action::Scale
                | Action::EditJobs
                | Action::Forge
                | Action::HandEdit
                | Action::PlanApprove => 3,
                _ => 2,
            };
            std::iter::repeat_n(*kind, weight)
        })
        .collect();
    let mut deck = kinds.to_vec();
    while deck.len() < rounds {
        deck.push(weighted[rng.below(weighted.len())]);
    }
    for index in (1..deck.len()).rev() {
        deck.swap(index, rng.below(index + 1));
    }
    deck
}

const FORGER_ACCOUNT: &str = "oracle-member";
const EDITOR_ACCOUNT: &str = "oracle-editor";
const BUDGET: &str = "oracle-budget";

/// The identities of the hostile actions: a ServiceAccount allowed to write
/// every Lease of the namespace (as a worker role without the admission
/// policy lets any member), used with tokens bound to one member's pod; and
/// a namespace editor allowed to change ConfigMaps.
fn hostile_identities_yaml(namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {FORGER_ACCOUNT}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {EDITOR_ACCOUNT}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {FORGER_ACCOUNT}\n\
         rules:\n- apiGroups: [coordination.k8s.io]\n  resources: [leases]\n  verbs: [get, list, watch, create, patch, update]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {FORGER_ACCOUNT}\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {FORGER_ACCOUNT}\n\
         subjects:\n- kind: ServiceAccount\n  name: {FORGER_ACCOUNT}\n  namespace: {namespace}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {EDITOR_ACCOUNT}\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list, watch, create, patch, update]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {EDITOR_ACCOUNT}\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {EDITOR_ACCOUNT}\n\
         subjects:\n- kind: ServiceAccount\n  name: {EDITOR_ACCOUNT}\n  namespace: {namespace}\n"
    )
}

/// The pool's PodDisruptionBudget: `minAvailable` or `maxUnavailable`.
fn budget_yaml(rule: &str, value: u32) -> String {
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {BUDGET}\n\
         spec:\n  selector:\n    matchLabels:\n      app: {POOL}\n  {rule}: {value}\n"
    )
}

/// What the hostile actions achieved, for the report.
#[derive(Debug, Default)]
struct Hostility {
    forgeries_refused: usize,
    forgeries_written: usize,
    edits_refused: usize,
    edits_written: usize,
    not_delivered: usize,
}

/// A slice ConfigMap's slice, as stored.
async fn stored_slice(client: &Client, namespace: &str, pod: &str) -> Option<shoal_core::Slice> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = config_maps
        .get_opt(&names::slice_configmap(pod))
        .await
        .ok()
        .flatten()?;
    parse_slice(cm.data?.get(names::SLICE_DATA_KEY)?).ok()
}

/// One running member (`forger`, with a token bound to its pod) writes
/// another's Lease: an acknowledgement and a `renewTime` a minute back. The
/// acknowledgement is, at random: the victim's stored slice with the holder
/// kept (indistinguishable from the victim's own without the admission
/// policy, so only tried with it); a reduced slice the controller never
/// wrote; or the stored slice with the forger as holder. With the policy the
/// write must be refused; without it the controller must not believe it.
async fn forge(
    cluster: &TestCluster,
    members: &Members,
    rng: &mut Rng,
    policies: bool,
    hostility: &mut Hostility,
) -> String {
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let running: Vec<String> = members.running().into_keys().collect();
    if running.len() < 2 {
        return "forge: fewer than two members".to_owned();
    }
    let forger = running[rng.below(running.len())].clone();
    let others: Vec<&String> = running.iter().filter(|pod| **pod != forger).collect();
    let victim = others[rng.below(others.len())].clone();
    let Some(slice) = stored_slice(&client, &namespace, &victim).await else {
        return format!("forge: {victim} has no slice");
    };
    let kinds: &[&str] = if policies {
        &["copy", "made-up", "holder"]
    } else {
        &["made-up", "holder"]
    };
    let kind = kinds[rng.below(kinds.len())];
    let (revision, hash, holder) = match kind {
        "made-up" => {
            let reduced: Vec<String> = slice
                .jobs
                .iter()
                .take(slice.jobs.len() / 2)
                .map(|job| job.as_str().to_owned())
                .collect();
            let reduced = JobSet::parse(reduced).expect("keys of a stored slice are valid");
            (
                slice.revision + rng.below(2) as u64,
                shoal_core::slice::canonical_hash(&reduced),
                victim.clone(),
            )
        }
        "holder" => (slice.revision, slice.hash.clone(), forger.clone()),
        _ => (slice.revision, slice.hash.clone(), victim.clone()),
    };
    let moved_back = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60),
    );
    let patch = serde_json::json!({
        "metadata": {"annotations": {
            names::ANNOTATION_ACKED_REVISION: revision.to_string(),
            names::ANNOTATION_ACKED_HASH: hash,
        }},
        "spec": {"holderIdentity": holder, "renewTime": moved_back},
    });
    let note = format!(
        "forge ({kind}): {forger} writes {victim}'s Lease acknowledging revision {revision} (stored {})",
        slice.revision
    );
    for _ in 0..10 {
        // A pod-bound token stops working with its pod: a fresh one each try.
        let token = match cluster
            .service_account_token(&namespace, FORGER_ACCOUNT, Some(&forger))
            .await
        {
            Ok(token) => token,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Ok(intruder) = cluster.client_with_token(&token).await else {
            continue;
        };
        let leases: Api<Lease> = Api::namespaced(intruder, &namespace);
        let written = leases
            .patch(
                &names::member_lease(&victim),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await;
        match written {
            Ok(_) => {
                assert!(
                    !policies,
                    "with the admission policy installed, {forger} wrote {victim}'s Lease: {note}"
                );
                hostility.forgeries_written += 1;
                return format!("{note}: written");
            }
            Err(kube::Error::Api(status))
                if status.code == 403 && status.message.contains("shoal-member-leases") =>
            {
                assert!(policies, "refused by a policy not installed: {status:?}");
                hostility.forgeries_refused += 1;
                return format!("{note}: refused");
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                panic!("the forger lacks the grant the scenario needs: {status:?}")
            }
            // Gone meanwhile, or an injected error.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    hostility.not_delivered += 1;
    format!("{note}: not delivered (API errors or the pod went)")
}

/// A user patches a member's slice with jobs of another member's slice and
/// the hash recomputed to match. Without the admission policy (as the
/// administrator) the patch lands: the sidecar must refuse it and the
/// controller write the slice back. With the policy a namespace editor is refused.
async fn hand_edit(
    cluster: &TestCluster,
    rng: &mut Rng,
    policies: bool,
    editor_kubeconfig: Option<&Path>,
    controller_running: bool,
    hostility: &mut Hostility,
) -> String {
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let members: Vec<String> = match config_maps
        .list(&ListParams::default().labels(&format!("{}={SWARM}", names::LABEL_SWARM)))
        .await
    {
        Ok(list) => list
            .items
            .iter()
            .filter_map(|cm| cm.labels().get(names::LABEL_MEMBER).cloned())
            .collect(),
        Err(_) => Vec::new(),
    };
    if members.len() < 2 {
        return "hand edit: fewer than two slices".to_owned();
    }
    let victim = members[rng.below(members.len())].clone();
    let others: Vec<&String> = members.iter().filter(|pod| **pod != victim).collect();
    let donor = others[rng.below(others.len())].clone();
    let (Some(slice), Some(donated)) = (
        stored_slice(&client, &namespace, &victim).await,
        stored_slice(&client, &namespace, &donor).await,
    ) else {
        return format!("hand edit: no slice to edit for {victim} or {donor}");
    };
    let mut jobs: Vec<String> = slice
        .jobs
        .iter()
        .map(|job| job.as_str().to_owned())
        .collect();
    let taken: Vec<String> = donated
        .jobs
        .iter()
        .take(1 + rng.below(5))
        .map(|job| job.as_str().to_owned())
        .collect();
    jobs.extend(taken.iter().cloned());
    let edited = shoal_core::Slice::new(
        SWARM.to_owned(),
        victim.clone(),
        slice.revision + 1,
        JobSet::parse(jobs).expect("keys of stored slices are valid"),
    );
    let patch = serde_json::json!({"data": {names::SLICE_DATA_KEY: shoal_core::format::render_slice(&edited)}})
        .to_string();
    let name = names::slice_configmap(&victim);
    let args = ["patch", "configmap", &name, "--type", "merge", "-p", &patch];
    let note = format!(
        "hand edit: {victim}'s slice given {taken:?} of {donor}'s, revision {} with its hash",
        edited.revision
    );
    let Some(editor_kubeconfig) = editor_kubeconfig.filter(|_| policies) else {
        kubectl(cluster, &args, None).await;
        hostility.edits_written += 1;
        return format!(
            "{note}: written; {}",
            undone(
                &client,
                &namespace,
                &victim,
                &edited.hash,
                controller_running
            )
            .await
        );
    };
    let mut last = String::new();
    for _ in 0..10 {
        let output = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(editor_kubeconfig)
            .args(["-n", &namespace])
            .args(args)
            .output()
            .await
            .expect("kubectl runs");
        assert!(
            !output.status.success(),
            "with the admission policy installed, a namespace editor edited a slice: {note}"
        );
        last = String::from_utf8_lossy(&output.stderr).into_owned();
        if last.contains("shoal-managed-configmaps") && last.contains("is written by Shoal only") {
            hostility.edits_refused += 1;
            return format!("{note}: refused");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    hostility.not_delivered += 1;
    format!("{note}: not delivered ({})", last.trim())
}

/// After a hand edit that landed: the member's sidecar never acknowledges
/// the edited slice, and a running controller writes the slice back.
async fn undone(
    client: &Client,
    namespace: &str,
    victim: &str,
    edited_hash: &str,
    controller_running: bool,
) -> String {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let since = Instant::now();
    let limit = if controller_running { 30 } else { 3 };
    while since.elapsed() < Duration::from_secs(limit) {
        let acked = leases
            .get_opt(&names::member_lease(victim))
            .await
            .ok()
            .flatten()
            .and_then(|lease| {
                lease
                    .annotations()
                    .get(names::ANNOTATION_ACKED_HASH)
                    .cloned()
            });
        assert_ne!(
            acked.as_deref(),
            Some(edited_hash),
            "{victim}'s sidecar acknowledged its hand-edited slice"
        );
        let stored = stored_slice(client, namespace, victim).await;
        if controller_running && stored.is_some_and(|slice| slice.hash != edited_hash) {
            return format!("written back in {} ms", since.elapsed().as_millis());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !controller_running,
        "the controller did not write back {victim}'s hand-edited slice within {limit} s"
    );
    "not acknowledged; the controller is down".to_owned()
}

/// How many times the controller reported `reason` (Events with their counts).
async fn events_with_reason(client: &Client, namespace: &str, reason: &str) -> i32 {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace);
    match events.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .filter(|event| event.reason.as_deref() == Some(reason))
            .map(|event| event.count.unwrap_or(1))
            .sum(),
        Err(_) => 0,
    }
}

/// A step on the pool's PodDisruptionBudget: one eviction at a time
/// (`minAvailable` n-1 or `maxUnavailable` 1), none (`minAvailable` n), or no budget.
async fn budget_step(cluster: &TestCluster, rng: &mut Rng, replicas: u32) -> String {
    let (note, yaml) = match rng.below(4) {
        0 => (
            format!("budget: minAvailable {}", replicas.saturating_sub(1)),
            Some(budget_yaml("minAvailable", replicas.saturating_sub(1))),
        ),
        1 => (
            "budget: maxUnavailable 1".to_owned(),
            Some(budget_yaml("maxUnavailable", 1)),
        ),
        2 => (
            format!("budget: minAvailable {replicas} (no eviction allowed)"),
            Some(budget_yaml("minAvailable", replicas)),
        ),
        _ => ("budget: deleted".to_owned(), None),
    };
    match yaml {
        Some(yaml) => kubectl(cluster, &["apply", "-f", "-"], Some(&yaml)).await,
        None => {
            kubectl(
                cluster,
                &[
                    "delete",
                    "poddisruptionbudget",
                    BUDGET,
                    "--ignore-not-found",
                ],
                None,
            )
            .await
        }
    };
    note
}

static SCHEDULES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs a seeded schedule of `mode`'s actions against the controller and the
/// members, then checks the process ledger: no job ever had two running
/// processes, and every job of the final list runs once, where its slice says.
async fn run_schedule(mode: Mode) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            // Injected API errors are expected; the client's own error log would drown the rest.
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "warn,kube_client::client::builder=off,shoal_sandbox::members=info".into()
            }),
        )
        .with_test_writer()
        .try_init();
    let rounds: usize = env_or("SHOAL_OWNERSHIP_ROUNDS", mode.rounds);
    let seed: u64 = env_or("SHOAL_OWNERSHIP_SEED", 0x0005_eed0_0a11);
    let job_count: usize = env_or("SHOAL_OWNERSHIP_JOBS", mode.jobs);
    let mut rng = Rng(seed.max(1));
    // One schedule at a time: each starts hundreds of processes and times
    // Lease renewals, which schedules run side by side on two cores would starve.
    let _turn = SCHEDULES.lock().await;
    let started = Instant::now();

    let cluster = TestCluster::start().await.expect("a test cluster");
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let emulated = cluster.is_emulated();
    if !emulated {
        println!("not the emulator: dropped watches and API error bursts are skipped");
    }
    let kinds: Vec<Action> = mode
        .actions
        .iter()
        .copied()
        .filter(|action| emulated || !action.emulator_only())
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("jobs.log");
    std::fs::write(&log, "").expect("create the log");
    let monitor = Monitor::start(&log);

    let policies = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../manifests/admission/policies.yaml"
    );
    if mode.policies {
        kubectl(&cluster, &["apply", "-f", policies], None).await;
    }
    let hostile = kinds.iter().any(|kind| {
        matches!(
            kind,
            Action::Forge | Action::HandEdit | Action::ForgeReports
        )
    });
    let editor_kubeconfig = if hostile {
        kubectl(
            &cluster,
            &["apply", "-f", "-"],
            Some(&hostile_identities_yaml(&namespace)),
        )
        .await;
        let token = cluster
            .service_account_token(&namespace, EDITOR_ACCOUNT, None)
            .await
            .expect("a token for the namespace editor");
        Some(
            cluster
                .kubeconfig_with_token(dir.path(), EDITOR_ACCOUNT, &token)
                .expect("the editor's kubeconfig"),
        )
    } else {
        None
    };
    let universe: Vec<String> = (0..job_count + job_count / 3)
        .map(|index| format!("stream:{index:05}"))
        .collect();
    let mut jobs: BTreeSet<String> = universe[..job_count].iter().cloned().collect();
    let mut ever_removed: BTreeSet<String> = BTreeSet::new();
    let reload = if mode.restart { "Restart" } else { "HotReload" };
    if mode.plans {
        let crd = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../manifests/crd-deploymentplan.yaml"
        );
        kubectl(&cluster, &["apply", "-f", crd], None).await;
    }
    install_swarm(&cluster, &jobs, reload, 3, Some(15)).await;
    let mut replicas: u32 = 3;
    // The plan's instance processes: their own log and ledger.
    let instance_log = dir.path().join("instances.log");
    std::fs::write(&instance_log, "").expect("create the instance log");
    let instance_monitor = Monitor::start(&instance_log);
    let instance_command = mode.plans.then(|| plans::instance_command(&instance_log));
    let mut plan = None;
    if mode.plans {
        plans::describe_pool(&cluster).await;
        plan = Some(plans::PlanSchedule::new(&cluster));
    }

    let command = job_command(&log);
    let mut options = MembersOptions::new(&namespace, format!("app={POOL}"));
    if mode.restart {
        // The application reads its slice once; the sidecar delivers and acknowledges.
        options.application = Some(ReadOnceApplication {
            command: command.clone(),
        });
    }
    let restart = mode.restart;
    let members = Members::start_with(client.clone(), options, {
        move |pod: &Pod| -> Result<Settings, MembersError> {
            let mut settings =
                Settings::for_member(pod.name_any(), pod.namespace().unwrap_or_default());
            if restart {
                settings.ack_on_apply = true;
            } else {
                settings.exec = Some(command.clone());
            }
            settings.stop_grace = Duration::from_secs(10);
            settings.restart_backoff = Duration::from_millis(200);
            settings.lease_duration = Duration::from_secs(3);
            settings.fence_grace = Duration::from_millis(500);
            settings.fence_margin = Duration::from_secs(1);
            if let Some(instance_command) = &instance_command {
                settings.exec_instance = Some(instance_command.clone());
                settings.instance_settle = Duration::from_millis(500);
                settings.pod_uid = pod.metadata.uid.clone();
            }
            Ok(settings)
        }
    });
    let clients = Controller::clients(&cluster).await;
    let mut controller = Some(Controller::start(&clients, &namespace));

    let wait_settled = |jobs: BTreeSet<String>, replicas: u32, limit: Duration| {
        let client = client.clone();
        let namespace = namespace.clone();
        let monitor = &monitor;
        async move {
            let deadline = Instant::now() + limit;
            loop {
                let verdict = match settled_assignment(&client, &namespace, &jobs, replicas).await {
                    Err(pending) => Err(pending),
                    Ok(owners) => {
                        let mut running = monitor.running();
                        running.sort();
                        let expected: Vec<(String, String)> = owners.into_iter().collect();
                        if running == expected {
                            Ok(())
                        } else {
                            let running_set: BTreeSet<_> = running.iter().cloned().collect();
                            let expected_set: BTreeSet<_> = expected.iter().cloned().collect();
                            Err(format!(
                                "{} processes run, {} expected; not running {:?}; unexpected {:?}",
                                running.len(),
                                expected.len(),
                                expected_set
                                    .difference(&running_set)
                                    .take(5)
                                    .collect::<Vec<_>>(),
                                running_set
                                    .difference(&expected_set)
                                    .take(5)
                                    .collect::<Vec<_>>()
                            ))
                        }
                    }
                };
                match verdict {
                    Ok(()) => return,
                    Err(pending) if Instant::now() > deadline => panic!(
                        "the cluster did not settle within {limit:?}: {pending}; Swarm status {}",
                        swarm_status(&client, &namespace).await
                    ),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    };
    // Generous: 300 job processes start on a machine other builds may share.
    wait_settled(jobs.clone(), replicas, Duration::from_secs(180)).await;
    if let Some(plan) = plan.as_mut() {
        plan.first_deployment(&cluster, &instance_monitor).await;
    }
    let settled_at = started.elapsed();

    // The schedule.
    let deck = schedule(&mut rng, rounds, &kinds);
    let mut revive_at: Vec<(Instant, String)> = Vec::new();
    let mut restart_at: Option<Instant> = None;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut hostility = Hostility::default();
    // What the schedule did and when (ns since the epoch), to explain a violation.
    let mut actions: Vec<(u128, String)> = Vec::new();
    for action in deck {
        let now = Instant::now();
        for (_, pod) in revive_at.iter().filter(|(due, _)| *due <= now) {
            // The pod may have been replaced meanwhile; its new sidecar runs already.
            let revived = members.revive(pod).await;
            actions.push((now_ns(), format!("revive sidecar {pod}: {revived:?}")));
        }
        revive_at.retain(|(due, _)| *due > now);
        if restart_at.is_some_and(|due| due <= now) {
            restart_at = None;
            controller = Some(Controller::start(&clients, &namespace));
            actions.push((now_ns(), "restart controller".to_owned()));
        }
        let mut note = format!("{action:?}");
        match action {
            Action::Scale => {
                let before = replicas;
                replicas = 1 + rng.below(5) as u32;
                if let Some(plan) = plan.as_mut() {
                    for ordinal in replicas..before {
                        plan.disrupted(Some(format!("{POOL}-{ordinal}")));
                    }
                }
                note = format!("scale to {replicas}");
                let flag = format!("--replicas={replicas}");
                kubectl(&cluster, &["scale", "statefulset", POOL, &flag], None).await;
            }
            Action::EditJobs => {
                let present: Vec<String> = jobs.iter().cloned().collect();
                for _ in 0..rng.below(20) {
                    let job = &present[rng.below(present.len())];
                    if jobs.len() > 1 && jobs.remove(job) {
                        ever_removed.insert(job.clone());
                    }
                }
                // Added jobs are new ones, so that the list keeps its size over a long run.
                for _ in 0..rng.below(20) {
                    let absent: Vec<&String> =
                        universe.iter().filter(|job| !jobs.contains(*job)).collect();
                    if !absent.is_empty() {
                        jobs.insert(absent[rng.below(absent.len())].clone());
                    }
                }
                note = format!("edit jobs: {} now", jobs.len());
                kubectl(&cluster, &["apply", "-f", "-"], Some(&jobs_yaml(&jobs))).await;
            }
            Action::DeletePod => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                let existing: Vec<String> = match pods
                    .list(&ListParams::default().labels(&format!("app={POOL}")))
                    .await
                {
                    Ok(list) => list.items.iter().map(|pod| pod.name_any()).collect(),
                    Err(_) => Vec::new(),
                };
                if !existing.is_empty() {
                    let pod = &existing[rng.below(existing.len())];
                    if let Some(plan) = plan.as_mut() {
                        plan.disrupted(Some(pod.clone()));
                    }
                    note = format!("delete pod {pod}");
                    kubectl(&cluster, &["delete", "pod", pod, "--wait=false"], None).await;
                }
            }
            Action::KillSidecar => {
                let running: Vec<String> = members.running().into_keys().collect();
                if !running.is_empty() {
                    let pod = running[rng.below(running.len())].clone();
                    if let Some(plan) = plan.as_mut() {
                        plan.disrupted(Some(pod.clone()));
                    }
                    note = format!("kill sidecar {pod}");
                    if members.kill(&pod).await.is_ok() {
                        // Exec processes die with their sidecar; an application
                        // container lives on.
                        if !mode.restart {
                            monitor
                                .wait_member_dead(&pod, Duration::from_secs(20))
                                .await;
                        }
                        revive_at.push((Instant::now() + rng.millis(200, 5000), pod));
                    }
                }
            }
            Action::KillController => match controller.take() {
                Some(running) => {
                    running.kill().await;
                    restart_at = Some(Instant::now() + rng.millis(0, 2000));
                }
                None => {
                    restart_at = None;
                    controller = Some(Controller::start(&clients, &namespace));
                }
            },
            Action::DropWatches => {
                if let Some(plan) = plan.as_mut() {
                    plan.disrupted(None);
                }
                if let Some(faults) = cluster.faults() {
                    faults.drop_all_watches();
                }
            }
            Action::ApiErrors => {
                if let Some(plan) = plan.as_mut() {
                    plan.disrupted(None);
                }
                if let Some(faults) = cluster.faults() {
                    let status = if rng.below(2) == 0 { 500 } else { 503 };
                    let count = 3 + rng.below(20);
                    note = format!("fail the next {count} requests with {status}");
                    faults.fail_next(count, None, None, status);
                }
            }
            Action::Forge => {
                note = forge(&cluster, &members, &mut rng, mode.policies, &mut hostility).await;
            }
            Action::HandEdit => {
                note = hand_edit(
                    &cluster,
                    &mut rng,
                    mode.policies,
                    editor_kubeconfig.as_deref(),
                    controller.is_some(),
                    &mut hostility,
                )
                .await;
            }
            Action::Budget => note = budget_step(&cluster, &mut rng, replicas).await,
            Action::PlanApprove
            | Action::PlanRequests
            | Action::PlanPayload
            | Action::PlanPause
            | Action::PlanScale
            | Action::StaleApproval
            | Action::StatusHandEdit
            | Action::ForgeReports => {
                if let Some(plan) = plan.as_mut() {
                    note = plan
                        .step(action, &cluster, &members, &mut rng, replicas)
                        .await;
                }
            }
        }
        actions.push((now_ns(), note));
        *counts.entry(format!("{action:?}")).or_default() += 1;
        tokio::time::sleep(rng.millis(100, 1500)).await;
    }

    // Everything comes back, evictions are allowed one at a time, then the cluster settles.
    for (_, pod) in revive_at.drain(..) {
        let _ = members.revive(&pod).await;
    }
    if controller.is_none() {
        controller = Some(Controller::start(&clients, &namespace));
    }
    if kinds.contains(&Action::Budget) {
        kubectl(
            &cluster,
            &["apply", "-f", "-"],
            Some(&budget_yaml("maxUnavailable", 1)),
        )
        .await;
    }
    let chaos_ended = started.elapsed();
    let limit = if mode.restart { 240 } else { 120 };
    wait_settled(jobs.clone(), replicas, Duration::from_secs(limit)).await;
    let plan_rest = match plan.as_mut() {
        Some(plan) => {
            plan.settle(&cluster, &instance_monitor, Duration::from_secs(limit))
                .await
        }
        None => Ok(()),
    };
    let settle_time = started.elapsed() - chaos_ended;
    // Stopping the sidecars below stops every instance: a fault, not a change.
    if let Some(plan) = plan.as_mut() {
        plan.disrupted(None);
    }

    let distrusted = events_with_reason(&client, &namespace, "LeaseNotTrusted").await;
    let evicted = events_with_reason(&client, &namespace, "MemberRestarted").await;
    let blocked = events_with_reason(&client, &namespace, "EvictionBlocked").await;
    if let Some(controller) = controller.take() {
        controller.stop().await;
    }
    members.stop().await;
    let ledger = monitor.finish();
    let instance_ledger = instance_monitor.finish();
    if let Some(plan) = plan.take() {
        plans::report(
            plan,
            instance_ledger,
            plan_rest,
            &actions,
            format!("{mode:?}, seed {seed}, {rounds} rounds"),
        );
    }
    assert!(
        ledger.problems.is_empty(),
        "the log is inconsistent: {:?}",
        ledger.problems
    );
    let starts = ledger.events.iter().filter(|event| event.start).count();
    let silent_deaths = ledger.events.iter().filter(|event| event.seen_dead).count();
    let steady: BTreeSet<String> = universe
        .iter()
        .filter(|job| !ever_removed.contains(*job))
        .cloned()
        .collect();
    let events = ledger.events.clone();
    let moved = moves(&events);
    let gaps = match oracle(ledger.events, &steady) {
        Ok(gaps) => gaps,
        Err(violation) => {
            let job = violation.split_whitespace().next().unwrap_or_default();
            let mut history: Vec<&Event> = events.iter().filter(|event| event.job == job).collect();
            history.sort();
            let from = history.first().map_or(0, |event| event.at);
            let context: Vec<&(u128, String)> = actions
                .iter()
                .filter(|(at, _)| *at + 10_000_000_000 >= from)
                .collect();
            panic!(
                "ownership violated ({mode:?}, seed {seed}): {violation}\n{job}'s processes: {history:#?}\nschedule since: {context:#?}"
            );
        }
    };
    if mode.policies && !emulated {
        kubectl(
            &cluster,
            &["delete", "-f", policies, "--ignore-not-found"],
            None,
        )
        .await;
    }
    println!(
        "ownership oracle ({reload}, admission policies {}): seed {seed}, {rounds} rounds {counts:?}, {hostility:?}, \
         {distrusted} LeaseNotTrusted warnings, {evicted} evictions, {blocked} refused by the budget, \
         {} jobs at the end over {replicas} members; \
         {starts} process starts ({silent_deaths} killed without a stop line); first settle {:.1}s, \
         chaos {:.1}s, final settle {:.1}s; {moved} moves; handoff gap over {} moves of jobs never removed from the list: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        if mode.policies { "on" } else { "off" },
        jobs.len(),
        settled_at.as_secs_f64(),
        (chaos_ended - settled_at).as_secs_f64(),
        settle_time.as_secs_f64(),
        gaps.len(),
        percentile(&gaps, 50),
        percentile(&gaps, 99),
        percentile(&gaps, 100),
    );
    for (at, note) in &actions {
        println!(
            "  {:>8.3}s {note}",
            at.saturating_sub(actions[0].0) as f64 / 1e9
        );
    }
    if counts.contains_key("Forge") {
        assert!(
            hostility.forgeries_refused + hostility.forgeries_written > 0,
            "the schedule delivered no forgery: {hostility:?}"
        );
    }
    if counts.contains_key("HandEdit") {
        assert!(
            hostility.edits_refused + hostility.edits_written > 0,
            "the schedule delivered no hand edit: {hostility:?}"
        );
    }
    assert!(
        mode.plans || moved > 0,
        "the schedule moved jobs between members"
    );
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_job_ever_has_two_owners_through_scaling_edits_deletions_kills_restarts_and_faults() {
    run_schedule(Mode {
        restart: false,
        policies: false,
        plans: false,
        rounds: 14,
        jobs: 300,
        actions: &[
            Action::Scale,
            Action::EditJobs,
            Action::DeletePod,
            Action::KillSidecar,
            Action::KillController,
            Action::DropWatches,
            Action::ApiErrors,
        ],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_acknowledgements_and_hand_edited_slices_give_no_job_two_owners_without_the_admission_policy()
 {
    run_schedule(Mode {
        restart: false,
        policies: false,
        plans: false,
        rounds: 10,
        jobs: 150,
        actions: &[
            Action::Scale,
            Action::EditJobs,
            Action::KillSidecar,
            Action::KillController,
            Action::Forge,
            Action::HandEdit,
        ],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_admission_policy_every_forged_acknowledgement_and_hand_edit_of_a_schedule_is_refused()
 {
    run_schedule(Mode {
        restart: false,
        policies: true,
        plans: false,
        rounds: 8,
        jobs: 150,
        actions: &[
            Action::Scale,
            Action::EditJobs,
            Action::DeletePod,
            Action::KillController,
            Action::Forge,
            Action::HandEdit,
        ],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_restart_an_application_reading_its_slice_once_never_shares_a_job_through_scaling_edits_kills_and_budgets()
 {
    run_schedule(Mode {
        restart: true,
        policies: false,
        plans: false,
        rounds: 10,
        jobs: 150,
        actions: &[
            Action::Scale,
            Action::EditJobs,
            Action::DeletePod,
            Action::KillSidecar,
            Action::KillController,
            Action::Budget,
            Action::DropWatches,
            Action::ApiErrors,
        ],
    })
    .await;
}

/// DeploymentPlans under the same schedule (issue 23): no instance changes
/// without an approved operation naming it, its member and its content; never
/// two running copies outside an approved make-before-break relocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_plan_instance_changes_or_runs_twice_without_an_approved_operation_through_hostile_reports_stale_approvals_hand_edits_pauses_and_faults()
 {
    run_schedule(Mode {
        restart: false,
        policies: false,
        plans: true,
        rounds: 18,
        jobs: 30,
        actions: &[
            Action::Scale,
            Action::DeletePod,
            Action::KillSidecar,
            Action::KillController,
            Action::DropWatches,
            Action::ApiErrors,
            Action::PlanApprove,
            Action::PlanRequests,
            // Three payload changes at least: one per rollout type, each paused once.
            Action::PlanPayload,
            Action::PlanPayload,
            Action::PlanPayload,
            Action::PlanPause,
            Action::PlanScale,
            Action::StaleApproval,
            Action::StatusHandEdit,
            Action::ForgeReports,
        ],
    })
    .await;
}

// ---------------------------------------------------------------------------
// The oracle itself must be able to fail.

fn event(at: u128, start: bool, job: &str, member: &str, pid: u32) -> Event {
    Event {
        at,
        start,
        job: job.to_owned(),
        member: member.to_owned(),
        pid,
        seen_dead: false,
    }
}

#[test]
fn the_oracle_reports_a_job_started_while_another_process_runs_it() {
    let events = vec![
        event(10, true, "a", "pool-0", 1),
        event(20, true, "a", "pool-1", 2),
        event(30, false, "a", "pool-0", 1),
    ];
    let violation = oracle(events, &BTreeSet::new()).unwrap_err();
    assert!(
        violation.contains("a started on pool-1 (pid 2)"),
        "{violation}"
    );
}

#[test]
fn the_oracle_measures_handoff_gaps_of_steady_jobs_between_members_only() {
    let steady: BTreeSet<String> = ["a".to_owned()].into();
    let events = vec![
        event(10, true, "a", "pool-0", 1),
        event(20, false, "a", "pool-0", 1),
        event(1_000_020, true, "a", "pool-1", 2),
        event(1_000_030, false, "a", "pool-1", 2),
        event(1_000_040, true, "a", "pool-1", 3),
        event(10, true, "b", "pool-0", 4),
        event(20, false, "b", "pool-0", 4),
        event(50, true, "b", "pool-1", 5),
    ];
    assert_eq!(oracle(events, &steady), Ok(vec![1_000_000]));
}

#[test]
fn moves_count_starts_on_another_member_than_the_last_one() {
    let events = vec![
        event(10, true, "a", "pool-0", 1),
        event(20, false, "a", "pool-0", 1),
        event(30, true, "a", "pool-0", 2),
        event(40, false, "a", "pool-0", 2),
        event(50, true, "a", "pool-1", 3),
        event(10, true, "b", "pool-1", 4),
    ];
    assert_eq!(moves(&events), 1);
}

#[test]
fn the_ledger_pairs_log_lines_and_closes_processes_seen_dead() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("jobs.log");
    // pid 0 is never a live process: its `start` is closed as seen dead.
    std::fs::write(
        &log,
        "5 start a pool-0 0\n6 start b pool-1 4194303\n7 stop b pool-1 4194303\n8 stop c pool-0 9\n9 sta",
    )
    .unwrap();
    let mut ledger = Ledger::default();
    ledger.poll(&log);
    ledger.poll(&log);
    assert!(ledger.problems.is_empty(), "{:?}", ledger.problems);
    assert!(ledger.open.is_empty());
    let kinds: Vec<(String, bool, bool)> = ledger
        .events
        .iter()
        .map(|event| (event.job.clone(), event.start, event.seen_dead))
        .collect();
    assert_eq!(
        kinds,
        [
            ("a".to_owned(), true, false),
            ("b".to_owned(), true, false),
            ("b".to_owned(), false, false),
            ("a".to_owned(), false, true),
        ]
    );
    assert_eq!(ledger.partial, b"9 sta");
}

// ---------------------------------------------------------------------------
// A revoke is settled by the acknowledgement of that revoke, not by an older
// acknowledgement of a slice with the same jobs (hash).

/// One exchange with a sidecar's localhost server: (status, body).
async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    let headers = [("content-type", "application/json")];
    let body = (!body.is_empty()).then_some(body);
    let response = shoal_emulator::http_client::request(addr, method, path, &headers, body)
        .await
        .ok()?;
    Some((response.status, response.body))
}

/// The slice a sidecar delivers to its application (`GET /v1/slice`).
async fn delivered(members: &Members, pod: &str) -> Option<shoal_worker::SliceView> {
    let addr = members.running().get(pod)?.http_addr;
    let (status, body) = http(addr, "GET", "/v1/slice", "").await?;
    if status != 200 {
        return None;
    }
    serde_json::from_str(&body).ok()
}

async fn slice_jobs(client: &Client, namespace: &str, pod: &str) -> BTreeSet<String> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    config_maps
        .get_opt(&names::slice_configmap(pod))
        .await
        .ok()
        .flatten()
        .and_then(|cm| cm.data?.get(names::SLICE_DATA_KEY).cloned())
        .and_then(|text| parse_slice(&text).ok())
        .map(|slice| {
            slice
                .jobs
                .iter()
                .map(|job| job.as_str().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_settled_simply(
    client: &Client,
    namespace: &str,
    jobs: &BTreeSet<String>,
    replicas: u32,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match settled_assignment(client, namespace, jobs, replicas).await {
            Ok(owners) => return owners,
            Err(pending) if Instant::now() > deadline => panic!(
                "not settled at {replicas} members: {pending}; Swarm status {}",
                swarm_status(client, namespace).await
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_waits_for_its_own_acknowledgement_not_an_older_one_of_the_same_slice() {
    let cluster = TestCluster::start().await.expect("a test cluster");
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let jobs: BTreeSet<String> = (0..12).map(|index| format!("stream:{index:02}")).collect();
    install_swarm(&cluster, &jobs, "HotReload", 2, None).await;
    // pool-0's application confirms slices itself (POST /v1/ack), when the test lets it.
    let members = Members::start(client.clone(), &namespace, &format!("app={POOL}"), {
        move |pod: &Pod| -> Result<Settings, MembersError> {
            let mut settings =
                Settings::for_member(pod.name_any(), pod.namespace().unwrap_or_default());
            settings.ack_on_apply = pod.name_any() != "pool-0";
            Ok(settings)
        }
    });
    // Its application confirms every slice until `careful` is set; from then
    // on it stops confirming for good once it is handed any of `moving`.
    let confirming = Arc::new(AtomicBool::new(true));
    let careful = Arc::new(AtomicBool::new(false));
    let moving_shared: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let application = {
        let (confirming, careful, moving) =
            (confirming.clone(), careful.clone(), moving_shared.clone());
        let members_running = members.watch_running();
        tokio::spawn(async move {
            loop {
                let addr = members_running
                    .borrow()
                    .get("pool-0")
                    .map(|member| member.http_addr);
                if let Some(addr) = addr
                    && let Some((200, body)) = http(addr, "GET", "/v1/slice", "").await
                    && let Ok(slice) = serde_json::from_str::<shoal_worker::SliceView>(&body)
                {
                    let handed = {
                        let moving = moving.lock().unwrap_or_else(|p| p.into_inner());
                        slice.jobs.iter().any(|job| moving.contains(job))
                    };
                    if careful.load(Ordering::Relaxed) && handed {
                        confirming.store(false, Ordering::Relaxed);
                    }
                    if confirming.load(Ordering::Relaxed) {
                        let ack = serde_json::to_string(&slice.ack_target()).unwrap_or_default();
                        let _ = http(addr, "POST", "/v1/ack", &ack).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let controller = Controller::start(&Controller::clients(&cluster).await, &namespace);

    let at_two = wait_settled_simply(&client, &namespace, &jobs, 2).await;
    kubectl(
        &cluster,
        &["scale", "statefulset", POOL, "--replicas=3"],
        None,
    )
    .await;
    let at_three = wait_settled_simply(&client, &namespace, &jobs, 3).await;
    // The jobs pool-0 gives to pool-2 when the pool grows (and takes back when it shrinks).
    let moving: BTreeSet<String> = jobs
        .iter()
        .filter(|job| at_two[*job] == "pool-0" && at_three[*job] == "pool-2")
        .cloned()
        .collect();
    assert!(
        !moving.is_empty(),
        "scaling up moves jobs from pool-0 to pool-2"
    );

    // Shrink: pool-0 confirms the revoke of what it gives back (if anything),
    // is then handed `moving` back, and its application does not confirm that.
    *moving_shared.lock().unwrap_or_else(|p| p.into_inner()) = moving.clone();
    careful.store(true, Ordering::Relaxed);
    kubectl(
        &cluster,
        &["scale", "statefulset", POOL, "--replicas=2"],
        None,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let holds = delivered(&members, "pool-0")
            .await
            .is_some_and(|slice| moving.iter().all(|job| slice.jobs.contains(job)));
        if holds {
            break;
        }
        if Instant::now() >= deadline {
            panic!(
                "pool-0 should be handed {moving:?} back; it delivers {:?}; its slice {:?}; Swarm status {}",
                delivered(&members, "pool-0").await,
                slice_jobs(&client, &namespace, "pool-0").await,
                swarm_status(&client, &namespace).await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Grow again: the controller revokes the same jobs from pool-0, and the
    // slice it keeps is the very one (hash) pool-0 acknowledged while shrinking,
    // at an older revision. Its application has not confirmed anything since,
    // so pool-2 must not get them.
    let of_pool_0 = |owners: &BTreeMap<String, String>| -> BTreeSet<String> {
        owners
            .iter()
            .filter(|(_, member)| *member == "pool-0")
            .map(|(job, _)| job.clone())
            .collect()
    };
    let kept: Vec<String> = of_pool_0(&at_two)
        .intersection(&of_pool_0(&at_three))
        .cloned()
        .collect();
    let kept_hash = shoal_core::slice::canonical_hash(&JobSet::parse(kept).expect("valid keys"));
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let acked = |lease: &Lease, key: &str| lease.annotations().get(key).cloned();
    let lease = leases
        .get(&names::member_lease("pool-0"))
        .await
        .expect("pool-0's Lease");
    assert_eq!(
        acked(&lease, names::ANNOTATION_ACKED_HASH),
        Some(kept_hash.clone()),
        "the scenario needs pool-0's Lease to acknowledge the slice the next revoke keeps"
    );
    kubectl(
        &cluster,
        &["scale", "statefulset", POOL, "--replicas=3"],
        None,
    )
    .await;
    let mut saw_revoke = false;
    let watch_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < watch_until {
        saw_revoke |= delivered(&members, "pool-0")
            .await
            .is_some_and(|slice| slice.hash == kept_hash);
        let granted: BTreeSet<String> = slice_jobs(&client, &namespace, "pool-2")
            .await
            .intersection(&moving)
            .cloned()
            .collect();
        if !granted.is_empty() {
            let lease = leases.get(&names::member_lease("pool-0")).await.ok();
            panic!(
                "{granted:?} were granted to pool-2 while pool-0 had not acknowledged their revoke (its application still runs them): pool-0 delivers {:?}, its Lease acknowledges revision {:?} hash {:?}",
                delivered(&members, "pool-0").await,
                lease
                    .as_ref()
                    .and_then(|lease| acked(lease, names::ANNOTATION_ACKED_REVISION)),
                lease
                    .as_ref()
                    .and_then(|lease| acked(lease, names::ANNOTATION_ACKED_HASH)),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(saw_revoke, "pool-0 was sent the revoke");

    // Once pool-0 confirms the revoke, the jobs move.
    confirming.store(true, Ordering::Relaxed);
    let owners = wait_settled_simply(&client, &namespace, &jobs, 3).await;
    assert!(moving.iter().all(|job| owners[job] == "pool-2"));

    application.abort();
    controller.stop().await;
    members.stop().await;
    cluster.cleanup().await;
}

// ---------------------------------------------------------------------------
// Self-fencing must leave no process running once the Lease can be seen as
// expired, also for a job that takes a while to exit after SIGTERM.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_sidecars_slow_to_exit_job_is_gone_before_its_lease_expires() {
    let cluster = TestCluster::start().await.expect("a test cluster");
    let Some(faults) = cluster.faults() else {
        println!("skipped: failing Lease renewals needs the emulator's fault injection");
        return;
    };
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("jobs.log");
    // The job flushes for 2.5 s after SIGTERM, well within its stop grace.
    let script = dir.path().join("job.sh");
    std::fs::write(
        &script,
        format!(
            "trap 'sleep 2.5; echo \"${{EPOCHREALTIME/[.,]/}}000 stop $SHOAL_JOB $SHOAL_MEMBER $$\" >> {log}; exit 0' TERM\n\
             echo \"${{EPOCHREALTIME/[.,]/}}000 start $SHOAL_JOB $SHOAL_MEMBER $$\" >> {log}\n\
             sleep 100000 &\n\
             wait\n",
            log = log.display()
        ),
    )
    .expect("write the job script");
    let slice = shoal_core::Slice::new(
        SWARM.to_owned(),
        "solo-0".to_owned(),
        1,
        JobSet::parse(["stream:a"]).expect("valid key"),
    );
    slice_writer::apply_slice_config_map(
        &client,
        &namespace,
        "solo-0",
        1,
        shoal_core::format::render_slice(&slice),
    )
    .await
    .expect("write the slice as the controller does");
    let mut settings = Settings::for_member("solo-0", &namespace);
    settings.exec = Some(format!("exec bash {}", script.display()));
    settings.lease_duration = Duration::from_secs(3);
    settings.fence_margin = Duration::from_secs(1);
    settings.stop_grace = Duration::from_secs(10);
    // Fencing starts this long before renewTime + leaseDuration - margin and
    // SIGKILLs what has not exited by then.
    settings.fence_grace = Duration::from_millis(500);
    let worker = shoal_worker::Worker::start(client.clone(), settings)
        .await
        .expect("sidecar starts");
    let read_lines = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !read_lines().contains(" start ") {
        assert!(Instant::now() < deadline, "the job should start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Every renewal fails from now on; the last successful one is on the Lease.
    faults.fail_next(usize::MAX / 2, Some("patch"), Some("leases"), 500);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lease = Api::<Lease>::namespaced(client.clone(), &namespace)
        .get(&names::member_lease("solo-0"))
        .await
        .expect("the member Lease");
    let spec = lease.spec.expect("Lease spec");
    let renewed = spec.renew_time.expect("renewTime").0;
    let expires_ns = (renewed.as_nanosecond()
        + i128::from(spec.lease_duration_seconds.unwrap_or_default()) * 1_000_000_000)
        as u128;
    // The job's shell (its pid is on the start line) is gone once it exited
    // and was reaped, or is a zombie: it runs nothing either way.
    let pid: u32 = read_lines()
        .lines()
        .find(|line| line.contains(" start "))
        .and_then(|line| line.split_whitespace().nth(4))
        .and_then(|pid| pid.parse().ok())
        .expect("the start line carries the job's pid");
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            // The state follows the parenthesised command name.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let stopped_at: u128 = loop {
        if !running(pid) {
            break now_ns();
        }
        assert!(
            Instant::now() < deadline,
            "the fenced sidecar should stop its job"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        !read_lines().contains(" stop "),
        "the job needed 2.5 s after SIGTERM and the fenced grace is 0.5 s: it should have been killed, yet it logged its stop:\n{}",
        read_lines()
    );
    drop(worker);
    assert!(
        stopped_at <= expires_ns,
        "the job exited {:.0} ms after its Lease expired (renewTime + leaseDuration), when the controller may hand it on",
        (stopped_at - expires_ns) as f64 / 1e6
    );
}

// ---------------------------------------------------------------------------
// The Restart-mode model must be able to fail: an application that reads its
// slice once, run under `reload: HotReload` (a sidecar's acknowledgement
// settles a revoke, and nothing restarts the pod), keeps running what it gave
// away while the member that gained it starts it too.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_once_application_under_hot_reload_is_caught_running_a_moved_job_twice() {
    let cluster = TestCluster::start().await.expect("a test cluster");
    let client = cluster.client();
    let namespace = cluster.namespace().to_owned();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("jobs.log");
    std::fs::write(&log, "").expect("create the log");
    let monitor = Monitor::start(&log);
    let jobs: BTreeSet<String> = (0..30).map(|index| format!("stream:{index:02}")).collect();
    install_swarm(&cluster, &jobs, "HotReload", 2, None).await;
    let mut options = MembersOptions::new(&namespace, format!("app={POOL}"));
    options.application = Some(ReadOnceApplication {
        command: job_command(&log),
    });
    let members = Members::start_with(client.clone(), options, |pod: &Pod| {
        let mut settings =
            Settings::for_member(pod.name_any(), pod.namespace().unwrap_or_default());
        settings.ack_on_apply = true;
        Ok(settings)
    });
    let controller = Controller::start(&Controller::clients(&cluster).await, &namespace);
    wait_running(&monitor, "every job should run once", |running| {
        running.len() == jobs.len()
    })
    .await;

    kubectl(
        &cluster,
        &["scale", "statefulset", POOL, "--replicas=3"],
        None,
    )
    .await;
    wait_running(
        &monitor,
        "pool-2 should start the jobs it gained",
        |running| running.iter().any(|(_, member)| member == "pool-2"),
    )
    .await;
    let ledger = monitor.finish();
    let violation = oracle(ledger.events, &BTreeSet::new())
        .expect_err("the jobs pool-2 gained still run where they were");
    assert!(violation.contains("started on pool-2"), "{violation}");

    controller.stop().await;
    members.stop().await;
    cluster.cleanup().await;
}

/// Waits (up to two minutes) until the running processes satisfy `done`.
async fn wait_running(monitor: &Monitor, what: &str, done: impl Fn(&[(String, String)]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running = monitor.running();
        if done(&running) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} processes run",
            running.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
