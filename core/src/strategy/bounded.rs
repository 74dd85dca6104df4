//! `bounded`: deterministic bounded loads on top of jump.
//!
//! # Algorithm
//!
//! Let `S` be the number of slots (every ordinal `0..=max` of every pool,
//! listed or not) and `n` the number of available members.
//!
//! 1. **Base.** Every key goes to its jump slot (pool by weighted
//!    rendezvous, ordinal by jump; see the module docs of `strategy`).
//! 2. **Shed.** With the slot cap `C_S = ceil((1+ε)·k/S)` (exactly
//!    `ceil(k/S)` for ε = 0), a slot whose base load exceeds `C_S` keeps its
//!    `C_S` keys with the lowest `(key_hash, key)` and sheds the rest.
//! 3. **Place shed keys.** Shed keys, in `(key_hash, key)` order, go to the
//!    first slot of their probe sequence (jump slot of `mix(key_hash, a)` for
//!    `a = 1, 2, …`, then the rendezvous-best slot) that is below `C_S`.
//!    Steps 1–3 ignore availability: they give every slot exactly what it
//!    would own if every member were present.
//! 4. **Holes.** Keys on a slot whose member is unavailable or not listed
//!    are re-placed, in `(key_hash, key)` order, on the first available
//!    member of their probe sequence below `C_n = ceil((1+ε)·k/n)`.
//!
//! Consequences: the largest load is at most `C_n` (= `ceil(k/n)` for
//! ε = 0: slot loads never exceed `C_S ≤ C_n`, and step 4 fills under `C_n`);
//! a member becoming unavailable moves only its own keys, and they return
//! when it comes back (steps 1–3 do not depend on availability); adding or
//! removing a job changes one base load, so it moves a handful of other keys
//! at most; scaling a pool moves jump's keys plus the change in the shed
//! sets, whose size is the base's imbalance (~`sqrt(k·S)` in total), so the
//! ratio to the lower bound tends to 1 as `k/S` grows.
//!
//! # Why not exact quotas
//!
//! A "balanced jump" variant (jump's recurrence with exact per-step quotas
//! over keys ranked by hash) moved exactly the lower bound on every scale
//! step, but adding a single job re-ranked the keys and moved up to ~S²/3
//! others (1,239 of 10,000 keys at 64 members). Job lists change far more
//! often than pools, so that variant was dropped.

use crate::hash::key_hash;
use crate::job::JobSet;

use super::topology::{NONE, Topology};

pub(crate) fn assign(topology: &Topology, jobs: &JobSet, epsilon: f64) -> Vec<u32> {
    let key_count = jobs.len();
    if key_count == 0 {
        return Vec::new();
    }
    let hashes: Vec<u64> = jobs.iter().map(|key| key_hash(key.as_bytes())).collect();
    let slot_count = topology.slot_member.len();
    let slot_cap = cap(key_count, slot_count, epsilon);

    // 1. Base: jump slot per key.
    let mut slot_of: Vec<u32> = topology.jump_slots(&hashes);
    let mut slot_loads = vec![0usize; slot_count];
    for &slot in &slot_of {
        slot_loads[slot as usize] += 1;
    }

    // 2. Shed: over-full slots keep their lowest (hash, index) keys.
    let mut shed: Vec<(u64, u32)> = Vec::new();
    let over_full: Vec<bool> = slot_loads.iter().map(|&load| load > slot_cap).collect();
    if over_full.iter().any(|&over| over) {
        let mut keys_of_slot: Vec<Vec<(u64, u32)>> = vec![Vec::new(); slot_count];
        for (index, &slot) in slot_of.iter().enumerate() {
            if over_full[slot as usize] {
                keys_of_slot[slot as usize].push((hashes[index], index as u32));
            }
        }
        for (slot, keys) in keys_of_slot.iter_mut().enumerate() {
            if keys.len() > slot_cap {
                keys.select_nth_unstable(slot_cap);
                shed.extend_from_slice(&keys[slot_cap..]);
                slot_loads[slot] = slot_cap;
            }
        }
    }

    // 3. Shed keys take the first probed slot with room.
    shed.sort_unstable();
    for &(hash, index) in &shed {
        let slot = topology.probe_slot(hash, |slot| slot_loads[slot as usize] < slot_cap);
        // slot_cap · slot_count ≥ key_count, so some slot has room.
        debug_assert_ne!(slot, NONE);
        if slot != NONE {
            slot_loads[slot as usize] += 1;
            slot_of[index as usize] = slot;
        }
    }

    // 4. Keys on holes go to available members with room under the member cap.
    let member_cap = cap(key_count, topology.available_count, epsilon);
    let mut owners = vec![NONE; key_count];
    let mut member_loads = vec![0usize; topology.members.len()];
    let mut homeless: Vec<(u64, u32)> = Vec::new();
    for (index, &slot) in slot_of.iter().enumerate() {
        let member = topology.slot_member[slot as usize];
        if member != NONE && topology.available[member as usize] {
            owners[index] = member;
            member_loads[member as usize] += 1;
        } else {
            homeless.push((hashes[index], index as u32));
        }
    }
    homeless.sort_unstable();
    for (hash, index) in homeless {
        let member = topology.probe(hash, |member| member_loads[member as usize] < member_cap);
        debug_assert_ne!(member, NONE);
        if member != NONE {
            member_loads[member as usize] += 1;
        }
        owners[index as usize] = member;
    }
    owners
}

/// The load cap for `keys` over `bins`: `ceil(k/bins)` for `epsilon = 0`,
/// else `max(ceil(k/bins), ceil((1+epsilon)·k/bins))`.
pub(crate) fn cap(keys: usize, bins: usize, epsilon: f64) -> usize {
    let exact = keys.div_ceil(bins.max(1));
    if epsilon == 0.0 {
        exact
    } else {
        let loose = ((1.0 + epsilon) * keys as f64 / bins.max(1) as f64).ceil();
        if loose >= usize::MAX as f64 {
            usize::MAX
        } else {
            exact.max(loose as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_the_ceiling_of_the_mean_without_slack() {
        assert_eq!(cap(27, 2, 0.0), 14);
        assert_eq!(cap(27, 3, 0.0), 9);
        assert_eq!(cap(10, 4, 0.5), 4);
        assert_eq!(cap(10, 4, 0.01), 3);
        assert_eq!(cap(0, 4, 0.0), 0);
    }
}
