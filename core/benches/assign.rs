//! Assignment throughput and memory: 1,000,000 keys over 1,000 members with
//! `bounded` (ε = 0), `jump` and `ring`, against a bare pass that only hashes
//! the same keys; then the diff of two 1M-key assignments (1,000 → 1,001
//! members).
//!
//! Run: `cargo bench -p shoal-core --bench assign`
//! (`-- --runs N` changes the repetition count, default 11; figures are
//! medians). Peak memory is read from `VmHWM` in /proc/self/status after
//! resetting it through /proc/self/clear_refs (Linux), since a counting
//! allocator would need `unsafe`, which the workspace forbids.

use std::hint::black_box;
use std::time::{Duration, Instant};

use shoal_core::hash::key_hash;
use shoal_core::member::pool_members;
use shoal_core::{JobSet, Strategy, assign, diff};

const KEYS: usize = 1_000_000;
const MEMBERS: u32 = 1_000;

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets the peak-RSS watermark; returns the current RSS in KiB.
fn reset_peak() -> Option<u64> {
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_kib("VmRSS:")
}

/// Peak RSS above `baseline` (KiB) since the last reset, in MiB.
fn peak_above(baseline: Option<u64>) -> String {
    match (baseline, status_kib("VmHWM:")) {
        (Some(base), Some(peak)) => format!("{:.1}", peak.saturating_sub(base) as f64 / 1024.0),
        _ => "n/a".to_owned(),
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn measure<T>(runs: usize, mut work: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                black_box(work());
                start.elapsed()
            })
            .collect(),
    )
}

fn report(label: &str, time: Duration, bare: Duration, memory: &str) {
    println!(
        "{label:<28} {:>10.1} ms {:>8.1} ns/key {:>7.2}x bare {:>9} MiB peak",
        time.as_secs_f64() * 1e3,
        time.as_secs_f64() * 1e9 / KEYS as f64,
        time.as_secs_f64() / bare.as_secs_f64(),
        memory
    );
}

fn main() {
    let runs = std::env::args()
        .skip_while(|arg| arg != "--runs")
        .nth(1)
        .and_then(|value| value.parse().ok())
        .unwrap_or(11usize);
    let jobs = JobSet::parse((0..KEYS).map(|i| format!("stream:{i}:updated")))
        .expect("generated keys are valid");
    let members = pool_members("worker", MEMBERS);
    println!("{KEYS} keys over {MEMBERS} members, median of {runs} runs");

    let bare = measure(runs, || {
        jobs.iter()
            .fold(0u64, |acc, key| acc ^ key_hash(key.as_bytes()))
    });
    report("bare hash pass", bare, bare, "-");

    for strategy in [
        Strategy::Bounded { epsilon: 0.0 },
        Strategy::Jump,
        Strategy::Ring { vnodes: 128 },
    ] {
        let time = measure(runs, || assign(&jobs, &members, &strategy));
        let baseline = reset_peak();
        let assignment = assign(&jobs, &members, &strategy).expect("members are available");
        let memory = peak_above(baseline);
        drop(assignment);
        report(&strategy.to_string(), time, bare, &memory);
    }

    let strategy = Strategy::default();
    let old = assign(&jobs, &members, &strategy).expect("members are available");
    let new = assign(&jobs, &pool_members("worker", MEMBERS + 1), &strategy)
        .expect("members are available");
    let time = measure(runs, || diff(&old, &new));
    let baseline = reset_peak();
    let change = diff(&old, &new);
    let memory = peak_above(baseline);
    report("diff 1000→1001 (bounded)", time, bare, &memory);
    println!(
        "  moved {} keys, lower bound {}, ratio {:.3}, affected members {}",
        change.moved.len(),
        change.lower_bound,
        change.movement_ratio().unwrap_or(f64::NAN),
        change.affected.len()
    );
}
