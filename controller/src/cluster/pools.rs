//! Pools (labelled StatefulSets and Deployments) and their pods, as both controllers read
//! them: listed with each pool's own selector, kept only when the pool owns them.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::observed::{PodState, PoolState};

/// A list that failed while reading a pool: what was listed, and why.
#[derive(Debug, thiserror::Error)]
#[error("listing {kind}: {source}")]
pub struct ListError {
    /// What was listed (`ReplicaSets`, `pods`).
    pub kind: &'static str,
    /// Cause.
    pub source: kube::Error,
}

/// A pod as the plan sees it.
pub fn pod_state(pod: &Pod) -> PodState {
    let ready = pod
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        });
    PodState {
        uid: pod.uid().unwrap_or_default(),
        ready,
        deleting: pod.metadata.deletion_timestamp.is_some(),
        ip: pod
            .status
            .as_ref()
            .and_then(|status| status.pod_ip.clone())
            .filter(|ip| !ip.is_empty()),
        node: pod.spec.as_ref().and_then(|spec| spec.node_name.clone()),
    }
}

/// One pool: its `spec.replicas` and its pods by ordinal, listed with the StatefulSet's own
/// selector (never every pod of the namespace) and kept only if the StatefulSet owns them.
pub async fn observe_pool(pods: &Api<Pod>, sts: &StatefulSet) -> Result<PoolState, kube::Error> {
    let pool_name = sts.name_any();
    let spec = sts.spec.as_ref();
    let replicas = spec.and_then(|spec| spec.replicas).unwrap_or(1).max(0) as u32;
    let observed_generation = sts
        .status
        .as_ref()
        .and_then(|status| status.observed_generation);
    let mut pool = PoolState {
        name: pool_name.clone(),
        replicas,
        deployment_pods: None,
        pods: BTreeMap::new(),
        observed_current: sts.metadata.generation.is_none_or(|generation| {
            observed_generation.is_some_and(|observed| observed >= generation)
        }),
    };
    let Some(selector) = spec.and_then(|spec| label_selector(&spec.selector)) else {
        // A StatefulSet without a selector has no pods (the API server refuses one anyway).
        return Ok(pool);
    };
    let listed = pods.list(&ListParams::default().labels(&selector)).await?;
    let sts_uid = sts.uid().unwrap_or_default();
    for pod in &listed.items {
        let owned = pod
            .owner_references()
            .iter()
            .any(|owner| owner.kind == "StatefulSet" && owner.uid == sts_uid);
        let ordinal = pod
            .name_any()
            .strip_prefix(&format!("{pool_name}-"))
            .and_then(|ordinal| ordinal.parse::<u32>().ok());
        let (true, Some(ordinal)) = (owned, ordinal) else {
            continue;
        };
        pool.pods.insert(ordinal, pod_state(pod));
    }
    Ok(pool)
}

/// One Deployment pool: its `spec.replicas` and its pods by name. Listed with the
/// Deployment's own selector (never every pod of the namespace); a pod is kept only if it
/// is owned (`controller: true`) by a ReplicaSet that the Deployment owns, as the
/// Deployment controller leaves them: a pod that merely matches the labels is no member.
pub async fn observe_deployment_pool(
    replica_sets: &Api<ReplicaSet>,
    pods: &Api<Pod>,
    deployment: &Deployment,
) -> Result<PoolState, ListError> {
    let spec = deployment.spec.as_ref();
    let mut members = BTreeMap::new();
    let replicas = spec.and_then(|spec| spec.replicas).unwrap_or(1).max(0) as u32;
    let Some(selector) = spec.and_then(|spec| label_selector(&spec.selector)) else {
        return Ok(PoolState {
            name: deployment.name_any(),
            replicas,
            pods: BTreeMap::new(),
            deployment_pods: Some(members),
            observed_current: deployment_observed_current(deployment),
        });
    };
    let params = ListParams::default().labels(&selector);
    let deployment_uid = deployment.uid().unwrap_or_default();
    let owned_sets: BTreeSet<String> = replica_sets
        .list(&params)
        .await
        .map_err(|source| ListError {
            kind: "ReplicaSets",
            source,
        })?
        .items
        .iter()
        .filter(|set| controlled_by(set.owner_references(), "Deployment", &deployment_uid))
        .filter_map(|set| set.uid())
        .collect();
    let listed = pods.list(&params).await.map_err(|source| ListError {
        kind: "pods",
        source,
    })?;
    for pod in &listed.items {
        let owned = pod.owner_references().iter().any(|owner| {
            owner.kind == "ReplicaSet"
                && owner.controller == Some(true)
                && owned_sets.contains(&owner.uid)
        });
        if owned {
            members.insert(pod.name_any(), pod_state(pod));
        }
    }
    Ok(PoolState {
        name: deployment.name_any(),
        replicas,
        pods: BTreeMap::new(),
        deployment_pods: Some(members),
        observed_current: deployment_observed_current(deployment),
    })
}

/// The Deployment controller has seen the Deployment's latest spec.
fn deployment_observed_current(deployment: &Deployment) -> bool {
    let observed = deployment
        .status
        .as_ref()
        .and_then(|status| status.observed_generation);
    deployment
        .metadata
        .generation
        .is_none_or(|generation| observed.is_some_and(|observed| observed >= generation))
}

/// An owner reference list names `kind` with `uid` as the controller.
fn controlled_by(owners: &[OwnerReference], kind: &str, uid: &str) -> bool {
    owners
        .iter()
        .any(|owner| owner.kind == kind && owner.uid == uid && owner.controller == Some(true))
}

/// A label selector as a list query (`a=b,c in (d,e),!f`), `None` when it selects nothing
/// expressible (an empty selector would select every pod).
fn label_selector(selector: &LabelSelector) -> Option<String> {
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    for expression in selector.match_expressions.iter().flatten() {
        let values = expression.values.clone().unwrap_or_default().join(",");
        terms.push(match expression.operator.as_str() {
            "In" => format!("{} in ({values})", expression.key),
            "NotIn" => format!("{} notin ({values})", expression.key),
            "Exists" => expression.key.clone(),
            "DoesNotExist" => format!("!{}", expression.key),
            _ => return None,
        });
    }
    (!terms.is_empty()).then(|| terms.join(","))
}
