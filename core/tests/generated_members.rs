//! Members with generated names (the pods of a Deployment pool): every
//! strategy keys them by pod name, so with `jump`, `ring` and `sticky` a pod
//! replaced by one with a new name moves no job between two pods that both
//! stay, and `sticky` moves exactly the replaced pod's jobs, all to its
//! successor. (`bounded` may: its balance caps shed keys between survivors,
//! which is why the README recommends `sticky` for Deployment pools.)

use std::collections::BTreeSet;

use proptest::prelude::*;
use shoal_core::diff::lower_bound;
use shoal_core::{Assignment, JobSet, Member, MemberId, Strategy, assign, diff, reassign};

fn jobs(count: usize) -> JobSet {
    JobSet::parse((0..count).map(|i| format!("stream:{i}"))).expect("valid keys")
}

/// Pods of Deployment `web` with generated names `web-5c9d-<suffix>`.
fn pods(suffixes: &[String]) -> Vec<Member> {
    suffixes
        .iter()
        .map(|suffix| Member::of(MemberId::generated("web", format!("web-5c9d-{suffix}"))))
        .collect()
}

fn strategies() -> [Strategy; 4] {
    [
        Strategy::default(),
        Strategy::Jump,
        Strategy::Ring { vnodes: 16 },
        Strategy::Sticky,
    ]
}

fn step(before: &Assignment, jobs: &JobSet, members: &[Member], strategy: &Strategy) -> Assignment {
    reassign(Some(before), jobs, members, strategy).expect("a member is available")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_replaced_pod_moves_no_job_between_two_pods_that_stay(
        count in 0usize..600,
        names in prop::collection::btree_set("[b-z2-9]{5}", 3..12),
        replaced in any::<prop::sample::Index>(),
        successor in "[b-z2-9]{6}",
    ) {
        let names: Vec<String> = names.into_iter().collect();
        let jobs = jobs(count);
        let before_members = pods(&names);
        let gone = before_members[replaced.index(names.len())].id.clone();
        let mut after_members: Vec<Member> =
            before_members.iter().filter(|member| member.id != gone).cloned().collect();
        // Six characters: never the name of a pod that stays.
        after_members.extend(pods(&[successor]));
        let new_pod = after_members.last().expect("just pushed").id.clone();
        for strategy in [Strategy::Jump, Strategy::Ring { vnodes: 16 }, Strategy::Sticky] {
            let before = assign(&jobs, &before_members, &strategy).expect("members");
            let after = step(&before, &jobs, &after_members, &strategy);
            let change = diff(&before, &after);
            for moved in &change.moved {
                prop_assert!(
                    moved.from == gone || moved.to == new_pod,
                    "{strategy}: {} moved from {} to {}, both stay", moved.key, moved.from, moved.to
                );
            }
            if strategy == Strategy::Sticky {
                // Exactly the lower bound: the replaced pod's jobs, plus what balance
                // makes a survivor hand the newcomer when the quotas fall differently.
                let floor = count / after_members.len();
                let ceil = count.div_ceil(after_members.len());
                prop_assert_eq!(change.moved.len(), lower_bound(&before, &after, floor, ceil));
                let departed_load = before.slice_of(&gone).map_or(0, |jobs| jobs.len());
                prop_assert!(change.moved.len() <= departed_load + 1);
            }
        }
    }

    #[test]
    fn generated_members_give_the_same_assignment_in_any_order(
        count in 0usize..300,
        names in prop::collection::btree_set("[b-z2-9]{5}", 1..8),
    ) {
        let jobs = jobs(count);
        let names: Vec<String> = names.into_iter().collect();
        let forward = pods(&names);
        let mut backward = forward.clone();
        backward.reverse();
        for strategy in strategies() {
            let a = assign(&jobs, &forward, &strategy).expect("members");
            let b = assign(&jobs, &backward, &strategy).expect("members");
            prop_assert_eq!(a.slices("demo", 1), b.slices("demo", 1), "{}", strategy);
        }
    }
}

#[test]
fn a_deployment_pool_beside_a_statefulset_pool_gets_a_share_of_the_jobs() {
    let jobs = jobs(1200);
    let mut members: Vec<Member> = (0..3).map(|ordinal| Member::new("db", ordinal)).collect();
    members.extend(pods(&["bbbbb".into(), "ccccc".into(), "ddddd".into()]));
    let assignment = assign(&jobs, &members, &Strategy::default()).expect("members");
    let (min, max) = assignment.load_range();
    assert_eq!((min, max), (200, 200), "balanced over six members");
    let web: BTreeSet<&MemberId> = assignment
        .iter()
        .map(|(_, owner)| owner)
        .filter(|owner| owner.pool == "web")
        .collect();
    assert_eq!(web.len(), 3, "every Deployment pod owns jobs");
}
