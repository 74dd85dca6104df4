//! Prometheus metrics of the sidecar, served on `/metrics`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Every metric the sidecar exports (prefix `shoal_worker_`).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Revision of the slice in force.
    pub slice_revision: Gauge,
    /// Jobs in the delivered slice.
    pub slice_jobs: Gauge,
    /// Slices accepted from the API.
    pub slice_updates: Counter,
    /// Slice ConfigMaps rejected as malformed (the last good one stays).
    pub slice_rejected: Counter,
    /// 1 while the newest slice ConfigMap seen is rejected.
    pub slice_rejected_current: Gauge,
    /// Errors of the slice watch (it resumes with backoff).
    pub watch_errors: Counter,
    /// Atomic replacements of the slice file.
    pub file_writes: Counter,
    /// Failed writes of the slice file.
    pub file_write_errors: Counter,
    /// Revision last acknowledged on the Lease.
    pub acked_revision: Gauge,
    /// Successful Lease renewals.
    pub lease_renewals: Counter,
    /// Failed Lease renewals.
    pub lease_renew_errors: Counter,
    /// 1 while self-fenced (not ready, running nothing).
    pub fenced: Gauge,
    /// Times the sidecar fenced itself.
    pub fencings: Counter,
    /// Exec mode: processes supervised now.
    pub exec_processes: Gauge,
    /// Exec mode: processes that exited while their job was owned.
    pub exec_crashes: Counter,
    /// Exec mode: restarts after a crash.
    pub exec_restarts: Counter,
    /// Signals sent to the application.
    pub signals_sent: Counter,
}

impl Metrics {
    /// A registry holding all metrics.
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix("shoal_worker");
        registry.register(
            "slice_revision",
            "Revision of the slice in force",
            self.slice_revision.clone(),
        );
        registry.register(
            "slice_jobs",
            "Jobs in the delivered slice",
            self.slice_jobs.clone(),
        );
        registry.register(
            "slice_updates",
            "Slices accepted from the API",
            self.slice_updates.clone(),
        );
        registry.register(
            "slice_rejected",
            "Slice ConfigMaps rejected as malformed",
            self.slice_rejected.clone(),
        );
        registry.register(
            "slice_rejected_current",
            "1 while the newest slice ConfigMap seen is rejected",
            self.slice_rejected_current.clone(),
        );
        registry.register(
            "watch_errors",
            "Errors of the slice watch",
            self.watch_errors.clone(),
        );
        registry.register(
            "file_writes",
            "Atomic replacements of the slice file",
            self.file_writes.clone(),
        );
        registry.register(
            "file_write_errors",
            "Failed writes of the slice file",
            self.file_write_errors.clone(),
        );
        registry.register(
            "acked_revision",
            "Revision last acknowledged on the Lease",
            self.acked_revision.clone(),
        );
        registry.register(
            "lease_renewals",
            "Successful Lease renewals",
            self.lease_renewals.clone(),
        );
        registry.register(
            "lease_renew_errors",
            "Failed Lease renewals",
            self.lease_renew_errors.clone(),
        );
        registry.register("fenced", "1 while self-fenced", self.fenced.clone());
        registry.register(
            "fencings",
            "Times the sidecar fenced itself",
            self.fencings.clone(),
        );
        registry.register(
            "exec_processes",
            "Exec mode: processes supervised now",
            self.exec_processes.clone(),
        );
        registry.register(
            "exec_crashes",
            "Exec mode: processes that exited while owned",
            self.exec_crashes.clone(),
        );
        registry.register(
            "exec_restarts",
            "Exec mode: restarts after a crash",
            self.exec_restarts.clone(),
        );
        registry.register(
            "signals_sent",
            "Signals sent to the application",
            self.signals_sent.clone(),
        );
        registry
    }

    /// The metrics as OpenMetrics text; `/metrics` serves them in the format the scraper
    /// asks for (`shoal_core::exposition`).
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry())?;
        Ok(text)
    }
}
