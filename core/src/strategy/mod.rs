//! Assignment strategies: `bounded` (the default), `jump`, `ring`, and
//! `sticky`, the one that also reads the assignment in force ([`reassign`]).
//!
//! # Common ground
//!
//! Every strategy sees the members sorted by (pool, ordinal) and the jobs
//! sorted by byte order, so the result never depends on input order. Every
//! random-looking choice derives from the frozen [`crate::hash::key_hash`]
//! and [`mix`](crate::hash::mix).
//!
//! # Ordinal space and several pools
//!
//! `jump` and `bounded` work over *ordinal spaces*: pool `p` with highest
//! listed ordinal `m` has slots `0..=m`. A key first picks a pool by weighted
//! rendezvous hashing (weight = the pool's slot count; score
//! `-w / ln(u)` with `u` derived from `mix(key_hash, name_hash(pool))`), then
//! a slot within it. With one pool (the common case) the pool step is skipped.
//!
//! Movement trade-off: scaling one pool from `a` to `a+1` slots out of `N`
//! total moves the keys that the rendezvous step now sends to that pool
//! (`k·(N−a)/(N(N+1))`, the minimum for a weight change) plus the within-pool
//! reshuffle, and keys entering the pool may land on its old members. For a
//! single pool this is jump's optimum; across pools it costs up to ~1.5× the
//! lower bound (tested with two pools of four). The alternative, one ordinal space for
//! all pools concatenated in name order, would reshuffle every later pool
//! whenever an earlier one scales, which is far worse.
//!
//! A pool of members with generated names (a Deployment) has one slot per
//! member and picks among them by rendezvous instead of jump (see
//! `topology`), so replacing one pod moves only that pod's keys.
//!
//! # Cordoned members
//!
//! [`reassign_cordoned`] takes a set of *cordoned* members: they keep the jobs they
//! hold in force but take no job they do not hold. With `sticky` a cordoned member
//! keeps its jobs up to the balanced ceiling and the others share the rest perfectly
//! balanced. The stateless strategies compute their assignment as usual; a job it
//! gives a cordoned member that did not hold it in force goes where the strategy would
//! put it were the member unavailable (so only jobs that would land on it are
//! diverted, and a job it holds but the strategy moves anyway leaves it). Both are
//! fixed points. A member being *drained* is simply unavailable (a hole, below).
//!
//! Slots whose member is missing from the list or unavailable are *holes*:
//! their keys are re-placed (see each strategy) without moving any other key,
//! and return when the member is back, because the base placement does not
//! depend on availability.

mod bounded;
mod jump;
mod ring;
mod sticky;
mod topology;
mod weighted;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::assignment::Assignment;
use crate::hash::key_hash;
use crate::job::{JobKey, JobSet, JobSettings};
use crate::member::{Member, MemberId};

pub use topology::MAX_ORDINAL;

/// How jobs are spread over members.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "camelCase")]
pub enum Strategy {
    /// Deterministic bounded loads on top of jump (the default): the largest
    /// slice has at most `ceil((1+epsilon)·k/n)` keys, where `n` counts the
    /// available members; with `epsilon = 0` it is exactly `ceil(k/n)`.
    Bounded {
        /// Balance factor, finite and ≥ 0 (default 0).
        #[serde(default)]
        epsilon: f64,
    },
    /// Lamping–Veach jump consistent hashing over ordinals; unbalanced by
    /// ~±sqrt(k/n) but minimal movement on scaling at the end of a pool.
    Jump,
    /// Consistent-hash ring with `vnodes` points per member, for members whose
    /// ordinals carry no meaning; own implementation over the frozen hash.
    Ring {
        /// Virtual nodes per available member, 1..=[`MAX_VNODES`]
        /// (default [`DEFAULT_VNODES`]).
        #[serde(default = "default_vnodes")]
        vnodes: u32,
    },
    /// Perfectly balanced (every load `floor(k/n)` or `ceil(k/n)`) and moving
    /// exactly the lower bound from the assignment in force: each job stays
    /// with its owner while that owner is available and under its quota.
    /// Stateful: see [`reassign`]; without an assignment in force it starts
    /// from `bounded`'s spread.
    Sticky,
}

/// Largest accepted `vnodes` for [`Strategy::Ring`].
pub const MAX_VNODES: u32 = 4096;

/// `vnodes` of [`Strategy::Ring`] when not given: enough points for a
/// max/mean load around 1.1–1.3 (see the movement benchmark).
pub const DEFAULT_VNODES: u32 = 128;

fn default_vnodes() -> u32 {
    DEFAULT_VNODES
}

impl Default for Strategy {
    fn default() -> Self {
        Strategy::Bounded { epsilon: 0.0 }
    }
}

impl Strategy {
    /// Short name: `bounded`, `jump`, `ring` or `sticky`.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Bounded { .. } => "bounded",
            Strategy::Jump => "jump",
            Strategy::Ring { .. } => "ring",
            Strategy::Sticky => "sticky",
        }
    }

    /// Whether the result depends on the assignment in force (only `sticky`).
    pub fn is_stateful(&self) -> bool {
        matches!(self, Strategy::Sticky)
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Strategy::Bounded { epsilon } => write!(f, "bounded(epsilon={epsilon})"),
            Strategy::Jump => f.write_str("jump"),
            Strategy::Ring { vnodes } => write!(f, "ring(vnodes={vnodes})"),
            Strategy::Sticky => f.write_str("sticky"),
        }
    }
}

/// Why no assignment could be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AssignError {
    /// There is no available member (`members` counts the unavailable ones
    /// that were listed; 0 means the list was empty).
    #[error("{}", no_members_text(*members))]
    NoMembers {
        /// How many (unavailable) members were listed.
        members: usize,
    },
    /// The same member appears twice in the member list.
    #[error("member {member} is listed more than once")]
    DuplicateMember {
        /// The repeated member.
        member: MemberId,
    },
    /// A member's ordinal is beyond the supported range.
    #[error("member {member}: ordinal {} exceeds the supported maximum {MAX_ORDINAL}", member.ordinal().unwrap_or_default())]
    OrdinalTooLarge {
        /// The member.
        member: MemberId,
    },
    /// `epsilon` of the bounded strategy is negative, NaN or infinite.
    #[error("strategy bounded: epsilon must be a finite number >= 0, got {epsilon}")]
    InvalidEpsilon {
        /// The rejected value.
        epsilon: f64,
    },
    /// `vnodes` of the ring strategy is out of range.
    #[error("strategy ring: vnodes must be between 1 and {MAX_VNODES}, got {vnodes}")]
    InvalidVnodes {
        /// The rejected value.
        vnodes: u32,
    },
    /// Weights or dedicated jobs were given to a strategy that cannot honour
    /// them (only `sticky` does); never silently ignored.
    #[error(
        "strategy {strategy} cannot honour job weights or dedicated jobs; use strategy sticky or remove the job settings"
    )]
    SettingsNotSupported {
        /// The strategy's short name.
        strategy: &'static str,
    },
    /// A job setting names a job that is not in the job list.
    #[error("job settings name {key:?}, which is not in the job list")]
    SettingForUnlistedJob {
        /// The key.
        key: String,
    },
    /// Dedicated jobs need a member each, and the other jobs at least one more.
    #[error("{} dedicated jobs need a member each{}, but only {members} members are available", dedicated, if *others > 0 { format!(" plus one for the other {others} jobs") } else { String::new() })]
    TooManyDedicated {
        /// Dedicated jobs.
        dedicated: usize,
        /// Available members.
        members: usize,
        /// Jobs that are not dedicated.
        others: usize,
    },
    /// Every available member is cordoned and some job has no owner in force.
    #[error(
        "every available member is cordoned ({cordoned}) and {homeless} jobs have no member to go to; uncordon a member or add one"
    )]
    AllCordoned {
        /// The cordoned members, comma-separated.
        cordoned: String,
        /// How many jobs found no member.
        homeless: usize,
    },
    /// Cordoned members with job weights or dedicated jobs: not supported.
    #[error(
        "cordoned members cannot be combined with job weights or dedicated jobs (jobSettings); uncordon the members or remove the job settings"
    )]
    CordonWithSettings,
}

fn no_members_text(members: usize) -> String {
    if members == 0 {
        "no members: the swarm has no pool members to assign jobs to".to_owned()
    } else {
        format!("no members available: all {members} members are unavailable")
    }
}

/// Assigns every job to exactly one available member.
///
/// Deterministic: the same jobs, members (in any order) and strategy give the
/// same [`Assignment`]. Unavailable members are listed in the result with no
/// jobs. Fails with [`AssignError::NoMembers`] when no member is available,
/// even for an empty job list, so that "nothing to run on" is never silent.
/// For [`Strategy::Sticky`] this is the first assignment (nothing in force);
/// use [`reassign`] to move on from one.
pub fn assign(
    jobs: &JobSet,
    members: &[Member],
    strategy: &Strategy,
) -> Result<Assignment, AssignError> {
    reassign(None, jobs, members, strategy)
}

/// Like [`assign`], from the assignment in force: [`Strategy::Sticky`] keeps
/// what it can of `in_force` (see its docs); the stateless strategies ignore
/// it. Deterministic in all three inputs, whatever their order.
pub fn reassign(
    in_force: Option<&Assignment>,
    jobs: &JobSet,
    members: &[Member],
    strategy: &Strategy,
) -> Result<Assignment, AssignError> {
    match *strategy {
        Strategy::Bounded { epsilon } if !(epsilon.is_finite() && epsilon >= 0.0) => {
            return Err(AssignError::InvalidEpsilon { epsilon });
        }
        Strategy::Ring { vnodes } if vnodes == 0 || vnodes > MAX_VNODES => {
            return Err(AssignError::InvalidVnodes { vnodes });
        }
        _ => {}
    }
    let topology = topology::Topology::new(members)?;
    let hashes = || jobs.iter().map(|key| key_hash(key.as_bytes()));
    let owners = match *strategy {
        Strategy::Bounded { epsilon } => bounded::assign(&topology, jobs, epsilon),
        Strategy::Jump => jump::assign(&topology, hashes()),
        Strategy::Ring { vnodes } => ring::assign(&topology, hashes(), vnodes),
        Strategy::Sticky => sticky::assign(&topology, jobs, in_force),
    };
    Ok(Assignment::from_parts(
        topology.members,
        topology.available,
        jobs.clone(),
        owners,
    ))
}

/// Like [`reassign`], honouring per-job weights and dedicated jobs (see
/// `strategy/weighted.rs` for the algorithm and its bounds). With plain
/// settings (every weight 1, nothing dedicated) the result is exactly
/// [`reassign`]'s. Only [`Strategy::Sticky`] honours settings; any other
/// strategy given non-plain settings fails with
/// [`AssignError::SettingsNotSupported`], as does a setting naming a job
/// that is not listed ([`AssignError::SettingForUnlistedJob`]).
pub fn reassign_weighted(
    in_force: Option<&Assignment>,
    jobs: &JobSet,
    settings: &JobSettings,
    members: &[Member],
    strategy: &Strategy,
) -> Result<Assignment, AssignError> {
    let (weights, dedicated) =
        settings
            .aligned(jobs)
            .map_err(|key| AssignError::SettingForUnlistedJob {
                key: key.as_str().to_owned(),
            })?;
    let plain = weights.iter().all(|&weight| weight == 1) && !dedicated.contains(&true);
    if plain {
        return reassign(in_force, jobs, members, strategy);
    }
    if !matches!(strategy, Strategy::Sticky) {
        return Err(AssignError::SettingsNotSupported {
            strategy: strategy.name(),
        });
    }
    let topology = topology::Topology::new(members)?;
    let owners = weighted::assign(&topology, jobs, &weights, &dedicated, in_force)?;
    Ok(Assignment::from_parts(
        topology.members,
        topology.available,
        jobs.clone(),
        owners,
    ))
}

/// Like [`reassign_weighted`], with the members of `cordoned` taking no job they do not
/// hold in force (see the module docs, *Cordoned members*). A cordoned member that is
/// not listed or not available changes nothing. Fails with [`AssignError::AllCordoned`]
/// when a job has nowhere to go, and with [`AssignError::CordonWithSettings`] when a
/// member is cordoned and the settings are not plain. With nobody cordoned this is
/// exactly [`reassign_weighted`].
pub fn reassign_cordoned(
    in_force: Option<&Assignment>,
    jobs: &JobSet,
    settings: &JobSettings,
    members: &[Member],
    cordoned: &BTreeSet<MemberId>,
    strategy: &Strategy,
) -> Result<Assignment, AssignError> {
    let cordoned_here: BTreeSet<&MemberId> = members
        .iter()
        .filter(|member| member.available && cordoned.contains(&member.id))
        .map(|member| &member.id)
        .collect();
    if cordoned_here.is_empty() {
        return reassign_weighted(in_force, jobs, settings, members, strategy);
    }
    let free = reassign_weighted(in_force, jobs, settings, members, strategy)?;
    if !settings.is_plain() {
        return Err(AssignError::CordonWithSettings);
    }
    let all_cordoned = |homeless: usize| AssignError::AllCordoned {
        cordoned: cordoned_here
            .iter()
            .map(|member| member.pod_name())
            .collect::<Vec<_>>()
            .join(", "),
        homeless,
    };
    if let Strategy::Sticky = strategy {
        let topology = topology::Topology::new(members)?;
        let mask: Vec<bool> = topology
            .members
            .iter()
            .map(|member| cordoned_here.contains(member))
            .collect();
        let owners =
            sticky::assign_cordoned(&topology, jobs, in_force, &mask).ok_or_else(|| {
                let held = in_force.map_or(0, |in_force| {
                    jobs.iter()
                        .filter(|key| {
                            in_force
                                .owner_of(key.as_str())
                                .is_some_and(|owner| cordoned_here.contains(owner))
                        })
                        .count()
                });
                all_cordoned(jobs.len().saturating_sub(held))
            })?;
        return Ok(Assignment::from_parts(
            topology.members,
            topology.available,
            jobs.clone(),
            owners,
        ));
    }
    // Stateless: keep what the strategy gives a cordoned member that holds it in force;
    // divert the rest of what it gives cordoned members as if they were unavailable.
    let diverted: Vec<&JobKey> = free
        .iter()
        .filter(|(key, owner)| {
            cordoned_here.contains(owner)
                && in_force.and_then(|in_force| in_force.owner_of(key.as_str())) != Some(*owner)
        })
        .map(|(key, _)| key)
        .collect();
    if diverted.is_empty() {
        return Ok(free);
    }
    let without: Vec<Member> = members
        .iter()
        .map(|member| {
            let mut member = member.clone();
            member.available &= !cordoned_here.contains(&member.id);
            member
        })
        .collect();
    let elsewhere = reassign(None, jobs, &without, strategy).map_err(|error| match error {
        AssignError::NoMembers { .. } => all_cordoned(diverted.len()),
        other => other,
    })?;
    let owners: Vec<MemberId> = free
        .iter()
        .map(|(key, owner)| {
            if diverted.binary_search(&key).is_ok() {
                elsewhere.owner_of(key.as_str()).unwrap_or(owner).clone()
            } else {
                owner.clone()
            }
        })
        .collect();
    let topology = topology::Topology::new(members)?;
    let owner_indices = owners
        .iter()
        .map(|owner| {
            topology
                .members
                .binary_search(owner)
                .map_or(topology::NONE, |index| index as u32)
        })
        .collect();
    Ok(Assignment::from_parts(
        topology.members,
        topology.available,
        jobs.clone(),
        owner_indices,
    ))
}
