//! Writing a plan's decision: its status through the status subresource by
//! server-side apply (field manager `shoal-controller`), then its Events.
//!
//! The status is first fitted (`crate::api::limits::fit`: the schema's bounds, then the
//! byte budget, where finished operations and unused deployment records go first). A write the API server
//! still refuses for its size leaves the last status in place, marks the plan
//! `Degraded` (`StatusTooLarge`, naming the largest field and the sizes) with one
//! Warning on the transition, and is not an error of the pass: retrying at once
//! would only be refused again.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use shoal_core::names::CONTROLLER_FIELD_MANAGER;

use super::decide::service::ServicePlan;
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
            Ok(bytes) => ctx.metrics.wrote_bytes("status", bytes),
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
    write_service(&ctx.client, plan, &decision.service).await?;
    let reference = plan.object_ref(&());
    for event in &decision.events {
        publish_on(ctx, &reference, event.warning, &event.reason, &event.note).await;
    }
    Ok(())
}

/// Writes the plan's Service and EndpointSlices: a name the plan does not own yet is
/// created (POST, never applied over), an owned one applied (server-side apply,
/// field manager `shoal-controller`); owned ones not wanted are deleted with the uid
/// seen as precondition. Slices first, then the Service; deletions last.
async fn write_service(
    client: &Client,
    plan: &DeploymentPlan,
    service: &ServicePlan,
) -> Result<(), kube::Error> {
    let namespace = plan.namespace().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &namespace);
    let apply = PatchParams::apply(CONTROLLER_FIELD_MANAGER).force();
    let create = PostParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    if let Some(wanted) = &service.service {
        let name = wanted.metadata.name.clone().unwrap_or_default();
        if service.service_exists {
            let mut body = serde_json::to_value(wanted).map_err(kube::Error::SerdeError)?;
            body["apiVersion"] = json!("v1");
            body["kind"] = json!("Service");
            services.patch(&name, &apply, &Patch::Apply(body)).await?;
        } else {
            services.create(&create, wanted).await?;
        }
    }
    for (slice, exists) in &service.slices {
        let name = slice.metadata.name.clone().unwrap_or_default();
        if *exists {
            let mut body = serde_json::to_value(slice).map_err(kube::Error::SerdeError)?;
            body["apiVersion"] = json!("discovery.k8s.io/v1");
            body["kind"] = json!("EndpointSlice");
            slices.patch(&name, &apply, &Patch::Apply(body)).await?;
        } else {
            slices.create(&create, slice).await?;
        }
    }
    for (name, uid) in &service.delete_slices {
        delete_if_same(&slices, name, uid).await?;
    }
    for (name, uid) in &service.delete_services {
        delete_if_same(&services, name, uid).await?;
    }
    Ok(())
}

/// Deletes `name` only while it is the object of `uid`; gone already is fine.
async fn delete_if_same<K>(api: &Api<K>, name: &str, uid: &str) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(response)) if response.code == 404 || response.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}

/// Applies the status; returns the bytes of the request body.
async fn write_status(
    client: &Client,
    plan: &DeploymentPlan,
    obs: &PlanObservation,
    decision: &PlanDecision,
    status: &DeploymentPlanStatus,
) -> Result<usize, kube::Error> {
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
    let bytes = budget::json_bytes(&body);
    api.patch_status(
        &plan.name_any(),
        &PatchParams::apply(CONTROLLER_FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| bytes)
}
