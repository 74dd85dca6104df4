//! Names of the cluster objects the sidecar reads and writes (see
//! ARCHITECTURE.md, "Names of cluster objects"); thin aliases of
//! `shoal_core::names`.

pub use shoal_core::names::{
    ANNOTATION_ACKED_HASH as ACKED_HASH, ANNOTATION_ACKED_REVISION as ACKED_REVISION,
    ANNOTATION_INSTANCE_STATES as INSTANCE_STATES, LABEL_MEMBER as MEMBER_LABEL,
    SLICE_DATA_KEY as SLICE_KEY, member_lease, slice_configmap as slice_config_map,
};
