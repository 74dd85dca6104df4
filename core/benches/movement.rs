//! Movement sweep: for each strategy, k ∈ {27, 1 000, 10 000, 100 000,
//! 1 000 000} jobs and n ∈ {2, …, 1 000} members, five changes from the
//! assignment at n: n → n+1, n → n−1, one job added, one job removed, and the
//! middle member (ordinal n/2) failing over. Each change is computed as the
//! controller does, from the assignment in force ([`reassign`]; only `sticky`
//! reads it).
//!
//! Per (strategy, k, change), over the n values:
//! * "ratio" = moved / LB, median and max, where LB =
//!   `lower_bound(old, new, floor(k/n'), ceil(k/n'))` is the least movement of
//!   any *perfectly balanced* assignment (see `shoal_core::diff`). Steps with
//!   LB = 0 (most job additions) have no ratio; "moved" shows them.
//!   Jump and ring are not balanced, so their ratio can be below 1.
//! * "moved" = jobs present before and after whose owner changed, median/max.
//! * "balanced" = steps whose result has every load in [floor, ceil].
//!
//! Run: `cargo bench -p shoal-core --bench movement`
//! (`-- --quick` restricts to k ≤ 10 000).

use shoal_core::diff::lower_bound;
use shoal_core::member::pool_members;
use shoal_core::{Assignment, JobSet, Member, Strategy, assign, diff, reassign};

const NS: [u32; 12] = [2, 3, 4, 8, 16, 32, 64, 128, 256, 500, 999, 1000];

fn jobs(count: usize) -> JobSet {
    if count == shoal_core::seed::SEED_STREAMS.len() {
        return JobSet::parse(shoal_core::seed::SEED_STREAMS).expect("seed streams are valid");
    }
    JobSet::parse((0..count).map(|i| format!("stream:{i}:updated")))
        .expect("generated keys are valid")
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// One change to a swarm of `n` members and the jobs `base`.
#[derive(Clone, Copy)]
enum Change {
    Grow,
    Shrink,
    AddJob,
    RemoveJob,
    MiddleFails,
}

impl Change {
    const ALL: [Change; 5] = [
        Change::Grow,
        Change::Shrink,
        Change::AddJob,
        Change::RemoveJob,
        Change::MiddleFails,
    ];

    fn label(self) -> &'static str {
        match self {
            Change::Grow => "n→n+1",
            Change::Shrink => "n→n−1",
            Change::AddJob => "+1 job",
            Change::RemoveJob => "−1 job",
            Change::MiddleFails => "mid fails",
        }
    }

    /// The jobs and members after the change.
    fn apply(self, base: &Variants, n: u32) -> (JobSet, Vec<Member>) {
        match self {
            Change::Grow => (base.jobs.clone(), pool_members("w", n + 1)),
            Change::Shrink => (base.jobs.clone(), pool_members("w", n - 1)),
            Change::AddJob => (base.with_extra.clone(), pool_members("w", n)),
            Change::RemoveJob => (base.without_first.clone(), pool_members("w", n)),
            Change::MiddleFails => {
                let mut members = pool_members("w", n);
                members[n as usize / 2].available = false;
                (base.jobs.clone(), members)
            }
        }
    }
}

/// The job list and its one-job-more and one-job-less variants.
struct Variants {
    jobs: JobSet,
    with_extra: JobSet,
    without_first: JobSet,
}

fn variants(count: usize) -> Variants {
    let jobs = jobs(count);
    let mut keys: Vec<String> = jobs.iter().map(ToString::to_string).collect();
    let without_first = JobSet::parse(keys[1..].to_vec()).expect("valid");
    keys.push("stream:an-added-job:new".to_owned());
    Variants {
        jobs,
        with_extra: JobSet::parse(keys).expect("valid"),
        without_first,
    }
}

#[derive(Default)]
struct Row {
    ratios: Vec<f64>,
    moved: Vec<f64>,
    balanced: usize,
    steps: usize,
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let strategies = [
        Strategy::Sticky,
        Strategy::Bounded { epsilon: 0.0 },
        Strategy::Bounded { epsilon: 0.05 },
        Strategy::Jump,
        Strategy::Ring { vnodes: 128 },
    ];
    let sizes: &[usize] = if quick {
        &[27, 1_000, 10_000]
    } else {
        &[27, 1_000, 10_000, 100_000, 1_000_000]
    };
    println!(
        "{:<22} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "strategy", "k", "change", "med ratio", "max ratio", "med moved", "max moved", "balanced"
    );
    for &k in sizes {
        let base = variants(k);
        for strategy in &strategies {
            let mut rows: Vec<Row> = Change::ALL.iter().map(|_| Row::default()).collect();
            for n in NS {
                let old: Assignment =
                    assign(&base.jobs, &pool_members("w", n), strategy).expect("members");
                for (change, row) in Change::ALL.iter().zip(rows.iter_mut()) {
                    let (jobs, members) = change.apply(&base, n);
                    let new = reassign(Some(&old), &jobs, &members, strategy).expect("members");
                    let available = members.iter().filter(|member| member.available).count();
                    let (floor, ceil) = (jobs.len() / available, jobs.len().div_ceil(available));
                    let bound = lower_bound(&old, &new, floor, ceil);
                    let moved = diff(&old, &new).moved.len();
                    if bound > 0 {
                        row.ratios.push(moved as f64 / bound as f64);
                    }
                    row.moved.push(moved as f64);
                    let (min, max) = new.load_range();
                    row.balanced += usize::from(min >= floor && max <= ceil);
                    row.steps += 1;
                }
            }
            for (change, row) in Change::ALL.iter().zip(rows.iter_mut()) {
                let max_ratio = row.ratios.iter().copied().fold(f64::NAN, f64::max);
                let max_moved = row.moved.iter().copied().fold(0.0, f64::max);
                println!(
                    "{:<22} {:>8} {:>9} {:>9.3} {:>9.3} {:>9} {:>9} {:>5}/{:<3}",
                    strategy.to_string(),
                    k,
                    change.label(),
                    median(&mut row.ratios),
                    max_ratio,
                    median(&mut row.moved),
                    max_moved,
                    row.balanced,
                    row.steps
                );
            }
        }
    }
}
