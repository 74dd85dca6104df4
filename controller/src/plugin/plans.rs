//! `kubectl shoal plans | plan | instances | operations | reports | approve-op |
//! relocate | stop | start | restart`: DeploymentPlans in MRDS's readable
//! tables, read from the plans' status (what the controller decided). Only
//! `approve-op` (`shoal.dev/approve`) and the user operations
//! (`shoal.dev/operate`) write, one annotation each.
//!
//! ```text
//! kubectl shoal plans                          # every plan of the namespace
//! kubectl shoal plan web                       # applications, deployments, instance and operation summaries
//! kubectl shoal instances web                  # where each instance runs, its state and error; unplaced ones
//! kubectl shoal operations web                 # the operation history with states
//! kubectl shoal reports web                    # what devices reported to the status endpoint
//! kubectl shoal approve-op web create-web-0-r1-1 # annotates shoal.dev/approve with the operation's id/hash
//! kubectl shoal approve-op web --all            # the latest deployment as a whole (status.approveDeploymentWith)
//! kubectl shoal relocate web web-1 --to pool-b-0 # annotates shoal.dev/operate: relocate web-1 to pool-b-0 #<tag>
//! kubectl shoal stop web web-1                 # stop / start / restart one instance the same way
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;
use shoal_core::deploy::status::DeploymentStatusDocument;
use shoal_core::gate::DEPLOYMENT_PREFIX;
use shoal_core::names::{ANNOTATION_APPROVE, ANNOTATION_APPROVED_BY, ANNOTATION_OPERATE};

use super::annotate::{AnnotateError, annotate_guarded};
use super::table::{Table, fields, short_hash};
use super::{Report, Target, hint};
use crate::api::deployment_plan::{
    DeploymentPlan, DeploymentPlanStatus, InstanceStatus, OperationStatus, UnplacedInstance,
};
use crate::approvers::{ApprovalRecord, approval_annotations, approver_name};
use crate::deployment_plan::decide::{Verb, request_item, request_items};
use crate::status_api::reports::{KeptReport, kept_reports, owned_by, reports_name};

/// Why a plan command failed; each names the plan and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PlansError {
    /// The plan does not exist.
    #[error(
        "DeploymentPlan {plan:?} not found in namespace {namespace:?}; list plans with `kubectl shoal plans -n {namespace}` or pick the namespace with -n"
    )]
    NotFound {
        /// The plan.
        plan: String,
        /// Namespace.
        namespace: String,
    },
    /// An API call failed.
    #[error("{what} in namespace {namespace}: {source}{}", hint(source))]
    Api {
        /// What was being done.
        what: String,
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
    /// `reports`: the plan's reports ConfigMap is someone else's.
    #[error(
        "ConfigMap {config_map} is not DeploymentPlan {plan}'s (it has no controller ownerReference to the plan), so it is not read as the plan's device reports; the status endpoint refuses to write there too"
    )]
    ReportsNotOwned {
        /// The plan.
        plan: String,
        /// The ConfigMap.
        config_map: String,
    },
    /// `approve-op`: the plan has no such operation.
    #[error(
        "DeploymentPlan {plan} has no operation {id:?}; list them with `kubectl shoal operations {plan}`"
    )]
    UnknownOperation {
        /// The plan.
        plan: String,
        /// The id given.
        id: String,
    },
    /// `relocate | stop | start | restart`: the plan has no such instance.
    #[error(
        "DeploymentPlan {plan} has no instance {instance:?} (its instances: {known}); list them with `kubectl shoal instances {plan}`"
    )]
    UnknownInstance {
        /// The plan.
        plan: String,
        /// The instance given.
        instance: String,
        /// The plan's instances, in words.
        known: String,
    },
    /// `relocate --to`: the member is not one of the plan's Swarm.
    #[error(
        "DeploymentPlan {plan}: {member:?} is not a member of Swarm {swarm} (its members: {known}); name a pod of one of its pools"
    )]
    UnknownMember {
        /// The plan.
        plan: String,
        /// The member given.
        member: String,
        /// The plan's Swarm.
        swarm: String,
        /// The Swarm's members, in words.
        known: String,
    },
    /// The plan kept changing while writing the annotation.
    #[error(
        "DeploymentPlan {plan} changed {attempts} times while writing {annotation}; nothing was written: run the command again",
        attempts = super::annotate::ATTEMPTS
    )]
    KeptChanging {
        /// The plan.
        plan: String,
        /// The annotation.
        annotation: String,
    },
    /// `approve-op`: the operation does not wait for approval.
    #[error(
        "operation {id} of DeploymentPlan {plan} is {state}, not PENDING_APPROVAL; nothing to approve"
    )]
    NotPending {
        /// The plan.
        plan: String,
        /// The operation.
        id: String,
        /// Its state.
        state: String,
    },
    /// `approve-op --all`: no deployment waits for approval as a whole.
    #[error(
        "no deployment of DeploymentPlan {plan} waits for approval (status.approveDeploymentWith is empty or names no operation awaiting approval); list the operations with `kubectl shoal operations {plan}`"
    )]
    NoDeploymentWaiting {
        /// The plan.
        plan: String,
    },
}

/// `plans`: one row per plan.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PlansReport {
    /// Namespace.
    pub namespace: String,
    /// The plans, by name.
    pub plans: Vec<PlanRow>,
}

/// One plan in `plans`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanRow {
    /// Name.
    pub name: String,
    /// The Swarm whose members run it.
    pub swarm: String,
    /// Installed / desired.
    pub instances: String,
    /// Deployment revision in force.
    pub deployment: u64,
    /// Operations waiting for approval.
    pub pending_operations: u32,
    /// Phase.
    pub phase: String,
}

impl Report for PlansReport {
    fn table(&self) -> String {
        let mut table = Table::new([
            "Plan",
            "Swarm",
            "Instances",
            "Deployment",
            "Pending",
            "Phase",
        ]);
        for plan in &self.plans {
            table.row([
                plan.name.clone(),
                plan.swarm.clone(),
                plan.instances.clone(),
                plan.deployment.to_string(),
                plan.pending_operations.to_string(),
                plan.phase.clone(),
            ]);
        }
        table.render(&format!(
            "No DeploymentPlans in namespace {}.",
            self.namespace
        ))
    }
}

fn row(plan: &DeploymentPlan) -> PlanRow {
    let status = plan.status.clone().unwrap_or_default();
    PlanRow {
        name: plan.name_any(),
        swarm: plan.spec.swarm.clone(),
        instances: status
            .ready
            .clone()
            .unwrap_or_else(|| format!("0/{}", plan.spec.deployment.instances)),
        deployment: status.current_deployment,
        pending_operations: status.pending_operations,
        phase: status.phase.unwrap_or_else(|| "Unknown".to_owned()),
    }
}

/// `plan <name>`: its applications, deployments and summaries.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// The plan's row.
    pub plan: PlanRow,
    /// Capabilities a member must offer (`spec.requirements`), in MRDS's "matching compute
    /// capabilities" words: type, comparator, names.
    pub requirements: Vec<RequirementRow>,
    /// What one instance takes from its member: the sum of the applications' resources.
    pub instance_demand: String,
    /// Applications: name, demands, ports, payload coordinates.
    pub applications: Vec<ApplicationRow>,
    /// Deployment revision in force and the latest given.
    pub current_deployment: u64,
    /// The latest deployment revision.
    pub latest_deployment: u64,
    /// Instances by state.
    pub instance_states: BTreeMap<String, usize>,
    /// Unplaced instances.
    pub unplaced: Vec<UnplacedInstance>,
    /// Operations by type and state.
    pub operation_summary: BTreeMap<String, BTreeMap<String, usize>>,
    /// `shoal.dev/approve` value approving all of the latest deployment's waiting operations.
    pub approve_deployment: Option<String>,
    /// The canary or blue-green rollout of the latest deployment, `<phase>: <message>`.
    pub rollout: Option<String>,
    /// While approved operations wait for a maintenance window: when the next opens.
    pub next_window: Option<String>,
    /// Conditions: type → status and message.
    pub conditions: Vec<(String, String, String)>,
    /// The deployment status documents (`status.deploymentStatus`).
    pub deployment_status: Vec<DeploymentStatusDocument>,
    /// The headless Service (`spec.serviceName`): `<name>: <ready>/<endpoints> endpoints
    /// ready, ports <ports>`, its conflict, or `none`.
    pub service: String,
}

/// One capability requirement in `plan`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RequirementRow {
    /// The capability type, e.g. `GPU`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `In`, `NotIn`, `Gte` or `Lte`.
    pub comparator: String,
    /// The capability names, as the plan lists them.
    pub names: Vec<String>,
}

/// One application in `plan`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApplicationRow {
    /// Name.
    pub name: String,
    /// `cores=1, memory=512`.
    pub resources: String,
    /// `80/TCP, 53/UDP`.
    pub ports: String,
    /// `image=nginx:1.25`.
    pub payload: String,
}

impl Report for PlanReport {
    fn table(&self) -> String {
        let mut out = fields(&[
            ("Plan", self.plan.name.clone()),
            ("Swarm", self.plan.swarm.clone()),
            ("Phase", self.plan.phase.clone()),
            ("Instances", self.plan.instances.clone()),
            (
                "Deployment",
                format!(
                    "{} in force, {} latest",
                    self.current_deployment, self.latest_deployment
                ),
            ),
            ("Pending", self.plan.pending_operations.to_string()),
            (
                "Next window",
                self.next_window.clone().map_or_else(
                    || "nothing waits for one".to_owned(),
                    |next| format!("{next} (approved operations wait for it)"),
                ),
            ),
            (
                "Approve all",
                self.approve_deployment
                    .clone()
                    .unwrap_or_else(|| "nothing waits".to_owned()),
            ),
            (
                "Rollout",
                self.rollout
                    .clone()
                    .unwrap_or_else(|| "in place (Rolling)".to_owned()),
            ),
            ("Service", self.service.clone()),
        ]);
        out.push_str("\nRequirements (matching compute capabilities)\n");
        let mut requirements = Table::new(["Type", "Comparator", "Names"]);
        for requirement in &self.requirements {
            requirements.row([
                requirement.type_.clone(),
                requirement.comparator.clone(),
                requirement.names.join(", "),
            ]);
        }
        out.push_str(&requirements.render("None: every member is capable."));
        out.push_str(&format!(
            "\nApplications (one instance takes {})\n",
            if self.instance_demand.is_empty() {
                "nothing declared"
            } else {
                &self.instance_demand
            }
        ));
        let mut applications = Table::new(["Application", "Resources", "Ports", "Payload"]);
        for application in &self.applications {
            applications.row([
                application.name.clone(),
                application.resources.clone(),
                application.ports.clone(),
                application.payload.clone(),
            ]);
        }
        out.push_str(&applications.render("No applications."));
        out.push_str("\nInstances\n");
        let mut instances = Table::new(["State", "Count"]);
        for (state, count) in &self.instance_states {
            instances.row([state.clone(), count.to_string()]);
        }
        out.push_str(&instances.render("No instances in force."));
        out.push_str(&deployment_status_table(&self.deployment_status));
        for unplaced in &self.unplaced {
            out.push_str(&format!(
                "Unplaced {}: {}\n",
                unplaced.name, unplaced.reason
            ));
        }
        out.push_str("\nOperations\n");
        let states = [
            "PENDING",
            "PENDING_APPROVAL",
            "APPROVED",
            "SUCCEEDED",
            "FAILED",
        ];
        let mut operations = Table::new(std::iter::once("Type").chain(states.iter().copied()));
        for (type_, counts) in &self.operation_summary {
            operations.row(
                std::iter::once(type_.clone()).chain(
                    states
                        .iter()
                        .map(|state| counts.get(*state).copied().unwrap_or(0).to_string()),
                ),
            );
        }
        out.push_str(&operations.render("No operations."));
        out.push_str("\nConditions\n");
        let mut conditions = Table::new(["Type", "Status", "Message"]);
        for (type_, status, message) in &self.conditions {
            conditions.row([type_.clone(), status.clone(), message.clone()]);
        }
        out.push_str(&conditions.render("No conditions yet."));
        out
    }
}

/// The deployments' status documents: revision, id, overall state, each
/// component's state, the error of a failed one.
fn deployment_status_table(documents: &[DeploymentStatusDocument]) -> String {
    let mut table = Table::new(["Deployment", "Id", "State", "Components", "Error"]);
    for document in documents {
        let components: Vec<String> = document
            .components
            .iter()
            .map(|component| format!("{}={}", component.name, component.state))
            .collect();
        let error = document.status.error.as_ref().map(|error| {
            let source = error.source.as_deref().unwrap_or("unknown source");
            format!("{} from {source}: {}", error.code, error.message)
        });
        table.row([
            document
                .adopted_manifest_version
                .map(|revision| revision.to_string())
                .unwrap_or_default(),
            document.deployment_id.clone(),
            document.status.state.clone(),
            components.join(", "),
            error.unwrap_or_default(),
        ]);
    }
    format!(
        "\nDeployments\n{}",
        table.render("No deployment status yet.")
    )
}

/// The `plan` report of one plan. Pure.
/// `cores=1, memory=512`.
pub(crate) fn resource_list(resources: &BTreeMap<String, u64>) -> String {
    resources
        .iter()
        .map(|(name, amount)| format!("{name}={amount}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn plan_report(plan: &DeploymentPlan) -> PlanReport {
    let status = plan.status.clone().unwrap_or_default();
    let payloads: BTreeMap<&str, String> = plan
        .spec
        .deployment
        .payloads
        .iter()
        .map(|payload| {
            let coordinates: Vec<String> = payload
                .coordinates
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            (payload.application.as_str(), coordinates.join(", "))
        })
        .collect();
    let applications = plan
        .spec
        .applications
        .iter()
        .map(|application| ApplicationRow {
            name: application.name.clone(),
            resources: resource_list(&application.resources),
            ports: application
                .ports
                .iter()
                .map(|port| format!("{}/{:?}", port.port, port.protocol))
                .collect::<Vec<_>>()
                .join(", "),
            payload: payloads
                .get(application.name.as_str())
                .cloned()
                .unwrap_or_default(),
        })
        .collect();
    let mut instance_states = BTreeMap::new();
    for entry in &status.instances {
        *instance_states.entry(entry.state.clone()).or_insert(0) += 1;
    }
    let mut operation_summary: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for op in &status.operations {
        *operation_summary
            .entry(op.type_.clone())
            .or_default()
            .entry(op.state.clone())
            .or_insert(0) += 1;
    }
    PlanReport {
        next_window: status.next_window.clone(),
        plan: row(plan),
        requirements: plan
            .spec
            .requirements
            .iter()
            .map(|requirement| RequirementRow {
                type_: requirement.type_.clone(),
                comparator: format!("{:?}", requirement.comparator),
                names: requirement.names.clone(),
            })
            .collect(),
        instance_demand: resource_list(
            &crate::deployment_plan::decide::instance_demand(&plan.spec).0,
        ),
        applications,
        current_deployment: status.current_deployment,
        latest_deployment: status.latest_deployment,
        instance_states,
        unplaced: status.unplaced.clone(),
        approve_deployment: status.approve_deployment_with.clone(),
        rollout: status.rollout.as_ref().map(|rollout| {
            let canaries = if rollout.canaries.is_empty() {
                String::new()
            } else {
                format!(" (canaries {})", rollout.canaries.join(", "))
            };
            format!("{}{canaries}: {}", rollout.phase, rollout.message)
        }),
        operation_summary,
        conditions: status
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.message.clone()))
            .collect(),
        deployment_status: status.deployment_status.clone(),
        service: service_summary(plan.spec.service_name.as_deref(), status.service.as_ref()),
    }
}

/// The `Service` line of `plan`.
fn service_summary(
    wanted: Option<&str>,
    written: Option<&crate::api::deployment_plan::ServiceStatus>,
) -> String {
    match (wanted, written) {
        (None, _) => "none (spec.serviceName unset)".to_owned(),
        (Some(name), Some(service)) if service.name == name && !service.conflict.is_empty() => {
            format!("{name}: not the plan's: {}", service.conflict)
        }
        (Some(name), Some(service)) if service.name == name => {
            let ports = if service.ports.is_empty() {
                "no ports".to_owned()
            } else {
                format!("ports {}", service.ports)
            };
            format!(
                "{name} (headless): {}/{} endpoints ready, {ports}",
                service.ready, service.endpoints
            )
        }
        (Some(name), _) => format!("{name}: not written yet"),
    }
}

/// `instances <plan>`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InstancesReport {
    /// The plan.
    pub plan: String,
    /// Entries of `status.instances`.
    pub instances: Vec<InstanceStatus>,
    /// Instances that fit nowhere.
    pub unplaced: Vec<UnplacedInstance>,
}

impl Report for InstancesReport {
    fn table(&self) -> String {
        let mut table = Table::new([
            "Instance",
            "Member",
            "Domain",
            "Deployment",
            "State",
            "Error",
        ]);
        for entry in &self.instances {
            table.row([
                entry.name.clone(),
                entry.member.clone(),
                entry.update_domain.clone(),
                entry.deployment.to_string(),
                entry.state.clone(),
                entry
                    .error
                    .as_ref()
                    .map(|error| format!("{}: {}", error.code, error.message))
                    .unwrap_or_default(),
            ]);
        }
        let mut out = table.render(&format!(
            "DeploymentPlan {} has no instances in force.",
            self.plan
        ));
        if !self.unplaced.is_empty() {
            let mut unplaced = Table::new(["Unplaced", "Reason"]);
            for instance in &self.unplaced {
                unplaced.row([instance.name.clone(), instance.reason.clone()]);
            }
            out.push('\n');
            out.push_str(&unplaced.render(""));
        }
        out
    }
}

/// `reports <plan>`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceReports {
    /// The plan.
    pub plan: String,
    /// The kept reports, oldest first.
    pub reports: Vec<DeviceReport>,
}

/// One device's report and Shoal's own state of the revision it names.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceReport {
    /// What the device reported.
    #[serde(flatten)]
    pub report: KeptReport,
    /// The state Shoal computed for that revision (`status.deploymentStatus`).
    pub shoal_state: Option<String>,
}

impl Report for DeviceReports {
    fn table(&self) -> String {
        let mut table = Table::new([
            "Device",
            "Revision",
            "Reported",
            "Shoal",
            "Reported-At",
            "Failed",
        ]);
        for row in &self.reports {
            table.row([
                row.report.device_id.clone(),
                row.report
                    .revision
                    .map(|revision| revision.to_string())
                    .unwrap_or_default(),
                row.report.state.clone(),
                row.shoal_state.clone().unwrap_or_else(|| "-".to_owned()),
                row.report.reported_at.clone(),
                row.report.failed.join("; "),
            ]);
        }
        table.render(&format!(
            "No device has reported on DeploymentPlan {}'s deployment (devices report to the controller's status endpoint).",
            self.plan
        ))
    }
}

/// `operations <plan>`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OperationsReport {
    /// The plan.
    pub plan: String,
    /// `status.operations`, oldest first.
    pub operations: Vec<OperationStatus>,
}

impl OperationsReport {
    /// The operations; `Deployment`, `Approved-By` and `Hash` only when `wide`.
    fn render(&self, wide: bool) -> String {
        let mut table = Table::new([
            "Operation",
            "Type",
            "Instance",
            "From",
            "To",
            "Deployment",
            "State",
            "Reason",
            "Approved-By",
            "Hash",
            "Message",
        ])
        .wide_only(&["Deployment", "Approved-By", "Hash"], wide);
        for op in &self.operations {
            table.row([
                op.id.clone(),
                op.type_.clone(),
                op.instance.clone(),
                op.from_member.clone().unwrap_or_default(),
                op.to_member.clone().unwrap_or_default(),
                op.deployment.to_string(),
                op.state.clone(),
                op.reason.clone().unwrap_or_default(),
                op.approval
                    .as_ref()
                    .map(ApprovalRecord::display)
                    .unwrap_or_default(),
                short_hash(&op.hash),
                op.message.clone(),
            ]);
        }
        table.render(&format!("DeploymentPlan {} has no operations.", self.plan))
    }
}

impl Report for OperationsReport {
    fn table(&self) -> String {
        self.render(false)
    }

    fn wide(&self) -> String {
        self.render(true)
    }
}

/// `approve-op`: what was annotated.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApproveOpReport {
    /// The plan.
    pub plan: String,
    /// The operation approved.
    pub operation: String,
    /// The annotation value written.
    pub annotation: String,
    /// The approver named in `shoal.dev/approved-by` (the user the API server says this
    /// is), if the server said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

impl Report for ApproveOpReport {
    fn table(&self) -> String {
        format!(
            "Annotated DeploymentPlan {} {ANNOTATION_APPROVE}={}{}\nThe controller approves operation {} on its next pass; follow it with `kubectl shoal operations {}`.\n",
            self.plan,
            self.annotation,
            approved_by_note(self.approved_by.as_deref()),
            self.operation,
            self.plan
        )
    }
}

/// `approve-op <plan> --all`: what was annotated and which operations it approves.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApproveDeploymentReport {
    /// The plan.
    pub plan: String,
    /// The deployment and its operations approved.
    pub approval: DeploymentApproval,
    /// The annotation value written.
    pub annotation: String,
    /// The approver named in `shoal.dev/approved-by`, if the server said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

impl Report for ApproveDeploymentReport {
    fn table(&self) -> String {
        let mut operations = Table::new(["Operation"]);
        for id in &self.approval.operations {
            operations.row([id.clone()]);
        }
        format!(
            "Annotated DeploymentPlan {} {ANNOTATION_APPROVE}={}{}\nIt approves deployment {} as a whole: these operations, and no other (a change to them changes the hash, and the controller refuses the value):\n{}The controller approves them on its next pass; follow them with `kubectl shoal operations {}`.\n",
            self.plan,
            self.annotation,
            approved_by_note(self.approved_by.as_deref()),
            self.approval.revision,
            operations.render(""),
            self.plan
        )
    }
}

/// ` as <user>` (` shoal.dev/approved-by=<user>`), or nothing when the server did not say.
pub(super) fn approved_by_note(approver: Option<&str>) -> String {
    approver.map_or_else(String::new, |name| {
        format!(" {ANNOTATION_APPROVED_BY}={name}")
    })
}

/// `relocate | stop | start | restart`: what was annotated.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OperateReport {
    /// The plan.
    pub plan: String,
    /// The request added.
    pub request: String,
    /// The annotation value written.
    pub annotation: String,
}

impl Report for OperateReport {
    fn table(&self) -> String {
        format!(
            "Annotated DeploymentPlan {} {ANNOTATION_OPERATE}={}\nThe controller turns {:?} into an operation through the plan's approval policy on its next pass (or refuses it with a Warning); follow it with `kubectl shoal operations {}`.\n",
            self.plan, self.annotation, self.request, self.plan
        )
    }
}

/// The `shoal.dev/operate` value adding `item` to the requests of `current`
/// the controller has not handled yet (so two quick commands do not undo
/// each other; handled ones are dropped). Pure.
pub fn operate_annotation(
    status: &DeploymentPlanStatus,
    current: Option<&str>,
    item: &str,
) -> String {
    let mut items: Vec<String> = request_items(current.unwrap_or_default())
        .into_iter()
        .filter(|pending| !status.handled_requests.contains(pending))
        .collect();
    items.push(item.to_owned());
    items.join(", ")
}

/// `kubectl shoal relocate | stop | start | restart <plan> <instance>`:
/// annotates the plan with the request, tagged with the time so that it is
/// a new request even when worded as an earlier one. What can be checked
/// here is checked before writing (the instance is the plan's, the member
/// is the Swarm's); the controller checks the rest and says why it refuses.
/// The write is guarded (`annotate`): a request written meanwhile by
/// someone else is kept.
pub async fn operate(
    target: &Target,
    name: &str,
    verb: Verb,
    instance: &str,
    to: Option<&str>,
) -> Result<OperateReport, PlansError> {
    let plan = get_plan(target, name).await?;
    if let Some(member) = to {
        check_member(target, &plan, member).await?;
    }
    let tag = jiff::Timestamp::now().as_millisecond().to_string();
    let item = request_item(verb, instance, to, &tag);
    let written = annotate_plan(target, name, |plan: &DeploymentPlan| {
        let status = plan.status.clone().unwrap_or_default();
        check_instance(name, &status, instance)?;
        let value = operate_annotation(
            &status,
            plan.annotations()
                .get(ANNOTATION_OPERATE)
                .map(String::as_str),
            &item,
        );
        let annotations = BTreeMap::from([(ANNOTATION_OPERATE.to_owned(), value.clone())]);
        Ok((annotations, value))
    })
    .await;
    let value = guarded(target, name, ANNOTATION_OPERATE, written)?;
    Ok(OperateReport {
        plan: name.to_owned(),
        request: item,
        annotation: value,
    })
}

/// The plan has `instance` in its status, or the error naming those it has. Pure.
pub fn check_instance(
    plan: &str,
    status: &DeploymentPlanStatus,
    instance: &str,
) -> Result<(), PlansError> {
    if status.instances.iter().any(|entry| entry.name == instance) {
        return Ok(());
    }
    let mut known: Vec<&str> = status
        .instances
        .iter()
        .map(|entry| entry.name.as_str())
        .collect();
    known.dedup();
    Err(PlansError::UnknownInstance {
        plan: plan.to_owned(),
        instance: instance.to_owned(),
        known: words(&known),
    })
}

/// `a, b, c`, or `none`.
fn words(items: &[&str]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// `member` is a pod of one of the plan's Swarm's StatefulSet pools
/// (`<pool>-<ordinal>`, ordinal below the pool's replicas), or the error
/// naming the members there are.
async fn check_member(
    target: &Target,
    plan: &DeploymentPlan,
    member: &str,
) -> Result<(), PlansError> {
    let swarm = plan.spec.swarm.clone();
    let pools: Api<StatefulSet> = Api::namespaced(target.client.clone(), &target.namespace);
    let selector = format!("{}={swarm}", shoal_core::names::LABEL_SWARM);
    let pools = pools
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error(
            target,
            format!("listing the pools of Swarm {swarm}"),
        ))?
        .items;
    let members: Vec<String> = pools
        .iter()
        .flat_map(|pool| {
            let replicas = pool
                .spec
                .as_ref()
                .and_then(|spec| spec.replicas)
                .unwrap_or(1)
                .max(0);
            let name = pool.name_any();
            (0..replicas).map(move |ordinal| format!("{name}-{ordinal}"))
        })
        .collect();
    if members.iter().any(|known| known == member) {
        return Ok(());
    }
    let known: Vec<&str> = members.iter().map(String::as_str).collect();
    Err(PlansError::UnknownMember {
        plan: plan.name_any(),
        member: member.to_owned(),
        swarm,
        known: words(&known),
    })
}

/// The result of a guarded write, as this command's error.
fn guarded<T>(
    target: &Target,
    plan: &str,
    annotation: &str,
    written: Result<T, AnnotateError<PlansError>>,
) -> Result<T, PlansError> {
    written.map_err(|error| match error {
        AnnotateError::Refused(error) => error,
        AnnotateError::NotFound => PlansError::NotFound {
            plan: plan.to_owned(),
            namespace: target.namespace.clone(),
        },
        AnnotateError::Api(source) => PlansError::Api {
            what: format!("annotating DeploymentPlan {plan} with {annotation}"),
            namespace: target.namespace.clone(),
            source,
        },
        AnnotateError::KeptChanging => PlansError::KeptChanging {
            plan: plan.to_owned(),
            annotation: annotation.to_owned(),
        },
    })
}

pub(super) fn plans_api(target: &Target) -> Api<DeploymentPlan> {
    Api::namespaced(target.client.clone(), &target.namespace)
}

/// [`annotate_guarded`] on the plan `name`, under this run's `--dry-run`.
async fn annotate_plan<T>(
    target: &Target,
    name: &str,
    compute: impl FnMut(&DeploymentPlan) -> Result<(BTreeMap<String, String>, T), PlansError>,
) -> Result<T, AnnotateError<PlansError>> {
    annotate_guarded(&target.writes, &plans_api(target), name, compute).await
}

pub(super) fn api_error(target: &Target, what: String) -> impl FnOnce(kube::Error) -> PlansError {
    let namespace = target.namespace.clone();
    move |source| PlansError::Api {
        what,
        namespace,
        source,
    }
}

/// Reads one plan, with an error that says how to find it when it is missing.
pub(super) async fn get_plan(target: &Target, plan: &str) -> Result<DeploymentPlan, PlansError> {
    plans_api(target)
        .get_opt(plan)
        .await
        .map_err(api_error(target, format!("reading DeploymentPlan {plan}")))?
        .ok_or_else(|| PlansError::NotFound {
            plan: plan.to_owned(),
            namespace: target.namespace.clone(),
        })
}

/// `kubectl shoal plans`.
pub async fn plans(target: &Target) -> Result<PlansReport, PlansError> {
    let mut listed = plans_api(target)
        .list(&ListParams::default())
        .await
        .map_err(api_error(target, "listing DeploymentPlans".to_owned()))?
        .items;
    listed.sort_by_key(|plan| plan.name_any());
    Ok(PlansReport {
        namespace: target.namespace.clone(),
        plans: listed.iter().map(row).collect(),
    })
}

/// `kubectl shoal plan <name>`.
pub async fn plan(target: &Target, name: &str) -> Result<PlanReport, PlansError> {
    Ok(plan_report(&get_plan(target, name).await?))
}

/// `kubectl shoal instances <plan>`.
pub async fn instances(target: &Target, name: &str) -> Result<InstancesReport, PlansError> {
    let status = get_plan(target, name).await?.status.unwrap_or_default();
    Ok(InstancesReport {
        plan: name.to_owned(),
        instances: status.instances,
        unplaced: status.unplaced,
    })
}

/// `kubectl shoal reports <plan>`: what devices reported to the status
/// endpoint on the plan's deployment, beside the state Shoal computed for the
/// same revision.
pub async fn reports(target: &Target, name: &str) -> Result<DeviceReports, PlansError> {
    let plan = get_plan(target, name).await?;
    let map_name = reports_name(name);
    let map = Api::<ConfigMap>::namespaced(target.client.clone(), &target.namespace)
        .get_opt(&map_name)
        .await
        .map_err(api_error(target, format!("reading ConfigMap {map_name}")))?;
    let kept = match map {
        Some(map) if !owned_by(&map, &plan) => {
            return Err(PlansError::ReportsNotOwned {
                plan: name.to_owned(),
                config_map: map_name,
            });
        }
        Some(map) => kept_reports(&map),
        None => Vec::new(),
    };
    Ok(device_reports(name, &plan.status.unwrap_or_default(), kept))
}

/// The rows of `reports`: each kept report with Shoal's own state of the
/// revision it names (none when Shoal keeps no document of that revision).
fn device_reports(
    plan: &str,
    status: &DeploymentPlanStatus,
    kept: Vec<KeptReport>,
) -> DeviceReports {
    let shoal_state = |report: &KeptReport| {
        status
            .deployment_status
            .iter()
            .find(|document| {
                document.deployment_id == report.deployment_id
                    && document.adopted_manifest_version == report.revision
            })
            .map(|document| document.status.state.clone())
    };
    DeviceReports {
        plan: plan.to_owned(),
        reports: kept
            .into_iter()
            .map(|report| DeviceReport {
                shoal_state: shoal_state(&report),
                report,
            })
            .collect(),
    }
}

/// `kubectl shoal operations <plan>`.
pub async fn operations(target: &Target, name: &str) -> Result<OperationsReport, PlansError> {
    let status = get_plan(target, name).await?.status.unwrap_or_default();
    Ok(OperationsReport {
        plan: name.to_owned(),
        operations: status.operations,
    })
}

/// The approval annotation value that approves `id` and keeps the items of
/// `current` that still name operations awaiting approval (so two quick
/// `approve-op`s do not undo each other). Pure.
pub fn approval_annotation(
    plan: &str,
    status: &DeploymentPlanStatus,
    current: Option<&str>,
    id: &str,
) -> Result<(String, String), PlansError> {
    let operation = status
        .operations
        .iter()
        .find(|op| op.id == id)
        .ok_or_else(|| PlansError::UnknownOperation {
            plan: plan.to_owned(),
            id: id.to_owned(),
        })?;
    if operation.state != "PENDING_APPROVAL" {
        return Err(PlansError::NotPending {
            plan: plan.to_owned(),
            id: id.to_owned(),
            state: operation.state.clone(),
        });
    }
    let mut items = still_waiting(status, current, |op| op.id != id);
    items.push(&operation.approve_with);
    Ok((items.join(","), operation.approve_with.clone()))
}

/// The items of the annotation value `current` that still name an operation
/// awaiting approval and kept by `keep` (so a new approval does not undo one
/// written a moment before).
fn still_waiting<'a>(
    status: &DeploymentPlanStatus,
    current: Option<&'a str>,
    keep: impl Fn(&OperationStatus) -> bool,
) -> Vec<&'a str> {
    current
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|item| {
            status
                .operations
                .iter()
                .any(|op| op.state == "PENDING_APPROVAL" && op.approve_with == *item && keep(op))
        })
        .collect()
}

/// The annotation value approving the latest deployment's waiting operations
/// as one whole: exactly `status.approveDeploymentWith` (its hash pins those
/// operations, so the controller refuses it once they change), keeping the
/// items of `current` that still name other operations awaiting approval;
/// and the ids of the operations it approves. Pure.
pub fn deployment_approval_annotation(
    plan: &str,
    status: &DeploymentPlanStatus,
    current: Option<&str>,
) -> Result<(String, DeploymentApproval), PlansError> {
    let item =
        status
            .approve_deployment_with
            .clone()
            .ok_or_else(|| PlansError::NoDeploymentWaiting {
                plan: plan.to_owned(),
            })?;
    let revision = item
        .strip_prefix(DEPLOYMENT_PREFIX)
        .and_then(|rest| rest.split('/').next())
        .and_then(|number| number.parse::<u64>().ok());
    let covered = |op: &OperationStatus| Some(op.deployment) == revision;
    let operations: Vec<String> = status
        .operations
        .iter()
        .filter(|op| op.state == "PENDING_APPROVAL" && covered(op))
        .map(|op| op.id.clone())
        .collect();
    // A value naming no waiting operation (a status written by hand, or one that
    // moved on) would approve something the user was never shown: refused.
    let Some(revision) = revision.filter(|_| !operations.is_empty()) else {
        return Err(PlansError::NoDeploymentWaiting {
            plan: plan.to_owned(),
        });
    };
    let mut items = still_waiting(status, current, |op| !covered(op));
    items.push(&item);
    Ok((
        items.join(","),
        DeploymentApproval {
            revision,
            operations,
        },
    ))
}

/// What `approve-op --all` approves: a deployment and its waiting operations.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeploymentApproval {
    /// The deployment revision.
    pub revision: u64,
    /// The ids of its operations awaiting approval.
    pub operations: Vec<String>,
}

/// `kubectl shoal approve-op <plan> --all`: annotates the plan with
/// `status.approveDeploymentWith`, naming each operation it approves; the
/// write is guarded like `approve-op <id>`'s.
pub async fn approve_deployment(
    target: &Target,
    name: &str,
) -> Result<ApproveDeploymentReport, PlansError> {
    let approver = approver_name(&target.client).await;
    let written = annotate_plan(target, name, |plan: &DeploymentPlan| {
        let status = plan.status.clone().unwrap_or_default();
        let current = plan
            .annotations()
            .get(ANNOTATION_APPROVE)
            .map(String::as_str);
        let (value, approval) = deployment_approval_annotation(name, &status, current)?;
        Ok((
            approval_annotations(&value, approver.as_deref()),
            (value, approval),
        ))
    })
    .await;
    let (annotation, approval) = guarded(target, name, ANNOTATION_APPROVE, written)?;
    Ok(ApproveDeploymentReport {
        plan: name.to_owned(),
        approval,
        annotation,
        approved_by: approver,
    })
}

/// `kubectl shoal approve-op <plan> <id>`: annotates the plan with the
/// operation's `approveWith` value (refused unless it waits for approval),
/// keeping the items of others still waiting; the write is guarded
/// (`annotate`), so a concurrent `approve-op` is merged, not lost.
pub async fn approve_op(
    target: &Target,
    name: &str,
    id: &str,
) -> Result<ApproveOpReport, PlansError> {
    let approver = approver_name(&target.client).await;
    let written = annotate_plan(target, name, |plan: &DeploymentPlan| {
        let status = plan.status.clone().unwrap_or_default();
        let (value, _) = approval_annotation(
            name,
            &status,
            plan.annotations()
                .get(ANNOTATION_APPROVE)
                .map(String::as_str),
            id,
        )?;
        Ok((approval_annotations(&value, approver.as_deref()), value))
    })
    .await;
    let value = guarded(target, name, ANNOTATION_APPROVE, written)?;
    Ok(ApproveOpReport {
        plan: name.to_owned(),
        operation: id.to_owned(),
        annotation: value,
        approved_by: approver,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: &str, state: &str) -> OperationStatus {
        OperationStatus {
            id: id.to_owned(),
            type_: "CREATE".to_owned(),
            instance: "web-0".to_owned(),
            from_member: None,
            to_member: Some("east-0".to_owned()),
            deployment: 1,
            state: state.to_owned(),
            hash: format!("sha256:{id}"),
            approve_with: format!("{id}/sha256:{id}"),
            message: String::new(),
            reason: None,
            error_code: None,
            request: None,
            last_transition_time: None,
            approval: None,
        }
    }

    #[test]
    fn operate_keeps_the_requests_not_yet_handled_and_adds_the_new_one() {
        let status = DeploymentPlanStatus {
            handled_requests: vec!["stop web-0 #1".to_owned()],
            ..Default::default()
        };
        let value = operate_annotation(
            &status,
            Some("stop web-0 #1, restart web-1 #2"),
            &request_item(Verb::Relocate, "web-2", Some("east-1"), "3"),
        );
        assert_eq!(value, "restart web-1 #2, relocate web-2 to east-1 #3");
        assert_eq!(
            operate_annotation(&status, None, "start web-0 #4"),
            "start web-0 #4"
        );
    }

    fn status(ops: Vec<OperationStatus>) -> DeploymentPlanStatus {
        DeploymentPlanStatus {
            operations: ops,
            ..Default::default()
        }
    }

    #[test]
    fn approve_op_keeps_the_items_still_waiting_and_drops_the_rest() {
        let status = status(vec![
            op("a", "PENDING_APPROVAL"),
            op("b", "PENDING_APPROVAL"),
            op("c", "APPROVED"),
        ]);
        let (value, _) =
            approval_annotation("web", &status, Some("a/sha256:a,c/sha256:c,junk"), "b")
                .expect("b waits");
        assert_eq!(value, "a/sha256:a,b/sha256:b");
    }

    #[test]
    fn a_user_operation_on_an_instance_the_plan_does_not_have_is_refused_naming_those_it_has() {
        let mut status = status(Vec::new());
        let refused = check_instance("web", &status, "web-9").unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("has no instance \"web-9\" (its instances: none)"),
            "{refused}"
        );
        status.instances = serde_json::from_value(serde_json::json!([
            {"name": "web-0", "member": "east-0", "updateDomain": "east", "deployment": 1, "state": "installed"},
        ]))
        .expect("instances");
        assert!(check_instance("web", &status, "web-0").is_ok());
        let refused = check_instance("web", &status, "web-1").unwrap_err();
        assert!(
            refused.to_string().contains("(its instances: web-0)"),
            "{refused}"
        );
    }

    #[test]
    fn approving_a_deployment_writes_its_value_names_its_waiting_operations_and_keeps_the_others() {
        let mut older = op("old", "PENDING_APPROVAL");
        older.deployment = 1;
        let mut status = status(vec![
            older,
            op("a", "PENDING_APPROVAL"),
            op("b", "APPROVED"),
            op("c", "PENDING_APPROVAL"),
        ]);
        for entry in &mut status.operations[1..] {
            entry.deployment = 2;
        }
        status.approve_deployment_with = Some("deployment-2/sha256:ac".to_owned());
        let (value, approval) =
            deployment_approval_annotation("web", &status, Some("old/sha256:old,a/sha256:a"))
                .expect("deployment 2 waits");
        assert_eq!(value, "old/sha256:old,deployment-2/sha256:ac");
        assert_eq!(
            approval,
            DeploymentApproval {
                revision: 2,
                operations: vec!["a".to_owned(), "c".to_owned()],
            }
        );
        // A value that names no waiting operation is not written.
        for value in ["deployment-x/sha256:ac", "deployment-7/sha256:ac"] {
            status.approve_deployment_with = Some(value.to_owned());
            assert!(deployment_approval_annotation("web", &status, None).is_err());
        }
        status.approve_deployment_with = None;
        let nothing = deployment_approval_annotation("web", &status, None).unwrap_err();
        assert!(
            nothing
                .to_string()
                .contains("no deployment of DeploymentPlan web waits"),
            "{nothing}"
        );
    }

    #[test]
    fn approve_op_refuses_an_unknown_or_settled_operation() {
        let status = status(vec![op("c", "APPROVED")]);
        let unknown = approval_annotation("web", &status, None, "x").unwrap_err();
        assert!(
            unknown.to_string().contains("no operation \"x\""),
            "{unknown}"
        );
        let settled = approval_annotation("web", &status, None, "c").unwrap_err();
        assert!(
            settled
                .to_string()
                .contains("is APPROVED, not PENDING_APPROVAL"),
            "{settled}"
        );
    }

    #[test]
    fn the_plan_report_counts_instances_by_state_and_operations_by_type_and_state() {
        let plan: DeploymentPlan = serde_json::from_value(serde_json::json!({
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "DeploymentPlan",
            "metadata": {"name": "web"},
            "spec": {
                "swarm": "demo",
                "applications": [{"name": "nginx", "resources": {"cores": 1}, "ports": [{"port": 80}]}],
                "deployment": {"instances": 2, "payloads": [{"application": "nginx", "coordinates": {"image": "nginx:1"}}]},
            },
            "status": {
                "ready": "1/2",
                "instances": [
                    {"name": "web-0", "member": "east-0", "deployment": 1, "state": "installed"},
                    {"name": "web-1", "member": "west-0", "deployment": 1, "state": "pending"},
                ],
                "operations": [op("a", "SUCCEEDED"), op("b", "APPROVED")],
                "deploymentStatus": [{
                    "deploymentId": "id-1",
                    "adoptedManifestVersion": "1",
                    "status": {"state": "failed", "error": {"code": "ExitCode1", "source": "instance web-1 on west-0", "message": "boom"}},
                    "components": [{"name": "nginx", "state": "failed"}],
                }],
            },
        }))
        .expect("a plan");
        let report = plan_report(&plan);
        assert_eq!(report.instance_states["installed"], 1);
        assert_eq!(report.instance_states["pending"], 1);
        assert_eq!(report.operation_summary["CREATE"]["SUCCEEDED"], 1);
        assert_eq!(report.applications[0].payload, "image=nginx:1");
        assert_eq!(report.applications[0].ports, "80/TCP");
        let table = report.table();
        assert!(table.contains("1/2"), "{table}");
        let deployments = table.split("\nDeployments\n").nth(1).unwrap_or_default();
        assert!(
            deployments.contains("1")
                && deployments.contains("id-1")
                && deployments.contains("failed"),
            "{table}"
        );
        assert!(deployments.contains("nginx=failed"), "{table}");
        assert!(
            deployments.contains("ExitCode1 from instance web-1 on west-0: boom"),
            "{table}"
        );
        assert!(table.contains("image=nginx:1"), "{table}");
    }

    #[test]
    fn the_plan_report_prints_the_requirements_and_each_applications_resources_and_ports() {
        let plan: DeploymentPlan = serde_json::from_value(serde_json::json!({
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "DeploymentPlan",
            "metadata": {"name": "web"},
            "spec": {
                "swarm": "demo",
                "applications": [
                    {"name": "nginx", "resources": {"cores": 4, "memory": 64}, "ports": [{"port": 80}, {"protocol": "UDP", "port": 53}]},
                    {"name": "exporter", "resources": {"cores": 1}},
                ],
                "requirements": [
                    {"type": "GPU", "comparator": "Gte", "names": ["nvidia-v100", "nvidia-p100"]},
                    {"type": "CPU", "comparator": "In", "names": ["intel-xeon"]},
                ],
                "deployment": {"instances": 1},
            },
        }))
        .expect("a plan");
        let report = plan_report(&plan);
        assert_eq!(
            report.requirements[0],
            RequirementRow {
                type_: "GPU".to_owned(),
                comparator: "Gte".to_owned(),
                names: vec!["nvidia-v100".to_owned(), "nvidia-p100".to_owned()],
            }
        );
        assert_eq!(report.instance_demand, "cores=5, memory=64");
        let table = report.table();
        let requirements = table
            .split("\nRequirements (matching compute capabilities)\n")
            .nth(1)
            .unwrap_or_default();
        assert!(
            requirements.contains("GPU")
                && requirements.contains("Gte")
                && requirements.contains("nvidia-v100, nvidia-p100"),
            "{table}"
        );
        assert!(
            table.contains("Applications (one instance takes cores=5, memory=64)"),
            "{table}"
        );
        assert!(
            table.contains("cores=4, memory=64") && table.contains("80/TCP, 53/UDP"),
            "{table}"
        );
        assert!(
            table.lines().all(|line| line.chars().count() <= 120),
            "{table}"
        );
    }
}
