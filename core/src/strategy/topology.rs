//! The canonical view of a member list shared by the strategies: members
//! sorted by (pool, ordinal), pools with their ordinal slots, and the
//! deterministic probe sequence used to re-place keys.
//!
//! Members with generated names (Deployment pods) have no ordinal: each takes
//! one slot after its pool's ordinal slots, and a pool holding any of them
//! picks the slot of a key by rendezvous (highest `mix(key_hash, slot_hash)`,
//! where a generated member's slot hash is `name_hash(<pod name>)`) instead of
//! jump. Rendezvous depends only on the set of names, not on their positions,
//! so a pod replaced or added moves only the keys of the slot that left or
//! came (jump over positions in name order would reshuffle every later pod).

use crate::hash::{jump_bucket, jump_buckets, mix, name_hash, unit_interval};
use crate::member::{Member, MemberId};

use super::AssignError;

/// Highest supported ordinal in a pool. Slots `0..=ordinal` are materialised,
/// so the bound keeps memory proportional to real pool sizes.
pub const MAX_ORDINAL: u32 = 99_999;

/// Probes tried before the exhaustive rendezvous fallback.
const MAX_PROBES: u64 = 64;

/// Marker for "no member" in slot and owner tables.
pub(crate) const NONE: u32 = u32::MAX;

pub(crate) struct Pool {
    pub name: String,
    pub hash: u64,
    /// Global index of this pool's slot 0 (pools' slots are numbered
    /// consecutively in pool order).
    pub first_slot: u32,
    /// Weight in the pool-level rendezvous: the slot count.
    pub weight: f64,
    /// Member index per slot: ordinals first ([`NONE`] for ordinals not
    /// listed), then one slot per generated member in name order.
    pub slots: Vec<u32>,
    /// How many of `slots` are ordinal slots.
    pub ordinal_slots: usize,
    /// The pool holds generated members: slots are chosen by rendezvous.
    pub rendezvous: bool,
}

pub(crate) struct Topology {
    pub members: Vec<MemberId>,
    pub available: Vec<bool>,
    pub member_hash: Vec<u64>,
    pub pools: Vec<Pool>,
    pub available_count: usize,
    /// Member index per global slot, [`NONE`] for ordinals not listed.
    pub slot_member: Vec<u32>,
    /// Rendezvous hash per global slot: `name_hash("<pool>-<ordinal>")`, or
    /// `name_hash(<pod name>)` for a generated member.
    pub slot_hash: Vec<u64>,
}

impl Topology {
    pub fn new(members: &[Member]) -> Result<Topology, AssignError> {
        let mut sorted: Vec<(&MemberId, bool)> = members
            .iter()
            .map(|member| (&member.id, member.available))
            .collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(AssignError::DuplicateMember {
                member: pair[0].0.clone(),
            });
        }
        if let Some((id, _)) = sorted
            .iter()
            .find(|(id, _)| id.ordinal().is_some_and(|ordinal| ordinal > MAX_ORDINAL))
        {
            return Err(AssignError::OrdinalTooLarge {
                member: (*id).clone(),
            });
        }
        let available_count = sorted.iter().filter(|(_, available)| *available).count();
        if available_count == 0 {
            return Err(AssignError::NoMembers {
                members: sorted.len(),
            });
        }
        let mut pools: Vec<Pool> = Vec::new();
        let mut previous_pool: Option<&str> = None;
        for (index, (id, _)) in sorted.iter().enumerate() {
            if previous_pool != Some(id.pool.as_str()) {
                pools.push(Pool {
                    name: id.pool.clone(),
                    hash: name_hash(&id.pool),
                    first_slot: 0,
                    weight: 0.0,
                    slots: Vec::new(),
                    ordinal_slots: 0,
                    rendezvous: false,
                });
                previous_pool = Some(id.pool.as_str());
            }
            if let Some(pool) = pools.last_mut() {
                // Ordinal members sort before generated ones, so generated slots follow
                // every ordinal slot of the pool.
                match id.ordinal() {
                    Some(ordinal) => {
                        let ordinal = ordinal as usize;
                        if pool.slots.len() <= ordinal {
                            pool.slots.resize(ordinal + 1, NONE);
                        }
                        pool.slots[ordinal] = index as u32;
                        pool.ordinal_slots = pool.slots.len();
                    }
                    None => {
                        pool.slots.push(index as u32);
                        pool.rendezvous = true;
                    }
                }
            }
        }
        let mut slot_member = Vec::new();
        let mut slot_hash = Vec::new();
        for pool in &mut pools {
            pool.weight = pool.slots.len() as f64;
            pool.first_slot = slot_member.len() as u32;
            slot_member.extend_from_slice(&pool.slots);
        }
        for pool in &pools {
            for ordinal in 0..pool.ordinal_slots {
                slot_hash.push(name_hash(&format!("{}-{ordinal}", pool.name)));
            }
            for &member in &pool.slots[pool.ordinal_slots..] {
                slot_hash.push(name_hash(&sorted[member as usize].0.pod_name()));
            }
        }
        Ok(Topology {
            slot_member,
            slot_hash,
            member_hash: sorted
                .iter()
                .map(|(id, _)| name_hash(&id.to_string()))
                .collect(),
            available: sorted.iter().map(|(_, available)| *available).collect(),
            members: sorted.into_iter().map(|(id, _)| id.clone()).collect(),
            pools,
            available_count,
        })
    }

    /// The pool a hash belongs to: weighted rendezvous over pools.
    pub fn pool_of(&self, hash: u64) -> usize {
        if self.pools.len() == 1 {
            return 0;
        }
        let mut best = 0;
        let mut best_score = f64::NEG_INFINITY;
        for (index, pool) in self.pools.iter().enumerate() {
            let score = -pool.weight / unit_interval(mix(hash, pool.hash)).ln();
            if score > best_score {
                best_score = score;
                best = index;
            }
        }
        best
    }

    /// The jump home of a hash as a global slot: pool by rendezvous, ordinal
    /// by jump.
    /// (Rendezvous within a pool holding generated members.)
    pub fn jump_slot(&self, hash: u64) -> u32 {
        let pool = &self.pools[self.pool_of(hash)];
        if pool.rendezvous {
            return self.rendezvous_slot(pool, hash);
        }
        pool.first_slot + jump_bucket(hash, pool.slots.len() as u32)
    }

    /// The slot of `pool` with the highest `mix(hash, slot_hash)` (ties: lowest slot).
    fn rendezvous_slot(&self, pool: &Pool, hash: u64) -> u32 {
        let first = pool.first_slot as usize;
        let mut best = pool.first_slot;
        let mut best_score = 0u64;
        for (offset, slot_hash) in self.slot_hash[first..first + pool.slots.len()]
            .iter()
            .enumerate()
        {
            let score = mix(hash, *slot_hash);
            if offset == 0 || score > best_score {
                best = pool.first_slot + offset as u32;
                best_score = score;
            }
        }
        best
    }

    /// [`Topology::jump_slot`] of every hash (batched for a single pool).
    pub fn jump_slots(&self, hashes: &[u64]) -> Vec<u32> {
        if self.pools.len() == 1 && !self.pools[0].rendezvous {
            jump_buckets(hashes, self.pools[0].slots.len() as u32)
        } else {
            hashes.iter().map(|&hash| self.jump_slot(hash)).collect()
        }
    }

    /// The jump home of a hash: the member index, or [`NONE`] for a hole.
    pub fn jump_home(&self, hash: u64) -> u32 {
        self.slot_member[self.jump_slot(hash) as usize]
    }

    /// Like [`Topology::probe`] but over slots, regardless of availability:
    /// probe `a` is the jump slot of `mix(hash, a)`, then the accepted slot
    /// with the highest `mix(hash, slot_hash)`.
    pub fn probe_slot(&self, hash: u64, mut has_room: impl FnMut(u32) -> bool) -> u32 {
        for attempt in 1..=MAX_PROBES {
            let candidate = self.jump_slot(mix(hash, attempt));
            if has_room(candidate) {
                return candidate;
            }
        }
        let mut best = NONE;
        let mut best_score = 0u64;
        for (slot, slot_hash) in self.slot_hash.iter().enumerate() {
            let slot = slot as u32;
            if !has_room(slot) {
                continue;
            }
            let score = mix(hash, *slot_hash);
            if best == NONE || score > best_score {
                best = slot;
                best_score = score;
            }
        }
        best
    }

    /// The first member in the key's probe sequence that is available and
    /// accepted by `has_room`. Probe `a` (1, 2, …) is the jump home of
    /// `mix(hash, a)`; after [`MAX_PROBES`] misses, the accepted member with
    /// the highest rendezvous score `mix(hash, name_hash(member))` wins.
    /// Returns [`NONE`] only if no member is accepted at all.
    pub fn probe(&self, hash: u64, mut has_room: impl FnMut(u32) -> bool) -> u32 {
        for attempt in 1..=MAX_PROBES {
            let candidate = self.jump_home(mix(hash, attempt));
            if candidate != NONE && self.available[candidate as usize] && has_room(candidate) {
                return candidate;
            }
        }
        let mut best = NONE;
        let mut best_score = 0u64;
        for (index, member_hash) in self.member_hash.iter().enumerate() {
            let index = index as u32;
            if !self.available[index as usize] || !has_room(index) {
                continue;
            }
            let score = mix(hash, *member_hash);
            if best == NONE || score > best_score {
                best = index;
                best_score = score;
            }
        }
        best
    }
}
