//! The figures: per direction of scale (e.g. 100 → 101), over every event of
//! that direction.

use std::collections::BTreeMap;
use std::time::Duration;

use shoal_emulator::RequestTally;

use crate::cost::{ApiCost, EventCost};

/// What one scale event took and cost.
pub struct EventFigures {
    /// Patch → every member's Lease acknowledges its slice.
    pub all_acked: Duration,
    /// Patch → the Swarm's status says the revision is in force.
    pub in_force: Duration,
    /// Patch → the new pod Ready, or the removed pod marked for deletion.
    pub pod: Option<Duration>,
    /// Patch → the controller's first and last slice write, as watched.
    pub first_write: Option<Duration>,
    pub last_write: Option<Duration>,
    /// Members whose slice changed (changed, added or removed).
    pub slices_changed: usize,
    /// Set once the next event starts (its span ends there).
    pub cost: Option<EventCost>,
}

/// The events of one direction.
pub struct Direction {
    pub from: usize,
    pub to: usize,
    pub events: Vec<EventFigures>,
}

fn percentile<T: Copy + Ord>(sorted: &[T], fraction: f64) -> T {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(duration: Duration) -> String {
    format!("{:.0} ms", duration.as_secs_f64() * 1000.0)
}

/// `p50=… p95=… max=…` of some durations.
fn spread(mut samples: Vec<Duration>) -> String {
    if samples.is_empty() {
        return "not observed".to_owned();
    }
    samples.sort();
    format!(
        "n={} p50={} p95={} max={}",
        samples.len(),
        ms(percentile(&samples, 0.50)),
        ms(percentile(&samples, 0.95)),
        ms(samples[samples.len() - 1]),
    )
}

fn p50(samples: impl Iterator<Item = Duration>) -> String {
    let mut samples: Vec<Duration> = samples.collect();
    if samples.is_empty() {
        return "-".to_owned();
    }
    samples.sort();
    ms(percentile(&samples, 0.50))
}

/// `p50 / max` of per-event counts.
fn p50_max(samples: impl Iterator<Item = u64>) -> String {
    let mut samples: Vec<u64> = samples.collect();
    if samples.is_empty() {
        return "-".to_owned();
    }
    samples.sort_unstable();
    format!(
        "{} / {}",
        percentile(&samples, 0.50),
        samples[samples.len() - 1]
    )
}

fn kib(bytes: u64) -> String {
    format!("{:.0} KiB", bytes as f64 / 1024.0)
}

impl Direction {
    pub fn print(&self) {
        let events = &self.events;
        println!(
            "scale {} → {}: patch → every member's Lease acks its slice: {}",
            self.from,
            self.to,
            spread(events.iter().map(|event| event.all_acked).collect())
        );
        let pod = if self.to > self.from {
            "new pod Ready"
        } else {
            "removed pod marked for deletion"
        };
        println!(
            "  breakdown p50: patch → {pod} {} → first slice written {} → last slice written {} → every ack {} → Swarm Ready seen {}",
            p50(events.iter().filter_map(|event| event.pod)),
            p50(events.iter().filter_map(|event| event.first_write)),
            p50(events.iter().filter_map(|event| event.last_write)),
            p50(events.iter().map(|event| event.all_acked)),
            p50(events.iter().map(|event| event.in_force)),
        );
        let costs: Vec<&EventCost> = events
            .iter()
            .filter_map(|event| event.cost.as_ref())
            .collect();
        let changed = p50_max(events.iter().map(|event| event.slices_changed as u64));
        println!("  members whose slice changed (p50 / max): {changed}");
        print_api_cost("controller", costs.iter().map(|cost| &cost.controller));
        print_api_cost("sidecars (all)", costs.iter().map(|cost| &cost.sidecars));
        print_controller_requests(&costs);
        print_counted_writes(&costs);
        print_phases(&costs);
    }
}

/// A user's requests per event, p50 / max.
fn print_api_cost<'a>(who: &str, costs: impl Iterator<Item = &'a ApiCost> + Clone) {
    let requests = |pick: fn(&ApiCost) -> RequestTally| {
        p50_max(costs.clone().map(move |cost| pick(cost).requests))
    };
    let bytes = |pick: fn(&ApiCost) -> u64| {
        let mut samples: Vec<u64> = costs.clone().map(pick).collect();
        samples.sort_unstable();
        match samples.as_slice() {
            [] => "-".to_owned(),
            all => format!(
                "{} / {}",
                kib(percentile(all, 0.5)),
                kib(all[all.len() - 1])
            ),
        }
    };
    println!(
        "  {who} API requests per event (p50 / max): writes {} ({} sent), of which ConfigMaps {} ({}); reads {} ({} answered); watches opened {}",
        requests(|cost| cost.writes),
        bytes(|cost| cost.writes.body_bytes),
        requests(|cost| cost.config_map_writes),
        bytes(|cost| cost.config_map_writes.body_bytes),
        requests(|cost| cost.reads),
        bytes(|cost| cost.reads.response_bytes),
        p50_max(costs.clone().map(|cost| cost.watches)),
    );
}

/// The controller's requests per event by verb and resource, p50 / max,
/// the most frequent first: where its reads and writes go.
fn print_controller_requests(costs: &[&EventCost]) {
    let mut by_request: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for cost in costs {
        for (request, count) in &cost.controller_requests {
            by_request.entry(request).or_default().push(*count);
        }
    }
    let mut rows: Vec<(u64, String)> = by_request
        .into_iter()
        .map(|(request, mut counts)| {
            counts.resize(costs.len().max(counts.len()), 0);
            counts.sort_unstable();
            let line = format!("{request} {}", p50_max(counts.iter().copied()));
            (percentile(&counts, 0.5), line)
        })
        .collect();
    rows.sort_by(|left, right| right.0.cmp(&left.0).then_with(|| left.1.cmp(&right.1)));
    let rows: Vec<String> = rows.into_iter().map(|(_, line)| line).collect();
    println!(
        "  controller requests per event by verb and resource (p50 / max): {}",
        rows.join(", ")
    );
}

/// The controller's own write count per event by kind, p50.
fn print_counted_writes(costs: &[&EventCost]) {
    let mut by_kind: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for cost in costs {
        for (kind, count) in &cost.counted_writes {
            by_kind.entry(kind).or_default().push(*count as u64);
        }
    }
    let line: Vec<String> = by_kind
        .into_iter()
        .map(|(kind, counts)| format!("{kind} {}", p50_max_padded(counts, costs.len())))
        .collect();
    println!(
        "  controller's shoal_api_writes_total per event (p50 / max): {}",
        line.join(", ")
    );
}

/// `p50 / max` over `events` events, counting an event missing from
/// `counts` as zero.
fn p50_max_padded(mut counts: Vec<u64>, events: usize) -> String {
    counts.resize(events.max(counts.len()), 0);
    p50_max(counts.into_iter())
}

/// `shoal_reconcile_phase_seconds` per event by kind and phase: p50 of the
/// seconds spent and of the passes, when the controller has the metric.
fn print_phases(costs: &[&EventCost]) {
    let mut by_phase: BTreeMap<&str, (Vec<Duration>, Vec<u64>)> = BTreeMap::new();
    for cost in costs {
        for (phase, (seconds, passes)) in &cost.phases {
            let entry = by_phase.entry(phase).or_default();
            entry.0.push(Duration::from_secs_f64(seconds.max(0.0)));
            entry.1.push(*passes as u64);
        }
    }
    if by_phase.is_empty() {
        println!("  reconcile phases: no shoal_reconcile_phase_seconds on /metrics");
        return;
    }
    let line: Vec<String> = by_phase
        .into_iter()
        .map(|(phase, (mut seconds, mut passes))| {
            seconds.resize(costs.len().max(seconds.len()), Duration::ZERO);
            passes.resize(costs.len().max(passes.len()), 0);
            format!(
                "{phase} {} in {} passes",
                p50(seconds.into_iter()),
                p50_max(passes.into_iter())
            )
        })
        .collect();
    println!(
        "  reconcile phases per event (p50 time, passes p50 / max): {}",
        line.join("; ")
    );
}
