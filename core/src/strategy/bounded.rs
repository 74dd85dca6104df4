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
    // Keys per pool, ranked by (hash, index); index order is byte order of
    // the keys, so equal hashes tie-break deterministically.
    let hashed = jobs
        .iter()
        .enumerate()
        .map(|(index, key)| (key_hash(key.as_bytes()), index as u32));
    let mut ranked: Vec<Vec<(u64, u32)>> = vec![Vec::new(); topology.pools.len()];
    if topology.pools.len() == 1 {
        ranked[0] = hashed.collect();
    } else {
        for (hash, index) in hashed {
            ranked[topology.pool_of(hash)].push((hash, index));
        }
    }
    let mut loads = vec![0usize; topology.members.len()];
    let cap = cap(key_count, topology.available_count, epsilon);
    let mut pending: Vec<(u64, u32)> = Vec::new();
    for (pool, keys) in topology.pools.iter().zip(ranked.iter_mut()) {
        sort_by_hash(keys);
        let slot_of_rank = balanced_slots(keys.len(), pool.slots.len());
        // Walking ranks upwards, a member past the cap sheds its
        // highest-ranked keys, matching the recurrence's notion of which
        // keys are the most mobile.
        for (&(hash, index), &slot) in keys.iter().zip(slot_of_rank.iter()) {
            let member = pool.slots[slot as usize];
            if member != NONE && topology.available[member as usize] && loads[member as usize] < cap
            {
                loads[member as usize] += 1;
                owners[index as usize] = member;
            } else {
                pending.push((hash, index));
            }
        }
    }
    sort_by_hash(&mut pending);
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

/// Below this many keys a comparison sort beats the radix passes.
const RADIX_THRESHOLD: usize = 1 << 12;

/// Sorts `(hash, index)` pairs. Three stable 11-bit radix passes order them
/// by the top 33 hash bits (key hashes are uniform, so that is nearly a total
/// order); an insertion pass then fixes the rare runs sharing those bits,
/// giving exactly the `(hash, index)` order in linear time.
fn sort_by_hash(keys: &mut Vec<(u64, u32)>) {
    if keys.len() < RADIX_THRESHOLD {
        keys.sort_unstable();
        return;
    }
    let mut scattered = vec![(0u64, 0u32); keys.len()];
    let mut offsets = vec![0usize; 1 << 11];
    for shift in [31u32, 42, 53] {
        offsets.fill(0);
        for &(hash, _) in keys.iter() {
            offsets[((hash >> shift) & 0x7ff) as usize] += 1;
        }
        let mut next = 0;
        for slot in offsets.iter_mut() {
            let count = *slot;
            *slot = next;
            next += count;
        }
        for &item in keys.iter() {
            let digit = ((item.0 >> shift) & 0x7ff) as usize;
            scattered[offsets[digit]] = item;
            offsets[digit] += 1;
        }
        std::mem::swap(keys, &mut scattered);
    }
    for at in 1..keys.len() {
        let mut position = at;
        while position > 0 && keys[position - 1] > keys[position] {
            keys.swap(position - 1, position);
            position -= 1;
        }
    }
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
        received.sort_unstable();
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
    for (slot, slot_intervals) in balanced_intervals(keys, slots).iter().enumerate() {
        for &(start, end) in slot_intervals {
            for rank in start..end {
                slot_of_rank[rank as usize] = slot as u32;
            }
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
    fn the_radix_sort_orders_by_hash_then_index() {
        let mut keys: Vec<(u64, u32)> = (0..20_000u32)
            .map(|index| {
                (
                    crate::hash::mix(u64::from(index % 5_000), 3) & !0xff_u64,
                    index,
                )
            })
            .collect();
        // Hashes repeat (index % 5000) and share low bits, exercising the
        // insertion pass and the index tie-break.
        keys.push((u64::MAX, 7));
        keys.push((0, 9));
        let mut expected = keys.clone();
        expected.sort_unstable();
        sort_by_hash(&mut keys);
        assert_eq!(keys, expected);
    }

    #[test]
    fn the_cap_is_the_ceiling_of_the_mean_without_slack() {
        assert_eq!(cap(27, 2, 0.0), 14);
        assert_eq!(cap(27, 3, 0.0), 9);
        assert_eq!(cap(10, 4, 0.5), 4);
        assert_eq!(cap(10, 4, 0.01), 3);
    }
}
