//! The frozen key hash and the mixing functions derived from it.
//!
//! # The key hash
//!
//! [`key_hash`] is **XXH3-64 with seed 0** over the raw key bytes, exactly as
//! published in the xxHash specification (`XXH3_64bits`). It was chosen because
//! it is a published, versioned, platform-independent algorithm with reference
//! implementations in every language (a worker written in Go or Python can
//! recompute it), it is fast on short keys (a few ns), and its output is well
//! distributed. `std`'s `DefaultHasher` is explicitly unstable across Rust
//! releases and is never used. SHA-256 would also be frozen but costs ~10×
//! more per key for no benefit here.
//!
//! Golden vectors live in `core/tests/fixtures/key_hash_vectors.txt`; the test
//! `key_hash_matches_the_committed_golden_vectors` fails if this function ever
//! changes. Changing it would reshuffle every assignment of every user.
//!
//! # Mixing
//!
//! Strategies need several independent pseudo-random values per key (retry
//! probes, rendezvous scores). They derive them from the key hash with
//! [`mix`], the SplitMix64 finaliser applied to `a ^ (b · φ64)`. It is pure
//! 64-bit integer arithmetic and therefore identical on every platform; it is
//! frozen together with the key hash (the golden slice fixtures cover it).

/// The frozen 64-bit hash of a job key: XXH3-64, seed 0, over the key bytes.
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The hash identifying a member or pool name in rendezvous scoring and ring
/// points: [`key_hash`] of its UTF-8 bytes.
pub fn name_hash(name: &str) -> u64 {
    key_hash(name.as_bytes())
}

/// Combines two 64-bit values into a well-distributed third (SplitMix64
/// finaliser of `a ^ (b · 0x9E3779B97F4A7C15)`). Frozen.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Lamping–Veach jump consistent hash: maps `key` to a bucket in
/// `0..buckets` so that growing `buckets` by one moves only ~1/(buckets+1) of
/// the keys, all of them into the new bucket. `buckets == 0` returns 0.
///
/// This is the published algorithm (arXiv:1406.2294) with its 64-bit LCG and
/// the IEEE-754 double division it specifies; Rust guarantees IEEE-754
/// semantics for `f64` on every supported target, so the result is portable.
pub fn jump_bucket(mut key: u64, buckets: u32) -> u32 {
    let mut bucket: i64 = -1;
    let mut next: i64 = 0;
    while next < i64::from(buckets) {
        bucket = next;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        next = ((bucket + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    bucket.max(0) as u32
}

/// Lanes of [`jump_buckets`]: enough independent divisions in flight to
/// hide their latency (measured fastest on x86-64; any value gives the same
/// results).
const JUMP_LANES: usize = 8;

/// [`jump_bucket`] for many keys with the same bucket count; the result is
/// identical key by key. Keys are processed eight at a time in lockstep, so
/// the CPU overlaps their dependent float divisions (about twice as fast).
pub fn jump_buckets(keys: &[u64], buckets: u32) -> Vec<u32> {
    let mut out = Vec::with_capacity(keys.len());
    let limit = i64::from(buckets);
    let mut chunks = keys.chunks_exact(JUMP_LANES);
    for chunk in &mut chunks {
        let mut key = [0u64; JUMP_LANES];
        key.copy_from_slice(chunk);
        let mut bucket = [-1i64; JUMP_LANES];
        let mut next = [0i64; JUMP_LANES];
        loop {
            let mut active = false;
            for lane in 0..JUMP_LANES {
                if next[lane] < limit {
                    active = true;
                    bucket[lane] = next[lane];
                    key[lane] = key[lane]
                        .wrapping_mul(2_862_933_555_777_941_757)
                        .wrapping_add(1);
                    next[lane] = ((bucket[lane] + 1) as f64
                        * ((1u64 << 31) as f64 / ((key[lane] >> 33) + 1) as f64))
                        as i64;
                }
            }
            if !active {
                break;
            }
        }
        out.extend(bucket.iter().map(|&b| b.max(0) as u32));
    }
    out.extend(
        chunks
            .remainder()
            .iter()
            .map(|&key| jump_bucket(key, buckets)),
    );
    out
}

/// Maps a 64-bit hash to a uniform float in the open interval (0, 1), used by
/// weighted rendezvous scoring (`-weight / ln(u)`).
pub(crate) fn unit_interval(hash: u64) -> f64 {
    // 52 random bits, offset by half a step so that neither 0 nor 1 occurs;
    // (2^52 - 0.5) still fits a double's 53-bit significand exactly.
    ((hash >> 12) as f64 + 0.5) / (1u64 << 52) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jump_matches_the_reference_implementation_on_known_values() {
        // The test vectors shared by the reference implementations (Go, C, Python).
        let vectors: [(u64, u32, u32); 9] = [
            (1, 1, 0),
            (42, 57, 43),
            (0xDEAD_10CC, 1, 0),
            (0xDEAD_10CC, 666, 361),
            (256, 1024, 520),
            (1, 128, 55),
            (129, 128, 120),
            (128, 100_000_000, 38_172_097),
            (u64::MAX, 128, 92),
        ];
        for (key, buckets, bucket) in vectors {
            assert_eq!(jump_bucket(key, buckets), bucket, "jump({key}, {buckets})");
        }
        // Monotonicity: a key only ever moves to the newly added bucket.
        for key in 0..2000u64 {
            let h = mix(key, 7);
            let mut previous = jump_bucket(h, 1);
            for n in 2..100 {
                let now = jump_bucket(h, n);
                assert!(
                    now == previous || now == n - 1,
                    "key {key} jumped {previous}->{now} at n={n}"
                );
                previous = now;
            }
        }
    }

    #[test]
    fn batched_jump_equals_jump_key_by_key() {
        let keys: Vec<u64> = (0..1003u64).map(|i| mix(i, 11)).collect();
        for buckets in [0u32, 1, 2, 7, 64, 1000, 65_536] {
            let single: Vec<u32> = keys.iter().map(|&key| jump_bucket(key, buckets)).collect();
            assert_eq!(jump_buckets(&keys, buckets), single, "buckets={buckets}");
        }
    }

    #[test]
    fn unit_interval_never_reaches_zero_or_one() {
        assert!(unit_interval(0) > 0.0);
        assert!(unit_interval(u64::MAX) < 1.0);
    }
}
