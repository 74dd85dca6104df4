//! Diffs between assignments: per-member changes, moved jobs, the lower bound.

use std::collections::BTreeSet;

use shoal_core::assignment::AssignmentError;
use shoal_core::diff::lower_bound;
use shoal_core::member::pool_members;
use shoal_core::{Assignment, JobSet, MemberId, Strategy, assign, diff};

fn id(ordinal: u32) -> MemberId {
    MemberId::new("w", ordinal)
}

fn from_slices(slices: &[(u32, &[&str])]) -> Assignment {
    Assignment::from_slices(
        slices
            .iter()
            .map(|(ordinal, jobs)| (id(*ordinal), JobSet::parse(jobs.iter().copied()).unwrap())),
    )
    .expect("consistent slices")
}

#[test]
fn a_diff_lists_added_removed_unchanged_and_moved_jobs_per_member() {
    let old = from_slices(&[(0, &["a", "b", "c"]), (1, &["d", "e"])]);
    // "c" moves 0 → 1, "e" is deleted, "f" is created on 2.
    let new = from_slices(&[(0, &["a", "b"]), (1, &["c", "d"]), (2, &["f"])]);
    let change = diff(&old, &new);
    let names =
        |keys: &[shoal_core::JobKey]| keys.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(names(&change.members[&id(0)].removed), vec!["c"]);
    assert_eq!(change.members[&id(0)].unchanged, 2);
    assert_eq!(names(&change.members[&id(1)].added), vec!["c"]);
    assert_eq!(names(&change.members[&id(1)].removed), vec!["e"]);
    assert_eq!(names(&change.members[&id(2)].added), vec!["f"]);
    assert_eq!(change.affected, BTreeSet::from([id(0), id(1), id(2)]));
    assert_eq!(change.moved.len(), 1);
    assert_eq!(
        (
            change.moved[0].key.as_str(),
            &change.moved[0].from,
            &change.moved[0].to
        ),
        ("c", &id(0), &id(1))
    );
    assert_eq!((change.created, change.deleted), (1, 1));
}

#[test]
fn an_unchanged_member_is_not_affected() {
    let old = from_slices(&[(0, &["a"]), (1, &["b"])]);
    let new = from_slices(&[(0, &["a"]), (1, &["c"])]);
    let change = diff(&old, &new);
    assert_eq!(change.affected, BTreeSet::from([id(1)]));
    assert!(!change.members[&id(0)].is_changed());
    assert!(change.moved.is_empty());
    assert_eq!(change.lower_bound, 0);
}

#[test]
fn the_lower_bound_counts_orphaned_keys_and_excess_over_the_cap() {
    // Member 2 leaves with 2 keys; member 0 holds 4 but the cap is 3.
    let old = from_slices(&[(0, &["a", "b", "c", "d"]), (1, &["e"]), (2, &["f", "g"])]);
    let new = from_slices(&[(0, &["a", "b", "c"]), (1, &["d", "e", "f", "g"])]);
    assert_eq!(lower_bound(&old, &new, 0, 3), 2 + 1);
    // A floor of 2 on two members needs no more than that.
    assert_eq!(lower_bound(&old, &new, 2, 4), 2);
    // With a floor of 3, member 1 keeps only "e" and must receive 2 more, and
    // the orphaned pair supplies them: the bound stays at the larger side.
    assert_eq!(lower_bound(&old, &new, 3, 4), 2);
}

#[test]
fn created_jobs_fill_a_deficit_without_counting_as_moves() {
    let old = from_slices(&[(0, &["a", "b"]), (1, &[])]);
    let new = from_slices(&[(0, &["a", "b"]), (1, &["c", "d"])]);
    assert_eq!(lower_bound(&old, &new, 2, 2), 0);
    let change = diff(&old, &new);
    assert_eq!(
        (change.min_load, change.max_load, change.lower_bound),
        (2, 2, 0)
    );
    assert_eq!(change.movement_ratio(), None);
}

#[test]
fn scaling_by_one_member_moves_at_least_the_lower_bound_and_reports_the_ratio() {
    let jobs = JobSet::parse((0..20_000).map(|i| format!("k{i}"))).unwrap();
    let old = assign(&jobs, &pool_members("w", 100), &Strategy::default()).unwrap();
    let new = assign(&jobs, &pool_members("w", 101), &Strategy::default()).unwrap();
    let change = diff(&old, &new);
    assert_eq!(change.max_load, 199);
    // The bound is a bound: no assignment this balanced can move less.
    let ratio = change.movement_ratio().expect("scaling needs moves");
    assert!(ratio >= 1.0, "ratio {ratio}");
    assert_eq!(
        change.lower_bound,
        lower_bound(&old, &new, change.min_load, 199)
    );
    assert_eq!(ratio, change.moved.len() as f64 / change.lower_bound as f64);
}

#[test]
fn slices_that_share_a_job_cannot_form_an_assignment() {
    let error = Assignment::from_slices([
        (id(1), JobSet::parse(["x", "y"]).unwrap()),
        (id(0), JobSet::parse(["y"]).unwrap()),
    ])
    .unwrap_err();
    assert_eq!(
        error,
        AssignmentError::DuplicateOwner {
            key: "y".to_owned(),
            first: id(0),
            second: id(1)
        }
    );
    assert_eq!(error.to_string(), "job \"y\" is owned by both w-0 and w-1");
}

#[test]
fn unchanged_slices_keep_their_revision_and_changed_ones_take_the_new_one() {
    let jobs = JobSet::parse(shoal_core::seed::SEED_STREAMS).unwrap();
    let two = assign(&jobs, &pool_members("w", 2), &Strategy::default()).unwrap();
    let first = two.slices("demo", 1);
    // Same members again: nothing changes, revision 1 stays.
    let again = two.slices_since(&first, "demo", 2);
    assert!(again.values().all(|slice| slice.revision == 1));
    let three = assign(&jobs, &pool_members("w", 3), &Strategy::default()).unwrap();
    let next = three.slices_since(&first, "demo", 2);
    assert!(
        next.values().all(|slice| slice.revision == 2),
        "every member changed"
    );
    let round_trip =
        Assignment::from_slices(next.iter().map(|(m, s)| (m.clone(), s.jobs.clone()))).unwrap();
    assert!(diff(&three, &round_trip).moved.is_empty());
}
