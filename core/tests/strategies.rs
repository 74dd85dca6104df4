//! Properties of the strategies: determinism, coverage, balance, movement,
//! unavailable members, several pools, and the error outcomes.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use shoal_core::diff::lower_bound;
use shoal_core::format::render_slice;
use shoal_core::member::pool_members;
use shoal_core::{AssignError, Assignment, JobSet, Member, MemberId, Strategy, assign, diff};

const STRATEGIES: [Strategy; 5] = [
    Strategy::Bounded { epsilon: 0.0 },
    Strategy::Bounded { epsilon: 0.25 },
    Strategy::Jump,
    Strategy::Ring { vnodes: 16 },
    Strategy::Sticky,
];

fn keys(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("stream:{i}:job")).collect()
}

fn jobs(count: usize) -> JobSet {
    JobSet::parse(keys(count)).expect("generated keys are valid")
}

/// Rendered slices and hashes, the bytes a member would read.
fn rendered(assignment: &Assignment) -> Vec<(String, String)> {
    assignment
        .slices("demo", 1)
        .values()
        .map(|slice| (slice.hash.clone(), render_slice(slice)))
        .collect()
}

fn moved(old: &Assignment, new: &Assignment) -> BTreeSet<String> {
    old.iter()
        .filter(|(key, owner)| new.owner_of(key.as_str()) != Some(*owner))
        .map(|(key, _)| key.to_string())
        .collect()
}

fn members_with_availability(pool: &str, availability: &[bool]) -> Vec<Member> {
    availability
        .iter()
        .enumerate()
        .map(|(ordinal, available)| Member::new(pool, ordinal as u32).with_available(*available))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn shuffled_input_gives_byte_identical_slices_and_hashes(
        (key_list, shuffled_keys) in (0usize..300).prop_flat_map(|count| {
            let list = keys(count);
            (Just(list.clone()), Just(list).prop_shuffle())
        }),
        (availability, member_order) in prop::collection::vec(any::<bool>(), 1..12)
            .prop_flat_map(|availability| {
                let order: Vec<usize> = (0..availability.len()).collect();
                (Just(availability), Just(order).prop_shuffle())
            }),
    ) {
        prop_assume!(availability.iter().any(|available| *available));
        let members = members_with_availability("w", &availability);
        let reordered: Vec<Member> = member_order.iter().map(|&i| members[i].clone()).collect();
        let jobs_in_order = JobSet::parse(key_list).unwrap();
        let jobs_shuffled = JobSet::parse(shuffled_keys).unwrap();
        for strategy in &STRATEGIES {
            let first = assign(&jobs_in_order, &members, strategy).unwrap();
            let second = assign(&jobs_shuffled, &reordered, strategy).unwrap();
            prop_assert_eq!(rendered(&first), rendered(&second), "strategy {}", strategy);
        }
    }

    #[test]
    fn every_job_is_in_exactly_one_slice_of_an_available_member(
        count in 0usize..400,
        availability in prop::collection::vec(any::<bool>(), 1..24),
    ) {
        prop_assume!(availability.iter().any(|available| *available));
        let jobs = jobs(count);
        let members = members_with_availability("w", &availability);
        for strategy in &STRATEGIES {
            let assignment = assign(&jobs, &members, strategy).unwrap();
            let slices = assignment.slices("demo", 1);
            let mut seen: BTreeMap<String, MemberId> = BTreeMap::new();
            for (member, slice) in &slices {
                for key in &slice.jobs {
                    prop_assert!(
                        seen.insert(key.to_string(), member.clone()).is_none(),
                        "{} owns {} twice ({})", member, key, strategy
                    );
                }
                if !slice.jobs.is_empty() {
                    prop_assert!(member.ordinal().is_some_and(|ordinal| availability[ordinal as usize]), "{} is unavailable", member);
                }
            }
            let all: BTreeSet<String> = jobs.iter().map(ToString::to_string).collect();
            prop_assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), all);
        }
    }

    #[test]
    fn bounded_without_slack_caps_every_slice_at_the_ceiling_of_the_mean(
        count in 0usize..600,
        availability in prop::collection::vec(any::<bool>(), 1..30),
    ) {
        let available = availability.iter().filter(|available| **available).count();
        prop_assume!(available > 0);
        let jobs = jobs(count);
        let members = members_with_availability("w", &availability);
        let assignment = assign(&jobs, &members, &Strategy::default()).unwrap();
        let cap = count.div_ceil(available);
        prop_assert_eq!(assignment.max_load(), cap);
    }

    #[test]
    fn bounded_with_slack_stays_under_its_looser_cap(
        count in 0usize..600,
        members in 1u32..30,
        epsilon in 0.0f64..2.0,
    ) {
        let assignment =
            assign(&jobs(count), &pool_members("w", members), &Strategy::Bounded { epsilon }).unwrap();
        let loose = ((1.0 + epsilon) * count as f64 / f64::from(members)).ceil() as usize;
        prop_assert!(assignment.max_load() <= loose.max(count.div_ceil(members as usize)));
    }

    #[test]
    fn scaling_a_pool_by_one_moves_jumps_keys_plus_at_most_the_shed_keys_with_bounded(
        count in 0usize..2000,
        n in 2u32..40,
    ) {
        let jobs = jobs(count);
        let bounded = |size: u32| assign(&jobs, &pool_members("w", size), &Strategy::default()).unwrap();
        let jump = |size: u32| assign(&jobs, &pool_members("w", size), &Strategy::Jump).unwrap();
        // Keys bounded places away from their jump slot (its shed keys).
        let shed = |size: u32| moved(&jump(size), &bounded(size));
        let before = bounded(n);
        for after_size in [n + 1, n - 1] {
            let after = bounded(after_size);
            let change = diff(&before, &after);
            let cap = count.div_ceil(after_size as usize);
            prop_assert_eq!(change.max_load, cap);
            // Nothing as balanced as the result can move less than the lower
            // bound (the result itself is such an assignment).
            prop_assert!(change.moved.len() >= change.lower_bound);
            prop_assert!(change.moved.len() >= lower_bound(&before, &after, 0, cap));
            // A key moves only if jump moves it (the member left or joined)
            // or balance displaced it before or after the change.
            let allowed: BTreeSet<String> = moved(&jump(n), &jump(after_size))
                .into_iter()
                .chain(shed(n))
                .chain(shed(after_size))
                .collect();
            let actual = moved(&before, &after);
            prop_assert!(actual.is_subset(&allowed), "{:?}", actual.difference(&allowed).collect::<Vec<_>>());
            // And the shed keys are exactly the excess over the cap of jump's loads.
            let excess: usize = jump(n).loads().values().map(|load| load.saturating_sub(count.div_ceil(n as usize))).sum();
            prop_assert_eq!(shed(n).len(), excess);
        }
    }

    #[test]
    fn adding_or_removing_one_job_moves_few_other_jobs_with_bounded(
        count in 1usize..1500,
        n in 1u32..30,
    ) {
        let members = pool_members("w", n);
        let base = assign(&jobs(count), &members, &Strategy::default()).unwrap();
        let mut with_extra = keys(count);
        with_extra.push("an-extra-job".to_owned());
        let grown = assign(&JobSet::parse(with_extra).unwrap(), &members, &Strategy::default()).unwrap();
        let shrunk = assign(&JobSet::parse(keys(count)[1..].to_vec()).unwrap(), &members, &Strategy::default()).unwrap();
        // Other jobs move only through the knock-on of one load change in the
        // shed placement, or, when the cap itself changes (k crosses a
        // multiple of n), because every over-full member keeps or sheds one
        // more. (Measured worst cases over k < 1600, n < 30: 9 and 44 = 1.5n.)
        let cap = count.div_ceil(n as usize);
        let limit = |new_count: usize| {
            if new_count.div_ceil(n as usize) == cap { n as usize + 8 } else { 3 * n as usize + 8 }
        };
        prop_assert!(diff(&base, &grown).moved.len() <= limit(count + 1));
        prop_assert!(diff(&base, &shrunk).moved.len() <= limit(count - 1));
    }

    #[test]
    fn jump_and_ring_move_only_keys_of_the_changed_member(
        count in 0usize..1000,
        n in 2u32..30,
    ) {
        let jobs = jobs(count);
        for strategy in [Strategy::Jump, Strategy::Ring { vnodes: 16 }] {
            let before = assign(&jobs, &pool_members("w", n), &strategy).unwrap();
            let grown = assign(&jobs, &pool_members("w", n + 1), &strategy).unwrap();
            for job in diff(&before, &grown).moved {
                prop_assert_eq!(job.to.ordinal(), Some(n), "{}", strategy);
            }
            let shrunk = assign(&jobs, &pool_members("w", n - 1), &strategy).unwrap();
            for job in diff(&before, &shrunk).moved {
                prop_assert_eq!(job.from.ordinal(), Some(n - 1), "{}", strategy);
            }
        }
    }

    #[test]
    fn an_unavailable_member_loses_only_its_own_jobs_and_gets_them_back(
        count in 0usize..800,
        availability in prop::collection::vec(prop::bool::weighted(0.8), 2..20),
    ) {
        prop_assume!(availability.iter().any(|available| *available));
        let jobs = jobs(count);
        let everyone = members_with_availability("w", &vec![true; availability.len()]);
        let some = members_with_availability("w", &availability);
        for strategy in [Strategy::default(), Strategy::Jump, Strategy::Ring { vnodes: 16 }] {
            let healthy = assign(&jobs, &everyone, &strategy).unwrap();
            let degraded = assign(&jobs, &some, &strategy).unwrap();
            let expected: BTreeSet<String> = healthy
                .iter()
                .filter(|(_, owner)| owner.ordinal().is_some_and(|ordinal| !availability[ordinal as usize]))
                .map(|(key, _)| key.to_string())
                .collect();
            prop_assert_eq!(moved(&healthy, &degraded), expected.clone(), "{}", strategy);
            let recovered = assign(&jobs, &everyone, &strategy).unwrap();
            prop_assert_eq!(moved(&degraded, &recovered), expected, "{}", strategy);
            prop_assert_eq!(rendered(&recovered), rendered(&healthy));
        }
    }

    #[test]
    fn several_pools_are_covered_and_balanced(
        count in 0usize..600,
        sizes in prop::collection::vec(1u32..8, 1..4),
    ) {
        let members: Vec<Member> = sizes
            .iter()
            .enumerate()
            .flat_map(|(pool, &size)| pool_members(&format!("pool-{pool}"), size))
            .collect();
        let jobs = jobs(count);
        for strategy in &STRATEGIES {
            let assignment = assign(&jobs, &members, strategy).unwrap();
            prop_assert_eq!(assignment.iter().count(), count);
            prop_assert_eq!(assignment.members().len(), members.len());
        }
        let bounded = assign(&jobs, &members, &Strategy::default()).unwrap();
        prop_assert_eq!(bounded.max_load(), count.div_ceil(members.len()));
    }
}

#[test]
fn growing_one_of_two_pools_moves_a_bounded_share() {
    let jobs = jobs(10_000);
    let pools = |a: u32, b: u32| {
        let mut members = pool_members("alpha", a);
        members.extend(pool_members("beta", b));
        members
    };
    for strategy in [Strategy::default(), Strategy::Jump] {
        let before = assign(&jobs, &pools(4, 4), &strategy).unwrap();
        let after = assign(&jobs, &pools(5, 4), &strategy).unwrap();
        let change = diff(&before, &after);
        let ideal = 10_000 / 9;
        // Documented trade-off: up to ~1.5x the single-pool optimum.
        assert!(
            change.moved.len() <= ideal * 3 / 2,
            "{strategy}: moved {} vs ideal {ideal}",
            change.moved.len()
        );
        let into_beta = change
            .moved
            .iter()
            .filter(|job| job.to.pool == "beta")
            .count();
        if strategy == Strategy::Jump {
            // Raising alpha's rendezvous weight only ever pulls keys into alpha.
            assert_eq!(into_beta, 0);
        }
    }
}

#[test]
fn no_members_is_a_clear_error_not_a_panic() {
    let jobs = jobs(5);
    for strategy in &STRATEGIES {
        let error = assign(&jobs, &[], strategy).unwrap_err();
        assert_eq!(error, AssignError::NoMembers { members: 0 });
        assert_eq!(
            error.to_string(),
            "no members: the swarm has no pool members to assign jobs to"
        );
        let down = members_with_availability("w", &[false, false, false]);
        assert_eq!(
            assign(&jobs, &down, strategy).unwrap_err().to_string(),
            "no members available: all 3 members are unavailable"
        );
        assert_eq!(
            assign(&JobSet::default(), &[], strategy).unwrap_err(),
            AssignError::NoMembers { members: 0 }
        );
    }
}

#[test]
fn invalid_strategy_parameters_and_member_lists_are_rejected() {
    let jobs = jobs(3);
    let members = pool_members("w", 2);
    assert_eq!(
        assign(&jobs, &members, &Strategy::Bounded { epsilon: -0.5 })
            .unwrap_err()
            .to_string(),
        "strategy bounded: epsilon must be a finite number >= 0, got -0.5"
    );
    assert_eq!(
        assign(&jobs, &members, &Strategy::Bounded { epsilon: f64::NAN })
            .unwrap_err()
            .to_string(),
        "strategy bounded: epsilon must be a finite number >= 0, got NaN"
    );
    assert_eq!(
        assign(&jobs, &members, &Strategy::Ring { vnodes: 0 })
            .unwrap_err()
            .to_string(),
        "strategy ring: vnodes must be between 1 and 4096, got 0"
    );
    let twice = vec![
        Member::new("w", 1),
        Member::new("w", 0),
        Member::new("w", 1),
    ];
    assert_eq!(
        assign(&jobs, &twice, &Strategy::default())
            .unwrap_err()
            .to_string(),
        "member w-1 is listed more than once"
    );
    assert_eq!(
        assign(&jobs, &[Member::new("w", 100_000)], &Strategy::default())
            .unwrap_err()
            .to_string(),
        "member w-100000: ordinal 100000 exceeds the supported maximum 99999"
    );
}

#[test]
fn a_missing_ordinal_is_treated_as_an_unavailable_member() {
    let jobs = jobs(500);
    let gap = vec![Member::new("w", 0), Member::new("w", 2)];
    let explicit = members_with_availability("w", &[true, false, true]);
    for strategy in &STRATEGIES {
        let with_gap = assign(&jobs, &gap, strategy).unwrap();
        let with_unavailable = assign(&jobs, &explicit, strategy).unwrap();
        let owners = |assignment: &Assignment| -> Vec<String> {
            assignment
                .iter()
                .map(|(_, owner)| owner.to_string())
                .collect()
        };
        assert_eq!(owners(&with_gap), owners(&with_unavailable), "{strategy}");
    }
}

#[test]
fn strategies_read_from_json_with_defaults_for_missing_parameters() {
    let parse = |text: &str| serde_json::from_str::<Strategy>(text).unwrap();
    assert_eq!(
        parse(r#"{"name":"bounded"}"#),
        Strategy::Bounded { epsilon: 0.0 }
    );
    assert_eq!(
        parse(r#"{"name":"bounded","epsilon":0.1}"#),
        Strategy::Bounded { epsilon: 0.1 }
    );
    assert_eq!(parse(r#"{"name":"jump"}"#), Strategy::Jump);
    assert_eq!(parse(r#"{"name":"ring"}"#), Strategy::Ring { vnodes: 128 });
    assert!(serde_json::from_str::<Strategy>(r#"{"name":"random"}"#).is_err());
    assert_eq!(Strategy::default(), Strategy::Bounded { epsilon: 0.0 });
}
