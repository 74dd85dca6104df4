//! `jump`: Lamping–Veach jump consistent hashing over each pool's ordinals.

use super::topology::{NONE, Topology};

/// Owner (member index) per key hash. Keys whose jump home is a hole follow
/// their probe sequence to the first available member; nothing else moves.
pub(crate) fn assign(topology: &Topology, hashes: impl Iterator<Item = u64>) -> Vec<u32> {
    let hashes: Vec<u64> = hashes.collect();
    let slots = topology.jump_slots(&hashes);
    hashes
        .iter()
        .zip(slots)
        .map(|(&hash, slot)| {
            let home = topology.slot_member[slot as usize];
            if home != NONE && topology.available[home as usize] {
                home
            } else {
                topology.probe(hash, |_| true)
            }
        })
        .collect()
}
