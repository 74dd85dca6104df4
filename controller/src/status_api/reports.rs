//! Reported documents, kept in the cluster: one ConfigMap per plan,
//! `<plan>-deployment-reports`, owned by the plan (a `controller: true`
//! ownerReference to its uid, so it goes with the plan), one data key per
//! deployment and reporting client, `<deploymentId>.<clientId>.json`.
//!
//! A ConfigMap of that name the plan does not own is never read or written.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use shoal_core::deploy::status::DeploymentStatusDocument;
use shoal_core::names::CONTROLLER_FIELD_MANAGER;

use super::problem::Problem;
use crate::deployment_plan::DeploymentPlan;

/// Longest client id (a label value's length).
const MAX_CLIENT_ID: usize = 63;

/// The ConfigMap holding a plan's reported documents.
pub fn reports_name(plan: &str) -> String {
    format!("{plan}-deployment-reports")
}

/// The data key of one client's report on one deployment.
fn key(deployment_id: &str, client_id: &str) -> String {
    format!("{deployment_id}.{client_id}.json")
}

/// Checks a client id: 1–63 ASCII letters, digits, `-`, `_`, `.`, starting
/// with a letter or digit (it becomes part of a ConfigMap data key).
pub fn check_client_id(client_id: &str) -> Result<(), Problem> {
    let fits = !client_id.is_empty()
        && client_id.len() <= MAX_CLIENT_ID
        && client_id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && client_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if fits {
        Ok(())
    } else {
        Err(Problem::new(
            StatusCode::BAD_REQUEST,
            format!(
                "client id {client_id:?} must be 1-{MAX_CLIENT_ID} letters, digits, '-', '_' or '.', starting with a letter or digit"
            ),
        ))
    }
}

fn failed(what: String) -> impl FnOnce(kube::Error) -> Problem {
    move |error| Problem::new(StatusCode::SERVICE_UNAVAILABLE, format!("{what}: {error}"))
}

/// Whether the plan owns `map` (a controller ownerReference to its uid).
fn owned_by(map: &ConfigMap, plan: &DeploymentPlan) -> bool {
    let uid = plan.uid().unwrap_or_default();
    map.owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

fn not_owned(namespace: &str, name: &str, plan: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        format!(
            "ConfigMap {namespace}/{name} exists but DeploymentPlan {plan} does not own it; Shoal neither reads nor writes it (delete or rename it to let reports be kept)"
        ),
    )
}

/// The plan's reports ConfigMap, if it exists and the plan owns it.
async fn owned_map(client: &Client, plan: &DeploymentPlan) -> Result<Option<ConfigMap>, Problem> {
    let namespace = plan.namespace().unwrap_or_default();
    let name = reports_name(&plan.name_any());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let map = api
        .get_opt(&name)
        .await
        .map_err(failed(format!("reading ConfigMap {namespace}/{name}")))?;
    match map {
        Some(map) if !owned_by(&map, plan) => Err(not_owned(&namespace, &name, &plan.name_any())),
        other => Ok(other),
    }
}

/// What `client_id` reported on the deployment, if anything.
pub async fn read(
    client: &Client,
    plan: &DeploymentPlan,
    deployment_id: &str,
    client_id: &str,
) -> Result<Option<DeploymentStatusDocument>, Problem> {
    let Some(map) = owned_map(client, plan).await? else {
        return Ok(None);
    };
    let stored = map
        .data
        .as_ref()
        .and_then(|data| data.get(&key(deployment_id, client_id)));
    Ok(stored.and_then(|text| serde_json::from_str(text).ok()))
}

/// Keeps `document` as `client_id`'s report; `true` when it is the client's
/// first report on the deployment (created), `false` when it replaced one.
pub async fn write(
    client: &Client,
    plan: &DeploymentPlan,
    client_id: &str,
    document: &DeploymentStatusDocument,
) -> Result<bool, Problem> {
    let namespace = plan.namespace().unwrap_or_default();
    let plan_name = plan.name_any();
    let name = reports_name(&plan_name);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let data_key = key(&document.deployment_id, client_id);
    let text = serde_json::to_string(document).unwrap_or_default();
    if let Some(map) = owned_map(client, plan).await? {
        return patch_in(&api, &map, &data_key, text).await;
    }
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(BTreeMap::from([(
                shoal_core::names::LABEL_DEPLOYMENT_PLAN.to_owned(),
                plan_name.clone(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "shoal.dev/v1alpha1".to_owned(),
                kind: "DeploymentPlan".to_owned(),
                name: plan_name.clone(),
                uid: plan.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(data_key.clone(), text.clone())])),
        ..ConfigMap::default()
    };
    let params = PostParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match api.create(&params, &map).await {
        Ok(_) => Ok(true),
        // Another report created it meanwhile: write into it.
        Err(kube::Error::Api(response)) if response.code == 409 => {
            let map = owned_map(client, plan).await?.ok_or_else(|| {
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("ConfigMap {namespace}/{name} was created and deleted meanwhile; report again"),
                )
            })?;
            patch_in(&api, &map, &data_key, text).await
        }
        Err(error) => Err(failed(format!("creating ConfigMap {namespace}/{name}"))(
            error,
        )),
    }
}

/// Sets one data key of an owned ConfigMap; `true` when the key is new.
async fn patch_in(
    api: &Api<ConfigMap>,
    map: &ConfigMap,
    data_key: &str,
    text: String,
) -> Result<bool, Problem> {
    let existed = map
        .data
        .as_ref()
        .is_some_and(|data| data.contains_key(data_key));
    // A merge patch touches only this client's key (server-side apply by one
    // field manager would drop the keys of the other clients' reports), and
    // the uid precondition keeps it off a ConfigMap recreated meanwhile.
    let patch = json!({
        "metadata": {"uid": map.uid()},
        "data": {data_key: text},
    });
    let params = PatchParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let name = map.name_any();
    api.patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map_err(failed(format!("writing ConfigMap {name}")))?;
    Ok(!existed)
}
