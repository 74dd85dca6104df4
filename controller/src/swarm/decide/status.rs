//! The status a plan reports: members, conditions, phase, and the Events of
//! their transitions.

use std::collections::BTreeMap;

use shoal_core::{MemberId, Slice};

use super::members::Roster;
use super::{InputProblem, Observation, PlannedEvent, condition, previous_condition};
use crate::api::swarm::{Condition, MemberStatus, SwarmStatus};

/// Each member's status, with MemberFailedOver / MemberReturned Events on transitions.
pub(super) fn member_statuses(
    obs: &Observation,
    roster: &Roster,
    target_slices: &BTreeMap<MemberId, Slice>,
    events: &mut Vec<PlannedEvent>,
    status: &mut SwarmStatus,
) {
    let previous = &obs.status;
    let views = &roster.views;
    let mut member_statuses = Vec::new();
    let mut ready = 0;
    for view in views {
        let name = view.name();
        let is_ready = view
            .pod
            .as_ref()
            .is_some_and(|pod| pod.ready && !pod.deleting);
        if is_ready {
            ready += 1;
        }
        let slice = target_slices.get(&view.id);
        member_statuses.push(MemberStatus {
            name: name.clone(),
            pool: view.id.pool.clone(),
            ready: is_ready,
            slice_size: slice.map_or(0, |slice| slice.jobs.len() as u64),
            slice_hash: slice.map(|slice| slice.hash.clone()),
            // Only what the member's own sidecar said.
            acked_revision: view
                .lease
                .as_ref()
                .zip(view.pod.as_ref())
                .filter(|(lease, pod)| lease.speaks_for(&name, &pod.uid))
                .and_then(|(lease, _)| lease.acked_revision),
            unavailable_since: view.unavailable_since.map(|since| since.to_string()),
            failed_over: view.failed_over,
        });
        let was_failed_over = previous
            .members
            .iter()
            .any(|member| member.name == name && member.failed_over);
        if view.failed_over && !was_failed_over {
            events.push(PlannedEvent {
                warning: true,
                reason: "MemberFailedOver".to_owned(),
                note: format!("member {name} is unavailable; its jobs move to the other members"),
            });
        } else if !view.failed_over && was_failed_over {
            events.push(PlannedEvent {
                warning: false,
                reason: "MemberReturned".to_owned(),
                note: format!("member {name} is available again; its jobs return to it"),
            });
        }
    }
    status.members = member_statuses;
    status.ready = Some(format!("{ready}/{}", views.len()));
}

/// What the rest of the plan found, for the conditions.
pub(super) struct Findings<'a> {
    /// Problems with the inputs (Degraded).
    pub problems: &'a [InputProblem],
    /// Slices found damaged or deleted.
    pub slice_problems: &'a [String],
    /// There is a revision to converge to.
    pub has_target: bool,
    /// It is in place everywhere.
    pub rollout_done: bool,
    /// The AwaitingApproval condition, when a revision waits.
    pub awaiting: Option<Condition>,
    /// A revision was put in force by this plan.
    pub applied_revision: Option<u64>,
    /// Members of the pools (in `0..replicas`).
    pub members: usize,
    /// Members that can run jobs now: available and not failed over.
    pub serving: usize,
    /// Jobs of the target owned by no member of the pools (see [`unowned_jobs`]).
    pub unowned: Unowned,
}

/// Jobs of the target revision whose owner is not a member of the pools now.
#[derive(Debug, Default)]
pub(super) struct Unowned {
    /// How many.
    pub jobs: u64,
    /// Their owners (pod names), each with its count.
    pub owners: BTreeMap<String, u64>,
}

/// The jobs of `target` owned by a member that is no longer one of the pools' members
/// (scaled down or unlabelled while the revision re-homing them waits for approval, or
/// for its revokes): nobody runs them.
pub(super) fn unowned_jobs(
    target: Option<&(u64, shoal_core::Assignment)>,
    roster: &Roster,
) -> Unowned {
    let mut unowned = Unowned::default();
    let Some((_, assignment)) = target else {
        return unowned;
    };
    let members: std::collections::BTreeSet<&MemberId> =
        roster.views.iter().map(|view| &view.id).collect();
    for (member, jobs) in assignment.member_jobs() {
        if !members.contains(&member) && !jobs.is_empty() {
            unowned.jobs += jobs.len() as u64;
            unowned.owners.insert(member.pod_name(), jobs.len() as u64);
        }
    }
    unowned
}

/// Conditions, phase and the last error, with Events on condition transitions.
pub(super) fn conditions(
    obs: &Observation,
    findings: Findings<'_>,
    events: &mut Vec<PlannedEvent>,
    status: &mut SwarmStatus,
) {
    let previous = &obs.status;
    let Findings {
        problems,
        slice_problems,
        has_target,
        rollout_done,
        awaiting,
        applied_revision,
        members,
        serving,
        unowned,
    } = findings;
    status.unowned_jobs = unowned.jobs;
    let degraded = match problems.first() {
        Some(problem) => {
            let message = problems
                .iter()
                .map(|p| p.message.clone())
                .collect::<Vec<_>>()
                .join("; ");
            condition("Degraded", true, problem.reason, message)
        }
        None if !slice_problems.is_empty() => {
            condition("Degraded", true, "SliceEdited", slice_problems.join("; "))
        }
        None => condition("Degraded", false, "AsExpected", String::new()),
    };
    let progressing = if has_target && !rollout_done {
        let mut message = format!("applying revision {}", status.current_revision);
        for (pod, refusal) in &obs.blocked_evictions {
            message.push_str(&format!(
                "; pod {pod} waits to restart: its eviction was refused: {refusal}"
            ));
        }
        condition(
            "Progressing",
            true,
            if obs.blocked_evictions.is_empty() {
                "RollingOut"
            } else {
                "EvictionBlocked"
            },
            message,
        )
    } else {
        condition("Progressing", false, "Converged", String::new())
    };
    let ready_condition = if members == 0 && status.jobs > 0 {
        condition(
            "Ready",
            false,
            "NoMembers",
            format!(
                "no member runs the {} jobs: the Swarm's pools have no members (scale a StatefulSet labelled shoal.dev/swarm up)",
                status.jobs
            ),
        )
    } else if has_target && rollout_done && serving == 0 && status.jobs > 0 {
        // Slices in place prove nothing when no member can run them.
        condition(
            "Ready",
            false,
            "NoAvailableMembers",
            format!(
                "revision {} is written, but none of the {members} members is available to run its {} jobs (every pod is unready, its Lease expired, or it is failed over)",
                status.current_revision, status.jobs
            ),
        )
    } else if has_target && unowned.jobs > 0 {
        // Slices in place on every member prove nothing for jobs no member holds.
        condition(
            "Ready",
            false,
            "JobsUnowned",
            format!(
                "{} of the {} jobs of revision {} are owned by no member: their owners left the pools ({}){}",
                unowned.jobs,
                status.jobs,
                status.current_revision,
                unowned
                    .owners
                    .iter()
                    .map(|(owner, jobs)| format!("{owner}: {jobs}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                status.pending_revision.as_ref().map_or_else(
                    || "; the revision re-homing them is being applied".to_owned(),
                    |pending| format!(
                        "; revision {} re-homes them and waits for approval (kubectl shoal approve {} --revision {})",
                        pending.revision, obs.swarm, pending.revision
                    )
                )
            ),
        )
    } else if has_target && rollout_done {
        let unavailable = members - serving;
        condition(
            "Ready",
            true,
            "Converged",
            if unavailable == 0 {
                format!(
                    "revision {} is in force on every member",
                    status.current_revision
                )
            } else {
                format!(
                    "revision {} is in force on the {serving} available members ({unavailable} unavailable or failed over)",
                    status.current_revision
                )
            },
        )
    } else if has_target {
        condition(
            "Ready",
            false,
            "RollingOut",
            format!("revision {} is being applied", status.current_revision),
        )
    } else {
        condition(
            "Ready",
            false,
            "NoRevision",
            "no revision has been applied yet".to_owned(),
        )
    };
    let awaiting = awaiting
        .unwrap_or_else(|| condition("AwaitingApproval", false, "NothingPending", String::new()));
    status.phase = Some(
        if degraded.status == "True" && !has_target {
            "Degraded"
        } else if awaiting.status == "True" {
            "AwaitingApproval"
        } else if degraded.status == "True" {
            "Degraded"
        } else if progressing.status == "True" {
            "Progressing"
        } else if ready_condition.status == "True" {
            "Ready"
        } else if has_target {
            "Progressing"
        } else {
            "Pending"
        }
        .to_owned(),
    );
    status.last_error = problems
        .first()
        .map(|problem| problem.message.clone())
        .or_else(|| slice_problems.first().cloned());

    // Events for condition transitions.
    let previous_degraded = previous_condition(previous, "Degraded");
    if degraded.status == "True"
        && previous_degraded
            .is_none_or(|old| old.status != "True" || old.message != degraded.message)
    {
        events.push(if degraded.reason == "SliceEdited" {
            PlannedEvent {
                warning: true,
                reason: "SliceRestored".to_owned(),
                note: format!("putting back slices: {}", degraded.message),
            }
        } else {
            PlannedEvent {
                warning: true,
                reason: degraded.reason.clone(),
                note: degraded.message.clone(),
            }
        });
    }
    if degraded.status == "False" && previous_degraded.is_some_and(|old| old.status == "True") {
        events.push(PlannedEvent {
            warning: false,
            reason: "Recovered".to_owned(),
            note: "the Swarm's inputs are valid again".to_owned(),
        });
    }
    let previous_progressing = previous_condition(previous, "Progressing");
    if progressing.status == "False"
        && has_target
        && (previous_progressing.is_some_and(|old| old.status == "True")
            || applied_revision.is_some())
    {
        events.push(PlannedEvent {
            warning: false,
            reason: "RevisionApplied".to_owned(),
            note: format!(
                "revision {} is in force on every member",
                status.current_revision
            ),
        });
        status.changed_at = None;
    }

    let mut conditions = vec![ready_condition, progressing, awaiting, degraded];
    for new in &mut conditions {
        new.observed_generation = obs.generation;
        new.last_transition_time = match previous_condition(previous, &new.type_) {
            Some(old) if old.status == new.status => old.last_transition_time.clone(),
            _ => Some(obs.now.to_string()),
        };
    }
    status.conditions = conditions;
}
