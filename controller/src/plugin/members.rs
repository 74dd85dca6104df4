//! `kubectl shoal members [<swarm>]`: one row per member, as MRDS's `node list`:
//! pool, update domain, state, capabilities, capacity, reserved, remaining, the
//! plan instances and the jobs it holds.
//!
//! ```text
//! kubectl shoal members demo          # one Swarm
//! kubectl shoal members               # every Swarm of the namespace
//! kubectl shoal members demo -o wide  # also capabilities, reserved, instance names
//! ```
//!
//! Everything is read, nothing computed anew: the members and their state and
//! job counts come from the Swarm's `status.members`; capabilities, capacity
//! and reserved from the pool's annotations (`shoal_core::deploy::PoolDeclaration`);
//! the update domain from `member_update_domain` with the zone of the member's
//! Node (read as you: where you may not read Nodes, the pool's default, said in a
//! note); remaining from placement's own `remaining_capacity` after what every
//! plan of the Swarm holds (`deployment_plan::decide::reserved_by_plans`); the
//! instances from the plans' `status.instances`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;
use shoal_core::deploy::placement::remaining_capacity;
use shoal_core::deploy::{PoolDeclaration, member_update_domain};
use shoal_core::names;

use super::plans::{PlansError, resource_list};
use super::table::Table;
use super::{Error, Report, Target, get_swarm};
use crate::api::deployment_plan::DeploymentPlan;
use crate::api::swarm::{MemberStatus, Swarm, SwarmStatus};
use crate::cluster::nodes::{NodeZones, node_zones};
use crate::cluster::pools::{PodSource, observe_pool};
use crate::deployment_plan::decide::reserved_by_plans;
use crate::observed::ordinal_member;

/// `members`: the members of one Swarm or of every Swarm of the namespace.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MembersReport {
    /// Namespace.
    pub namespace: String,
    /// Per Swarm, in name order.
    pub swarms: Vec<SwarmMembers>,
}

/// The members of one Swarm.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SwarmMembers {
    /// The Swarm.
    pub swarm: String,
    /// One per entry of its `status.members`.
    pub members: Vec<MemberRow>,
    /// What could not be read, in words (a pool annotation, the Nodes).
    pub notes: Vec<String>,
}

/// One member.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberRow {
    /// Pod name.
    pub name: String,
    /// Pool (StatefulSet or Deployment).
    pub pool: String,
    /// Update domain.
    pub update_domain: String,
    /// From `status.members`: `Ready`, `Unavailable` or `FailedOver`.
    pub state: String,
    /// The pool's `shoal.dev/capabilities`, scored.
    pub capabilities: String,
    /// The pool's `shoal.dev/capacity`.
    pub capacity: BTreeMap<String, u64>,
    /// The pool's `shoal.dev/reserved`: kept for the member itself.
    pub reserved: BTreeMap<String, u64>,
    /// Capacity less reserved less what the Swarm's plans hold, as placement weighs it.
    pub remaining: BTreeMap<String, u64>,
    /// Plan instances on the member (`<plan>-<n>`).
    pub instances: Vec<String>,
    /// Jobs in the member's target slice.
    pub jobs: u64,
}

/// A member's state in words, from its `status.members` entry alone.
pub fn member_state(member: &MemberStatus) -> String {
    let availability = if member.failed_over {
        "FailedOver"
    } else if member.ready {
        "Ready"
    } else {
        "Unavailable"
    };
    // As `kubectl get nodes` shows `Ready,SchedulingDisabled`: the cordon beside
    // the availability, never instead of it.
    match &member.state {
        Some(cordon) => format!("{availability},{cordon}"),
        None => availability.to_owned(),
    }
}

/// One pool as `members` reads it: its annotations and the Node of each pod.
#[derive(Debug, Clone, Default)]
pub struct PoolInput {
    /// Annotations of the StatefulSet.
    pub annotations: BTreeMap<String, String>,
    /// Pod name → its Node, if bound.
    pub nodes: BTreeMap<String, Option<String>>,
}

/// The rows of one Swarm, from what was read (pure).
pub fn swarm_members(
    swarm: &str,
    status: &SwarmStatus,
    pools: &BTreeMap<String, PoolInput>,
    zones: &NodeZones,
    plans: &[DeploymentPlan],
) -> SwarmMembers {
    let mut notes = Vec::new();
    let plans: Vec<&DeploymentPlan> = plans
        .iter()
        .filter(|plan| plan.spec.swarm == swarm)
        .collect();
    let statuses: Vec<(String, Vec<_>)> = plans
        .iter()
        .map(|plan| {
            let instances = plan.status.clone().unwrap_or_default().instances;
            (plan.name_any(), instances)
        })
        .collect();
    let reserved = reserved_by_plans(
        plans
            .iter()
            .zip(&statuses)
            .map(|(plan, (name, instances))| (name.as_str(), &plan.spec, instances.as_slice())),
    );
    let mut declarations = BTreeMap::new();
    for (name, pool) in pools {
        match PoolDeclaration::from_annotations(name, &pool.annotations) {
            Ok(declaration) => {
                declarations.insert(name.as_str(), declaration);
            }
            Err(error) => notes.push(format!("StatefulSet {name}: {error}")),
        }
    }
    let members = status
        .members
        .iter()
        .map(|member| {
            let declaration = declarations.get(member.pool.as_str());
            let node = pools
                .get(&member.pool)
                .and_then(|pool| pool.nodes.get(&member.name))
                .cloned()
                .flatten();
            let update_domain = member_update_domain(
                declaration.and_then(|declared| declared.update_domain.as_deref()),
                zones.zone(node.as_deref()).as_deref(),
                &member.pool,
            );
            let remaining = match (declaration, ordinal_member(&member.name)) {
                (Some(declaration), Some(id)) => {
                    let deploy = declaration.member(id, member.ready, update_domain.clone());
                    remaining_capacity(&deploy, &reserved).0
                }
                _ => BTreeMap::new(),
            };
            let instances = statuses
                .iter()
                .flat_map(|(_, instances)| instances)
                .filter(|instance| instance.member == member.name && instance.state != "removed")
                .map(|instance| instance.name.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            MemberRow {
                name: member.name.clone(),
                pool: member.pool.clone(),
                update_domain,
                state: member_state(member),
                capabilities: declaration
                    .map(|declared| declared.capabilities.to_string())
                    .unwrap_or_default(),
                capacity: declaration
                    .map(|declared| declared.capacity.0.clone())
                    .unwrap_or_default(),
                reserved: declaration
                    .map(|declared| declared.reserved.0.clone())
                    .unwrap_or_default(),
                remaining,
                instances,
                jobs: member.slice_size,
            }
        })
        .collect();
    if zones.refused {
        notes.push(format!(
            "the Nodes could not be read (you may not read them): update domains are the pools' own ({}, else the pool's name), not the Nodes' zones",
            names::ANNOTATION_UPDATE_DOMAIN
        ));
    }
    SwarmMembers {
        swarm: swarm.to_owned(),
        members,
        notes,
    }
}

impl MembersReport {
    fn render(&self, wide: bool) -> String {
        let mut out = String::new();
        for swarm in &self.swarms {
            if self.swarms.len() > 1 {
                out.push_str(&format!("Swarm {}\n", swarm.swarm));
            }
            let mut table = Table::new([
                "Member",
                "Pool",
                "Domain",
                "State",
                "Capabilities",
                "Capacity",
                "Reserved",
                "Remaining",
                "Instances",
                "Jobs",
            ])
            .wide_only(&["Capabilities", "Reserved"], wide);
            for member in &swarm.members {
                table.row([
                    member.name.clone(),
                    member.pool.clone(),
                    member.update_domain.clone(),
                    member.state.clone(),
                    member.capabilities.clone(),
                    resource_list(&member.capacity),
                    resource_list(&member.reserved),
                    resource_list(&member.remaining),
                    member.instances.join(", "),
                    member.jobs.to_string(),
                ]);
            }
            out.push_str(&table.render(&format!(
                "Swarm {} has no members in its status yet.",
                swarm.swarm
            )));
            for note in &swarm.notes {
                out.push_str(&format!("Note: {note}\n"));
            }
        }
        if self.swarms.is_empty() {
            out.push_str(&format!("No Swarms in namespace {}.\n", self.namespace));
        }
        out
    }
}

impl Report for MembersReport {
    fn table(&self) -> String {
        self.render(false)
    }

    fn wide(&self) -> String {
        self.render(true)
    }
}

/// `members [<swarm>]`.
pub async fn members(target: &Target, swarm: Option<&str>) -> Result<MembersReport, Error> {
    let namespace = &target.namespace;
    let api_error = |what: &str| {
        let what = what.to_owned();
        move |source: kube::Error| {
            Error::from(PlansError::Api {
                what,
                namespace: namespace.clone(),
                source,
            })
        }
    };
    let swarms: Vec<Swarm> = match swarm {
        Some(name) => vec![get_swarm(target, name).await?],
        None => {
            let mut listed = Api::<Swarm>::namespaced(target.client.clone(), namespace)
                .list(&ListParams::default())
                .await
                .map_err(|source| Error::ReadSwarm {
                    swarm: "(all)".to_owned(),
                    namespace: namespace.clone(),
                    source,
                })?
                .items;
            listed.sort_by_key(|swarm| swarm.name_any());
            listed
        }
    };
    let plans = Api::<DeploymentPlan>::namespaced(target.client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(api_error("listing DeploymentPlans"))?
        .items;
    let statefulsets: Api<StatefulSet> = Api::namespaced(target.client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(target.client.clone(), namespace);
    let mut report = MembersReport {
        namespace: namespace.clone(),
        swarms: Vec::new(),
    };
    for swarm in swarms {
        let name = swarm.name_any();
        let selector = format!("{}={name}", names::LABEL_SWARM);
        let listed = statefulsets
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error(&format!("listing the pools of Swarm {name}")))?;
        let mut pools = BTreeMap::new();
        for sts in &listed.items {
            let pool = observe_pool(PodSource::Listed(&pods), sts)
                .await
                .map_err(api_error(&format!(
                    "listing the pods of StatefulSet {}",
                    sts.name_any()
                )))?;
            let nodes = pool
                .pods
                .iter()
                .map(|(ordinal, pod)| (format!("{}-{ordinal}", pool.name), pod.node.clone()))
                .collect();
            pools.insert(
                pool.name.clone(),
                PoolInput {
                    annotations: sts.annotations().clone(),
                    nodes,
                },
            );
        }
        // Only the Nodes of pools that declare no domain matter, as for the controller.
        let nodes: BTreeSet<String> = pools
            .values()
            .filter(|pool| {
                !pool
                    .annotations
                    .contains_key(names::ANNOTATION_UPDATE_DOMAIN)
            })
            .flat_map(|pool| pool.nodes.values().flatten().cloned())
            .collect();
        let zones = match node_zones(&target.client, nodes).await {
            Ok(zones) => zones,
            // Any failure leaves the zones unknown: the report says so and goes on.
            Err(_) => NodeZones {
                refused: true,
                ..NodeZones::default()
            },
        };
        let status = swarm.status.clone().unwrap_or_default();
        report
            .swarms
            .push(swarm_members(&name, &status, &pools, &zones, &plans));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, pool: &str, ready: bool, jobs: u64) -> MemberStatus {
        serde_json::from_value(serde_json::json!({
            "name": name, "pool": pool, "ready": ready, "sliceSize": jobs,
        }))
        .expect("a member status")
    }

    #[test]
    fn a_cordoned_members_state_shows_its_availability_and_its_cordon() {
        let member = |ready, state: Option<&str>| MemberStatus {
            name: "w-0".to_owned(),
            ready,
            state: state.map(str::to_owned),
            ..MemberStatus::default()
        };
        assert_eq!(member_state(&member(true, None)), "Ready");
        assert_eq!(
            member_state(&member(true, Some("Cordoned"))),
            "Ready,Cordoned"
        );
        assert_eq!(
            member_state(&member(false, Some("Drained"))),
            "Unavailable,Drained"
        );
    }

    #[test]
    fn a_members_row_reads_state_and_jobs_from_status_and_remaining_from_placements_reservations() {
        let status = SwarmStatus {
            members: vec![
                member("gpu-0", "gpu", true, 3),
                member("gpu-1", "gpu", false, 2),
                member("web-0", "web", true, 1),
            ],
            ..SwarmStatus::default()
        };
        let pools = BTreeMap::from([
            (
                "gpu".to_owned(),
                PoolInput {
                    annotations: BTreeMap::from([
                        (
                            names::ANNOTATION_CAPACITY.to_owned(),
                            "cores=64,memory=512".to_owned(),
                        ),
                        (
                            names::ANNOTATION_RESERVED.to_owned(),
                            "cores=4,memory=32".to_owned(),
                        ),
                        (
                            names::ANNOTATION_CAPABILITIES.to_owned(),
                            "GPU=v100:3".to_owned(),
                        ),
                    ]),
                    nodes: BTreeMap::from([
                        ("gpu-0".to_owned(), Some("node-a".to_owned())),
                        ("gpu-1".to_owned(), None),
                    ]),
                },
            ),
            (
                "web".to_owned(),
                PoolInput {
                    annotations: BTreeMap::from([(
                        names::ANNOTATION_CAPACITY.to_owned(),
                        "cores=x".to_owned(),
                    )]),
                    nodes: BTreeMap::new(),
                },
            ),
        ]);
        let zones = NodeZones {
            zones: BTreeMap::from([("node-a".to_owned(), "zone-a".to_owned())]),
            refused: false,
        };
        let plan: DeploymentPlan = serde_json::from_value(serde_json::json!({
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "DeploymentPlan",
            "metadata": {"name": "app"},
            "spec": {
                "swarm": "demo",
                "applications": [{"name": "nginx", "resources": {"cores": 4, "memory": 64}}],
                "deployment": {"instances": 2},
            },
            "status": {"instances": [
                {"name": "app-0", "member": "gpu-0", "deployment": 1, "state": "installed"},
                {"name": "app-1", "member": "gpu-0", "deployment": 1, "state": "removed"},
            ]},
        }))
        .expect("a plan");
        let other_swarm = {
            let mut other = plan.clone();
            other.spec.swarm = "elsewhere".to_owned();
            other.metadata.name = Some("other".to_owned());
            other
        };
        let members = swarm_members("demo", &status, &pools, &zones, &[plan, other_swarm]);
        let gpu0 = &members.members[0];
        assert_eq!(
            (gpu0.update_domain.as_str(), gpu0.state.as_str(), gpu0.jobs),
            ("zone-a", "Ready", 3)
        );
        assert_eq!(gpu0.capabilities, "GPU=v100:3");
        assert_eq!(
            gpu0.capacity,
            BTreeMap::from([("cores".to_owned(), 64), ("memory".to_owned(), 512)])
        );
        assert_eq!(
            gpu0.reserved,
            BTreeMap::from([("cores".to_owned(), 4), ("memory".to_owned(), 32)])
        );
        // 64-4 reserved, less one instance of 4 cores (the removed one holds nothing).
        assert_eq!(
            gpu0.remaining,
            BTreeMap::from([("cores".to_owned(), 56), ("memory".to_owned(), 416)])
        );
        assert_eq!(gpu0.instances, vec!["app-0".to_owned()]);
        let gpu1 = &members.members[1];
        assert_eq!(
            (gpu1.update_domain.as_str(), gpu1.state.as_str()),
            ("gpu", "Unavailable")
        );
        assert_eq!(gpu1.remaining.get("cores"), Some(&60));
        let web0 = &members.members[2];
        assert!(web0.capacity.is_empty() && web0.remaining.is_empty());
        assert_eq!(members.notes.len(), 1, "{:?}", members.notes);
        assert!(
            members.notes[0]
                .starts_with("StatefulSet web: pool \"web\", annotation shoal.dev/capacity")
        );

        let report = MembersReport {
            namespace: "ns".to_owned(),
            swarms: vec![members],
        };
        let table = report.table();
        assert!(
            table
                .lines()
                .filter(|line| line.starts_with(['+', '|']))
                .all(|line| line.chars().count() <= 120),
            "{table}"
        );
        assert!(
            !table.contains("Capabilities") && table.contains("Remaining"),
            "{table}"
        );
        let wide = report.wide();
        assert!(
            wide.contains("Capabilities") && wide.contains("GPU=v100:3"),
            "{wide}"
        );
    }
}
