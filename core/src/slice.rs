//! Canonical per-member slices and their content hash.

use sha2::{Digest, Sha256};

use crate::job::JobSet;

/// Prefix of every slice hash.
pub const HASH_PREFIX: &str = "sha256:";

/// What one member owns at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The Swarm's name.
    pub swarm: String,
    /// The member's pod name (`<pool>-<ordinal>`).
    pub member: String,
    /// The revision at which this member's slice last changed.
    pub revision: u64,
    /// [`canonical_hash`] of `jobs`.
    pub hash: String,
    /// The jobs, sorted by byte order, unique.
    pub jobs: JobSet,
}

impl Slice {
    /// A slice with its canonical hash computed from `jobs`.
    pub fn new(
        swarm: impl Into<String>,
        member: impl Into<String>,
        revision: u64,
        jobs: JobSet,
    ) -> Slice {
        Slice {
            swarm: swarm.into(),
            member: member.into(),
            revision,
            hash: canonical_hash(&jobs),
            jobs,
        }
    }
}

/// `sha256:` + lowercase hex SHA-256 of every key followed by `\n`, in byte
/// order. Depends on the jobs only (not on revision, swarm or member), so an
/// unchanged slice keeps its hash. The empty slice hashes the empty string.
pub fn canonical_hash(jobs: &JobSet) -> String {
    let mut hasher = Sha256::new();
    for key in jobs {
        hasher.update(key.as_bytes());
        hasher.update(b"\n");
    }
    format!("{HASH_PREFIX}{}", hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_of_a_slice_is_sha256_of_its_sorted_lines() {
        let jobs = JobSet::parse(["b", "a"]).unwrap();
        // printf 'a\nb\n' | sha256sum
        assert_eq!(
            canonical_hash(&jobs),
            "sha256:911169ddaaf146aff539f58c26c489af3b892dff0fe283c1c264c65ae5aa59a2"
        );
        assert_eq!(
            canonical_hash(&JobSet::default()),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
