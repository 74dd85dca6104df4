//! Bad job lists are rejected with one error naming every offending key.

use shoal_core::job::{JobKey, JobKeyError, JobProblemReason, MAX_KEY_BYTES};
use shoal_core::{InvalidJobs, JobSet};

fn rejection(keys: &[&str]) -> InvalidJobs {
    JobSet::parse(keys.iter().copied()).expect_err("the list is invalid")
}

#[test]
fn an_empty_key_is_rejected_by_position() {
    let error = rejection(&["stream:a", ""]);
    assert_eq!(
        error.to_string(),
        "invalid job list (1 problem): jobs[1] \"\": empty key"
    );
}

#[test]
fn a_key_longer_than_253_bytes_is_rejected_with_its_length() {
    let long = "x".repeat(MAX_KEY_BYTES + 1);
    let error = rejection(&[&long]);
    assert_eq!(
        error.to_string(),
        format!(
            "invalid job list (1 problem): jobs[0] \"{}\"…: 254 bytes, longer than 253",
            "x".repeat(64)
        )
    );
    // Exactly 253 bytes (multi-byte characters count in bytes) is fine.
    let edge = format!("{}é", "y".repeat(MAX_KEY_BYTES - 2));
    assert_eq!(edge.len(), MAX_KEY_BYTES);
    assert!(JobSet::parse([edge]).is_ok());
}

#[test]
fn a_key_with_a_control_character_is_rejected_with_its_offset() {
    let error = rejection(&["stream:\ttab", "ok", "bell\u{7}"]);
    assert_eq!(
        error.to_string(),
        "invalid job list (2 problems): jobs[0] \"stream:\\ttab\": control character '\\t' at byte 7; \
         jobs[2] \"bell\\u{7}\": control character '\\u{7}' at byte 4"
    );
}

#[test]
fn duplicates_name_every_repeat_and_the_first_occurrence() {
    let error = rejection(&["b", "a", "b", "c", "b", "a"]);
    assert_eq!(
        error.to_string(),
        "invalid job list (3 problems): jobs[2] \"b\": duplicate of jobs[0]; \
         jobs[4] \"b\": duplicate of jobs[0]; jobs[5] \"a\": duplicate of jobs[1]"
    );
}

#[test]
fn every_kind_of_problem_is_reported_in_one_error_in_input_order() {
    let error = rejection(&["dup", "", "new\nline", "dup", "fine"]);
    let reasons: Vec<(usize, JobProblemReason)> = error
        .problems
        .iter()
        .map(|problem| (problem.position, problem.reason.clone()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (1, JobProblemReason::Invalid(JobKeyError::Empty)),
            (
                2,
                JobProblemReason::Invalid(JobKeyError::ControlCharacter {
                    character: '\n',
                    offset: 3
                })
            ),
            (3, JobProblemReason::Duplicate { first_position: 0 }),
        ]
    );
    assert_eq!(
        error.to_string(),
        "invalid job list (3 problems): jobs[1] \"\": empty key; \
         jobs[2] \"new\\nline\": control character '\\n' at byte 3; jobs[3] \"dup\": duplicate of jobs[0]"
    );
}

#[test]
fn a_valid_list_is_sorted_by_bytes_whatever_the_input_order() {
    let jobs = JobSet::parse(["b", "B", "a", "é", "aa"]).expect("valid");
    let keys: Vec<&str> = jobs.iter().map(JobKey::as_str).collect();
    assert_eq!(keys, vec!["B", "a", "aa", "b", "é"]);
    assert!(jobs.contains("aa"));
    assert!(!jobs.contains("c"));
}

#[test]
fn a_single_key_is_validated_on_its_own() {
    assert_eq!(JobKey::new("").unwrap_err().to_string(), "empty key");
    assert_eq!(
        JobKey::new("ok").map(|key| key.to_string()),
        Ok("ok".to_owned())
    );
}

proptest::proptest! {
    #[test]
    fn a_set_is_a_subset_exactly_when_the_other_contains_each_of_its_keys(
        held in proptest::collection::btree_set("[a-e]{1,2}", 0..12),
        want in proptest::collection::btree_set("[a-e]{1,2}", 0..12),
    ) {
        let held = JobSet::parse(held).expect("valid keys");
        let want = JobSet::parse(want).expect("valid keys");
        let key_by_key = held.iter().all(|key| want.contains(key.as_str()));
        proptest::prop_assert_eq!(held.is_subset(&want), key_by_key);
    }
}
