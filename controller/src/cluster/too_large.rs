//! Recording a status the API server refused for its size, for Swarms and
//! DeploymentPlans alike (the words and the patch are pure, in
//! `crate::api::limits::budget`).

use serde::Serialize;

use crate::api::limits::budget::{STATUS_TOO_LARGE, too_large_message, too_large_patch};
use crate::api::swarm::Condition;

/// Records on `object` that the API server refused `status` for its size
/// ([`too_large_patch`] through the status subresource) and one Warning Event
/// [`STATUS_TOO_LARGE`] saying so, on the transition only. `kind` names the object in
/// the words (`Swarm`, `DeploymentPlan`); `stored` are the conditions its stored
/// status has (the transition is judged against them).
pub async fn record_too_large<K, S>(
    ctx: &super::Context,
    object: &K,
    kind: &str,
    stored: &[Condition],
    status: &S,
    budget: usize,
    error: &kube::Error,
) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    S: Serialize,
{
    use kube::ResourceExt;
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let message = too_large_message(&format!("{kind} {namespace}/{name}"), status, budget, error);
    tracing::warn!(%message, "status refused for its size");
    let now = jiff::Timestamp::now().to_string();
    let Some(patch) = too_large_patch(stored, &message, object.meta().generation, &now) else {
        return Ok(());
    };
    let api: kube::Api<K> = kube::Api::namespaced(ctx.client.clone(), &namespace);
    let params = kube::api::PatchParams {
        field_manager: Some(shoal_core::names::CONTROLLER_FIELD_MANAGER.to_owned()),
        ..kube::api::PatchParams::default()
    };
    let bytes = crate::api::limits::budget::json_bytes(&patch);
    api.patch_status(&name, &params, &kube::api::Patch::Merge(patch))
        .await?;
    ctx.metrics.wrote_bytes("status", bytes);
    super::publish_on(
        ctx,
        &object.object_ref(&()),
        true,
        STATUS_TOO_LARGE,
        &message,
    )
    .await;
    Ok(())
}
