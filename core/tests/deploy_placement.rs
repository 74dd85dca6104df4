//! Placement of a plan's instances: table tests of each rule, and properties
//! (never violates capabilities, capacity or the per-member limit;
//! deterministic; spread over update domains; sticky; scale-down then
//! scale-up stays balanced).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use shoal_core::MemberId;
use shoal_core::deploy::capability::CatalogueConflict;
use shoal_core::deploy::placement::{
    InstanceChange, InstanceNameError, PlanError, PortTaken, RemovedInstance, UnplacedReason,
};
use shoal_core::deploy::{
    Capabilities, Catalogue, Comparator, DeployMember, InstanceId, PlanPlacement, PlanRequest,
    Port, Requirement, Reservation, place_plan,
};
use shoal_core::member::Resources;

fn web(ordinal: u32) -> InstanceId {
    InstanceId::new("web", ordinal)
}

fn id(pool: &str, ordinal: u32) -> MemberId {
    MemberId::new(pool, ordinal)
}

/// Two domains of two members each, 4 cpu apiece.
fn two_domains() -> Vec<DeployMember> {
    vec![
        DeployMember::new("a", 0, "ud-1").with_capacity("cpu", 4),
        DeployMember::new("a", 1, "ud-1").with_capacity("cpu", 4),
        DeployMember::new("b", 0, "ud-2").with_capacity("cpu", 4),
        DeployMember::new("b", 1, "ud-2").with_capacity("cpu", 4),
    ]
}

fn request(instances: u32, members: Vec<DeployMember>) -> PlanRequest {
    PlanRequest {
        members,
        demand: Resources::none().with("cpu", 2),
        ..PlanRequest::new("web", instances)
    }
}

fn placed(request: &PlanRequest) -> PlanPlacement {
    place_plan(request).unwrap_or_else(|error| panic!("{error}"))
}

/// Instances of the placement per update domain (every domain of a member).
fn per_domain(members: &[DeployMember], target: &BTreeMap<InstanceId, MemberId>) -> Vec<usize> {
    let domain_of: BTreeMap<&MemberId, &str> = members
        .iter()
        .map(|member| (&member.id, member.update_domain.as_str()))
        .collect();
    let mut counts: BTreeMap<&str, usize> = domain_of.values().map(|domain| (*domain, 0)).collect();
    for member in target.values() {
        *counts.get_mut(domain_of[member]).unwrap() += 1;
    }
    counts.into_values().collect()
}

fn spread(counts: &[usize]) -> usize {
    counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0)
}

/// A placement in force from `(instance ordinal, pool, member ordinal)`.
fn in_force(entries: &[(u32, &str, u32)]) -> BTreeMap<InstanceId, MemberId> {
    entries
        .iter()
        .map(|(instance, pool, member)| (web(*instance), id(pool, *member)))
        .collect()
}

fn removed(instance: u32, pool: &str, member: u32) -> RemovedInstance {
    RemovedInstance {
        instance: web(instance),
        member: id(pool, member),
    }
}

#[test]
fn instance_names_are_the_plan_and_a_canonical_ordinal() {
    assert_eq!(InstanceId::parse("web", "web-12"), Ok(web(12)));
    assert_eq!(web(3).to_string(), "web-3");
    // A plan whose name ends in a number is not confused with another's instance.
    assert!(InstanceId::parse("web", "web-1-0").is_err());
    assert_eq!(
        InstanceId::parse("web-1", "web-1-0"),
        Ok(InstanceId::new("web-1", 0))
    );
    for name in ["web-", "web-01", "web-x", "api-0", "web-4294967296"] {
        assert_eq!(
            InstanceId::parse("web", name),
            Err(InstanceNameError {
                plan: "web".to_owned(),
                name: name.to_owned()
            })
        );
    }
}

#[test]
fn new_instances_spread_over_update_domains_one_per_member() {
    let request = request(3, two_domains());
    let placement = placed(&request);
    assert_eq!(
        placement.target.keys().cloned().collect::<Vec<_>>(),
        vec![web(0), web(1), web(2)]
    );
    let mut counts = per_domain(&request.members, &placement.target);
    counts.sort();
    assert_eq!(counts, vec![1, 2]);
    let members: BTreeSet<&MemberId> = placement.target.values().collect();
    assert_eq!(members.len(), 3, "at most one instance per member");
    assert!(
        placement
            .changes
            .values()
            .all(|change| *change == InstanceChange::New)
    );
    assert!(placement.unplaced.is_empty() && placement.removed.is_empty());
}

#[test]
fn scale_up_takes_the_lowest_free_ordinals_and_keeps_what_is_in_force() {
    let mut request = request(4, two_domains());
    request.in_force = in_force(&[(0, "a", 0), (2, "b", 0)]);
    let placement = placed(&request);
    assert_eq!(placement.target[&web(0)], id("a", 0));
    assert_eq!(placement.target[&web(2)], id("b", 0));
    assert_eq!(placement.changes[&web(1)], InstanceChange::New);
    assert_eq!(placement.changes[&web(3)], InstanceChange::New);
    assert_eq!(placement.changes[&web(0)], InstanceChange::Kept);
}

#[test]
fn scale_down_removes_from_the_fullest_domain_then_the_fullest_member_then_the_highest_ordinal() {
    let mut request = request(3, two_domains());
    request.max_per_member = 2;
    // ud-1 holds three instances (two on a-0), ud-2 one.
    request.in_force = in_force(&[(0, "a", 0), (1, "a", 0), (2, "a", 1), (3, "b", 0)]);
    // ud-1 is fullest; within it a-0 holds the most; its highest ordinal is web-1.
    assert_eq!(placed(&request).removed, vec![removed(1, "a", 0)]);
    // Balanced domains shed their highest ordinal.
    request.instances = 2;
    request.max_per_member = 1;
    request.in_force = in_force(&[(0, "a", 0), (1, "b", 0), (2, "a", 1)]);
    assert_eq!(placed(&request).removed, vec![removed(2, "a", 1)]);
}

#[test]
fn a_displaced_instance_moves_and_others_stay_put() {
    let mut members = two_domains();
    members[0].available = false; // a-0
    let mut request = request(3, members);
    request.in_force = in_force(&[(0, "a", 0), (1, "b", 0), (2, "gone", 0)]);
    let placement = placed(&request);
    assert_eq!(placement.changes[&web(1)], InstanceChange::Kept);
    assert_eq!(
        placement.changes[&web(0)],
        InstanceChange::Moved { from: id("a", 0) }
    );
    assert_eq!(
        placement.changes[&web(2)],
        InstanceChange::Moved {
            from: id("gone", 0)
        }
    );
    // Three instances on the three available members, spread 2/1.
    let members: BTreeSet<&MemberId> = placement.target.values().collect();
    assert_eq!(members.len(), 3);
    assert!(!members.contains(&id("a", 0)));
}

#[test]
fn displaced_instances_are_removed_first_on_scale_down() {
    let mut members = two_domains();
    members[2].available = false; // b-0
    let mut request = request(2, members);
    request.in_force = in_force(&[(0, "a", 0), (1, "b", 0), (2, "b", 1)]);
    let placement = placed(&request);
    assert_eq!(placement.removed, vec![removed(1, "b", 0)]);
    assert_eq!(placement.target.len(), 2);
}

#[test]
fn an_instance_with_no_capable_member_names_the_requirements_that_rule_members_out() {
    let gpu = Capabilities::parse("GPU=p100:2").unwrap();
    let mut members = two_domains();
    members[0] = members[0].clone().with_capabilities(gpu.clone());
    members[1] = members[1]
        .clone()
        .with_capabilities(gpu)
        .with_available(false);
    let mut request = request(1, members);
    let wanted = Requirement::new("GPU", Comparator::Gte, ["p100"]);
    let refused = Requirement::new("GPU", Comparator::NotIn, ["p100"]);
    request.requirements = vec![wanted.clone(), refused.clone()];
    let placement = placed(&request);
    assert!(placement.target.is_empty());
    assert_eq!(placement.unplaced.len(), 1);
    assert_eq!(placement.unplaced[0].instance, web(0));
    assert_eq!(
        placement.unplaced[0].reason,
        UnplacedReason::NoCapableMember {
            // Canonical order: by type, then comparator (In, NotIn, Gte, Lte).
            ruled_out: vec![(refused, 1), (wanted, 2)],
            unavailable: 1,
        }
    );
    assert_eq!(
        placement.unplaced[0].to_string(),
        "instance web-0 cannot be placed: no available member meets the requirements; GPU NotIn [p100] rules out 1 available member(s); GPU Gte [p100] rules out 2 available member(s); 1 member(s) unavailable"
    );
}

#[test]
fn an_instance_without_room_names_the_short_resources_counting_reservations() {
    let members = vec![
        DeployMember::new("a", 0, "ud-1")
            .with_capacity("cpu", 4)
            .with_capacity("memory", 8),
        DeployMember::new("b", 0, "ud-2")
            .with_capacity("cpu", 4)
            .with_capacity("memory", 1),
    ];
    let mut request = request(2, members);
    request.demand = Resources::none().with("cpu", 2).with("memory", 2);
    // Another plan holds 3 of a-0's 4 cpu.
    request.reserved = [(id("a", 0), Resources::none().with("cpu", 3).into())].into();
    let placement = placed(&request);
    assert!(placement.target.is_empty());
    assert_eq!(
        placement.unplaced[0].reason,
        UnplacedReason::NoRoom {
            short: ["cpu".to_owned(), "memory".to_owned()].into(),
            at_limit: 0
        }
    );
    assert_eq!(placement.unplaced.len(), 2);
}

#[test]
fn the_per_member_limit_is_reported_when_every_capable_member_is_full() {
    let members = vec![DeployMember::new("a", 0, "ud-1").with_capacity("cpu", 100)];
    let placement = placed(&request(3, members.clone()));
    assert_eq!(placement.target.len(), 1);
    assert_eq!(
        placement.unplaced[0].reason,
        UnplacedReason::PerMemberLimit {
            limit: 1,
            capable: 1
        }
    );
    let mut allowed = request(3, members);
    allowed.max_per_member = 3;
    assert_eq!(placed(&allowed).target.len(), 3);
}

#[test]
fn input_that_cannot_be_evaluated_is_refused_with_a_named_error() {
    let mut zero = request(1, two_domains());
    zero.max_per_member = 0;
    assert_eq!(
        place_plan(&zero),
        Err(PlanError::ZeroPerMemberLimit {
            plan: "web".to_owned()
        })
    );
    let mut duplicate = request(1, two_domains());
    duplicate.members.push(DeployMember::new("a", 1, "ud-9"));
    assert_eq!(
        place_plan(&duplicate),
        Err(PlanError::DuplicateMember { member: id("a", 1) })
    );
    let mut foreign = request(1, two_domains());
    foreign.in_force = [(InstanceId::new("api", 0), id("a", 0))].into();
    assert_eq!(
        place_plan(&foreign).unwrap_err().to_string(),
        "plan \"web\": the placement in force lists api-0, an instance of another plan"
    );
    assert!(matches!(
        place_plan(&request(10_001, two_domains())),
        Err(PlanError::TooManyInstances {
            requested: 10_001,
            ..
        })
    ));
    let mut conflict = request(1, two_domains());
    conflict.members[0].capabilities = Capabilities::parse("GPU=v100:3").unwrap();
    conflict.members[3].capabilities = Capabilities::parse("GPU=v100:1").unwrap();
    assert_eq!(
        place_plan(&conflict),
        Err(PlanError::Catalogue(CatalogueConflict {
            capability_type: "GPU".to_owned(),
            name: "v100".to_owned(),
            first: id("a", 0),
            first_score: 3,
            second: id("b", 1),
            second_score: 1,
        }))
    );
}

// ---- properties ----

/// The capability universe of the generated members, with fixed scores so
/// that every catalogue is consistent.
const CAPABILITIES: [(&str, &str, u32); 5] = [
    ("GPU", "k80", 1),
    ("GPU", "p100", 2),
    ("GPU", "v100", 3),
    ("CPU", "xeon", 0),
    ("CPU", "epyc", 0),
];

fn requirement_menu() -> Vec<Requirement> {
    vec![
        Requirement::new("GPU", Comparator::Gte, ["p100"]),
        Requirement::new("GPU", Comparator::In, ["k80", "v100"]),
        Requirement::new("CPU", Comparator::NotIn, ["epyc"]),
        Requirement::new("GPU", Comparator::Lte, ["p100"]),
        Requirement::new("CPU", Comparator::In, ["xeon"]),
    ]
}

fn pick<T: Clone>(menu: &[T], mask: u32) -> Vec<T> {
    menu.iter()
        .enumerate()
        .filter(|(bit, _)| mask & (1 << bit) != 0)
        .map(|(_, item)| item.clone())
        .collect()
}

fn arb_member() -> impl Strategy<Value = DeployMember> {
    (
        0..2usize,
        0..4u32,
        prop::bool::weighted(0.85),
        0..3usize,
        0..32u32,
        0..9u64,
        0..9u64,
    )
        .prop_map(|(pool, ordinal, available, domain, mask, cpu, memory)| {
            let mut capabilities = Capabilities::none();
            for (capability_type, name, score) in pick(&CAPABILITIES, mask) {
                capabilities = capabilities.with(capability_type, name, score);
            }
            DeployMember::new(["a", "b"][pool], ordinal, format!("ud-{domain}"))
                .with_available(available)
                .with_capabilities(capabilities)
                .with_capacity("cpu", cpu)
                .with_capacity("memory", memory)
        })
}

/// Ports plans of the generated requests may listen on.
const PORT_MENU: [Port; 3] = [Port::tcp(80), Port::udp(53), Port::tcp(443)];

/// Instances of other plans that may hold a port: `api-*` sort before
/// `web-*`, `zeta-*` after.
fn holder_menu() -> [InstanceId; 3] {
    [
        InstanceId::new("api", 0),
        InstanceId::new("zeta", 1),
        InstanceId::new("api", 7),
    ]
}

fn arb_request() -> impl Strategy<Value = PlanRequest> {
    (
        prop::collection::vec(arb_member(), 0..9),
        0..10u32,
        1..4u32,
        (0..4u64, 0..3u64),
        0..32u32,
        prop::collection::btree_map(0..12u32, (0..2usize, 0..5u32), 0..8),
        prop::collection::btree_map(
            (0..2usize, 0..4u32),
            (
                0..5u64,
                prop::collection::btree_map(0..3usize, 0..3usize, 0..3),
            ),
            0..4,
        ),
        0..8u32,
    )
        .prop_map(
            |(
                members,
                instances,
                max_per_member,
                (cpu, memory),
                mask,
                in_force,
                reserved,
                ports,
            )| {
                // One member per id: the last generated wins.
                let members: BTreeMap<MemberId, DeployMember> = members
                    .into_iter()
                    .map(|member| (member.id.clone(), member))
                    .collect();
                PlanRequest {
                    plan: "web".to_owned(),
                    instances,
                    max_per_member,
                    demand: Resources::none().with("cpu", cpu).with("memory", memory),
                    requirements: pick(&requirement_menu(), mask),
                    ports: pick(&PORT_MENU, ports).into_iter().collect(),
                    members: members.into_values().collect(),
                    reserved: reserved
                        .into_iter()
                        .map(|((pool, ordinal), (cpu, ports))| {
                            let reservation = Reservation {
                                resources: Resources::none().with("cpu", cpu),
                                ports: ports
                                    .into_iter()
                                    .map(|(port, holder)| {
                                        (PORT_MENU[port], holder_menu()[holder].clone())
                                    })
                                    .collect(),
                            };
                            (id(["a", "b"][pool], ordinal), reservation)
                        })
                        .collect(),
                    in_force: in_force
                        .into_iter()
                        .map(|(ordinal, (pool, member))| {
                            (web(ordinal), id(["a", "b"][pool], member))
                        })
                        .collect(),
                }
            },
        )
}

/// Placement, or `None` when a `Gte`/`Lte` names a capability no generated
/// member declares (the only error generated requests can provoke).
fn place_or_unscored(request: &PlanRequest) -> Result<Option<PlanPlacement>, TestCaseError> {
    match place_plan(request) {
        Ok(placement) => Ok(Some(placement)),
        Err(PlanError::Requirement(_)) => Ok(None),
        Err(other) => Err(TestCaseError::fail(format!("unexpected error: {other}"))),
    }
}

/// Checks every promise of a placement against its request, independently
/// of the placement code.
fn check_promises(request: &PlanRequest, placement: &PlanPlacement) -> Result<(), TestCaseError> {
    let catalogue = Catalogue::build(request.members.iter().map(|m| (&m.id, &m.capabilities)))
        .expect("generated capabilities are consistent");
    let members: BTreeMap<&MemberId, &DeployMember> =
        request.members.iter().map(|m| (&m.id, m)).collect();
    let mut held: BTreeMap<&MemberId, u64> = BTreeMap::new();
    for (instance, member_id) in &placement.target {
        prop_assert_eq!(&instance.plan, &request.plan);
        let member = members.get(member_id).ok_or_else(|| {
            TestCaseError::fail(format!("{instance} placed on unknown member {member_id}"))
        })?;
        prop_assert!(
            member.available,
            "{} on unavailable {}",
            instance,
            member_id
        );
        for requirement in &request.requirements {
            let resolved = requirement
                .resolve(&catalogue)
                .expect("placement resolved it");
            prop_assert!(
                resolved.is_met_by(&member.capabilities),
                "{} on {} which fails {}",
                instance,
                member_id,
                requirement
            );
        }
        *held.entry(member_id).or_default() += 1;
    }
    for (member_id, count) in held {
        prop_assert!(
            count <= u64::from(request.max_per_member),
            "{} holds {}",
            member_id,
            count
        );
        let reserved = request
            .reserved
            .get(member_id)
            .map(|reservation| reservation.resources.clone())
            .unwrap_or_default();
        for (resource, amount) in &request.demand.0 {
            let used = amount * count + reserved.get(resource);
            let capacity = members[member_id].capacity.get(resource);
            // A reservation alone may exceed capacity; the plan must then add nothing.
            prop_assert!(
                used <= capacity || *amount == 0,
                "{} over capacity on {}: {} > {}",
                member_id,
                resource,
                used,
                capacity
            );
        }
    }
    check_ports(request, placement)?;
    prop_assert_eq!(
        placement.target.len() + placement.unplaced.len(),
        request.instances as usize
    );
    prop_assert_eq!(
        placement.changes.keys().collect::<Vec<_>>(),
        placement.target.keys().collect::<Vec<_>>()
    );
    for instance in request.in_force.keys() {
        let accounted = placement.target.contains_key(instance)
            || placement.removed.iter().any(|r| &r.instance == instance)
            || placement.unplaced.iter().any(|u| &u.instance == instance);
        prop_assert!(accounted, "{} in force vanished", instance);
    }
    Ok(())
}

/// The port promises: an instance never shares a port with another of its
/// plan on one member; a new or moved one never lands where another plan
/// holds one of its ports; a kept one only where each such holder sorts
/// after it (of two placed at once, the lower name stays).
fn check_ports(request: &PlanRequest, placement: &PlanPlacement) -> Result<(), TestCaseError> {
    if request.ports.is_empty() {
        return Ok(());
    }
    let mut seen: BTreeMap<&MemberId, &InstanceId> = BTreeMap::new();
    for (instance, member) in &placement.target {
        if let Some(other) = seen.insert(member, instance) {
            prop_assert!(
                false,
                "{} and {} share {} though both need {:?}",
                other,
                instance,
                member,
                request.ports
            );
        }
        let held = request
            .reserved
            .get(member)
            .map(|reservation| &reservation.ports);
        for port in &request.ports {
            let Some(holder) = held.and_then(|held| held.get(port)) else {
                continue;
            };
            let kept = placement.changes[instance] == InstanceChange::Kept;
            prop_assert!(
                kept && holder > instance,
                "{} placed on {} where {} holds {} ({:?})",
                instance,
                member,
                holder,
                port,
                placement.changes[instance]
            );
        }
    }
    Ok(())
}

/// Checks that every unplaced instance's reason is true of the final
/// placement: no capable member, or every capable member at the limit or
/// without room.
fn check_reasons(request: &PlanRequest, placement: &PlanPlacement) -> Result<(), TestCaseError> {
    let Some(unplaced) = placement.unplaced.first() else {
        return Ok(());
    };
    let catalogue = Catalogue::build(request.members.iter().map(|m| (&m.id, &m.capabilities)))
        .expect("generated capabilities are consistent");
    let capable: Vec<&DeployMember> = request
        .members
        .iter()
        .filter(|member| {
            member.available
                && request.requirements.iter().all(|requirement| {
                    requirement
                        .resolve(&catalogue)
                        .expect("placement resolved it")
                        .is_met_by(&member.capabilities)
                })
        })
        .collect();
    let held =
        |member: &MemberId| placement.target.values().filter(|m| *m == member).count() as u64;
    let has_room = |member: &DeployMember| {
        let mut left = member.capacity.clone();
        if let Some(reservation) = request.reserved.get(&member.id) {
            left.take(&reservation.resources);
        }
        for _ in 0..held(&member.id) {
            left.take(&request.demand);
        }
        left.fits(&request.demand)
    };
    let at_limit = |member: &DeployMember| held(&member.id) >= u64::from(request.max_per_member);
    // Ports on the member: other plans' and those of this plan's instances there.
    let port_holder = |member: &MemberId, port: &Port| -> Option<InstanceId> {
        placement
            .target
            .iter()
            .find(|(_, at)| *at == member)
            .map(|(instance, _)| instance.clone())
            .or_else(|| {
                request
                    .reserved
                    .get(member)
                    .and_then(|reservation| reservation.ports.get(port).cloned())
            })
    };
    let port_free = |member: &DeployMember| {
        request
            .ports
            .iter()
            .all(|port| port_holder(&member.id, port).is_none())
    };
    match &unplaced.reason {
        UnplacedReason::NoCapableMember { .. } => prop_assert!(capable.is_empty()),
        UnplacedReason::PerMemberLimit { capable: count, .. } => {
            prop_assert_eq!(*count, capable.len());
            prop_assert!(!capable.is_empty() && capable.iter().all(|m| at_limit(m)));
        }
        UnplacedReason::NoRoom { short, .. } => {
            prop_assert!(!short.is_empty());
            prop_assert!(capable.iter().any(|m| !at_limit(m)));
            prop_assert!(capable.iter().all(|m| at_limit(m) || !has_room(m)));
        }
        UnplacedReason::PortsTaken { taken, members, .. } => {
            prop_assert!(!taken.is_empty() && taken.len() <= *members);
            prop_assert!(
                capable
                    .iter()
                    .all(|m| at_limit(m) || !has_room(m) || !port_free(m))
            );
            for conflict in taken {
                prop_assert!(request.ports.contains(&conflict.port));
                prop_assert_eq!(
                    port_holder(&conflict.member, &conflict.port),
                    Some(conflict.holder.clone()),
                    "{:?}",
                    conflict
                );
            }
        }
    }
    Ok(())
}

/// `count` members over `domains` domains (round robin), all capable and roomy.
fn roomy_members(count: usize, domains: usize) -> Vec<DeployMember> {
    (0..count)
        .map(|ordinal| {
            DeployMember::new("m", ordinal as u32, format!("ud-{}", ordinal % domains))
                .with_capacity("cpu", 1000)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn placement_never_violates_capabilities_capacity_or_the_per_member_limit_and_gives_true_reasons(
        request in arb_request()
    ) {
        if let Some(placement) = place_or_unscored(&request)? {
            check_promises(&request, &placement)?;
            check_reasons(&request, &placement)?;
        }
    }

    #[test]
    fn placement_does_not_depend_on_the_order_of_members_or_requirements(
        request in arb_request(),
        rotate in 0usize..9,
        reverse in any::<bool>(),
    ) {
        let mut reordered = request.clone();
        if !reordered.members.is_empty() {
            let len = reordered.members.len();
            reordered.members.rotate_left(rotate % len);
        }
        if reverse {
            reordered.members.reverse();
            reordered.requirements.reverse();
        }
        prop_assert_eq!(place_plan(&request), place_plan(&reordered));
    }

    #[test]
    fn new_instances_spread_evenly_over_domains_when_capacity_allows(
        members in 1usize..10,
        domains in 1usize..4,
        instances in 0u32..25,
    ) {
        let members = roomy_members(members.max(domains), domains);
        let mut request = request(instances, members);
        request.max_per_member = instances.max(1);
        let placement = placed(&request);
        prop_assert_eq!(placement.target.len(), instances as usize);
        prop_assert!(spread(&per_domain(&request.members, &placement.target)) <= 1);
    }

    #[test]
    fn an_instance_whose_member_stays_valid_never_moves(
        first in arb_request(),
        unavailable in 0u32..512,
        instances in 0u32..10,
    ) {
        let Some(before) = place_or_unscored(&first)? else { return Ok(()) };
        let mut second = first.clone();
        second.in_force = before.target.clone();
        second.instances = instances;
        for (bit, member) in second.members.iter_mut().enumerate() {
            if unavailable & (1 << bit) != 0 {
                member.available = false;
            }
        }
        let after = placed(&second);
        check_promises(&second, &after)?;
        let still_available: BTreeSet<&MemberId> = second
            .members
            .iter()
            .filter(|member| member.available)
            .map(|member| &member.id)
            .collect();
        for (instance, member) in &before.target {
            if !still_available.contains(member) {
                continue;
            }
            let stayed = after.target.get(instance) == Some(member);
            let shed = after.removed.iter().any(|r| &r.instance == instance);
            prop_assert!(stayed || (shed && instances < first.instances),
                "{} left valid member {}", instance, member);
            if stayed {
                prop_assert_eq!(&after.changes[instance], &InstanceChange::Kept);
            }
        }
    }

    #[test]
    fn scale_down_then_scale_up_stays_balanced_over_domains(
        members in 1usize..10,
        domains in 1usize..4,
        high in 1u32..20,
        low_fraction in 0u32..100,
    ) {
        let low = high * low_fraction / 100;
        let members = roomy_members(members.max(domains), domains);
        let mut request = request(high, members);
        request.max_per_member = high;
        let mut in_force = BTreeMap::new();
        for (step, instances) in [high, low, high].into_iter().enumerate() {
            request.instances = instances;
            request.in_force = in_force;
            let placement = placed(&request);
            prop_assert_eq!(placement.target.len(), instances as usize, "step {}", step);
            prop_assert!(
                spread(&per_domain(&request.members, &placement.target)) <= 1,
                "step {} unbalanced: {:?}", step, placement.target
            );
            in_force = placement.target;
        }
    }
}

#[test]
fn other_plans_reserve_their_demand_on_both_members_while_relocating() {
    use shoal_core::deploy::placement::{PlanHolding, reserved_by};
    let api = |ordinal| InstanceId::new("api", ordinal);
    let demand = Resources::none().with("cpu", 2).with("memory", 1);
    let in_force = [(api(0), id("a", 0)), (api(1), id("a", 1))].into();
    // api-1 relocates from a-1 to b-0; api-0 stays on a-0.
    let target = [(api(0), id("a", 0)), (api(1), id("b", 0))].into();
    let batch = Resources::none().with("cpu", 1);
    let batch_placement = [(InstanceId::new("batch", 0), id("a", 0))].into();
    let no_ports = BTreeSet::new();
    let reserved = reserved_by(&[
        PlanHolding {
            demand: &demand,
            ports: &no_ports,
            in_force: &in_force,
            target: &target,
        },
        PlanHolding {
            demand: &batch,
            ports: &no_ports,
            in_force: &batch_placement,
            target: &batch_placement,
        },
    ]);
    assert_eq!(
        reserved,
        [
            (
                id("a", 0),
                Resources::none().with("cpu", 3).with("memory", 1).into()
            ),
            (id("a", 1), demand.clone().into()),
            (id("b", 0), demand.clone().into()),
        ]
        .into()
    );
    // Placing web (2 cpu each) on 4-cpu members: a-0 has 1 cpu left, so web
    // goes to the other three.
    let mut web_request = request(4, two_domains());
    web_request.reserved = reserved;
    assert_three_placed_off_a0(&web_request);
}

/// Three of the four instances placed, none on a-0.
fn assert_three_placed_off_a0(request: &PlanRequest) {
    let placement = placed(request);
    assert_eq!(placement.target.len(), 3);
    assert!(
        !placement
            .target
            .values()
            .any(|member| *member == id("a", 0))
    );
}

#[test]
fn a_cordoned_member_keeps_its_instances_and_gets_no_new_or_moved_one() {
    let mut members = two_domains();
    members[0] = members[0].clone().with_cordoned(true);
    // a-1 unavailable: its instance is displaced and must not go to cordoned a-0.
    members[1] = members[1].clone().with_available(false);
    let mut request = request(6, members);
    request.in_force = in_force(&[(0, "a", 0), (1, "a", 1)]);
    let placement = placed(&request);
    assert_eq!(placement.target[&web(0)], id("a", 0), "kept where it is");
    let on_cordoned = placement
        .target
        .values()
        .filter(|member| **member == id("a", 0))
        .count();
    assert_eq!(on_cordoned, 1, "{:?}", placement.target);
    assert!(placement.target[&web(1)].pool == "b");
}

#[test]
fn a_drained_member_that_is_unavailable_has_every_instance_relocated_and_no_other() {
    let members: Vec<DeployMember> = two_domains()
        .into_iter()
        .chain([DeployMember::new("c", 0, "ud-3").with_capacity("cpu", 4)])
        .map(|member| {
            let drained = member.id == id("b", 1);
            member.with_available(!drained).with_cordoned(drained)
        })
        .collect();
    let mut request = request(4, members);
    request.in_force = in_force(&[(0, "a", 0), (1, "a", 1), (2, "b", 0), (3, "b", 1)]);
    let placement = placed(&request);
    let moved: Vec<&InstanceId> = placement
        .target
        .iter()
        .filter(|(instance, member)| request.in_force[*instance] != **member)
        .map(|(instance, _)| instance)
        .collect();
    assert_eq!(moved, vec![&web(3)]);
    assert_eq!(placement.target[&web(3)], id("c", 0));
}

#[test]
fn two_instances_of_one_plan_needing_a_port_never_share_a_member() {
    let members = vec![DeployMember::new("a", 0, "ud-1").with_capacity("cpu", 100)];
    let mut request = request(2, members);
    request.max_per_member = 2;
    request.ports = [Port::tcp(80)].into();
    let placement = placed(&request);
    assert_eq!(placement.target, [(web(0), id("a", 0))].into());
    assert_eq!(
        placement.unplaced[0].reason,
        UnplacedReason::PortsTaken {
            taken: vec![PortTaken {
                member: id("a", 0),
                port: Port::tcp(80),
                holder: web(0),
            }],
            members: 1,
            short: BTreeSet::new(),
            at_limit: 0,
        }
    );
    assert_eq!(
        placement.unplaced[0].to_string(),
        "instance web-1 cannot be placed: every capable member with room has a port of the plan taken: TCP/80 on a-0 held by instance web-0; 0 capable member(s) at the per-member limit"
    );
}

#[test]
fn a_port_another_plan_holds_on_a_member_keeps_new_instances_off_it() {
    use shoal_core::deploy::placement::{PlanHolding, reserved_by};
    let dns = [Port::udp(53), Port::tcp(80)].into();
    let demand = Resources::none().with("cpu", 1);
    let api = [(InstanceId::new("api", 0), id("a", 0))].into();
    let reserved = reserved_by(&[PlanHolding {
        demand: &demand,
        ports: &dns,
        in_force: &api,
        target: &api,
    }]);
    assert_eq!(
        reserved[&id("a", 0)].ports,
        [
            (Port::tcp(80), InstanceId::new("api", 0)),
            (Port::udp(53), InstanceId::new("api", 0))
        ]
        .into()
    );
    let mut request = request(4, two_domains());
    request.ports = [Port::tcp(80), Port::tcp(8080)].into();
    request.reserved = reserved;
    assert_three_placed_off_a0(&request);
    // A UDP port of the same number is another port.
    request.ports = [Port::udp(80)].into();
    assert_eq!(placed(&request).target.len(), 4);
}

#[test]
fn of_two_instances_in_force_holding_one_port_on_a_member_the_lower_name_stays() {
    let members = two_domains();
    // zeta-0 holds TCP/80 on a-0, where web-0 is in force too (placed at the same time).
    let mut request = request(1, members.clone());
    request.ports = [Port::tcp(80)].into();
    request.in_force = in_force(&[(0, "a", 0)]);
    request.reserved = [(
        id("a", 0),
        Reservation {
            resources: Resources::none(),
            ports: [(Port::tcp(80), InstanceId::new("zeta", 0))].into(),
        },
    )]
    .into();
    let placement = placed(&request);
    assert_eq!(placement.changes[&web(0)], InstanceChange::Kept);
    // Held by api-0, which sorts first: web-0 moves.
    request.reserved.get_mut(&id("a", 0)).unwrap().ports =
        [(Port::tcp(80), InstanceId::new("api", 0))].into();
    let placement = placed(&request);
    assert_eq!(
        placement.changes[&web(0)],
        InstanceChange::Moved { from: id("a", 0) }
    );
}
