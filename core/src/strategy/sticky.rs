//! `sticky`: perfectly balanced, and moving exactly the jobs balance forces.
//!
//! Unlike the other strategies, `sticky` is a function of the assignment in
//! force as well as of the jobs and members (Kafka's sticky assignor, made
//! canonical). The controller recovers that assignment from the cluster (the
//! revision history), never from memory, so the result survives restarts.
//!
//! # Algorithm
//!
//! Let `k` be the number of jobs, `n` the available members, `q = k / n` and
//! `r = k mod n`. For each available member `m`, `kept_m` counts the jobs of
//! the new list that `m` already owns in force.
//!
//! 1. **Quotas.** Every available member gets `q`; the `r` members with the
//!    largest `kept_m` (ties: canonical member order) get `q + 1`. Giving the
//!    larger quota to whoever already holds more is what keeps the movement
//!    minimal.
//! 2. **Keep.** Each job stays with its owner in force while that owner is
//!    available and under its quota; a member keeps its first jobs in byte
//!    order and sheds the rest (its *surplus*).
//! 3. **Place.** Jobs without an owner (created, orphaned by a member that
//!    left or failed over, or shed) are sorted by `(key_hash, key)` and dealt
//!    to the members under quota in canonical member order, each up to its
//!    quota. Hash order spreads neighbouring keys over members.
//!
//! With no job of the new list owned by an available member in force (the
//! first revision, or a job list replaced wholesale), the `bounded` (ε = 0)
//! assignment stands in for the assignment in force, so the initial spread is
//! bounded's (then brought to perfect balance by the steps above).
//!
//! # Guarantees
//!
//! * Every load is `floor(k/n)` or `ceil(k/n)` (exactly `r` members at the ceiling).
//! * The jobs moved (in both lists, owner changed) are exactly the lower bound
//!   `max(out, in)` of [`crate::diff`] for the range `[floor(k/n), ceil(k/n)]`.
//!   Moved = orphaned + Σ max(0, kept_m − quota_m). Let `A` be the members with
//!   `kept_m ≥ q + 1`. If `|A| ≤ r`, all of `A` get `q + 1`, so the sum is
//!   `Σ max(0, kept_m − ceil)` and moved = `out`. If `|A| > r`, every member
//!   outside the chosen `r` has quota `q`, so each arrival fills a member up to
//!   `q = floor`, and moved = `Σ max(0, floor − kept_m) − created` = `in`.
//!   Either way the result is a perfectly balanced assignment moving a lower
//!   bound, hence exactly `max(out, in)`. Consequences: adding a job moves no
//!   other job, removing one moves at most one other; scale up, scale down, a
//!   member failing over or returning move exactly the bound.
//! * A job moves between two members that both stay only when its owner is
//!   over its quota; such moves total `lower bound − orphaned`, the least
//!   any perfectly balanced assignment needs. No member both gains and loses
//!   jobs that stay.
//! * Applied to its own result with the same jobs and members it changes
//!   nothing (a fixed point), so a recomputed revision is the same revision.

use crate::assignment::Assignment;
use crate::hash::key_hash;
use crate::job::JobSet;

use super::bounded;
use super::topology::{NONE, Topology};

/// Owner (member index of `topology`) per job of `jobs`.
pub(crate) fn assign(
    topology: &Topology,
    jobs: &JobSet,
    in_force: Option<&Assignment>,
) -> Vec<u32> {
    let nobody = vec![false; topology.members.len()];
    // With nobody cordoned every available member takes jobs, so this never fails.
    assign_cordoned(topology, jobs, in_force, &nobody).unwrap_or_default()
}

/// [`assign`] with the members of `cordoned` (a mask over `topology.members`) taking no
/// job they do not hold in force: a cordoned member keeps its jobs up to the balanced
/// ceiling `ceil(k/n)` (over all available members), and the other available members
/// share the rest perfectly balanced among themselves (steps 1–3 over them alone).
/// A fixed point like [`assign`]: a cordoned member never holds more than the ceiling,
/// so a second pass keeps all it holds. `None` when jobs have no home: every available
/// member is cordoned and some job is new or shed.
pub(crate) fn assign_cordoned(
    topology: &Topology,
    jobs: &JobSet,
    in_force: Option<&Assignment>,
    cordoned: &[bool],
) -> Option<Vec<u32>> {
    if jobs.is_empty() {
        return Some(Vec::new());
    }
    let mut owners = in_force.map_or_else(Vec::new, |previous| {
        previous_owners(topology, jobs, previous)
    });
    if owners.iter().all(|&owner| owner == NONE) {
        // The first spread: nothing in force, so a cordoned member holds nothing to keep.
        owners = bounded::assign(topology, jobs, 0.0);
        for owner in &mut owners {
            if *owner != NONE && cordoned[*owner as usize] {
                *owner = NONE;
            }
        }
    }
    rebalance(topology, jobs, owners, cordoned)
}

/// The owner in force of each job, as a member index of `topology`; [`NONE`]
/// for jobs that are new or whose owner is gone or unavailable.
pub(super) fn previous_owners(
    topology: &Topology,
    jobs: &JobSet,
    previous: &Assignment,
) -> Vec<u32> {
    let member_now: Vec<u32> = previous
        .members()
        .iter()
        .map(|member| match topology.members.binary_search(member) {
            Ok(index) if topology.available[index] => index as u32,
            _ => NONE,
        })
        .collect();
    let old_owners = previous.owner_indices();
    if previous.jobs().same_keys(jobs) {
        return old_owners
            .iter()
            .map(|&owner| member_now[owner as usize])
            .collect();
    }
    let old_jobs = previous.jobs().as_slice();
    let mut owners = Vec::with_capacity(jobs.len());
    let mut old = 0;
    for key in jobs.iter() {
        while old < old_jobs.len() && old_jobs[old] < *key {
            old += 1;
        }
        if old < old_jobs.len() && old_jobs[old] == *key {
            owners.push(member_now[old_owners[old] as usize]);
            old += 1;
        } else {
            owners.push(NONE);
        }
    }
    owners
}

/// Steps 1–3 of the module docs over `owners` (the owners in force, [`NONE`]
/// for none); cordoned members (see [`assign_cordoned`]) only keep.
fn rebalance(
    topology: &Topology,
    jobs: &JobSet,
    mut owners: Vec<u32>,
    cordoned: &[bool],
) -> Option<Vec<u32>> {
    let member_count = topology.members.len();
    let mut kept = vec![0usize; member_count];
    for &owner in &owners {
        if owner != NONE {
            kept[owner as usize] += 1;
        }
    }

    // 0. A cordoned member's quota is what it holds, up to the ceiling over all members.
    let mut quota = vec![0usize; member_count];
    let all_available = topology.available_count.max(1);
    let ceiling = jobs.len().div_ceil(all_available);
    let mut left = jobs.len();
    for member in (0..member_count).filter(|&m| topology.available[m] && cordoned[m]) {
        quota[member] = kept[member].min(ceiling);
        left -= quota[member];
    }

    // 1. Quotas: q for all, q + 1 for the r members holding most.
    let available: Vec<usize> = (0..member_count)
        .filter(|&m| topology.available[m] && !cordoned[m])
        .collect();
    if available.is_empty() {
        if left > 0 {
            return None;
        }
    } else {
        let base = left / available.len();
        let extra = left % available.len();
        let mut by_holding = available.clone();
        by_holding.sort_by(|&a, &b| kept[b].cmp(&kept[a]).then(a.cmp(&b)));
        for (rank, &member) in by_holding.iter().enumerate() {
            quota[member] = base + usize::from(rank < extra);
        }
    }

    // 2. Keep the first `quota` jobs (byte order) of each owner; the rest are homeless.
    let mut load = vec![0usize; member_count];
    let mut homeless: Vec<(u64, u32)> = Vec::new();
    for (index, owner) in owners.iter_mut().enumerate() {
        if *owner != NONE && load[*owner as usize] < quota[*owner as usize] {
            load[*owner as usize] += 1;
        } else {
            *owner = NONE;
            let key = &jobs.as_slice()[index];
            homeless.push((key_hash(key.as_bytes()), index as u32));
        }
    }

    // 3. Homeless jobs in (hash, key) order fill the members under quota in member order.
    // Job indices follow byte order, so (hash, index) orders like (hash, key).
    homeless.sort_unstable();
    let mut homeless = homeless.into_iter();
    for member in available {
        for _ in load[member]..quota[member] {
            match homeless.next() {
                Some((_, index)) => owners[index as usize] = member as u32,
                None => break,
            }
        }
    }
    debug_assert!(homeless.next().is_none());
    Some(owners)
}
