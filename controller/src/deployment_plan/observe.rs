//! Reading one plan's world: the plan itself (fresh, not from a cache), its
//! Swarm, the Swarm's pools and their pods, the member Leases, and the other
//! plans of the namespace.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use shoal_core::names::ANNOTATION_INSTANCE_STATES;
use shoal_core::{format, names};

use super::decide::drift::{HeldInstance, record_editors};
use super::decide::service::{ObservedObject, ServiceObservation};
use super::decide::{
    MemberLease, MemberPod, OtherPlan, PendingSwarmRevision, PlanObservation, PoolObservation,
    SwarmView,
};
use crate::api::deployment_plan::DeploymentPlan;
use crate::api::swarm::Swarm;
use crate::cluster::config_maps::{edited_by, owned_by, slice_object};
use crate::cluster::leases::lease_state;
use crate::cluster::nodes::{NodeZones, node_zones, zones_not_read};
use crate::cluster::pools::{PodSource, observe_pool};

/// A read that failed, naming the plan and what was being read.
#[derive(Debug, thiserror::Error)]
#[error("DeploymentPlan {plan}: reading {what}: {source}")]
pub struct ObserveError {
    /// The plan.
    pub plan: String,
    /// What was being read.
    pub what: String,
    /// Why it failed.
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Observes the plan `name` of `namespace`; `Ok(None)` when it no longer exists.
/// `read_zones`: read the zones of the members' Nodes (a cluster-wide controller; a
/// namespace-scoped one may not read Nodes, so it does not ask).
pub async fn observe(
    client: &Client,
    namespace: &str,
    name: &str,
    now: Timestamp,
    read_zones: bool,
) -> Result<Option<(DeploymentPlan, PlanObservation)>, ObserveError> {
    let failed = |what: &str| {
        let what = what.to_owned();
        move |source: kube::Error| ObserveError {
            plan: format!("{namespace}/{name}"),
            what,
            source: Box::new(source),
        }
    };
    let plans: Api<DeploymentPlan> = Api::namespaced(client.clone(), namespace);
    let Some(plan) = plans.get_opt(name).await.map_err(failed("the plan"))? else {
        return Ok(None);
    };
    let swarm = plan.spec.swarm.clone();
    let swarm_object = Api::<Swarm>::namespaced(client.clone(), namespace)
        .get_opt(&swarm)
        .await
        .map_err(failed("its Swarm"))?;
    let swarm_view = swarm_object.as_ref().map(swarm_view);
    let selector = format!("{}={swarm}", names::LABEL_SWARM);
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(failed("the Swarm's pools"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut observed = Vec::new();
    for sts in &statefulsets.items {
        let pool = observe_pool(PodSource::Listed(&pods), sts)
            .await
            .map_err(|error| ObserveError {
                plan: format!("{namespace}/{name}"),
                what: format!("the pods of StatefulSet {}", sts.name_any()),
                source: Box::new(error),
            })?;
        observed.push((sts.annotations().clone(), pool));
    }
    // A member's update domain is its node's zone only where its pool declares none:
    // those pools' Nodes are read, and no other.
    let nodes: BTreeSet<String> = observed
        .iter()
        .filter(|(annotations, _)| !annotations.contains_key(names::ANNOTATION_UPDATE_DOMAIN))
        .flat_map(|(_, pool)| pool.pods.values().filter_map(|pod| pod.node.clone()))
        .collect();
    let zones = if read_zones {
        node_zones(client, nodes)
            .await
            .map_err(failed("the Nodes of the members (their zones)"))?
    } else {
        if !nodes.is_empty() {
            zones_not_read();
        }
        NodeZones::default()
    };
    let pools: Vec<PoolObservation> = observed
        .into_iter()
        .map(|(annotations, pool)| PoolObservation {
            name: pool.name,
            annotations,
            pods: pool
                .pods
                .into_iter()
                .map(|(ordinal, pod)| {
                    (
                        ordinal,
                        MemberPod {
                            node_zone: zones.zone(pod.node.as_deref()),
                            uid: pod.uid,
                            ready: pod.ready,
                            deleting: pod.deleting,
                            ip: pod.ip,
                        },
                    )
                })
                .collect(),
        })
        .collect();
    let member_pods: Vec<String> = pools
        .iter()
        .flat_map(|pool| pool.members().map(|(name, _)| name))
        .collect();
    let mut leases = BTreeMap::new();
    if !member_pods.is_empty() {
        let listed = Api::<Lease>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .map_err(failed("the member Leases"))?;
        let by_name: BTreeMap<String, &Lease> = listed
            .items
            .iter()
            .map(|lease| (lease.name_any(), lease))
            .collect();
        for pod in member_pods {
            if let Some(lease) = by_name.get(&names::member_lease(&pod)) {
                leases.insert(
                    pod,
                    MemberLease {
                        lease: lease_state(lease),
                        instance_states: lease
                            .annotations()
                            .get(ANNOTATION_INSTANCE_STATES)
                            .cloned(),
                    },
                );
            }
        }
    }
    let other_plans = plans
        .list(&ListParams::default())
        .await
        .map_err(failed("the other plans of the namespace"))?
        .items
        .into_iter()
        .filter(|other| other.name_any() != name && other.spec.swarm == swarm)
        .map(|other| OtherPlan {
            name: other.name_any(),
            status: other.status.clone().unwrap_or_default(),
            spec: other.spec,
        })
        .collect();
    let record_editors =
        record_editors(plan.metadata.managed_fields.as_deref().unwrap_or_default());
    // The slices are read only to put an edited record back.
    let held_instances = match (&swarm_object, record_editors.contains_key("instances")) {
        (_, false) => Ok(Vec::new()),
        (None, true) => Err(format!("Swarm {swarm} does not exist")),
        (Some(swarm_object), true) => {
            let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(failed("the member slices"))?;
            held_instances(name, swarm_object, config_maps.items)
        }
    };
    let service = observe_service(client, namespace, &plan)
        .await
        .map_err(failed("its Service and EndpointSlices"))?;
    let observation = PlanObservation {
        name: name.to_owned(),
        uid: plan.uid().unwrap_or_default(),
        generation: plan.metadata.generation,
        spec: plan.spec.clone(),
        annotations: plan.annotations().clone(),
        status: plan.status.clone().unwrap_or_default(),
        swarm: swarm_view,
        pools,
        leases,
        other_plans,
        record_editors,
        held_instances,
        approved_by_policy: false,
        service,
        now,
    };
    Ok(Some((plan, observation)))
}

/// The plan's Service work's inputs: the Service `spec.serviceName` names, and the
/// Services and EndpointSlices labelled with the plan that it owns (a label proves
/// nothing; the ownerReference does).
async fn observe_service(
    client: &Client,
    namespace: &str,
    plan: &DeploymentPlan,
) -> Result<ServiceObservation, kube::Error> {
    let uid = plan.uid().unwrap_or_default();
    let owned = |owners: &[OwnerReference]| {
        owners
            .iter()
            .any(|owner| owner.controller == Some(true) && owner.uid == uid)
    };
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let named = match plan.spec.service_name.as_deref() {
        None => None,
        Some(name) => services.get_opt(name).await?.map(|service| {
            let owners = service.owner_references();
            let holder = owners
                .iter()
                .find(|owner| owner.controller == Some(true))
                .map_or_else(
                    || format!("Service {name} (no controller owner)"),
                    |owner| format!("Service {name} (owned by {} {})", owner.kind, owner.name),
                );
            ObservedObject {
                uid: service.uid().unwrap_or_default(),
                owned: owned(owners),
                holder,
            }
        }),
    };
    let selector = format!("{}={}", names::LABEL_DEPLOYMENT_PLAN, plan.name_any());
    let labelled = ListParams::default().labels(&selector);
    let owned_services = services
        .list(&labelled)
        .await?
        .items
        .into_iter()
        .filter(|service| owned(service.owner_references()))
        .map(|service| (service.name_any(), service.uid().unwrap_or_default()))
        .collect();
    let owned_slices = Api::<EndpointSlice>::namespaced(client.clone(), namespace)
        .list(&labelled)
        .await?
        .items
        .into_iter()
        .filter(|slice| owned(slice.owner_references()))
        .map(|slice| (slice.name_any(), slice.uid().unwrap_or_default()))
        .collect();
    Ok(ServiceObservation {
        named,
        owned_services,
        owned_slices,
    })
}

/// What the plan reads of its Swarm's status: the members its revision in
/// force holds, and the revision waiting for approval.
fn swarm_view(swarm: &Swarm) -> SwarmView {
    let status = swarm.status.clone().unwrap_or_default();
    let cordon = &swarm.spec.cordon;
    SwarmView {
        cordoned: cordon.iter().map(|entry| entry.member.clone()).collect(),
        draining: cordon
            .iter()
            .filter(|entry| entry.drain)
            .map(|entry| entry.member.clone())
            .collect(),
        members_in_force: status
            .members
            .into_iter()
            .filter(|member| member.slice_hash.is_some())
            .map(|member| member.name)
            .collect(),
        pending: status.pending_revision.map(|pending| PendingSwarmRevision {
            revision: pending.revision,
            approve_with: pending.approve_with,
        }),
    }
}

/// The instances of plan `plan` that the slices of `swarm` hold. Only slices the
/// Swarm owns are read, and none that someone else edited (the Swarm
/// controller puts those back first: `SliceRestored`).
fn held_instances(
    plan: &str,
    swarm: &Swarm,
    config_maps: Vec<ConfigMap>,
) -> Result<Vec<HeldInstance>, String> {
    let swarm_uid = swarm.uid().unwrap_or_default();
    let owned: BTreeMap<String, ConfigMap> = config_maps
        .into_iter()
        .filter(|cm| owned_by(cm, &swarm_uid))
        .map(|cm| (cm.name_any(), cm))
        .collect();
    let mut held = Vec::new();
    for (cm_name, cm) in &owned {
        let Some(member) = cm.labels().get(names::LABEL_MEMBER) else {
            continue;
        };
        if let Some(editor) = edited_by(cm) {
            return Err(format!(
                "the slice of member {member} (ConfigMap {cm_name}) was edited by {editor} and is being put back first"
            ));
        }
        // Parts 1.. of a split slice are read through their first ConfigMap.
        if *cm_name != names::slice_configmap(member) {
            continue;
        }
        let object = slice_object(member, cm, &owned);
        let slice = match (object.text, object.decode_error) {
            (Some(text), _) => format::parse_slice(&text).map_err(|error| {
                format!(
                    "the slice of member {member} (ConfigMap {cm_name}) does not parse: {error}"
                )
            })?,
            (None, Some(error)) => {
                return Err(format!(
                    "the slice of member {member} (ConfigMap {cm_name}) cannot be read: {error}"
                ));
            }
            (None, None) => continue,
        };
        held.extend(
            slice
                .instances
                .into_iter()
                .filter(|instance| instance.plan == plan)
                .map(|instance| HeldInstance {
                    member: member.clone(),
                    name: instance.name,
                    deployment: instance.deployment,
                }),
        );
    }
    Ok(held)
}
