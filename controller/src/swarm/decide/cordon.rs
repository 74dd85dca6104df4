//! `spec.cordon`: members taken out of placement (`kubectl shoal cordon|drain`).
//!
//! A *cordoned* member keeps the jobs it holds and takes no new one
//! ([`shoal_core::reassign_cordoned`]); cordon alone changes no assignment, so it makes
//! no revision. A *draining* member (`drain: true`) is unavailable to the strategy, so
//! the desired assignment holds nothing on it: that is a new revision, through the gate
//! like any other, and only the drained member's jobs move. Its state reads `Draining`
//! until the revision in force gives it no job, then `Drained`.
//!
//! Entries naming no member are kept (a pod may come back under the name) and
//! reported in the `Cordon` condition; never an error.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::{MemberId, Slice};

use super::members::MemberView;
use super::{Observation, PlannedEvent, condition, previous_condition};
use crate::api::swarm::Condition;

/// `spec.cordon` resolved against the members.
#[derive(Debug, Default)]
pub(super) struct Cordon {
    /// Members cordoned and not draining.
    pub cordoned: BTreeSet<MemberId>,
    /// Members being drained (unavailable to the strategy).
    pub draining: BTreeSet<MemberId>,
    /// Names in `spec.cordon` that are no member, in spec order.
    pub not_members: Vec<String>,
}

/// Reads `spec.cordon` against `views` (the members).
pub(super) fn read(obs: &Observation, views: &[MemberView]) -> Cordon {
    let by_name: BTreeMap<String, &MemberId> =
        views.iter().map(|view| (view.name(), &view.id)).collect();
    let mut cordon = Cordon::default();
    for entry in &obs.spec.cordon {
        match by_name.get(&entry.member) {
            Some(id) if entry.drain => {
                cordon.draining.insert((*id).clone());
            }
            Some(id) => {
                cordon.cordoned.insert((*id).clone());
            }
            None => cordon.not_members.push(entry.member.clone()),
        }
    }
    cordon
}

/// The state `status.members[].state` shows: `Cordoned`, `Draining` (its target slice
/// still holds jobs) or `Drained`; `None` for a member not in `spec.cordon`.
pub(super) fn state(cordon: &Cordon, id: &MemberId, slice: Option<&Slice>) -> Option<&'static str> {
    if cordon.draining.contains(id) {
        let holds = slice.is_some_and(|slice| !slice.jobs.is_empty());
        Some(if holds { "Draining" } else { "Drained" })
    } else if cordon.cordoned.contains(id) {
        Some("Cordoned")
    } else {
        None
    }
}

/// The Event of a member's state going from `before` to `after` (none when unchanged).
pub(super) fn transition(
    name: &str,
    before: Option<&str>,
    after: Option<&str>,
) -> Option<PlannedEvent> {
    if before == after {
        return None;
    }
    let (reason, note) = match after {
        Some("Cordoned") => (
            "MemberCordoned",
            format!(
                "member {name} is cordoned: it keeps its work and gets no new jobs or instances"
            ),
        ),
        Some("Draining") => (
            "MemberDraining",
            format!(
                "member {name} is draining: a revision moving its jobs off goes through the approval gate"
            ),
        ),
        Some("Drained") => (
            "MemberDrained",
            format!("member {name} is drained: the revision in force gives it no job"),
        ),
        _ => (
            "MemberUncordoned",
            format!("member {name} is uncordoned: it takes new jobs and instances again"),
        ),
    };
    Some(PlannedEvent {
        warning: false,
        reason: reason.to_owned(),
        note,
    })
}

/// `status.cordoned`: each entry of `spec.cordon` with its state (`NotAMember` for a
/// name that is no member); `None` when nothing is cordoned.
pub(super) fn summary(
    obs: &Observation,
    states: &BTreeMap<String, &'static str>,
) -> Option<String> {
    if obs.spec.cordon.is_empty() {
        return None;
    }
    let parts: Vec<String> = obs
        .spec
        .cordon
        .iter()
        .map(|entry| {
            let state = states.get(&entry.member).copied().unwrap_or("NotAMember");
            format!("{} {state}", entry.member)
        })
        .collect();
    Some(parts.join(", "))
}

/// The `Cordon` condition: `True` while `spec.cordon` names members; reason
/// `NotAMember` (with a Warning Event when that list changes) when some name is none.
pub(super) fn cordon_condition(
    obs: &Observation,
    cordon: &Cordon,
    summary: Option<&str>,
    events: &mut Vec<PlannedEvent>,
) -> Option<Condition> {
    let previous = previous_condition(&obs.status, "Cordon");
    let summary = summary?;
    let (reason, message) = if cordon.not_members.is_empty() {
        ("MembersCordoned", summary.to_owned())
    } else {
        let names = cordon.not_members.join(", ");
        (
            "NotAMember",
            format!(
                "{summary}; {names} is no member of Swarm {} (kept in spec.cordon in case it comes back; `kubectl shoal uncordon <name> --swarm {}` removes it)",
                obs.swarm, obs.swarm
            ),
        )
    };
    if reason == "NotAMember"
        && previous.is_none_or(|old| old.reason != "NotAMember" || old.message != message)
    {
        events.push(PlannedEvent {
            warning: true,
            reason: "CordonNotAMember".to_owned(),
            note: message.clone(),
        });
    }
    let mut found = condition("Cordon", true, reason, message);
    found.observed_generation = obs.generation;
    found.last_transition_time = match previous {
        Some(old) if old.status == found.status => old.last_transition_time.clone(),
        _ => Some(obs.now.to_string()),
    };
    Some(found)
}
