//! The difference between two assignments, and the movement lower bound.
//!
//! # Lower bound
//!
//! Let `A` be the old assignment, `K'` the new job set, `M'` the new
//! available members, and `[F, C]` the allowed load range (a floor and a
//! cap). For a member `m ∈ M'` let `kept_m = |{ x ∈ K ∩ K' : A(x) = m }|`.
//! Every assignment of `K'` over `M'` with all loads in `[F, C]` moves at
//! least
//!
//! ```text
//! out = |{ x ∈ K ∩ K' : A(x) ∉ M' }|  +  Σ_{m ∈ M'} max(0, kept_m − C)
//! in  = Σ_{m ∈ M'} max(0, F − kept_m)  −  |K' \ K|
//! LB  = max(out, in)
//! ```
//!
//! keys: `out` counts keys that must leave (their owner is gone or
//! unavailable, or their owner would keep more than `C`); `in` counts the
//! keys members below `F` must receive, less what newly created jobs can
//! supply (a created job is placed, not moved). Every moved key leaves one
//! member and arrives at one, so both are lower bounds. With `F = 0` this is
//! the classic cap-only bound, which is tight (the moving keys always fit in
//! the room under the cap when `C·|M'| ≥ |K'|`).
//!
//! [`diff`] uses the new assignment's own smallest and largest load over its
//! available members: "the least movement any assignment at least as
//! balanced as the new one needs". For `bounded` with ε = 0 that range is
//! `[floor(k/n), ceil(k/n)]`. Benchmarks compare every strategy against the
//! perfectly balanced range with [`lower_bound`].

use std::collections::{BTreeMap, BTreeSet};

use crate::assignment::Assignment;
use crate::job::JobKey;
use crate::member::MemberId;

/// How one member's jobs change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberChange {
    /// Jobs the member gains (moved in or newly created), byte order.
    pub added: Vec<JobKey>,
    /// Jobs the member loses (moved out or deleted), byte order.
    pub removed: Vec<JobKey>,
    /// Number of jobs it keeps.
    pub unchanged: usize,
}

impl MemberChange {
    /// Whether the member's slice changes.
    pub fn is_changed(&self) -> bool {
        !self.added.is_empty() || !self.removed.is_empty()
    }
}

/// A job that exists in both assignments with different owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedJob {
    /// The job.
    pub key: JobKey,
    /// Old owner.
    pub from: MemberId,
    /// New owner.
    pub to: MemberId,
}

/// The difference between an old and a new assignment.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// Every member of either assignment, with its change.
    pub members: BTreeMap<MemberId, MemberChange>,
    /// Members whose slice content changes (something added or removed).
    pub affected: BTreeSet<MemberId>,
    /// Jobs present in both whose owner changes, in job byte order.
    pub moved: Vec<MovedJob>,
    /// Jobs only in the new assignment.
    pub created: usize,
    /// Jobs only in the old assignment.
    pub deleted: usize,
    /// The floor used for `lower_bound`: the new assignment's smallest load
    /// over its available members.
    pub min_load: usize,
    /// The cap used for `lower_bound`: the new assignment's largest load.
    pub max_load: usize,
    /// The least number of moves any assignment with every available
    /// member's load in `[min_load, max_load]` needs (module docs).
    pub lower_bound: usize,
}

impl Diff {
    /// `moved / lower_bound`; `None` when the lower bound is 0 (then any move
    /// is avoidable, and `moved.len()` alone tells the story).
    pub fn movement_ratio(&self) -> Option<f64> {
        (self.lower_bound > 0).then(|| self.moved.len() as f64 / self.lower_bound as f64)
    }
}

/// Members of both assignments merged, with index maps into the union.
struct MemberUnion {
    members: Vec<MemberId>,
    from_old: Vec<usize>,
    from_new: Vec<usize>,
}

fn member_union(old: &Assignment, new: &Assignment) -> MemberUnion {
    let members: Vec<MemberId> = old
        .members()
        .iter()
        .chain(new.members().iter())
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index = |member: &MemberId| members.binary_search(member).unwrap_or_default();
    MemberUnion {
        from_old: old.members().iter().map(index).collect(),
        from_new: new.members().iter().map(index).collect(),
        members,
    }
}

/// Compares two assignments: per-member added/removed/unchanged, affected
/// members, moved jobs and the movement lower bound (see the module docs).
/// Linear in the number of jobs (both job lists are sorted).
pub fn diff(old: &Assignment, new: &Assignment) -> Diff {
    let union = member_union(old, new);
    let mut changes: Vec<MemberChange> = vec![MemberChange::default(); union.members.len()];
    let mut moved = Vec::new();
    let (mut created, mut deleted) = (0, 0);
    let old_jobs = old.jobs().as_slice();
    let new_jobs = new.jobs().as_slice();
    let old_owners = old.owner_indices();
    let new_owners = new.owner_indices();
    let (mut i, mut j) = (0, 0);
    while i < old_jobs.len() || j < new_jobs.len() {
        let order = match (old_jobs.get(i), new_jobs.get(j)) {
            (Some(a), Some(b)) => a.cmp(b),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                let from = union.from_old[old_owners[i] as usize];
                changes[from].removed.push(old_jobs[i].clone());
                deleted += 1;
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                let to = union.from_new[new_owners[j] as usize];
                changes[to].added.push(new_jobs[j].clone());
                created += 1;
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                let from = union.from_old[old_owners[i] as usize];
                let to = union.from_new[new_owners[j] as usize];
                if from == to {
                    changes[from].unchanged += 1;
                } else {
                    changes[from].removed.push(old_jobs[i].clone());
                    changes[to].added.push(new_jobs[j].clone());
                    moved.push(MovedJob {
                        key: new_jobs[j].clone(),
                        from: union.members[from].clone(),
                        to: union.members[to].clone(),
                    });
                }
                i += 1;
                j += 1;
            }
        }
    }
    let (min_load, max_load) = new.load_range();
    let lower_bound = lower_bound(old, new, min_load, max_load);
    let affected = union
        .members
        .iter()
        .zip(changes.iter())
        .filter(|(_, change)| change.is_changed())
        .map(|(member, _)| member.clone())
        .collect();
    Diff {
        members: union.members.into_iter().zip(changes).collect(),
        affected,
        moved,
        created,
        deleted,
        min_load,
        max_load,
        lower_bound,
    }
}

/// The least number of jobs that any assignment of `new`'s jobs over `new`'s
/// available members with every load in `[min_load, max_load]` must move,
/// starting from `old` (formula in the module docs). Pass `min_load = 0` for
/// the cap-only bound.
pub fn lower_bound(old: &Assignment, new: &Assignment, min_load: usize, max_load: usize) -> usize {
    // For each old member, its position among new's members if available there.
    let still_there: Vec<Option<usize>> = old
        .members()
        .iter()
        .map(|member| {
            new.members()
                .binary_search(member)
                .ok()
                .filter(|&index| new.availability()[index])
        })
        .collect();
    let mut kept = vec![0usize; new.members().len()];
    let mut orphaned = 0;
    let mut common = 0;
    let old_jobs = old.jobs().as_slice();
    let new_jobs = new.jobs().as_slice();
    let old_owners = old.owner_indices();
    let (mut i, mut j) = (0, 0);
    while i < old_jobs.len() && j < new_jobs.len() {
        match old_jobs[i].cmp(&new_jobs[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                match still_there[old_owners[i] as usize] {
                    Some(member) => kept[member] += 1,
                    None => orphaned += 1,
                }
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let created = new_jobs.len() - common;
    let available = new.availability();
    let leaving: usize = kept
        .iter()
        .zip(available)
        .filter(|(_, available)| **available)
        .map(|(&count, _)| count.saturating_sub(max_load))
        .sum();
    let arriving: usize = kept
        .iter()
        .zip(available)
        .filter(|(_, available)| **available)
        .map(|(&count, _)| min_load.saturating_sub(count))
        .sum();
    (orphaned + leaving).max(arriving.saturating_sub(created))
}

/// Total weight of the jobs `change` moves, each job weighing what `settings`
/// gives it (1 without a setting).
pub fn moved_weight(change: &Diff, settings: &crate::job::JobSettings) -> u64 {
    change
        .moved
        .iter()
        .map(|moved| u64::from(settings.get(moved.key.as_str()).weight))
        .sum()
}
