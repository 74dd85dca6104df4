//! Writing a plan's decision: its status through the status subresource by
//! server-side apply (field manager `shoal-controller`), then its Events.

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use shoal_core::names::CONTROLLER_FIELD_MANAGER;

use super::{PlanDecision, PlanObservation};
use crate::cluster::{Context, publish_on};
use crate::deployment_plan::{DeploymentPlan, DeploymentPlanStatus};

/// Writes the status when it changed, or when someone else wrote its placement
/// record (the write puts it back and makes it the controller's again, see
/// `drift`); publishes the Events once it is written (a failed write publishes
/// nothing, and the next pass decides again).
pub async fn apply(
    ctx: &Context,
    plan: &DeploymentPlan,
    obs: &PlanObservation,
    decision: &PlanDecision,
) -> Result<(), kube::Error> {
    let taking_back = !obs.record_editors.is_empty() && !decision.leave_edited_record;
    // Cut to the schema's bounds first (text from users and members), so that the
    // comparison sees what would be stored and the server never refuses the write whole.
    let (status, cuts) = crate::limits::fit_status(&decision.status);
    if !cuts.is_empty() {
        tracing::warn!(
            plan = %plan.name_any(),
            cut = %cuts.join(", "),
            "status cut to the DeploymentPlan schema's bounds"
        );
    }
    if status != obs.status || taking_back {
        write_status(&ctx.client, plan, obs, decision, &status).await?;
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
    obs: &PlanObservation,
    decision: &PlanDecision,
    status: &DeploymentPlanStatus,
) -> Result<(), kube::Error> {
    let namespace = plan.namespace().unwrap_or_default();
    let api: Api<DeploymentPlan> = Api::namespaced(client.clone(), &namespace);
    let mut status = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    if let Some(fields) = status.as_object_mut() {
        for field in obs.record_editors.keys() {
            if decision.leave_edited_record {
                // Not put back: applying the edited value would make it the controller's.
                fields.remove(field);
            } else {
                // Put back, even when empty, so that the controller owns the field again.
                fields.entry(field.clone()).or_insert_with(|| json!([]));
            }
        }
    }
    let body = json!({
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "DeploymentPlan",
        "status": status,
    });
    api.patch_status(
        &plan.name_any(),
        &PatchParams::apply(CONTROLLER_FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
}
