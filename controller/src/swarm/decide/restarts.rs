//! Which pods a change restarts under `reload: Restart`, and how many times:
//! the one rule the pending summary, `kubectl shoal diff` and the controller's
//! evictions all follow.
//!
//! The controller evicts a pod when its slice was written while that very pod
//! ran (the slice ConfigMap's `shoal.dev/written-for-uid`). Revokes are
//! written first and must settle (the pod replaced) before any grant, so:
//!
//! * a member that stays and gives jobs away restarts once to release them,
//!   if its pod runs now;
//! * a member that receives jobs restarts once to pick them up: grants are
//!   written only to Ready pods (after every revoke settled), so its pod runs
//!   when its grant is written, even a pod a scale up just created;
//! * so a member that both gives and receives restarts twice;
//! * a member leaving the pools is not restarted (its StatefulSet deletes the
//!   pod), nor is a member whose slice does not change.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::{Diff, MemberId};

use super::members::Roster;
use crate::api::swarm::ReloadPolicy;

/// One pod's restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRestart {
    /// How many times (1 or 2).
    pub times: u32,
    /// Why, in words.
    pub reason: &'static str,
}

/// The restarts `change` makes, by member. Empty under `HotReload`.
pub(super) fn planned_restarts(
    change: &Diff,
    roster: &Roster,
    reload: ReloadPolicy,
) -> BTreeMap<MemberId, PlannedRestart> {
    if reload != ReloadPolicy::Restart {
        return BTreeMap::new();
    }
    let staying: BTreeSet<&MemberId> = roster.views.iter().map(|view| &view.id).collect();
    let running: BTreeSet<&MemberId> = roster
        .views
        .iter()
        .filter(|view| view.pod.as_ref().is_some_and(|pod| !pod.deleting))
        .map(|view| &view.id)
        .collect();
    let mut restarts = BTreeMap::new();
    for (member, member_change) in &change.members {
        if !staying.contains(member) {
            continue;
        }
        let release = !member_change.removed.is_empty() && running.contains(member);
        let pick_up = !member_change.added.is_empty();
        let (times, reason) = match (release, pick_up) {
            (true, true) => (
                2,
                "gives jobs away (restart to release), then receives jobs (restart to pick up)",
            ),
            (true, false) => (1, "gives jobs away"),
            (false, true) => (1, "receives jobs"),
            (false, false) => continue,
        };
        restarts.insert(member.clone(), PlannedRestart { times, reason });
    }
    restarts
}
