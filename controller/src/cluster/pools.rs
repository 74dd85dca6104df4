//! Pools (labelled StatefulSets and Deployments) and their pods, as both controllers read
//! them: listed with each pool's own selector, kept only when the pool owns them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::ListParams;
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};

use crate::observed::{PodState, PoolState};

/// Where a pass reads a pool's pods from.
#[derive(Clone, Copy)]
pub enum PodSource<'a> {
    /// Listed from the API server, with the pool's selector: what one-off readers (the
    /// plugin, the plan controller) do.
    Listed(&'a Api<Pod>),
    /// The Swarm controller's watch cache of pods ([`super::watched`]), of `namespace`.
    Watched {
        /// The cache.
        store: &'a Store<Pod>,
        /// The pool's namespace.
        namespace: &'a str,
    },
}

impl PodSource<'_> {
    /// The pods `selector` selects: the same set from either source, the cache's as of
    /// the last event its watch delivered.
    async fn select(&self, selector: &Selector) -> Result<Vec<Arc<Pod>>, kube::Error> {
        match self {
            PodSource::Listed(api) => Ok(api
                .list(&ListParams::default().labels_from(selector))
                .await?
                .items
                .into_iter()
                .map(Arc::new)
                .collect()),
            PodSource::Watched { store, namespace } => Ok(store.state_filter(|pod| {
                pod.metadata.namespace.as_deref() == Some(*namespace)
                    && selector.matches(pod.labels())
            })),
        }
    }
}

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
pub async fn observe_pool(
    pods: PodSource<'_>,
    sts: &StatefulSet,
) -> Result<PoolState, kube::Error> {
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
    let listed = pods.select(&selector).await?;
    let sts_uid = sts.uid().unwrap_or_default();
    for pod in &listed {
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
    pods: PodSource<'_>,
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
    let params = ListParams::default().labels_from(&selector);
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
    let listed = pods.select(&selector).await.map_err(|source| ListError {
        kind: "pods",
        source,
    })?;
    for pod in &listed {
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

/// A pool's label selector, `None` when it selects nothing expressible (an unknown
/// operator) or everything (an empty selector would select every pod of the namespace).
fn label_selector(selector: &LabelSelector) -> Option<Selector> {
    Selector::try_from(selector.clone())
        .ok()
        .filter(|selector| !selector.selects_all())
}
