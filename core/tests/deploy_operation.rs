//! Operations: the enforced state machine (exhaustive over every pair of
//! states), the operation hash, and the operations a placement change needs.

use std::collections::BTreeMap;

use proptest::prelude::*;
use shoal_core::MemberId;
use shoal_core::deploy::operation::{
    ApprovalError, FailureReason, InvalidTransition, approve, operation_hash, supersede,
};
use shoal_core::deploy::{InstanceId, Operation, OperationState, OperationType, operations_for};

use OperationState::*;

fn web(ordinal: u32) -> InstanceId {
    InstanceId::new("web", ordinal)
}

fn id(pool: &str, ordinal: u32) -> MemberId {
    MemberId::new(pool, ordinal)
}

/// The allowed transitions, written out independently of the code.
const ALLOWED: [(OperationState, OperationState); 7] = [
    (Pending, PendingApproval),
    (Pending, Approved),
    (Pending, Failed),
    (PendingApproval, Approved),
    (PendingApproval, Failed),
    (Approved, Succeeded),
    (Approved, Failed),
];

#[test]
fn every_transition_outside_the_table_is_refused_naming_both_states() {
    let mut refused = 0;
    for from in OperationState::ALL {
        for to in OperationState::ALL {
            let result = from.advance(to);
            if ALLOWED.contains(&(from, to)) {
                assert_eq!(result, Ok(to), "{from} -> {to}");
            } else {
                refused += 1;
                assert_eq!(
                    result,
                    Err(InvalidTransition { from, to }),
                    "{from} -> {to}"
                );
                assert_eq!(
                    result.unwrap_err().to_string(),
                    format!("an operation in state {from} cannot become {to}")
                );
            }
        }
    }
    assert_eq!(refused, 25 - ALLOWED.len());
}

#[test]
fn terminal_states_are_exactly_those_with_no_way_out() {
    for from in OperationState::ALL {
        let exits = OperationState::ALL
            .iter()
            .filter(|to| from.can_become(**to))
            .count();
        assert_eq!(from.is_terminal(), exits == 0, "{from}");
    }
    assert_eq!(Succeeded.as_str(), "SUCCEEDED");
    assert_eq!(PendingApproval.to_string(), "PENDING_APPROVAL");
}

#[test]
fn a_refused_transition_leaves_the_operation_unchanged() {
    let mut operation =
        Operation::planned(OperationType::Create, web(0), None, Some(id("a", 0)), 1);
    assert_eq!(operation.state, Pending);
    operation
        .advance(PendingApproval, "waiting for review")
        .unwrap();
    let before = operation.clone();
    assert_eq!(
        operation.advance(Succeeded, "done?"),
        Err(InvalidTransition {
            from: PendingApproval,
            to: Succeeded
        })
    );
    assert_eq!(operation, before);
    operation.advance(Approved, "approved by alice").unwrap();
    operation.advance(Succeeded, "installed").unwrap();
    assert_eq!(
        (operation.state, operation.message.as_str()),
        (Succeeded, "installed")
    );
}

#[test]
fn the_operation_hash_is_sha256_of_its_identity_and_ignores_state_and_message() {
    let operation = Operation::planned(
        OperationType::Relocate,
        web(2),
        Some(id("a", 0)),
        Some(id("b", 1)),
        3,
    );
    assert_eq!(operation.id, "relocate-web-2-r3");
    // printf 'shoal.dev/operation v1\nid=17:relocate-web-2-r3\ntype=8:RELOCATE\n
    //   instance=5:web-2\nfrom=3:a-0\nto=3:b-1\nrevision=1:3\n' | sha256sum
    assert_eq!(
        operation_hash(&operation),
        "sha256:0ae460d6e46630b34799a88cbe5e72f9f6663e56a4f854f57dcfcb44fb9f83fa"
    );
    let mut progressed = operation.clone();
    progressed.advance(Approved, "approved").unwrap();
    assert_eq!(operation_hash(&progressed), operation_hash(&operation));
    // Any identity field changes the hash.
    let variants = [
        Operation {
            id: "other".to_owned(),
            ..operation.clone()
        },
        Operation {
            operation_type: OperationType::Update,
            ..operation.clone()
        },
        Operation {
            instance: web(3),
            ..operation.clone()
        },
        Operation {
            from: None,
            ..operation.clone()
        },
        Operation {
            to: Some(id("b", 2)),
            ..operation.clone()
        },
        Operation {
            revision: 4,
            ..operation.clone()
        },
    ];
    for variant in variants {
        assert_ne!(
            operation_hash(&variant),
            operation_hash(&operation),
            "{variant:?}"
        );
    }
}

#[test]
fn a_placement_change_yields_one_operation_per_changed_instance_in_instance_order() {
    let in_force: BTreeMap<InstanceId, MemberId> = [
        (web(0), id("a", 0)),  // stays, same revision: nothing
        (web(1), id("a", 1)),  // stays, old revision: UPDATE
        (web(2), id("b", 0)),  // moves: RELOCATE
        (web(10), id("b", 1)), // goes: DELETE
    ]
    .into();
    let target: BTreeMap<InstanceId, MemberId> = [
        (web(0), id("a", 0)),
        (web(1), id("a", 1)),
        (web(2), id("a", 2)),
        (web(3), id("b", 1)), // new: CREATE
    ]
    .into();
    let revisions: BTreeMap<InstanceId, u64> =
        [(web(0), 5), (web(1), 4), (web(2), 4), (web(10), 4)].into();
    let operations = operations_for(&in_force, &target, &revisions, 5);
    let summary: Vec<(OperationType, String, Option<MemberId>, Option<MemberId>)> = operations
        .iter()
        .map(|op| {
            (
                op.operation_type,
                op.instance.to_string(),
                op.from.clone(),
                op.to.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                OperationType::Update,
                "web-1".to_owned(),
                Some(id("a", 1)),
                Some(id("a", 1))
            ),
            (
                OperationType::Relocate,
                "web-2".to_owned(),
                Some(id("b", 0)),
                Some(id("a", 2))
            ),
            (
                OperationType::Create,
                "web-3".to_owned(),
                None,
                Some(id("b", 1))
            ),
            (
                OperationType::Delete,
                "web-10".to_owned(),
                Some(id("b", 1)),
                None
            ),
        ]
    );
    assert!(
        operations
            .iter()
            .all(|op| op.state == Pending && op.revision == 5)
    );
    // An instance whose revision is unknown is updated rather than trusted.
    let unknown = operations_for(&in_force, &in_force, &BTreeMap::new(), 5);
    assert_eq!(unknown.len(), 4);
    assert!(
        unknown
            .iter()
            .all(|op| op.operation_type == OperationType::Update)
    );
}

#[test]
fn types_and_states_read_back_from_their_names_and_serde() {
    for kind in OperationType::ALL {
        assert_eq!(kind.as_str().parse::<OperationType>(), Ok(kind));
        assert_eq!(
            kind.as_str().to_lowercase().parse::<OperationType>(),
            Ok(kind)
        );
        let json = serde_json::to_string(&kind).unwrap();
        assert_eq!(json, format!("\"{kind}\""));
        assert_eq!(serde_json::from_str::<OperationType>(&json).unwrap(), kind);
    }
    for state in OperationState::ALL {
        assert_eq!(state.as_str().parse::<OperationState>(), Ok(state));
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(json, format!("\"{state}\""));
        assert_eq!(
            serde_json::from_str::<OperationState>(&json).unwrap(),
            state
        );
    }
    assert_eq!(
        "MOVE".parse::<OperationType>().unwrap_err().to_string(),
        "\"MOVE\" is not a valid operation type; expected one of: CREATE, UPDATE, RELOCATE, STOP, RESTART, DELETE"
    );
    assert!("DONE".parse::<OperationState>().is_err());
}

#[test]
fn a_numbered_operation_ends_in_its_number_and_its_hash_differs_from_every_other_number() {
    let relocate = || {
        Operation::planned(
            OperationType::Relocate,
            web(2),
            Some(id("a", 0)),
            Some(id("b", 0)),
            3,
        )
    };
    let first = relocate().numbered(7);
    assert_eq!(first.id, "relocate-web-2-r3-7");
    assert_eq!(shoal_core::gate::operation_number(&first.id), Some(7));
    // The same change planned again (after the first left the history) is another proposal.
    let again = relocate().numbered(8);
    assert_ne!(first.id, again.id);
    assert_ne!(operation_hash(&first), operation_hash(&again));
}

/// Operations of revision 1 on web-0..web-3, in the given states.
fn history(states: [OperationState; 4]) -> Vec<Operation> {
    states
        .into_iter()
        .zip(0u32..)
        .map(|(state, ordinal)| Operation {
            state,
            ..Operation::planned(
                OperationType::Create,
                web(ordinal),
                None,
                Some(id("a", ordinal)),
                1,
            )
        })
        .collect()
}

#[test]
fn an_approval_approves_only_the_reviewed_operation_awaiting_approval() {
    let mut operations = history([PendingApproval, PendingApproval, Succeeded, Pending]);
    let reviewed = operation_hash(&operations[1]);
    assert_eq!(
        approve(&mut operations, &reviewed, "approved by alice"),
        Ok(1)
    );
    assert_eq!(operations[1].state, Approved);
    assert_eq!(operations[0].state, PendingApproval, "only the named one");
    assert_eq!(
        approve(&mut operations, &reviewed, "again"),
        Err(ApprovalError::NotAwaitingApproval {
            id: "create-web-1-r1".to_owned(),
            state: Approved
        })
    );
    let done = operation_hash(&operations[2]);
    assert!(approve(&mut operations, &done, "late").is_err());
    let unknown = "sha256:0000";
    assert_eq!(
        approve(&mut operations, unknown, "x")
            .unwrap_err()
            .to_string(),
        "no operation has hash sha256:0000; it may have been superseded, review the current operations"
    );
}

#[test]
fn a_new_revision_fails_the_waiting_operations_of_older_ones_only() {
    let mut operations = history([Pending, PendingApproval, Approved, Succeeded]);
    operations.push(Operation::planned(
        OperationType::Update,
        web(9),
        None,
        None,
        2,
    ));
    assert_eq!(supersede(&mut operations, 2), 2);
    let states: Vec<OperationState> = operations.iter().map(|op| op.state).collect();
    assert_eq!(states, vec![Failed, Failed, Approved, Succeeded, Pending]);
    assert_eq!(operations[0].message, "superseded by revision 2");
    let reasons: Vec<Option<FailureReason>> =
        operations.iter().map(|op| op.reason.clone()).collect();
    assert_eq!(
        reasons,
        vec![
            Some(FailureReason::Superseded),
            Some(FailureReason::Superseded),
            None,
            None,
            None
        ],
        "only the superseded operations carry the reason"
    );
    // The approval a reviewer gave for a superseded operation no longer applies.
    let stale = operation_hash(&operations[1]);
    assert!(matches!(
        approve(&mut operations, &stale, "too late"),
        Err(ApprovalError::NotAwaitingApproval { state: Failed, .. })
    ));
}

fn arb_placement() -> impl Strategy<Value = BTreeMap<InstanceId, MemberId>> {
    prop::collection::btree_map(0..12u32, 0..5u32, 0..8).prop_map(|placement| {
        placement
            .into_iter()
            .map(|(ordinal, member)| (web(ordinal), id("m", member)))
            .collect()
    })
}

proptest! {
    #[test]
    fn carrying_out_the_operations_turns_the_placement_in_force_into_the_target(
        in_force in arb_placement(),
        target in arb_placement(),
        revisions in prop::collection::btree_map(0..12u32, 0..3u64, 0..12),
        new_revision in 0..3u64,
    ) {
        let revisions: BTreeMap<InstanceId, u64> =
            revisions.into_iter().map(|(ordinal, revision)| (web(ordinal), revision)).collect();
        let operations = operations_for(&in_force, &target, &revisions, new_revision);
        let mut placement = in_force.clone();
        let mut running = revisions.clone();
        for operation in &operations {
            prop_assert_eq!(operation.from.as_ref(), placement.get(&operation.instance));
            match &operation.to {
                Some(member) => {
                    placement.insert(operation.instance.clone(), member.clone());
                    running.insert(operation.instance.clone(), operation.revision);
                }
                None => {
                    placement.remove(&operation.instance);
                }
            }
        }
        prop_assert_eq!(&placement, &target);
        for instance in target.keys() {
            prop_assert_eq!(running.get(instance), Some(&new_revision));
        }
        let instances: Vec<&InstanceId> = operations.iter().map(|op| &op.instance).collect();
        let mut sorted = instances.clone();
        sorted.sort();
        sorted.dedup();
        prop_assert_eq!(instances, sorted, "one operation per instance, in instance order");
    }
}

#[test]
fn a_failure_reason_is_set_only_with_the_failed_state_and_reads_back_from_its_kind() {
    let mut operation =
        Operation::planned(OperationType::Create, web(1), None, Some(id("a", 0)), 1);
    operation.advance(Approved, "approved").unwrap();
    operation.advance(Succeeded, "installed").unwrap();
    // A finished operation cannot fail afterwards; nothing changes.
    assert!(
        operation
            .fail(FailureReason::TargetLeft, "member left")
            .is_err()
    );
    assert_eq!(operation.reason, None);
    assert_eq!(operation.message, "installed");
    let reasons = [
        FailureReason::Superseded,
        FailureReason::Withdrawn,
        FailureReason::Reported {
            code: "ExitCode1".to_owned(),
        },
        FailureReason::TargetLeft,
    ];
    for reason in reasons {
        let mut waiting =
            Operation::planned(OperationType::Delete, web(2), Some(id("a", 0)), None, 1);
        waiting.fail(reason.clone(), "why").unwrap();
        assert_eq!(waiting.state, Failed);
        assert_eq!(waiting.reason.as_ref(), Some(&reason));
        assert_eq!(
            FailureReason::from_kind(reason.kind(), reason.code()),
            Some(reason)
        );
    }
    assert_eq!(FailureReason::from_kind("Exploded", None), None);
}
