//! Properties of weighted and dedicated jobs under the `sticky` strategy
//! (`reassign_weighted`) over random histories: the balance bound
//! `T − w_max ≤ load ≤ ⌊T⌋ + w_max`, the movement bound between surviving
//! members, no movement at all when every survivor is already within bound,
//! dedicated exclusivity and release, a fixed point on unchanged inputs,
//! byte-identical results for any input order, and plain settings giving
//! exactly the unweighted `sticky` result.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use shoal_core::format::render_slice;
use shoal_core::job::{JobSettingError, MAX_WEIGHT};
use shoal_core::member::pool_members;
use shoal_core::{
    AssignError, Assignment, JobKey, JobSet, JobSetting, JobSettings, Member, MemberId, Strategy,
    diff, reassign, reassign_weighted,
};

fn key(i: usize) -> String {
    format!("stream:{i}:job")
}

/// Rendered slices and hashes, the bytes a member would read.
fn rendered(assignment: &Assignment) -> Vec<(String, String)> {
    assignment
        .slices("demo", 1)
        .values()
        .map(|slice| (slice.hash.clone(), render_slice(slice)))
        .collect()
}

/// A swarm's inputs: members (some failed), jobs with weight and dedication.
#[derive(Debug, Clone)]
struct Swarm {
    size: u32,
    failed: BTreeSet<u32>,
    jobs: BTreeMap<String, JobSetting>,
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

    fn available(&self) -> usize {
        self.size as usize - self.failed.len()
    }

    fn job_set(&self) -> JobSet {
        JobSet::parse(self.jobs.keys().cloned()).expect("generated keys are valid")
    }

    fn settings(&self) -> JobSettings {
        let mut settings = JobSettings::new();
        for (key, setting) in &self.jobs {
            settings
                .insert(JobKey::new(key.clone()).unwrap(), *setting)
                .expect("generated settings are valid");
        }
        settings
    }

    /// Whether every job has weight 1 and none is dedicated: the inputs
    /// `reassign_weighted` hands to the unweighted `sticky` strategy.
    fn plain(&self) -> bool {
        self.jobs
            .values()
            .all(|setting| *setting == JobSetting::default())
    }

    fn dedicated(&self) -> usize {
        self.jobs
            .values()
            .filter(|setting| setting.dedicated)
            .count()
    }

    /// Whether the dedicated jobs leave room for the others.
    fn feasible(&self) -> bool {
        let dedicated = self.dedicated();
        dedicated < self.available()
            || (dedicated == self.available() && dedicated == self.jobs.len())
    }

    /// Applies `event` unless it would leave no member or no room for the jobs.
    fn apply(&mut self, event: &Event) {
        let before = self.clone();
        match *event {
            Event::ScaleUp => self.size += 1,
            Event::ScaleDown if self.size > 1 => {
                self.size -= 1;
                self.failed.remove(&self.size);
            }
            Event::Fail(at) => {
                self.failed.insert((at % self.size as usize) as u32);
            }
            Event::Return(at) if !self.failed.is_empty() => {
                let ordinal = *self.failed.iter().nth(at % self.failed.len()).unwrap();
                self.failed.remove(&ordinal);
            }
            Event::AddJob(weight, dedicated) => {
                self.jobs
                    .insert(key(self.next_key), JobSetting { weight, dedicated });
                self.next_key += 1;
            }
            Event::RemoveJobs(count, at) if !self.jobs.is_empty() => {
                let start = at % self.jobs.len();
                let gone: Vec<String> = self.jobs.keys().skip(start).take(count).cloned().collect();
                for key in gone {
                    self.jobs.remove(&key);
                }
            }
            Event::Reweight(at, weight) if !self.jobs.is_empty() => {
                let index = at % self.jobs.len();
                self.jobs.values_mut().nth(index).unwrap().weight = weight;
            }
            Event::ToggleDedicated(at) if !self.jobs.is_empty() => {
                let index = at % self.jobs.len();
                let setting = self.jobs.values_mut().nth(index).unwrap();
                setting.dedicated = !setting.dedicated;
            }
            _ => {}
        }
        if self.available() == 0 || !self.feasible() {
            *self = before;
        }
    }
}

/// One change to a swarm.
#[derive(Debug, Clone)]
enum Event {
    ScaleUp,
    ScaleDown,
    Fail(usize),
    Return(usize),
    AddJob(u32, bool),
    RemoveJobs(usize, usize),
    Reweight(usize, u32),
    ToggleDedicated(usize),
}

fn weight() -> impl proptest::strategy::Strategy<Value = u32> {
    prop_oneof![3 => Just(1u32), 2 => 1u32..10, 1 => 1u32..1000]
}

fn event() -> impl proptest::strategy::Strategy<Value = Event> {
    prop_oneof![
        Just(Event::ScaleUp),
        Just(Event::ScaleDown),
        any::<usize>().prop_map(Event::Fail),
        any::<usize>().prop_map(Event::Return),
        (weight(), prop::bool::weighted(0.1)).prop_map(|(w, d)| Event::AddJob(w, d)),
        (1usize..10, any::<usize>()).prop_map(|(count, at)| Event::RemoveJobs(count, at)),
        (any::<usize>(), weight()).prop_map(|(at, w)| Event::Reweight(at, w)),
        any::<usize>().prop_map(Event::ToggleDedicated),
    ]
}

fn swarm() -> impl proptest::strategy::Strategy<Value = Swarm> {
    (
        1u32..12,
        prop::collection::vec((weight(), prop::bool::weighted(0.05)), 0..120),
    )
        .prop_map(|(size, entries)| {
            let mut swarm = Swarm {
                size,
                failed: BTreeSet::new(),
                jobs: BTreeMap::new(),
                next_key: 0,
            };
            for (weight, dedicated) in entries {
                swarm.apply(&Event::AddJob(weight, dedicated));
            }
            swarm
        })
}

fn weighted(in_force: Option<&Assignment>, swarm: &Swarm) -> Assignment {
    reassign_weighted(
        in_force,
        &swarm.job_set(),
        &swarm.settings(),
        &swarm.members(),
        &Strategy::Sticky,
    )
    .expect("feasible inputs are assigned")
}

/// The shared (not dedicated-holding) available members of `new`, with
/// their weighted loads, plus the total shared weight and heaviest shared job.
struct SharedView {
    loads: BTreeMap<MemberId, u64>,
    total: u64,
    heaviest: u64,
}

fn shared_view(new: &Assignment, swarm: &Swarm) -> SharedView {
    let dedicated_owners: BTreeSet<MemberId> = swarm
        .jobs
        .iter()
        .filter(|(_, setting)| setting.dedicated)
        .map(|(key, _)| new.owner_of(key).unwrap().clone())
        .collect();
    let mut loads: BTreeMap<MemberId, u64> = new
        .members()
        .iter()
        .filter(|member| new.is_available(member) && !dedicated_owners.contains(member))
        .map(|member| (member.clone(), 0))
        .collect();
    let (mut total, mut heaviest) = (0, 0);
    for (key, setting) in swarm.jobs.iter().filter(|(_, setting)| !setting.dedicated) {
        let weight = u64::from(setting.weight);
        *loads
            .get_mut(new.owner_of(key).unwrap())
            .expect("shared job on a shared member") += weight;
        total += weight;
        heaviest = heaviest.max(weight);
    }
    SharedView {
        loads,
        total,
        heaviest,
    }
}

/// Checks one step from `old` (over `before`) to `new` (over `after`).
fn check_step(old: &Assignment, new: &Assignment, after: &Swarm) -> Result<(), TestCaseError> {
    // Dedicated exclusivity: a member of its own, holding nothing else.
    let mut holders = BTreeSet::new();
    for (key, setting) in &after.jobs {
        if setting.dedicated {
            let owner = new.owner_of(key).unwrap().clone();
            prop_assert!(
                new.is_available(&owner),
                "dedicated {} on unavailable {}",
                key,
                owner
            );
            prop_assert_eq!(
                new.slice_of(&owner).unwrap().len(),
                1,
                "{} shares {}",
                key,
                owner
            );
            prop_assert!(holders.insert(owner));
        }
    }
    // Balance bound over the shared members: T − w_max ≤ load ≤ ⌊T⌋ + w_max.
    let view = shared_view(new, after);
    let n = view.loads.len() as u64;
    if view.total > 0 {
        for (member, &load) in &view.loads {
            prop_assert!(
                (load + view.heaviest) * n >= view.total,
                "{} holds {} < T - w_max (W={}, n'={}, w_max={})",
                member,
                load,
                view.total,
                n,
                view.heaviest
            );
            prop_assert!(
                load <= view.total / n + view.heaviest,
                "{} holds {} > floor(T) + w_max (W={}, n'={}, w_max={})",
                member,
                load,
                view.total,
                n,
                view.heaviest
            );
        }
    }
    for member in new.members() {
        if !new.is_available(member) {
            prop_assert!(
                new.slice_of(member).unwrap().is_empty(),
                "unavailable {} owns jobs",
                member
            );
        }
    }
    // Movement bound between surviving shared members.
    let mut held: BTreeMap<&MemberId, u64> = BTreeMap::new();
    let mut between_survivors = 0u64;
    for (key, setting) in after.jobs.iter().filter(|(_, setting)| !setting.dedicated) {
        let Some(from) = old.owner_of(key) else {
            continue;
        };
        if !view.loads.contains_key(from) {
            continue;
        }
        let weight = u64::from(setting.weight);
        *held.entry(from).or_default() += weight;
        if new.owner_of(key).unwrap() != from {
            between_survivors += weight;
        }
    }
    let floor = view.total.checked_div(n).unwrap_or(0);
    if after.plain() {
        // Plain settings take the unweighted `sticky` path, which balances
        // to ⌊T⌋ or ⌈T⌉ rather than within w_max; every job it moves
        // between survivors leaves a member holding more than ⌊T⌋.
        let above_floor: u64 = view
            .loads
            .keys()
            .map(|member| held.get(member).copied().unwrap_or(0).saturating_sub(floor))
            .sum();
        prop_assert!(
            between_survivors <= above_floor,
            "plain: moved {} between survivors, more than the {} held above floor {}",
            between_survivors,
            above_floor,
            floor
        );
        return Ok(());
    }
    let cap = floor + view.heaviest;
    let mut bound_times_n = 0u64;
    for member in view.loads.keys() {
        let held = held.get(member).copied().unwrap_or(0);
        if held > cap {
            bound_times_n += (held - floor) * n;
        }
        if (held + view.heaviest) * n < view.total {
            bound_times_n += view.total - held * n;
        }
    }
    prop_assert!(
        between_survivors * n.max(1) <= bound_times_n,
        "moved {} between survivors, bound {}/{}",
        between_survivors,
        bound_times_n,
        n
    );
    // Sticky: with every survivor already within bound, nothing moves between them.
    let all_within = view.loads.keys().all(|member| {
        let held = held.get(member).copied().unwrap_or(0);
        held <= cap && (held + view.heaviest) * n >= view.total
    });
    if all_within {
        prop_assert_eq!(between_survivors, 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_step_of_a_weighted_history_keeps_the_balance_and_movement_bounds(
        start in swarm(),
        events in prop::collection::vec(event(), 1..30),
    ) {
        let mut swarm = start;
        let mut in_force = weighted(None, &swarm);
        check_step(&in_force, &in_force, &swarm)?;
        for event in &events {
            let before = swarm.clone();
            swarm.apply(event);
            let next = weighted(Some(&in_force), &swarm);
            check_step(&in_force, &next, &swarm)?;
            // A dedicated job whose member is still available keeps it.
            for (key, setting) in &swarm.jobs {
                let was_dedicated = before.jobs.get(key).is_some_and(|old| old.dedicated);
                if setting.dedicated && was_dedicated {
                    let holder = in_force.owner_of(key).unwrap();
                    if next.is_available(holder) {
                        prop_assert_eq!(next.owner_of(key).unwrap(), holder, "{} left its member", key);
                    }
                }
            }
            // Recomputing with nothing changed is the same revision.
            prop_assert_eq!(rendered(&weighted(Some(&next), &swarm)), rendered(&next));
            in_force = next;
        }
    }

    #[test]
    fn plain_settings_give_exactly_the_unweighted_sticky_result(
        start in swarm(),
        events in prop::collection::vec(event(), 1..10),
    ) {
        // Every job written with weight 1 and not dedicated: plain.
        let mut swarm = start;
        for setting in swarm.jobs.values_mut() {
            *setting = JobSetting::default();
        }
        let mut in_force = reassign(None, &swarm.job_set(), &swarm.members(), &Strategy::Sticky).unwrap();
        prop_assert_eq!(&weighted(None, &swarm), &in_force);
        for event in &events {
            if matches!(event, Event::AddJob(..) | Event::Reweight(..) | Event::ToggleDedicated(..)) {
                continue;
            }
            swarm.apply(event);
            let unweighted = reassign(Some(&in_force), &swarm.job_set(), &swarm.members(), &Strategy::Sticky).unwrap();
            prop_assert_eq!(&weighted(Some(&in_force), &swarm), &unweighted);
            in_force = unweighted;
        }
    }

    #[test]
    fn the_result_is_byte_identical_for_any_order_of_members_and_settings(
        start in swarm(),
        events in prop::collection::vec(event(), 0..6),
        rotation in any::<prop::sample::Index>(),
    ) {
        let mut swarm = start;
        let mut in_force = weighted(None, &swarm);
        for event in &events {
            swarm.apply(event);
            in_force = weighted(Some(&in_force), &swarm);
        }
        let mut members = swarm.members();
        let turn = rotation.index(members.len());
        members.rotate_left(turn);
        members.reverse();
        let mut settings = JobSettings::new();
        for (key, setting) in swarm.jobs.iter().rev() {
            settings.insert(JobKey::new(key.clone()).unwrap(), *setting).unwrap();
        }
        let jobs = JobSet::parse(swarm.jobs.keys().rev().cloned()).unwrap();
        let reordered = reassign_weighted(Some(&in_force), &jobs, &settings, &members, &Strategy::Sticky).unwrap();
        prop_assert_eq!(rendered(&reordered), rendered(&weighted(Some(&in_force), &swarm)));
    }

    #[test]
    fn adding_a_shared_job_moves_no_other_job(
        start in swarm(),
        added_weight in weight(),
    ) {
        let mut swarm = start;
        let base = weighted(None, &swarm);
        swarm.apply(&Event::AddJob(added_weight, false));
        let grown = weighted(Some(&base), &swarm);
        prop_assert_eq!(diff(&base, &grown).moved.len(), 0);
    }
}

fn settings_of(entries: &[(&str, u32, bool)]) -> JobSettings {
    let mut settings = JobSettings::new();
    for &(key, weight, dedicated) in entries {
        settings
            .insert(JobKey::new(key).unwrap(), JobSetting { weight, dedicated })
            .unwrap();
    }
    settings
}

#[test]
fn a_removed_dedicated_job_releases_its_member_to_the_shared_jobs() {
    let members = pool_members("w", 3);
    let keys = ["a", "b", "c", "d", "e", "f", "reserved"];
    let jobs = JobSet::parse(keys).unwrap();
    let settings = settings_of(&[("reserved", 1, true)]);
    let first = reassign_weighted(None, &jobs, &settings, &members, &Strategy::Sticky).unwrap();
    let holder = first.owner_of("reserved").unwrap().clone();
    assert_eq!(first.slice_of(&holder).unwrap().len(), 1);
    let without = JobSet::parse(keys[..6].iter().copied()).unwrap();
    let released = reassign_weighted(
        Some(&first),
        &without,
        &JobSettings::new(),
        &members,
        &Strategy::Sticky,
    )
    .unwrap();
    assert_eq!(released.slice_of(&holder).unwrap().len(), 2, "{released:?}");
}

#[test]
fn more_dedicated_jobs_than_members_is_refused_naming_the_counts() {
    let members = pool_members("w", 2);
    let jobs = JobSet::parse(["a", "b", "c"]).unwrap();
    let settings = settings_of(&[("a", 1, true), ("b", 1, true)]);
    let error = reassign_weighted(None, &jobs, &settings, &members, &Strategy::Sticky).unwrap_err();
    assert_eq!(
        error,
        AssignError::TooManyDedicated {
            dedicated: 2,
            members: 2,
            others: 1
        }
    );
    assert_eq!(
        error.to_string(),
        "2 dedicated jobs need a member each plus one for the other 1 jobs, but only 2 members are available"
    );
}

#[test]
fn a_stateless_strategy_given_weights_refuses_naming_itself() {
    let members = pool_members("w", 2);
    let jobs = JobSet::parse(["a", "b"]).unwrap();
    let settings = settings_of(&[("a", 5, false)]);
    for strategy in [
        Strategy::Bounded { epsilon: 0.0 },
        Strategy::Jump,
        Strategy::Ring { vnodes: 8 },
    ] {
        let error = reassign_weighted(None, &jobs, &settings, &members, &strategy).unwrap_err();
        assert_eq!(
            error,
            AssignError::SettingsNotSupported {
                strategy: strategy.name()
            }
        );
        assert!(error.to_string().contains(strategy.name()), "{error}");
    }
}

#[test]
fn a_setting_for_an_unlisted_job_is_refused_naming_the_key() {
    let members = pool_members("w", 2);
    let jobs = JobSet::parse(["a"]).unwrap();
    let settings = settings_of(&[("ghost", 2, false)]);
    let error = reassign_weighted(None, &jobs, &settings, &members, &Strategy::Sticky).unwrap_err();
    assert_eq!(
        error,
        AssignError::SettingForUnlistedJob {
            key: "ghost".to_owned()
        }
    );
}

#[test]
fn weights_out_of_range_and_repeated_settings_are_refused() {
    let mut settings = JobSettings::new();
    for weight in [0, MAX_WEIGHT + 1] {
        let error = settings
            .insert(
                JobKey::new("a").unwrap(),
                JobSetting {
                    weight,
                    dedicated: false,
                },
            )
            .unwrap_err();
        assert_eq!(
            error,
            JobSettingError::WeightOutOfRange {
                key: "a".to_owned(),
                weight: u64::from(weight)
            }
        );
    }
    settings
        .insert(JobKey::new("a").unwrap(), JobSetting::default())
        .unwrap();
    assert_eq!(
        settings.insert(JobKey::new("a").unwrap(), JobSetting::default()),
        Err(JobSettingError::Repeated {
            key: "a".to_owned()
        })
    );
}

#[test]
fn a_heavy_job_counts_as_its_weight_in_the_balance() {
    // One job of weight 6 and six of weight 1 over two members: 6 against 6.
    let members = pool_members("w", 2);
    let jobs = JobSet::parse(["heavy", "a", "b", "c", "d", "e", "f"]).unwrap();
    let settings = settings_of(&[("heavy", 6, false)]);
    let assignment =
        reassign_weighted(None, &jobs, &settings, &members, &Strategy::Sticky).unwrap();
    let heavy_owner = assignment.owner_of("heavy").unwrap().clone();
    assert_eq!(
        assignment.slice_of(&heavy_owner).unwrap().len(),
        1,
        "{assignment:?}"
    );
}
