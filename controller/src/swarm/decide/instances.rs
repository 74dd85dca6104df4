//! Delivery of plan instances: what each member's slice carries beside its jobs.
//!
//! Every `status.instances` entry of the Swarm's DeploymentPlans for which
//! [`InstanceStatus::delivered`](crate::api::deployment_plan::InstanceStatus::delivered)
//! holds goes into its member's slice, with the payload coordinates and the
//! application ports of the record of its deployment revision
//! (`status.deployments`). The plan's own
//! gate approved every change to those entries, so instance changes do not go
//! through the Swarm's gate (which is about jobs): see `converge` for how they
//! reach the slices without a new Swarm revision.
//!
//! A plan whose record cannot be trusted (someone other than the controller
//! wrote it) delivers no change: each slice keeps the instances of that plan
//! it holds, so nothing moves while the plan controller puts the record back.
//!
//! An entry is not delivered, and reported (the Swarm is `Degraded` with
//! reason `InstanceNotDelivered`, naming the plan, the instance and why), when
//! the record of its revision is missing, when its coordinates cannot be
//! carried in a slice, or when a second entry of the same instance name is on
//! the same member (a slice never holds two entries of one name: the first,
//! in the plan's order, is kept).

use std::collections::BTreeMap;

use shoal_core::Slice;
use shoal_core::slice::{InstanceApplication, SliceInstance, check_instances};

use crate::api::deployment_plan::{DeploymentPlanStatus, InstanceStatus};

/// A DeploymentPlan naming this Swarm, as delivery reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanForDelivery {
    /// The plan's name.
    pub name: String,
    /// Its status as the controller wrote it; `None` when the plan's status cannot be
    /// trusted (never written by the controller, or changed by someone else), with why.
    pub status: Result<DeploymentPlanStatus, String>,
}

/// The instances each member's slice carries, and what could not be delivered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delivery {
    /// Member pod name → its instances (any order; the slice sorts them).
    pub by_member: BTreeMap<String, Vec<SliceInstance>>,
    /// What was not delivered, in words naming the plan and the instance.
    pub problems: Vec<String>,
}

/// The instances of `plans` by member; an untrusted plan's are those the
/// `observed` slices hold.
pub fn deliveries(
    plans: &[PlanForDelivery],
    observed: &BTreeMap<String, Result<Slice, String>>,
) -> Delivery {
    let mut delivery = Delivery::default();
    for plan in plans {
        let status = match &plan.status {
            Ok(status) => status,
            Err(why) => {
                delivery.problems.push(format!(
                    "DeploymentPlan {}: its instances are not delivered: {why}; the members keep the ones they hold",
                    plan.name
                ));
                for (member, slice) in observed {
                    let held: Vec<SliceInstance> = slice
                        .iter()
                        .flat_map(|slice| &slice.instances)
                        .filter(|instance| instance.plan == plan.name)
                        .cloned()
                        .collect();
                    if !held.is_empty() {
                        let on_member = delivery.by_member.entry(member.clone()).or_default();
                        on_member.extend(held);
                    }
                }
                continue;
            }
        };
        for entry in status.instances.iter().filter(|entry| entry.delivered()) {
            match slice_instance(&plan.name, status, entry) {
                Ok(instance) => {
                    let held = delivery.by_member.entry(entry.member.clone()).or_default();
                    if held.iter().any(|other| other.name == instance.name) {
                        delivery.problems.push(format!(
                            "DeploymentPlan {}: instance {} is listed twice on member {}; the second entry (deployment {}) is not delivered",
                            plan.name, entry.name, entry.member, entry.deployment
                        ));
                    } else {
                        held.push(instance);
                    }
                }
                Err(why) => delivery.problems.push(format!(
                    "DeploymentPlan {}: instance {} on member {} is not delivered: {why}",
                    plan.name, entry.name, entry.member
                )),
            }
        }
    }
    delivery
}

/// When the plans cannot be read: every readable slice keeps the instances it holds (the
/// last good state), and the reason is reported.
pub fn kept_as_held(observed: &BTreeMap<String, Result<Slice, String>>, why: &str) -> Delivery {
    Delivery {
        by_member: observed
            .iter()
            .filter_map(|(member, slice)| {
                let slice = slice.as_ref().ok()?;
                (!slice.instances.is_empty()).then(|| (member.clone(), slice.instances.clone()))
            })
            .collect(),
        problems: vec![format!(
            "the DeploymentPlans cannot be read ({why}); the instances in the slices stay as they are"
        )],
    }
}

/// One entry as its member's slice carries it.
fn slice_instance(
    plan: &str,
    status: &DeploymentPlanStatus,
    entry: &InstanceStatus,
) -> Result<SliceInstance, String> {
    let record = status.deployment(entry.deployment).ok_or_else(|| {
        format!(
            "its deployment revision {} has no record in status.deployments",
            entry.deployment
        )
    })?;
    // One application per payload and per application with ports.
    let mut applications: BTreeMap<&str, InstanceApplication> = BTreeMap::new();
    for payload in &record.payloads {
        applications
            .entry(&payload.application)
            .or_insert_with(|| InstanceApplication::new(&payload.application, BTreeMap::new()))
            .coordinates
            .clone_from(&payload.coordinates);
    }
    for application in &record.ports {
        let mut ports: Vec<_> = application.ports.iter().map(|port| port.core()).collect();
        ports.sort();
        applications
            .entry(&application.application)
            .or_insert_with(|| InstanceApplication::new(&application.application, BTreeMap::new()))
            .ports = ports;
    }
    let mut applications: Vec<InstanceApplication> = applications.into_values().collect();
    applications.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let instance = SliceInstance {
        name: entry.name.clone(),
        plan: plan.to_owned(),
        deployment: entry.deployment,
        applications,
    };
    check_instances(std::slice::from_ref(&instance)).map_err(|problem| problem.to_string())?;
    Ok(instance)
}
