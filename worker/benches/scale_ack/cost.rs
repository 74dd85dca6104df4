//! What a scale event costs the API server: the requests the controller and
//! the sidecars made between the event's patch and the next event's (the API
//! server's request statistics), and the controller's own figures over the
//! same span (`/metrics`: `shoal_api_writes_total`, and
//! `shoal_reconcile_phase_seconds` when the controller has it).

use std::collections::BTreeMap;

use shoal_emulator::harness::process::metric_samples;
use shoal_emulator::{RequestCounts, RequestKey, RequestStats, RequestTally};

use crate::controller::{ControllerProcess, IDENTITY};

/// The sidecars' user at the API server.
pub const SIDECAR_IDENTITY: &str = "shoal-sidecar";

/// Counts taken at one moment, to subtract.
pub struct Probe {
    requests: RequestCounts,
    metrics: String,
}

impl Probe {
    pub async fn take(stats: &RequestStats, controller: &ControllerProcess) -> Probe {
        let metrics = controller.metrics().await;
        Probe {
            requests: stats.snapshot(),
            metrics,
        }
    }
}

/// One user's requests over an event.
#[derive(Clone, Copy, Default)]
pub struct ApiCost {
    /// create, update, patch, delete, deletecollection.
    pub writes: RequestTally,
    /// The writes of ConfigMaps (slices, index, history).
    pub config_map_writes: RequestTally,
    /// get and list.
    pub reads: RequestTally,
    /// Watches opened.
    pub watches: u64,
}

fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

impl ApiCost {
    fn of(counts: &RequestCounts, user: &str) -> ApiCost {
        let mine = |key: &RequestKey| key.user == user;
        ApiCost {
            writes: counts.total(|key| mine(key) && is_write(&key.verb)),
            config_map_writes: counts
                .total(|key| mine(key) && is_write(&key.verb) && key.resource == "configmaps"),
            reads: counts.total(|key| mine(key) && matches!(key.verb.as_str(), "get" | "list")),
            watches: counts
                .total(|key| mine(key) && key.verb == "watch")
                .requests,
        }
    }
}

/// Everything an event cost.
#[derive(Clone, Default)]
pub struct EventCost {
    pub controller: ApiCost,
    pub sidecars: ApiCost,
    /// The controller's requests by `verb resource`.
    pub controller_requests: BTreeMap<String, u64>,
    /// `shoal_api_writes_total` by kind: the controller's own count.
    pub counted_writes: BTreeMap<String, f64>,
    /// `shoal_reconcile_phase_seconds` by `kind/phase`: seconds and passes.
    pub phases: BTreeMap<String, (f64, f64)>,
}

impl EventCost {
    pub fn between(before: &Probe, after: &Probe) -> EventCost {
        let requests = after.requests.since(&before.requests);
        EventCost {
            controller: ApiCost::of(&requests, IDENTITY),
            sidecars: ApiCost::of(&requests, SIDECAR_IDENTITY),
            controller_requests: requests
                .iter()
                .filter(|(key, _)| key.user == IDENTITY)
                .map(|(key, tally)| (format!("{} {}", key.verb, key.resource), tally.requests))
                .collect(),
            counted_writes: metric_delta(before, after, "shoal_api_writes_total", &["kind"]),
            phases: phase_delta(before, after),
        }
    }
}

/// A metric's increase between the probes, by the values of `labels`
/// (joined with `/`).
fn metric_delta(
    before: &Probe,
    after: &Probe,
    name: &str,
    labels: &[&str],
) -> BTreeMap<String, f64> {
    let by_labels = |text: &str| -> BTreeMap<String, f64> {
        metric_samples(text, name)
            .into_iter()
            .map(|(values, value)| {
                let key: Vec<&str> = labels
                    .iter()
                    .map(|label| values.get(*label).map_or("", String::as_str))
                    .collect();
                (key.join("/"), value)
            })
            .collect()
    };
    let earlier = by_labels(&before.metrics);
    by_labels(&after.metrics)
        .into_iter()
        .map(|(key, value)| {
            let delta = value - earlier.get(&key).copied().unwrap_or(0.0);
            (key, delta)
        })
        .filter(|(_, delta)| *delta > 0.0)
        .collect()
}

/// `shoal_reconcile_phase_seconds` sum and count increases by `kind/phase`.
fn phase_delta(before: &Probe, after: &Probe) -> BTreeMap<String, (f64, f64)> {
    let labels = ["kind", "phase"];
    let seconds = metric_delta(before, after, "shoal_reconcile_phase_seconds_sum", &labels);
    let passes = metric_delta(
        before,
        after,
        "shoal_reconcile_phase_seconds_count",
        &labels,
    );
    passes
        .into_iter()
        .map(|(key, count)| {
            let sum = seconds.get(&key).copied().unwrap_or(0.0);
            (key, (sum, count))
        })
        .collect()
}
