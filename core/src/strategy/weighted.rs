//! `sticky` with weighted and dedicated jobs ([`crate::job::JobSettings`]).
//!
//! Used by [`super::reassign_weighted`] when some job weighs more than 1 or
//! is dedicated; with plain settings the unweighted `sticky` runs instead, so
//! its results are unchanged.
//!
//! # Algorithm
//!
//! 1. **Dedicated jobs** (byte order) each claim one available member: the
//!    owner in force if it is available and not claimed yet; otherwise the
//!    unclaimed member holding the least shared weight in force (ties:
//!    canonical member order). A claimed member runs its dedicated job only;
//!    when the job goes, the member is shared again. More dedicated jobs than
//!    members, or as many while other jobs exist, is refused, naming the counts.
//! 2. **Keep.** Over the `n'` shared members, with `W` the shared jobs'
//!    total weight, `T = W / n'` and `w_max` the heaviest shared job: each
//!    job (byte order) stays with its owner in force while that owner is a
//!    shared member whose kept weight stays ≤ `cap = ⌊T⌋ + w_max`.
//! 3. **Place.** Jobs without an owner, heaviest first (ties `(key_hash,
//!    key)`), each go to the least-loaded shared member (ties: member order).
//! 4. **Lift.** While the least-loaded member holds less than `T − w_max`,
//!    the most loaded one (ties: last in member order) hands it its last job.
//!    The most loaded holds ≥ `T`, so every hand-off lowers the spread and
//!    the loop ends.
//!
//! # Guarantees (tested in `core/tests/weighted.rs`)
//!
//! * **Balance.** Every shared member's load `L` satisfies
//!   `T − w_max ≤ L ≤ ⌊T⌋ + w_max`. Upper: kept loads are ≤ `cap`; a placed
//!   job of weight `w` goes to a member at most at the mean of the rest,
//!   `(W − w)/n'`, ending ≤ `T + w_max`; a lifted member ends below `T`.
//!   Lower: step 4's condition.
//! * **Movement.** Let `held_m` be the shared weight member `m` owned in
//!   force (jobs of the new list). A member sheds in step 2 only when
//!   `held_m > cap`, and then less than `held_m − ⌊T⌋` (it kept more than
//!   `cap − w_max`); a member receives in step 4 only when
//!   `held_m < T − w_max`, and then less than `T − held_m`. So the weight
//!   moving between two members that both stay is at most
//!   `Σ_{held_m > cap} (held_m − ⌊T⌋) + Σ_{held_m < T − w_max} (T − held_m)`:
//!   each term is the least any assignment within the balance bound must move
//!   from or to that member, plus at most `w_max`. Jobs whose owner left,
//!   failed over or became dedicated move too (they must).
//! * **Sticky.** When every surviving member's `held_m` is already within
//!   `[T − w_max, cap]`, no job moves between two members that stay; a job
//!   added moves no other job.
//! * **Fixed point.** Applied to its own result with the same inputs it
//!   changes nothing, so a controller restart recomputes the same revision.
//! * **Deterministic** for any input order (all orders above are canonical).

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::assignment::Assignment;
use crate::hash::key_hash;
use crate::job::JobSet;

use super::AssignError;
use super::sticky::previous_owners;
use super::topology::{NONE, Topology};

/// Owner (member index of `topology`) per job of `jobs`, given each job's
/// weight and dedication (aligned with `jobs`).
pub(crate) fn assign(
    topology: &Topology,
    jobs: &JobSet,
    weights: &[u32],
    dedicated: &[bool],
    in_force: Option<&Assignment>,
) -> Result<Vec<u32>, AssignError> {
    let mut owners = match in_force {
        Some(previous) => previous_owners(topology, jobs, previous),
        None => vec![NONE; jobs.len()],
    };
    let available: Vec<u32> = (0..topology.members.len() as u32)
        .filter(|&member| topology.available[member as usize])
        .collect();
    let claimed = claim_dedicated(&available, weights, dedicated, &mut owners)?;
    let shared: Vec<u32> = available
        .iter()
        .copied()
        .filter(|&member| !claimed[member as usize])
        .collect();
    balance_shared(topology, jobs, weights, dedicated, &shared, &mut owners);
    Ok(owners)
}

/// Step 1: gives each dedicated job a member of its own; returns which
/// members are claimed (indexed by member).
fn claim_dedicated(
    available: &[u32],
    weights: &[u32],
    dedicated: &[bool],
    owners: &mut [u32],
) -> Result<Vec<bool>, AssignError> {
    let member_count = available.iter().max().map_or(0, |&last| last as usize + 1);
    let mut claimed = vec![false; member_count];
    let dedicated_jobs: Vec<usize> = (0..owners.len()).filter(|&job| dedicated[job]).collect();
    if dedicated_jobs.is_empty() {
        return Ok(claimed);
    }
    let others = owners.len() - dedicated_jobs.len();
    if dedicated_jobs.len() > available.len()
        || (dedicated_jobs.len() == available.len() && others > 0)
    {
        return Err(AssignError::TooManyDedicated {
            dedicated: dedicated_jobs.len(),
            members: available.len(),
            others,
        });
    }
    // Shared weight each member holds in force: a dedicated job without a
    // member takes the one whose claim displaces the least.
    let mut held = vec![0u64; member_count];
    for (job, &owner) in owners.iter().enumerate() {
        if owner != NONE && !dedicated[job] {
            held[owner as usize] += u64::from(weights[job]);
        }
    }
    let mut unplaced = Vec::new();
    for &job in &dedicated_jobs {
        let owner = owners[job];
        if owner != NONE && !claimed[owner as usize] {
            claimed[owner as usize] = true;
        } else {
            unplaced.push(job);
        }
    }
    for job in unplaced {
        let member = available
            .iter()
            .copied()
            .filter(|&member| !claimed[member as usize])
            .min_by_key(|&member| (held[member as usize], member))
            .expect("counts checked above: an unclaimed member is left");
        claimed[member as usize] = true;
        owners[job] = member;
    }
    Ok(claimed)
}

/// Steps 2–4 over the shared members.
fn balance_shared(
    topology: &Topology,
    jobs: &JobSet,
    weights: &[u32],
    dedicated: &[bool],
    shared: &[u32],
    owners: &mut [u32],
) {
    let member_count = topology.members.len();
    let mut is_shared = vec![false; member_count];
    for &member in shared {
        is_shared[member as usize] = true;
    }
    let job_count = owners.len();
    let shared_jobs = || (0..job_count).filter(|&job| !dedicated[job]);
    let total: u64 = shared_jobs().map(|job| u64::from(weights[job])).sum();
    let heaviest = shared_jobs()
        .map(|job| u64::from(weights[job]))
        .max()
        .unwrap_or(0);
    if heaviest == 0 {
        return;
    }
    let members = shared.len() as u64;
    let cap = total / members + heaviest;

    // 2. Keep, first fit in byte order.
    let mut load = vec![0u64; member_count];
    let mut homeless: Vec<(Reverse<u32>, u64, u32)> = Vec::new();
    for job in shared_jobs() {
        let owner = owners[job];
        let weight = u64::from(weights[job]);
        if owner != NONE && is_shared[owner as usize] && load[owner as usize] + weight <= cap {
            load[owner as usize] += weight;
        } else {
            owners[job] = NONE;
            let key = &jobs.as_slice()[job];
            homeless.push((Reverse(weights[job]), key_hash(key.as_bytes()), job as u32));
        }
    }

    // 3. Place, heaviest first, on the least loaded.
    homeless.sort_unstable();
    let mut by_load: BTreeSet<(u64, u32)> = shared
        .iter()
        .map(|&member| (load[member as usize], member))
        .collect();
    for (Reverse(weight), _, job) in homeless {
        let (lightest, member) = by_load.pop_first().expect("a shared member exists");
        owners[job as usize] = member;
        load[member as usize] = lightest + u64::from(weight);
        by_load.insert((load[member as usize], member));
    }

    // 4. Lift members below T − w_max (compared times n' to stay in integers).
    let below_bound = |lightest: u64| (lightest + heaviest) * members < total;
    if !by_load
        .first()
        .is_some_and(|&(lightest, _)| below_bound(lightest))
    {
        return;
    }
    let mut held: Vec<Vec<u32>> = vec![Vec::new(); member_count];
    for job in shared_jobs() {
        held[owners[job] as usize].push(job as u32);
    }
    while let Some(&(lightest, to)) = by_load.first() {
        if !below_bound(lightest) {
            break;
        }
        let (heaviest_load, from) = by_load.pop_last().expect("two entries exist");
        by_load.pop_first();
        let job = held[from as usize]
            .pop()
            .expect("the most loaded member holds at least T > 0");
        let weight = u64::from(weights[job as usize]);
        owners[job as usize] = to;
        held[to as usize].push(job);
        by_load.insert((heaviest_load - weight, from));
        by_load.insert((lightest + weight, to));
    }
}
