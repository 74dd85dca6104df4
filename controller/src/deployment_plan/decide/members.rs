//! The plan's inputs read into what placement takes: the Swarm's members
//! (from its pools' declarations and pods), the plan's demand and
//! requirements, and what other plans of the Swarm hold.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::MemberId;
use shoal_core::deploy::placement::{PlanHolding, reserved_by};
use shoal_core::deploy::{
    DeployMember, InstanceId, PoolDeclaration, Port, Requirement, Reservation, member_update_domain,
};
use shoal_core::member::Resources;

use super::PlanObservation;
use crate::api::deployment_plan::{Comparator, DeploymentPlanSpec, InstanceStatus};
use crate::observed::ordinal_member;

/// The Swarm's members as placement sees them: one per existing pod,
/// available when Ready and not being deleted. A pool annotation that cannot
/// be read is an error naming the pool, the annotation and the entry.
pub(super) fn deploy_members(obs: &PlanObservation) -> Result<Vec<DeployMember>, String> {
    let mut members = Vec::new();
    let nobody = BTreeSet::new();
    let (cordoned, draining) = obs.swarm.as_ref().map_or((&nobody, &nobody), |swarm| {
        (&swarm.cordoned, &swarm.draining)
    });
    for pool in &obs.pools {
        let declaration = PoolDeclaration::from_annotations(&pool.name, &pool.annotations)
            .map_err(|error| format!("StatefulSet {}: {error}", pool.name))?;
        for (ordinal, pod) in &pool.pods {
            let domain = member_update_domain(
                declaration.update_domain.as_deref(),
                pod.node_zone.as_deref(),
                &pool.name,
            );
            let id = MemberId::new(pool.name.clone(), *ordinal);
            let name = id.pod_name();
            // A draining member is unavailable, so its instances are displaced and
            // relocated; a cordoned one keeps them and takes none.
            let available = pod.ready && !pod.deleting && !draining.contains(&name);
            members.push(
                declaration
                    .member(id, available, domain)
                    .with_cordoned(cordoned.contains(&name)),
            );
        }
    }
    Ok(members)
}

/// What one instance consumes: the sum of the applications' demands.
pub fn demand(spec: &DeploymentPlanSpec) -> Resources {
    let mut total = Resources::none();
    for application in &spec.applications {
        total.add(&Resources(application.resources.clone()));
    }
    total
}

/// The ports one instance listens on: those of every application.
pub(super) fn ports(spec: &DeploymentPlanSpec) -> BTreeSet<Port> {
    spec.applications
        .iter()
        .flat_map(|application| &application.ports)
        .map(crate::api::deployment_plan::Port::core)
        .collect()
}

/// The plan's requirements in the core's terms.
pub(super) fn requirements(spec: &DeploymentPlanSpec) -> Vec<Requirement> {
    spec.requirements
        .iter()
        .map(|requirement| {
            let comparator = match requirement.comparator {
                Comparator::In => shoal_core::deploy::Comparator::In,
                Comparator::NotIn => shoal_core::deploy::Comparator::NotIn,
                Comparator::Gte => shoal_core::deploy::Comparator::Gte,
                Comparator::Lte => shoal_core::deploy::Comparator::Lte,
            };
            Requirement::new(
                requirement.type_.clone(),
                comparator,
                requirement.names.iter().cloned(),
            )
        })
        .collect()
}

/// Problems with the plan's own spec that the API server's schema cannot
/// catch: duplicate application names, a payload naming no application, a
/// port listed twice (by one application or two: one instance cannot listen
/// on it twice).
pub(super) fn spec_problem(name: &str, spec: &DeploymentPlanSpec) -> Option<String> {
    let mut seen = BTreeSet::new();
    let mut ports: BTreeMap<Port, &str> = BTreeMap::new();
    for application in &spec.applications {
        if !seen.insert(application.name.as_str()) {
            return Some(format!(
                "DeploymentPlan {name}: spec.applications names {:?} twice; application names must be unique",
                application.name
            ));
        }
        for port in application.ports.iter().map(|port| port.core()) {
            if let Some(first) = ports.insert(port, &application.name) {
                return Some(format!(
                    "DeploymentPlan {name}: port {port} is listed by application {first:?} and again by application {:?}; an instance can listen on a port once",
                    application.name
                ));
            }
        }
    }
    for payload in &spec.deployment.payloads {
        if !seen.contains(payload.application.as_str()) {
            return Some(format!(
                "DeploymentPlan {name}: spec.deployment.payloads names application {:?}, which spec.applications does not have (applications: {})",
                payload.application,
                seen.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    None
}

/// The holdings of one plan's `status.instances`: the first entry of each
/// instance as "in force" and the last as "target", so an instance being
/// relocated (two entries) holds both members, as `reserved_by` expects.
fn holdings(
    plan: &str,
    instances: &[InstanceStatus],
) -> (
    BTreeMap<InstanceId, MemberId>,
    BTreeMap<InstanceId, MemberId>,
) {
    let mut first = BTreeMap::new();
    let mut last = BTreeMap::new();
    for entry in instances.iter().filter(|entry| entry.state != "removed") {
        let (Ok(instance), Some(member)) = (
            InstanceId::parse(plan, &entry.name),
            ordinal_member(&entry.member),
        ) else {
            continue;
        };
        first.entry(instance.clone()).or_insert(member.clone());
        last.insert(instance, member);
    }
    (first, last)
}

/// What the other plans of the same Swarm hold on each member: capacity and ports.
pub(super) fn reserved_by_others(obs: &PlanObservation) -> BTreeMap<MemberId, Reservation> {
    reserved_by_plans(
        obs.other_plans
            .iter()
            .filter(|other| other.name != obs.name && other.spec.swarm == obs.spec.swarm)
            .map(|other| {
                (
                    other.name.as_str(),
                    &other.spec,
                    other.status.instances.as_slice(),
                )
            }),
    )
}

/// What `plans` (name, spec, `status.instances`) hold on each member, capacity and
/// ports, as placement reserves it (`shoal_core::deploy::placement::reserved_by`).
pub fn reserved_by_plans<'a>(
    plans: impl Iterator<Item = (&'a str, &'a DeploymentPlanSpec, &'a [InstanceStatus])>,
) -> BTreeMap<MemberId, Reservation> {
    let plans: Vec<_> = plans
        .map(|(name, spec, instances)| {
            let (in_force, target) = holdings(name, instances);
            (demand(spec), ports(spec), in_force, target)
        })
        .collect();
    let holdings: Vec<PlanHolding<'_>> = plans
        .iter()
        .map(|(demand, ports, in_force, target)| PlanHolding {
            demand,
            ports,
            in_force,
            target,
        })
        .collect();
    reserved_by(&holdings)
}
