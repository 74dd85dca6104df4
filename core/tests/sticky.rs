//! Properties of the `sticky` strategy over random histories: perfect
//! balance, movement exactly the lower bound at every step (members joining,
//! leaving, failing over and returning, jobs added and removed), no job moving
//! between two surviving members beyond what balance forces, a fixed point on
//! unchanged inputs, and byte-identical results for any input order.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use shoal_core::diff::lower_bound;
use shoal_core::format::render_slice;
use shoal_core::member::pool_members;
use shoal_core::{Assignment, JobSet, Member, Strategy, assign, diff, reassign};

fn keys(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("stream:{i}:job")).collect()
}

fn job_set(keys: &BTreeSet<String>) -> JobSet {
    JobSet::parse(keys.iter().cloned()).expect("generated keys are valid")
}

/// Rendered slices and hashes, the bytes a member would read.
fn rendered(assignment: &Assignment) -> Vec<(String, String)> {
    assignment
        .slices("demo", 1)
        .values()
        .map(|slice| (slice.hash.clone(), render_slice(slice)))
        .collect()
}

fn sticky(in_force: &Assignment, jobs: &JobSet, members: &[Member]) -> Assignment {
    reassign(Some(in_force), jobs, members, &Strategy::Sticky).expect("a member is available")
}

/// Checks one step from `old` to `new` (computed over `members`): perfect
/// balance, moved == the lower bound for [floor, ceil], and no job moving
/// between two members that both stay beyond `lower bound − orphaned`, with
/// no member both gaining and losing jobs that stay.
fn check_step(old: &Assignment, new: &Assignment, members: &[Member]) -> Result<(), TestCaseError> {
    let available = members.iter().filter(|member| member.available).count();
    let k = new.jobs().len();
    let (floor, ceil) = (k / available, k.div_ceil(available));
    let (min, max) = new.load_range();
    prop_assert_eq!(
        (min, max),
        (floor, ceil),
        "loads of {} jobs over {} members",
        k,
        available
    );
    for (member, load) in new.loads() {
        if !new.is_available(&member) {
            prop_assert_eq!(load, 0, "unavailable {} owns jobs", member);
        }
    }
    let change = diff(old, new);
    let bound = lower_bound(old, new, floor, ceil);
    prop_assert_eq!(change.moved.len(), bound, "moved vs lower bound");
    prop_assert_eq!(change.lower_bound, bound);
    // Every orphaned job (owner gone) must move, so with moved == bound the jobs
    // moving between two members that both stay are exactly `bound − orphaned`,
    // the least any perfectly balanced assignment needs. And a member that stays
    // never both gives away and receives jobs that stay.
    let losers: BTreeSet<_> = change.moved.iter().map(|job| job.from.clone()).collect();
    let gainers: BTreeSet<_> = change.moved.iter().map(|job| job.to.clone()).collect();
    prop_assert!(
        losers.is_disjoint(&gainers),
        "members both losing and gaining: {:?}",
        losers.intersection(&gainers).collect::<Vec<_>>()
    );
    Ok(())
}

/// One change to a swarm.
#[derive(Debug, Clone)]
enum Event {
    ScaleUp,
    ScaleDown,
    /// Fail over the member at this position (mod the pool size).
    Fail(usize),
    /// Bring back the failed member at this position (mod the failed count).
    Return(usize),
    AddJobs(usize),
    /// Remove this many jobs, from this position on (mod the job count).
    RemoveJobs(usize, usize),
}

fn event() -> impl proptest::strategy::Strategy<Value = Event> {
    prop_oneof![
        Just(Event::ScaleUp),
        Just(Event::ScaleDown),
        any::<usize>().prop_map(Event::Fail),
        any::<usize>().prop_map(Event::Return),
        (1usize..40).prop_map(Event::AddJobs),
        (1usize..40, any::<usize>()).prop_map(|(count, at)| Event::RemoveJobs(count, at)),
    ]
}

struct Swarm {
    size: u32,
    failed: BTreeSet<u32>,
    jobs: BTreeSet<String>,
    next_key: usize,
}

impl Swarm {
    fn members(&self) -> Vec<Member> {
        (0..self.size)
            .map(|ordinal| {
                Member::new("w", ordinal).with_available(!self.failed.contains(&ordinal))
            })
            .collect()
    }

    /// Applies `event` unless it would leave no member available.
    fn apply(&mut self, event: &Event) {
        match *event {
            Event::ScaleUp => self.size += 1,
            Event::ScaleDown => {
                let last = self.size - 1;
                let available_after = (0..last).filter(|o| !self.failed.contains(o)).count();
                if available_after > 0 {
                    self.size = last;
                    self.failed.remove(&last);
                }
            }
            Event::Fail(at) => {
                let ordinal = (at % self.size as usize) as u32;
                if self.failed.len() + 1 < self.size as usize {
                    self.failed.insert(ordinal);
                }
            }
            Event::Return(at) if !self.failed.is_empty() => {
                let ordinal = *self
                    .failed
                    .iter()
                    .nth(at % self.failed.len())
                    .expect("in range");
                self.failed.remove(&ordinal);
            }
            Event::AddJobs(count) => {
                self.jobs.extend(keys(self.next_key..self.next_key + count));
                self.next_key += count;
            }
            Event::RemoveJobs(count, at) if !self.jobs.is_empty() => {
                let start = at % self.jobs.len();
                let gone: Vec<String> = self.jobs.iter().skip(start).take(count).cloned().collect();
                for key in gone {
                    self.jobs.remove(&key);
                }
            }
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_step_of_a_random_history_is_balanced_and_moves_exactly_the_lower_bound(
        start_jobs in 0usize..400,
        start_size in 1u32..20,
        events in prop::collection::vec(event(), 1..25),
    ) {
        let mut swarm = Swarm {
            size: start_size,
            failed: BTreeSet::new(),
            jobs: keys(0..start_jobs).into_iter().collect(),
            next_key: start_jobs,
        };
        let mut in_force = assign(&job_set(&swarm.jobs), &swarm.members(), &Strategy::Sticky).unwrap();
        for event in &events {
            swarm.apply(event);
            let members = swarm.members();
            let jobs = job_set(&swarm.jobs);
            let next = sticky(&in_force, &jobs, &members);
            check_step(&in_force, &next, &members)?;
            // Recomputing with nothing changed is the same revision.
            prop_assert_eq!(rendered(&sticky(&next, &jobs, &members)), rendered(&next));
            in_force = next;
        }
    }

    #[test]
    fn scaling_by_one_and_failing_or_returning_a_member_move_exactly_the_lower_bound(
        k in 0usize..3000,
        n in 2u32..60,
        failing in any::<prop::sample::Index>(),
    ) {
        let jobs = JobSet::parse(keys(0..k)).unwrap();
        let members = pool_members("w", n);
        let base = assign(&jobs, &members, &Strategy::Sticky).unwrap();
        check_step(&base, &base, &members)?;
        let grown = pool_members("w", n + 1);
        check_step(&base, &sticky(&base, &jobs, &grown), &grown)?;
        let shrunk = pool_members("w", n - 1);
        check_step(&base, &sticky(&base, &jobs, &shrunk), &shrunk)?;
        // A middle member fails over, then returns.
        let failed_ordinal = failing.index(n as usize);
        let mut degraded_members = members.clone();
        degraded_members[failed_ordinal].available = false;
        let degraded = sticky(&base, &jobs, &degraded_members);
        check_step(&base, &degraded, &degraded_members)?;
        // Only the failed member's jobs moved.
        for job in diff(&base, &degraded).moved {
            prop_assert_eq!(job.from.ordinal(), Some(failed_ordinal as u32));
        }
        let recovered = sticky(&degraded, &jobs, &members);
        check_step(&degraded, &recovered, &members)?;
        // Returning moves only jobs into the returning member.
        for job in diff(&degraded, &recovered).moved {
            prop_assert_eq!(job.to.ordinal(), Some(failed_ordinal as u32));
        }
    }

    #[test]
    fn adding_a_job_moves_no_other_job_and_removing_one_moves_at_most_one(
        k in 1usize..3000,
        n in 1u32..60,
        removed in any::<prop::sample::Index>(),
    ) {
        let members = pool_members("w", n);
        let base = assign(&JobSet::parse(keys(0..k)).unwrap(), &members, &Strategy::Sticky).unwrap();
        let mut more = keys(0..k);
        more.push("an-added-job".to_owned());
        let grown = sticky(&base, &JobSet::parse(more).unwrap(), &members);
        check_step(&base, &grown, &members)?;
        prop_assert_eq!(diff(&base, &grown).moved.len(), 0);
        let mut fewer = keys(0..k);
        fewer.remove(removed.index(k));
        let shrunk = sticky(&base, &JobSet::parse(fewer).unwrap(), &members);
        check_step(&base, &shrunk, &members)?;
        prop_assert!(diff(&base, &shrunk).moved.len() <= 1);
    }

    #[test]
    fn the_result_is_byte_identical_for_any_order_of_jobs_and_members(
        (key_list, shuffled_keys) in (0usize..300).prop_flat_map(|count| {
            let list = keys(0..count);
            (Just(list.clone()), Just(list).prop_shuffle())
        }),
        (availability, member_order) in prop::collection::vec(prop::bool::weighted(0.8), 1..12)
            .prop_flat_map(|availability| {
                let order: Vec<usize> = (0..availability.len()).collect();
                (Just(availability), Just(order).prop_shuffle())
            }),
        grown_by in 0u32..3,
    ) {
        prop_assume!(availability.iter().any(|available| *available));
        let members: Vec<Member> = availability
            .iter()
            .enumerate()
            .map(|(ordinal, available)| Member::new("w", ordinal as u32).with_available(*available))
            .collect();
        let reordered: Vec<Member> = member_order.iter().map(|&i| members[i].clone()).collect();
        let in_order = JobSet::parse(key_list).unwrap();
        let shuffled = JobSet::parse(shuffled_keys).unwrap();
        let first = assign(&in_order, &members, &Strategy::Sticky).unwrap();
        let second = assign(&shuffled, &reordered, &Strategy::Sticky).unwrap();
        prop_assert_eq!(rendered(&first), rendered(&second));
        // And the next step from either, over a grown pool listed in another order.
        let mut next_members = members.clone();
        next_members.extend((0..grown_by).map(|i| Member::new("w", availability.len() as u32 + i)));
        let mut reversed = next_members.clone();
        reversed.reverse();
        prop_assert_eq!(
            rendered(&sticky(&first, &in_order, &next_members)),
            rendered(&sticky(&second, &shuffled, &reversed))
        );
    }
}

#[test]
fn the_first_assignment_is_bounded_spread_brought_to_perfect_balance() {
    let jobs = JobSet::parse(shoal_core::seed::SEED_STREAMS).unwrap();
    for n in 1..=6 {
        let members = pool_members("w", n);
        let bounded = assign(&jobs, &members, &Strategy::default()).unwrap();
        let first = assign(&jobs, &members, &Strategy::Sticky).unwrap();
        let (min, max) = first.load_range();
        assert_eq!((min, max), (27 / n as usize, 27usize.div_ceil(n as usize)));
        // It moves only what bounded's spread must give up for the floor.
        let change = diff(&bounded, &first);
        assert_eq!(
            change.moved.len(),
            lower_bound(&bounded, &first, min, max),
            "n = {n}"
        );
    }
}

#[test]
fn the_sandbox_demo_moves_exactly_the_lower_bound_at_every_step() {
    // 27 jobs, 2 → 3 → 4 → 3 members, as in the sandbox walkthrough.
    let jobs = JobSet::parse(shoal_core::seed::SEED_STREAMS).unwrap();
    let mut in_force = assign(&jobs, &pool_members("w", 2), &Strategy::Sticky).unwrap();
    let mut moved = Vec::new();
    for n in [3, 4, 3] {
        let next = sticky(&in_force, &jobs, &pool_members("w", n));
        let change = diff(&in_force, &next);
        assert_eq!(change.moved.len(), change.lower_bound, "step to {n}");
        moved.push(change.moved.len());
        in_force = next;
    }
    // 2→3: 27/3 = 9 each, the newcomer takes 9; 3→4: floor 6, ceil 7 (3 members),
    // the newcomer takes 6; 4→3: the leaver's 6 (or 7) jobs are re-homed.
    assert_eq!(moved[0], 9);
    assert_eq!(moved[1], 6);
    assert!(moved[2] == 6 || moved[2] == 7, "{moved:?}");
}

#[test]
fn a_whole_new_job_list_is_spread_like_a_first_assignment() {
    let members = pool_members("w", 5);
    let old = assign(
        &JobSet::parse(keys(0..100)).unwrap(),
        &members,
        &Strategy::Sticky,
    )
    .unwrap();
    let replaced = JobSet::parse(keys(1000..1100)).unwrap();
    assert_eq!(
        rendered(&sticky(&old, &replaced, &members)),
        rendered(&assign(&replaced, &members, &Strategy::Sticky).unwrap())
    );
}

#[test]
fn a_recorded_assignment_round_trips_through_owner_indices() {
    let jobs = JobSet::parse(keys(0..50)).unwrap();
    let mut members = pool_members("w", 4);
    members[1].available = false;
    let assignment = assign(&jobs, &members, &Strategy::Sticky).unwrap();
    // Members given in another order: indices refer to that order.
    let given: Vec<Member> = members.iter().rev().cloned().collect();
    let owners: Vec<u32> = assignment
        .iter()
        .map(|(_, owner)| given.iter().position(|m| &m.id == owner).unwrap() as u32)
        .collect();
    let rebuilt = Assignment::from_owners(&given, jobs.clone(), &owners).unwrap();
    assert_eq!(rebuilt, assignment);
    // A damaged record is refused with a message naming what is wrong.
    assert_eq!(
        Assignment::from_owners(&given, jobs.clone(), &owners[1..])
            .unwrap_err()
            .to_string(),
        "49 owners recorded for 50 jobs"
    );
    let mut out_of_range = owners.clone();
    out_of_range[0] = 9;
    assert_eq!(
        Assignment::from_owners(&given, jobs.clone(), &out_of_range)
            .unwrap_err()
            .to_string(),
        "job \"stream:0:job\" is owned by member #9, but only 4 members are listed"
    );
    let mut on_unavailable = owners;
    on_unavailable[0] = 2; // given[2] is w-1, unavailable
    assert_eq!(
        Assignment::from_owners(&given, jobs, &on_unavailable)
            .unwrap_err()
            .to_string(),
        "job \"stream:0:job\" is owned by w-1, which is listed as unavailable"
    );
}

#[test]
fn sticky_reads_from_json_by_name() {
    assert_eq!(
        serde_json::from_str::<Strategy>(r#"{"name":"sticky"}"#).unwrap(),
        Strategy::Sticky
    );
    assert_eq!(Strategy::Sticky.to_string(), "sticky");
    assert!(Strategy::Sticky.is_stateful());
    assert!(!Strategy::default().is_stateful());
}
