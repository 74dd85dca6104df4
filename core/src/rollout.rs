//! Ordered rollouts: an update goes through the parts of a Swarm (its pools,
//! or a plan's update domains) one part at a time.
//!
//! The decision is a function of what is observed now, never of remembered
//! steps, so a controller restart or a newer update changes nothing about how
//! it is taken:
//!
//! * The **order** is [`rollout_order`](crate::deploy::domains::rollout_order):
//!   the parts the user lists, as listed, then the others in byte order. A part
//!   added later (a new pool) is simply in the order.
//! * A part is **done** when every one of its members runs the target revision,
//!   every one is available, none is disrupted, and what was observed is
//!   current (the observer saw the latest generation of what it reads).
//! * The **active** part is the first of the order not done. Only it may be
//!   changed, within the rollout budget; every later part waits, even if it is
//!   ready to go, so that parts are never disrupted together.
//! * A part **failed** (a member reported the target revision failed) stops
//!   the rollout there: no later part starts until the failure is gone — the
//!   user retries (the member reports the revision again), undoes or
//!   supersedes (a newer target, against which the old failure says nothing).
//! * **Paused**: nothing more changes. The active part is reported as held;
//!   the members already changed stay as they are.
//! * **Supersede**: progress is always measured against the newest target. A
//!   part that finished the older target is not done for the newer one, so the
//!   rollout starts again from the first part of the order; a part caught
//!   half-way keeps its members as they are until its turn comes, and then
//!   goes straight to the newest target. Nothing is reverted.

use std::collections::BTreeMap;
use std::fmt;

/// What is observed of one part, measured against the rollout's target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartProgress {
    /// Members the part should have.
    pub desired: u32,
    /// Members running the target revision.
    pub updated: u32,
    /// Members running the target revision and available.
    pub available: u32,
    /// Members disrupted now (being restarted, unavailable for any reason).
    pub disrupted: u32,
    /// A failure of the target in this part, with its cause.
    pub failure: Option<String>,
    /// Whether what was read of the part is current (its latest generation
    /// was observed); a part read stale is never taken as done.
    pub observed_current: bool,
}

impl PartProgress {
    /// Whether the part has finished the target.
    pub fn done(&self) -> bool {
        self.failure.is_none()
            && self.observed_current
            && self.updated == self.desired
            && self.available == self.desired
            && self.disrupted == 0
    }

    /// Whether the part holds at least one member at the target.
    fn started(&self) -> bool {
        self.updated > 0
    }
}

/// Where a part stands in the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartState {
    /// Not its turn yet.
    Waiting,
    /// Its turn: it may be changed now.
    Updating,
    /// Its turn, but the rollout is paused: nothing changes.
    Held,
    /// Finished the target.
    Done,
    /// The target failed here; the rollout stops.
    Failed {
        /// What failed, as observed.
        cause: String,
    },
}

impl fmt::Display for PartState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartState::Waiting => f.write_str("Waiting"),
            PartState::Updating => f.write_str("Updating"),
            PartState::Held => f.write_str("Paused"),
            PartState::Done => f.write_str("Done"),
            PartState::Failed { .. } => f.write_str("Failed"),
        }
    }
}

/// The rollout as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolloutPhase {
    /// Every part has finished the target.
    Complete,
    /// The named part is being updated.
    Progressing {
        /// The active part.
        part: String,
    },
    /// Paused with the named part active.
    Paused {
        /// The part that would be updated.
        part: String,
    },
    /// Stopped at the named part.
    Failed {
        /// The part that failed.
        part: String,
        /// Its cause.
        cause: String,
    },
}

/// One decision of the rollout: each part's state, in order, and the phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutStep {
    /// Every part of the order with its state.
    pub parts: Vec<(String, PartState)>,
    /// The rollout as a whole.
    pub phase: RolloutPhase,
}

impl RolloutStep {
    /// Whether members of `part` may be changed now.
    pub fn may_change(&self, part: &str) -> bool {
        self.state_of(part) == Some(&PartState::Updating)
    }

    /// The state of `part`, if it is in the order.
    pub fn state_of(&self, part: &str) -> Option<&PartState> {
        self.parts
            .iter()
            .find(|(name, _)| name == part)
            .map(|(_, state)| state)
    }

    /// Parts that started the target but are not done, other than the
    /// active one: caught half-way by a newer target or by a reordering.
    /// They wait for their turn as they are.
    pub fn interrupted<'a>(
        &'a self,
        progress: &'a BTreeMap<String, PartProgress>,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.parts.iter().filter_map(move |(name, state)| {
            let started = progress.get(name).is_some_and(PartProgress::started);
            (*state == PartState::Waiting && started).then_some(name.as_str())
        })
    }
}

/// The rollout's state over `order` from what is observed (see the module
/// docs). A part of the order with no progress entry is taken as empty and
/// not current, so it is never done by default.
pub fn rollout_step(
    order: &[String],
    progress: &BTreeMap<String, PartProgress>,
    paused: bool,
) -> RolloutStep {
    let unobserved = PartProgress::default();
    let mut parts = Vec::with_capacity(order.len());
    let mut phase = None;
    for name in order {
        let part = progress.get(name).unwrap_or(&unobserved);
        let state = match (&phase, part) {
            (Some(_), _) => PartState::Waiting,
            (None, part) if part.done() => PartState::Done,
            (
                None,
                PartProgress {
                    failure: Some(cause),
                    ..
                },
            ) => {
                phase = Some(RolloutPhase::Failed {
                    part: name.clone(),
                    cause: cause.clone(),
                });
                PartState::Failed {
                    cause: cause.clone(),
                }
            }
            (None, _) if paused => {
                phase = Some(RolloutPhase::Paused { part: name.clone() });
                PartState::Held
            }
            (None, _) => {
                phase = Some(RolloutPhase::Progressing { part: name.clone() });
                PartState::Updating
            }
        };
        parts.push((name.clone(), state));
    }
    RolloutStep {
        parts,
        phase: phase.unwrap_or(RolloutPhase::Complete),
    }
}

/// The part that was being updated, which stays the active part until it is
/// done (for rollouts whose half-done part is better finished than left: a
/// Swarm's restarts, whose revokes must all settle before any grant).
///
/// Without it, a part earlier in the order that needs the target again (a
/// newer target, or a second pass of the same one) would become active while
/// the part in progress still has members down, and two parts would be
/// disrupted together. `previous_active` is the part the last decision let
/// change; `carried` the part it was already finishing. A part that is done
/// is carried no more, and the rollout goes on in its order from the first
/// part.
pub fn part_to_finish(
    previous_active: Option<&str>,
    carried: Option<&str>,
    progress: &BTreeMap<String, PartProgress>,
) -> Option<String> {
    let candidate = previous_active.or(carried)?;
    let part = progress.get(candidate)?;
    (!part.done()).then(|| candidate.to_owned())
}

/// `order` with `first` (when it is in the order) moved to the front.
pub fn finishing_first(order: &[String], first: Option<&str>) -> Vec<String> {
    let Some(first) = first.filter(|first| order.iter().any(|name| name == first)) else {
        return order.to_vec();
    };
    std::iter::once(first.to_owned())
        .chain(order.iter().filter(|name| *name != first).cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn done(desired: u32) -> PartProgress {
        PartProgress {
            desired,
            updated: desired,
            available: desired,
            disrupted: 0,
            failure: None,
            observed_current: true,
        }
    }

    fn untouched(desired: u32) -> PartProgress {
        PartProgress {
            desired,
            available: desired,
            observed_current: true,
            ..PartProgress::default()
        }
    }

    fn progress(parts: &[(&str, PartProgress)]) -> BTreeMap<String, PartProgress> {
        parts
            .iter()
            .map(|(name, part)| ((*name).to_owned(), part.clone()))
            .collect()
    }

    fn states(step: &RolloutStep) -> Vec<String> {
        step.parts
            .iter()
            .map(|(name, state)| format!("{name}={state}"))
            .collect()
    }

    #[test]
    fn only_the_first_part_not_done_may_change_and_later_ready_parts_wait() {
        let observed = progress(&[("a", done(2)), ("b", untouched(2)), ("c", untouched(2))]);
        let step = rollout_step(&order(&["a", "b", "c"]), &observed, false);
        assert_eq!(states(&step), ["a=Done", "b=Updating", "c=Waiting"]);
        assert!(step.may_change("b"));
        assert!(!step.may_change("a"));
        assert!(!step.may_change("c"));
        assert_eq!(
            step.phase,
            RolloutPhase::Progressing {
                part: "b".to_owned()
            }
        );
    }

    #[test]
    fn a_part_is_not_done_while_a_member_is_disrupted_unavailable_or_observed_stale() {
        let cases = [
            PartProgress {
                disrupted: 1,
                ..done(3)
            },
            PartProgress {
                available: 2,
                ..done(3)
            },
            PartProgress {
                updated: 2,
                ..done(3)
            },
            PartProgress {
                observed_current: false,
                ..done(3)
            },
        ];
        for case in cases {
            let observed = progress(&[("a", case.clone()), ("b", untouched(1))]);
            let step = rollout_step(&order(&["a", "b"]), &observed, false);
            assert_eq!(states(&step), ["a=Updating", "b=Waiting"], "{case:?}");
        }
    }

    #[test]
    fn a_failed_part_stops_the_rollout_before_the_next_and_names_the_cause() {
        let failed = PartProgress {
            failure: Some("web-1 failed: ExitCode3".to_owned()),
            ..untouched(2)
        };
        let observed = progress(&[("a", done(1)), ("b", failed), ("c", untouched(1))]);
        let step = rollout_step(&order(&["a", "b", "c"]), &observed, false);
        assert_eq!(states(&step), ["a=Done", "b=Failed", "c=Waiting"]);
        assert_eq!(
            step.phase,
            RolloutPhase::Failed {
                part: "b".to_owned(),
                cause: "web-1 failed: ExitCode3".to_owned()
            }
        );
        assert!(!step.may_change("b") && !step.may_change("c"));
    }

    #[test]
    fn a_paused_rollout_changes_nothing_and_resuming_continues_where_it_stood() {
        let half = PartProgress {
            updated: 1,
            ..untouched(2)
        };
        let observed = progress(&[("a", done(1)), ("b", half), ("c", untouched(1))]);
        let paused = rollout_step(&order(&["a", "b", "c"]), &observed, true);
        assert_eq!(states(&paused), ["a=Done", "b=Paused", "c=Waiting"]);
        assert!(
            paused
                .parts
                .iter()
                .all(|(name, _)| !paused.may_change(name))
        );
        let resumed = rollout_step(&order(&["a", "b", "c"]), &observed, false);
        assert_eq!(states(&resumed), ["a=Done", "b=Updating", "c=Waiting"]);
    }

    #[test]
    fn a_newer_target_starts_again_from_the_first_part_and_leaves_the_interrupted_part_as_it_is() {
        // Against the older target: a done, b half-way, c untouched. Against
        // the newer target nothing is updated yet; b holds one member at the
        // older target, which is neither the newer target nor the original.
        let newer = progress(&[
            ("a", untouched(2)),
            ("b", untouched(2)),
            ("c", untouched(2)),
        ]);
        let step = rollout_step(&order(&["a", "b", "c"]), &newer, false);
        assert_eq!(states(&step), ["a=Updating", "b=Waiting", "c=Waiting"]);
        // Once b reports a member at the newer target while a is still
        // active, b is interrupted (started, waiting) and stays so.
        let mixed = progress(&[
            ("a", untouched(2)),
            (
                "b",
                PartProgress {
                    updated: 1,
                    ..untouched(2)
                },
            ),
            ("c", untouched(2)),
        ]);
        let step = rollout_step(&order(&["a", "b", "c"]), &mixed, false);
        assert_eq!(step.interrupted(&mixed).collect::<Vec<_>>(), ["b"]);
        assert!(!step.may_change("b"));
    }

    #[test]
    fn a_part_never_observed_is_not_done() {
        let observed = progress(&[("a", done(1))]);
        let step = rollout_step(&order(&["a", "new-pool"]), &observed, false);
        assert_eq!(states(&step), ["a=Done", "new-pool=Updating"]);
    }

    #[test]
    fn every_part_done_completes_the_rollout_and_an_empty_order_is_complete() {
        let observed = progress(&[("a", done(1)), ("b", done(0))]);
        let step = rollout_step(&order(&["a", "b"]), &observed, true);
        assert_eq!(step.phase, RolloutPhase::Complete);
        assert_eq!(
            rollout_step(&[], &BTreeMap::new(), false).phase,
            RolloutPhase::Complete
        );
    }

    #[test]
    fn the_part_in_progress_finishes_before_an_earlier_part_that_needs_a_newer_target() {
        let half = PartProgress {
            updated: 1,
            disrupted: 1,
            ..untouched(2)
        };
        let observed = progress(&[("a", untouched(1)), ("b", half), ("c", untouched(1))]);
        // Revision 3 arrives while b was updating for revision 2.
        let carried = part_to_finish(Some("b"), None, &observed);
        assert_eq!(carried.as_deref(), Some("b"));
        let order = finishing_first(&order(&["a", "b", "c"]), carried.as_deref());
        let step = rollout_step(&order, &observed, false);
        assert_eq!(states(&step), ["b=Updating", "a=Waiting", "c=Waiting"]);
        // The next decision keeps carrying b while it is not done.
        assert_eq!(
            part_to_finish(Some("b"), Some("b"), &observed).as_deref(),
            Some("b")
        );
        // Once b is done it is carried no more: the order starts again from a.
        let finished = progress(&[("a", untouched(1)), ("b", done(2)), ("c", untouched(1))]);
        assert_eq!(part_to_finish(Some("b"), Some("b"), &finished), None);
        // Nothing was active (the first decision, or a halt): nothing is carried.
        assert_eq!(part_to_finish(None, None, &observed), None);
    }

    #[test]
    fn finishing_first_ignores_a_part_no_longer_in_the_order() {
        assert_eq!(
            finishing_first(&order(&["a", "b"]), Some("gone")),
            order(&["a", "b"])
        );
        assert_eq!(
            finishing_first(&order(&["a", "b"]), None),
            order(&["a", "b"])
        );
    }
}
