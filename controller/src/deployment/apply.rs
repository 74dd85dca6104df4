//! Writing a plan's decision: its status through the status subresource by
//! server-side apply (field manager `shoal-controller`), then its Events.

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::{PlanDecision, PlanObservation};
use crate::deployment_plan::DeploymentPlan;
use crate::reconcile::{Context, FIELD_MANAGER, publish_on};

/// Writes the status when it changed; publishes the Events once it is written
/// (a failed write publishes nothing, and the next pass decides again).
pub async fn apply(
    ctx: &Context,
    plan: &DeploymentPlan,
    obs: &PlanObservation,
    decision: &PlanDecision,
) -> Result<(), kube::Error> {
    if decision.status != obs.status {
        write_status(&ctx.client, plan, decision).await?;
        ctx.metrics.wrote("status");
    }
    let reference = plan.object_ref(&());
    for event in &decision.events {
        publish_on(ctx, &reference, event.warning, &event.reason, &event.note).await;
    }
    Ok(())
}

async fn write_status(
    client: &Client,
    plan: &DeploymentPlan,
    decision: &PlanDecision,
) -> Result<(), kube::Error> {
    let namespace = plan.namespace().unwrap_or_default();
    let api: Api<DeploymentPlan> = Api::namespaced(client.clone(), &namespace);
    let body = json!({
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "DeploymentPlan",
        "status": decision.status,
    });
    api.patch_status(
        &plan.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
}
