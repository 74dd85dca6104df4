//! Movement sweep: for each strategy, k ∈ {27, 10 000, 1 000 000} and
//! n → n+1, n → n−1 (n in 2..=64), the ratio moved / lower bound and the
//! balance max/mean load. Two lower bounds (see `shoal_core::diff`):
//! "LBcap" = `lower_bound(old, new, 0, cap)`, the least movement of any
//! assignment whose largest slice is at most `cap` = the strategy's balance
//! constraint (`ceil(k/n')` for bounded ε = 0, `ceil(1.05·k/n')` for
//! ε = 0.05, so bounded's ratio is ≥ 1), and "LB±" =
//! `lower_bound(old, new, floor(k/n'), cap)`, the least movement of an
//! assignment that also fills every member to the floor, as a reference
//! (bounded does not promise the floor, so this ratio can dip below 1).
//! Jump and ring are measured against the perfect `ceil(k/n')`; they are not
//! balanced, so their ratios can be < 1. "max<=cap" counts the n' where the
//! largest slice respected that cap.
//! Also: "add1" = how many *other* keys move when one job is added at n.
//!
//! Run: `cargo bench -p shoal-core --bench movement`
//! (`-- --quick` restricts to k ≤ 10 000). The 1M row uses
//! n ∈ {2, 3, 4, 8, 16, 32, 63, 64} to stay tractable on two cores.

use shoal_core::diff::lower_bound;
use shoal_core::member::pool_members;
use shoal_core::{Assignment, JobSet, Strategy, assign};

fn jobs(count: usize) -> JobSet {
    if count == shoal_core::seed::SEED_STREAMS.len() {
        return JobSet::parse(shoal_core::seed::SEED_STREAMS).expect("seed streams are valid");
    }
    JobSet::parse((0..count).map(|i| format!("stream:{i}:updated")))
        .expect("generated keys are valid")
}

fn moved(old: &Assignment, new: &Assignment) -> usize {
    old.iter()
        .zip(new.iter())
        .filter(|((_, a), (_, b))| a != b)
        .count()
}

fn max_over_mean(assignment: &Assignment, members: usize) -> f64 {
    let k = assignment.jobs().len() as f64;
    assignment.max_load() as f64 / (k / members as f64)
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

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let strategies = [
        Strategy::Bounded { epsilon: 0.0 },
        Strategy::Bounded { epsilon: 0.05 },
        Strategy::Jump,
        Strategy::Ring { vnodes: 128 },
    ];
    let sizes: &[usize] = if quick {
        &[27, 10_000]
    } else {
        &[27, 10_000, 1_000_000]
    };
    println!(
        "{:<22} {:>8} {:>6} {:>9} {:>9} {:>11} {:>11} {:>12} {:>12} {:>8}",
        "strategy",
        "k",
        "change",
        "med LB±",
        "max LB±",
        "med LBcap",
        "max LBcap",
        "med max/mean",
        "max max/mean",
        "max<=cap"
    );
    let mut churn = Vec::new();
    for &k in sizes {
        let jobs = jobs(k);
        let ns: Vec<u32> = if k >= 1_000_000 {
            vec![2, 3, 4, 8, 16, 32, 63, 64]
        } else {
            (2..=64).collect()
        };
        for strategy in &strategies {
            let assignments: std::collections::BTreeMap<u32, Assignment> = ns
                .iter()
                .flat_map(|&n| [n - 1, n, n + 1])
                .collect::<std::collections::BTreeSet<u32>>()
                .into_iter()
                .map(|n| {
                    let assignment = assign(&jobs, &pool_members("w", n), strategy)
                        .expect("members are available");
                    (n, assignment)
                })
                .collect();
            for (label, step) in [("n→n+1", 1i64), ("n→n−1", -1i64)] {
                let mut ratios = Vec::new();
                let mut cap_ratios = Vec::new();
                let mut balance = Vec::new();
                let mut within_cap = 0usize;
                for &n in &ns {
                    let target = (i64::from(n) + step) as u32;
                    let old = &assignments[&n];
                    let new = &assignments[&target];
                    // The balance constraint: bounded's own cap (ceil((1+ε)k/n'),
                    // at least ceil(k/n')); the perfect ceil(k/n') for the others.
                    let exact = k.div_ceil(target as usize);
                    let cap = match strategy {
                        Strategy::Bounded { epsilon } => exact
                            .max(((1.0 + epsilon) * k as f64 / f64::from(target)).ceil() as usize),
                        _ => exact,
                    };
                    let floor = k / target as usize;
                    let bound = lower_bound(old, new, floor, cap);
                    let cap_bound = lower_bound(old, new, 0, cap);
                    let moves = moved(old, new);
                    if bound > 0 {
                        ratios.push(moves as f64 / bound as f64);
                    }
                    if cap_bound > 0 {
                        cap_ratios.push(moves as f64 / cap_bound as f64);
                    }
                    balance.push(max_over_mean(new, target as usize));
                    if new.max_load() <= cap {
                        within_cap += 1;
                    }
                }
                let max_ratio = ratios.iter().copied().fold(0.0, f64::max);
                let max_cap_ratio = cap_ratios.iter().copied().fold(0.0, f64::max);
                let max_balance = balance.iter().copied().fold(0.0, f64::max);
                println!(
                    "{:<22} {:>8} {:>6} {:>9.3} {:>9.3} {:>11.3} {:>11.3} {:>12.3} {:>12.3} {:>4}/{:<3}",
                    strategy.to_string(),
                    k,
                    label,
                    median(&mut ratios),
                    max_ratio,
                    median(&mut cap_ratios),
                    max_cap_ratio,
                    median(&mut balance),
                    max_balance,
                    within_cap,
                    ns.len()
                );
            }
            churn.push((
                strategy.to_string(),
                k,
                job_churn(&jobs, &ns, strategy, &assignments),
            ));
        }
    }
    println!();
    println!(
        "{:<22} {:>8} {:>28} {:>28}",
        "strategy", "k", "add1: med/max other moved", "del1: med/max other moved"
    );
    for (strategy, k, (added, removed)) in churn {
        println!(
            "{strategy:<22} {k:>8} {:>28} {:>28}",
            format!("{}/{}", added.0, added.1),
            format!("{}/{}", removed.0, removed.1)
        );
    }
}

/// Median and max over `ns` of how many existing jobs move when one job is
/// added, and when the first job is removed.
fn job_churn(
    jobs: &JobSet,
    ns: &[u32],
    strategy: &Strategy,
    assignments: &std::collections::BTreeMap<u32, Assignment>,
) -> ((usize, usize), (usize, usize)) {
    let mut keys: Vec<String> = jobs.iter().map(ToString::to_string).collect();
    let first = keys.remove(0);
    let without_first = JobSet::parse(keys.clone()).expect("valid");
    keys.push(first);
    keys.push("stream:an-added-job:new".to_owned());
    let with_extra = JobSet::parse(keys).expect("valid");
    let mut added = Vec::new();
    let mut removed = Vec::new();
    for &n in ns {
        let members = pool_members("w", n);
        let base = &assignments[&n];
        let grown = assign(&with_extra, &members, strategy).expect("members are available");
        let shrunk = assign(&without_first, &members, strategy).expect("members are available");
        added.push(shoal_core::diff(base, &grown).moved.len());
        removed.push(shoal_core::diff(base, &shrunk).moved.len());
    }
    let summary = |mut values: Vec<usize>| {
        values.sort_unstable();
        (values[values.len() / 2], values[values.len() - 1])
    };
    (summary(added), summary(removed))
}
