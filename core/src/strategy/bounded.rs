//! `bounded`: deterministic bounded loads on top of jump.
//!
//! # Algorithm
//!
//! 1. **Pool.** Each key picks its pool as in `jump` (weighted rendezvous;
//!    skipped for a single pool).
//! 2. **Balanced jump within the pool.** Jump hashing is a recurrence: going
//!    from `j` to `j+1` slots, every key independently moves to the new slot
//!    with probability `1/(j+1)`. Balanced jump runs the same recurrence with
//!    exact quotas instead of coin flips. Rank the pool's keys by
//!    `(key_hash, key)`. With one slot, slot 0 holds every key. Going from
//!    `j` to `j+1` slots, the targets are `q = k/(j+1)` keys per slot plus one
//!    for the first `k mod (j+1)` slots; every old slot `i` hands its
//!    `load_i − target_i` *highest-ranked* keys to the new slot `j`. Old loads
//!    never fall below their new targets (shown in the tests), so the result
//!    at `s` slots is exactly balanced (`ceil(k/s)` or `floor(k/s)` per slot)
//!    and the step from `s` to `s+1` moves exactly the keys the new slot
//!    receives, all of which had to leave members above the new ceiling or
//!    rounding forced it: the movement of scaling at the end of a pool equals
//!    the lower bound up to rounding (see [`crate::diff::lower_bound`]). Each
//!    slot's keys are kept as a list of rank intervals, so the cost is
//!    `O(k log k)` for ranking plus `O(s² + k)` for the recurrence.
//! 3. **Cap and re-placement.** The cap is `ceil(k/n)` for `epsilon = 0` and
//!    `max(ceil(k/n), ceil((1+epsilon)·k/n))` otherwise, `n` counting available
//!    members. Keys whose slot is a hole (member missing or unavailable), and
//!    the highest-ranked keys of any member above the cap (only possible with
//!    several pools), are *pending*. Pending keys are processed in
//!    `(key_hash, key)` order; each goes to the first member of its probe
//!    sequence (see `Topology::probe`) that is below the cap. Since base loads
//!    never exceed `ceil(k/slots) ≤ ceil(k/n)` in a single pool, a member
//!    becoming unavailable moves only its own keys, and they return when it
//!    comes back.

use crate::hash::key_hash;
use crate::job::JobSet;

use super::topology::{NONE, Topology};

pub(crate) fn assign(topology: &Topology, jobs: &JobSet, epsilon: f64) -> Vec<u32> {
    let key_count = jobs.len();
    let mut owners = vec![NONE; key_count];
    if key_count == 0 {
        return owners;
    }
    let hashes: Vec<u64> = jobs.iter().map(|key| key_hash(key.as_bytes())).collect();
    let mut loads = vec![0usize; topology.members.len()];
    let cap = cap(key_count, topology.available_count, epsilon);
    let mut pending: Vec<(u64, u32)> = Vec::new();
    let mut pool_keys: Vec<Vec<u32>> = Vec::new();
    if topology.pools.len() > 1 {
        pool_keys = vec![Vec::new(); topology.pools.len()];
        for (index, &hash) in hashes.iter().enumerate() {
            pool_keys[topology.pool_of(hash)].push(index as u32);
        }
    }
    for (pool_index, pool) in topology.pools.iter().enumerate() {
        let ranked = if topology.pools.len() == 1 {
            rank(&hashes, 0..key_count as u32)
        } else {
            rank(&hashes, pool_keys[pool_index].iter().copied())
        };
        let slot_of_rank = balanced_slots(ranked.len(), pool.slots.len());
        // Walking ranks upwards, a member past the cap sheds its
        // highest-ranked keys, matching the recurrence's notion of which
        // keys are the most mobile.
        for (&index, &slot) in ranked.iter().zip(slot_of_rank.iter()) {
            let member = pool.slots[slot as usize];
            if member != NONE && topology.available[member as usize] && loads[member as usize] < cap
            {
                loads[member as usize] += 1;
                owners[index as usize] = member;
            } else {
                pending.push((hashes[index as usize], index));
            }
        }
    }
    pending.sort_unstable();
    for (hash, index) in pending {
        let member = topology.probe(hash, |member| loads[member as usize] < cap);
        // The cap times the available count is at least the key count, so a
        // member with room always exists.
        debug_assert_ne!(member, NONE);
        if member != NONE {
            loads[member as usize] += 1;
        }
        owners[index as usize] = member;
    }
    owners
}

/// The load cap for `keys` over `available` members.
pub(crate) fn cap(keys: usize, available: usize, epsilon: f64) -> usize {
    let exact = keys.div_ceil(available);
    if epsilon == 0.0 {
        exact
    } else {
        let loose = ((1.0 + epsilon) * keys as f64 / available as f64).ceil();
        if loose >= usize::MAX as f64 {
            usize::MAX
        } else {
            exact.max(loose as usize)
        }
    }
}

/// Bits of a packed sort word that hold the key index.
const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// The key indices in rank order: ascending `(hash, index)`; index order is
/// the keys' byte order, so equal hashes tie-break deterministically.
///
/// Up to 2^24 keys, each key is packed into one word (top 40 hash bits, then
/// the index), which halves the memory traffic of sorting; runs that share
/// the top 40 bits (rare) are then re-sorted by the full hash.
fn rank(hashes: &[u64], indices: impl Iterator<Item = u32>) -> Vec<u32> {
    if hashes.len() as u64 > INDEX_MASK + 1 {
        let mut pairs: Vec<(u64, u32)> = indices
            .map(|index| (hashes[index as usize], index))
            .collect();
        pairs.sort_unstable();
        return pairs.into_iter().map(|(_, index)| index).collect();
    }
    let mut packed: Vec<u64> = indices
        .map(|index| (hashes[index as usize] & !INDEX_MASK) | u64::from(index))
        .collect();
    packed.sort_unstable();
    let mut ranked: Vec<u32> = packed
        .iter()
        .map(|word| (word & INDEX_MASK) as u32)
        .collect();
    let mut start = 0;
    while start < packed.len() {
        let prefix = packed[start] >> INDEX_BITS;
        let mut end = start + 1;
        while end < packed.len() && packed[end] >> INDEX_BITS == prefix {
            end += 1;
        }
        if end - start > 1 {
            ranked[start..end].sort_unstable_by_key(|&index| (hashes[index as usize], index));
        }
        start = end;
    }
    ranked
}

/// Balanced jump: the rank intervals `[start, end)` of each slot, ascending,
/// for ranks `0..keys` over `slots` slots.
pub(crate) fn balanced_intervals(keys: usize, slots: usize) -> Vec<Vec<(u32, u32)>> {
    let mut intervals: Vec<Vec<(u32, u32)>> = Vec::with_capacity(slots.max(1));
    intervals.push(if keys == 0 {
        Vec::new()
    } else {
        vec![(0, keys as u32)]
    });
    let mut loads: Vec<usize> = vec![keys];
    for new_slot in 1..slots {
        let total = new_slot + 1;
        let base = keys / total;
        let extra = keys % total;
        let target = |slot: usize| base + usize::from(slot < extra);
        let mut received: Vec<(u32, u32)> = Vec::new();
        for (slot, slot_intervals) in intervals.iter_mut().enumerate() {
            let mut give = loads[slot].saturating_sub(target(slot));
            loads[slot] -= give;
            while give > 0 {
                let Some(last) = slot_intervals.last_mut() else {
                    break;
                };
                let length = (last.1 - last.0) as usize;
                if length <= give {
                    received.push(*last);
                    slot_intervals.pop();
                    give -= length;
                } else {
                    let start = last.1 - give as u32;
                    received.push((start, last.1));
                    last.1 = start;
                    give = 0;
                }
            }
        }
        // Intervals are disjoint: ordering by start is a total order.
        received.sort_unstable_by_key(|interval| interval.0);
        loads.push(
            received
                .iter()
                .map(|(start, end)| (end - start) as usize)
                .sum(),
        );
        intervals.push(received);
    }
    intervals
}

/// Balanced jump: the slot of each rank `0..keys` over `slots` slots.
pub(crate) fn balanced_slots(keys: usize, slots: usize) -> Vec<u32> {
    let mut slot_of_rank = vec![0u32; keys];
    if slots <= 1 {
        return slot_of_rank;
    }
    for (slot, slot_intervals) in balanced_intervals(keys, slots).iter().enumerate() {
        for &(start, end) in slot_intervals {
            slot_of_rank[start as usize..end as usize].fill(slot as u32);
        }
    }
    slot_of_rank
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_jump_gives_every_slot_floor_or_ceil_of_the_mean() {
        for keys in [0usize, 1, 5, 27, 100, 1001] {
            for slots in 1..40usize {
                let slot_of_rank = balanced_slots(keys, slots);
                let mut loads = vec![0usize; slots];
                for slot in slot_of_rank {
                    loads[slot as usize] += 1;
                }
                for (slot, load) in loads.iter().enumerate() {
                    let expected = keys / slots + usize::from(slot < keys % slots);
                    assert_eq!(*load, expected, "keys={keys} slots={slots} slot={slot}");
                }
            }
        }
    }

    #[test]
    fn balanced_jump_moves_keys_only_into_the_new_slot() {
        for keys in [7usize, 27, 500] {
            for slots in 1..30usize {
                let before = balanced_slots(keys, slots);
                let after = balanced_slots(keys, slots + 1);
                for (rank, (old, new)) in before.iter().zip(after.iter()).enumerate() {
                    assert!(
                        old == new || *new as usize == slots,
                        "keys={keys} rank={rank} moved {old}->{new} growing to {}",
                        slots + 1
                    );
                }
            }
        }
    }

    #[test]
    fn ranking_orders_by_full_hash_then_index() {
        // Hashes that share their top 40 bits (and repeat outright) exercise
        // the fix-up of packed runs and the index tie-break.
        let hashes: Vec<u64> = (0..20_000u64)
            .map(|i| {
                (crate::hash::mix(i % 300, 3) & !0xff_ffff) | (((i * 7919) % 5) << 30) | (i % 11)
            })
            .collect();
        let mut expected: Vec<(u64, u32)> = hashes
            .iter()
            .enumerate()
            .map(|(index, &hash)| (hash, index as u32))
            .collect();
        expected.sort_unstable();
        let expected: Vec<u32> = expected.into_iter().map(|(_, index)| index).collect();
        assert_eq!(rank(&hashes, 0..hashes.len() as u32), expected);
    }

    #[test]
    fn the_cap_is_the_ceiling_of_the_mean_without_slack() {
        assert_eq!(cap(27, 2, 0.0), 14);
        assert_eq!(cap(27, 3, 0.0), 9);
        assert_eq!(cap(10, 4, 0.5), 4);
        assert_eq!(cap(10, 4, 0.01), 3);
    }
}
