//! Assignment throughput and memory: 1,000,000 keys over 1,000 members with
//! `bounded` (ε = 0), `jump`, `ring` and `sticky` (first assignment), against
//! a bare pass that only hashes the same keys; `sticky`'s re-assignment steps
//! from the assignment in force (nothing changed; 1,000 → 1,001 members; one
//! job added); then the diff of two 1M-key assignments (1,000 → 1,001
//! members); and the weighted `sticky` step 1,000 → 1,001 with every job
//! weighing 1 to 10.
//!
//! Run: `cargo bench -p shoal-core --bench assign`
//! (`-- --runs N` changes the repetition count, default 11; figures are
//! medians). Peak memory: a counting allocator would need `unsafe`, which
//! the workspace forbids, so each figure runs in a fresh child process of
//! this binary: it builds the inputs, resets the peak-RSS watermark
//! (`/proc/self/clear_refs`), runs the workload once and reports `VmHWM`
//! minus the RSS it had before (Linux). Memory the allocator kept from
//! building the inputs can be reused, so this is the *additional* resident
//! memory the workload needed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use shoal_core::diff::moved_weight;
use shoal_core::hash::key_hash;
use shoal_core::member::pool_members;
use shoal_core::{
    JobSet, JobSetting, JobSettings, Strategy, assign, diff, reassign, reassign_weighted,
};

const KEYS: usize = 1_000_000;
const MEMBERS: u32 = 1_000;

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets the peak-RSS watermark and returns the current RSS (KiB).
fn reset_peak() -> Option<u64> {
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_kib("VmRSS:")
}

fn generated_jobs() -> JobSet {
    JobSet::parse((0..KEYS).map(|i| format!("stream:{i}:updated")))
        .expect("generated keys are valid")
}

/// Child mode: build the inputs, run one workload, print the peak RSS.
fn child(workload: &str) {
    let jobs = generated_jobs();
    let members = pool_members("worker", MEMBERS);
    let strategy = Strategy::default();
    let mut before = reset_peak();
    match workload {
        "bounded" => drop(black_box(assign(&jobs, &members, &strategy))),
        "jump" => drop(black_box(assign(&jobs, &members, &Strategy::Jump))),
        "ring" => drop(black_box(assign(
            &jobs,
            &members,
            &Strategy::Ring { vnodes: 128 },
        ))),
        "sticky" => drop(black_box(assign(&jobs, &members, &Strategy::Sticky))),
        "sticky-step" => {
            let in_force =
                assign(&jobs, &members, &Strategy::Sticky).expect("members are available");
            let grown = pool_members("worker", MEMBERS + 1);
            before = reset_peak();
            drop(black_box(reassign(
                Some(&in_force),
                &jobs,
                &grown,
                &Strategy::Sticky,
            )));
        }
        "diff" => {
            let old = assign(&jobs, &members, &strategy).expect("members are available");
            let new = assign(&jobs, &pool_members("worker", MEMBERS + 1), &strategy)
                .expect("members are available");
            before = reset_peak();
            drop(black_box(diff(&old, &new)));
        }
        "hash" => {
            let hashes: Vec<u64> = jobs.iter().map(|key| key_hash(key.as_bytes())).collect();
            drop(black_box(hashes));
        }
        _ => {}
    }
    match (before, status_kib("VmHWM:")) {
        (Some(before), Some(peak)) => println!("{}", peak.saturating_sub(before)),
        _ => println!("n/a"),
    }
}

/// Additional peak RSS (MiB) of a child running `workload` once.
fn peak_mib(workload: &str) -> String {
    let kib: Option<u64> = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            std::process::Command::new(exe)
                .args(["--child", workload])
                .output()
                .ok()
        })
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.trim().parse().ok());
    kib.map_or_else(
        || "n/a".to_owned(),
        |kib| format!("{:.1}", kib as f64 / 1024.0),
    )
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
    let arguments: Vec<String> = std::env::args().collect();
    if let Some(position) = arguments.iter().position(|arg| arg == "--child") {
        child(arguments.get(position + 1).map_or("", String::as_str));
        return;
    }
    let runs = std::env::args()
        .skip_while(|arg| arg != "--runs")
        .nth(1)
        .and_then(|value| value.parse().ok())
        .unwrap_or(11usize);
    let jobs = generated_jobs();
    let members = pool_members("worker", MEMBERS);
    println!("{KEYS} keys over {MEMBERS} members, median of {runs} runs");

    let bare = measure(runs, || {
        jobs.iter()
            .fold(0u64, |acc, key| acc ^ key_hash(key.as_bytes()))
    });
    report("bare hash pass", bare, bare, &peak_mib("hash"));

    for (strategy, workload) in [
        (Strategy::Bounded { epsilon: 0.0 }, "bounded"),
        (Strategy::Jump, "jump"),
        (Strategy::Ring { vnodes: 128 }, "ring"),
        (Strategy::Sticky, "sticky"),
    ] {
        let time = measure(runs, || assign(&jobs, &members, &strategy));
        report(&strategy.to_string(), time, bare, &peak_mib(workload));
    }

    // Sticky re-assignment steps: what the controller runs on every pass.
    let in_force = assign(&jobs, &members, &Strategy::Sticky).expect("members are available");
    let grown = pool_members("worker", MEMBERS + 1);
    let with_extra = JobSet::parse(
        jobs.iter()
            .map(ToString::to_string)
            .chain(["stream:an-added-job:new".to_owned()]),
    )
    .expect("generated keys are valid");
    let step = |jobs: &JobSet, members: &[shoal_core::Member]| {
        reassign(Some(&in_force), jobs, members, &Strategy::Sticky)
    };
    let time = measure(runs, || step(&jobs, &members));
    report("sticky step, no change", time, bare, "-");
    let time = measure(runs, || step(&jobs, &grown));
    report(
        "sticky step 1000→1001",
        time,
        bare,
        &peak_mib("sticky-step"),
    );
    let time = measure(runs, || step(&with_extra, &members));
    report("sticky step +1 job", time, bare, "-");
    let change = diff(
        &in_force,
        &step(&jobs, &grown).expect("members are available"),
    );
    println!(
        "  1000→1001: moved {} keys, lower bound {}, affected members {}",
        change.moved.len(),
        change.lower_bound,
        change.affected.len()
    );

    // Weighted sticky: every job weighs 1..=10 (from its hash), 1,000 → 1,001 members.
    let mut settings = JobSettings::new();
    for key in &jobs {
        let weight = 1 + (key_hash(key.as_bytes()) % 10) as u32;
        settings
            .insert(
                key.clone(),
                JobSetting {
                    weight,
                    dedicated: false,
                },
            )
            .expect("weights 1..=10 are valid");
    }
    let weighted_step = |in_force: Option<&shoal_core::Assignment>,
                         members: &[shoal_core::Member]| {
        reassign_weighted(in_force, &jobs, &settings, members, &Strategy::Sticky)
            .expect("members are available")
    };
    let weighted_in_force = weighted_step(None, &members);
    let time = measure(runs, || weighted_step(Some(&weighted_in_force), &grown));
    report("weighted sticky step 1000→1001", time, bare, "-");
    let change = diff(
        &weighted_in_force,
        &weighted_step(Some(&weighted_in_force), &grown),
    );
    println!(
        "  weights 1..=10, total {}: moved {} keys, weight {} (the new member's share is {:.0})",
        settings.total_weight(&jobs),
        change.moved.len(),
        moved_weight(&change, &settings),
        settings.total_weight(&jobs) as f64 / f64::from(MEMBERS + 1)
    );

    let strategy = Strategy::default();
    let old = assign(&jobs, &members, &strategy).expect("members are available");
    let new = assign(&jobs, &pool_members("worker", MEMBERS + 1), &strategy)
        .expect("members are available");
    let time = measure(runs, || diff(&old, &new));
    let change = diff(&old, &new);
    report("diff 1000→1001 (bounded)", time, bare, &peak_mib("diff"));
    println!(
        "  moved {} keys, lower bound {}, ratio {:.3}, affected members {}",
        change.moved.len(),
        change.lower_bound,
        change.movement_ratio().unwrap_or(f64::NAN),
        change.affected.len()
    );
}
