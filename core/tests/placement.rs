//! Filter-and-capacity placement of plan instances.

use shoal_core::MemberId;
use shoal_core::member::Member;
use shoal_core::placement::{PlacementError, Unplaceable, WorkItem, place};

fn gpu_cluster() -> Vec<Member> {
    vec![
        Member::new("cpu", 0).with_capacity("cpu", 4),
        Member::new("cpu", 1).with_capacity("cpu", 4),
        Member::new("gpu", 0)
            .with_capability("gpu")
            .with_capacity("cpu", 8)
            .with_capacity("gpu", 1),
        Member::new("gpu", 1)
            .with_capability("gpu")
            .with_capacity("cpu", 8)
            .with_capacity("gpu", 1)
            .with_available(false),
    ]
}

#[test]
fn items_go_only_to_available_members_with_the_required_capabilities() {
    let items: Vec<WorkItem> = (0..3)
        .map(|i| {
            WorkItem::new(format!("train/{i}"))
                .requiring("gpu")
                .demanding("cpu", 2)
        })
        .collect();
    let placement = place(&items, &gpu_cluster()).unwrap();
    // Only gpu-0 is capable and available; it has one GPU but the items ask
    // for CPU only, and 8 CPU fit 3 × 2.
    assert!(placement.unplaced.is_empty());
    assert!(
        placement
            .placed
            .values()
            .all(|member| *member == MemberId::new("gpu", 0))
    );
}

#[test]
fn an_item_that_fits_nowhere_gets_a_typed_reason() {
    let items = vec![
        WorkItem::new("a").requiring("gpu").demanding("gpu", 1),
        WorkItem::new("b").requiring("gpu").demanding("gpu", 1),
        WorkItem::new("c").requiring("tpu"),
    ];
    let placement = place(&items, &gpu_cluster()).unwrap();
    assert_eq!(placement.placed.get("a"), Some(&MemberId::new("gpu", 0)));
    assert_eq!(
        placement.unplaced,
        vec![
            Unplaceable::NoRoom {
                item: "b".to_owned(),
                capable: 1,
                demand: [("gpu".to_owned(), 1)].into()
            },
            Unplaceable::NoCapableMember {
                item: "c".to_owned(),
                missing: ["tpu".to_owned()].into()
            },
        ]
    );
    let error = placement.into_result().unwrap_err();
    assert_eq!(
        error.to_string(),
        "2 work item(s) cannot be placed: item \"b\": none of the 1 capable members has room for {\"gpu\": 1}; \
         item \"c\": no available member offers capabilities {\"tpu\"}"
    );
}

#[test]
fn placement_is_independent_of_input_order_and_spreads_by_rendezvous() {
    let members: Vec<Member> = (0..8)
        .map(|i| Member::new("w", i).with_capacity("slot", 100))
        .collect();
    let items: Vec<WorkItem> = (0..400)
        .map(|i| WorkItem::new(format!("i{i}")).demanding("slot", 1))
        .collect();
    let forward = place(&items, &members).unwrap();
    let mut reversed_items = items.clone();
    reversed_items.reverse();
    let mut reversed_members = members.clone();
    reversed_members.reverse();
    assert_eq!(place(&reversed_items, &reversed_members).unwrap(), forward);
    // Every member gets a share; none is starved or overfull.
    for member in &members {
        let count = forward.placed.values().filter(|m| **m == member.id).count();
        assert!((20..=100).contains(&count), "{} holds {count}", member.id);
    }
}

#[test]
fn removing_a_member_moves_only_items_it_held_when_capacity_is_ample() {
    let members: Vec<Member> = (0..6)
        .map(|i| Member::new("w", i).with_capacity("slot", 1000))
        .collect();
    let items: Vec<WorkItem> = (0..300)
        .map(|i| WorkItem::new(format!("i{i}")).demanding("slot", 1))
        .collect();
    let before = place(&items, &members).unwrap().into_result().unwrap();
    let after = place(&items, &members[..5]).unwrap().into_result().unwrap();
    for (item, member) in &before {
        if member.ordinal() != Some(5) {
            assert_eq!(after.get(item), Some(member), "{item} moved");
        }
    }
}

#[test]
fn duplicate_items_and_members_are_rejected() {
    let members = vec![Member::new("w", 0)];
    assert_eq!(
        place(&[WorkItem::new("x"), WorkItem::new("x")], &members).unwrap_err(),
        PlacementError::DuplicateItem {
            item: "x".to_owned()
        }
    );
    assert_eq!(
        place(
            &[WorkItem::new("x")],
            &[Member::new("w", 0), Member::new("w", 0)]
        )
        .unwrap_err()
        .to_string(),
        "member w-0 is listed more than once"
    );
}
