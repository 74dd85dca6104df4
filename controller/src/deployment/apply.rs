//! Writing a plan's decision: its status through the status subresource by
//! server-side apply (field manager `shoal-controller`), then its Events.
//!
//! The status is first fitted to its size budget (`crate::size_budget`: finished
//! operations and unused deployment records go first). A write the API server
//! still refuses for its size leaves the last status in place, marks the plan
//! `Degraded` (`StatusTooLarge`, naming the largest field and the sizes) with one
//! Warning on the transition, and is not an error of the pass: retrying at once
//! would only be refused again.

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::{PlanDecision, PlanObservation};
use crate::deployment_plan::{DeploymentPlan, DeploymentPlanStatus};
use crate::reconcile::{Context, FIELD_MANAGER, publish_on};
use crate::size_budget;

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
    let mut status = decision.status.clone();
    let budget = size_budget::status_budget(size_budget::rest_of_object(plan));
    size_budget::fit(&mut status, budget);
    if status != obs.status || taking_back {
        match write_status(&ctx.client, plan, obs, decision, &status).await {
            Ok(()) => ctx.metrics.wrote("status"),
            Err(error) if size_budget::refused_for_size(&error) => {
                // Nothing of this pass was written: its Events stay unsaid.
                return size_budget::record_too_large(
                    ctx,
                    plan,
                    "DeploymentPlan",
                    &obs.status.conditions,
                    &status,
                    budget,
                    &error,
                )
                .await;
            }
            Err(error) => return Err(error),
        }
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
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
}
