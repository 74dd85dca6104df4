//! The thin I/O around [`crate::plan`]: observe the cluster, plan, apply.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod};
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client, Resource, ResourceExt};
use shoal_core::{format, names};
use tracing::{info, instrument, warn};

use crate::crd::{JobsFrom, Swarm};
use crate::deployment_plan::DeploymentPlan;
use crate::events::EventRecorders;
use crate::metrics::Metrics;
use crate::plan::{
    self, JobSource, LeaseState, Observation, PHASE_ANNOTATION, PodState, PoolState,
    REVISION_DATA_KEY, RevisionRecord, SliceObject, WRITTEN_FOR_UID_ANNOTATION,
};

/// Field manager of every server-side apply the controller makes.
pub const FIELD_MANAGER: &str = names::CONTROLLER_FIELD_MANAGER;

/// What the controller needs at hand while reconciling.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The client evictions go through: it does not retry a PodDisruptionBudget's 429.
    pub evictions: Client,
    /// Evictions a PodDisruptionBudget refused in the last pass, by Swarm
    /// (`namespace/name`) and pod: what the API server said.
    pub blocked_evictions: std::sync::Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    /// Publishes Events.
    pub events: EventRecorders,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// How the controller runs.
    pub settings: crate::Settings,
    /// Member Lease liveness on this controller's clock.
    pub lease_clock: crate::lease_clock::LeaseClock,
}

/// Why a reconcile failed. One variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Swarm has no namespace (cannot happen for a namespaced resource).
    #[error("Swarm {0} has no namespace")]
    MissingNamespace(String),
    /// Reading the Swarm itself failed.
    #[error("reading Swarm {swarm}: {source}")]
    ReadSwarm {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing the Swarm's pools failed.
    #[error("listing {kind} labelled for Swarm {swarm}: {source}")]
    ListPools {
        /// What was listed (`StatefulSets`, `Deployments`, `ReplicaSets`).
        kind: &'static str,
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing pods failed.
    #[error("listing pods of Swarm {swarm}: {source}")]
    ListPods {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Reading a member's pod failed.
    #[error("reading pod {pod}: {source}")]
    ReadPod {
        /// Pod.
        pod: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing the Swarm's ConfigMaps failed.
    #[error("listing ConfigMaps of Swarm {swarm}: {source}")]
    ListConfigMaps {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing member Leases failed.
    #[error("listing member Leases of Swarm {swarm}: {source}")]
    ListLeases {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Listing the DeploymentPlans of the namespace failed.
    #[error("listing the DeploymentPlans of Swarm {swarm}: {source}")]
    ListPlans {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Reading the `jobsFrom` ConfigMap failed (other than not found).
    #[error("reading job ConfigMap {name}: {source}")]
    ReadJobConfigMap {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Looking up a ConfigMap the plan would write failed.
    #[error("reading ConfigMap {name}: {source}")]
    ReadConfigMap {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// A ConfigMap appeared under a name the plan writes, owned by someone else, between
    /// looking it up and writing it.
    #[error(
        "ConfigMap {name} was created by someone else while Swarm {swarm} was about to create it; it is left alone"
    )]
    NotOwned {
        /// ConfigMap.
        name: String,
        /// Swarm.
        swarm: String,
    },
    /// Writing a history ConfigMap failed.
    #[error("writing revision history {name}: {source}")]
    WriteRevision {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing status failed.
    #[error("writing status of Swarm {swarm}: {source}")]
    WriteStatus {
        /// Swarm.
        swarm: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing a slice ConfigMap failed.
    #[error("writing slice {name}: {source}")]
    WriteSlice {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Deleting a slice ConfigMap failed.
    #[error("deleting slice {name}: {source}")]
    DeleteSlice {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Evicting a pod failed (other than a PodDisruptionBudget refusing it).
    #[error("evicting pod {pod}: {source}")]
    Evict {
        /// Pod.
        pod: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing the index ConfigMap failed.
    #[error("writing index {name}: {source}")]
    WriteIndex {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Deleting an old history ConfigMap failed.
    #[error("pruning revision history {name}: {source}")]
    PruneRevision {
        /// ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Serializing a history record failed.
    #[error("serializing revision {revision}: {source}")]
    SerializeRevision {
        /// Revision.
        revision: u64,
        /// Cause.
        source: serde_json::Error,
    },
}

impl Error {
    /// A short CamelCase name of the failing step: metric label and Event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Error::MissingNamespace(_) => "MissingNamespace",
            Error::ReadSwarm { .. } => "ReadSwarmFailed",
            Error::ListPools { .. } => "ListPoolsFailed",
            Error::ListPods { .. } => "ListPodsFailed",
            Error::ReadPod { .. } => "ReadPodFailed",
            Error::ListConfigMaps { .. } => "ListConfigMapsFailed",
            Error::ListLeases { .. } => "ListLeasesFailed",
            Error::ListPlans { .. } => "ListPlansFailed",
            Error::ReadJobConfigMap { .. } => "ReadJobConfigMapFailed",
            Error::ReadConfigMap { .. } => "ReadConfigMapFailed",
            Error::NotOwned { .. } => "OwnershipConflict",
            Error::WriteRevision { .. } => "WriteRevisionFailed",
            Error::WriteStatus { .. } => "WriteStatusFailed",
            Error::WriteSlice { .. } => "WriteSliceFailed",
            Error::DeleteSlice { .. } => "DeleteSliceFailed",
            Error::Evict { .. } => "EvictFailed",
            Error::WriteIndex { .. } => "WriteIndexFailed",
            Error::PruneRevision { .. } => "PruneRevisionFailed",
            Error::SerializeRevision { .. } => "SerializeRevisionFailed",
        }
    }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Reads everything `plan` needs from the cluster.
pub async fn observe(swarm: &Swarm, client: &Client) -> Result<Observation, Error> {
    let name = swarm.name_any();
    let namespace = swarm
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let selector = format!("{}={name}", names::LABEL_SWARM);

    let (statefulsets, deployments) = list_pools(client, &namespace, &name).await?;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut pools = Vec::new();
    for sts in &statefulsets {
        pools.push(observe_pool(&pod_api, &name, sts).await?);
    }
    let replica_set_api: Api<ReplicaSet> = Api::namespaced(client.clone(), &namespace);
    for deployment in &deployments {
        pools.push(observe_deployment_pool(&replica_set_api, &pod_api, &name, deployment).await?);
    }

    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let config_maps = cm_api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::ListConfigMaps {
            swarm: name.clone(),
            source,
        })?;
    let mut slices = BTreeMap::new();
    let mut history = BTreeMap::new();
    let mut index = None;
    let mut slice_maps: BTreeMap<String, ConfigMap> = BTreeMap::new();
    // History ConfigMaps, records and parts of split records alike.
    let mut record_maps: BTreeMap<String, ConfigMap> = BTreeMap::new();
    let mut owned_config_maps = BTreeMap::new();
    let mut foreign_config_maps = BTreeMap::new();
    let mut edited_config_maps = BTreeMap::new();
    let swarm_uid = swarm.uid().unwrap_or_default();
    for cm in config_maps.items {
        // A label proves nothing (anyone may set it): only what this Swarm owns is read.
        if !owned_by(&cm, &swarm_uid) {
            foreign_config_maps.insert(cm.name_any(), owner_description(&cm));
            continue;
        }
        owned_config_maps.insert(cm.name_any(), cm.uid().unwrap_or_default());
        if let Some(editor) = edited_by(&cm) {
            edited_config_maps.insert(cm.name_any(), editor);
        }
        let labels = cm.labels();
        if labels
            .get(names::LABEL_REVISION_HISTORY)
            .map(String::as_str)
            == Some("true")
        {
            if edited_config_maps.contains_key(&cm.name_any()) {
                // A record someone else changed is no record of what this Swarm decided.
                continue;
            }
            let record = read_text(&cm, REVISION_DATA_KEY)
                .and_then(|text| serde_json::from_str::<RevisionRecord>(&text).ok());
            if let Some(record) = record {
                history.insert(record.revision, record);
            }
            record_maps.insert(cm.name_any(), cm);
        } else if labels.contains_key(names::LABEL_MEMBER) {
            slice_maps.insert(cm.name_any(), cm);
        } else if cm.name_any() == names::index_configmap(&name)
            && !edited_config_maps.contains_key(&cm.name_any())
        {
            index = read_text(&cm, names::INDEX_DATA_KEY);
        }
    }
    let mut damaged_history = BTreeMap::new();
    for (revision, joined) in split_records(&name, &record_maps) {
        match joined {
            Ok(record) => {
                history.insert(revision, record);
            }
            Err(why) => {
                damaged_history.insert(revision, why);
            }
        }
    }
    for (cm_name, cm) in &slice_maps {
        let Some(member) = cm.labels().get(names::LABEL_MEMBER) else {
            continue;
        };
        // Parts 1.. of a split slice are read through their first ConfigMap.
        if *cm_name != names::slice_configmap(member) {
            continue;
        }
        slices.insert(member.clone(), slice_object(member, cm, &slice_maps));
    }

    let job_source = match &swarm.spec.jobs_from {
        None => JobSource::NotReferenced,
        Some(from) => read_job_sources(&cm_api, from).await?,
    };

    let lease_api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let member_names = lease_holders(&pools);
    let leases = match member_lease_selector(&member_names) {
        None => Vec::new(),
        Some(selector) => {
            lease_api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|source| Error::ListLeases {
                    swarm: name.clone(),
                    source,
                })?
                .items
        }
    };
    let mut member_leases = BTreeMap::new();
    for lease in leases {
        let Some(pod) = lease.name_any().strip_suffix("-member").map(str::to_owned) else {
            continue;
        };
        if !member_names.contains(&pod) {
            continue;
        }
        member_leases.insert(pod, lease_state(&lease));
    }

    // Without the DeploymentPlan CRD installed (404) there are no plans: Swarms work alone.
    // Refused (403: a role without access, such as the plugin's viewer) the instances in
    // the slices are kept as they are; any other failure fails the pass.
    let plans = match Api::<DeploymentPlan>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list
            .items
            .iter()
            .filter(|plan| plan.spec.swarm == name)
            .filter_map(plan_for_delivery)
            .collect()),
        Err(source) if is_not_found(&source) => Ok(Vec::new()),
        Err(kube::Error::Api(status)) if status.code == 403 => Err(format!(
            "listing DeploymentPlans was refused: {}",
            status.message
        )),
        Err(source) => {
            return Err(Error::ListPlans {
                swarm: name.clone(),
                source,
            });
        }
    };

    Ok(Observation {
        swarm: name,
        generation: swarm.metadata.generation,
        spec: swarm.spec.clone(),
        annotations: swarm.annotations().clone(),
        status: swarm.status.clone().unwrap_or_default(),
        pools,
        job_source,
        slices,
        leases: member_leases,
        history,
        damaged_history,
        index,
        owned_config_maps,
        foreign_config_maps,
        edited_config_maps,
        blocked_evictions: BTreeMap::new(),
        plans,
        // Read by the reconciler (`reconcile`), which knows whether it may look.
        approved_by_policy: false,
        now: jiff::Timestamp::now(),
    })
}

/// A plan naming the Swarm, as delivery reads it; `None` while the controller has not
/// written its status yet (it has no instances then). A status whose instances or
/// deployments someone other than the controller wrote (a user with access to the status
/// subresource) is not trusted: it could hand a member any payload without approval.
fn plan_for_delivery(plan: &DeploymentPlan) -> Option<plan::PlanForDelivery> {
    let status = plan.status.clone()?;
    let entries = plan.metadata.managed_fields.as_deref().unwrap_or_default();
    let status_fields =
        |entry: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
            entry
                .fields_v1
                .as_ref()
                .and_then(|fields| fields.0.get("f:status"))
                .and_then(|owned| owned.as_object())
                .map(|owned| owned.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        };
    let written_by_controller = entries.iter().any(|entry| {
        entry.manager.as_deref() == Some(FIELD_MANAGER) && !status_fields(entry).is_empty()
    });
    if !written_by_controller {
        return None;
    }
    // The plan controller puts such a record back (`deployment::drift`); meanwhile the
    // slices keep what they hold.
    let editor = crate::deployment::drift::record_editors(entries)
        .into_values()
        .next();
    Some(plan::PlanForDelivery {
        name: plan.name_any(),
        status: match editor {
            None => Ok(status),
            Some(manager) => Err(format!(
                "status.instances or status.deployments was written by {manager}, not by the controller; they are delivered again once the controller has rewritten them"
            )),
        },
    })
}

/// The pods whose member Leases the plan reads: the members in `0..replicas` of each pool,
/// at most [`plan::MAX_MEMBERS`] in all (`spec.replicas` is input: a scale to two billion
/// must not build two billion names; beyond the bound the plan reports TooManyMembers and
/// keeps the revision in force), and every existing pod (pods beyond `replicas`, scaling
/// down, still hold their jobs until they acknowledge).
fn lease_holders(pools: &[PoolState]) -> std::collections::BTreeSet<String> {
    let mut room = plan::MAX_MEMBERS;
    let mut names = std::collections::BTreeSet::new();
    for pool in pools {
        if let Some(pods) = &pool.deployment_pods {
            // A Deployment's members are its pods: there are no names beyond them.
            room = room.saturating_sub(u32::try_from(pods.len()).unwrap_or(u32::MAX));
            names.extend(pods.keys().cloned());
            continue;
        }
        let members = pool.replicas.min(room);
        room -= members;
        names.extend(
            (0..members)
                .chain(pool.pods.keys().copied())
                .map(|ordinal| format!("{}-{ordinal}", pool.name)),
        );
    }
    names
}

/// Most members named in a Lease list's selector; beyond, the URL would grow too long.
const MAX_NAMED_LEASES: usize = 100;

/// The label selector of the member Leases to read: the sidecar labels its Lease
/// `shoal.dev/member=<pod>`, so a few members are named (`in (...)`, nothing of other
/// Swarms listed); many are read from every member Lease of the namespace, kept by name
/// afterwards. `None`: no member, nothing to read.
fn member_lease_selector(members: &std::collections::BTreeSet<String>) -> Option<String> {
    if members.is_empty() {
        return None;
    }
    if members.len() > MAX_NAMED_LEASES {
        return Some(names::LABEL_MEMBER.to_owned());
    }
    let named: Vec<&str> = members.iter().map(String::as_str).collect();
    Some(format!("{} in ({})", names::LABEL_MEMBER, named.join(",")))
}

/// A pod as the plan sees it.
pub(crate) fn pod_state(pod: &Pod) -> PodState {
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
    }
}

/// The StatefulSets and Deployments labelled for Swarm `swarm`: its pools.
async fn list_pools(
    client: &Client,
    namespace: &str,
    swarm: &str,
) -> Result<(Vec<StatefulSet>, Vec<Deployment>), Error> {
    let list = ListParams::default().labels(&format!("{}={swarm}", names::LABEL_SWARM));
    let failed = |kind: &'static str| {
        move |source| Error::ListPools {
            kind,
            swarm: swarm.to_owned(),
            source,
        }
    };
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .list(&list)
        .await
        .map_err(failed("StatefulSets"))?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&list)
        .await
        .map_err(failed("Deployments"))?;
    Ok((statefulsets.items, deployments.items))
}

/// A pool's `spec.replicas` as the controller reads it (absent: 1, as the API server
/// defaults it).
fn replicas_of(replicas: Option<i32>) -> u32 {
    replicas.unwrap_or(1).max(0) as u32
}

/// The inputs outside the Swarm that its status records (`status.observedInputs`), read
/// now: what `kubectl shoal wait` compares with the status, without the rest of an
/// observation (pods, slices, Leases are the controller's to judge).
pub async fn observe_inputs(
    swarm: &Swarm,
    client: &Client,
) -> Result<crate::crd::ObservedInputs, Error> {
    let name = swarm.name_any();
    let namespace = swarm
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let (statefulsets, deployments) = list_pools(client, &namespace, &name).await?;
    let mut pools: Vec<(String, u32)> = statefulsets
        .iter()
        .map(|sts| {
            let replicas = sts.spec.as_ref().and_then(|spec| spec.replicas);
            (sts.name_any(), replicas_of(replicas))
        })
        .collect();
    pools.extend(deployments.iter().map(|deployment| {
        let replicas = deployment.spec.as_ref().and_then(|spec| spec.replicas);
        (deployment.name_any(), replicas_of(replicas))
    }));
    let job_source = match &swarm.spec.jobs_from {
        None => JobSource::NotReferenced,
        Some(from) => {
            let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
            read_job_sources(&cm_api, from).await?
        }
    };
    Ok(plan::observed_inputs(
        pools
            .iter()
            .map(|(pool, replicas)| (pool.as_str(), *replicas)),
        &job_source,
    ))
}

/// One pool: its `spec.replicas` and its pods by ordinal, listed with the StatefulSet's own
/// selector (never every pod of the namespace) and kept only if the StatefulSet owns them.
pub(crate) async fn observe_pool(
    pods: &Api<Pod>,
    swarm: &str,
    sts: &StatefulSet,
) -> Result<PoolState, Error> {
    let pool_name = sts.name_any();
    let spec = sts.spec.as_ref();
    let replicas = replicas_of(spec.and_then(|spec| spec.replicas));
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
    let listed = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::ListPods {
            swarm: swarm.to_owned(),
            source,
        })?;
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
pub(crate) async fn observe_deployment_pool(
    replica_sets: &Api<ReplicaSet>,
    pods: &Api<Pod>,
    swarm: &str,
    deployment: &Deployment,
) -> Result<PoolState, Error> {
    let spec = deployment.spec.as_ref();
    let mut members = BTreeMap::new();
    let replicas = replicas_of(spec.and_then(|spec| spec.replicas));
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
    let owned_sets: std::collections::BTreeSet<String> = replica_sets
        .list(&params)
        .await
        .map_err(|source| Error::ListPools {
            kind: "ReplicaSets",
            swarm: swarm.to_owned(),
            source,
        })?
        .items
        .iter()
        .filter(|set| controlled_by(set.owner_references(), "Deployment", &deployment_uid))
        .filter_map(|set| set.uid())
        .collect();
    let listed = pods.list(&params).await.map_err(|source| Error::ListPods {
        swarm: swarm.to_owned(),
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
fn controlled_by(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    kind: &str,
    uid: &str,
) -> bool {
    owners
        .iter()
        .any(|owner| owner.kind == kind && owner.uid == uid && owner.controller == Some(true))
}

/// A label selector as a list query (`a=b,c in (d,e),!f`), `None` when it selects nothing
/// expressible (an empty selector would select every pod).
fn label_selector(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Option<String> {
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

/// A member Lease as the plan reads it; `unchanged_since` is left for the caller's clock.
pub(crate) fn lease_state(lease: &Lease) -> LeaseState {
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

/// Whether this Swarm (by uid) is the ConfigMap's controller owner.
pub(crate) fn owned_by(cm: &ConfigMap, swarm_uid: &str) -> bool {
    cm.owner_references().iter().any(|owner| {
        owner.controller == Some(true) && owner.uid == swarm_uid && owner.kind == "Swarm"
    })
}

/// The field manager, other than this controller, that last changed the ConfigMap's data,
/// if any: server-side field ownership records every writer of each field, so a hand edit
/// (`kubectl edit`, `patch`, `apply`) shows as its manager owning data fields.
pub(crate) fn edited_by(cm: &ConfigMap) -> Option<String> {
    cm.metadata
        .managed_fields
        .as_ref()?
        .iter()
        .find(|entry| {
            entry.manager.as_deref() != Some(FIELD_MANAGER)
                && entry.fields_v1.as_ref().is_some_and(|fields| {
                    ["f:data", "f:binaryData"].iter().any(|key| {
                        fields
                            .0
                            .get(*key)
                            .and_then(|owned| owned.as_object())
                            .is_some_and(|owned| owned.keys().any(|field| is_shoal_data_key(field)))
                    })
                })
        })
        .map(|entry| {
            entry
                .manager
                .clone()
                .unwrap_or_else(|| "an unnamed field manager".to_owned())
        })
}

/// A data key Shoal writes (`f:<key>` in FieldsV1): other keys a user adds are theirs.
fn is_shoal_data_key(field: &str) -> bool {
    let key = field.strip_prefix("f:").unwrap_or(field);
    [
        names::SLICE_DATA_KEY,
        names::INDEX_DATA_KEY,
        REVISION_DATA_KEY,
    ]
    .iter()
    .any(|ours| key.starts_with(ours))
}

/// Who owns a ConfigMap, in words, for the OwnershipConflict message.
fn owner_description(cm: &ConfigMap) -> String {
    match cm
        .owner_references()
        .iter()
        .find(|owner| owner.controller == Some(true))
    {
        Some(owner) => format!("it is owned by {} {}", owner.kind, owner.name),
        None => "it has no controller owner".to_owned(),
    }
}

/// Looks up the ConfigMaps a plan would write that observe did not see (observe lists
/// this Swarm's ConfigMaps by label, and a label can be removed by hand): one of this
/// Swarm's becomes owned, anyone else's foreign. Returns whether any was found foreign.
pub async fn check_targets(
    cm_api: &Api<ConfigMap>,
    swarm_uid: &str,
    names: impl IntoIterator<Item = String>,
    observation: &mut Observation,
) -> Result<bool, Error> {
    let mut taken = false;
    for name in names {
        let found = cm_api
            .get_opt(&name)
            .await
            .map_err(|source| Error::ReadConfigMap {
                name: name.clone(),
                source,
            })?;
        let Some(cm) = found else { continue };
        if owned_by(&cm, swarm_uid) {
            observation
                .owned_config_maps
                .insert(name, cm.uid().unwrap_or_default());
        } else {
            observation
                .foreign_config_maps
                .insert(name, owner_description(&cm));
            taken = true;
        }
    }
    Ok(taken)
}

/// Largest text stored uncompressed in a ConfigMap; the API limit is 1 MiB per object.
pub const MAX_PLAIN_BYTES: usize = 900 * 1024;

/// gzip-compresses text.
pub fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(text.as_bytes());
    encoder.finish().unwrap_or_default()
}

/// Decompresses gzip text; `None` if it is not gzip-compressed UTF-8.
pub fn gunzip(bytes: &[u8]) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Reads a member's slice ConfigMap (and its parts, if split).
pub(crate) fn slice_object(
    member: &str,
    cm: &ConfigMap,
    all: &BTreeMap<String, ConfigMap>,
) -> SliceObject {
    let annotations = cm.annotations();
    let parts: usize = annotations
        .get(names::ANNOTATION_PARTS)
        .and_then(|parts| parts.parse().ok())
        .unwrap_or(1)
        .max(1);
    let binary = |cm: &ConfigMap, key: &str| -> Option<Vec<u8>> {
        cm.binary_data
            .as_ref()?
            .get(key)
            .map(|bytes| bytes.0.clone())
    };
    let encoded = if parts > 1 {
        let mut chunks = Vec::new();
        for part in 0..parts {
            let chunk = all
                .get(&names::slice_configmap_part(member, part))
                .and_then(|cm| binary(cm, &format::part_data_key(part)));
            match chunk {
                Some(chunk) => chunks.push(chunk),
                None => {
                    return SliceObject {
                        text: None,
                        written_for_uid: annotations.get(WRITTEN_FOR_UID_ANNOTATION).cloned(),
                        phase: annotations.get(PHASE_ANNOTATION).cloned(),
                        parts,
                        decode_error: Some(format!(
                            "part {part} of {parts} ({}) is missing",
                            names::slice_configmap_part(member, part)
                        )),
                    };
                }
            }
        }
        Some(format::EncodedSlice::Split(chunks))
    } else if let Some(text) = cm
        .data
        .as_ref()
        .and_then(|data| data.get(names::SLICE_DATA_KEY))
    {
        Some(format::EncodedSlice::Plain(text.clone()))
    } else {
        binary(cm, names::SLICE_GZIP_DATA_KEY).map(format::EncodedSlice::Gzip)
    };
    let (text, decode_error) = match encoded.as_ref().map(format::decode_slice) {
        None => (None, None),
        Some(Ok(slice)) => (Some(format::render_slice(&slice)), None),
        // Plain text that fails to parse is handed over as is; plan names the problem.
        Some(Err(_)) if matches!(encoded, Some(format::EncodedSlice::Plain(_))) => (
            cm.data
                .as_ref()
                .and_then(|data| data.get(names::SLICE_DATA_KEY))
                .cloned(),
            None,
        ),
        Some(Err(error)) => (None, Some(error.to_string())),
    };
    SliceObject {
        text,
        written_for_uid: annotations.get(WRITTEN_FOR_UID_ANNOTATION).cloned(),
        phase: annotations.get(PHASE_ANNOTATION).cloned(),
        parts,
        decode_error,
    }
}

/// The records split over several ConfigMaps, reassembled (see `plan::join_record`):
/// revision → the record, or why it cannot be used. `record_maps` are the Swarm's own
/// history ConfigMaps (edited ones left out, so a part someone changed is missing).
fn split_records(
    swarm: &str,
    record_maps: &BTreeMap<String, ConfigMap>,
) -> Vec<(u64, Result<RevisionRecord, String>)> {
    let mut records = Vec::new();
    for cm in record_maps.values() {
        let annotations = cm.annotations();
        let Some(parts) = annotations
            .get(names::ANNOTATION_PARTS)
            .and_then(|parts| parts.parse::<usize>().ok())
            .filter(|parts| *parts > 1)
        else {
            continue;
        };
        let Some(revision) = cm
            .labels()
            .get(names::LABEL_REVISION)
            .and_then(|revision| revision.parse::<u64>().ok())
            .filter(|revision| cm.name_any() == names::revision_configmap(swarm, *revision))
        else {
            continue;
        };
        let checksum = annotations
            .get(plan::RECORD_CHECKSUM_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let chunks: Vec<Option<Vec<u8>>> = (0..parts)
            .map(|part| {
                record_maps
                    .get(&plan::record_part_configmap(swarm, revision, part))?
                    .binary_data
                    .as_ref()?
                    .get(&plan::record_part_key(part))
                    .map(|bytes| bytes.0.clone())
            })
            .collect();
        let joined = plan::join_record(&chunks, &checksum, &|part| {
            plan::record_part_configmap(swarm, revision, part)
        })
        .and_then(|record| {
            // A record claiming another revision is no record of this one.
            (record.revision == revision)
                .then_some(record)
                .ok_or_else(|| {
                    format!(
                        "ConfigMap {}: holds the record of another revision",
                        cm.name_any()
                    )
                })
        });
        records.push((revision, joined));
    }
    records
}

/// Reads `key` from `data`, or `<key>.gz` from `binaryData`.
pub(crate) fn read_text(cm: &ConfigMap, key: &str) -> Option<String> {
    if let Some(text) = cm.data.as_ref().and_then(|data| data.get(key)) {
        return Some(text.clone());
    }
    let compressed = cm.binary_data.as_ref()?.get(&format!("{key}.gz"))?;
    gunzip(&compressed.0)
}

/// Publishes an Event about the Swarm.
pub(crate) async fn publish(ctx: &Context, swarm: &Swarm, warning: bool, reason: &str, note: &str) {
    publish_on(ctx, &swarm.object_ref(&()), warning, reason, note).await;
}

/// Publishes an Event; failing to do so is logged, never fatal.
pub async fn publish_on(
    ctx: &Context,
    reference: &ObjectReference,
    warning: bool,
    reason: &str,
    note: &str,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    ctx.metrics.wrote("event");
    if let Err(error) = ctx.events.publish(&event, reference).await {
        warn!(%error, reason, "could not publish Event");
    }
}

/// Reads every part of a `jobsFrom`: the ConfigMaps it names, in order, or those its
/// selector picks, in name order. One part is returned as itself (the single-ConfigMap
/// form), several as [`JobSource::Parts`].
async fn read_job_sources(cm_api: &Api<ConfigMap>, from: &JobsFrom) -> Result<JobSource, Error> {
    let mut parts = Vec::new();
    if let Some(selector) = &from.selector {
        let labels = selector.label_selector();
        let mut listed = cm_api
            .list(&ListParams::default().labels(&labels))
            .await
            .map_err(|source| Error::ReadJobConfigMap {
                name: format!("labelled {labels}"),
                source,
            })?
            .items;
        listed.sort_by_key(|cm| cm.name_any());
        if listed.is_empty() {
            return Ok(JobSource::NoMatch { selector: labels });
        }
        parts.extend(
            listed
                .iter()
                .map(|cm| job_source_of(cm.name_any(), &selector.key, Some(cm))),
        );
    }
    for reference in from.named() {
        let cm = match cm_api.get_opt(&reference.name).await {
            Err(source) if !is_not_found(&source) => {
                return Err(Error::ReadJobConfigMap {
                    name: reference.name.clone(),
                    source,
                });
            }
            Err(_) => None,
            Ok(found) => found,
        };
        parts.push(job_source_of(
            reference.name.clone(),
            &reference.key,
            cm.as_ref(),
        ));
    }
    Ok(match parts.len() {
        1 => parts.remove(0),
        _ => JobSource::Parts(parts),
    })
}

/// Where one ConfigMap of a job list stands: absent, without the key, or its text.
fn job_source_of(name: String, key: &str, cm: Option<&ConfigMap>) -> JobSource {
    let Some(cm) = cm else {
        return JobSource::MissingConfigMap { name };
    };
    match cm.data.as_ref().and_then(|data| data.get(key)) {
        None => JobSource::MissingKey {
            name,
            key: key.to_owned(),
        },
        Some(text) => JobSource::Text {
            name,
            key: key.to_owned(),
            text: text.clone(),
        },
    }
}

/// Reconciles one Swarm: observe, plan, apply.
#[instrument(skip_all, fields(swarm = %swarm.name_any(), namespace = swarm.namespace().unwrap_or_default()))]
pub async fn reconcile(swarm: Arc<Swarm>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&swarm, &ctx).await;
    if let Err(error) = &result {
        // Repeats of one error fold into an Event series; a different error is a new Event.
        publish(&ctx, &swarm, true, error.category(), &error.to_string()).await;
    }
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_inner(swarm: &Swarm, ctx: &Context) -> Result<Action, Error> {
    // The Swarm as the API server holds it now, not as the watch cache last saw it: a
    // reconcile triggered by a pod or Lease right after this controller wrote the status
    // would otherwise plan from the status before that write (and, for one, announce
    // revision 1 twice).
    let name = swarm.name_any();
    let namespace = swarm
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let swarms: Api<Swarm> = Api::namespaced(ctx.client.clone(), &namespace);
    let fresh = swarms
        .get_opt(&name)
        .await
        .map_err(|source| Error::ReadSwarm {
            swarm: name.clone(),
            source,
        })?;
    let Some(fresh) = fresh else {
        return Ok(Action::await_change());
    };
    if fresh.metadata.deletion_timestamp.is_some() {
        // Owned ConfigMaps go with the Swarm (ownerReferences); nothing to do.
        return Ok(Action::await_change());
    }
    let swarm = &fresh;
    let mut observation = observe(swarm, &ctx.client).await?;
    observation.approved_by_policy = crate::approvers::vouched_for(
        &ctx.client,
        ctx.settings.namespace.is_none(),
        crate::approvers::swarm_may_approve(&observation.annotations, &observation.status),
    )
    .await;
    observation.blocked_evictions = ctx
        .blocked_evictions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&format!("{namespace}/{name}"))
        .cloned()
        .unwrap_or_default();
    for note in ctx
        .lease_clock
        .stamp(&namespace, &mut observation.leases, observation.now)
    {
        publish(ctx, swarm, true, "LeaseNotTrusted", &note).await;
    }
    let changed_at = observation.status.changed_at.clone();
    let plan = plan_checked(swarm, &mut observation, ctx).await?;
    crate::apply::apply(swarm, &observation, &plan, ctx).await?;
    for event in &plan.events {
        publish(ctx, swarm, event.warning, &event.reason, &event.note).await;
    }
    if let Some(revision) = plan.applied_revision {
        info!(revision, jobs_moved = plan.jobs_moved, "revision applied");
        ctx.metrics.revisions_applied.inc();
        ctx.metrics.jobs_moved.inc_by(plan.jobs_moved);
    }
    ctx.metrics.set_swarm(
        &namespace,
        &observation.swarm,
        crate::metrics::SwarmGauges {
            pending: plan.status.pending_revision.is_some(),
            phase: plan.status.phase.as_deref(),
            revision_in_force: plan.status.current_revision,
            unowned_jobs: plan.status.unowned_jobs,
        },
    );
    let converged = plan
        .events
        .iter()
        .any(|event| event.reason == "RevisionApplied");
    if converged
        && let Some(since) = changed_at.and_then(|text| text.parse::<jiff::Timestamp>().ok())
    {
        let seconds = observation.now.duration_since(since).as_secs_f64();
        ctx.metrics.change_to_applied.observe(seconds.max(0.0));
    }
    Ok(match plan.requeue_after {
        Some(after) => Action::requeue(after.max(Duration::from_millis(200))),
        None => Action::requeue(ctx.settings.resync),
    })
}

/// Plans; if the plan would write ConfigMaps observe did not see, looks them up first and,
/// when one belongs to someone else, plans again knowing it.
async fn plan_checked(
    swarm: &Swarm,
    observation: &mut Observation,
    ctx: &Context,
) -> Result<plan::Plan, Error> {
    let plan = plan::plan(observation);
    let unchecked = plan::unchecked_targets(observation, &plan.operations);
    if unchecked.is_empty() {
        return Ok(plan);
    }
    let namespace = swarm.namespace().unwrap_or_default();
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = swarm.uid().unwrap_or_default();
    if check_targets(&cm_api, &uid, unchecked, observation).await? {
        return Ok(plan::plan(observation));
    }
    Ok(plan)
}

/// What to do after a failed reconcile: count it, say it, retry soon.
pub fn error_policy(swarm: Arc<Swarm>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(swarm = %swarm.name_any(), %error, "reconcile failed");
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::metrics::ErrorLabels {
            category: error.category().to_owned(),
        })
        .inc();
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_holders_of_a_pool_scaled_to_two_billion_stop_at_the_member_bound() {
        let pools = vec![
            PoolState {
                name: "huge".to_owned(),
                replicas: 2_000_000_000,
                deployment_pods: None,
                pods: BTreeMap::new(),
                observed_current: true,
            },
            PoolState {
                name: "small".to_owned(),
                replicas: 2,
                deployment_pods: None,
                pods: BTreeMap::from([(
                    0,
                    PodState {
                        uid: "u".to_owned(),
                        ready: true,
                        deleting: false,
                    },
                )]),
                observed_current: true,
            },
        ];
        let names = lease_holders(&pools);
        assert_eq!(names.len(), plan::MAX_MEMBERS as usize + 1);
        assert!(names.contains("huge-9999") && !names.contains("huge-10000"));
        assert!(names.contains("small-0") && !names.contains("small-1"));
    }

    #[test]
    fn member_leases_are_listed_by_name_when_few_and_by_label_when_many() {
        let few: std::collections::BTreeSet<String> =
            ["worker-0", "worker-1"].map(str::to_owned).into();
        assert_eq!(
            member_lease_selector(&few).as_deref(),
            Some("shoal.dev/member in (worker-0,worker-1)")
        );
        let many: std::collections::BTreeSet<String> = (0..=MAX_NAMED_LEASES)
            .map(|i| format!("worker-{i}"))
            .collect();
        assert_eq!(
            member_lease_selector(&many).as_deref(),
            Some("shoal.dev/member")
        );
        assert_eq!(member_lease_selector(&Default::default()), None);
    }

    #[test]
    fn every_error_has_a_distinct_category() {
        let categories = [
            Error::MissingNamespace("x".into()).category(),
            Error::SerializeRevision {
                revision: 1,
                source: serde_json::from_str::<u8>("x").unwrap_err(),
            }
            .category(),
        ];
        assert_ne!(categories[0], categories[1]);
    }
}
