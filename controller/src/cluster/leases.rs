//! Member Leases as both controllers read them.

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use shoal_core::names;

use crate::observed::LeaseState;

/// A member Lease as the plan reads it; `unchanged_since` is left for the caller's clock.
pub fn lease_state(lease: &Lease) -> LeaseState {
    let annotations = lease.annotations();
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseState {
        holder: spec.holder_identity.clone(),
        pod_uid: lease
            .owner_references()
            .iter()
            .find(|owner| owner.kind == "Pod")
            .map(|owner| owner.uid.clone()),
        acked_revision: annotations
            .get(names::ANNOTATION_ACKED_REVISION)
            .and_then(|revision| revision.parse().ok()),
        acked_hash: annotations.get(names::ANNOTATION_ACKED_HASH).cloned(),
        renew_time: spec.renew_time.map(|time| time.0),
        duration_seconds: spec.lease_duration_seconds.map(i64::from),
        version: lease.resource_version().unwrap_or_default(),
        unchanged_since: None,
    }
}
