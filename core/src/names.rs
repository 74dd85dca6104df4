//! Names of the cluster objects, labels and annotations Shoal uses
//! (the table in ARCHITECTURE.md).

/// Label on a pool StatefulSet (value: the Swarm's name), and on every object
/// Shoal writes for that Swarm.
pub const LABEL_SWARM: &str = "shoal.dev/swarm";
/// Label on a slice ConfigMap: the member's pool.
pub const LABEL_POOL: &str = "shoal.dev/pool";
/// Label on a slice ConfigMap: the member's pod name.
pub const LABEL_MEMBER: &str = "shoal.dev/member";
/// Label on a slice ConfigMap and a revision-history ConfigMap: the revision.
pub const LABEL_REVISION: &str = "shoal.dev/revision";
/// Label marking a revision-history ConfigMap (value `"true"`).
pub const LABEL_REVISION_HISTORY: &str = "shoal.dev/revision-history";
/// Annotation approving a pending Swarm revision (`"<revision>/<hash>"`) or DeploymentPlan
/// operations.
pub const ANNOTATION_APPROVE: &str = "shoal.dev/approve";
/// Annotation beside [`ANNOTATION_APPROVE`] naming who set it (the requester's user name).
pub const ANNOTATION_APPROVED_BY: &str = "shoal.dev/approved-by";
/// A rollback annotation of earlier releases on the Swarm. It is refused: a standing
/// annotation kept the rolled-back job list in force only while present, so removing it
/// silently brought back the change that was rolled back. `kubectl shoal undo` rewrites
/// the Swarm instead. While the annotation stands, no new revision applies (Degraded,
/// `RollbackAnnotationRefused`), so removing it changes nothing by itself.
pub const ANNOTATION_ROLLBACK_TO: &str = "shoal.dev/rollback-to";
/// Annotation on the Swarm that lets a halted pool rollout of the named revision go on.
pub const ANNOTATION_RETRY_ROLLOUT: &str = "shoal.dev/retry-rollout";
/// Annotation on a DeploymentPlan asking for user operations.
pub const ANNOTATION_OPERATE: &str = "shoal.dev/operate";
/// Annotation (Kubernetes' own) saying why a spec changed, as `kubectl rollout history` shows it.
pub const ANNOTATION_CHANGE_CAUSE: &str = "kubernetes.io/change-cause";
/// Annotation on a slice ConfigMap: the uid of the member pod when the slice was written.
pub const ANNOTATION_WRITTEN_FOR_UID: &str = "shoal.dev/written-for-uid";
/// Annotation on a slice ConfigMap: `revoke` or `grant`, the step that wrote it.
pub const ANNOTATION_PHASE: &str = "shoal.dev/phase";
/// Annotation on the first ConfigMap of a split history record: the sha256 (hex) of its
/// gzip stream, every part concatenated in order (`format::checksum`).
pub const ANNOTATION_CHECKSUM: &str = "shoal.dev/checksum";
/// Annotation on a member Lease: the revision the sidecar applied.
pub const ANNOTATION_ACKED_REVISION: &str = "shoal.dev/acked-revision";
/// Annotation on a member Lease: the hash of the slice the sidecar applied.
pub const ANNOTATION_ACKED_HASH: &str = "shoal.dev/acked-hash";
/// Annotation on a member Lease: each plan instance's state on that member, a
/// compact JSON object (see `shoal_core::slice::InstanceReport`).
pub const ANNOTATION_INSTANCE_STATES: &str = "shoal.dev/instance-states";
/// Annotation on the Swarm forcing failover of pods (`"<pod>[,<pod>...]"`).
pub const ANNOTATION_FAILOVER_NOW: &str = "shoal.dev/failover-now";
/// Pool annotation holding the members' scored capabilities (`deploy::pool`).
pub const ANNOTATION_CAPABILITIES: &str = "shoal.dev/capabilities";
/// Pool annotation holding what each member gives to plan instances (`deploy::pool`).
pub const ANNOTATION_CAPACITY: &str = "shoal.dev/capacity";
/// Pool annotation holding what each member keeps for itself, taken from its capacity
/// before plans are placed (MRDS's "system reserved"; `deploy::pool`).
pub const ANNOTATION_RESERVED: &str = "shoal.dev/reserved";
/// Pool annotation naming the members' update domain (`deploy::pool`).
pub const ANNOTATION_UPDATE_DOMAIN: &str = "shoal.dev/update-domain";
/// The field manager of the plugin's server-side applies (`kubectl shoal import-mrds --apply`).
pub const PLUGIN_FIELD_MANAGER: &str = "kubectl-shoal";
/// Label on a DeploymentPlan's status-report ConfigMap, and on its Service and
/// EndpointSlices (`spec.serviceName`): the plan's name.
pub const LABEL_DEPLOYMENT_PLAN: &str = "shoal.dev/deployment-plan";
/// Label on an EndpointSlice naming its Service (Kubernetes' own).
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Label on an EndpointSlice naming the controller that manages it (Kubernetes' own).
pub const LABEL_ENDPOINTSLICE_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Value of [`LABEL_ENDPOINTSLICE_MANAGED_BY`] on the EndpointSlices of a plan's Service.
pub const ENDPOINTSLICE_MANAGER: &str = "shoal-controller.shoal.dev";

/// EndpointSlice `<service>-shoal-<n>` of a plan's Service (n from 0; at most 1000
/// endpoints each).
pub fn endpoint_slice(service: &str, index: usize) -> String {
    format!("{service}-shoal-{index}")
}
/// Annotation on the first part of a split slice: the number of parts.
pub const ANNOTATION_PARTS: &str = "shoal.dev/parts";
/// The field manager of every write the controller makes. A slice whose data another
/// manager wrote (a hand edit) is not Shoal's: the sidecar refuses it.
pub const CONTROLLER_FIELD_MANAGER: &str = "shoal-controller";
/// Data key of a slice ConfigMap (slice format v1).
pub const SLICE_DATA_KEY: &str = "slice.yaml";
/// Binary data key of a gzip-compressed slice.
pub const SLICE_GZIP_DATA_KEY: &str = "slice.yaml.gz";
/// Data key of the index ConfigMap (the seed-compatible `workloads:` document).
pub const INDEX_DATA_KEY: &str = "config.yml";
/// Data key of a revision history ConfigMap (the record, JSON).
pub const REVISION_DATA_KEY: &str = "revision.json";

/// Name of a member's slice ConfigMap: `<pod>-slice`.
pub fn slice_configmap(pod: &str) -> String {
    format!("{pod}-slice")
}

/// Name of part `part` (1-based after the first) of a split slice:
/// `<pod>-slice` for part 0, `<pod>-slice-<part>` after.
pub fn slice_configmap_part(pod: &str, part: usize) -> String {
    if part == 0 {
        slice_configmap(pod)
    } else {
        format!("{pod}-slice-{part}")
    }
}

/// Name of a member's Lease: `<pod>-member`.
pub fn member_lease(pod: &str) -> String {
    format!("{pod}-member")
}

/// Name of a Swarm's index ConfigMap: the Swarm's own name.
pub fn index_configmap(swarm: &str) -> String {
    swarm.to_owned()
}

/// Name of a revision-history ConfigMap: `<swarm>-rev-<revision>`.
pub fn revision_configmap(swarm: &str, revision: u64) -> String {
    format!("{swarm}-rev-{revision}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_follow_the_architecture_table() {
        assert_eq!(slice_configmap("swarm-worker-0"), "swarm-worker-0-slice");
        assert_eq!(
            slice_configmap_part("swarm-worker-0", 0),
            "swarm-worker-0-slice"
        );
        assert_eq!(
            slice_configmap_part("swarm-worker-0", 2),
            "swarm-worker-0-slice-2"
        );
        assert_eq!(member_lease("swarm-worker-0"), "swarm-worker-0-member");
        assert_eq!(index_configmap("demo"), "demo");
        assert_eq!(revision_configmap("demo", 7), "demo-rev-7");
    }
}
