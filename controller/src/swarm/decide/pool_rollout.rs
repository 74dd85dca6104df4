//! Restarts (`reload: Restart`) one pool at a time.
//!
//! The pods a revision restarts (`restarts`: the very pod a slice was written
//! for) are evicted pool by pool, in `spec.rollout.poolOrder` (the pools
//! listed, as listed, then the others in byte order). The decision is
//! `shoal_core::rollout::rollout_step`, the one the plans' update domains
//! use, over what is observed now:
//!
//! * a pool is **done** when none of its members waits for a restart,
//!   every member is available (pod Ready, Lease live) with its slice
//!   acknowledged by its own sidecar (when it has one), and its StatefulSet's
//!   `status.observedGeneration` is current; failed-over members do not
//!   count;
//! * only the **active** pool (the first not done) has pods evicted, within
//!   `rollout.maxUnavailable` and PodDisruptionBudgets as before; later pools
//!   wait;
//! * **paused** (`spec.paused`): no eviction starts and no job is granted;
//!   pods already evicted come back on their own;
//! * a member of the active pool unavailable for longer than
//!   `rollout.progressDeadline` (default 10m) **halts** the rollout: no
//!   eviction starts in any pool, condition `RolloutHalted` (reason
//!   `PoolRestartFailed`) and one Warning Event naming the pool, the pod and
//!   the cause. The halt is recorded in `status.rollout.halted` and stays,
//!   even once the pod is Ready, until a newer revision is applied or the
//!   Swarm is annotated `shoal.dev/retry-rollout: "<revision>"`; then the
//!   rollout goes on (and halts again if the pod is still not Ready);
//! * the pool being restarted **stays the active pool until it is done**,
//!   even when a pool earlier in the order needs restarts again (a newer
//!   revision, or the pick-up pass below): two pools are never down together
//!   because of the rollout;
//! * a **newer revision supersedes**: the pool that was being restarted
//!   (`Updating` or `Paused`, not a failed one) finishes first
//!   (`status.rollout.finishing`: its pending evictions go on until it is
//!   done, its pods restarted for whatever their slices now hold), then the
//!   order starts again from its first pool, which now restarts for the
//!   newer revision. Pools not yet started only ever see the newer revision.
//!   Nothing is reverted.
//!
//! With revokes before grants (`converge`): a revision whose members both
//! give jobs away and receive jobs goes through the order twice. First the
//! release pass: every revoke is written at once (a revoke under `Restart`
//! stops nothing until the pod restarts), and the revoked pods are evicted
//! pool by pool. No grant is written until every revoke in every pool has
//! settled (its pod replaced), so one-owner safety is as before. Then the
//! pick-up pass: the grants are written to Ready pods, and those pods are
//! evicted pool by pool. The pool released last is still the active pool
//! when its grants come (its pods were just replaced), so it picks up at once;
//! then the order starts again from its first pool.
//! Failed-over members serve nothing, so their eviction (which settles their
//! revoke) does not wait for their pool's turn, only for a pause or a halt:
//! were it held by the order, the grants would wait for ever.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::SignedDuration;
use shoal_core::Slice;
use shoal_core::deploy::domains::rollout_order;
use shoal_core::names::ANNOTATION_RETRY_ROLLOUT;
use shoal_core::rollout::{
    PartProgress, PartState, RolloutPhase, RolloutStep, finishing_first, part_to_finish,
    rollout_step,
};

use super::members::Roster;
use super::{Observation, PlannedEvent, condition, previous_condition};
use crate::api::swarm::{Condition, PoolRollout, RolloutHalt, SwarmRolloutStatus};

/// `rollout.progressDeadline` when not set.
pub const DEFAULT_PROGRESS_DEADLINE: &str = "10m";

/// What the pool step decided.
pub(super) struct PoolDecision {
    step: RolloutStep,
    /// `status.rollout` (none when no restart rollout concerns the revision).
    pub status: Option<SwarmRolloutStatus>,
    /// Events of the rollout's transitions.
    pub events: Vec<PlannedEvent>,
}

impl PoolDecision {
    /// Whether members of `pool` may be evicted now.
    pub fn may_restart(&self, pool: &str) -> bool {
        self.step.may_change(pool)
    }

    /// Whether no eviction at all may start (paused or halted).
    pub fn holds_everything(&self) -> bool {
        matches!(
            self.step.phase,
            RolloutPhase::Paused { .. } | RolloutPhase::Failed { .. }
        )
    }

    /// The `RolloutHalted` condition (a Restart Swarm only).
    pub fn condition(&self, obs: &Observation) -> Condition {
        let mut halted = match &self.step.phase {
            RolloutPhase::Failed { .. } => condition(
                "RolloutHalted",
                true,
                "PoolRestartFailed",
                self.status
                    .as_ref()
                    .map(|status| status.message.clone())
                    .unwrap_or_default(),
            ),
            _ => condition("RolloutHalted", false, "AsExpected", String::new()),
        };
        halted.observed_generation = obs.generation;
        halted.last_transition_time = match previous_condition(&obs.status, "RolloutHalted") {
            Some(old) if old.status == halted.status => old.last_transition_time.clone(),
            _ => Some(obs.now.to_string()),
        };
        halted
    }
}

/// What the pool step looks at besides the observation.
pub(super) struct PoolInputs<'a> {
    /// The revision being applied.
    pub revision: u64,
    /// Pods (by name) the controller must still restart.
    pub needs_restart: &'a BTreeSet<String>,
    /// Slices held in the cluster, by pod name.
    pub observed: &'a BTreeMap<String, Result<Slice, String>>,
    /// `rollout.progressDeadline`, parsed (`None`: a bad value, reported elsewhere).
    pub deadline: Option<Duration>,
}

/// Decides which pool may be restarted now (see the module docs).
pub(super) fn decide(obs: &Observation, roster: &Roster, inputs: &PoolInputs<'_>) -> PoolDecision {
    let previous = obs
        .status
        .rollout
        .as_ref()
        .filter(|previous| previous.revision == inputs.revision);
    let retried = obs
        .annotations
        .get(ANNOTATION_RETRY_ROLLOUT)
        .is_some_and(|value| value.trim() == inputs.revision.to_string());
    let mut progress = pool_progress(obs, roster, inputs);
    let standing_halt = previous
        .and_then(|previous| previous.halted.as_ref())
        .filter(|_| !retried);
    if let Some(halt) = standing_halt
        && let Some(part) = progress.get_mut(&halt.pool)
    {
        part.failure.get_or_insert_with(|| halt.cause.clone());
    }
    let engaged = !inputs.needs_restart.is_empty()
        || previous.is_some_and(|previous| previous.phase != "Complete");
    if !engaged {
        return PoolDecision {
            step: rollout_step(&[], &BTreeMap::new(), false),
            status: previous.cloned(),
            events: Vec::new(),
        };
    }
    let order = rollout_order(
        obs.pools.iter().map(|pool| pool.name.as_str()),
        &obs.spec.rollout.pool_order,
    )
    // A repeated pool is refused by the schema; byte order if one gets through.
    .unwrap_or_else(|_| obs.pools.iter().map(|pool| pool.name.clone()).collect());
    let last = obs.status.rollout.as_ref();
    let previous_active = last.and_then(|last| {
        last.pools
            .iter()
            .find(|pool| pool.state == "Updating" || pool.state == "Paused")
            .map(|pool| pool.name.as_str())
    });
    let carried = part_to_finish(
        previous_active,
        last.and_then(|last| last.finishing.as_deref()),
        &progress,
    );
    let plain = rollout_step(&order, &progress, obs.spec.paused);
    let step = rollout_step(
        &finishing_first(&order, carried.as_deref()),
        &progress,
        obs.spec.paused,
    );
    // Shown only when it changes what the order alone would do.
    let finishing = carried.filter(|_| plain.phase != step.phase);
    let halted = match &step.phase {
        RolloutPhase::Failed { part, cause } => Some(RolloutHalt {
            pool: part.clone(),
            pod: pod_named_in(cause),
            cause: cause.clone(),
        }),
        _ => None,
    };
    let (phase, message) = phase_in_words(&obs.swarm, inputs.revision, &step.phase);
    let mut events = Vec::new();
    if previous.is_none_or(|previous| previous.message != message) {
        events.extend(transition_event(&step.phase, &message));
    }
    // In the order the user set; a pool carried ahead leaves the others as they are.
    let pools = order
        .iter()
        .map(|name| pool_row(name, step.state_of(name), &progress))
        .collect();
    PoolDecision {
        status: Some(SwarmRolloutStatus {
            revision: inputs.revision,
            phase: phase.to_owned(),
            message,
            pools,
            finishing,
            halted,
        }),
        step,
        events,
    }
}

/// Each pool's progress: members restarted (or not needing it), available and
/// acknowledged; disrupted; a member past the progress deadline.
fn pool_progress(
    obs: &Observation,
    roster: &Roster,
    inputs: &PoolInputs<'_>,
) -> BTreeMap<String, PartProgress> {
    let mut progress: BTreeMap<String, PartProgress> = obs
        .pools
        .iter()
        .map(|pool| {
            let part = PartProgress {
                observed_current: pool.observed_current,
                ..PartProgress::default()
            };
            (pool.name.clone(), part)
        })
        .collect();
    for view in roster.views.iter().filter(|view| !view.failed_over) {
        let Some(part) = progress.get_mut(&view.id.pool) else {
            continue;
        };
        let name = view.name();
        part.desired += 1;
        let available = view.available(obs.now);
        if !available {
            part.disrupted += 1;
            if let Some(cause) = past_deadline(obs, view, &name, inputs.deadline) {
                part.failure.get_or_insert(cause);
            }
        }
        if inputs.needs_restart.contains(&name) {
            continue;
        }
        part.updated += 1;
        let acknowledged = match (&view.lease, &view.pod, inputs.observed.get(&name)) {
            (Some(lease), Some(pod), Some(Ok(slice))) => {
                lease.acknowledges(&name, &pod.uid, slice.revision, &slice.hash)
            }
            // No sidecar: readiness stands in; no slice: nothing to acknowledge.
            _ => true,
        };
        if available && acknowledged {
            part.available += 1;
        }
    }
    progress
}

/// Why a member unavailable past the deadline fails its pool, if it is.
fn past_deadline(
    obs: &Observation,
    view: &super::members::MemberView,
    name: &str,
    deadline: Option<Duration>,
) -> Option<String> {
    let since = view.unavailable_since?;
    let deadline = SignedDuration::try_from(deadline?).unwrap_or(SignedDuration::MAX);
    let elapsed = obs.now.duration_since(since);
    if elapsed < deadline {
        return None;
    }
    let what = match &view.pod {
        None => "has no pod",
        Some(pod) if pod.deleting => "is still terminating",
        Some(pod) if !pod.ready => "is not Ready",
        Some(_) => "has a Lease that is not renewed",
    };
    // No elapsed time in the words: they must stay the same from pass to pass,
    // or every pass would be a transition with its own Event.
    let since = since.strftime("%Y-%m-%dT%H:%M:%SZ");
    Some(format!(
        "pod {name} {what} since {since}, past rollout.progressDeadline ({}s)",
        deadline.as_secs()
    ))
}

/// The pod a failure names (`pod <name> ...`), for `status.rollout.halted.pod`.
fn pod_named_in(cause: &str) -> String {
    cause
        .strip_prefix("pod ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_owned()
}

/// `status.rollout.phase` and message; the message names no counts, so that it
/// changes (and an Event is due) only on a transition.
fn phase_in_words(swarm: &str, revision: u64, phase: &RolloutPhase) -> (&'static str, String) {
    match phase {
        RolloutPhase::Complete => (
            "Complete",
            format!("revision {revision}: every pool is restarted"),
        ),
        RolloutPhase::Progressing { part } => (
            "Progressing",
            format!("revision {revision}: restarting pool {part}"),
        ),
        RolloutPhase::Paused { part } => (
            "Paused",
            format!(
                "revision {revision}: paused before pool {part} (spec.paused; `kubectl shoal resume swarm/{swarm}`)"
            ),
        ),
        RolloutPhase::Failed { part, cause } => (
            "Halted",
            format!(
                "revision {revision}: halted in pool {part}: {cause}; no pool is restarted until a newer revision or `kubectl annotate swarm {swarm} {ANNOTATION_RETRY_ROLLOUT}={revision} --overwrite`"
            ),
        ),
    }
}

/// The Event of entering `phase` (none for completion: `RevisionApplied` says it).
fn transition_event(phase: &RolloutPhase, message: &str) -> Option<PlannedEvent> {
    let (warning, reason) = match phase {
        RolloutPhase::Complete => return None,
        RolloutPhase::Progressing { .. } => (false, "PoolRestarting"),
        RolloutPhase::Paused { .. } => (false, "RolloutPaused"),
        RolloutPhase::Failed { .. } => (true, "PoolRestartFailed"),
    };
    Some(PlannedEvent {
        warning,
        reason: reason.to_owned(),
        note: message.to_owned(),
    })
}

/// One row of `status.rollout.pools`. A pool waiting behind a carried pool
/// may be done already; it is shown so.
fn pool_row(
    name: &str,
    state: Option<&PartState>,
    progress: &BTreeMap<String, PartProgress>,
) -> PoolRollout {
    let part = progress.get(name).cloned().unwrap_or_default();
    let state = match state {
        Some(PartState::Waiting) | None if part.done() => PartState::Done,
        Some(state) => state.clone(),
        None => PartState::Waiting,
    };
    PoolRollout {
        name: name.to_owned(),
        state: state.to_string(),
        ready: format!("{}/{}", part.available, part.desired),
    }
}
