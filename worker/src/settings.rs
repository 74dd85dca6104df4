//! The sidecar's configuration: flags with environment fallbacks.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use shoal_core::log_format::LogFormat;

/// Everything the sidecar is told at start. Each flag has an environment
/// fallback so that a pod spec can configure it either way; identity comes
/// from the downward API (`POD_NAME`, `POD_NAMESPACE`).
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "shoal-worker", version, about = "Shoal's member sidecar")]
pub struct Settings {
    /// This member's pod name (downward API `metadata.name`).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: String,

    /// This member's namespace (downward API `metadata.namespace`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: String,

    /// This member's pod uid (downward API `metadata.uid`). The member Lease is then
    /// owned by the pod: it goes when the pod goes, and the controller takes its
    /// acknowledgements only for that very pod, not for a replacement of the same name.
    #[arg(long, env = "POD_UID")]
    pub pod_uid: Option<String>,

    /// Address of the localhost HTTP server (`/v1/slice`, `/v1/watch`,
    /// `/v1/ack`, `/healthz`, `/readyz`, `/metrics`). Port 0 picks a free port.
    #[arg(long, env = "SHOAL_LISTEN", default_value = "127.0.0.1:8765")]
    pub listen: SocketAddr,

    /// Address of the Prometheus listener (`/metrics` only), separate from the loopback
    /// slice API so that Prometheus can scrape it from outside the pod (a PodMonitor on
    /// the container port `metrics`) without reaching `/v1/ack`. Port 0 picks a free port.
    #[arg(long, env = "SHOAL_METRICS_ADDRESS", default_value = "0.0.0.0:9464")]
    pub metrics_address: Option<SocketAddr>,

    /// Log lines as `text` (coloured only on a terminal) or `json` (one object per
    /// line), on stderr. `RUST_LOG` sets the levels (default `info`).
    #[arg(long, env = "SHOAL_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Where to keep the slice (format v1) for the application; replaced
    /// atomically on every change. Usually in an `emptyDir` shared with the app.
    #[arg(long, env = "SHOAL_SLICE_FILE")]
    pub slice_file: Option<PathBuf>,

    /// Exec mode: run one process per owned job. `{job}` and `{member}` are
    /// replaced by the shell-quoted job key and pod name; the result runs
    /// under `sh -c` in its own process group, with `SHOAL_JOB`,
    /// `SHOAL_MEMBER` and `SHOAL_REVISION` in its environment.
    #[arg(long, env = "SHOAL_EXEC")]
    pub exec: Option<String>,

    /// Exec mode for plan instances: run one process per instance in the
    /// slice. `{instance}`, `{plan}` and `{member}` are replaced shell-quoted;
    /// the environment carries `SHOAL_INSTANCE`, `SHOAL_PLAN`,
    /// `SHOAL_DEPLOYMENT`, `SHOAL_MEMBER`, `SHOAL_PORTS` (the ports of its
    /// applications, e.g. `TCP/80,UDP/53`; empty when none) and every
    /// coordinate as `SHOAL_<APPLICATION>_<KEY>`. A changed deployment,
    /// coordinates or ports restart the process; one that exits non-zero is
    /// reported `failed` and not restarted until one of them changes.
    #[arg(long, env = "SHOAL_EXEC_INSTANCE")]
    pub exec_instance: Option<String>,

    /// How long an instance's process must run before it is reported
    /// `installed` (it is `installing` until then).
    #[arg(long, env = "SHOAL_INSTANCE_SETTLE", default_value = "2s", value_parser = shoal_core::duration::parse_flag)]
    pub instance_settle: Duration,

    /// Exec mode: how long a revoked job's process may take to exit after
    /// SIGTERM before it gets SIGKILL.
    #[arg(long, env = "SHOAL_STOP_GRACE", default_value = "10s", value_parser = shoal_core::duration::parse_flag)]
    pub stop_grace: Duration,

    /// Exec mode: first delay before restarting a crashed process; doubles
    /// with each consecutive crash.
    #[arg(long, env = "SHOAL_RESTART_BACKOFF", default_value = "1s", value_parser = shoal_core::duration::parse_flag)]
    pub restart_backoff: Duration,

    /// Exec mode: the longest delay between restarts of a crashing process.
    #[arg(long, env = "SHOAL_RESTART_BACKOFF_MAX", default_value = "1m", value_parser = shoal_core::duration::parse_flag)]
    pub restart_backoff_max: Duration,

    /// File/HTTP mode: acknowledge a revision as soon as it is delivered,
    /// instead of waiting for the application's `POST /v1/ack`. Exec mode
    /// always acknowledges after its processes follow the slice.
    #[arg(long, env = "SHOAL_ACK_ON_APPLY")]
    pub ack_on_apply: bool,

    /// Duration of the member Lease (`leaseDurationSeconds`); renewed every
    /// third of it.
    #[arg(long, env = "SHOAL_LEASE_DURATION", default_value = "15s", value_parser = shoal_core::duration::parse_flag)]
    pub lease_duration: Duration,

    /// Clock-skew margin for self-fencing: the sidecar stops every job when
    /// it could not renew by `last renewal + lease duration - margin`, i.e.
    /// this long before the controller may see the Lease as expired. It must
    /// exceed the worst clock skew between this node and the controller's.
    #[arg(long, env = "SHOAL_FENCE_MARGIN", default_value = "2s", value_parser = shoal_core::duration::parse_flag)]
    pub fence_margin: Duration,

    /// SIGTERM → SIGKILL grace for jobs stopped by self-fencing (exec mode;
    /// at most `--stop-grace`). Fencing starts this long before the fencing
    /// deadline (last renewal, plus lease duration, minus margin), so that
    /// every job process is gone — not merely signalled — by then.
    #[arg(long, env = "SHOAL_FENCE_GRACE", default_value = "2s", value_parser = shoal_core::duration::parse_flag)]
    pub fence_grace: Duration,

    /// Signal the application after each change: a file holding its pid.
    #[arg(
        long,
        env = "SHOAL_SIGNAL_PID_FILE",
        conflicts_with = "signal_process_name"
    )]
    pub signal_pid_file: Option<PathBuf>,

    /// Signal the application after each change: every process whose
    /// `/proc/<pid>/comm` is this name (needs `shareProcessNamespace: true`).
    #[arg(long, env = "SHOAL_SIGNAL_PROCESS_NAME")]
    pub signal_process_name: Option<String>,

    /// The signal to send: HUP, USR1, USR2, INT or TERM.
    #[arg(long, env = "SHOAL_SIGNAL", default_value = "HUP", value_parser = parse_signal_name)]
    pub signal: String,
}

impl Settings {
    /// Settings for a member with defaults for everything else: no file, no
    /// exec, HTTP on a free localhost port, no separate metrics listener (the
    /// loopback one serves `/metrics` too). Convenient for tests and embedding.
    pub fn for_member(pod_name: impl Into<String>, pod_namespace: impl Into<String>) -> Settings {
        Settings {
            pod_name: pod_name.into(),
            pod_namespace: pod_namespace.into(),
            pod_uid: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics_address: None,
            log_format: LogFormat::Text,
            slice_file: None,
            exec: None,
            exec_instance: None,
            instance_settle: Duration::from_secs(2),
            stop_grace: Duration::from_secs(10),
            restart_backoff: Duration::from_secs(1),
            restart_backoff_max: Duration::from_secs(60),
            ack_on_apply: false,
            lease_duration: Duration::from_secs(15),
            fence_margin: Duration::from_secs(2),
            fence_grace: Duration::from_secs(2),
            signal_pid_file: None,
            signal_process_name: None,
            signal: "HUP".to_string(),
        }
    }

    /// How often the Lease is renewed: a third of its duration.
    pub fn renew_interval(&self) -> Duration {
        self.lease_duration / 3
    }

    /// The grace a job stopped by self-fencing gets: `--fence-grace`, never
    /// more than `--stop-grace`.
    pub fn fenced_stop_grace(&self) -> Duration {
        self.fence_grace.min(self.stop_grace)
    }

    /// How long after sending the last successful renewal the sidecar starts
    /// fencing: `lease duration - margin - fenced stop grace`, so that its
    /// processes are killed by `lease duration - margin` at the latest.
    pub fn fence_after(&self) -> Duration {
        self.lease_duration
            .saturating_sub(self.fence_margin)
            .saturating_sub(self.fenced_stop_grace())
    }
}

/// Accepts the signal names the sidecar knows how to send.
pub fn parse_signal_name(text: &str) -> Result<String, String> {
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper).to_string();
    match name.as_str() {
        "HUP" | "USR1" | "USR2" | "INT" | "TERM" => Ok(name),
        _ => Err(format!(
            "signal {text:?} is not one of HUP, USR1, USR2, INT, TERM"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn duration_flags_take_the_shared_syntax_and_a_bad_one_is_refused_naming_it() {
        let parse = |grace: &str| {
            Settings::try_parse_from([
                "shoal-worker",
                "--pod-name",
                "pool-0",
                "--pod-namespace",
                "default",
                "--stop-grace",
                grace,
            ])
        };
        assert_eq!(parse("1m30s").unwrap().stop_grace, Duration::from_secs(90));
        assert_eq!(parse("7").unwrap().stop_grace, Duration::from_secs(7));
        let refused = parse("fast").unwrap_err().to_string();
        assert!(
            refused.contains("--stop-grace") && refused.contains("\"fast\""),
            "{refused}"
        );
        let refused = parse("99999999999999999999m").unwrap_err().to_string();
        assert!(refused.contains("is not a duration"), "{refused}");
    }

    #[test]
    fn signal_names_are_normalised_and_unknown_ones_refused() {
        assert_eq!(parse_signal_name("sigusr1"), Ok("USR1".to_string()));
        assert!(parse_signal_name("KILL").is_err());
    }

    #[test]
    fn flags_parse_with_defaults() {
        let settings = Settings::try_parse_from([
            "shoal-worker",
            "--pod-name",
            "pool-0",
            "--pod-namespace",
            "default",
            "--exec",
            "consumer --stream {job}",
            "--stop-grace",
            "3s",
        ])
        .unwrap();
        assert_eq!(settings.pod_name, "pool-0");
        assert_eq!(settings.exec.as_deref(), Some("consumer --stream {job}"));
        assert_eq!(settings.stop_grace, Duration::from_secs(3));
        assert_eq!(settings.lease_duration, Duration::from_secs(15));
        assert_eq!(settings.renew_interval(), Duration::from_secs(5));
        assert!(!settings.ack_on_apply);
        assert_eq!(
            settings.metrics_address,
            Some(SocketAddr::from(([0, 0, 0, 0], 9464)))
        );
        assert_eq!(settings.log_format, LogFormat::Text);
    }

    #[test]
    fn both_signal_targets_at_once_are_refused() {
        let parsed = Settings::try_parse_from([
            "shoal-worker",
            "--pod-name",
            "p-0",
            "--pod-namespace",
            "ns",
            "--signal-pid-file",
            "/run/app.pid",
            "--signal-process-name",
            "app",
        ]);
        assert!(parsed.is_err());
    }
}
