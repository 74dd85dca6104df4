//! The approval gate: whether the assignment the inputs ask for becomes the
//! revision in force now, waits for approval, or is already in force.
//!
//! # Revision numbers and approvals
//!
//! An approval (`shoal.dev/approve: "<revision>/<hash>"`) names exactly one
//! reviewed plan: its number *and* its assignment hash. Numbers are never
//! given twice: every number handed out (in force, pending, superseded,
//! withdrawn) and every number named by a refused approval is at most
//! `status.latestRevision`, and a new plan gets the next one. An approval is
//! weighed against the numbers published *before* the pass that reads it, so
//! an approval written in advance, for a number nobody has seen, is refused
//! and its number burnt: it can never approve whatever comes next.
//!
//! # What needs approval
//!
//! `Manual` holds every revision that changes what runs, except one that only
//! re-homes the jobs of members that are gone (scaled away or failed over):
//! that stops nothing and nobody is disrupted, so it applies at once rather
//! than leaving those jobs running nowhere until someone approves. `Budget`
//! lets a revision through when it disrupts at most `maxDisruptedMembers`
//! members or moves and stops at most `maxMovedJobs` jobs (re-homed jobs are
//! not counted, stopped jobs are).

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::gate::{self, Approval, Grammar, Judgement, Refusal, Standing, Subject};
use shoal_core::names::{ANNOTATION_APPROVE, ANNOTATION_APPROVED_BY};
use shoal_core::window::Standing as Window;
use shoal_core::{Assignment, MemberId, diff};

use super::history::{InForce, revision_record};
use super::inputs::Desired;
use super::members::Roster;
use super::restarts::PlannedRestart;
use super::{InputProblem, Observation, Operation, PlannedEvent, assignment_hash, condition};
use crate::api::approval_record::ApprovalRecord;
use crate::api::swarm::{
    ApprovalPolicy, Condition, PendingRevision, ReloadPolicy, RevisionSummary, SwarmStatus,
};

/// The largest revision number Shoal gives (the largest integer JSON tools read exactly).
pub const MAX_REVISION: u64 = gate::MAX_NUMBER;

/// The value of `shoal.dev/approve` that approves exactly this revision.
pub fn approval_value(revision: u64, hash: &str) -> String {
    gate::approval_value(&Subject::Revision(revision), hash)
}

/// The Swarm's approval annotation, read by the one gate (`shoal_core::gate`): a Swarm's
/// value is exactly one approval.
fn parse_approval(text: &str) -> Result<Approval, Refusal> {
    gate::parse(Grammar::Swarm, text)
        .into_iter()
        .next()
        .unwrap_or_else(|| {
            Err(Refusal::Malformed {
                text: text.to_owned(),
                grammar: Grammar::Swarm,
                number: None,
            })
        })
}

/// What the gate decided.
pub(super) struct GateOutcome {
    /// History writes (the record of a revision put in force).
    pub operations: Vec<Operation>,
    /// The revision fields of the status: current, pending, latest, refusals, `changedAt`.
    pub status: SwarmStatus,
    /// The revision newly put in force, if any.
    pub applied_revision: Option<u64>,
    /// Jobs moved by that revision.
    pub jobs_moved: u64,
    /// The AwaitingApproval condition when a revision waits.
    pub awaiting: Option<Condition>,
    /// The revision the slices converge to, and its assignment.
    pub target: Option<(u64, Assignment)>,
    /// The revision the inputs ask for when it is not the one in force (approved now or
    /// not), with what applying it does.
    pub proposal: Option<PendingRevision>,
    /// Why the approval annotation was refused, if it was.
    pub refused_approval: Option<String>,
    /// The pods the proposal restarts (`reload: Restart`), by member.
    pub restarts: BTreeMap<MemberId, PlannedRestart>,
    /// The WaitingForWindow condition when an approved revision waits for a window.
    pub waiting_for_window: Option<Condition>,
    /// When the next window opens (RFC 3339), while a revision waits for it.
    pub next_window: Option<String>,
    /// How long until then.
    pub wake_after: Option<std::time::Duration>,
}

impl GateOutcome {
    /// Nothing new: the revision in force stays the target.
    fn unchanged(obs: &Observation) -> GateOutcome {
        let previous = &obs.status;
        let latest = [
            previous.latest_revision,
            previous.current_revision,
            previous
                .pending_revision
                .as_ref()
                .map_or(0, |pending| pending.revision),
            obs.history.keys().next_back().copied().unwrap_or(0),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        GateOutcome {
            operations: Vec::new(),
            status: SwarmStatus {
                observed_generation: obs.generation,
                current_revision: previous.current_revision,
                current_hash: previous.current_hash.clone(),
                pending_revision: previous.pending_revision.clone(),
                latest_revision: latest,
                changed_at: previous.changed_at.clone(),
                ..SwarmStatus::default()
            },
            applied_revision: None,
            jobs_moved: 0,
            awaiting: None,
            proposal: None,
            refused_approval: None,
            restarts: BTreeMap::new(),
            waiting_for_window: None,
            next_window: None,
            wake_after: None,
            // Set at the end of `decide`: the replayed revision in force unless the gate
            // put another in force (moved, not copied).
            target: None,
        }
    }

    /// A new revision number, skipping numbers whose history ConfigMap name is taken by
    /// an object this Swarm does not own.
    fn next_revision(&mut self, obs: &Observation) -> u64 {
        loop {
            self.status.latest_revision = self.status.latest_revision.saturating_add(1);
            if self.status.latest_revision == u64::MAX
                || super::ownership::revision_name_free(obs, self.status.latest_revision)
            {
                return self.status.latest_revision;
            }
        }
    }
}

/// Runs the desired assignment (or the problem that prevents computing one) through the gate.
pub(super) fn decide(
    obs: &Observation,
    (roster, in_force, window): (&Roster, InForce, &Window<'_>),
    desired: Result<Desired, InputProblem>,
    events: &mut Vec<PlannedEvent>,
    problems: &mut Vec<InputProblem>,
) -> GateOutcome {
    let mut outcome = GateOutcome::unchanged(obs);
    // Only numbers published before this pass can be approved; see the module docs.
    let published = outcome.status.latest_revision;
    let approval = obs.annotations.get(ANNOTATION_APPROVE).map(|text| {
        parse_approval(text)
            .and_then(|approval| gate::published_before(&approval, published).map(|()| approval))
    });
    if let Some(Err(refusal)) = &approval {
        outcome.status.latest_revision = gate::burn(outcome.status.latest_revision, [refusal]);
    }
    match desired {
        Err(problem) => problems.push(problem),
        Ok(desired) => {
            let approval = approval
                .as_ref()
                .and_then(|approval| approval.as_ref().ok());
            propose(
                obs,
                (roster, &in_force, window),
                desired,
                approval,
                events,
                problems,
                &mut outcome,
            );
        }
    }
    outcome.refused_approval = refused_approval(obs, approval, &mut outcome);
    if outcome.target.is_none() {
        // Nothing else was put in force: the revision in force stays the target.
        outcome.target = in_force
            .replayed
            .map(|assignment| (obs.status.current_revision, assignment));
    }
    outcome
}

/// The desired assignment differs from (or equals) the revision in force: put it in
/// force, keep it waiting, or withdraw the pending one.
#[allow(clippy::too_many_arguments)]
fn propose(
    obs: &Observation,
    (roster, in_force, window): (&Roster, &InForce, &Window<'_>),
    desired: Desired,
    approval: Option<&Approval>,
    events: &mut Vec<PlannedEvent>,
    problems: &mut Vec<InputProblem>,
    outcome: &mut GateOutcome,
) {
    let current_revision = obs.status.current_revision;
    let desired_hash = assignment_hash(&desired.assignment);
    let same_as_current =
        current_revision != 0 && obs.status.current_hash.as_deref() == Some(desired_hash.as_str());
    if same_as_current {
        keep_current(
            obs,
            (roster, in_force),
            desired,
            &desired_hash,
            events,
            outcome,
        );
        return;
    }
    if current_revision != 0 && !obs.history.contains_key(&current_revision) {
        problems.push(InputProblem {
            reason: "HistoryMissing",
            message: format!(
                "history ConfigMap {} of the revision in force is missing; the slices in the cluster stand for it",
                shoal_core::names::revision_configmap(&obs.swarm, current_revision)
            ),
        });
    }
    let previous_pending = outcome.status.pending_revision.clone();
    let (revision, supersedes) = match &previous_pending {
        Some(pending) if pending.hash == desired_hash => {
            (pending.revision, pending.summary.supersedes)
        }
        Some(pending) => (outcome.next_revision(obs), Some(pending.revision)),
        None => (outcome.next_revision(obs), None),
    };
    let (summary, restarts) = summarize(obs, roster, in_force, &desired, supersedes);
    outcome.restarts = restarts;
    let approved_by_annotation = approval.is_some_and(|approval| {
        approval.subject == Subject::Revision(revision)
            && gate::judge(
                approval,
                revision,
                Standing::Pending {
                    hash: desired_hash.clone(),
                    approve_with: approval_value(revision, &desired_hash),
                },
            ) == Judgement::Approves
    });
    let verdict = verdict(obs, &summary, approved_by_annotation);
    outcome.proposal = Some(PendingRevision {
        revision,
        hash: desired_hash.clone(),
        approve_with: approval_value(revision, &desired_hash),
        summary: summary.clone(),
    });
    if let Some(superseded) = supersedes.filter(|_| {
        previous_pending
            .as_ref()
            .is_some_and(|pending| pending.hash != desired_hash)
    }) {
        events.push(PlannedEvent {
            warning: false,
            reason: "RevisionSuperseded".to_owned(),
            note: format!("revision {revision} supersedes pending revision {superseded}"),
        });
    }
    if outcome.status.changed_at.is_none() {
        outcome.status.changed_at = Some(obs.now.to_string());
    }
    match verdict {
        // An approved revision starts only in a window, unless it only re-homes the jobs of
        // members that are gone (nobody runs them until it applies). Once in force it
        // converges to the end whatever the windows: a window never closes on a
        // half-applied revision.
        Verdict::Approved { why, .. }
            if !rescue_only(&summary)
                && let Some(because) = window.waiting_because() =>
        {
            let is_new = previous_pending
                .as_ref()
                .is_none_or(|pending| pending.revision != revision)
                || super::previous_condition(&obs.status, WAITING_FOR_WINDOW)
                    .is_none_or(|condition| condition.status != "True");
            if is_new {
                events.push(PlannedEvent {
                    warning: false,
                    reason: "RevisionWaitsForWindow".to_owned(),
                    note: format!(
                        "revision {revision} is approved ({why}) and waits for a maintenance window: {because}"
                    ),
                });
            }
            outcome.waiting_for_window = Some(condition(
                WAITING_FOR_WINDOW,
                true,
                "WindowClosed",
                format!(
                    "revision {revision} is approved ({why}) and starts when a maintenance window opens: {because}"
                ),
            ));
            outcome.status.next_window = window.next_opening();
            outcome.next_window = window.next_opening();
            outcome.wake_after = window.wake_after(obs.now);
            outcome.status.pending_revision = Some(PendingRevision {
                revision,
                approve_with: approval_value(revision, &desired_hash),
                hash: desired_hash,
                summary,
            });
        }
        Verdict::Approved { why, by } => put_in_force(
            roster,
            desired,
            (revision, desired_hash),
            &summary,
            (why, by),
            events,
            outcome,
        ),
        Verdict::Waits { reason, because } => {
            let approve_with = approval_value(revision, &desired_hash);
            let command = format!(
                "`kubectl shoal approve {} --revision {revision}` (or `kubectl annotate swarm {} {ANNOTATION_APPROVE}={approve_with} {}=$(kubectl auth whoami -o jsonpath='{{.status.userInfo.username}}') --overwrite`)",
                obs.swarm, obs.swarm, ANNOTATION_APPROVED_BY
            );
            let is_new = previous_pending
                .as_ref()
                .is_none_or(|pending| pending.revision != revision);
            if is_new {
                events.push(PlannedEvent {
                    warning: false,
                    reason: "RevisionPending".to_owned(),
                    note: format!(
                        "revision {revision} waits for approval: {}; review with `kubectl shoal diff {}`, approve with {command}",
                        describe(&summary),
                        obs.swarm
                    ),
                });
            }
            let message = format!(
                "revision {revision} waits for approval because {because}; approve with {command}"
            );
            outcome.awaiting = Some(condition("AwaitingApproval", true, reason, message));
            outcome.status.pending_revision = Some(PendingRevision {
                revision,
                hash: desired_hash,
                approve_with,
                summary,
            });
        }
    }
}

/// A summary in words, for Events.
fn describe(summary: &RevisionSummary) -> String {
    format!(
        "{} jobs moved ({} of them from members that are gone), {} started, {} stopped, {} members affected, {} disrupted, {} restarts",
        summary.jobs_moved,
        summary.jobs_rehomed,
        summary.jobs_started,
        summary.jobs_stopped,
        summary.members_affected,
        summary.members_disrupted,
        summary.restarts_needed
    ) + &summary
        .weight_moved
        .map(|weight| format!(", weight moved {weight}"))
        .unwrap_or_default()
}

/// The inputs give the revision in force: rewrite its history record if it went missing,
/// and withdraw a pending revision (its number is not given again).
fn keep_current(
    obs: &Observation,
    (roster, in_force): (&Roster, &InForce),
    desired: Desired,
    desired_hash: &str,
    events: &mut Vec<PlannedEvent>,
    outcome: &mut GateOutcome,
) {
    let current_revision = obs.status.current_revision;
    if !obs.history.contains_key(&current_revision) {
        outcome
            .operations
            .push(Operation::WriteRevision(revision_record(
                current_revision,
                desired_hash,
                &desired.strategy,
                &roster.members(),
                &desired.jobs,
            )));
    }
    if let Some(pending) = outcome.status.pending_revision.take() {
        events.push(PlannedEvent {
            warning: false,
            reason: "RevisionWithdrawn".to_owned(),
            note: format!(
                "pending revision {} withdrawn: the inputs are back to revision {current_revision}",
                pending.revision
            ),
        });
    }
    if in_force.replayed.is_none() {
        outcome.target = Some((current_revision, desired.assignment));
    }
}

/// Members that own nothing in the new assignment because they are gone: out of the
/// pools, or failed over.
fn departed(roster: &Roster) -> impl Fn(&MemberId) -> bool + '_ {
    let present: BTreeSet<&MemberId> = roster
        .views
        .iter()
        .filter(|view| !view.failed_over)
        .map(|view| &view.id)
        .collect();
    move |member| !present.contains(member)
}

/// What applying the desired assignment would do, against what is in force.
fn summarize(
    obs: &Observation,
    roster: &Roster,
    in_force: &InForce,
    desired: &Desired,
    supersedes: Option<u64>,
) -> (RevisionSummary, BTreeMap<MemberId, PlannedRestart>) {
    // With nothing in force, every member starts from an empty slice.
    let nothing = Assignment::from_slices(std::iter::empty()).ok();
    let change = match in_force.assignment().or(nothing.as_ref()) {
        Some(before) => diff(before, &desired.assignment),
        None => diff(&desired.assignment, &desired.assignment),
    };
    let started = change.created;
    let gone = departed(roster);
    let rehomed = change
        .moved
        .iter()
        .filter(|moved| gone(&moved.from))
        .count();
    let restarts = super::restarts::planned_restarts(&change, roster, obs.spec.reload);
    let restarts_needed: u64 = restarts
        .values()
        .map(|restart| u64::from(restart.times))
        .sum();
    let members_disrupted = match obs.spec.reload {
        ReloadPolicy::HotReload => change
            .members
            .iter()
            .filter(|(member, change)| !change.removed.is_empty() && !gone(member))
            .count() as u64,
        ReloadPolicy::Restart => restarts.len() as u64,
    };
    let summary = RevisionSummary {
        jobs_moved: change.moved.len() as u64,
        jobs_rehomed: rehomed as u64,
        jobs_started: started as u64,
        jobs_stopped: change.deleted as u64,
        members_affected: change.affected.len() as u64,
        members_disrupted,
        restarts_needed,
        lower_bound: change.lower_bound as u64,
        supersedes,
        weight_moved: (!desired.settings.is_plain())
            .then(|| shoal_core::diff::moved_weight(&change, &desired.settings)),
    };
    (summary, restarts)
}

/// The gate's answer for one revision.
enum Verdict {
    /// It applies now: why, in words, and who approved.
    Approved {
        /// Why it applies.
        why: String,
        /// Who approved (the controller itself, under a policy, or the annotation's user).
        by: ApprovalRecord,
    },
    /// It waits: the AwaitingApproval reason and why, in words.
    Waits {
        reason: &'static str,
        because: String,
    },
}

/// The condition type of an approved revision waiting for a maintenance window.
pub(super) const WAITING_FOR_WINDOW: &str = "WaitingForWindow";

/// Whether a revision only re-homes jobs of members that are gone (scaled away or failed
/// over) and disrupts nothing that runs: it needs no approval and no window.
fn rescue_only(summary: &RevisionSummary) -> bool {
    summary.jobs_moved > 0
        && summary.jobs_rehomed == summary.jobs_moved
        && summary.jobs_started == 0
        && summary.jobs_stopped == 0
        && summary.members_disrupted == 0
}

/// Whether the policy (or an approval naming this revision and hash) lets it through.
fn verdict(obs: &Observation, summary: &RevisionSummary, approved_by_annotation: bool) -> Verdict {
    let approval = &obs.spec.approval;
    let now = obs.now.to_string();
    let by_policy = |policy: &str| ApprovalRecord::by_policy(policy, &now);
    let rescue_only = rescue_only(summary);
    if approval.policy == ApprovalPolicy::Automatic {
        return Verdict::Approved {
            why: "the approval policy is Automatic".to_owned(),
            by: by_policy("Automatic"),
        };
    }
    if approved_by_annotation {
        let by = ApprovalRecord::from_annotations(&obs.annotations, obs.approved_by_policy, &now);
        return Verdict::Approved {
            why: format!("approved by {ANNOTATION_APPROVE} ({})", by.display()),
            by,
        };
    }
    if rescue_only {
        return Verdict::Approved {
            why: "it only re-homes jobs of members that are gone and disrupts nothing that runs"
                .to_owned(),
            by: by_policy("re-homing only"),
        };
    }
    if approval.policy == ApprovalPolicy::Manual {
        return Verdict::Waits {
            reason: "ManualApproval",
            because: "the approval policy is Manual".to_owned(),
        };
    }
    let disrupted = summary.members_disrupted;
    let disruptive_jobs = summary.jobs_moved - summary.jobs_rehomed + summary.jobs_stopped;
    let within_members = approval
        .max_disrupted_members
        .is_some_and(|max| disrupted <= u64::from(max));
    let within_jobs = approval
        .max_moved_jobs
        .is_some_and(|max| disruptive_jobs <= max);
    let budget = |max: Option<u64>| max.map_or("none".to_owned(), |max| max.to_string());
    if within_members || within_jobs {
        return Verdict::Approved {
            why: format!(
                "it is within the budget: {disrupted} members disrupted (budget {}), {disruptive_jobs} jobs moved or stopped (budget {})",
                budget(approval.max_disrupted_members.map(u64::from)),
                budget(approval.max_moved_jobs)
            ),
            by: by_policy("Budget"),
        };
    }
    Verdict::Waits {
        reason: "OverBudget",
        because: format!(
            "it disrupts {disrupted} members (budget {}) and moves or stops {disruptive_jobs} jobs (budget {})",
            budget(approval.max_disrupted_members.map(u64::from)),
            budget(approval.max_moved_jobs)
        ),
    }
}

/// Records the approved revision (`revision` with its hash), and who approved it and
/// why (`approved`), and makes it the target.
fn put_in_force(
    roster: &Roster,
    desired: Desired,
    (revision, desired_hash): (u64, String),
    summary: &RevisionSummary,
    (why, by): (String, ApprovalRecord),
    events: &mut Vec<PlannedEvent>,
    outcome: &mut GateOutcome,
) {
    let mut record = revision_record(
        revision,
        &desired_hash,
        &desired.strategy,
        &roster.members(),
        &desired.jobs,
    );
    record.approval = Some(by);
    outcome.operations.push(Operation::WriteRevision(record));
    outcome.status.current_revision = revision;
    outcome.status.current_hash = Some(desired_hash);
    outcome.status.pending_revision = None;
    outcome.applied_revision = Some(revision);
    outcome.jobs_moved = summary.jobs_moved;
    events.push(PlannedEvent {
        warning: false,
        reason: "RevisionApproved".to_owned(),
        note: format!(
            "applying revision {revision} because {why}: {}",
            describe(summary)
        ),
    });
    outcome.target = Some((revision, desired.assignment));
}

/// An approval annotation that approved nothing in this pass and does not name the
/// revision in force is refused; returns why.
fn refused_approval(
    obs: &Observation,
    approval: Option<Result<Approval, Refusal>>,
    outcome: &mut GateOutcome,
) -> Option<String> {
    let refusal = match approval? {
        Err(refusal) => refusal,
        Ok(approval) => {
            let Subject::Revision(named) = approval.subject else {
                return None;
            };
            let status = &outcome.status;
            let standing = match (&status.current_hash, &status.pending_revision) {
                (Some(current), _)
                    if named == status.current_revision && *current == approval.hash =>
                {
                    Standing::Approved {
                        hash: current.clone(),
                    }
                }
                (_, Some(pending)) if pending.revision == named => Standing::Pending {
                    hash: pending.hash.clone(),
                    approve_with: pending.approve_with.clone(),
                },
                (_, Some(pending)) => Standing::Closed {
                    why: format!(
                        "the pending revision is {}; approve it with {ANNOTATION_APPROVE}={}",
                        pending.revision, pending.approve_with
                    ),
                },
                (_, None) => Standing::Closed {
                    why: format!(
                        "revision {} is in force and nothing waits for approval",
                        status.current_revision
                    ),
                },
            };
            // Judged after this pass put it in force (or kept it waiting): numbers up to
            // the latest are published by now.
            match gate::judge(&approval, status.latest_revision, standing) {
                Judgement::Refused(refusal) => refusal,
                Judgement::Approves | Judgement::UsedUp => return None,
            }
        }
    };
    let why = refusal.to_string();
    if let Some(awaiting) = &mut outcome.awaiting {
        awaiting.message.push_str(&format!("; refused: {why}"));
    }
    Some(format!("Swarm {}: {why}", obs.swarm))
}
