//! A process under measurement, as benches run the controller: in its own
//! process, so that its memory is its own ([`memory_of`]: `VmHWM`, the peak
//! resident set, from `/proc/<pid>/status`), with its `/metrics` read over
//! HTTP ([`scrape_metrics`], [`metric_samples`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::HarnessError;

/// A process's resident memory, in KiB, as `/proc/<pid>/status` reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// `VmHWM`: the peak resident set so far.
    pub peak_kib: u64,
    /// `VmRSS`: the resident set now.
    pub resident_kib: u64,
}

impl Memory {
    /// The peak in MiB.
    pub fn peak_mib(&self) -> f64 {
        self.peak_kib as f64 / 1024.0
    }

    /// The resident set in MiB.
    pub fn resident_mib(&self) -> f64 {
        self.resident_kib as f64 / 1024.0
    }
}

/// The memory of process `pid` now (`None` when it is gone or this is not
/// Linux).
pub fn memory_of(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_memory(&status)
}

/// `VmHWM` and `VmRSS` of a `/proc/<pid>/status` text.
fn parse_memory(status: &str) -> Option<Memory> {
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(Memory {
        peak_kib: field("VmHWM:")?,
        resident_kib: field("VmRSS:")?,
    })
}

/// A free port on 127.0.0.1 (for a child's `--metrics-address`). The port is
/// free when this returns; another process could take it before the child
/// binds it, which on a test machine does not happen in practice.
pub fn free_local_address() -> Result<SocketAddr, HarnessError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|probe| probe.local_addr())
        .map_err(|error| HarnessError::Timeout {
            what: "a free local port".to_owned(),
            timeout: Duration::ZERO,
            last_seen: error.to_string(),
        })
}

/// The `/metrics` text served at `address`, retried every 100 ms for at most
/// `timeout` (a process just started may not serve yet).
pub async fn scrape_metrics(
    address: SocketAddr,
    timeout: Duration,
) -> Result<String, HarnessError> {
    let deadline = Instant::now() + timeout;
    loop {
        let last_seen = match crate::http_client::get(address, "/metrics").await {
            Ok(response) if response.status == 200 => return Ok(response.body),
            Ok(response) => format!("status {}", response.status),
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(HarnessError::Timeout {
                what: format!("/metrics at {address}"),
                timeout,
                last_seen,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Label values of one sample, by label name.
pub type Labels = BTreeMap<String, String>;

/// Every sample of metric `name` in a Prometheus or OpenMetrics text, with its
/// labels: `name{kind="ConfigMap"} 3` gives `({kind: ConfigMap}, 3.0)`. Only
/// lines naming exactly `name` count (ask for `x_sum` or `x_count` to read a
/// histogram's); comments and unparsable values are skipped.
pub fn metric_samples(text: &str, name: &str) -> Vec<(Labels, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(inner) => {
                    let (labels, value) = inner.split_once('}')?;
                    (parse_labels(labels), value)
                }
                None if rest.starts_with(' ') => (Labels::new(), rest),
                None => return None,
            };
            let value = value.split_whitespace().next()?.parse().ok()?;
            Some((labels, value))
        })
        .collect()
}

/// `a="x",b="y"` (values without escaped quotes, as Shoal's labels are).
fn parse_labels(text: &str) -> Labels {
    text.split(',')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let value = value.trim().strip_prefix('"')?.strip_suffix('"')?;
            Some((name.trim().to_owned(), value.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_the_peak_and_resident_lines() {
        let status = "Name:\tshoal\nVmPeak:\t  900 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\n";
        let memory = parse_memory(status).expect("both lines");
        assert_eq!(
            memory,
            Memory {
                peak_kib: 51_200,
                resident_kib: 40_960
            }
        );
        assert_eq!(memory.peak_mib(), 50.0);
        assert_eq!(parse_memory("Name:\tshoal\n"), None);
    }

    #[test]
    fn this_process_has_a_peak_at_least_its_resident_set() {
        let memory = memory_of(std::process::id()).expect("/proc on Linux");
        assert!(memory.peak_kib >= memory.resident_kib && memory.resident_kib > 0);
    }

    #[test]
    fn samples_carry_their_labels_and_only_the_named_metric_counts() {
        let text = "# TYPE shoal_api_writes counter\n\
                    shoal_api_writes_total{kind=\"ConfigMap\"} 12\n\
                    shoal_api_writes_total{kind=\"Swarm\"} 3.0\n\
                    shoal_api_writes_total_other 9\n\
                    shoal_phase_seconds_sum{kind=\"swarm\",phase=\"observe\"} 0.25\n\
                    shoal_up 1\n";
        let writes = metric_samples(text, "shoal_api_writes_total");
        let kinds: Vec<(String, f64)> = writes
            .iter()
            .map(|(labels, value)| (labels["kind"].clone(), *value))
            .collect();
        assert_eq!(
            kinds,
            vec![("ConfigMap".to_owned(), 12.0), ("Swarm".to_owned(), 3.0)]
        );
        let phases = metric_samples(text, "shoal_phase_seconds_sum");
        assert_eq!(phases.len(), 1);
        assert_eq!(phases[0].0["phase"], "observe");
        assert_eq!(phases[0].1, 0.25);
        assert_eq!(metric_samples(text, "shoal_up"), vec![(Labels::new(), 1.0)]);
    }
}
