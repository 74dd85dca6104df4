//! The plan's headless Service (`spec.serviceName`): what to write and delete.
//!
//! The Service has no selector (the controller writes no labels on member pods,
//! which it does not own): its endpoints are EndpointSlices the plan owns
//! (`discovery.k8s.io/v1`, labels `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by: shoal-controller.shoal.dev`), so a lookup of the
//! Service's name reaches exactly the members holding the plan's instances.
//!
//! - **Endpoints.** One per member pod that holds a delivered entry of
//!   `status.instances` (`pending`, `installing`, `installed`, `failed`) and has
//!   an IP. `ready` (and `serving`) when the pod is Ready and an entry on it
//!   reports `installed`; `terminating` when the pod is being deleted. A
//!   relocation lists both members until the old copy leaves.
//! - **Ports.** The union of the plan's applications' ports (`spec`), on the
//!   Service (`targetPort` = `port`) and on every slice, named `tcp-80`, `udp-53`.
//! - **Size.** At most [`MAX_ENDPOINTS_PER_SLICE`] endpoints per slice (the API's
//!   limit), IPv4 and IPv6 in separate slices (`addressType`), slices
//!   `<service>-shoal-<n>` numbered in order; a Swarm has at most
//!   `MAX_MEMBERS` (10,000) members, so at most 10 slices per family.
//! - **Ownership.** The controller writes and deletes only a Service and slices
//!   with a `controller: true` ownerReference to the plan (uid). A Service of
//!   that name held by anyone else is never written: `Degraded`, reason
//!   `OwnershipConflict`, naming both, one Warning on the transition; its
//!   slices are not written either. Owned Services of another name (the name
//!   changed or was removed) and owned slices not wanted are deleted, with the
//!   uid seen as precondition.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use shoal_core::deploy::Port;
use shoal_core::deploy::port::render_ports;
use shoal_core::names::{
    ENDPOINTSLICE_MANAGER, LABEL_DEPLOYMENT_PLAN, LABEL_ENDPOINTSLICE_MANAGED_BY,
    LABEL_SERVICE_NAME, endpoint_slice,
};

use super::members::ports;
use super::{PlanDecision, PlanObservation, PoolObservation, status};
use crate::api::deployment_plan::ServiceStatus;
use crate::planned::PlannedEvent;

/// The API's limit of endpoints in one EndpointSlice.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 1000;

/// An object of a name, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedObject {
    /// Its uid.
    pub uid: String,
    /// It has a `controller: true` ownerReference to this plan.
    pub owned: bool,
    /// Who holds it when the plan does not: its controller owner (`Kind/name`), or
    /// that it has none.
    pub holder: String,
}

/// What the plan's Service work reads of the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceObservation {
    /// The Service named `spec.serviceName`, when it exists.
    pub named: Option<ObservedObject>,
    /// Services the plan owns (labelled with it and owned): name → uid.
    pub owned_services: BTreeMap<String, String>,
    /// EndpointSlices the plan owns: name → uid.
    pub owned_slices: BTreeMap<String, String>,
}

/// What to write and delete for the plan's Service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServicePlan {
    /// The Service to write: created when absent, applied when owned.
    pub service: Option<Service>,
    /// Whether the Service exists already (owned): applied, else created.
    pub service_exists: bool,
    /// The EndpointSlices to write, each with whether it exists (owned) already.
    pub slices: Vec<(EndpointSlice, bool)>,
    /// Owned Services to delete: name → uid.
    pub delete_services: BTreeMap<String, String>,
    /// Owned EndpointSlices to delete: name → uid.
    pub delete_slices: BTreeMap<String, String>,
}

/// Decides the plan's Service from the observation and the status just decided;
/// records `status.service` and, on a name held by another object, the
/// `Degraded` condition and its Warning.
pub(super) fn attach(obs: &PlanObservation, decision: &mut PlanDecision) {
    let mut plan = ServicePlan::default();
    let wanted = obs.spec.service_name.as_deref();
    plan.delete_services = obs
        .service
        .owned_services
        .iter()
        .filter(|(name, _)| Some(name.as_str()) != wanted)
        .map(|(name, uid)| (name.clone(), uid.clone()))
        .collect();
    let Some(name) = wanted else {
        plan.delete_slices = obs.service.owned_slices.clone();
        decision.status.service = None;
        decision.service = plan;
        return;
    };
    let ports: Vec<Port> = ports(&obs.spec).into_iter().collect();
    let mut service_status = ServiceStatus {
        name: name.to_owned(),
        ports: render_ports(&ports),
        ..ServiceStatus::default()
    };
    match &obs.service.named {
        Some(named) if !named.owned => {
            let message = format!(
                "DeploymentPlan {}: spec.serviceName names Service {name}, which {} holds; the plan does not take it over: rename one of them",
                obs.name, named.holder
            );
            service_status.conflict = message.clone();
            conflict(obs, decision, message);
            // Slices written for the Service while it was the plan's are removed too.
            plan.delete_slices = obs.service.owned_slices.clone();
            decision.status.service = Some(service_status);
            decision.service = plan;
            return;
        }
        named => plan.service_exists = named.is_some(),
    }
    let owner = owner_reference(obs);
    plan.service = Some(service(obs, name, &ports, &owner));
    let endpoints = endpoints(obs, &decision.status.instances);
    service_status.endpoints = endpoints.len() as u32;
    service_status.ready = endpoints
        .iter()
        .filter(|(_, endpoint)| {
            endpoint
                .conditions
                .as_ref()
                .is_some_and(|conditions| conditions.ready == Some(true))
        })
        .count() as u32;
    let slices = endpoint_slices(obs, name, &ports, &owner, endpoints);
    let wanted: BTreeSet<&str> = slices
        .iter()
        .filter_map(|slice| slice.metadata.name.as_deref())
        .collect();
    plan.delete_slices = obs
        .service
        .owned_slices
        .iter()
        .filter(|(slice, _)| !wanted.contains(slice.as_str()))
        .map(|(slice, uid)| (slice.clone(), uid.clone()))
        .collect();
    plan.slices = slices
        .into_iter()
        .map(|slice| {
            let exists = slice
                .metadata
                .name
                .as_ref()
                .is_some_and(|name| obs.service.owned_slices.contains_key(name));
            (slice, exists)
        })
        .collect();
    decision.status.service = Some(service_status);
    decision.service = plan;
}

/// `Degraded`/`OwnershipConflict` with `message`, and a Warning when it is new.
fn conflict(obs: &PlanObservation, decision: &mut PlanDecision, message: String) {
    let previous = status::previous_condition(&obs.status, "Degraded");
    if previous.is_none_or(|condition| {
        condition.reason != "OwnershipConflict" || condition.message != message
    }) {
        decision.events.push(PlannedEvent {
            warning: true,
            reason: "OwnershipConflict".to_owned(),
            note: message.clone(),
        });
    }
    status::set_condition(
        obs,
        &mut decision.status,
        "Degraded",
        true,
        "OwnershipConflict",
        message,
    );
}

fn owner_reference(obs: &PlanObservation) -> OwnerReference {
    OwnerReference {
        api_version: "shoal.dev/v1alpha1".to_owned(),
        kind: "DeploymentPlan".to_owned(),
        name: obs.name.clone(),
        uid: obs.uid.clone(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn metadata(obs: &PlanObservation, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        labels: Some(BTreeMap::from([(
            LABEL_DEPLOYMENT_PLAN.to_owned(),
            obs.name.clone(),
        )])),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// Slice `index` of `service`: the plan's labels and Kubernetes' two.
fn slice_metadata(
    obs: &PlanObservation,
    service: &str,
    index: usize,
    owner: &OwnerReference,
) -> ObjectMeta {
    let mut metadata = metadata(obs, endpoint_slice(service, index), owner);
    if let Some(labels) = metadata.labels.as_mut() {
        labels.insert(LABEL_SERVICE_NAME.to_owned(), service.to_owned());
        labels.insert(
            LABEL_ENDPOINTSLICE_MANAGED_BY.to_owned(),
            ENDPOINTSLICE_MANAGER.to_owned(),
        );
    }
    metadata
}

/// `tcp-80`: a port's name on the Service and its slices (a DNS label).
fn port_name(port: &Port) -> String {
    format!(
        "{}-{}",
        port.protocol.as_str().to_ascii_lowercase(),
        port.port
    )
}

fn service(obs: &PlanObservation, name: &str, ports: &[Port], owner: &OwnerReference) -> Service {
    Service {
        metadata: metadata(obs, name.to_owned(), owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            ports: (!ports.is_empty()).then(|| {
                ports
                    .iter()
                    .map(|port| ServicePort {
                        name: Some(port_name(port)),
                        protocol: Some(port.protocol.as_str().to_owned()),
                        port: i32::from(port.port),
                        target_port: Some(IntOrString::Int(i32::from(port.port))),
                        ..ServicePort::default()
                    })
                    .collect()
            }),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The endpoints by member pod name (sorted), per the module docs.
fn endpoints(
    obs: &PlanObservation,
    instances: &[crate::api::deployment_plan::InstanceStatus],
) -> BTreeMap<String, Endpoint> {
    let pods: BTreeMap<String, &super::MemberPod> = obs
        .pools
        .iter()
        .flat_map(PoolObservation::members)
        .collect();
    let mut installed: BTreeMap<&str, bool> = BTreeMap::new();
    for entry in instances.iter().filter(|entry| entry.delivered()) {
        *installed.entry(&entry.member).or_default() |= entry.state == "installed";
    }
    installed
        .into_iter()
        .filter_map(|(member, installed)| {
            let pod = pods.get(member)?;
            let ip = pod.ip.clone()?;
            let ready = installed && pod.ready && !pod.deleting;
            Some((
                member.to_owned(),
                Endpoint {
                    addresses: vec![ip],
                    conditions: Some(EndpointConditions {
                        ready: Some(ready),
                        serving: Some(ready),
                        terminating: Some(pod.deleting),
                    }),
                    hostname: None,
                    target_ref: Some(k8s_openapi::api::core::v1::ObjectReference {
                        kind: Some("Pod".to_owned()),
                        name: Some(member.to_owned()),
                        uid: Some(pod.uid.clone()),
                        ..Default::default()
                    }),
                    ..Endpoint::default()
                },
            ))
        })
        .collect()
}

/// The slices: per address family, endpoints in member order, at most
/// [`MAX_ENDPOINTS_PER_SLICE`] each, numbered across families (IPv4 first).
fn endpoint_slices(
    obs: &PlanObservation,
    service: &str,
    ports: &[Port],
    owner: &OwnerReference,
    endpoints: BTreeMap<String, Endpoint>,
) -> Vec<EndpointSlice> {
    let mut families: BTreeMap<&str, Vec<Endpoint>> = BTreeMap::new();
    for endpoint in endpoints.into_values() {
        let family = if endpoint.addresses.iter().all(|ip| ip.contains(':')) {
            "IPv6"
        } else {
            "IPv4"
        };
        families.entry(family).or_default().push(endpoint);
    }
    let ports: Vec<EndpointPort> = ports
        .iter()
        .map(|port| EndpointPort {
            name: Some(port_name(port)),
            protocol: Some(port.protocol.as_str().to_owned()),
            port: Some(i32::from(port.port)),
            app_protocol: None,
        })
        .collect();
    let mut slices = Vec::new();
    for (family, endpoints) in families {
        for chunk in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE) {
            slices.push(EndpointSlice {
                metadata: slice_metadata(obs, service, slices.len(), owner),
                address_type: family.to_owned(),
                endpoints: chunk.to_vec(),
                ports: Some(ports.clone()),
            });
        }
    }
    if slices.is_empty() {
        // An empty slice says "no endpoints" to every reader, rather than none at all.
        slices.push(EndpointSlice {
            metadata: slice_metadata(obs, service, 0, owner),
            address_type: "IPv4".to_owned(),
            endpoints: Vec::new(),
            ports: Some(ports),
        });
    }
    slices
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::deployment_plan::InstanceStatus;
    use crate::deployment_plan::decide::tests::{observation, spec};
    use crate::deployment_plan::decide::{MemberPod, PoolObservation};

    fn entry(n: u32, member: &str, state: &str) -> InstanceStatus {
        InstanceStatus {
            name: format!("web-{n}"),
            member: member.to_owned(),
            update_domain: String::new(),
            deployment: 1,
            state: state.to_owned(),
            error: None,
        }
    }

    /// `web` on `members` pods of pool `big` (IPv4, the last one IPv6), each holding one
    /// instance in `state`, with `spec.serviceName: web`.
    fn decided(members: u32, state: &str) -> PlanDecision {
        let mut obs = observation(spec(0, "Automatic", "n"));
        obs.spec.service_name = Some("web".to_owned());
        obs.pools = vec![PoolObservation {
            name: "big".to_owned(),
            annotations: BTreeMap::new(),
            pods: (0..members)
                .map(|n| {
                    let ip = if n + 1 == members {
                        format!("fd00::{n:x}")
                    } else {
                        format!("10.0.{}.{}", n / 250, n % 250)
                    };
                    let pod = MemberPod {
                        uid: format!("uid-{n}"),
                        ready: true,
                        deleting: false,
                        node_zone: None,
                        ip: Some(ip),
                    };
                    (n, pod)
                })
                .collect(),
        }];
        let mut decision = PlanDecision {
            status: obs.status.clone(),
            events: Vec::new(),
            requeue_after: None,
            leave_edited_record: false,
            service: ServicePlan::default(),
        };
        decision.status.instances = (0..members)
            .map(|n| entry(n, &format!("big-{n}"), state))
            .collect();
        obs.service.owned_slices = BTreeMap::from([("old-shoal-0".to_owned(), "u".to_owned())]);
        attach(&obs, &mut decision);
        decision
    }

    #[test]
    fn a_slice_holds_at_most_1000_endpoints_and_one_address_family() {
        let decision = decided(1002, "installed");
        let slices: Vec<(&str, &str, usize)> = decision
            .service
            .slices
            .iter()
            .map(|(slice, _)| {
                (
                    slice.metadata.name.as_deref().unwrap_or_default(),
                    slice.address_type.as_str(),
                    slice.endpoints.len(),
                )
            })
            .collect();
        assert_eq!(
            slices,
            [
                ("web-shoal-0", "IPv4", 1000),
                ("web-shoal-1", "IPv4", 1),
                ("web-shoal-2", "IPv6", 1)
            ]
        );
        let status = decision.status.service.expect("status.service");
        assert_eq!((status.endpoints, status.ready), (1002, 1002));
        assert_eq!(
            decision.service.delete_slices.keys().collect::<Vec<_>>(),
            ["old-shoal-0"],
            "a slice no longer wanted is deleted"
        );
    }

    #[test]
    fn an_endpoint_is_ready_only_once_an_instance_on_it_is_installed_and_removing_ones_are_not_listed()
     {
        let pending = decided(2, "pending");
        let ready: Vec<Option<bool>> = pending.service.slices[0]
            .0
            .endpoints
            .iter()
            .map(|endpoint| endpoint.conditions.as_ref().and_then(|c| c.ready))
            .collect();
        assert_eq!(ready, [Some(false)]);
        let removing = decided(2, "removing");
        assert!(
            removing
                .service
                .slices
                .iter()
                .all(|(slice, _)| slice.endpoints.is_empty())
        );
    }
}
