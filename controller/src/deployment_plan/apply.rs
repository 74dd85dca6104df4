//! Writing a plan's decision: its status through the status subresource by
//! server-side apply (field manager `shoal-controller`), then its Events.
//!
//! The status is first fitted (`crate::api::limits::fit`: the schema's bounds, then the
//! byte budget, where finished operations and unused deployment records go first). A write the API server
//! still refuses for its size leaves the last status in place, marks the plan
//! `Degraded` (`StatusTooLarge`, naming the largest field and the sizes) with one
//! Warning on the transition, and is not an error of the pass: retrying at once
//! would only be refused again.

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use shoal_core::names::CONTROLLER_FIELD_MANAGER;

use super::decide::{PlanDecision, PlanObservation};
use crate::api::deployment_plan::{DeploymentPlan, DeploymentPlanStatus};
use crate::api::limits::{self, budget};
use crate::cluster::too_large::record_too_large;
use crate::cluster::{Context, publish_on};

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
    let fitted = limits::fit(&decision.status, budget::rest_of_object(plan));
    fitted.log(&format!(
        "DeploymentPlan {}/{}",
        plan.namespace().unwrap_or_default(),
        plan.name_any()
    ));
    let status = fitted.status;
    if status != obs.status || taking_back {
        match write_status(&ctx.client, plan, obs, decision, &status).await {
            Ok(()) => ctx.metrics.wrote("status"),
            Err(error) if budget::refused_for_size(&error) => {
                // Nothing of this pass was written: its Events stay unsaid.
                return record_too_large(
                    ctx,
                    plan,
                    "DeploymentPlan",
                    &obs.status.conditions,
                    &status,
                    fitted.pruned.budget,
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
        &PatchParams::apply(CONTROLLER_FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
}
