//! The result of an assignment: which member owns each job.

use std::collections::BTreeMap;

use crate::job::{JobKey, JobSet};
use crate::member::{Member, MemberId};
use crate::slice::Slice;

/// Who owns which job, for one set of jobs and members.
///
/// Members are held in canonical (pool, ordinal) order; unavailable members
/// are present and own nothing. Every job has exactly one owner by
/// construction (one owner index per job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    members: Vec<MemberId>,
    available: Vec<bool>,
    jobs: JobSet,
    /// Index into `members` per job, aligned with `jobs`.
    owners: Vec<u32>,
}

/// An inconsistent set of slices handed to [`Assignment::from_slices`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    /// The same member appears twice.
    #[error("member {member} is listed more than once")]
    DuplicateMember {
        /// The repeated member.
        member: MemberId,
    },
    /// Owners and jobs do not line up.
    #[error("{owners} owners recorded for {jobs} jobs")]
    OwnerCount {
        /// Owners given.
        owners: usize,
        /// Jobs given.
        jobs: usize,
    },
    /// An owner index names no listed member.
    #[error("job {key:?} is owned by member #{index}, but only {members} members are listed")]
    UnknownOwner {
        /// The job.
        key: String,
        /// The owner index given.
        index: u32,
        /// How many members are listed.
        members: usize,
    },
    /// A job is owned by a member listed as unavailable.
    #[error("job {key:?} is owned by {member}, which is listed as unavailable")]
    UnavailableOwner {
        /// The job.
        key: String,
        /// The owner.
        member: MemberId,
    },
    /// A job is in two slices.
    #[error("job {key:?} is owned by both {first} and {second}")]
    DuplicateOwner {
        /// The job.
        key: String,
        /// One owner.
        first: MemberId,
        /// The other owner.
        second: MemberId,
    },
}

impl Assignment {
    pub(crate) fn from_parts(
        members: Vec<MemberId>,
        available: Vec<bool>,
        jobs: JobSet,
        owners: Vec<u32>,
    ) -> Assignment {
        debug_assert_eq!(jobs.len(), owners.len());
        debug_assert!(owners.iter().all(|&owner| (owner as usize) < members.len()));
        Assignment {
            members,
            available,
            jobs,
            owners,
        }
    }

    /// Rebuilds an assignment from per-member slices, e.g. the slices found
    /// in the cluster, to diff a new assignment against what is in force.
    /// Every listed member counts as available. Rejects a job in two slices.
    pub fn from_slices<I>(slices: I) -> Result<Assignment, AssignmentError>
    where
        I: IntoIterator<Item = (MemberId, JobSet)>,
    {
        let mut by_member: Vec<(MemberId, JobSet)> = slices.into_iter().collect();
        by_member.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = by_member.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(AssignmentError::DuplicateMember {
                member: pair[0].0.clone(),
            });
        }
        let mut owned: Vec<(JobKey, u32)> = by_member
            .iter()
            .enumerate()
            .flat_map(|(index, (_, jobs))| jobs.iter().map(move |key| (key.clone(), index as u32)))
            .collect();
        owned.sort_unstable();
        if let Some(pair) = owned.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(AssignmentError::DuplicateOwner {
                key: pair[0].0.as_str().to_owned(),
                first: by_member[pair[0].1 as usize].0.clone(),
                second: by_member[pair[1].1 as usize].0.clone(),
            });
        }
        let (keys, owners): (Vec<JobKey>, Vec<u32>) = owned.into_iter().unzip();
        Ok(Assignment {
            available: vec![true; by_member.len()],
            members: by_member.into_iter().map(|(member, _)| member).collect(),
            jobs: JobSet::from_sorted_unique(keys),
            owners,
        })
    }

    /// Rebuilds a recorded assignment: `owners[i]` is the index in `members`
    /// (in the order given) of the owner of the `i`-th job of `jobs` (byte
    /// order). Rejects repeated members, owner indices out of range and jobs
    /// owned by unavailable members, so a damaged record is never taken as
    /// the assignment in force.
    pub fn from_owners(
        members: &[Member],
        jobs: JobSet,
        owners: &[u32],
    ) -> Result<Assignment, AssignmentError> {
        if owners.len() != jobs.len() {
            return Err(AssignmentError::OwnerCount {
                owners: owners.len(),
                jobs: jobs.len(),
            });
        }
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by(|&a, &b| members[a].id.cmp(&members[b].id));
        if let Some(pair) = order
            .windows(2)
            .find(|pair| members[pair[0]].id == members[pair[1]].id)
        {
            return Err(AssignmentError::DuplicateMember {
                member: members[pair[0]].id.clone(),
            });
        }
        // Position in canonical order of each member as given.
        let mut canonical = vec![0u32; members.len()];
        for (position, &given) in order.iter().enumerate() {
            canonical[given] = position as u32;
        }
        let mut mapped = Vec::with_capacity(owners.len());
        for (key, &owner) in jobs.iter().zip(owners) {
            let member =
                members
                    .get(owner as usize)
                    .ok_or_else(|| AssignmentError::UnknownOwner {
                        key: key.as_str().to_owned(),
                        index: owner,
                        members: members.len(),
                    })?;
            if !member.available {
                return Err(AssignmentError::UnavailableOwner {
                    key: key.as_str().to_owned(),
                    member: member.id.clone(),
                });
            }
            mapped.push(canonical[owner as usize]);
        }
        Ok(Assignment {
            members: order
                .iter()
                .map(|&given| members[given].id.clone())
                .collect(),
            available: order
                .iter()
                .map(|&given| members[given].available)
                .collect(),
            jobs,
            owners: mapped,
        })
    }

    /// The owner of each job as an index into [`Assignment::members`],
    /// aligned with [`Assignment::jobs`]: the compact form a revision record
    /// keeps.
    pub fn owner_indices(&self) -> &[u32] {
        &self.owners
    }

    /// All members, in canonical order, including unavailable ones.
    pub fn members(&self) -> &[MemberId] {
        &self.members
    }

    /// Whether `member` is listed and was available.
    pub fn is_available(&self, member: &MemberId) -> bool {
        self.member_index(member)
            .is_some_and(|index| self.available[index])
    }

    /// All jobs, in byte order.
    pub fn jobs(&self) -> &JobSet {
        &self.jobs
    }

    /// Iterates over `(job, owner)` in job byte order.
    pub fn iter(&self) -> impl Iterator<Item = (&JobKey, &MemberId)> + '_ {
        self.jobs
            .iter()
            .zip(self.owners.iter())
            .map(|(key, &owner)| (key, &self.members[owner as usize]))
    }

    /// The owner of `key`, if the job exists.
    pub fn owner_of(&self, key: &str) -> Option<&MemberId> {
        let position = self.jobs.position(key)?;
        Some(&self.members[self.owners[position] as usize])
    }

    /// The jobs of `member` in byte order (`None` if the member is not listed).
    pub fn slice_of(&self, member: &MemberId) -> Option<JobSet> {
        let index = self.member_index(member)? as u32;
        let keys = self
            .jobs
            .iter()
            .zip(self.owners.iter())
            .filter(|(_, owner)| **owner == index)
            .map(|(key, _)| key.clone())
            .collect();
        Some(JobSet::from_sorted_unique(keys))
    }

    /// Every member's jobs (empty sets for members that own nothing).
    pub fn member_jobs(&self) -> BTreeMap<MemberId, JobSet> {
        let mut buckets: Vec<Vec<JobKey>> = vec![Vec::new(); self.members.len()];
        for (key, &owner) in self.jobs.iter().zip(self.owners.iter()) {
            buckets[owner as usize].push(key.clone());
        }
        self.members
            .iter()
            .cloned()
            .zip(buckets.into_iter().map(JobSet::from_sorted_unique))
            .collect()
    }

    /// Number of jobs per member, in canonical member order.
    pub fn loads(&self) -> BTreeMap<MemberId, usize> {
        let mut counts = vec![0usize; self.members.len()];
        for &owner in &self.owners {
            counts[owner as usize] += 1;
        }
        self.members.iter().cloned().zip(counts).collect()
    }

    /// The largest number of jobs on one member (0 without jobs).
    pub fn max_load(&self) -> usize {
        self.loads().into_values().max().unwrap_or(0)
    }

    /// The smallest and largest number of jobs over the available members.
    pub fn load_range(&self) -> (usize, usize) {
        let mut counts = vec![0usize; self.members.len()];
        for &owner in &self.owners {
            counts[owner as usize] += 1;
        }
        let available = counts
            .iter()
            .zip(self.available.iter())
            .filter(|(_, available)| **available)
            .map(|(count, _)| *count);
        let min = available.clone().min().unwrap_or(0);
        let max = available.max().unwrap_or(0);
        (min, max)
    }

    /// Canonical slices for every member at `revision`.
    pub fn slices(&self, swarm: &str, revision: u64) -> BTreeMap<MemberId, Slice> {
        self.member_jobs()
            .into_iter()
            .map(|(member, jobs)| {
                let slice = Slice::new(swarm, member.pod_name(), revision, jobs);
                (member, slice)
            })
            .collect()
    }

    /// Canonical slices at `revision`, except that a member whose jobs are
    /// unchanged from `previous` keeps its previous slice (and revision): the
    /// revision in a slice is the revision at which that slice last changed.
    pub fn slices_since(
        &self,
        previous: &BTreeMap<MemberId, Slice>,
        swarm: &str,
        revision: u64,
    ) -> BTreeMap<MemberId, Slice> {
        self.slices(swarm, revision)
            .into_iter()
            .map(|(member, slice)| match previous.get(&member) {
                Some(old) if old.hash == slice.hash && old.swarm == slice.swarm => {
                    (member, old.clone())
                }
                _ => (member, slice),
            })
            .collect()
    }

    pub(crate) fn member_index(&self, member: &MemberId) -> Option<usize> {
        self.members.binary_search(member).ok()
    }

    pub(crate) fn availability(&self) -> &[bool] {
        &self.available
    }
}
