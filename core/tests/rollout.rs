//! Properties of ordered rollouts (`shoal_core::rollout`) over random parts.

use std::collections::BTreeMap;

use proptest::prelude::*;
use shoal_core::rollout::{PartProgress, PartState, RolloutPhase, rollout_step};

fn part() -> impl Strategy<Value = PartProgress> {
    (
        0u32..4,
        0u32..5,
        0u32..5,
        0u32..2,
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(desired, updated, available, disrupted, current, failed)| PartProgress {
                desired,
                updated: updated.min(desired),
                available: available.min(desired),
                disrupted,
                failure: failed.then(|| "failed".to_owned()),
                observed_current: current,
            },
        )
}

proptest! {
    #[test]
    fn at_most_one_part_changes_and_every_part_before_it_is_done(
        parts in prop::collection::vec(part(), 0..8),
        paused in any::<bool>(),
    ) {
        let order: Vec<String> = (0..parts.len()).map(|i| format!("pool-{i}")).collect();
        let progress: BTreeMap<String, PartProgress> =
            order.iter().cloned().zip(parts.iter().cloned()).collect();
        let step = rollout_step(&order, &progress, paused);
        let changing: Vec<&String> = order.iter().filter(|name| step.may_change(name)).collect();
        prop_assert!(changing.len() <= 1);
        if paused {
            prop_assert!(changing.is_empty());
        }
        // The first part not done decides the phase; everything before it is
        // done and everything after it waits.
        let first_open = parts.iter().position(|p| !p.done());
        for (index, (name, state)) in step.parts.iter().enumerate() {
            match first_open {
                Some(open) if index < open => prop_assert_eq!(state, &PartState::Done, "{}", name),
                Some(open) if index > open => prop_assert_eq!(state, &PartState::Waiting, "{}", name),
                Some(_) => prop_assert_ne!(state, &PartState::Done),
                None => prop_assert_eq!(state, &PartState::Done),
            }
        }
        match (first_open, &step.phase) {
            (None, RolloutPhase::Complete) => {}
            (Some(open), RolloutPhase::Failed { part, .. }) => {
                prop_assert!(parts[open].failure.is_some());
                prop_assert_eq!(part, &order[open]);
            }
            (Some(open), RolloutPhase::Paused { part }) => {
                prop_assert!(paused && parts[open].failure.is_none());
                prop_assert_eq!(part, &order[open]);
            }
            (Some(open), RolloutPhase::Progressing { part }) => {
                prop_assert!(!paused && parts[open].failure.is_none());
                prop_assert_eq!(part, &order[open]);
            }
            (first_open, phase) => prop_assert!(false, "{first_open:?} with {phase:?}"),
        }
    }
}
