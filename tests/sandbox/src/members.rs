//! In-process stand-ins for the `shoal-worker` sidecar containers of a pool.
//!
//! Neither the emulator nor the sandbox runs containers: the simulated kubelet
//! only reports pods Running. [`Members`] plays the sidecar container of every
//! matching pod instead: it watches the pods selected by a label selector and
//! runs one [`shoal_worker::Worker`] per existing, started (phase `Running`),
//! non-terminating pod, configured by a caller-supplied function of the pod
//! (file, HTTP or exec mode, per-member paths; [`settings_from_pod`] honours
//! the pod's own `shoal-worker` container flags).
//!
//! Lifecycle, as a kubelet would drive the container:
//!
//! - a pod that starts gets a sidecar; a pod recreated under the same name (a
//!   new uid) gets a new one;
//! - a terminating pod's sidecar is stopped gracefully (SIGTERM to its jobs,
//!   their grace, SIGKILL), bounded by the pod's
//!   `terminationGracePeriodSeconds`, after which it is killed;
//! - a pod that vanished takes its sidecar with it at once;
//! - [`Members::kill`] drops a sidecar abruptly, as a crashed container (its
//!   exec processes are SIGKILLed with it), and [`Members::revive`] starts it
//!   again, as the kubelet's restart would.
//!
//! With [`MembersOptions::application`] each pod also runs an application
//! container that reads its slice once, at start-up, and runs those jobs
//! until its pod goes ([`ReadOnceApplication`], what `reload: Restart` is
//! for). It lives beside the sidecar: a killed sidecar leaves it running; a
//! terminating pod stops both (SIGTERM, then SIGKILL after the pod's grace).
//!
//! On a real cluster a pod object disappears only after its containers have
//! exited. To keep that true for these in-process containers, each pod with a
//! running sidecar carries the finalizer [`SIDECAR_FINALIZER`] until its
//! sidecar has stopped (turn it off with [`MembersOptions::hold_terminating_pods`]).
//! Without it, a controller that sees the pod gone could hand its jobs to
//! another member while the old sidecar's processes are still exiting.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use shoal_worker::{Settings, Worker};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

/// Finalizer that keeps a pod object until its in-process sidecar stopped.
pub const SIDECAR_FINALIZER: &str = "sandbox.shoal.dev/sidecar";
/// The name of the sidecar container [`settings_from_pod`] reads by default.
pub const SIDECAR_CONTAINER: &str = "shoal-worker";

/// What can go wrong while running the sidecars of a pool.
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    /// The pod lacks a name or a namespace.
    #[error("a pod without {missing} cannot have a sidecar")]
    InvalidPod {
        /// What is missing.
        missing: &'static str,
    },
    /// The pod has no sidecar container of that name.
    #[error("pod {pod} has no container named {container}")]
    NoSidecarContainer {
        /// The pod.
        pod: String,
        /// The container looked for.
        container: String,
    },
    /// The sidecar container's flags do not parse.
    #[error(
        "pod {pod}: the flags of container {container} are not valid shoal-worker flags: {message}"
    )]
    InvalidSidecarFlags {
        /// The pod.
        pod: String,
        /// The container.
        container: String,
        /// clap's message.
        message: String,
    },
    /// The caller's settings function refused the pod.
    #[error("building the sidecar settings of pod {pod}: {reason}")]
    Settings {
        /// The pod.
        pod: String,
        /// Why.
        reason: String,
    },
    /// The sidecar did not start.
    #[error("starting the sidecar of pod {pod}: {source}")]
    Start {
        /// The pod.
        pod: String,
        /// The worker's error.
        #[source]
        source: shoal_worker::Error,
    },
    /// [`Members::kill`] of a pod whose sidecar is not running.
    #[error("the sidecar of pod {pod} is not running")]
    NotRunning {
        /// The pod.
        pod: String,
    },
    /// [`Members::revive`] of a pod whose sidecar was not killed.
    #[error("the sidecar of pod {pod} was not killed; only a killed sidecar can be revived")]
    NotKilled {
        /// The pod.
        pod: String,
    },
}

/// Which pods get a sidecar and how they are held.
#[derive(Debug, Clone)]
pub struct MembersOptions {
    /// Namespace of the pods.
    pub namespace: String,
    /// Label selector of the pods, e.g. `app=swarm-worker`.
    pub selector: String,
    /// Keep a pod object (finalizer [`SIDECAR_FINALIZER`]) until its sidecar
    /// stopped, as a kubelet keeps it until its containers exited.
    pub hold_terminating_pods: bool,
    /// How often every pod is looked at again, to retry what failed.
    pub resync: Duration,
    /// An application container beside each sidecar, if any.
    pub application: Option<ReadOnceApplication>,
}

/// An application that reads its slice once, when its pod starts (the first
/// slice its sidecar delivers), runs one process per job of it, and stops
/// them only when its pod terminates: the kind of application `reload:
/// Restart` serves. Each process is `sh -c <command>` with `SHOAL_JOB` and
/// `SHOAL_MEMBER` set, in its own process group (signals reach its children).
#[derive(Debug, Clone)]
pub struct ReadOnceApplication {
    /// The shell command run for each job.
    pub command: String,
}

impl MembersOptions {
    /// The pods of `namespace` matching `selector`, held while terminating,
    /// resynced every second.
    pub fn new(namespace: impl Into<String>, selector: impl Into<String>) -> MembersOptions {
        MembersOptions {
            namespace: namespace.into(),
            selector: selector.into(),
            hold_terminating_pods: true,
            resync: Duration::from_secs(1),
            application: None,
        }
    }
}

/// A running sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningMember {
    /// The pod.
    pub pod: String,
    /// The pod's uid.
    pub uid: String,
    /// The sidecar's HTTP server.
    pub http_addr: SocketAddr,
    /// The sidecar's separate metrics listener (`--metrics-address`), when it has one.
    pub metrics_addr: Option<SocketAddr>,
}

/// Builds a sidecar's settings from its pod.
pub type SettingsFor = dyn Fn(&Pod) -> Result<Settings, MembersError> + Send + Sync;

enum Slot {
    Running {
        uid: String,
        worker: Worker,
    },
    /// Killed by [`Members::kill`]; stays down until revived or the pod is replaced.
    Killed {
        uid: String,
    },
    /// Could not start; not retried for this pod (uid).
    Failed {
        uid: String,
        error: String,
    },
    /// Stopping gracefully because the pod is terminating.
    Stopping {
        uid: String,
    },
}

impl Slot {
    fn uid(&self) -> &str {
        match self {
            Slot::Running { uid, .. }
            | Slot::Killed { uid }
            | Slot::Failed { uid, .. }
            | Slot::Stopping { uid } => uid,
        }
    }
}

#[derive(Default)]
struct State {
    /// The pods as last seen by the watch.
    pods: BTreeMap<String, Pod>,
    slots: BTreeMap<String, Slot>,
    /// Application containers ([`MembersOptions::application`]), by pod.
    applications: BTreeMap<String, Application>,
    /// Graceful stops in flight.
    stopping: Vec<JoinHandle<()>>,
}

struct Shared {
    pods: Api<Pod>,
    options: MembersOptions,
    settings_for: Box<SettingsFor>,
    client: Client,
    state: Mutex<State>,
    running: watch::Sender<BTreeMap<String, RunningMember>>,
}

/// The sidecars of the pods matching a selector, run in this process.
/// Dropping it kills every sidecar (as dead containers); [`Members::stop`]
/// stops them gracefully and releases the pods.
pub struct Members {
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Members {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Members")
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl Members {
    /// Runs a sidecar for every pod of `namespace` matching `selector`, with
    /// settings from `settings_for` (see [`MembersOptions::new`] for the rest).
    pub fn start(
        client: Client,
        namespace: &str,
        selector: &str,
        settings_for: impl Fn(&Pod) -> Result<Settings, MembersError> + Send + Sync + 'static,
    ) -> Members {
        Members::start_with(
            client,
            MembersOptions::new(namespace, selector),
            settings_for,
        )
    }

    /// As [`Members::start`] with explicit options.
    pub fn start_with(
        client: Client,
        options: MembersOptions,
        settings_for: impl Fn(&Pod) -> Result<Settings, MembersError> + Send + Sync + 'static,
    ) -> Members {
        let shared = Arc::new(Shared {
            pods: Api::namespaced(client.clone(), &options.namespace),
            options,
            settings_for: Box::new(settings_for),
            client,
            state: Mutex::new(State::default()),
            running: watch::Sender::new(BTreeMap::new()),
        });
        let task = tokio::spawn(follow(shared.clone()));
        Members {
            shared,
            task: Some(task),
        }
    }

    /// The sidecars running now, by pod.
    pub fn running(&self) -> BTreeMap<String, RunningMember> {
        self.shared.running.borrow().clone()
    }

    /// Follows the running sidecars (for waiting on a change).
    pub fn watch_running(&self) -> watch::Receiver<BTreeMap<String, RunningMember>> {
        self.shared.running.subscribe()
    }

    /// Waits until `condition` holds for the running sidecars, at most `timeout`;
    /// returns them, or `None` on timeout.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut condition: impl FnMut(&BTreeMap<String, RunningMember>) -> bool,
    ) -> Option<BTreeMap<String, RunningMember>> {
        let mut running = self.watch_running();
        let waited = tokio::time::timeout(timeout, running.wait_for(|now| condition(now))).await;
        match waited {
            Ok(Ok(now)) => Some(now.clone()),
            _ => None,
        }
    }

    /// Pods whose sidecar could not start, with the reason.
    pub async fn failures(&self) -> BTreeMap<String, String> {
        let state = self.shared.state.lock().await;
        state
            .slots
            .iter()
            .filter_map(|(pod, slot)| match slot {
                Slot::Failed { error, .. } => Some((pod.clone(), error.clone())),
                _ => None,
            })
            .collect()
    }

    /// Kills a pod's sidecar abruptly, as a crashed container: its tasks stop
    /// between any two steps and its exec processes are SIGKILLed. It stays
    /// down until [`Members::revive`] or until the pod is replaced.
    pub async fn kill(&self, pod: &str) -> Result<(), MembersError> {
        let killed = {
            let mut state = self.shared.state.lock().await;
            match state.slots.remove(pod) {
                Some(Slot::Running { uid, worker }) => {
                    state
                        .slots
                        .insert(pod.to_owned(), Slot::Killed { uid: uid.clone() });
                    worker
                }
                other => {
                    if let Some(slot) = other {
                        state.slots.insert(pod.to_owned(), slot);
                    }
                    return Err(MembersError::NotRunning {
                        pod: pod.to_owned(),
                    });
                }
            }
        };
        drop(killed);
        let state = self.shared.state.lock().await;
        publish(&self.shared, &state);
        tracing::info!(pod, "sidecar killed");
        Ok(())
    }

    /// Starts a killed sidecar again (as the kubelet restarts a container).
    /// If its pod is gone or terminating meanwhile, nothing starts.
    pub async fn revive(&self, pod: &str) -> Result<(), MembersError> {
        let mut state = self.shared.state.lock().await;
        match state.slots.get(pod) {
            Some(Slot::Killed { .. }) => {
                state.slots.remove(pod);
                sync_pod(&self.shared, &mut state, pod).await;
                publish(&self.shared, &state);
                match state.slots.get(pod) {
                    Some(Slot::Failed { error, .. }) => Err(MembersError::Settings {
                        pod: pod.to_owned(),
                        reason: error.clone(),
                    }),
                    _ => Ok(()),
                }
            }
            _ => Err(MembersError::NotKilled {
                pod: pod.to_owned(),
            }),
        }
    }

    /// Stops watching, stops every sidecar and application gracefully and
    /// releases the pods (removes [`SIDECAR_FINALIZER`]). The pods stay;
    /// nothing runs for them.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        let (workers, stopping, pods, applications) = {
            let mut state = self.shared.state.lock().await;
            let workers: Vec<(String, Worker)> = std::mem::take(&mut state.slots)
                .into_iter()
                .filter_map(|(pod, slot)| match slot {
                    Slot::Running { worker, .. } => Some((pod, worker)),
                    _ => None,
                })
                .collect();
            let stopping = std::mem::take(&mut state.stopping);
            let pods: Vec<Pod> = state.pods.values().cloned().collect();
            let applications: Vec<Application> = std::mem::take(&mut state.applications)
                .into_values()
                .collect();
            publish(&self.shared, &state);
            (workers, stopping, pods, applications)
        };
        let stops = workers.into_iter().map(|(pod, worker)| async move {
            if let Err(error) = worker.stop().await {
                tracing::warn!(pod, %error, "sidecar stopped with an error");
            }
        });
        futures::future::join_all(stops).await;
        futures::future::join_all(
            applications
                .into_iter()
                .map(|application| application.stop(Duration::from_secs(10))),
        )
        .await;
        for handle in stopping {
            let _ = handle.await;
        }
        for pod in pods {
            if has_finalizer(&pod) {
                release(&self.shared, &pod.name_any()).await;
            }
        }
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        // Dead containers: every sidecar goes now (stop tasks hold the shared
        // state, so the workers would otherwise outlive this handle).
        if let Ok(mut state) = self.shared.state.try_lock() {
            state.slots.clear();
            state.applications.clear();
            for handle in state.stopping.drain(..) {
                handle.abort();
            }
        }
    }
}

/// Watches the pods and keeps one sidecar per started, non-terminating pod.
async fn follow(shared: Arc<Shared>) {
    let config = watcher::Config::default().labels(&shared.options.selector);
    let mut events = watcher(shared.pods.clone(), config)
        .default_backoff()
        .boxed();
    let mut resync = tokio::time::interval(shared.options.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Pods listed during a (re)list, swapped in when it completes.
    let mut listing: Option<BTreeMap<String, Pod>> = None;
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return };
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::debug!(%error, "sidecars: pod watch");
                        continue;
                    }
                };
                let mut state = shared.state.lock().await;
                match event {
                    watcher::Event::Init => listing = Some(BTreeMap::new()),
                    watcher::Event::InitApply(pod) => {
                        listing.get_or_insert_with(BTreeMap::new).insert(pod.name_any(), pod);
                    }
                    watcher::Event::InitDone => {
                        state.pods = listing.take().unwrap_or_default();
                        sync_all(&shared, &mut state).await;
                    }
                    watcher::Event::Apply(pod) => {
                        let name = pod.name_any();
                        state.pods.insert(name.clone(), pod);
                        sync_pod(&shared, &mut state, &name).await;
                    }
                    watcher::Event::Delete(pod) => {
                        let name = pod.name_any();
                        state.pods.remove(&name);
                        sync_pod(&shared, &mut state, &name).await;
                    }
                }
                publish(&shared, &state);
            }
            _ = resync.tick() => {
                let mut state = shared.state.lock().await;
                sync_all(&shared, &mut state).await;
                publish(&shared, &state);
            }
        }
    }
}

async fn sync_all(shared: &Arc<Shared>, state: &mut State) {
    state.stopping.retain(|handle| !handle.is_finished());
    let mut names: Vec<String> = state.pods.keys().cloned().collect();
    names.extend(state.slots.keys().cloned());
    names.sort();
    names.dedup();
    for name in names {
        sync_pod(shared, state, &name).await;
    }
}

fn is_started(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        == Some("Running")
}

fn has_finalizer(pod: &Pod) -> bool {
    pod.finalizers()
        .iter()
        .any(|finalizer| finalizer == SIDECAR_FINALIZER)
}

/// Brings one pod's sidecar in line with the pod.
async fn sync_pod(shared: &Arc<Shared>, state: &mut State, name: &str) {
    let Some(pod) = state.pods.get(name).cloned() else {
        // The pod is gone, and its containers with it.
        state.applications.remove(name);
        match state.slots.remove(name) {
            Some(Slot::Running { worker, .. }) => {
                tracing::info!(pod = name, "pod gone; its sidecar dies with it");
                drop(worker);
            }
            // A graceful stop finishes on its own.
            Some(slot @ Slot::Stopping { .. }) => {
                state.slots.insert(name.to_owned(), slot);
            }
            _ => {}
        }
        return;
    };
    let uid = pod.uid().unwrap_or_default();
    // A slot left by an earlier pod of the same name: that pod is gone.
    if state
        .applications
        .get(name)
        .is_some_and(|application| application.uid != uid)
    {
        state.applications.remove(name);
    }
    if state.slots.get(name).is_some_and(|slot| slot.uid() != uid) {
        match state.slots.remove(name) {
            Some(Slot::Running { worker, .. }) => drop(worker),
            Some(slot @ Slot::Stopping { .. }) => {
                state.slots.insert(name.to_owned(), slot);
            }
            _ => {}
        }
    }
    if pod.metadata.deletion_timestamp.is_some() {
        let grace = Duration::from_secs(
            pod.spec
                .as_ref()
                .and_then(|spec| spec.termination_grace_period_seconds)
                .unwrap_or(30)
                .max(1) as u64,
        );
        let application = state.applications.remove(name);
        match state.slots.remove(name) {
            Some(Slot::Running { uid, worker }) => {
                begin_stop(shared, state, name, uid, Some(worker), application, grace);
            }
            Some(slot @ Slot::Stopping { .. }) => {
                state.slots.insert(name.to_owned(), slot);
            }
            // Killed, failed or never started: no sidecar holds the pod, but
            // its application may still run.
            other => {
                if let Some(application) = application {
                    let uid = other
                        .map(|slot| slot.uid().to_owned())
                        .unwrap_or_else(|| application.uid.clone());
                    begin_stop(shared, state, name, uid, None, Some(application), grace);
                } else if has_finalizer(&pod) {
                    release(shared, name).await;
                }
            }
        }
        return;
    }
    if state.slots.contains_key(name) || !is_started(&pod) {
        return;
    }
    if shared.options.hold_terminating_pods && !has_finalizer(&pod) && !hold(shared, name).await {
        // Retried on the next resync.
        return;
    }
    let started = match (shared.settings_for)(&pod) {
        Ok(settings) => Worker::start(shared.client.clone(), settings)
            .await
            .map_err(|source| MembersError::Start {
                pod: name.to_owned(),
                source,
            }),
        Err(error) => Err(error),
    };
    match started {
        Ok(worker) => {
            tracing::info!(pod = name, uid, http = %worker.http_addr(), "sidecar started");
            if let Some(application) = &shared.options.application {
                match state.applications.get_mut(name) {
                    // A revived sidecar: an application still waiting reads from it.
                    Some(running) => running.read_from(worker.slices()),
                    None => {
                        state.applications.insert(
                            name.to_owned(),
                            Application::start(application, name, &uid, worker.slices()),
                        );
                    }
                }
            }
            state
                .slots
                .insert(name.to_owned(), Slot::Running { uid, worker });
        }
        Err(error) => {
            tracing::warn!(pod = name, %error, "sidecar cannot start");
            state.slots.insert(
                name.to_owned(),
                Slot::Failed {
                    uid,
                    error: error.to_string(),
                },
            );
        }
    }
}

/// Marks the pod's slot as stopping and stops its containers in the background.
fn begin_stop(
    shared: &Arc<Shared>,
    state: &mut State,
    name: &str,
    uid: String,
    worker: Option<Worker>,
    application: Option<Application>,
    grace: Duration,
) {
    state
        .slots
        .insert(name.to_owned(), Slot::Stopping { uid: uid.clone() });
    let stop = tokio::spawn(stop_gracefully(
        shared.clone(),
        name.to_owned(),
        uid,
        worker,
        application,
        grace,
    ));
    state.stopping.push(stop);
}

/// Stops a terminating pod's sidecar and application within the pod's grace
/// period (then kills them, as the kubelet would), and releases the pod.
async fn stop_gracefully(
    shared: Arc<Shared>,
    pod: String,
    uid: String,
    worker: Option<Worker>,
    application: Option<Application>,
    grace: Duration,
) {
    let sidecar = async {
        let Some(worker) = worker else { return };
        match tokio::time::timeout(grace, worker.stop()).await {
            Ok(Ok(())) => tracing::info!(pod, "sidecar stopped with its pod"),
            Ok(Err(error)) => tracing::warn!(pod, %error, "sidecar stopped with an error"),
            // Dropping the stop future drops the worker: SIGKILL, as after the grace period.
            Err(_) => tracing::warn!(pod, ?grace, "sidecar killed after the pod's grace period"),
        }
    };
    let application = async {
        if let Some(application) = application {
            application.stop(grace).await;
        }
    };
    futures::future::join(sidecar, application).await;
    release(&shared, &pod).await;
    let mut state = shared.state.lock().await;
    if matches!(state.slots.get(&pod), Some(Slot::Stopping { uid: stopping }) if *stopping == uid) {
        state.slots.remove(&pod);
    }
    publish(&shared, &state);
}

/// An application container ([`ReadOnceApplication`]) of one pod.
struct Application {
    /// The pod's uid.
    uid: String,
    command: String,
    pod: String,
    processes: Arc<std::sync::Mutex<ApplicationProcesses>>,
    /// Waits for the first slice, then starts the processes.
    reader: JoinHandle<()>,
}

#[derive(Default)]
struct ApplicationProcesses {
    /// The slice was read: what runs is fixed until the pod goes.
    read: bool,
    /// Stopping or killed: start nothing more.
    stopped: bool,
    children: Vec<tokio::process::Child>,
}

impl Application {
    fn start(
        application: &ReadOnceApplication,
        pod: &str,
        uid: &str,
        slices: shoal_worker::SliceWatch,
    ) -> Application {
        let mut started = Application {
            uid: uid.to_owned(),
            command: application.command.clone(),
            pod: pod.to_owned(),
            processes: Arc::default(),
            reader: tokio::spawn(async {}),
        };
        started.read_from(slices);
        started
    }

    /// Reads the first slice `slices` delivers, unless a slice was read already.
    fn read_from(&mut self, mut slices: shoal_worker::SliceWatch) {
        if lock_processes(&self.processes).read {
            return;
        }
        self.reader.abort();
        let (processes, command, pod) = (
            self.processes.clone(),
            self.command.clone(),
            self.pod.clone(),
        );
        self.reader = tokio::spawn(async move {
            // A sidecar gone before delivering anything: wait for the next one.
            let Some(delivered) = slices
                .wait_for(|delivered| delivered.slice.is_some() && !delivered.fenced)
                .await
            else {
                return;
            };
            let mut processes = lock_processes(&processes);
            if processes.stopped || processes.read {
                return;
            }
            processes.read = true;
            for job in delivered.jobs() {
                match spawn_job(&command, job, &pod) {
                    Ok(child) => processes.children.push(child),
                    Err(error) => tracing::warn!(pod, job, %error, "application: cannot start"),
                }
            }
            tracing::info!(
                pod,
                jobs = delivered.jobs().len(),
                revision = delivered.slice.as_ref().map(|slice| slice.revision),
                "application read its slice"
            );
        });
    }

    /// SIGTERM to every process, `grace` for them to exit, then SIGKILL.
    async fn stop(mut self, grace: Duration) {
        let children = self.take_children();
        for child in &children {
            if let Some(pid) = child.id() {
                signal_group(pid, "TERM");
            }
        }
        let waits = children.into_iter().map(|mut child| async move {
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                if let Some(pid) = child.id() {
                    signal_group(pid, "KILL");
                }
                let _ = child.wait().await;
            }
        });
        futures::future::join_all(waits).await;
    }

    fn take_children(&mut self) -> Vec<tokio::process::Child> {
        self.reader.abort();
        let mut processes = lock_processes(&self.processes);
        processes.stopped = true;
        std::mem::take(&mut processes.children)
    }
}

impl Drop for Application {
    /// A dead container: its processes are SIGKILLed.
    fn drop(&mut self) {
        for child in self.take_children() {
            if let Some(pid) = child.id() {
                signal_group(pid, "KILL");
            }
        }
    }
}

fn lock_processes(
    processes: &std::sync::Mutex<ApplicationProcesses>,
) -> std::sync::MutexGuard<'_, ApplicationProcesses> {
    processes
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One job's process: `sh -c <command>` in its own process group.
fn spawn_job(command: &str, job: &str, member: &str) -> std::io::Result<tokio::process::Child> {
    tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("SHOAL_JOB", job)
        .env("SHOAL_MEMBER", member)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
}

/// Sends `signal` to the process group led by `pid` (the job and its children).
fn signal_group(pid: u32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pid}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if let Err(error) = sent {
        tracing::warn!(pid, signal, %error, "application: cannot signal");
    }
}

/// Adds [`SIDECAR_FINALIZER`]; whether the pod now carries it.
async fn hold(shared: &Shared, pod: &str) -> bool {
    let patch = serde_json::json!({"metadata": {"finalizers": [SIDECAR_FINALIZER]}});
    match shared
        .pods
        .patch(pod, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => true,
        Err(error) => {
            tracing::debug!(pod, %error, "sidecars: holding the pod");
            false
        }
    }
}

/// Removes [`SIDECAR_FINALIZER`] (the periodic resync retries a failure).
async fn release(shared: &Shared, pod: &str) {
    let patch = serde_json::json!({
        "metadata": {"$deleteFromPrimitiveList/finalizers": [SIDECAR_FINALIZER]}
    });
    match shared
        .pods
        .patch(pod, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(response)) if response.code == 404 => {}
        Err(error) => tracing::debug!(pod, %error, "sidecars: releasing the pod"),
    }
}

fn publish(shared: &Shared, state: &State) {
    let running: BTreeMap<String, RunningMember> = state
        .slots
        .iter()
        .filter_map(|(pod, slot)| match slot {
            Slot::Running { uid, worker } => Some((
                pod.clone(),
                RunningMember {
                    pod: pod.clone(),
                    uid: uid.clone(),
                    http_addr: worker.http_addr(),
                    metrics_addr: worker.metrics_addr(),
                },
            )),
            _ => None,
        })
        .collect();
    shared.running.send_if_modified(|current| {
        if *current == running {
            return false;
        }
        *current = running;
        true
    });
}

/// The settings a pod's sidecar container would run with: its `command`
/// (after the program) and `args` parsed as `shoal-worker` flags, with
/// literal `env` values filling flags not given (`$(VAR)` references
/// expanded), and the identity the downward API would give (`--pod-name`,
/// `--pod-namespace`). The container is looked for among the containers and
/// the init containers (native sidecars). Every member runs in this one
/// process, so the HTTP server always binds a free localhost port; per-member
/// file paths are the caller's to adjust. Flags absent from the container
/// fall back to this process's environment, as clap reads it.
pub fn settings_from_pod(pod: &Pod, container: &str) -> Result<Settings, MembersError> {
    let name = pod
        .metadata
        .name
        .clone()
        .ok_or(MembersError::InvalidPod { missing: "a name" })?;
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .ok_or(MembersError::InvalidPod {
            missing: "a namespace",
        })?;
    let spec = pod.spec.as_ref();
    let sidecar: &Container = spec
        .into_iter()
        .flat_map(|spec| {
            spec.containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
        })
        .find(|candidate| candidate.name == container)
        .ok_or_else(|| MembersError::NoSidecarContainer {
            pod: name.clone(),
            container: container.to_owned(),
        })?;
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("POD_NAME".into(), name.clone());
    env.insert("POD_NAMESPACE".into(), namespace.clone());
    if let Some(uid) = &pod.metadata.uid {
        env.insert("POD_UID".into(), uid.clone());
    }
    for var in sidecar.env.iter().flatten() {
        if let Some(value) = &var.value {
            env.insert(var.name.clone(), expand(value, &env));
        }
    }
    let mut argv: Vec<String> = vec!["shoal-worker".into()];
    argv.extend(
        sidecar
            .command
            .iter()
            .flatten()
            .skip(1)
            .chain(sidecar.args.iter().flatten())
            .map(|arg| expand(arg, &env)),
    );
    let given = |argv: &[String], long: &str| {
        let flag = format!("--{long}");
        argv.iter()
            .any(|arg| *arg == flag || arg.starts_with(&format!("{flag}=")))
    };
    for arg in Settings::command().get_arguments() {
        let (Some(long), Some(variable)) = (arg.get_long(), arg.get_env()) else {
            continue;
        };
        let Some(value) = variable.to_str().and_then(|variable| env.get(variable)) else {
            continue;
        };
        if given(&argv, long) {
            continue;
        }
        if arg.get_action().takes_values() {
            argv.push(format!("--{long}={value}"));
        } else if matches!(
            value.to_ascii_lowercase().as_str(),
            "true" | "1" | "yes" | "on"
        ) {
            argv.push(format!("--{long}"));
        }
    }
    let mut settings =
        Settings::try_parse_from(&argv).map_err(|error| MembersError::InvalidSidecarFlags {
            pod: name.clone(),
            container: container.to_owned(),
            message: error.to_string(),
        })?;
    settings.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    // Every sidecar of the sandbox shares this host: each gets its own metrics port.
    if settings.metrics_address.is_some() {
        settings.metrics_address = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    }
    Ok(settings)
}

/// Expands Kubernetes `$(VAR)` references; unknown ones stay as written.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut expanded = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("$(") {
        expanded.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find(')') {
            Some(end) if env.contains_key(&after[..end]) => {
                expanded.push_str(&env[&after[..end]]);
                rest = &after[end + 1..];
            }
            _ => {
                expanded.push_str("$(");
                rest = after;
            }
        }
    }
    expanded.push_str(rest);
    expanded
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{DeleteParams, PostParams};
    use shoal_emulator::harness::TestCluster;
    use shoal_emulator::harness::fixtures::{parallel, statefulset};

    const LIMIT: Duration = Duration::from_secs(20);

    fn pod_with_sidecar(sidecar: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pool-3", "namespace": "team"},
            "spec": {"containers": [
                {"name": "app", "image": "example.invalid/app:1"},
                sidecar,
            ]},
        }))
        .expect("pod manifest")
    }

    #[test]
    fn a_pods_sidecar_flags_and_env_become_its_settings() {
        let pod = pod_with_sidecar(serde_json::json!({
            "name": "shoal-worker",
            "image": "shoal-worker:dev",
            "args": ["--exec", "consumer --stream {job} --as $(POD_NAME)", "--stop-grace=3s"],
            "env": [
                {"name": "SHOAL_SLICE_FILE", "value": "/shoal/$(POD_NAME).yaml"},
                {"name": "SHOAL_ACK_ON_APPLY", "value": "true"},
                {"name": "SHOAL_STOP_GRACE", "value": "9s"},
                {"name": "SHOAL_LISTEN", "value": "0.0.0.0:8765"},
            ],
        }));
        let settings = settings_from_pod(&pod, SIDECAR_CONTAINER).unwrap();
        assert_eq!(settings.pod_name, "pool-3");
        assert_eq!(settings.pod_namespace, "team");
        assert_eq!(
            settings.exec.as_deref(),
            Some("consumer --stream {job} --as pool-3")
        );
        // A flag given on the command line wins over the environment.
        assert_eq!(settings.stop_grace, Duration::from_secs(3));
        assert_eq!(
            settings.slice_file.as_deref(),
            Some(std::path::Path::new("/shoal/pool-3.yaml"))
        );
        assert!(settings.ack_on_apply);
        // Every member shares this process's localhost.
        assert_eq!(settings.listen, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(
            settings.metrics_address,
            Some(SocketAddr::from(([127, 0, 0, 1], 0)))
        );
    }

    /// The metrics port of a sidecar built from its pod's container (default
    /// `--metrics-address`, moved to a free loopback port here) answers `/metrics`.
    #[tokio::test]
    async fn a_sidecar_from_its_pod_serves_metrics_on_its_own_port() {
        let cluster = TestCluster::start().await.unwrap();
        let client = cluster.client();
        let namespace = cluster.namespace().to_owned();
        let mut set = parallel(statefulset("metered", 1));
        if let Some(pod) = set
            .spec
            .as_mut()
            .and_then(|spec| spec.template.spec.as_mut())
        {
            pod.containers.push(Container {
                name: SIDECAR_CONTAINER.to_owned(),
                image: Some("shoal-worker:0.1.0".to_owned()),
                args: Some(vec!["--ack-on-apply".to_owned()]),
                ..Container::default()
            });
        }
        Api::<StatefulSet>::namespaced(client.clone(), &namespace)
            .create(&PostParams::default(), &set)
            .await
            .unwrap();
        let members = Members::start(client, &namespace, "app=metered", |pod| {
            settings_from_pod(pod, SIDECAR_CONTAINER)
        });
        let running = wait_members(&members, &["metered-0"]).await;
        let metrics = running["metered-0"]
            .metrics_addr
            .expect("a metrics listener");
        assert_ne!(metrics, running["metered-0"].http_addr);
        let answer = shoal_emulator::http_client::get(metrics, "/metrics")
            .await
            .expect("the metrics listener answers");
        assert_eq!(answer.status, 200, "{}", answer.body);
        let answer = answer.body;
        assert!(answer.contains("shoal_worker_fenced"), "{answer}");
        members.stop().await;
        cluster.cleanup().await;
    }

    #[test]
    fn a_pod_without_the_sidecar_or_with_bad_flags_is_refused_by_name() {
        let pod = pod_with_sidecar(serde_json::json!({"name": "other", "image": "x"}));
        let error = settings_from_pod(&pod, SIDECAR_CONTAINER).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("pod pool-3 has no container named shoal-worker"),
            "{error}"
        );
        let pod = pod_with_sidecar(serde_json::json!({
            "name": "shoal-worker", "image": "x", "args": ["--stop-grace", "soon"],
        }));
        let error = settings_from_pod(&pod, SIDECAR_CONTAINER).unwrap_err();
        assert!(
            matches!(&error, MembersError::InvalidSidecarFlags { pod, .. } if pod == "pool-3"),
            "{error}"
        );
    }

    #[test]
    fn unknown_variable_references_stay_as_written() {
        let env: BTreeMap<String, String> = [("A".to_owned(), "x".to_owned())].into();
        assert_eq!(expand("$(A)-$(B)-$(A", &env), "x-$(B)-$(A");
    }

    async fn lease_holder(client: &Client, namespace: &str, pod: &str) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        leases
            .get_opt(&format!("{pod}-member"))
            .await
            .ok()
            .flatten()
            .and_then(|lease| lease.spec?.holder_identity)
    }

    async fn wait_members(members: &Members, pods: &[&str]) -> BTreeMap<String, RunningMember> {
        let expected: Vec<String> = pods.iter().map(|pod| pod.to_string()).collect();
        members
            .wait_until(LIMIT, |running| {
                running.keys().cloned().collect::<Vec<_>>() == expected
            })
            .await
            .unwrap_or_else(|| {
                panic!(
                    "sidecars of {expected:?} should run, running: {:?}",
                    members.running().keys().collect::<Vec<_>>()
                )
            })
    }

    #[tokio::test]
    async fn sidecars_follow_the_pods_of_a_statefulset_through_scaling_kills_and_recreation() {
        let cluster = TestCluster::start().await.unwrap();
        let client = cluster.client();
        let namespace = cluster.namespace().to_owned();
        let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
        sets.create(&PostParams::default(), &parallel(statefulset("pool", 2)))
            .await
            .unwrap();
        let members = Members::start(client.clone(), &namespace, "app=pool", |pod| {
            let mut settings =
                Settings::for_member(pod.name_any(), pod.namespace().unwrap_or_default());
            settings.ack_on_apply = true;
            Ok(settings)
        });

        // Pods from the StatefulSet appear: their sidecars run and renew their Leases.
        let running = wait_members(&members, &["pool-0", "pool-1"]).await;
        for pod in ["pool-0", "pool-1"] {
            cluster
                .wait_for(&format!("{pod}'s Lease"), LIMIT, || async {
                    match lease_holder(&client, &namespace, pod).await {
                        Some(holder) if holder == pod => shoal_emulator::harness::Check::Done(()),
                        other => shoal_emulator::harness::Check::Pending(format!("{other:?}")),
                    }
                })
                .await
                .unwrap();
        }

        // A pod with a running sidecar is held until the sidecar stopped.
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        assert!(has_finalizer(&pods.get("pool-1").await.unwrap()));

        // Scale down: the surplus pod's sidecar stops, and the pod is released.
        cluster
            .kubectl(&["scale", "statefulset", "pool", "--replicas=1"])
            .await
            .unwrap()
            .ok()
            .unwrap();
        wait_members(&members, &["pool-0"]).await;
        cluster
            .wait_for("pool-1 gone", LIMIT, || async {
                match pods.get_opt("pool-1").await {
                    Ok(None) => shoal_emulator::harness::Check::Done(()),
                    other => shoal_emulator::harness::Check::Pending(format!("{other:?}")),
                }
            })
            .await
            .unwrap();

        // A killed sidecar stays down until revived, then comes back for the same pod.
        members.kill("pool-0").await.unwrap();
        assert!(members.running().is_empty());
        assert!(matches!(
            members.kill("pool-0").await,
            Err(MembersError::NotRunning { .. })
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(members.running().is_empty(), "a killed sidecar stays down");
        members.revive("pool-0").await.unwrap();
        let revived = wait_members(&members, &["pool-0"]).await;
        assert_eq!(revived["pool-0"].uid, running["pool-0"].uid);

        // A deleted pod is recreated by the StatefulSet: a new sidecar for the new uid.
        pods.delete("pool-0", &DeleteParams::default())
            .await
            .unwrap();
        let recreated = members
            .wait_until(LIMIT, |running| {
                running
                    .get("pool-0")
                    .is_some_and(|member| member.uid != revived["pool-0"].uid)
            })
            .await
            .expect("a sidecar for the recreated pool-0");
        assert_eq!(recreated.len(), 1);
        assert!(members.failures().await.is_empty());

        members.stop().await;
        let pod = pods.get("pool-0").await.unwrap();
        assert!(!has_finalizer(&pod), "a stopped Members releases its pods");
        cluster.cleanup().await;
    }
}
