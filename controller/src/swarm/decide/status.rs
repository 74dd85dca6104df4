//! The status the Swarm's decision reports: members, conditions, phase, and the Events of
//! their transitions.

use std::collections::BTreeMap;

use shoal_core::{MemberId, Slice};

use super::cordon;
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
    let mut states = BTreeMap::new();
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
        let state = cordon::state(&roster.cordon, &view.id, slice);
        if let Some(state) = state {
            states.insert(name.clone(), state);
        }
        let was = previous
            .members
            .iter()
            .find(|member| member.name == name)
            .and_then(|member| member.state.as_deref());
        events.extend(cordon::transition(&name, was, state));
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
            state: state.map(str::to_owned),
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
    status.cordoned = cordon::summary(obs, &states);
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
    /// The WaitingForWindow condition, when the Swarm has windows.
    pub waiting_for_window: Option<Condition>,
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
    // Counts only: listing every member's jobs here cost a copy of the job list per pass.
    for (member, load) in assignment.loads() {
        if !members.contains(&member) && load > 0 {
            unowned.jobs += load as u64;
            unowned.owners.insert(member.pod_name(), load as u64);
        }
    }
    unowned
}

/// Conditions, phase and the last error, with Events on condition transitions: one
/// function per condition type ([`degraded`], [`progressing`], [`ready`],
/// [`awaiting_approval`]), folded into the status here.
pub(super) fn conditions(
    obs: &Observation,
    findings: Findings<'_>,
    events: &mut Vec<PlannedEvent>,
    status: &mut SwarmStatus,
) {
    let previous = &obs.status;
    status.unowned_jobs = findings.unowned.jobs;
    let degraded = degraded(&findings);
    let progressing = progressing(obs, &findings, status.current_revision);
    let ready_condition = ready(obs, &findings, status);
    let has_target = findings.has_target;
    let awaiting = awaiting_approval(findings.awaiting);
    let waiting_for_window = findings.waiting_for_window;
    status.phase = Some(
        if degraded.status == "True" && !has_target {
            "Degraded"
        } else if awaiting.status == "True" {
            "AwaitingApproval"
        } else if waiting_for_window
            .as_ref()
            .is_some_and(|condition| condition.status == "True")
        {
            "WaitingForWindow"
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
    status.last_error = findings
        .problems
        .first()
        .map(|problem| problem.message.clone())
        .or_else(|| findings.slice_problems.first().cloned());

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
            || findings.applied_revision.is_some())
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
    conditions.extend(waiting_for_window);
    for new in &mut conditions {
        new.observed_generation = obs.generation;
        new.last_transition_time = match previous_condition(previous, &new.type_) {
            Some(old) if old.status == new.status => old.last_transition_time.clone(),
            _ => Some(obs.now.to_string()),
        };
    }
    status.conditions = conditions;
}

/// `Degraded`: the first input problem's reason, every problem's message; else slices
/// found edited or deleted (`SliceEdited`); else `AsExpected`.
fn degraded(findings: &Findings<'_>) -> Condition {
    match findings.problems.first() {
        Some(problem) => {
            let message = findings
                .problems
                .iter()
                .map(|p| p.message.clone())
                .collect::<Vec<_>>()
                .join("; ");
            condition("Degraded", true, problem.reason, message)
        }
        None if !findings.slice_problems.is_empty() => condition(
            "Degraded",
            true,
            "SliceEdited",
            findings.slice_problems.join("; "),
        ),
        None => condition("Degraded", false, "AsExpected", String::new()),
    }
}

/// `Progressing`: a target not yet in place everywhere (`RollingOut`, or
/// `EvictionBlocked` naming each pod whose eviction was refused); else `Converged`.
fn progressing(obs: &Observation, findings: &Findings<'_>, revision: u64) -> Condition {
    if !findings.has_target || findings.rollout_done {
        return condition("Progressing", false, "Converged", String::new());
    }
    let mut message = format!("applying revision {revision}");
    for (pod, refusal) in &obs.blocked_evictions {
        message.push_str(&format!(
            "; pod {pod} waits to restart: its eviction was refused: {refusal}"
        ));
    }
    let reason = if obs.blocked_evictions.is_empty() {
        "RollingOut"
    } else {
        "EvictionBlocked"
    };
    condition("Progressing", true, reason, message)
}

/// `Ready`: true only when the target is in place and some member runs its jobs; else
/// why not (`NoMembers`, `NoAvailableMembers`, `JobsUnowned`, `RollingOut`,
/// `NoRevision`).
fn ready(obs: &Observation, findings: &Findings<'_>, status: &SwarmStatus) -> Condition {
    let (has_target, rollout_done) = (findings.has_target, findings.rollout_done);
    let (members, serving, unowned) = (findings.members, findings.serving, &findings.unowned);
    if members == 0 && status.jobs > 0 {
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
    }
}

/// `WaitingForWindow` False (`NothingWaits`) for a Swarm with maintenance windows when no
/// approved revision waits for one; `None` without windows (the condition is not shown).
pub(super) fn window_open(obs: &Observation) -> Option<Condition> {
    (!obs.spec.approval.windows.is_empty()).then(|| {
        condition(
            super::gate::WAITING_FOR_WINDOW,
            false,
            "NothingWaits",
            String::new(),
        )
    })
}

/// `AwaitingApproval`: the gate's condition when a revision waits; else
/// `NothingPending`.
fn awaiting_approval(awaiting: Option<Condition>) -> Condition {
    awaiting
        .unwrap_or_else(|| condition("AwaitingApproval", false, "NothingPending", String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swarm::fixtures;

    /// Findings of a Swarm of `members` members, all serving, whose target is in place.
    fn converged(members: usize) -> Findings<'static> {
        Findings {
            problems: &[],
            slice_problems: &[],
            has_target: true,
            rollout_done: true,
            awaiting: None,
            waiting_for_window: None,
            applied_revision: None,
            members,
            serving: members,
            unowned: Unowned::default(),
        }
    }

    fn observation() -> Observation {
        fixtures::observation(
            "swarm",
            fixtures::spec_with_jobs(fixtures::stream_keys(4, 1)),
            vec![fixtures::pool("worker", 2)],
        )
    }

    fn status(revision: u64, jobs: u64) -> SwarmStatus {
        SwarmStatus {
            current_revision: revision,
            jobs,
            ..SwarmStatus::default()
        }
    }

    #[test]
    fn degraded_names_the_first_problems_reason_and_every_message_then_edited_slices() {
        let problems = [
            InputProblem {
                reason: "InvalidJobList",
                message: "one".to_owned(),
            },
            InputProblem {
                reason: "Other",
                message: "two".to_owned(),
            },
        ];
        let edited = ["slice a edited".to_owned()];
        let mut findings = converged(2);
        assert_eq!(
            (
                degraded(&findings).status.as_str(),
                degraded(&findings).reason.as_str()
            ),
            ("False", "AsExpected")
        );
        findings.slice_problems = &edited;
        let found = degraded(&findings);
        assert_eq!(
            (
                found.status.as_str(),
                found.reason.as_str(),
                found.message.as_str()
            ),
            ("True", "SliceEdited", "slice a edited")
        );
        findings.problems = &problems;
        let found = degraded(&findings);
        assert_eq!(
            (found.reason.as_str(), found.message.as_str()),
            ("InvalidJobList", "one; two")
        );
    }

    #[test]
    fn progressing_while_the_target_is_not_in_place_naming_blocked_evictions() {
        let mut obs = observation();
        let mut findings = converged(2);
        assert_eq!(progressing(&obs, &findings, 3).reason, "Converged");
        findings.rollout_done = false;
        let rolling = progressing(&obs, &findings, 3);
        assert_eq!(
            (
                rolling.status.as_str(),
                rolling.reason.as_str(),
                rolling.message.as_str()
            ),
            ("True", "RollingOut", "applying revision 3")
        );
        obs.blocked_evictions
            .insert("worker-0".to_owned(), "budget".to_owned());
        let blocked = progressing(&obs, &findings, 3);
        assert_eq!(blocked.reason, "EvictionBlocked");
        assert!(
            blocked
                .message
                .ends_with("; pod worker-0 waits to restart: its eviction was refused: budget"),
            "{}",
            blocked.message
        );
    }

    #[test]
    fn ready_only_when_the_target_is_in_place_and_someone_runs_it() {
        let obs = observation();
        let reason = |findings: &Findings<'_>, status: &SwarmStatus| {
            let found = ready(&obs, findings, status);
            (found.status, found.reason)
        };
        let in_force = status(2, 4);
        let mut findings = converged(2);
        assert_eq!(
            reason(&findings, &in_force),
            ("True".to_owned(), "Converged".to_owned())
        );
        findings.serving = 1;
        assert!(
            ready(&obs, &findings, &in_force)
                .message
                .contains("(1 unavailable or failed over)")
        );
        findings.serving = 0;
        assert_eq!(reason(&findings, &in_force).1, "NoAvailableMembers");
        findings.members = 0;
        assert_eq!(reason(&findings, &in_force).1, "NoMembers");
        let mut findings = converged(2);
        findings.unowned.jobs = 1;
        findings.unowned.owners.insert("worker-5".to_owned(), 1);
        assert_eq!(reason(&findings, &in_force).1, "JobsUnowned");
        let mut findings = converged(2);
        findings.rollout_done = false;
        assert_eq!(reason(&findings, &in_force).1, "RollingOut");
        findings.has_target = false;
        assert_eq!(
            reason(&findings, &status(0, 4)),
            ("False".to_owned(), "NoRevision".to_owned())
        );
    }

    #[test]
    fn awaiting_approval_is_the_gates_condition_or_nothing_pending() {
        assert_eq!(awaiting_approval(None).reason, "NothingPending");
        let waiting = condition("AwaitingApproval", true, "RevisionPending", "r".to_owned());
        assert_eq!(awaiting_approval(Some(waiting.clone())), waiting);
    }
}
