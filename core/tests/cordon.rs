//! Cordoned and drained members (`reassign_cordoned`): a cordoned member keeps what it
//! holds and takes nothing new, under every strategy; a drained member (unavailable)
//! loses exactly its own jobs; both are fixed points.

use std::collections::BTreeSet;

use proptest::prelude::*;
use shoal_core::member::pool_members;
use shoal_core::{
    AssignError, Assignment, JobKey, JobSet, JobSetting, JobSettings, Member, MemberId, Strategy,
    diff, reassign, reassign_cordoned,
};

fn jobs(range: std::ops::Range<usize>) -> JobSet {
    JobSet::parse(range.map(|i| format!("stream:{i}:job"))).expect("generated keys are valid")
}

fn strategies() -> [Strategy; 4] {
    [
        Strategy::Sticky,
        Strategy::Bounded { epsilon: 0.0 },
        Strategy::Jump,
        Strategy::Ring { vnodes: 64 },
    ]
}

fn cordon(members: &[&MemberId]) -> BTreeSet<MemberId> {
    members.iter().map(|member| (*member).clone()).collect()
}

fn cordoned(
    in_force: &Assignment,
    jobs: &JobSet,
    members: &[Member],
    set: &BTreeSet<MemberId>,
    strategy: &Strategy,
) -> Assignment {
    reassign_cordoned(
        Some(in_force),
        jobs,
        &JobSettings::new(),
        members,
        set,
        strategy,
    )
    .expect("uncordoned members are available")
}

fn slice(assignment: &Assignment, member: &MemberId) -> JobSet {
    assignment.slice_of(member).unwrap_or_default()
}

#[test]
fn a_cordon_alone_moves_no_job_under_any_strategy() {
    let members = pool_members("w", 4);
    let all = jobs(0..40);
    for strategy in strategies() {
        let in_force = reassign(None, &all, &members, &strategy).expect("members");
        let set = cordon(&[&members[1].id]);
        let next = cordoned(&in_force, &all, &members, &set, &strategy);
        assert!(diff(&in_force, &next).moved.is_empty(), "{strategy}");
    }
}

#[test]
fn jobs_added_never_land_on_a_cordoned_member_which_keeps_its_own() {
    let members = pool_members("w", 4);
    let before = jobs(0..40);
    let after = jobs(0..80);
    for strategy in strategies() {
        let in_force = reassign(None, &before, &members, &strategy).expect("members");
        let held = slice(&in_force, &members[2].id);
        let set = cordon(&[&members[2].id]);
        let next = cordoned(&in_force, &after, &members, &set, &strategy);
        let now = slice(&next, &members[2].id);
        for key in now.iter() {
            assert!(
                held.contains(key.as_str()),
                "{strategy}: {} landed on the cordoned member",
                key.as_str()
            );
        }
        if strategy.is_stateful() {
            assert_eq!(now, held, "sticky keeps all a cordoned member holds");
        }
        // A fixed point: computing again from the result changes nothing.
        let again = cordoned(&next, &after, &members, &set, &strategy);
        assert_eq!(again, next, "{strategy}");
    }
}

#[test]
fn sticky_balances_the_uncordoned_members_among_themselves() {
    let members = pool_members("w", 4);
    let in_force = reassign(None, &jobs(0..40), &members, &Strategy::Sticky).expect("members");
    let set = cordon(&[&members[0].id]);
    let next = cordoned(&in_force, &jobs(0..70), &members, &set, &Strategy::Sticky);
    let loads: Vec<usize> = members[1..]
        .iter()
        .map(|member| slice(&next, &member.id).len())
        .collect();
    assert_eq!(slice(&next, &members[0].id).len(), 10);
    assert_eq!(loads, vec![20, 20, 20]);
}

#[test]
fn draining_a_member_moves_exactly_its_jobs_under_every_strategy() {
    let members = pool_members("w", 5);
    let all = jobs(0..100);
    for strategy in strategies() {
        let in_force = reassign(None, &all, &members, &strategy).expect("members");
        let drained = members[3].id.clone();
        let mut without = members.clone();
        without[3].available = false;
        let next = reassign_cordoned(
            Some(&in_force),
            &all,
            &JobSettings::new(),
            &without,
            &cordon(&[&drained]),
            &strategy,
        )
        .expect("others are available");
        let moved: BTreeSet<String> = diff(&in_force, &next)
            .moved
            .iter()
            .map(|moved| moved.key.as_str().to_owned())
            .collect();
        let held: BTreeSet<String> = slice(&in_force, &drained)
            .iter()
            .map(|key| key.as_str().to_owned())
            .collect();
        assert_eq!(moved, held, "{strategy}");
        assert!(slice(&next, &drained).is_empty(), "{strategy}");
    }
}

#[test]
fn with_every_member_cordoned_new_jobs_are_refused_and_held_ones_stay() {
    let members = pool_members("w", 2);
    let set = cordon(&[&members[0].id, &members[1].id]);
    for strategy in strategies() {
        let in_force = reassign(None, &jobs(0..10), &members, &strategy).expect("members");
        let same = cordoned(&in_force, &jobs(0..10), &members, &set, &strategy);
        assert_eq!(same, in_force, "{strategy}");
        let refused = reassign_cordoned(
            Some(&in_force),
            &jobs(0..11),
            &JobSettings::new(),
            &members,
            &set,
            &strategy,
        )
        .expect_err("the new job has nowhere to go");
        // Sticky has only the new job to place; a stateless strategy may also move
        // held jobs between the two (bounded rebalances), which have nowhere to go either.
        assert!(
            matches!(refused, AssignError::AllCordoned { homeless, .. }
                if homeless == 1 || !strategy.is_stateful() && homeless >= 1),
            "{strategy}: {refused:?}"
        );
        assert!(refused.to_string().contains("w-0, w-1"), "{refused}");
    }
}

#[test]
fn a_cordon_with_weighted_jobs_is_refused_saying_why() {
    let members = pool_members("w", 3);
    let all = jobs(0..6);
    let mut settings = JobSettings::new();
    settings
        .insert(
            JobKey::new("stream:0:job").expect("valid"),
            JobSetting {
                weight: 3,
                dedicated: false,
            },
        )
        .expect("valid setting");
    let refused = reassign_cordoned(
        None,
        &all,
        &settings,
        &members,
        &cordon(&[&members[0].id]),
        &Strategy::Sticky,
    )
    .expect_err("not supported");
    assert_eq!(refused, AssignError::CordonWithSettings);
}

#[test]
fn a_cordon_of_a_member_not_listed_changes_nothing() {
    let members = pool_members("w", 3);
    let all = jobs(0..30);
    let in_force = reassign(None, &all, &members, &Strategy::Sticky).expect("members");
    let gone = MemberId::new("w", 9);
    let next = cordoned(
        &in_force,
        &jobs(0..33),
        &members,
        &cordon(&[&gone]),
        &Strategy::Sticky,
    );
    let plain =
        reassign(Some(&in_force), &jobs(0..33), &members, &Strategy::Sticky).expect("members");
    assert_eq!(next, plain);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random job lists and cordons over sticky and the stateless strategies: a
    /// cordoned member never gains a job, and the result is a fixed point.
    #[test]
    fn a_cordoned_member_never_gains_a_job_and_the_result_is_a_fixed_point(
        before in 0usize..120,
        after in 0usize..160,
        size in 2u32..7,
        cordoned_mask in proptest::collection::vec(any::<bool>(), 7),
        which in 0usize..4,
    ) {
        let members = pool_members("w", size);
        let strategy = strategies()[which];
        let set: BTreeSet<MemberId> = members
            .iter()
            .zip(&cordoned_mask)
            .filter(|(_, cordoned)| **cordoned)
            .map(|(member, _)| member.id.clone())
            .collect();
        prop_assume!(set.len() < members.len());
        let in_force = reassign(None, &jobs(0..before), &members, &strategy).expect("members");
        let next = cordoned(&in_force, &jobs(0..after), &members, &set, &strategy);
        for member in &set {
            let held = slice(&in_force, member);
            for key in slice(&next, member).iter() {
                prop_assert!(held.contains(key.as_str()), "{} gained {}", member, key.as_str());
            }
        }
        let again = cordoned(&next, &jobs(0..after), &members, &set, &strategy);
        prop_assert_eq!(again, next);
    }
}
