//! `ring`: a consistent-hash ring with virtual nodes, over the frozen hash.
//!
//! The `hashring` crate was not used: it hashes through `std::hash::Hash`
//! impls (whose byte streams, e.g. length prefixes of `usize` width, are not a
//! stable format across platforms and Rust releases), so its placements are
//! not frozen. Here, point `v` of member `m` is
//! `key_hash("<pool>-<ordinal>#<v>")`, and a key belongs to the first point
//! at or after its key hash, wrapping around. Only available members have
//! points, so an unavailable member's keys go to the following points and come
//! back when it returns; no other key moves.

use crate::hash::key_hash;

use super::topology::Topology;

pub(crate) fn assign(
    topology: &Topology,
    hashes: impl Iterator<Item = u64>,
    vnodes: u32,
) -> Vec<u32> {
    let mut points: Vec<(u64, u32)> =
        Vec::with_capacity(topology.available_count * vnodes as usize);
    for (index, id) in topology.members.iter().enumerate() {
        if !topology.available[index] {
            continue;
        }
        let name = id.to_string();
        for vnode in 0..vnodes {
            points.push((key_hash(format!("{name}#{vnode}").as_bytes()), index as u32));
        }
    }
    // Ties between points (a 64-bit collision) resolve by member order.
    points.sort_unstable();
    hashes
        .map(|hash| {
            let at = points.partition_point(|point| point.0 < hash);
            points.get(at).unwrap_or(&points[0]).1
        })
        .collect()
}
