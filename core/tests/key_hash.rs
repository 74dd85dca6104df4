//! The key hash is frozen: these vectors come from the reference xxHash
//! implementation, not from the code under test.

use shoal_core::hash::{jump_bucket, key_hash, mix};

fn decode_hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("fixture hex"))
        .collect()
}

#[test]
fn key_hash_matches_the_committed_golden_vectors() {
    let fixture = include_str!("fixtures/key_hash_vectors.txt");
    let mut checked = 0;
    for line in fixture
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
    {
        let (hash, key) = line.split_once(' ').expect("fixture line has two fields");
        let key = if key == "-" {
            Vec::new()
        } else {
            decode_hex(key)
        };
        let expected = u64::from_str_radix(hash, 16).expect("fixture hash");
        assert_eq!(key_hash(&key), expected, "key bytes {key:02x?}");
        checked += 1;
    }
    // Every XXH3 length class plus the seed's 27 streams.
    assert_eq!(checked, 53);
}

#[test]
fn mix_and_jump_are_frozen_too() {
    // mix is the SplitMix64 finaliser of a ^ (b * golden ratio); these values
    // were computed with an independent Python transcription of that formula.
    assert_eq!(mix(0, 0), 0);
    assert_eq!(mix(1, 0), 0x5692_161d_100b_05e5);
    assert_eq!(mix(0xdead_beef, 42), 0xa024_0fd9_b274_f954);
    assert_eq!(mix(u64::MAX, u64::MAX), 0xe4d9_7177_1b65_2c20);
    // Recorded from this implementation (jump itself is checked against the
    // reference vectors in its unit tests); the golden slices depend on it.
    assert_eq!(jump_bucket(key_hash(b"stream:foo:new"), 1000), 109);
}
