//! Names of the cluster objects the sidecar reads and writes (see
//! ARCHITECTURE.md, "Names of cluster objects").

/// Annotation on the member Lease: the acknowledged revision (u64).
pub const ACKED_REVISION: &str = "shoal.dev/acked-revision";
/// Annotation on the member Lease: the acknowledged slice hash.
pub const ACKED_HASH: &str = "shoal.dev/acked-hash";
/// Label naming the member (pod name).
pub const MEMBER_LABEL: &str = "shoal.dev/member";
/// Data key of the slice document in the slice ConfigMap.
pub const SLICE_KEY: &str = "slice.yaml";

/// The member's slice ConfigMap: `<pod>-slice`.
pub fn slice_config_map(pod: &str) -> String {
    format!("{pod}-slice")
}

/// The member's Lease: `<pod>-member`.
pub fn member_lease(pod: &str) -> String {
    format!("{pod}-member")
}
