//! Shoal's member sidecar, `shoal-worker`.
//!
//! It runs beside the application in every member pod and keeps the member's
//! slice current for it:
//!
//! - watches its own slice ConfigMap `<pod>-slice` through the API (by name,
//!   resumed after disconnects, with backoff on errors), never losing the last
//!   good slice: a malformed one is reported (`/readyz`, a metric, a log) and
//!   ignored;
//! - hands it over as a file replaced atomically (`--slice-file`, slice format
//!   v1), on localhost HTTP (see [`http`]), as a signal to the application
//!   (`--signal-pid-file`/`--signal-process-name`), and to Rust code through
//!   [`Worker::slices`];
//! - in exec mode (`--exec`) runs one process per owned job (see [`exec`]),
//!   and with `--exec-instance` one per plan instance, reporting each
//!   instance's state on the Lease (see [`instances`]);
//! - acknowledges what it applied on its Lease `<pod>-member`, renews it, and
//!   fences itself when it cannot (see [`lease`](crate::lease) docs).
//!
//! Embed it with [`Worker::start`] or [`run`]; the binary is a thin `main`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub mod atomic_file;
pub mod exec;
pub mod http;
pub mod instances;
mod lease;
pub mod metrics;
pub mod names;
pub mod settings;
pub mod signal;
pub mod slice_doc;
mod source;
pub mod view;

pub use settings::Settings;
pub use view::{AckTarget, Delivered, SliceView, SliceWatch};

use metrics::Metrics;
use signal::SignalTarget;

/// Why the sidecar could not start or stopped with a failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is unusable.
    #[error("invalid setting: {0}")]
    InvalidSettings(String),
    /// The HTTP listener could not be bound.
    #[error("cannot listen on {address}: {source}")]
    BindHttp {
        /// The address from `--listen`.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The metrics listener could not be bound.
    #[error("cannot listen for metrics on {address}: {source}")]
    BindMetrics {
        /// The address from `--metrics-address`.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("HTTP server failed: {0}")]
    ServeHttp(#[source] std::io::Error),
    /// One of the sidecar's tasks panicked.
    #[error("the {task} task failed: {source}")]
    TaskFailed {
        /// Which task.
        task: &'static str,
        /// The join error.
        source: tokio::task::JoinError,
    },
}

/// Why an application's acknowledgement was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckRefused {
    /// Exec mode or `--ack-on-apply`: the sidecar acknowledges by itself.
    #[error(
        "acknowledgements are automatic in this mode (exec or --ack-on-apply); nothing to confirm"
    )]
    Automatic,
    /// Fenced: nothing may be acknowledged until the Lease is renewed.
    #[error("the sidecar is fenced (Lease not renewed in time); acknowledgements are paused")]
    Fenced,
    /// No slice was delivered yet.
    #[error("no slice delivered yet")]
    NoSlice,
    /// The acknowledgement names another slice than the one delivered.
    #[error(
        "ack for revision {acked_revision} hash {acked_hash} does not match the delivered slice: revision {revision} hash {hash}"
    )]
    Stale {
        /// What the application confirmed.
        acked_revision: u64,
        /// What the application confirmed.
        acked_hash: String,
        /// What is delivered.
        revision: u64,
        /// What is delivered.
        hash: String,
    },
}

/// Who acknowledges a delivered slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckMode {
    /// The exec supervisor, once its processes follow the slice.
    Exec,
    /// The sidecar, as soon as the slice is delivered.
    OnApply,
    /// The application, with `POST /v1/ack`.
    Application,
}

/// What `/readyz` reports beyond the channels.
#[derive(Debug, Default)]
pub(crate) struct Status {
    synced: bool,
    config_map_missing: bool,
    rejected: Option<String>,
    watch_error: Option<String>,
    lease_error: Option<String>,
    file_error: Option<String>,
    /// The newest ConfigMap resourceVersion accepted or rejected, to ignore older reads.
    resource_version: Option<u64>,
}

/// State shared by the sidecar's tasks.
pub(crate) struct Shared {
    settings: Settings,
    metrics: Arc<Metrics>,
    slice_config_map: String,
    config_maps: Api<ConfigMap>,
    ack_mode: AckMode,
    /// The last good slice from the API.
    latest: watch::Sender<Option<Arc<SliceView>>>,
    /// Self-fenced (starts fenced until the first renewal).
    fenced: watch::Sender<bool>,
    /// What the application is handed.
    delivered: watch::Sender<Delivered>,
    /// What should be acknowledged next.
    ack_target: watch::Sender<Option<AckTarget>>,
    /// What the Lease carries.
    acked: watch::Sender<Option<AckTarget>>,
    status: Mutex<Status>,
    shutdown: watch::Sender<bool>,
    /// Exec mode: process groups to kill if the sidecar is dropped.
    live_groups: exec::LiveGroups,
    /// Each plan instance's state, written on the Lease.
    instance_reports: Arc<watch::Sender<instances::InstanceReports>>,
}

impl Shared {
    fn lock_status(&self) -> MutexGuard<'_, Status> {
        // A panic elsewhere must not take the status down with it.
        self.status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set_status(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.lock_status());
    }

    async fn accept(&self, config_map: &ConfigMap) {
        source::accept(self, config_map).await;
    }

    async fn refresh_slice(&self) -> Result<(), kube::Error> {
        source::read_once(self, &self.config_maps).await
    }

    fn app_ack(&self, target: AckTarget) -> Result<AckTarget, AckRefused> {
        if self.ack_mode != AckMode::Application {
            return Err(AckRefused::Automatic);
        }
        let delivered = self.delivered.borrow().clone();
        if delivered.fenced {
            return Err(AckRefused::Fenced);
        }
        let slice = delivered.slice.ok_or(AckRefused::NoSlice)?;
        if slice.revision != target.revision || slice.hash != target.hash {
            return Err(AckRefused::Stale {
                acked_revision: target.revision,
                acked_hash: target.hash,
                revision: slice.revision,
                hash: slice.hash.clone(),
            });
        }
        self.ack_target.send_replace(Some(target.clone()));
        Ok(target)
    }

    fn readiness(&self) -> http::Readiness {
        let fenced = *self.fenced.borrow();
        let revision = self.latest.borrow().as_ref().map(|slice| slice.revision);
        let acked_revision = self.acked.borrow().as_ref().map(|acked| acked.revision);
        let status = self.lock_status();
        http::Readiness {
            ready: status.synced && !fenced,
            fenced,
            synced: status.synced,
            revision,
            acked_revision,
            rejected: status.rejected.clone(),
            config_map_missing: status.config_map_missing,
            watch_error: status.watch_error.clone(),
            lease_error: status.lease_error.clone(),
            file_error: status.file_error.clone(),
        }
    }
}

/// A running sidecar. Dropping it without [`Worker::stop`] is a crash: its
/// tasks are aborted and its exec processes SIGKILLed at once (as when the
/// sidecar container dies), so nothing keeps running for a dead sidecar.
pub struct Worker {
    http_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl Worker {
    /// Starts the sidecar: binds the HTTP server, starts the Lease, the slice
    /// watch, delivery and (in exec mode) the supervisor.
    pub async fn start(client: kube::Client, settings: Settings) -> Result<Worker, Error> {
        validate(&settings)?;
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|source| Error::BindHttp {
                address: settings.listen,
                source,
            })?;
        let http_addr = listener.local_addr().map_err(|source| Error::BindHttp {
            address: settings.listen,
            source,
        })?;

        let metrics_listener = match settings.metrics_address {
            Some(address) => {
                let bind_error = |source| Error::BindMetrics { address, source };
                let listener = tokio::net::TcpListener::bind(address)
                    .await
                    .map_err(bind_error)?;
                let bound = listener.local_addr().map_err(bind_error)?;
                Some((listener, bound))
            }
            None => None,
        };
        let metrics_addr = metrics_listener.as_ref().map(|(_, bound)| *bound);

        let ack_mode = if settings.exec.is_some() || settings.exec_instance.is_some() {
            AckMode::Exec
        } else if settings.ack_on_apply {
            AckMode::OnApply
        } else {
            AckMode::Application
        };
        let metrics = Arc::new(Metrics::default());
        metrics.fenced.set(1);
        let shared = Arc::new(Shared {
            slice_config_map: names::slice_config_map(&settings.pod_name),
            config_maps: Api::namespaced(client.clone(), &settings.pod_namespace),
            ack_mode,
            metrics: metrics.clone(),
            latest: watch::Sender::new(None),
            fenced: watch::Sender::new(true),
            delivered: watch::Sender::new(Delivered::default()),
            ack_target: watch::Sender::new(None),
            acked: watch::Sender::new(None),
            status: Mutex::new(Status::default()),
            shutdown: watch::Sender::new(false),
            live_groups: exec::LiveGroups::default(),
            instance_reports: Arc::new(watch::Sender::new(Default::default())),
            settings,
        });
        tracing::info!(
            member = shared.settings.pod_name,
            namespace = shared.settings.pod_namespace,
            %http_addr,
            metrics_addr = ?metrics_addr,
            mode = ?ack_mode,
            "shoal-worker starting"
        );

        let mut tasks = Vec::new();
        let lease_writer = lease::LeaseWriter::new(
            client.clone(),
            &shared.settings.pod_namespace,
            &shared.settings.pod_name,
            shared.settings.pod_uid.as_deref(),
            shared.settings.lease_duration,
        );
        tasks.push((
            "lease",
            tokio::spawn(lease::keep(
                shared.clone(),
                lease_writer,
                shared.ack_target.subscribe(),
                shared.shutdown.subscribe(),
            )),
        ));
        tasks.push((
            "slice watch",
            tokio::spawn(source::follow(
                shared.clone(),
                shared.config_maps.clone(),
                shared.shutdown.subscribe(),
            )),
        ));
        tasks.push(("delivery", tokio::spawn(deliver(shared.clone()))));
        if shared.settings.exec.is_some() || shared.settings.exec_instance.is_some() {
            let exec_settings = exec::ExecSettings {
                template: shared.settings.exec.clone(),
                instance_template: shared.settings.exec_instance.clone(),
                instance_settle: shared.settings.instance_settle,
                member: shared.settings.pod_name.clone(),
                stop_grace: shared.settings.stop_grace,
                fenced_stop_grace: shared.settings.fenced_stop_grace(),
                restart_backoff: shared.settings.restart_backoff,
                restart_backoff_max: shared.settings.restart_backoff_max,
            };
            tasks.push((
                "exec supervisor",
                tokio::spawn(exec::supervise(
                    exec_settings,
                    shared.delivered.subscribe(),
                    shared.ack_target.clone(),
                    metrics.clone(),
                    shared.live_groups.clone(),
                    shared.instance_reports.clone(),
                    shared.shutdown.subscribe(),
                )),
            ));
        }
        if shared.settings.exec_instance.is_none() {
            tasks.push((
                "instance states",
                tokio::spawn(instances::follow_acknowledgements(
                    shared.delivered.subscribe(),
                    shared.ack_target.subscribe(),
                    shared.instance_reports.clone(),
                    shared.shutdown.subscribe(),
                )),
            ));
        }
        if let Some((listener, _)) = metrics_listener {
            let mut metrics_shutdown = shared.shutdown.subscribe();
            let router = http::metrics_router(shared.clone());
            tasks.push((
                "metrics listener",
                tokio::spawn(async move {
                    let served = axum::serve(listener, router)
                        .with_graceful_shutdown(async move {
                            let _ = metrics_shutdown.wait_for(|stop| *stop).await;
                        })
                        .await;
                    if let Err(error) = served {
                        tracing::warn!(%error, "the metrics listener stopped");
                    }
                }),
            ));
        }
        let mut server_shutdown = shared.shutdown.subscribe();
        let router = http::router(shared.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = server_shutdown.wait_for(|stop| *stop).await;
                })
                .await
        });
        Ok(Worker {
            http_addr,
            metrics_addr,
            shared,
            tasks,
            server: Some(server),
        })
    }

    /// The address the HTTP server is bound to.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The address of the separate metrics listener (`--metrics-address`), if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Subscribes to the delivered slice.
    pub fn slices(&self) -> SliceWatch {
        SliceWatch::new(self.shared.delivered.subscribe())
    }

    /// Follows each plan instance's state as reported on the Lease.
    pub fn instance_states(&self) -> watch::Receiver<instances::InstanceReports> {
        self.shared.instance_reports.subscribe()
    }

    /// Follows what the Lease carries as acknowledged (revision and hash).
    pub fn acked(&self) -> watch::Receiver<Option<AckTarget>> {
        self.shared.acked.subscribe()
    }

    /// The application's confirmation, as `POST /v1/ack` does it.
    pub fn ack(&self, target: AckTarget) -> Result<AckTarget, AckRefused> {
        self.shared.app_ack(target)
    }

    /// What `/readyz` would answer.
    pub fn readiness(&self) -> http::Readiness {
        self.shared.readiness()
    }

    /// Stops the sidecar: every exec process is stopped (SIGTERM, grace,
    /// SIGKILL) and the HTTP server drains.
    pub async fn stop(mut self) -> Result<(), Error> {
        self.shared.shutdown.send_replace(true);
        let mut first_failure = None;
        for (task, handle) in std::mem::take(&mut self.tasks) {
            if let Err(source) = handle.await {
                first_failure.get_or_insert(Error::TaskFailed { task, source });
            }
        }
        if let Some(server) = self.server.take() {
            match server.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    first_failure.get_or_insert(Error::ServeHttp(error));
                }
                Err(source) => {
                    first_failure.get_or_insert(Error::TaskFailed {
                        task: "http",
                        source,
                    });
                }
            }
        }
        tracing::info!(
            member = self.shared.settings.pod_name,
            "shoal-worker stopped"
        );
        first_failure.map_or(Ok(()), Err)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared.live_groups.kill_all();
        for (_, handle) in &self.tasks {
            handle.abort();
        }
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

/// Runs the sidecar until `shutdown` completes, then stops it cleanly.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let worker = Worker::start(client, settings).await?;
    shutdown.await;
    worker.stop().await
}

fn validate(settings: &Settings) -> Result<(), Error> {
    if settings.pod_name.trim().is_empty() {
        return Err(Error::InvalidSettings(
            "the pod name (--pod-name / POD_NAME) is empty".into(),
        ));
    }
    if settings.pod_namespace.trim().is_empty() {
        return Err(Error::InvalidSettings(
            "the namespace (--pod-namespace / POD_NAMESPACE) is empty".into(),
        ));
    }
    if settings.lease_duration < Duration::from_secs(1) {
        return Err(Error::InvalidSettings(
            "--lease-duration must be at least 1s".into(),
        ));
    }
    // Fencing must not start before a renewal was even due, or a healthy
    // sidecar would fence between two renewals.
    if settings.fence_margin + settings.fenced_stop_grace() + settings.renew_interval()
        >= settings.lease_duration
    {
        return Err(Error::InvalidSettings(format!(
            "--fence-margin ({:?}) + --fence-grace ({:?}) + the renewal interval ({:?}, a third of the lease) must be shorter than --lease-duration ({:?})",
            settings.fence_margin,
            settings.fenced_stop_grace(),
            settings.renew_interval(),
            settings.lease_duration
        )));
    }
    if let Some(template) = &settings.exec
        && template.trim().is_empty()
    {
        return Err(Error::InvalidSettings("--exec is empty".into()));
    }
    if let Some(template) = &settings.exec_instance
        && template.trim().is_empty()
    {
        return Err(Error::InvalidSettings("--exec-instance is empty".into()));
    }
    Ok(())
}

/// Hands the slice in force to the application: file, HTTP/Rust watchers,
/// signal, and (with `--ack-on-apply`) the acknowledgement.
async fn deliver(shared: Arc<Shared>) {
    let mut latest = shared.latest.subscribe();
    let mut fenced = shared.fenced.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    let signal_target = match (
        &shared.settings.signal_pid_file,
        &shared.settings.signal_process_name,
    ) {
        (Some(path), _) => Some(SignalTarget::PidFile(path.clone())),
        (None, Some(name)) => Some(SignalTarget::ProcessName(name.clone())),
        (None, None) => None,
    };
    let signal = signal::signal_named(&shared.settings.signal);
    // What the file holds, so that a failed write is retried.
    let mut written: Option<Arc<SliceView>> = None;
    loop {
        let slice = latest.borrow_and_update().clone();
        let is_fenced = *fenced.borrow_and_update();
        let effective = Delivered {
            slice: slice.map(|slice| {
                if is_fenced {
                    Arc::new(slice.without_jobs())
                } else {
                    slice
                }
            }),
            fenced: is_fenced,
        };
        let mut file_ok = true;
        // Before the first renewal (fenced from the start) there is no file
        // yet rather than a transient empty one.
        let starting = effective.fenced && written.is_none();
        if let (Some(path), Some(slice)) = (&shared.settings.slice_file, &effective.slice)
            && written.as_ref() != Some(slice)
            && !starting
        {
            file_ok = write_slice_file(&shared, path.clone(), slice.clone()).await;
            if file_ok {
                written = Some(slice.clone());
            }
        }
        let changed = shared.delivered.send_if_modified(|current| {
            if *current == effective {
                return false;
            }
            *current = effective.clone();
            true
        });
        if changed {
            let revision = effective.slice.as_ref().map_or(0, |slice| slice.revision);
            shared
                .metrics
                .slice_revision
                .set(i64::try_from(revision).unwrap_or(i64::MAX));
            shared.metrics.slice_jobs.set(effective.jobs().len() as i64);
            if let Some(target) = &signal_target {
                match signal::send(target, signal) {
                    Ok(count) => {
                        shared.metrics.signals_sent.inc_by(count as u64);
                    }
                    Err(error) => tracing::warn!(%error, "cannot signal the application"),
                }
            }
        }
        if shared.ack_mode == AckMode::OnApply
            && file_ok
            && !effective.fenced
            && let Some(slice) = &effective.slice
        {
            let target = slice.ack_target();
            shared.ack_target.send_if_modified(|current| {
                let differs = current.as_ref() != Some(&target);
                *current = Some(target.clone());
                differs
            });
        }
        let retry = async {
            if file_ok {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(Duration::from_secs(1)).await
            }
        };
        tokio::select! {
            changed = latest.changed() => if changed.is_err() { return },
            changed = fenced.changed() => if changed.is_err() { return },
            _ = retry => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

async fn write_slice_file(
    shared: &Shared,
    path: std::path::PathBuf,
    slice: Arc<SliceView>,
) -> bool {
    let shown = path.display().to_string();
    let document = match slice_doc::render(&slice) {
        Ok(document) => document,
        Err(error) => {
            // Cannot happen for a slice that parsed, but never write a wrong file.
            shared.metrics.file_write_errors.inc();
            tracing::error!(path = shown, %error, "cannot render the slice file");
            shared.set_status(|status| {
                status.file_error = Some(format!("cannot render {shown}: {error}"))
            });
            return false;
        }
    };
    let written = tokio::task::spawn_blocking(move || {
        atomic_file::replace_atomically(&path, document.as_bytes())
    })
    .await;
    let failure = match written {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(error) => Some(error.to_string()),
    };
    match failure {
        None => {
            shared.metrics.file_writes.inc();
            shared.set_status(|status| status.file_error = None);
            true
        }
        Some(error) => {
            shared.metrics.file_write_errors.inc();
            tracing::error!(path = shown, error, "cannot write the slice file; retrying");
            shared.set_status(|status| {
                status.file_error = Some(format!("cannot write {shown}: {error}"))
            });
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_by_default_starts_two_grace_seconds_before_the_margin() {
        let settings = Settings::for_member("pool-0", "team");
        // 15 s lease − 2 s margin − 2 s fenced grace: jobs are gone by 13 s.
        assert_eq!(settings.fence_after(), Duration::from_secs(11));
        assert!(validate(&settings).is_ok());
    }

    #[test]
    fn the_fenced_grace_never_exceeds_the_stop_grace() {
        let mut settings = Settings::for_member("pool-0", "team");
        settings.stop_grace = Duration::from_millis(300);
        assert_eq!(settings.fenced_stop_grace(), Duration::from_millis(300));
        assert_eq!(settings.fence_after(), Duration::from_millis(12_700));
    }

    #[test]
    fn a_fencing_window_that_would_fence_between_renewals_is_refused() {
        let mut settings = Settings::for_member("pool-0", "team");
        // 6 s lease: renewed every 2 s, and 2 s margin + 2 s grace leave
        // fencing due exactly when the next renewal is.
        settings.lease_duration = Duration::from_secs(6);
        let error = validate(&settings).expect_err("refused").to_string();
        assert!(error.contains("--fence-margin"), "{error}");
        assert!(error.contains("--fence-grace"), "{error}");
        assert!(error.contains("--lease-duration (6s)"), "{error}");
        settings.fence_grace = Duration::from_millis(500);
        assert!(validate(&settings).is_ok());
    }
}
