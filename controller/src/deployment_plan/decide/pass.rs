//! The pure decision for one plan: observation in, status and Events out.
//!
//! # One pass, in order
//!
//! 1. **Inputs.** The Swarm must exist, application names be unique, every
//!    payload name an application, every pool annotation parse, placement be
//!    computable (capability scores agree, `Gte`/`Lte` names are known). Any
//!    problem: the last good status is kept, with `Degraded` naming the
//!    object and the input, and one Warning per new problem.
//! 2. **Deployment revision.** A change of `spec.applications` or of
//!    `spec.deployment` other than its instance count (a fingerprint kept in
//!    `status.deploymentHash`; scaling is not a new revision)
//!    takes the next number after `status.latestDeployment` and
//!    `status.deploymentCounter` (numbers burnt by approvals); numbers are
//!    never reused. Operations of older revisions not approved yet fail as
//!    superseded (`deploy::operation::supersede`), so nothing waits on them.
//!    The revision's record (payloads, rollout, instance count, change
//!    cause, time) goes into `status.deployments` (see `history`).
//! 3. **Reports.** An `APPROVED` operation finishes from what its member's
//!    own Lease reports (`shoal.dev/instance-states`, trusted only from a
//!    Lease that speaks for the pod): `installed` for the operation's
//!    deployment → `SUCCEEDED`; `failed` → `FAILED` with the code and message
//!    (also in `status.instances[].error`). A `DELETE` succeeds when the
//!    member reports the instance `removed`, or no longer reports it, or the
//!    member is gone. A target member that leaves fails its operation. Every
//!    failure carries its cause as a field (`FailureReason`: `Superseded`,
//!    `Withdrawn`, `Reported` with the code, `TargetLeft`, `Unfit`). Entries take their
//!    member's reports only as an approved operation allows (see `reports`):
//!    the rest is ignored, listed in `status.ignoredReports` and announced
//!    once. An entry whose member is gone is `pending` again.
//! 4. **Approvals** named by `shoal.dev/approve`, judged by the one gate
//!    (`shoal_core::gate`; see `gate`) against the numbers published
//!    before this pass. Numbers an approval names before they exist are
//!    burnt first (before step 2 gives a revision number, before step 6
//!    numbers operations), so it never approves what comes next.
//!    User operations (`shoal.dev/operate`, see `requests`) become
//!    operations through the gate of step 6, each request once. An approved
//!    `STOP` makes the entry `stopped` (placement and capacity kept; it
//!    succeeds once the member no longer runs it; reports do not revive it);
//!    an approved `RESTART` makes it `restarting` until the member reports
//!    it removed or stops reporting it, then `pending` (it succeeds when
//!    reported `installed`). An open user operation makes its instance busy
//!    for step 5 and is never withdrawn there; a stopped instance takes no
//!    `UPDATE` until started.
//! 5. **Placement.** The placement in force is `status.instances`;
//!    `place_plan` with the other plans of the Swarm as reservations gives
//!    the target; `operations_for` the operations. An instance with an
//!    approved operation under way gets no new one until it finishes; a
//!    waiting operation the target no longer needs is withdrawn (`FAILED`).
//!    A canary rollout holds the `UPDATE`s of the instances that are not
//!    canaries until the canaries are installed (and the pause has passed,
//!    or, without one, makes them wait for approval); see `rollout`. A
//!    blue-green rollout replaces the operations of instances running an
//!    earlier deployment by a green copy beside each (`RELOCATE` that keeps
//!    the blue copy), then, all installed, `DELETE`s of the blue copies; see
//!    `blue_green`. A Rolling rollout (the default) releases `UPDATE`s one
//!    update domain at a time, in `rollout.domainOrder`; see `ordered`.
//!    `spec.paused` (the user's pause) holds every type: no `UPDATE`, no
//!    green copy, no switch, and `status.rollout.phase` is `Paused` (only
//!    then). With two entries of one instance outside a relocation,
//!    the newer deployment's is in force.
//! 6. **Gate.** Each new operation takes the next number
//!    (`status.operationCounter`; its id ends in it, so no id is given
//!    twice). `Automatic`: approved at once. `Manual`: every operation
//!    waits for approval. `Budget`: a `CREATE` disrupts nothing and is
//!    approved at once; `UPDATE`/`RELOCATE`/`DELETE` disrupt the member they
//!    leave or change, and are approved at once when the new ones together
//!    disrupt at most `maxDisruptedMembers` members (default 0), else they
//!    all wait. (`maxMovedJobs` is about jobs and does not apply.)
//!    **Maintenance windows** (`approval.windows`, the one rule of
//!    `shoal_core::window`): while every window is closed, an operation
//!    approved (by the policy or `shoal.dev/approve`) keeps its state
//!    (`PENDING`, `PENDING_APPROVAL`) with its approval recorded
//!    (`status.operations[].approval`) and goes on in the first pass a window
//!    is open. Not held: an operation that moves an instance off a member
//!    that is gone (`RELOCATE`, `DELETE`: nothing runs it there), and any
//!    operation of a deployment revision whose rollout is under way (the
//!    placement in force holds entries of that revision and of older ones):
//!    a rollout started in a window finishes, so a window never closes on a
//!    half-applied deployment.
//! 7. **The placement in force moves on approval**, once placement's rule
//!    is checked again for the target (`shoal_core::deploy::unfit_for`: a
//!    member meeting every requirement; else the operation fails `Unfit`
//!    and places nothing). `CREATE`: a `pending`
//!    entry on the new member. `UPDATE`: the entry takes the new deployment,
//!    `pending`. `RELOCATE` (make-before-break): a `pending` entry on the new
//!    member is added *beside* the old one, which keeps running; only when
//!    the new one reports `installed` does the old entry become `removing`,
//!    and it leaves `status.instances` when its member reports it `removed`
//!    (or no longer reports it, or is gone). Meanwhile both members hold the
//!    instance's demand for every plan's placement. A relocation whose new
//!    copy fails drops that copy: the instance stays where it ran. That
//!    relocation (instance, target member, revision) is then not planned
//!    again: the member reported the payload failing there, and its later
//!    reports (the same `failed`, then `removed` as it cleans up, then
//!    nothing) say nothing new. It is tried again with the next deployment
//!    revision, when the placement picks another target (e.g. the member
//!    left), or when the failed record has left the operation history; a
//!    user may ask for a relocation at any time (`shoal.dev/operate`).
//!    `DELETE`: the entry becomes `removing`, then leaves the same way.
//! 8. **Status.** Operations (open ones and the last
//!    `operationHistoryLimit` finished ones), unplaced instances with their
//!    reason, conditions, phase, `ready` (`installed/desired`),
//!    `pendingOperations`, refused annotations; Events only for transitions.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use shoal_core::MemberId;
use shoal_core::deploy::operation::supersede;
use shoal_core::deploy::{
    FailureReason, InstanceId, Operation, OperationState, OperationType, PlanRequest,
    operations_for, place_plan,
};
use shoal_core::names::{ANNOTATION_APPROVE, ANNOTATION_APPROVED_BY, ANNOTATION_OPERATE};

use super::blue_green::blue_green;
use super::gate::{
    Counters, apply_approvals, approval_value, burnt, deployment_approval_value, deployment_hash,
};
use super::members::{
    demand, deploy_members, ports, requirements, reserved_by_others, spec_problem,
};
use super::ordered::{OrderedInput, check_domain_order, ordered};
use super::reports::{
    Evidence, InstanceReport, MemberReports, claims_to_run, judge, record_ignored, trusted_reports,
};
use super::requests::{RequestContext, take_requests};
use super::rollout::{RolloutInput, canary};
use super::{MemberPod, PlanDecision, PlanObservation, PoolObservation};
use super::{history, status};
use crate::api::approval_record::ApprovalRecord;
use crate::api::deployment_plan::{
    DeploymentPlanStatus, DeploymentRecord, IgnoredReport, InstanceError, InstanceStatus,
    OperationStatus, RolloutStatus, RolloutType, UnplacedInstance,
};
use crate::api::swarm::ApprovalPolicy;
use crate::observed::ordinal_member;
use crate::planned::PlannedEvent;

/// How soon to look again while operations are under way (Lease changes
/// trigger a pass too; this is the fallback).
const UNDER_WAY_REQUEUE: Duration = Duration::from_secs(5);

/// Instance states that mean the entry is on its way out.
fn leaving(state: &str) -> bool {
    matches!(state, "removing" | "removed")
}

/// The relocations (instance, target member, deployment revision) whose new
/// copy its member reported `failed`: planning the same one again would
/// only fail again on the same payload, so step 5 does not (see the module
/// docs, step 7).
fn reported_failed_relocations(
    operations: &[Operation],
) -> BTreeSet<(&InstanceId, Option<&MemberId>, u64)> {
    operations
        .iter()
        .filter(|op| {
            op.operation_type == OperationType::Relocate
                && op.state == OperationState::Failed
                && matches!(op.reason, Some(FailureReason::Reported { .. }))
        })
        .map(|op| (&op.instance, op.to.as_ref(), op.revision))
        .collect()
}

/// Decides the plan's status from the observation. Pure.
pub fn decide(obs: &PlanObservation) -> PlanDecision {
    let mut decision = if obs.record_editors.is_empty() {
        decide_from_record(obs)
    } else {
        // A placement record someone else wrote is put back first (see `drift`).
        match super::drift::restore(obs) {
            Ok((restored, event)) => {
                let mut decision = decide_from_record(&restored);
                decision.events.splice(0..0, event);
                decision
            }
            Err(problem) => super::drift::not_restored(obs, problem),
        }
    };
    status::spec_not_observed(obs, &mut decision.status);
    super::service::attach(obs, &mut decision);
    decision
}

/// Decides from a placement record the controller wrote.
fn decide_from_record(obs: &PlanObservation) -> PlanDecision {
    let members = match check_inputs(obs) {
        Ok(members) => members,
        Err(problem) if obs.swarm.is_none() => {
            let decision = degraded(obs, problem.clone());
            return super::status_document::swarm_missing(obs, decision, &problem);
        }
        Err(problem) => return degraded(obs, problem),
    };
    let window = match obs.spec.approval.windows() {
        Ok(windows) => WindowWait::at(&windows, obs.now),
        Err(error) => {
            return degraded(
                obs,
                format!(
                    "DeploymentPlan {}: approval.windows: {error}; no approved operation starts until it is fixed",
                    obs.name
                ),
            );
        }
    };
    let mut pass = Pass::new(obs, members.clone());
    pass.window = window;
    pass.take_revision();
    pass.finish_from_reports();
    pass.refresh_instance_states();
    let refused = pass.approve_from_annotation();
    pass.release_held();
    let domains: BTreeMap<String, String> = members
        .iter()
        .map(|member| (member.id.pod_name(), member.update_domain.clone()))
        .collect();
    pass.apply_approved(&domains);
    let in_force = pass.in_force();
    let request = PlanRequest {
        plan: obs.name.clone(),
        instances: obs.spec.deployment.instances,
        max_per_member: obs.spec.max_instances_per_member,
        demand: demand(&obs.spec),
        requirements: requirements(&obs.spec),
        ports: ports(&obs.spec),
        members,
        reserved: reserved_by_others(obs),
        in_force: in_force
            .iter()
            .map(|(k, (m, _))| (k.clone(), m.clone()))
            .collect(),
    };
    let placement = match place_plan(&request) {
        Ok(placement) => placement,
        Err(error) => {
            return degraded(obs, format!("DeploymentPlan {}: {error}", obs.name));
        }
    };
    pass.take_user_requests(&request);
    let revisions: BTreeMap<InstanceId, u64> = in_force
        .iter()
        .map(|(instance, (_, revision))| (instance.clone(), *revision))
        .collect();
    let planned = operations_for(
        &request.in_force,
        &placement.target,
        &revisions,
        pass.latest,
    );
    let planned = pass.hold_for_rollout(planned, &request);
    pass.plan_operations(planned);
    pass.apply_approved(&domains);
    let unplaced = placement
        .unplaced
        .iter()
        .map(|unplaced| UnplacedInstance {
            name: unplaced.instance.to_string(),
            reason: unplaced.reason.to_string(),
        })
        .collect();
    super::status_document::attach(obs, pass.finish(refused, unplaced))
}

/// Checks what the schema cannot; returns the Swarm's members.
fn check_inputs(obs: &PlanObservation) -> Result<Vec<shoal_core::deploy::DeployMember>, String> {
    if obs.swarm.is_none() {
        return Err(format!(
            "DeploymentPlan {}: spec.swarm names Swarm {:?}, which does not exist in this namespace",
            obs.name, obs.spec.swarm
        ));
    }
    if let Some(problem) = spec_problem(&obs.name, &obs.spec) {
        return Err(problem);
    }
    check_domain_order(&obs.name, &obs.spec.deployment.rollout.domain_order)?;
    deploy_members(obs).map_err(|problem| {
        format!(
            "DeploymentPlan {} (Swarm {}): {problem}",
            obs.name, obs.spec.swarm
        )
    })
}

/// The last good status, marked Degraded with `problem`; a Warning when the
/// problem is new.
fn degraded(obs: &PlanObservation, problem: String) -> PlanDecision {
    let mut status = obs.status.clone();
    let previous = status::previous_condition(&obs.status, "Degraded");
    let mut events = Vec::new();
    if previous.is_none_or(|condition| condition.status != "True" || condition.message != problem) {
        events.push(PlannedEvent {
            warning: true,
            reason: "InvalidInput".to_owned(),
            note: problem.clone(),
        });
    }
    status::set_condition(
        obs,
        &mut status,
        "Degraded",
        true,
        "InvalidInput",
        problem.clone(),
    );
    status.phase = Some("Degraded".to_owned());
    status.last_error = Some(problem);
    PlanDecision {
        status,
        events,
        requeue_after: None,
        leave_edited_record: false,
        service: Default::default(),
    }
}

/// Fingerprint of what a deployment revision stands for: the applications,
/// payloads and rollout. The instance count is not part of it: scaling
/// creates or deletes instances of the revision in force and updates none.
/// (xxh3, not a digest: it only detects a change of the plan's own spec.)
fn fingerprint(obs: &PlanObservation) -> String {
    let deployment = &obs.spec.deployment;
    let text = serde_json::to_vec(&(
        &obs.spec.applications,
        &deployment.payloads,
        &deployment.rollout,
    ))
    .unwrap_or_default();
    format!("{:016x}", shoal_core::hash::key_hash(&text))
}

/// Every maintenance window is closed: why, and when the next opens.
#[derive(Debug, Clone)]
struct WindowWait {
    /// In words, naming the window and the opening.
    because: String,
    /// The next opening, RFC 3339.
    next: Option<String>,
    /// How long until then.
    wake_after: Option<Duration>,
}

impl WindowWait {
    /// `Some` while the plan has windows and every one is closed at `now`.
    fn at(windows: &shoal_core::window::Windows, now: jiff::Timestamp) -> Option<WindowWait> {
        let standing = windows.standing(now);
        Some(WindowWait {
            because: standing.waiting_because()?,
            next: standing.next_opening(),
            wake_after: standing.wake_after(now),
        })
    }
}

/// Whether a closed window (`closed`) holds `op` (see the module docs, step 6): not when
/// it moves an instance off a member that is gone, nor when its deployment revision's
/// rollout is under way in the placement in force (`instances`).
fn held_by_window(
    closed: bool,
    pods: &BTreeMap<String, &MemberPod>,
    instances: &[InstanceStatus],
    op: &Operation,
) -> bool {
    if !closed {
        return false;
    }
    let rehomes = matches!(
        op.operation_type,
        OperationType::Relocate | OperationType::Delete
    ) && op
        .from
        .as_ref()
        .is_some_and(|from| !pods.contains_key(&from.pod_name()));
    let live = || instances.iter().filter(|entry| !leaving(&entry.state));
    let rollout_under_way = live().any(|entry| entry.deployment == op.revision)
        && live().any(|entry| entry.deployment < op.revision);
    !rehomes && !rollout_under_way
}

/// How an approved operation ended, from what its member reported.
enum Outcome {
    /// SUCCEEDED, with the message.
    Succeeded(String),
    /// FAILED for this reason, with the message.
    Failed(FailureReason, String),
}

/// The working state of one pass.
struct Pass<'a> {
    obs: &'a PlanObservation,
    operations: Vec<Operation>,
    /// Ids of operations approved in this pass whose placement has not moved yet.
    to_put_in_force: Vec<String>,
    /// Who approved each operation approved in this pass, by id.
    approved_now: BTreeMap<String, ApprovalRecord>,
    instances: Vec<InstanceStatus>,
    latest: u64,
    deployment_hash: String,
    pods: BTreeMap<String, &'a MemberPod>,
    reports: BTreeMap<String, MemberReports>,
    /// Events decided before the status is put together.
    events: Vec<PlannedEvent>,
    /// The `shoal.dev/operate` requests handled (see `requests`).
    handled_requests: Vec<String>,
    /// Refused `shoal.dev/operate` requests, in words.
    request_refusals: Vec<String>,
    /// Instances whose new operations wait for approval whatever the policy (canary).
    must_review: BTreeSet<InstanceId>,
    /// `status.rollout` (canary).
    rollout: Option<RolloutStatus>,
    /// Look again after this long at the latest (a canary pause).
    requeue_after: Option<Duration>,
    /// Green copies of a blue-green rollout that fit nowhere.
    green_unplaced: Vec<UnplacedInstance>,
    /// The numbers published before this pass (what an approval may name).
    published: Counters,
    /// The numbers given or burnt so far, this pass included.
    counters: Counters,
    /// `deployment-<revision>/<hash>` items judged for the first time in this pass:
    /// (revision, item, approved); their records keep them.
    deployment_items: Vec<(u64, String, bool)>,
    /// The Swarm's members as placement sees them, for the check of every
    /// operation put in force (see `apply_approved`).
    members: Vec<shoal_core::deploy::DeployMember>,
    /// Member reports no approved operation allows (see `reports`).
    ignored: Vec<IgnoredReport>,
    /// New operations left for a later pass: the status had no room for them.
    deferred: usize,
    /// `Some` while every maintenance window is closed.
    window: Option<WindowWait>,
}

impl<'a> Pass<'a> {
    fn new(obs: &'a PlanObservation, members: Vec<shoal_core::deploy::DeployMember>) -> Pass<'a> {
        let operations = obs
            .status
            .operations
            .iter()
            .filter_map(|status| operation_from_status(&obs.name, status))
            .collect();
        let pods: BTreeMap<String, &MemberPod> = obs
            .pools
            .iter()
            .flat_map(PoolObservation::members)
            .collect();
        let published = published_counters(&obs.status);
        let counters = burnt(
            obs.annotations.get(ANNOTATION_APPROVE).map(String::as_str),
            published,
        );
        let reports = pods
            .iter()
            .filter_map(|(name, pod)| {
                trusted_reports(name, Some(pod), obs.leases.get(name))
                    .map(|reports| (name.clone(), reports))
            })
            .collect();
        Pass {
            obs,
            operations,
            to_put_in_force: Vec::new(),
            approved_now: BTreeMap::new(),
            instances: obs.status.instances.clone(),
            latest: obs
                .status
                .latest_deployment
                .max(obs.status.current_deployment),
            deployment_hash: obs.status.deployment_hash.clone().unwrap_or_default(),
            pods,
            reports,
            events: Vec::new(),
            handled_requests: obs.status.handled_requests.clone(),
            request_refusals: Vec::new(),
            must_review: BTreeSet::new(),
            rollout: None,
            requeue_after: None,
            green_unplaced: Vec::new(),
            published,
            counters,
            deployment_items: Vec::new(),
            members,
            ignored: Vec::new(),
            deferred: 0,
            window: None,
        }
    }

    /// A new revision number when the deployment changed; supersedes older waiting operations.
    fn take_revision(&mut self) {
        let fingerprint = fingerprint(self.obs);
        if self.deployment_hash != fingerprint || self.latest == 0 {
            // Past every number given or burnt: an approval that named a number before
            // it existed never names this revision.
            self.latest = self.latest.max(self.counters.deployments) + 1;
            self.counters.deployments = self.latest;
            self.deployment_hash = fingerprint;
            supersede(&mut self.operations, self.latest);
        }
    }

    fn report(&self, pod: &str, instance: &str) -> Option<&InstanceReport> {
        self.reports
            .get(pod)
            .and_then(|reports| reports.get(instance))
    }

    /// Step 3 of the module docs.
    fn finish_from_reports(&mut self) {
        for index in 0..self.operations.len() {
            let operation = self.operations[index].clone();
            if operation.state != OperationState::Approved {
                continue;
            }
            let outcome = match operation.operation_type {
                OperationType::Delete => self.deletion_outcome(&operation),
                OperationType::Create | OperationType::Update | OperationType::Relocate => {
                    self.installation_outcome(&operation)
                }
                OperationType::Stop => self.stop_outcome(&operation),
                OperationType::Restart => self.restart_outcome(&operation),
            };
            match outcome {
                Some(Outcome::Succeeded(message)) => {
                    let _ = self.operations[index].advance(OperationState::Succeeded, message);
                }
                Some(Outcome::Failed(reason, message)) => {
                    let _ = self.operations[index].fail(reason, message);
                }
                None => {}
            }
        }
    }

    /// Drops the entry of `instance` on `member`.
    fn drop_entry(&mut self, instance: &str, member: &str) {
        self.instances
            .retain(|entry| !(entry.name == instance && entry.member == member));
    }

    /// A DELETE succeeds when its member reports the instance removed, stops
    /// reporting it, or is gone.
    fn deletion_outcome(&mut self, operation: &Operation) -> Option<Outcome> {
        let instance = operation.instance.to_string();
        let from = operation.from.as_ref()?.pod_name();
        if !self.stopped_reporting(&from, &instance) {
            return None;
        }
        self.drop_entry(&instance, &from);
        Some(Outcome::Succeeded(format!(
            "{instance} removed from {from}"
        )))
    }

    /// A CREATE, UPDATE or RELOCATE finishes when its target member reports
    /// the instance installed or failed for the operation's deployment, or
    /// fails when that member is gone.
    fn installation_outcome(&mut self, operation: &Operation) -> Option<Outcome> {
        let instance = operation.instance.to_string();
        let to = operation.to.as_ref()?.pod_name();
        if !self.pods.contains_key(&to) {
            self.drop_entry(&instance, &to);
            return Some(Outcome::Failed(
                FailureReason::TargetLeft,
                format!("member {to} left before {instance} was installed there"),
            ));
        }
        let report = self
            .report(&to, &instance)
            .filter(|report| report.deployment == operation.revision)?
            .clone();
        match report.state.as_str() {
            "installed" => {
                // Make-before-break: only now does the old placement start leaving.
                // A blue-green rollout keeps the blue copy until the switch.
                let blue_green = self.obs.spec.deployment.rollout.type_ == RolloutType::BlueGreen
                    && self.instances.iter().any(|entry| {
                        entry.name == instance
                            && Some(&entry.member)
                                == operation.from.as_ref().map(MemberId::pod_name).as_ref()
                            && entry.deployment < operation.revision
                    });
                if let Some(from) = operation.from.as_ref().map(MemberId::pod_name)
                    && from != to
                    && !blue_green
                {
                    for entry in self.instances.iter_mut() {
                        if entry.name == instance && entry.member == from {
                            entry.state = "removing".to_owned();
                        }
                    }
                }
                Some(Outcome::Succeeded(format!(
                    "{instance} installed on {to} (deployment {})",
                    report.deployment
                )))
            }
            "failed" => {
                let code = report.code.unwrap_or_else(|| "Failed".to_owned());
                let message = report.message.unwrap_or_default();
                if operation.operation_type == OperationType::Relocate {
                    // The old placement never stopped: the instance stays there, and the
                    // failed copy leaves (the error is in the operation's message).
                    self.drop_entry(&instance, &to);
                }
                Some(Outcome::Failed(
                    FailureReason::Reported { code: code.clone() },
                    format!("{to} reports {instance} failed: {code}: {message}"),
                ))
            }
            _ => None,
        }
    }

    /// Entries take the state their member reports for their deployment where an
    /// approved operation allows it (see `reports`); leaving entries go once their
    /// member no longer has them. Reports nothing allows are set aside.
    fn refresh_instance_states(&mut self) {
        let mut kept = Vec::new();
        for mut entry in std::mem::take(&mut self.instances) {
            let gone = !self.pods.contains_key(&entry.member);
            let report = self.report(&entry.member, &entry.name).cloned();
            if leaving(&entry.state) {
                let member_speaks = self.reports.contains_key(&entry.member);
                let removed = member_speaks
                    && report
                        .as_ref()
                        .is_none_or(|report| report.state == "removed");
                if gone || removed {
                    continue;
                }
            } else if entry.state == "stopped" {
                // Stopped by a user: out of the slice until started; reports do not revive it.
            } else if entry.state == "restarting" {
                if self.stopped_reporting(&entry.member, &entry.name) {
                    entry.state = "pending".to_owned();
                    entry.error = None;
                }
            } else if !entry.delivered() || (gone && entry.state != "pending") {
                // A state no operation gives (an earlier release copied reports
                // verbatim): the instance is delivered again. Or its member is gone
                // (its pool deleted, its pod removed): nothing runs it, so it is not
                // installed, whatever was last reported, until placed and reported again.
                entry.state = "pending".to_owned();
                entry.error = None;
            } else if let Some(report) = report.filter(|r| r.deployment == entry.deployment) {
                match judge(&entry.state, &report.state) {
                    Evidence::Taken => {
                        entry.error = (report.state == "failed").then(|| InstanceError {
                            code: report.code.clone().unwrap_or_else(|| "Failed".to_owned()),
                            source: entry.member.clone(),
                            message: report.message.clone().unwrap_or_default(),
                        });
                        entry.state = report.state;
                    }
                    Evidence::Stale => {}
                    Evidence::Ignored(why) => self.ignored.push(IgnoredReport {
                        member: entry.member.clone(),
                        instance: entry.name.clone(),
                        state: report.state,
                        deployment: report.deployment,
                        why,
                    }),
                }
            }
            kept.push(entry);
        }
        self.instances = kept;
        self.ignore_reports_for_others();
    }

    /// A member may report only for the instances placed on it: one saying it runs
    /// an instance of this plan that is not is set aside.
    fn ignore_reports_for_others(&mut self) {
        for (member, reports) in &self.reports {
            for (name, report) in reports {
                let ours = InstanceId::parse(&self.obs.name, name).is_ok();
                let placed = self
                    .instances
                    .iter()
                    .any(|entry| &entry.name == name && &entry.member == member);
                if ours && !placed && claims_to_run(&report.state) {
                    self.ignored.push(IgnoredReport {
                        member: member.clone(),
                        instance: name.clone(),
                        state: report.state.clone(),
                        deployment: report.deployment,
                        why: format!("{name} is not placed on {member}"),
                    });
                }
            }
        }
    }

    /// Whether `member` no longer runs `instance`: it is gone, or its own
    /// Lease reports the instance `removed` or not at all.
    fn stopped_reporting(&self, member: &str, instance: &str) -> bool {
        let gone = !self.pods.contains_key(member);
        let removed = self.reports.get(member).is_some_and(|reports| {
            reports
                .get(instance)
                .is_none_or(|report| report.state == "removed")
        });
        gone || removed
    }

    /// A STOP succeeds once its member no longer runs the instance.
    fn stop_outcome(&self, operation: &Operation) -> Option<Outcome> {
        let instance = operation.instance.to_string();
        let from = operation.from.as_ref()?.pod_name();
        self.stopped_reporting(&from, &instance)
            .then(|| Outcome::Succeeded(format!("{instance} stopped on {from}")))
    }

    /// A RESTART succeeds once the instance, started again after its member
    /// reported it gone, reports installed; it fails on a reported failure or
    /// when the member leaves.
    fn restart_outcome(&self, operation: &Operation) -> Option<Outcome> {
        let instance = operation.instance.to_string();
        let member = operation.from.as_ref()?.pod_name();
        if !self.pods.contains_key(&member) {
            return Some(Outcome::Failed(
                FailureReason::TargetLeft,
                format!("member {member} left before {instance} was restarted there"),
            ));
        }
        let entry = self
            .instances
            .iter()
            .find(|entry| entry.name == instance && entry.member == member)?;
        if entry.state == "restarting" {
            return None;
        }
        let report = self
            .report(&member, &instance)
            .filter(|report| report.deployment == entry.deployment)?;
        match report.state.as_str() {
            "installed" => Some(Outcome::Succeeded(format!(
                "{instance} restarted on {member}"
            ))),
            "failed" => {
                let code = report.code.clone().unwrap_or_else(|| "Failed".to_owned());
                let message = report.message.clone().unwrap_or_default();
                Some(Outcome::Failed(
                    FailureReason::Reported { code: code.clone() },
                    format!("{member} reports {instance} failed after restart: {code}: {message}"),
                ))
            }
            _ => None,
        }
    }

    /// The user requests of `shoal.dev/operate` not handled yet become
    /// operations through the gate, or refusals (see `requests`).
    fn take_user_requests(&mut self, placement: &PlanRequest) {
        let Some(value) = self.obs.annotations.get(ANNOTATION_OPERATE) else {
            self.handled_requests.clear();
            return;
        };
        let context = RequestContext {
            plan: &self.obs.name,
            entries: &self.instances,
            operations: &self.operations,
            placement,
        };
        let taken = take_requests(&context, value, &self.handled_requests);
        self.handled_requests = taken.handled;
        self.request_refusals = taken.refusals;
        self.add_through_gate(taken.operations);
    }

    /// Step 5, canary and blue-green rollouts: holds the planned `UPDATE`s
    /// a canary rollout does not let through yet (see `rollout`), or puts
    /// a blue-green rollout's operations in place of the placement's (see
    /// `blue_green`).
    fn hold_for_rollout(
        &mut self,
        planned: Vec<Operation>,
        request: &PlanRequest,
    ) -> Vec<Operation> {
        let input = RolloutInput {
            plan: &self.obs.name,
            rollout: &self.obs.spec.deployment.rollout,
            latest: self.latest,
            entries: &self.instances,
            operations: &self.operations,
            previous: self.obs.status.rollout.as_ref(),
            paused: self.obs.spec.paused,
            now: self.obs.now,
        };
        match self.obs.spec.deployment.rollout.type_ {
            RolloutType::BlueGreen => {
                let decision = blue_green(&input, request, planned);
                self.rollout = decision.status;
                self.events.extend(decision.events);
                self.green_unplaced = decision.unplaced;
                decision.planned
            }
            RolloutType::Rolling => self.order_by_domain(planned, request),
            RolloutType::Canary => {
                let decision = canary(&input, planned);
                self.must_review = decision.must_review;
                self.rollout = decision.status;
                self.events.extend(decision.events);
                self.requeue_after = decision.requeue_after;
                decision.planned
            }
        }
    }

    /// Step 5 for a Rolling rollout: one update domain at a time (see `ordered`).
    fn order_by_domain(
        &mut self,
        planned: Vec<Operation>,
        request: &PlanRequest,
    ) -> Vec<Operation> {
        let input = OrderedInput {
            plan: &self.obs.name,
            domain_order: &self.obs.spec.deployment.rollout.domain_order,
            paused: self.obs.spec.paused,
            latest: self.latest,
            entries: &self.instances,
            previous: self.obs.status.rollout.as_ref(),
        };
        let decision = ordered(&input, request, planned);
        self.rollout = decision.status;
        self.events.extend(decision.events);
        decision.planned
    }

    /// Step 4: the approval annotation, through the gate; returns its refusals.
    fn approve_from_annotation(&mut self) -> Vec<String> {
        let Some(value) = self.obs.annotations.get(ANNOTATION_APPROVE) else {
            return Vec::new();
        };
        let closed = self.window.is_some();
        let (pods, instances) = (&self.pods, &self.instances);
        let hold = |op: &Operation| held_by_window(closed, pods, instances, op);
        let judged = apply_approvals(
            &self.obs.name,
            value,
            &mut self.operations,
            (self.published, &self.obs.status.deployments),
            &hold,
        );
        let by = ApprovalRecord::from_annotations(
            &self.obs.annotations,
            self.obs.approved_by_policy,
            &self.obs.now.to_string(),
        );
        for index in judged.approved {
            let id = self.operations[index].id.clone();
            self.approved_now.insert(id.clone(), by.clone());
            self.to_put_in_force.push(id);
        }
        for index in judged.held {
            let why = format!("approved by {ANNOTATION_APPROVE} ({})", by.display());
            self.hold_for_window(index, by.clone(), &why);
        }
        self.deployment_items = judged.deployment_items;
        judged.refused
    }

    /// Keeps the approved operation at `index` in its state, its approval recorded (the
    /// first one, if it was held before), until a window opens.
    fn hold_for_window(&mut self, index: usize, by: ApprovalRecord, why: &str) {
        let Some(window) = &self.window else {
            return;
        };
        let op = &mut self.operations[index];
        op.message = format!(
            "{why}; starts when a maintenance window opens: {}",
            window.because
        );
        let earlier = self
            .obs
            .status
            .operations
            .iter()
            .find(|old| old.id == op.id);
        let by = earlier.and_then(|old| old.approval.clone()).unwrap_or(by);
        self.approved_now.insert(op.id.clone(), by);
    }

    /// Operations approved while every window was closed (waiting, their approval
    /// recorded) go on once a window opens, or once the window no longer holds them.
    fn release_held(&mut self) {
        let closed = self.window.is_some();
        for index in 0..self.operations.len() {
            let op = &self.operations[index];
            let waiting = matches!(
                op.state,
                OperationState::Pending | OperationState::PendingApproval
            );
            let approval = self
                .obs
                .status
                .operations
                .iter()
                .find(|old| old.id == op.id)
                .and_then(|old| old.approval.clone());
            let (true, Some(by)) = (waiting, approval) else {
                continue;
            };
            if self.approved_now.contains_key(&op.id)
                || held_by_window(closed, &self.pods, &self.instances, op)
            {
                continue;
            }
            let op = &mut self.operations[index];
            if op
                .advance(
                    OperationState::Approved,
                    format!("approved by {}; a maintenance window is open", by.display()),
                )
                .is_ok()
            {
                self.approved_now.insert(op.id.clone(), by);
                self.to_put_in_force.push(op.id.clone());
            }
        }
    }

    /// Step 7 for every operation approved in this pass.
    fn apply_approved(&mut self, domains: &BTreeMap<String, String>) {
        for id in std::mem::take(&mut self.to_put_in_force) {
            let Some(operation) = self.operations.iter().find(|op| op.id == id).cloned() else {
                continue;
            };
            if let Some(why) = self.unfit_target(&operation) {
                // Placement re-checked at approval: an operation the controller did not
                // plan (a hand edit of the status) never places an instance where
                // placement would not.
                if let Some(op) = self.operations.iter_mut().find(|op| op.id == id) {
                    let _ = op.fail(FailureReason::Unfit, format!("not carried out: {why}"));
                }
                continue;
            }
            let instance = operation.instance.to_string();
            let from = operation.from.as_ref().map(MemberId::pod_name);
            let to = operation.to.as_ref().map(MemberId::pod_name);
            let entry_at = |entries: &mut Vec<InstanceStatus>, member: &Option<String>| {
                entries.iter_mut().position(|entry| {
                    Some(&entry.member) == member.as_ref() && entry.name == instance
                })
            };
            match operation.operation_type {
                OperationType::Create | OperationType::Relocate => {
                    let member = to.clone().unwrap_or_default();
                    self.instances
                        .retain(|entry| !(entry.name == instance && entry.member == member));
                    self.instances.push(InstanceStatus {
                        name: instance.clone(),
                        update_domain: domains.get(&member).cloned().unwrap_or_default(),
                        member,
                        deployment: operation.revision,
                        state: "pending".to_owned(),
                        error: None,
                    });
                }
                OperationType::Update => {
                    if let Some(index) = entry_at(&mut self.instances, &from) {
                        let entry = &mut self.instances[index];
                        entry.deployment = operation.revision;
                        entry.state = "pending".to_owned();
                        entry.error = None;
                    }
                }
                OperationType::Delete => {
                    if let Some(index) = entry_at(&mut self.instances, &from) {
                        self.instances[index].state = "removing".to_owned();
                    }
                }
                OperationType::Stop | OperationType::Restart => {
                    if let Some(index) = entry_at(&mut self.instances, &from) {
                        let entry = &mut self.instances[index];
                        entry.state = if operation.operation_type == OperationType::Stop {
                            "stopped"
                        } else {
                            "restarting"
                        }
                        .to_owned();
                        entry.error = None;
                    }
                }
            }
        }
        // Instances in ordinal order; a relocating instance's old entry stays first.
        self.instances.sort_by_key(|entry| {
            InstanceId::parse(&self.obs.name, &entry.name)
                .map(|instance| instance.ordinal)
                .unwrap_or(u32::MAX)
        });
    }

    /// Why the member `operation` puts its instance on cannot hold it now (see
    /// `shoal_core::deploy::unfit_for`); `None` when it can, or when it puts the
    /// instance nowhere new (DELETE, STOP, RESTART).
    fn unfit_target(&self, operation: &Operation) -> Option<String> {
        if !matches!(
            operation.operation_type,
            OperationType::Create | OperationType::Update | OperationType::Relocate
        ) {
            return None;
        }
        let Some(to) = operation.to.as_ref() else {
            return Some(format!(
                "{} {} names no member to go to",
                operation.operation_type, operation.id
            ));
        };
        let request = PlanRequest {
            members: self.members.clone(),
            requirements: requirements(&self.obs.spec),
            ..PlanRequest::new(self.obs.name.clone(), 0)
        };
        shoal_core::deploy::unfit_for(&request, to)
    }

    /// The placement in force: instance → (member, deployment revision). A
    /// relocation under way counts on its new member.
    fn in_force(&self) -> BTreeMap<InstanceId, (MemberId, u64)> {
        let relocating: BTreeMap<String, String> = self
            .operations
            .iter()
            .filter(|op| {
                op.state == OperationState::Approved && op.operation_type == OperationType::Relocate
            })
            .filter_map(|op| Some((op.instance.to_string(), op.to.as_ref()?.pod_name())))
            .collect();
        let mut in_force = BTreeMap::new();
        for entry in &self.instances {
            if leaving(&entry.state) {
                continue;
            }
            if relocating
                .get(&entry.name)
                .is_some_and(|to| to != &entry.member)
            {
                continue;
            }
            let (Ok(instance), Some(member)) = (
                InstanceId::parse(&self.obs.name, &entry.name),
                ordinal_member(&entry.member),
            ) else {
                continue;
            };
            // Two entries of one instance outside a relocation: a blue-green
            // rollout's copies; the one of the newer deployment is in force.
            match in_force.get(&instance) {
                Some((_, deployment)) if *deployment >= entry.deployment => {}
                _ => {
                    in_force.insert(instance, (member, entry.deployment));
                }
            }
        }
        in_force
    }

    /// Steps 5 and 6: keeps waiting operations still needed, withdraws the
    /// others, adds new ones through the gate.
    fn plan_operations(&mut self, planned: Vec<Operation>) {
        // Under way, or asked for by a user and still open: the placement waits.
        let busy: BTreeSet<InstanceId> = self
            .operations
            .iter()
            .filter(|op| {
                op.state == OperationState::Approved
                    || (op.request.is_some() && !op.state.is_terminal())
            })
            .map(|op| op.instance.clone())
            .collect();
        // A stopped instance takes a new payload only once started again.
        let stopped: BTreeSet<&str> = self
            .instances
            .iter()
            .filter(|entry| entry.state == "stopped")
            .map(|entry| entry.name.as_str())
            .collect();
        let failed_relocations = reported_failed_relocations(&self.operations);
        let planned: Vec<Operation> = planned
            .into_iter()
            .filter(|op| !busy.contains(&op.instance))
            .filter(|op| {
                !(op.operation_type == OperationType::Relocate
                    && failed_relocations.contains(&(&op.instance, op.to.as_ref(), op.revision)))
            })
            .filter(|op| {
                !(op.operation_type == OperationType::Update
                    && stopped.contains(op.instance.to_string().as_str()))
            })
            .collect();
        let same = |a: &Operation, b: &Operation| {
            a.operation_type == b.operation_type
                && a.instance == b.instance
                && a.from == b.from
                && a.to == b.to
                && a.revision == b.revision
        };
        let waiting = |op: &Operation| {
            matches!(
                op.state,
                OperationState::Pending | OperationState::PendingApproval
            )
        };
        // A waiting operation the target no longer needs (as it was) is withdrawn.
        for op in self.operations.iter_mut() {
            let users = op.request.is_some();
            if waiting(op) && !users && !planned.iter().any(|candidate| same(op, candidate)) {
                let _ = op.fail(
                    FailureReason::Withdrawn,
                    "withdrawn: the plan no longer needs it (its deployment, members or instance count changed)",
                );
            }
        }
        let fresh: Vec<Operation> = planned
            .into_iter()
            .filter(|candidate| {
                !self
                    .operations
                    .iter()
                    .any(|op| waiting(op) && same(op, candidate))
            })
            .collect();
        let fresh = self.within_status_room(fresh);
        self.add_through_gate(fresh);
    }

    /// The new operations the status has room for (`size`), in order; the
    /// others wait for a later pass and are counted in `deferred`.
    fn within_status_room(&mut self, mut fresh: Vec<Operation>) -> Vec<Operation> {
        let room =
            super::size::room_for_new_operations(self.obs, &self.instances, &self.operations);
        self.deferred = fresh.len().saturating_sub(room);
        fresh.truncate(room);
        fresh
    }

    /// Step 6: new operations get the next numbers (their ids end in them, so no id is
    /// given twice) and go through the approval policy.
    fn add_through_gate(&mut self, fresh: Vec<Operation>) {
        let policy = self.obs.spec.approval.policy;
        let budget = self.obs.spec.approval.max_disrupted_members.unwrap_or(0) as usize;
        let disrupted: BTreeSet<&MemberId> = fresh
            .iter()
            .filter(|op| op.operation_type != OperationType::Create)
            .filter_map(|op| op.from.as_ref())
            .collect();
        let within_budget = disrupted.len() <= budget;
        for op in fresh {
            self.counters.operations = self.counters.operations.saturating_add(1);
            let mut op = op.numbered(self.counters.operations);
            let reviewed = self.must_review.contains(&op.instance);
            let approved_now = !reviewed
                && match policy {
                    ApprovalPolicy::Automatic => true,
                    ApprovalPolicy::Manual => false,
                    ApprovalPolicy::Budget => {
                        op.operation_type == OperationType::Create || within_budget
                    }
                };
            let by = ApprovalRecord::by_policy(&format!("{policy:?}"), &self.obs.now.to_string());
            let held = approved_now
                && held_by_window(self.window.is_some(), &self.pods, &self.instances, &op);
            if held {
                // Stays PENDING, approved: the first pass with a window open carries it out.
                self.operations.push(op);
                let index = self.operations.len() - 1;
                self.hold_for_window(index, by, &format!("approved by policy {policy:?}"));
                continue;
            }
            if approved_now {
                let _ = op.advance(
                    OperationState::Approved,
                    format!("approved by policy {policy:?}"),
                );
                self.approved_now.insert(op.id.clone(), by);
                self.to_put_in_force.push(op.id.clone());
            } else {
                let value = approval_value(&op);
                let _ = op.advance(
                    OperationState::PendingApproval,
                    format!(
                        "waits for approval: kubectl shoal approve-op {} {} (writes {ANNOTATION_APPROVE}={value} with your name in {ANNOTATION_APPROVED_BY})",
                        self.obs.name, op.id
                    ),
                );
            }
            self.operations.push(op);
        }
    }

    /// Step 8: the status and the Events of its transitions.
    fn finish(self, refused: Vec<String>, mut unplaced: Vec<UnplacedInstance>) -> PlanDecision {
        let obs = self.obs;
        unplaced.extend(self.green_unplaced.iter().cloned());
        let mut events = self.events.clone();
        let operations =
            status::operation_history(obs, &self.operations, &self.approved_now, &mut events);
        let waiting = |op: &&Operation| {
            matches!(
                op.state,
                OperationState::Pending | OperationState::PendingApproval
            )
        };
        let latest_waits = self
            .operations
            .iter()
            .filter(waiting)
            .any(|op| op.revision == self.latest);
        let held = self
            .operations
            .iter()
            .filter(waiting)
            .filter(|op| self.approval_recorded(op))
            .count();
        let counts = status::Counts {
            pending: self.operations.iter().filter(waiting).count() - held,
            held,
            under_way: self
                .operations
                .iter()
                .filter(|op| op.state == OperationState::Approved)
                .count(),
            installed: self.in_force_states().filter(|s| *s == "installed").count(),
            desired: obs.spec.deployment.instances,
            failed: self.failed_instances(),
            waiting_for_swarm: status::members_not_in_force(obs, &self.operations),
        };
        let mut status = DeploymentPlanStatus {
            conditions: obs.status.conditions.clone(),
            observed_generation: obs.generation,
            current_deployment: if latest_waits {
                obs.status.current_deployment
            } else {
                self.latest
            },
            latest_deployment: self.latest,
            deployment_counter: self.counters.deployments,
            operation_counter: self.counters.operations,
            deployment_hash: Some(self.deployment_hash.clone()),
            ready: Some(format!("{}/{}", counts.installed, counts.desired)),
            pending_operations: counts.pending as u32,
            approve_deployment_with: self.approve_deployment_with(),
            instances: self.instances.clone(),
            deployments: self.deployment_records(),
            unplaced,
            operations,
            refused_annotations: BTreeMap::new(),
            handled_requests: self.handled_requests.clone(),
            rollout: self.rollout.clone(),
            next_window: self
                .window
                .as_ref()
                .filter(|_| held > 0)
                .and_then(|window| window.next.clone()),
            ignored_reports: record_ignored(
                &obs.name,
                &obs.status.ignored_reports,
                self.ignored.clone(),
                &mut events,
            ),
            phase: None,
            last_error: None,
            deployment_status: Vec::new(), // status_document::attach fills it
            service: None,                 // service::attach fills it
        };
        status::record_refusal(obs, &refused, &mut status, &mut events);
        status::record_request_refusals(&self.request_refusals, &mut status, &mut events);
        status::conditions(obs, &counts, &mut status, &mut events);
        status::window_condition(
            obs,
            held,
            self.window.as_ref().map(|window| window.because.as_str()),
            &mut status,
            &mut events,
        );
        status::rollout_condition(obs, &mut status);
        status::reports_condition(obs, &mut status);
        super::size::note_deferred(obs, self.deferred, &mut status, &mut events);
        let under_way = (counts.under_way > 0).then_some(UNDER_WAY_REQUEUE);
        // Held operations go on at the next opening: the next pass is then.
        let opening = self
            .window
            .as_ref()
            .filter(|_| held > 0)
            .and_then(|window| window.wake_after);
        PlanDecision {
            status,
            events,
            requeue_after: under_way
                .into_iter()
                .chain(self.requeue_after)
                .chain(opening)
                .min(),
            leave_edited_record: false,
            service: Default::default(),
        }
    }

    /// `status.deployments`, with who approved operations in this pass.
    fn deployment_records(&self) -> Vec<DeploymentRecord> {
        let mut records = history::deployment_records(
            self.obs,
            self.latest,
            &self.deployment_hash,
            &self.instances,
            &self.operations,
        );
        let approved = self.operations.iter().filter_map(|op| {
            let approval = self.approved_now.get(&op.id)?;
            Some((op.revision, approval))
        });
        history::record_approvals(&mut records, approved);
        history::record_deployment_items(&mut records, &self.deployment_items);
        records
    }

    /// Whether a waiting operation was approved (it waits for a window): in this pass or
    /// an earlier one.
    fn approval_recorded(&self, op: &Operation) -> bool {
        self.approved_now.contains_key(&op.id)
            || self
                .obs
                .status
                .operations
                .iter()
                .any(|old| old.id == op.id && old.approval.is_some())
    }

    /// The approval of the latest revision's waiting operations as one whole.
    fn approve_deployment_with(&self) -> Option<String> {
        let hash = deployment_hash(&self.operations, self.latest)?;
        Some(deployment_approval_value(self.latest, &hash))
    }

    /// Failed instances, in words.
    fn failed_instances(&self) -> Vec<String> {
        self.instances
            .iter()
            .filter(|entry| entry.state == "failed")
            .map(|entry| {
                let error = entry
                    .error
                    .as_ref()
                    .map_or(String::new(), |e| format!("{}: {}", e.code, e.message));
                format!("{} on {}: {error}", entry.name, entry.member)
            })
            .collect()
    }

    /// States of the entries in force (not leaving).
    fn in_force_states(&self) -> impl Iterator<Item = &str> {
        let in_force = self.in_force();
        self.instances
            .iter()
            .filter(move |entry| {
                InstanceId::parse(&self.obs.name, &entry.name)
                    .ok()
                    .and_then(|instance| in_force.get(&instance).map(|(m, _)| m.pod_name()))
                    .is_some_and(|member| member == entry.member)
            })
            .map(|entry| entry.state.as_str())
    }
}

/// The numbers an approval may name in this pass: those of the last status, and
/// never below a number it shows in use (a status written before the counters).
fn published_counters(status: &DeploymentPlanStatus) -> Counters {
    let operations = status
        .operations
        .iter()
        .filter_map(|op| shoal_core::gate::operation_number(&op.id))
        .chain([status.operation_counter])
        .max()
        .unwrap_or(0);
    Counters {
        deployments: status
            .deployment_counter
            .max(status.latest_deployment)
            .max(status.current_deployment),
        operations,
    }
}

/// An operation as the status recorded it; `None` when the status entry is
/// not one the controller wrote (it is then dropped, never acted on).
fn operation_from_status(plan: &str, status: &OperationStatus) -> Option<Operation> {
    let member = |pod: &Option<String>| match pod {
        None => Some(None),
        Some(pod) => ordinal_member(pod).map(Some),
    };
    Some(Operation {
        id: status.id.clone(),
        operation_type: status.type_.parse().ok()?,
        instance: InstanceId::parse(plan, &status.instance).ok()?,
        from: member(&status.from_member)?,
        to: member(&status.to_member)?,
        revision: status.deployment,
        state: status.state.parse().ok()?,
        message: status.message.clone(),
        reason: match status.reason.as_deref() {
            Some(kind) => FailureReason::from_kind(kind, status.error_code.as_deref()),
            // Written before the field existed: supersession was only in the message.
            None if status.state == "FAILED" && status.message.starts_with("superseded by") => {
                Some(FailureReason::Superseded)
            }
            None => None,
        },
        request: status.request.clone(),
    })
}
