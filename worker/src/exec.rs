//! Exec mode: one process per owned job, restarted with backoff when it
//! crashes, stopped with SIGTERM → grace → SIGKILL when its job is revoked.
//!
//! Pure planning ([`plan`], [`command_for`], [`restart_delay`]) sits under a
//! thin supervisor that owns the processes.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::process::{Child, Command};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use shoal_core::slice::{InstanceReport, InstanceState, SliceInstance};

use crate::instances::{self, InstanceReports};
use crate::metrics::Metrics;
use crate::view::Delivered;

/// What the supervisor must do to go from the running jobs to the desired ones.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecPlan {
    /// Jobs whose processes must be stopped (revoked), sorted.
    pub stop: Vec<String>,
    /// Jobs that need a process (granted), sorted.
    pub start: Vec<String>,
}

impl ExecPlan {
    /// Whether nothing needs to change.
    pub fn is_empty(&self) -> bool {
        self.stop.is_empty() && self.start.is_empty()
    }
}

/// Compares running and desired jobs. Unchanged jobs are in neither list:
/// their processes keep running untouched.
pub fn plan<'a>(running: impl IntoIterator<Item = &'a str>, desired: &[String]) -> ExecPlan {
    let running: BTreeSet<&str> = running.into_iter().collect();
    let desired_set: BTreeSet<&str> = desired.iter().map(String::as_str).collect();
    ExecPlan {
        stop: running
            .difference(&desired_set)
            .map(|job| job.to_string())
            .collect(),
        start: desired_set
            .difference(&running)
            .map(|job| job.to_string())
            .collect(),
    }
}

/// What the supervisor must do to go from the running instances to the desired ones.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstancePlan {
    /// Instances whose processes must stop: removed, or changed (then also in `start`).
    pub stop: Vec<String>,
    /// Instances that need a (new) process: added, or changed.
    pub start: Vec<SliceInstance>,
}

/// Compares running instances (with what they run) and desired ones: an
/// instance whose deployment or coordinates changed is stopped and started
/// again; an unchanged one keeps its process, even a failed one (no restart
/// loop: only a change brings a new attempt).
pub fn plan_instances<'a>(
    running: impl IntoIterator<Item = &'a SliceInstance>,
    desired: &[SliceInstance],
) -> InstancePlan {
    let running: BTreeMap<&str, &SliceInstance> = running
        .into_iter()
        .map(|instance| (instance.name.as_str(), instance))
        .collect();
    let desired_by_name: BTreeMap<&str, &SliceInstance> = desired
        .iter()
        .map(|instance| (instance.name.as_str(), instance))
        .collect();
    InstancePlan {
        stop: running
            .iter()
            .filter(|(name, spec)| desired_by_name.get(*name) != Some(*spec))
            .map(|(name, _)| name.to_string())
            .collect(),
        start: desired_by_name
            .iter()
            .filter(|(name, spec)| running.get(*name) != Some(*spec))
            .map(|(_, spec)| (*spec).clone())
            .collect(),
    }
}

/// The shell command for one job: `{job}` and `{member}` in the template are
/// replaced by single-quoted values, so a job key can never inject shell syntax.
pub fn command_for(template: &str, job: &str, member: &str) -> String {
    template
        .replace("{job}", &shell_quote(job))
        .replace("{member}", &shell_quote(member))
}

/// Quotes `value` for POSIX `sh`: wrapped in single quotes, each `'` written as `'\''`.
/// The one shell quoting of the workspace (the sandbox uses it too). Kept by hand:
/// it is one line, total over every string, where `shlex::try_quote` adds an error
/// path (NUL) that the command templates would have to carry for nothing.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// The delay before restarting a process after `consecutive_crashes` crashes
/// in a row (1 for the first): `initial`, doubling, capped at `max`.
pub fn restart_delay(consecutive_crashes: u32, initial: Duration, max: Duration) -> Duration {
    let doublings = consecutive_crashes.saturating_sub(1).min(31);
    initial.saturating_mul(1u32 << doublings).min(max)
}

/// How the supervisor runs processes.
#[derive(Debug, Clone)]
pub struct ExecSettings {
    /// The job command template (see [`command_for`]); `None`: jobs get no process.
    pub template: Option<String>,
    /// The instance command template (see [`instances::instance_command`]);
    /// `None`: instances get no process.
    pub instance_template: Option<String>,
    /// How long an instance's process runs before it counts as `installed`.
    pub instance_settle: Duration,
    /// The member (pod name), for `{member}` and `SHOAL_MEMBER`.
    pub member: String,
    /// SIGTERM → SIGKILL grace period.
    pub stop_grace: Duration,
    /// The grace when every job stops because the sidecar fenced itself: the
    /// processes must be gone before the Lease may be seen expired.
    pub fenced_stop_grace: Duration,
    /// First restart delay after a crash.
    pub restart_backoff: Duration,
    /// Longest restart delay.
    pub restart_backoff_max: Duration,
}

/// Process groups of running job processes, so that a sidecar that dies (a
/// dropped [`crate::Worker`]) can kill them at once, as a container's death
/// kills every process in it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LiveGroups(Arc<std::sync::Mutex<BTreeSet<i32>>>);

impl LiveGroups {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// SIGKILLs every live group (best effort; a group may be gone already).
    pub(crate) fn kill_all(&self) {
        for group in std::mem::take(&mut *self.lock()) {
            if let Some(group) = Pid::from_raw(group) {
                let _ = rustix::process::kill_process_group(group, Signal::KILL);
            }
        }
    }
}

/// An instance's process (or the task that reported its failure) and what it runs.
struct InstanceProcess {
    spec: SliceInstance,
    process: JobProcess,
}

/// A job's process is running (or waiting to restart) under this handle.
struct JobProcess {
    /// Sends the SIGTERM → SIGKILL grace to stop with.
    stop: oneshot::Sender<Duration>,
    task: JoinHandle<()>,
}

/// Runs the supervisor until `shutdown` fires: follows the delivered slice,
/// and after each reconciliation reports the slice it now matches on
/// `reconciled` (only for an unfenced slice, so that acknowledgements stop
/// while fenced). Every process is stopped before it returns.
pub(crate) async fn supervise(
    settings: ExecSettings,
    mut delivered: watch::Receiver<Delivered>,
    reconciled: watch::Sender<Option<crate::view::AckTarget>>,
    metrics: Arc<Metrics>,
    live: LiveGroups,
    reports: Arc<watch::Sender<InstanceReports>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let settings = Arc::new(settings);
    let mut running: BTreeMap<String, JobProcess> = BTreeMap::new();
    let mut running_instances: BTreeMap<String, InstanceProcess> = BTreeMap::new();
    loop {
        let current = delivered.borrow_and_update().clone();
        let desired: Vec<String> = match (&current.slice, &settings.template) {
            (Some(slice), Some(_)) => slice.jobs.clone(),
            _ => Vec::new(),
        };
        let desired_instances: &[SliceInstance] = if settings.instance_template.is_some() {
            current.instances()
        } else {
            &[]
        };
        let instance_changes = plan_instances(
            running_instances.values().map(|running| &running.spec),
            desired_instances,
        );
        let revision = current.slice.as_ref().map_or(0, |slice| slice.revision);
        let changes = plan(running.keys().map(String::as_str), &desired);
        if !changes.is_empty() {
            tracing::info!(
                stop = changes.stop.len(),
                start = changes.start.len(),
                revision,
                "exec: following slice"
            );
        }
        // Revoke before grant, and wait for every revoked process to be gone:
        // the acknowledgement below promises exactly that.
        let mut stopping: Vec<JobProcess> = changes
            .stop
            .iter()
            .filter_map(|job| running.remove(job))
            .collect();
        let mut stopped_instances = Vec::new();
        for name in &instance_changes.stop {
            if let Some(instance) = running_instances.remove(name) {
                // Its task reports `removing` itself: it is the only writer of its
                // state while it lives, so no late `installed` can overwrite it.
                stopped_instances.push((name.clone(), instance.spec.deployment));
                stopping.push(instance.process);
            }
        }
        let grace = if current.fenced {
            settings.fenced_stop_grace
        } else {
            settings.stop_grace
        };
        stop_all(stopping, grace).await;
        for (name, deployment) in stopped_instances {
            // A changed instance is about to start again: it is not removed.
            let restarting = instance_changes.start.iter().any(|spec| spec.name == name);
            if !restarting {
                report(
                    &reports,
                    &name,
                    InstanceReport::new(InstanceState::Removed, deployment),
                );
            }
        }
        for spec in instance_changes.start {
            report(
                &reports,
                &spec.name,
                InstanceReport::new(InstanceState::Pending, spec.deployment),
            );
            let (stop_tx, stop_rx) = oneshot::channel();
            let task = tokio::spawn(run_instance(
                settings.clone(),
                spec.clone(),
                reports.clone(),
                live.clone(),
                delivered.clone(),
                stop_rx,
            ));
            running_instances.insert(
                spec.name.clone(),
                InstanceProcess {
                    spec,
                    process: JobProcess {
                        stop: stop_tx,
                        task,
                    },
                },
            );
        }
        for job in changes.start {
            let process = spawn_job(
                settings.clone(),
                job.clone(),
                revision,
                metrics.clone(),
                live.clone(),
                delivered.clone(),
            );
            running.insert(job, process);
        }
        metrics
            .exec_processes
            .set((running.len() + running_instances.len()) as i64);
        if let (Some(slice), false) = (&current.slice, current.fenced) {
            let target = slice.ack_target();
            reconciled.send_if_modified(|acked| {
                let changed = acked.as_ref() != Some(&target);
                *acked = Some(target.clone());
                changed
            });
        }
        tokio::select! {
            changed = delivered.changed() => if changed.is_err() { break },
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
    }
    let mut everything: Vec<JobProcess> = running.into_values().collect();
    everything.extend(
        running_instances
            .into_values()
            .map(|instance| instance.process),
    );
    stop_all(everything, settings.stop_grace).await;
    metrics.exec_processes.set(0);
}

fn report(reports: &watch::Sender<InstanceReports>, name: &str, report: InstanceReport) {
    reports.send_if_modified(|reports| {
        let changed = reports.get(name) != Some(&report);
        reports.insert(name.to_owned(), report);
        changed
    });
}

/// Runs one instance's process once: `installing` when started, `installed`
/// after the settle period (or on exit 0), `failed` on a non-zero exit or when
/// it cannot start, and then waits, without restarting, for the supervisor to
/// stop it (a change brings a new process; see [`plan_instances`]).
async fn run_instance(
    settings: Arc<ExecSettings>,
    instance: SliceInstance,
    reports: Arc<watch::Sender<InstanceReports>>,
    live: LiveGroups,
    mut fencing: watch::Receiver<Delivered>,
    mut stop: oneshot::Receiver<Duration>,
) {
    let name = instance.name.clone();
    let deployment = instance.deployment;
    let failed = |code: String, message: String| {
        tracing::warn!(
            instance = name,
            code,
            message,
            "exec: instance failed; not restarted"
        );
        report(
            &reports,
            &name,
            InstanceReport::failed(deployment, code, &message),
        );
    };
    let template = settings.instance_template.as_deref().unwrap_or_default();
    let command = instances::instance_command(template, &instance, &settings.member);
    let spawned = instances::instance_environment(&instance, &settings.member)
        .map_err(|collision| ("EnvironmentCollision".to_owned(), collision.to_string()))
        .and_then(|environment| {
            spawn_group(&command, &environment, Stdio::piped(), &live).map_err(|error| {
                (
                    "SpawnFailed".to_owned(),
                    format!("cannot start {command:?}: {error}"),
                )
            })
        });
    let (mut child, guard) = match spawned {
        Ok(spawned) => spawned,
        Err((code, message)) => {
            failed(code, message);
            wait_for_stop(&reports, &name, deployment, stop).await;
            return;
        }
    };
    tracing::info!(
        instance = name,
        deployment,
        pid = child.id(),
        "exec: instance started"
    );
    report(
        &reports,
        &name,
        InstanceReport::new(InstanceState::Installing, deployment),
    );
    let stderr = child
        .stderr
        .take()
        .map(|stderr| forward_stderr(stderr, name.clone()));
    let settle = tokio::time::sleep(settings.instance_settle);
    tokio::pin!(settle);
    let mut settled = false;
    let status = loop {
        tokio::select! {
            // A stop wins over a settle due at the same time.
            biased;
            grace = &mut stop => {
                report(&reports, &name, InstanceReport::new(InstanceState::Removing, deployment));
                let grace = grace.unwrap_or(settings.stop_grace);
                terminate(&name, child, guard, grace, settings.fenced_stop_grace, &mut fencing).await;
                return;
            }
            status = child.wait() => break status,
            () = &mut settle, if !settled => {
                settled = true;
                report(&reports, &name, InstanceReport::new(InstanceState::Installed, deployment));
            }
        }
    };
    drop(guard);
    match status {
        Ok(status) if status.success() => {
            tracing::info!(instance = name, "exec: instance process completed");
            report(
                &reports,
                &name,
                InstanceReport::new(InstanceState::Installed, deployment),
            );
        }
        Ok(status) => {
            let last_line = match stderr {
                Some((last_line, reader)) => {
                    // The pipe closes with the process; wait briefly for its last bytes.
                    let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
                    last_line
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .clone()
                }
                None => None,
            };
            let mut message = format!("process exited with {status}");
            if let Some(line) = last_line {
                message.push_str(": ");
                message.push_str(&line);
            }
            failed(instances::exit_code(status), message);
        }
        Err(error) => failed(
            "ExitCodeUnknown".to_owned(),
            format!("cannot wait for the process: {error}"),
        ),
    }
    wait_for_stop(&reports, &name, deployment, stop).await;
}

/// An instance whose process is gone (failed or completed) keeps its state
/// until the supervisor stops it; then it is `removing` like any other.
async fn wait_for_stop(
    reports: &watch::Sender<InstanceReports>,
    name: &str,
    deployment: u64,
    stop: oneshot::Receiver<Duration>,
) {
    if stop.await.is_ok() {
        report(
            reports,
            name,
            InstanceReport::new(InstanceState::Removing, deployment),
        );
    }
}

type LastLine = Arc<std::sync::Mutex<Option<String>>>;

/// Copies an instance's stderr to the sidecar's and remembers its last
/// non-empty line (for the failure message).
fn forward_stderr(
    stderr: tokio::process::ChildStderr,
    instance: String,
) -> (LastLine, JoinHandle<()>) {
    use std::io::Write as _;
    use tokio::io::AsyncBufReadExt as _;
    let last_line: LastLine = Arc::default();
    let keep = last_line.clone();
    let reader = tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            // Short lines to the container log; a blocking write is fine here.
            let _ = writeln!(std::io::stderr().lock(), "[{instance}] {line}");
            if !line.trim().is_empty() {
                *keep.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(line);
            }
        }
    });
    (last_line, reader)
}

async fn stop_all(processes: Vec<JobProcess>, grace: Duration) {
    let mut tasks = Vec::with_capacity(processes.len());
    for process in processes {
        // A task that already ended dropped its receiver; nothing to stop then.
        let _ = process.stop.send(grace);
        tasks.push(process.task);
    }
    for task in tasks {
        if let Err(error) = task.await {
            tracing::error!(%error, "exec: a job's supervising task failed");
        }
    }
}

fn spawn_job(
    settings: Arc<ExecSettings>,
    job: String,
    revision: u64,
    metrics: Arc<Metrics>,
    live: LiveGroups,
    fencing: watch::Receiver<Delivered>,
) -> JobProcess {
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(run_job(
        settings, job, revision, metrics, live, fencing, stop_rx,
    ));
    JobProcess {
        stop: stop_tx,
        task,
    }
}

/// Kills the process group when dropped, so that a job's processes never
/// outlive the sidecar task that owned them (e.g. the runtime shutting down).
struct GroupGuard {
    group: Option<Pid>,
    live: LiveGroups,
}

impl GroupGuard {
    /// SIGKILLs what is left of the group and forgets it.
    fn kill_rest(&mut self) {
        if let Some(group) = self.group.take() {
            self.live.lock().remove(&group.as_raw_pid());
            let _ = rustix::process::kill_process_group(group, Signal::KILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill_rest();
    }
}

async fn run_job(
    settings: Arc<ExecSettings>,
    job: String,
    revision: u64,
    metrics: Arc<Metrics>,
    live: LiveGroups,
    mut fencing: watch::Receiver<Delivered>,
    mut stop: oneshot::Receiver<Duration>,
) {
    let command = command_for(
        settings.template.as_deref().unwrap_or_default(),
        &job,
        &settings.member,
    );
    let mut consecutive_crashes = 0u32;
    loop {
        let started_at = Instant::now();
        match spawn_process(&command, &job, &settings.member, revision, &live) {
            Ok((mut child, guard)) => {
                tracing::info!(job, pid = child.id(), "exec: started");
                tokio::select! {
                    status = child.wait() => {
                        drop(guard);
                        metrics.exec_crashes.inc();
                        match status {
                            Ok(status) => tracing::warn!(job, %status, "exec: process exited while its job is owned; restarting"),
                            Err(error) => tracing::warn!(job, %error, "exec: could not wait for process; restarting"),
                        }
                    }
                    grace = &mut stop => {
                        // A dropped sender (the supervisor ending) stops with the usual grace.
                        let grace = grace.unwrap_or(settings.stop_grace);
                        terminate(&job, child, guard, grace, settings.fenced_stop_grace, &mut fencing).await;
                        return;
                    }
                }
            }
            Err(error) => {
                metrics.exec_crashes.inc();
                tracing::error!(job, command, %error, "exec: could not start process");
            }
        }
        // A process that ran for a while before crashing starts a new streak.
        if started_at.elapsed() >= settings.restart_backoff_max {
            consecutive_crashes = 0;
        }
        consecutive_crashes = consecutive_crashes.saturating_add(1);
        let delay = restart_delay(
            consecutive_crashes,
            settings.restart_backoff,
            settings.restart_backoff_max,
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => { metrics.exec_restarts.inc(); }
            _ = &mut stop => return,
        }
    }
}

fn spawn_process(
    command: &str,
    job: &str,
    member: &str,
    revision: u64,
    live: &LiveGroups,
) -> std::io::Result<(Child, GroupGuard)> {
    let environment = [
        ("SHOAL_JOB".to_owned(), job.to_owned()),
        ("SHOAL_MEMBER".to_owned(), member.to_owned()),
        ("SHOAL_REVISION".to_owned(), revision.to_string()),
    ];
    spawn_group(command, &environment, Stdio::inherit(), live)
}

/// Starts `sh -c command` with `environment` added, in its own process group.
fn spawn_group(
    command: &str,
    environment: &[(String, String)],
    stderr: Stdio,
    live: &LiveGroups,
) -> std::io::Result<(Child, GroupGuard)> {
    let child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .envs(environment.iter().map(|(name, value)| (name, value)))
        .stderr(stderr)
        .stdin(Stdio::null())
        // Its own process group, so that SIGTERM reaches a whole pipeline.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let group = child.id().and_then(|pid| Pid::from_raw(pid as i32));
    if let Some(group) = group {
        live.lock().insert(group.as_raw_pid());
    }
    Ok((
        child,
        GroupGuard {
            group,
            live: live.clone(),
        },
    ))
}

/// SIGTERM, then SIGKILL after `grace`; if the sidecar fences itself
/// meanwhile, SIGKILL comes `fenced_grace` after the fencing at the latest (a
/// revoke stopping with a long grace must not outlive the Lease either).
async fn terminate(
    job: &str,
    mut child: Child,
    mut guard: GroupGuard,
    grace: Duration,
    fenced_grace: Duration,
    fencing: &mut watch::Receiver<Delivered>,
) {
    if let Some(group) = guard.group
        && let Err(error) = rustix::process::kill_process_group(group, Signal::TERM)
    {
        tracing::warn!(job, %error, "exec: SIGTERM failed");
    }
    let mut kill_at = Instant::now() + grace;
    let mut watching_fencing = true;
    let exited = loop {
        tokio::select! {
            status = child.wait() => break Some(status),
            _ = tokio::time::sleep_until(kill_at) => break None,
            fenced = fencing.wait_for(|delivered| delivered.fenced), if watching_fencing => {
                watching_fencing = false;
                if fenced.is_ok() {
                    kill_at = kill_at.min(Instant::now() + fenced_grace);
                }
            }
        }
    };
    match exited {
        Some(Ok(status)) => tracing::info!(job, %status, "exec: stopped"),
        Some(Err(error)) => tracing::warn!(job, %error, "exec: could not wait for stopped process"),
        None => {
            tracing::warn!(
                job,
                grace_ms = grace.as_millis() as u64,
                "exec: no exit within grace period; SIGKILL"
            );
            if let Some(group) = guard.group {
                let _ = rustix::process::kill_process_group(group, Signal::KILL);
            }
            if let Err(error) = child.wait().await {
                tracing::warn!(job, %error, "exec: could not wait for killed process");
            }
        }
    }
    // Leftovers of the group (a background child that ignored SIGTERM) go too:
    // the job must be fully gone before its revoke is acknowledged.
    guard.kill_rest();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|key| key.to_string()).collect()
    }

    #[test]
    fn the_plan_stops_revoked_and_starts_granted_jobs_only() {
        let changes = plan(["a", "b", "c"], &jobs(&["b", "c", "d"]));
        assert_eq!(changes.stop, jobs(&["a"]));
        assert_eq!(changes.start, jobs(&["d"]));
    }

    fn instance(name: &str, deployment: u64, image: &str) -> SliceInstance {
        SliceInstance {
            name: name.to_owned(),
            plan: "web".to_owned(),
            deployment,
            applications: vec![shoal_core::slice::InstanceApplication {
                name: "nginx".to_owned(),
                coordinates: [("image".to_owned(), image.to_owned())].into(),
                ports: Vec::new(),
            }],
        }
    }

    #[test]
    fn the_instance_plan_restarts_changed_instances_only() {
        let running = [
            instance("web-0", 1, "a"),
            instance("web-1", 1, "a"),
            instance("web-2", 1, "a"),
        ];
        let desired = [
            // Same deployment, other coordinates: a change too.
            instance("web-0", 1, "b"),
            instance("web-1", 1, "a"),
            instance("web-3", 2, "a"),
        ];
        let changes = plan_instances(&running, &desired);
        assert_eq!(changes.stop, jobs(&["web-0", "web-2"]));
        assert_eq!(changes.start, [desired[0].clone(), desired[2].clone()]);
        assert_eq!(plan_instances(&desired, &desired), InstancePlan::default());
    }

    #[test]
    fn an_unchanged_slice_plans_nothing() {
        assert!(plan(["a", "b"], &jobs(&["a", "b"])).is_empty());
    }

    #[test]
    fn an_empty_slice_stops_everything() {
        let changes = plan(["a", "b"], &[]);
        assert_eq!(changes.stop, jobs(&["a", "b"]));
        assert!(changes.start.is_empty());
    }

    #[test]
    fn job_keys_are_quoted_so_they_cannot_inject_shell_syntax() {
        let command = command_for(
            "consumer --stream {job} --as {member}",
            "x'; rm -rf /; '",
            "pool-0",
        );
        assert_eq!(
            command,
            r"consumer --stream 'x'\''; rm -rf /; '\''' --as 'pool-0'"
        );
    }

    #[test]
    fn restart_delays_double_up_to_the_cap() {
        let initial = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        let delays: Vec<_> = (1..=6)
            .map(|crashes| restart_delay(crashes, initial, max))
            .collect();
        assert_eq!(
            delays,
            [100, 200, 400, 800, 1000, 1000]
                .map(Duration::from_millis)
                .to_vec()
        );
        assert_eq!(restart_delay(u32::MAX, initial, max), max);
    }

    #[tokio::test]
    async fn a_quoted_job_key_reaches_the_process_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let template = format!(
            "printf '%s|%s|%s' {{job}} \"$SHOAL_JOB\" \"$SHOAL_REVISION\" > {}",
            out.display()
        );
        let key = "stream:it's $HOME";
        let (mut child, _guard) = spawn_process(
            &command_for(&template, key, "m-0"),
            key,
            "m-0",
            7,
            &LiveGroups::default(),
        )
        .unwrap();
        assert!(child.wait().await.unwrap().success());
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "stream:it's $HOME|stream:it's $HOME|7"
        );
    }

    async fn process_ignoring_sigterm() -> (Child, GroupGuard, u32) {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("trap-set");
        let (child, guard) = spawn_process(
            &format!(
                "trap '' TERM; touch {}; sleep 30 & wait; sleep 30",
                ready.display()
            ),
            "j",
            "m-0",
            1,
            &LiveGroups::default(),
        )
        .unwrap();
        let pid = child.id().unwrap();
        // The signal must not arrive before the shell's trap is in place.
        let started = Instant::now();
        while !ready.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the shell never set its trap"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (child, guard, pid)
    }

    #[tokio::test]
    async fn a_process_ignoring_sigterm_is_killed_after_the_grace_period() {
        let (child, guard, pid) = process_ignoring_sigterm().await;
        let started = Instant::now();
        let (_unfenced, mut fencing) = watch::channel(Delivered::default());
        terminate(
            "j",
            child,
            guard,
            Duration::from_millis(300),
            Duration::from_millis(100),
            &mut fencing,
        )
        .await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[tokio::test]
    async fn fencing_during_a_long_stop_cuts_the_grace_short() {
        let (child, guard, pid) = process_ignoring_sigterm().await;
        let (fence, mut fencing) = watch::channel(Delivered::default());
        let started = Instant::now();
        let fenced_at = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            fence.send_replace(Delivered {
                slice: None,
                fenced: true,
            });
            // Keep the sender alive until the stop is over.
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        terminate(
            "j",
            child,
            guard,
            Duration::from_secs(20),
            Duration::from_millis(300),
            &mut fencing,
        )
        .await;
        let took = started.elapsed();
        fenced_at.abort();
        // Fenced at ~200 ms, killed ~300 ms later: nowhere near the 20 s grace.
        assert!(took >= Duration::from_millis(500), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    mod supervisor {
        use super::*;
        use crate::view::{AckTarget, SliceView};
        use std::path::Path;

        fn delivered(revision: u64, jobs: &[&str], fenced: bool) -> Delivered {
            let jobs: Vec<String> = jobs.iter().map(|job| job.to_string()).collect();
            let slice = SliceView {
                swarm: "demo".into(),
                member: "pool-0".into(),
                revision,
                hash: crate::slice_doc::jobs_hash(jobs.iter().map(String::as_str)).unwrap(),
                jobs,
                instances: Vec::new(),
            };
            Delivered {
                slice: Some(Arc::new(slice)),
                fenced,
            }
        }

        fn logging_template(log: &Path) -> String {
            let log = log.display();
            format!(
                "echo start $SHOAL_JOB $SHOAL_REVISION >> {log}; \
                 trap 'echo stop $SHOAL_JOB >> {log}; exit 0' TERM; sleep 1000 & wait"
            )
        }

        fn settings(template: String) -> ExecSettings {
            ExecSettings {
                template: Some(template),
                instance_template: None,
                instance_settle: Duration::from_millis(300),
                member: "pool-0".into(),
                stop_grace: Duration::from_secs(5),
                fenced_stop_grace: Duration::from_secs(1),
                restart_backoff: Duration::from_millis(50),
                restart_backoff_max: Duration::from_millis(400),
            }
        }

        fn log_lines(log: &Path) -> Vec<String> {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect()
        }

        async fn eventually(mut condition: impl FnMut() -> bool) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !condition() {
                assert!(Instant::now() < deadline, "condition not met within 10s");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }

        struct Running {
            delivered: watch::Sender<Delivered>,
            reconciled: watch::Receiver<Option<AckTarget>>,
            shutdown: watch::Sender<bool>,
            metrics: Arc<Metrics>,
            task: JoinHandle<()>,
        }

        fn start(template: String, first: Delivered) -> Running {
            start_with(settings(template), first).0
        }

        fn start_with(
            settings: ExecSettings,
            first: Delivered,
        ) -> (Running, Arc<watch::Sender<InstanceReports>>) {
            let (delivered, delivered_rx) = watch::channel(first);
            let (reconciled_tx, reconciled) = watch::channel(None);
            let (shutdown, shutdown_rx) = watch::channel(false);
            let metrics = Arc::new(Metrics::default());
            let reports: Arc<watch::Sender<InstanceReports>> = Arc::default();
            let task = tokio::spawn(supervise(
                settings,
                delivered_rx,
                reconciled_tx,
                metrics.clone(),
                LiveGroups::default(),
                reports.clone(),
                shutdown_rx,
            ));
            let running = Running {
                delivered,
                reconciled,
                shutdown,
                metrics,
                task,
            };
            (running, reports)
        }

        #[tokio::test]
        async fn one_process_runs_per_job_and_a_revoke_is_reported_only_after_exit() {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("log");
            let mut running = start(logging_template(&log), delivered(1, &["a", "b"], false));
            eventually(|| log_lines(&log).len() == 2).await;
            let mut started = log_lines(&log);
            started.sort();
            assert_eq!(started, ["start a 1", "start b 1"]);
            assert_eq!(
                running
                    .reconciled
                    .borrow()
                    .as_ref()
                    .map(|target| target.revision),
                Some(1)
            );

            running
                .delivered
                .send_replace(delivered(2, &["b", "c"], false));
            let acked = running
                .reconciled
                .wait_for(|target| target.as_ref().is_some_and(|target| target.revision == 2))
                .await
                .unwrap()
                .clone();
            // The revoke was reported, so the revoked process must be gone already.
            assert!(
                log_lines(&log).contains(&"stop a".to_string()),
                "{:?}",
                log_lines(&log)
            );
            assert_eq!(
                acked.unwrap().hash,
                crate::slice_doc::jobs_hash(["b", "c"]).unwrap()
            );
            eventually(|| log_lines(&log).contains(&"start c 2".to_string())).await;
            // b kept running: it was neither stopped nor started again.
            let lines = log_lines(&log);
            assert_eq!(
                lines
                    .iter()
                    .filter(|line| line.starts_with("start b"))
                    .count(),
                1
            );
            assert!(!lines.contains(&"stop b".to_string()));
            assert_eq!(running.metrics.exec_processes.get(), 2);

            running.shutdown.send_replace(true);
            running.task.await.unwrap();
            let lines = log_lines(&log);
            assert!(
                lines.contains(&"stop b".to_string()) && lines.contains(&"stop c".to_string()),
                "{lines:?}"
            );
        }

        #[tokio::test]
        async fn fencing_stops_every_process_and_reports_nothing_to_acknowledge() {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("log");
            let mut running = start(logging_template(&log), delivered(1, &["a", "b"], false));
            eventually(|| log_lines(&log).len() == 2).await;
            running.reconciled.borrow_and_update();

            running.delivered.send_replace(Delivered {
                slice: Some(Arc::new(
                    delivered(1, &["a", "b"], false)
                        .slice
                        .unwrap()
                        .without_jobs(),
                )),
                fenced: true,
            });
            eventually(|| log_lines(&log).len() == 4).await;
            eventually(|| running.metrics.exec_processes.get() == 0).await;
            assert!(
                !running.reconciled.has_changed().unwrap(),
                "a fenced state must not be acknowledged"
            );

            running.shutdown.send_replace(true);
            running.task.await.unwrap();
        }

        #[tokio::test]
        async fn a_crashing_process_is_restarted_with_backoff() {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("log");
            let template = format!("echo run $SHOAL_JOB >> {}; exit 3", log.display());
            let running = start(template, delivered(1, &["a"], false));
            // 50, 100, 200 ms delays: four runs take well under the 10 s limit.
            eventually(|| log_lines(&log).len() >= 4).await;
            assert!(running.metrics.exec_restarts.get() >= 3);
            assert!(log_lines(&log).iter().all(|line| line == "run a"));
            running.shutdown.send_replace(true);
            running.task.await.unwrap();
        }

        fn with_instances(revision: u64, instances: &[SliceInstance]) -> Delivered {
            let slice = delivered(revision, &[], false)
                .slice
                .unwrap()
                .with_instances(instances.to_vec())
                .unwrap();
            Delivered {
                slice: Some(Arc::new(slice)),
                fenced: false,
            }
        }

        fn start_instances(
            template: String,
            first: Delivered,
        ) -> (Running, Arc<watch::Sender<InstanceReports>>) {
            let mut settings = settings(String::new());
            settings.template = None;
            settings.instance_template = Some(template);
            start_with(settings, first)
        }

        fn state_of(
            reports: &watch::Sender<InstanceReports>,
            name: &str,
        ) -> Option<InstanceReport> {
            reports.borrow().get(name).cloned()
        }

        #[tokio::test]
        async fn a_removed_instance_is_removing_while_it_stops_then_removed() {
            // The process takes 300 ms to exit after SIGTERM: long enough to see `removing`.
            let template = "trap 'sleep 0.3; exit 0' TERM; sleep 1000 & wait".to_owned();
            let web = super::instance("web-0", 3, "a");
            let (mut running, reports) = start_instances(template, with_instances(1, &[web]));
            eventually(|| {
                state_of(&reports, "web-0")
                    == Some(InstanceReport::new(InstanceState::Installed, 3))
            })
            .await;
            running.delivered.send_replace(with_instances(2, &[]));
            eventually(|| {
                state_of(&reports, "web-0").map(|report| report.state)
                    == Some(InstanceState::Removing)
            })
            .await;
            let acked = running
                .reconciled
                .wait_for(|target| target.as_ref().is_some_and(|target| target.revision == 2))
                .await
                .unwrap()
                .clone();
            assert!(acked.is_some());
            // Acknowledged only after the process is gone, and reported so.
            assert_eq!(
                state_of(&reports, "web-0"),
                Some(InstanceReport::new(InstanceState::Removed, 3))
            );
            assert_eq!(running.metrics.exec_processes.get(), 0);
            running.shutdown.send_replace(true);
            running.task.await.unwrap();
        }

        #[tokio::test]
        async fn a_process_killed_by_a_signal_is_failed_with_the_signal_code() {
            let web = super::instance("web-0", 1, "a");
            let (running, reports) =
                start_instances("kill -9 $$".to_owned(), with_instances(1, &[web]));
            eventually(|| {
                state_of(&reports, "web-0").and_then(|report| report.code)
                    == Some("Signal9".to_owned())
            })
            .await;
            assert_eq!(
                state_of(&reports, "web-0").map(|report| report.state),
                Some(InstanceState::Failed)
            );
            running.shutdown.send_replace(true);
            running.task.await.unwrap();
        }

        #[tokio::test]
        async fn fencing_stops_instance_processes_and_unfencing_starts_them_again() {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("log");
            let template = format!(
                "echo start $SHOAL_INSTANCE >> {log}; trap 'echo stop $SHOAL_INSTANCE >> {log}; exit 0' TERM; sleep 1000 & wait",
                log = log.display()
            );
            let web = super::instance("web-0", 1, "a");
            let unfenced = with_instances(1, &[web]);
            let (running, reports) = start_instances(template, unfenced.clone());
            eventually(|| log_lines(&log) == ["start web-0"]).await;
            running.delivered.send_replace(Delivered {
                slice: unfenced
                    .slice
                    .as_ref()
                    .map(|slice| Arc::new(slice.without_jobs())),
                fenced: true,
            });
            eventually(|| log_lines(&log) == ["start web-0", "stop web-0"]).await;
            eventually(|| {
                state_of(&reports, "web-0").map(|report| report.state)
                    == Some(InstanceState::Removed)
            })
            .await;
            running.delivered.send_replace(unfenced);
            eventually(|| log_lines(&log).len() == 3).await;
            eventually(|| {
                state_of(&reports, "web-0").map(|report| report.state)
                    == Some(InstanceState::Installed)
            })
            .await;
            running.shutdown.send_replace(true);
            running.task.await.unwrap();
        }
    }
}
