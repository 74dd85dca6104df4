//! The plan decision, pass by pass, on observations built by hand.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use shoal_core::names::{ANNOTATION_APPROVE, ANNOTATION_APPROVED_BY};

use super::*;
use crate::api::deployment_plan::DeploymentPlanSpec;
use crate::observed::LeaseState;

/// Two pools in two update domains: `gpu` (2 members offering GPU=v100) in
/// domain `a`, `cpu` (2 members, no GPU) in domain `b`; each member has 4 cores.
fn pools(gpu_members: u32, cpu_members: u32) -> Vec<PoolObservation> {
    let pool = |name: &str, domain: &str, capabilities: Option<&str>, members: u32| {
        let mut annotations = BTreeMap::from([
            ("shoal.dev/update-domain".to_owned(), domain.to_owned()),
            ("shoal.dev/capacity".to_owned(), "cores=4".to_owned()),
        ]);
        if let Some(capabilities) = capabilities {
            annotations.insert("shoal.dev/capabilities".to_owned(), capabilities.to_owned());
        }
        PoolObservation {
            name: name.to_owned(),
            annotations,
            pods: (0..members)
                .map(|ordinal| {
                    (
                        ordinal,
                        MemberPod {
                            uid: format!("uid-{name}-{ordinal}"),
                            ready: true,
                            deleting: false,
                            node_zone: None,
                            ip: None,
                        },
                    )
                })
                .collect(),
        }
    };
    vec![
        pool("gpu", "a", Some("GPU=v100:3;CPU=xeon"), gpu_members),
        pool("gpu2", "b", Some("GPU=v100:3"), gpu_members),
        pool("cpu", "b", Some("CPU=xeon"), cpu_members),
    ]
}

pub(super) fn spec(instances: u32, policy: &str, image: &str) -> DeploymentPlanSpec {
    serde_json::from_value(serde_json::json!({
        "swarm": "demo",
        "applications": [
            {"name": "nginx", "resources": {"cores": 1}},
            {"name": "exporter", "resources": {"cores": 1}},
        ],
        "requirements": [{"type": "GPU", "comparator": "In", "names": ["v100"]}],
        "deployment": {
            "instances": instances,
            "payloads": [{"application": "nginx", "coordinates": {"image": image}}],
        },
        "approval": {"policy": policy},
    }))
    .expect("a valid spec")
}

/// The fixture Swarm, its revision in force holding every member of `pools`
/// (the largest the tests use), none waiting.
pub(super) fn swarm_holding_every_member() -> SwarmView {
    SwarmView {
        members_in_force: pools(8, 8)
            .iter()
            .flat_map(|pool| pool.members().map(|(name, _)| name).collect::<Vec<_>>())
            .collect(),
        pending: None,
        cordoned: Default::default(),
        draining: Default::default(),
    }
}

pub(super) fn observation(spec: DeploymentPlanSpec) -> PlanObservation {
    PlanObservation {
        name: "web".to_owned(),
        uid: "uid-web".to_owned(),
        generation: Some(1),
        spec,
        annotations: BTreeMap::new(),
        status: Default::default(),
        swarm: Some(swarm_holding_every_member()),
        pools: pools(2, 2),
        leases: BTreeMap::new(),
        other_plans: Vec::new(),
        record_editors: BTreeMap::new(),
        held_instances: Ok(Vec::new()),
        approved_by_policy: false,
        service: Default::default(),
        now: Timestamp::from_second(1_700_000_000).expect("a time"),
    }
}

/// One pass whose status is then written back, as the controller does.
pub(super) fn pass(obs: &mut PlanObservation) -> PlanDecision {
    let decision = decide(obs);
    obs.status = decision.status.clone();
    decision
}

fn ops_in(obs: &PlanObservation, state: &str) -> Vec<OperationStatus> {
    obs.status
        .operations
        .iter()
        .filter(|op| op.state == state)
        .cloned()
        .collect()
}

/// Member `pod` (`<pool>-<ordinal>`) leaves its pool: its pod is gone.
pub(super) fn leave(obs: &mut PlanObservation, pod: &str) {
    let (pool, ordinal) = pod.rsplit_once('-').expect("a pod name");
    let ordinal: u32 = ordinal.parse().expect("an ordinal");
    let removed = obs
        .pools
        .iter_mut()
        .find(|p| p.name == pool)
        .and_then(|p| p.pods.remove(&ordinal));
    assert!(
        removed.is_some(),
        "{pod} is no member of the fixture's pools"
    );
}

/// The member's own sidecar reports `states` on its Lease.
pub(super) fn report(obs: &mut PlanObservation, pod: &str, states: serde_json::Value) {
    let (pool, ordinal) = pod.rsplit_once('-').expect("a pod name");
    let uid = obs
        .pools
        .iter()
        .find(|p| p.name == pool)
        .and_then(|p| p.pods.get(&ordinal.parse().expect("ordinal")))
        .expect("the pod exists")
        .uid
        .clone();
    obs.leases.insert(
        pod.to_owned(),
        MemberLease {
            lease: LeaseState {
                holder: Some(pod.to_owned()),
                pod_uid: Some(uid),
                ..LeaseState::default()
            },
            instance_states: Some(states.to_string()),
        },
    );
}

/// Every member reports each of its entries (not removing) at the entry's
/// deployment: `state`, or the state `overrides` gives the instance.
fn report_entries(obs: &mut PlanObservation, state: &str, overrides: &[(&str, &str)]) {
    let members: BTreeSet<String> = obs
        .status
        .instances
        .iter()
        .map(|e| e.member.clone())
        .collect();
    for member in members {
        let mut states = serde_json::Map::new();
        for entry in obs
            .status
            .instances
            .iter()
            .filter(|e| e.member == member && e.state != "removing")
        {
            let state = overrides
                .iter()
                .find(|(name, _)| *name == entry.name)
                .map_or(state, |(_, state)| state);
            states.insert(
                entry.name.clone(),
                serde_json::json!({"state": state, "deployment": entry.deployment, "code": "ExitCode1"}),
            );
        }
        report(obs, &member, serde_json::Value::Object(states));
    }
}

/// The placement record as (instance, member, deployment, state), in record order.
fn entries(obs: &PlanObservation) -> Vec<(String, String, u64, String)> {
    obs.status
        .instances
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                e.member.clone(),
                e.deployment,
                e.state.clone(),
            )
        })
        .collect()
}

fn approve(obs: &mut PlanObservation, value: &str) {
    obs.annotations
        .insert(ANNOTATION_APPROVE.to_owned(), value.to_owned());
}

use crate::api::deployment_plan::OperationStatus;

#[test]
fn manual_approval_holds_one_create_per_instance_on_capable_members_spread_over_domains() {
    let mut obs = observation(spec(3, "Manual", "nginx:1"));
    let decision = pass(&mut obs);
    let pending = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(pending.len(), 3, "{:?}", obs.status.operations);
    assert!(pending.iter().all(|op| op.type_ == "CREATE"));
    let targets: Vec<String> = pending
        .iter()
        .map(|op| op.to_member.clone().expect("a target"))
        .collect();
    assert!(
        targets.iter().all(|m| m.starts_with("gpu")),
        "only GPU members are capable: {targets:?}"
    );
    let domain_a = targets.iter().filter(|m| m.starts_with("gpu-")).count();
    let domain_b = targets.iter().filter(|m| m.starts_with("gpu2-")).count();
    assert!(domain_a >= 1 && domain_b >= 1, "{targets:?}");
    // Nothing is in force before approval.
    assert!(obs.status.instances.is_empty());
    assert_eq!(obs.status.pending_operations, 3);
    assert_eq!(obs.status.phase.as_deref(), Some("AwaitingApproval"));
    assert_eq!(obs.status.latest_deployment, 1);
    assert_eq!(obs.status.current_deployment, 0);
    assert_eq!(
        decision
            .events
            .iter()
            .filter(|e| e.reason == "OperationPending")
            .count(),
        3
    );
    // Events only on transitions: the same observation again says nothing.
    let again = pass(&mut obs);
    assert!(again.events.is_empty(), "{:?}", again.events);
    assert_eq!(ops_in(&obs, "PENDING_APPROVAL").len(), 3);
}

#[test]
fn an_approval_naming_one_operation_approves_exactly_that_one_and_moves_the_placement() {
    let mut obs = observation(spec(3, "Manual", "nginx:1"));
    pass(&mut obs);
    let chosen = ops_in(&obs, "PENDING_APPROVAL")[1].clone();
    approve(&mut obs, &chosen.approve_with);
    let decision = pass(&mut obs);
    let approved = ops_in(&obs, "APPROVED");
    assert_eq!(approved.len(), 1);
    assert_eq!(approved[0].id, chosen.id);
    assert_eq!(ops_in(&obs, "PENDING_APPROVAL").len(), 2);
    assert_eq!(obs.status.instances.len(), 1);
    assert_eq!(obs.status.instances[0].name, chosen.instance);
    assert_eq!(
        Some(&obs.status.instances[0].member),
        chosen.to_member.as_ref()
    );
    assert_eq!(obs.status.instances[0].state, "pending");
    assert!(obs.status.refused_annotations.is_empty());
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.reason == "OperationApproved")
    );
    // The annotation staying in place is not a refusal, nor a second approval.
    let again = pass(&mut obs);
    assert!(again.events.is_empty(), "{:?}", again.events);
    assert_eq!(ops_in(&obs, "APPROVED").len(), 1);
}

#[test]
fn a_forged_hash_an_unknown_id_or_garbage_is_refused_with_one_warning_per_value() {
    let mut obs = observation(spec(3, "Manual", "nginx:1"));
    pass(&mut obs);
    let real = ops_in(&obs, "PENDING_APPROVAL")[0].clone();
    let forged = format!("{}/sha256:{}", real.id, "0".repeat(64));
    for value in [
        forged,
        "create-web-9-r1/sha256:00".to_owned(),
        "yes".to_owned(),
    ] {
        approve(&mut obs, &value);
        let decision = pass(&mut obs);
        let warnings: Vec<_> = decision.events.iter().filter(|e| e.warning).collect();
        assert_eq!(warnings.len(), 1, "{value}: {:?}", decision.events);
        assert_eq!(warnings[0].reason, "ApprovalRefused");
        assert_eq!(
            obs.status.refused_annotations.get(ANNOTATION_APPROVE),
            Some(&value)
        );
        assert!(
            ops_in(&obs, "APPROVED").is_empty(),
            "{value} approved something"
        );
        // The same value again: no second Warning.
        assert!(pass(&mut obs).events.iter().all(|e| !e.warning));
    }
}

#[test]
fn automatic_approval_puts_every_instance_in_force_at_once() {
    let mut obs = observation(spec(3, "Automatic", "nginx:1"));
    pass(&mut obs);
    assert_eq!(ops_in(&obs, "APPROVED").len(), 3);
    assert_eq!(obs.status.instances.len(), 3);
    assert_eq!(obs.status.current_deployment, 1);
    assert_eq!(obs.status.phase.as_deref(), Some("Progressing"));
    assert_eq!(obs.status.ready.as_deref(), Some("0/3"));
}

#[test]
fn an_operation_succeeds_only_when_the_members_own_lease_reports_the_instance_installed() {
    let mut obs = observation(spec(1, "Automatic", "nginx:1"));
    pass(&mut obs);
    let entry = obs.status.instances[0].clone();
    // A Lease held by another pod proves nothing.
    let mut stranger = obs.clone();
    report(
        &mut stranger,
        &entry.member,
        serde_json::json!({"web-0": {"state": "installed", "deployment": 1}}),
    );
    stranger
        .leases
        .get_mut(&entry.member)
        .expect("lease")
        .lease
        .holder = Some("someone-else".to_owned());
    pass(&mut stranger);
    assert_eq!(ops_in(&stranger, "SUCCEEDED").len(), 0);
    // An installed report of another deployment proves nothing either.
    report(
        &mut obs,
        &entry.member,
        serde_json::json!({"web-0": {"state": "installed", "deployment": 7}}),
    );
    pass(&mut obs);
    assert_eq!(ops_in(&obs, "SUCCEEDED").len(), 0);
    report(
        &mut obs,
        &entry.member,
        serde_json::json!({"web-0": {"state": "installed", "deployment": 1}}),
    );
    let decision = pass(&mut obs);
    assert_eq!(ops_in(&obs, "SUCCEEDED").len(), 1);
    assert_eq!(obs.status.instances[0].state, "installed");
    assert_eq!(obs.status.ready.as_deref(), Some("1/1"));
    assert_eq!(obs.status.phase.as_deref(), Some("Ready"));
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.reason == "OperationSucceeded")
    );
}

#[test]
fn a_failed_instance_fails_its_operation_with_the_code_and_a_later_deployment_still_proceeds() {
    let mut obs = observation(spec(1, "Automatic", "nginx:1"));
    pass(&mut obs);
    let member = obs.status.instances[0].member.clone();
    report(
        &mut obs,
        &member,
        serde_json::json!({"web-0": {"state": "failed", "deployment": 1, "code": "ExitCode1", "message": "exited with status 1"}}),
    );
    let decision = pass(&mut obs);
    let failed = ops_in(&obs, "FAILED");
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].message.contains("ExitCode1"),
        "{}",
        failed[0].message
    );
    assert_eq!(failed[0].reason.as_deref(), Some("Reported"));
    assert_eq!(failed[0].error_code.as_deref(), Some("ExitCode1"));
    let error = obs.status.instances[0].error.clone().expect("an error");
    assert_eq!(error.code, "ExitCode1");
    assert_eq!(obs.status.phase.as_deref(), Some("Degraded"));
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.warning && e.reason == "OperationFailed")
    );
    // A new payload is deployment 2: an UPDATE of the failed instance, not blocked.
    obs.spec = spec(1, "Automatic", "nginx:2");
    pass(&mut obs);
    assert_eq!(obs.status.latest_deployment, 2);
    let update = ops_in(&obs, "APPROVED");
    assert_eq!(update.len(), 1);
    assert_eq!(update[0].type_, "UPDATE");
    assert_eq!(update[0].deployment, 2);
    assert_eq!(obs.status.instances[0].deployment, 2);
    assert_eq!(obs.status.instances[0].error, None);
}

#[test]
fn a_new_deployment_supersedes_waiting_operations_and_never_reuses_a_number() {
    let mut obs = observation(spec(2, "Manual", "nginx:1"));
    pass(&mut obs);
    let old = ops_in(&obs, "PENDING_APPROVAL")[0].clone();
    obs.spec = spec(2, "Manual", "nginx:2");
    pass(&mut obs);
    assert_eq!(obs.status.latest_deployment, 2);
    let superseded = ops_in(&obs, "FAILED");
    assert_eq!(superseded.len(), 2);
    assert!(superseded[0].message.contains("superseded by revision 2"));
    assert!(
        superseded
            .iter()
            .all(|op| op.reason.as_deref() == Some("Superseded")),
        "the cause is a field, not only text: {superseded:?}"
    );
    assert!(
        ops_in(&obs, "PENDING_APPROVAL")
            .iter()
            .all(|op| op.deployment == 2)
    );
    // Approving the superseded operation is refused; nothing is approved.
    approve(&mut obs, &old.approve_with);
    let decision = pass(&mut obs);
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.reason == "ApprovalRefused")
    );
    assert!(ops_in(&obs, "APPROVED").is_empty());
    // Changing back is a new number again, never 1.
    obs.spec = spec(2, "Manual", "nginx:1");
    pass(&mut obs);
    assert_eq!(obs.status.latest_deployment, 3);
}

/// All instances in force and installed, under `policy`.
fn settled(instances: u32, policy: &str) -> PlanObservation {
    let mut obs = observation(spec(instances, "Automatic", "nginx:1"));
    pass(&mut obs);
    for entry in obs.status.instances.clone() {
        let mut states = serde_json::Map::new();
        for other in obs
            .status
            .instances
            .iter()
            .filter(|e| e.member == entry.member)
        {
            states.insert(
                other.name.clone(),
                serde_json::json!({"state": "installed", "deployment": other.deployment}),
            );
        }
        report(&mut obs, &entry.member, serde_json::Value::Object(states));
    }
    pass(&mut obs);
    assert_eq!(obs.status.phase.as_deref(), Some("Ready"));
    obs.spec = spec(instances, policy, "nginx:1");
    obs
}

#[test]
fn scaling_down_deletes_one_instance_keeping_the_domains_balanced() {
    let mut obs = settled(3, "Manual");
    obs.spec.deployment.instances = 2;
    pass(&mut obs);
    let delete = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(delete.len(), 1, "{:?}", obs.status.operations);
    assert_eq!(delete[0].type_, "DELETE");
    // Scaling is no new deployment revision: nothing else is updated.
    assert_eq!(obs.status.latest_deployment, 1);
    // Of three instances over two domains, the victim is in the domain holding two.
    let victim = delete[0].from_member.clone().expect("from");
    let domain_of = |member: &str| {
        obs.status
            .instances
            .iter()
            .find(|e| e.member == member)
            .map(|e| e.update_domain.clone())
    };
    let victim_domain = domain_of(&victim).expect("domain");
    let in_domain = obs
        .status
        .instances
        .iter()
        .filter(|e| e.update_domain == victim_domain)
        .count();
    assert_eq!(in_domain, 2);
    approve(&mut obs, &delete[0].approve_with);
    pass(&mut obs);
    let removing: Vec<_> = obs
        .status
        .instances
        .iter()
        .filter(|e| e.state == "removing")
        .collect();
    assert_eq!(removing.len(), 1);
    // The member no longer reports it: the DELETE succeeded and the entry left.
    report(&mut obs, &victim, serde_json::json!({}));
    pass(&mut obs);
    assert_eq!(
        ops_in(&obs, "SUCCEEDED")
            .iter()
            .filter(|op| op.type_ == "DELETE")
            .count(),
        1
    );
    assert_eq!(obs.status.instances.len(), 2);
    assert_eq!(obs.status.ready.as_deref(), Some("2/2"));
}

/// The member of the first instance becomes ineligible (its pool loses the
/// GPU); returns that member.
fn lose_the_gpu_under_the_first_instance(obs: &mut PlanObservation) -> String {
    let old = obs.status.instances[0].member.clone();
    let pool = old.rsplit_once('-').expect("pod").0.to_owned();
    for p in obs.pools.iter_mut().filter(|p| p.name == pool) {
        p.annotations
            .insert("shoal.dev/capabilities".to_owned(), "CPU=xeon".to_owned());
    }
    old
}

#[test]
fn a_relocation_keeps_the_old_placement_until_the_new_one_reports_installed() {
    let mut obs = settled(1, "Automatic");
    let old = lose_the_gpu_under_the_first_instance(&mut obs);
    pass(&mut obs);
    let relocate = ops_in(&obs, "APPROVED");
    assert_eq!(relocate.len(), 1);
    assert_eq!(relocate[0].type_, "RELOCATE");
    let new = relocate[0].to_member.clone().expect("to");
    let states: Vec<(String, String)> = obs
        .status
        .instances
        .iter()
        .map(|e| (e.member.clone(), e.state.clone()))
        .collect();
    assert_eq!(
        states,
        [
            (old.clone(), "installed".to_owned()),
            (new.clone(), "pending".to_owned())
        ]
    );
    // Still two entries on the next pass: the old one runs until the new one is installed.
    pass(&mut obs);
    assert_eq!(obs.status.instances.len(), 2);
    report(
        &mut obs,
        &new,
        serde_json::json!({"web-0": {"state": "installed", "deployment": 1}}),
    );
    pass(&mut obs);
    assert_eq!(
        ops_in(&obs, "SUCCEEDED")
            .iter()
            .filter(|op| op.type_ == "RELOCATE")
            .count(),
        1
    );
    let old_entry = obs
        .status
        .instances
        .iter()
        .find(|e| e.member == old)
        .expect("the old entry stays while removing");
    assert_eq!(old_entry.state, "removing");
    report(
        &mut obs,
        &old,
        serde_json::json!({"web-0": {"state": "removed", "deployment": 1}}),
    );
    pass(&mut obs);
    assert_eq!(obs.status.instances.len(), 1);
    assert_eq!(obs.status.instances[0].member, new);
}

#[test]
fn an_instance_that_fits_nowhere_is_listed_with_the_requirement_that_rules_members_out() {
    // Four GPU members, five instances, one per member.
    let mut obs = observation(spec(5, "Automatic", "nginx:1"));
    pass(&mut obs);
    assert_eq!(obs.status.unplaced.len(), 1, "{:?}", obs.status.unplaced);
    assert_eq!(obs.status.unplaced[0].name, "web-4");
    assert!(
        obs.status.unplaced[0].reason.contains("per-member limit"),
        "{}",
        obs.status.unplaced[0].reason
    );
    obs.spec.max_instances_per_member = 3;
    obs.spec.applications[0]
        .resources
        .insert("cores".to_owned(), 4);
    pass(&mut obs);
    let reasons: Vec<&str> = obs
        .status
        .unplaced
        .iter()
        .map(|u| u.reason.as_str())
        .collect();
    assert!(
        reasons.iter().all(|r| r.contains("short of cores")),
        "{reasons:?}"
    );
}

/// A change that makes an observation invalid.
type Spoil = Box<dyn Fn(&mut PlanObservation)>;

#[test]
fn bad_input_keeps_the_last_good_status_and_says_which_object_and_input() {
    let mut good = observation(spec(2, "Automatic", "nginx:1"));
    pass(&mut good);
    let last_good = good.status.clone();
    let cases: Vec<(Spoil, &str)> = vec![
        (
            Box::new(|obs| {
                obs.pools[0]
                    .annotations
                    .insert("shoal.dev/capacity".into(), "cores=lots".into())
                    .map_or((), |_| ())
            }),
            "StatefulSet gpu",
        ),
        (Box::new(|obs| obs.swarm = None), "Swarm \"demo\""),
        (
            Box::new(|obs| {
                let copy = obs.spec.applications[0].clone();
                obs.spec.applications.push(copy);
            }),
            "\"nginx\" twice",
        ),
        (
            Box::new(|obs| obs.spec.deployment.payloads[0].application = "redis".into()),
            "application \"redis\"",
        ),
    ];
    for (spoil, named) in cases {
        let mut obs = good.clone();
        spoil(&mut obs);
        let decision = pass(&mut obs);
        assert_eq!(obs.status.instances, last_good.instances, "{named}");
        assert_eq!(obs.status.operations, last_good.operations, "{named}");
        assert_eq!(obs.status.phase.as_deref(), Some("Degraded"));
        let message = obs.status.last_error.clone().expect("an error");
        assert!(message.contains(named), "{message} should name {named}");
        assert!(message.contains("DeploymentPlan web"), "{message}");
        // One InvalidInput Warning (a missing Swarm also fails the
        // deployment's status document, with its own Event).
        let invalid = decision
            .events
            .iter()
            .filter(|e| e.reason == "InvalidInput");
        assert_eq!(invalid.count(), 1, "{named}");
        // Once: the same problem again is no new Warning.
        assert!(pass(&mut obs).events.is_empty());
    }
}

#[test]
fn the_operation_history_keeps_only_the_newest_finished_operations() {
    let mut obs = settled(3, "Automatic");
    obs.spec.operation_history_limit = 2;
    pass(&mut obs);
    assert_eq!(obs.status.operations.len(), 2);
    assert!(
        obs.status
            .operations
            .iter()
            .all(|op| op.state == "SUCCEEDED")
    );
}

#[test]
fn budget_approves_creates_at_once_and_holds_updates_beyond_the_disruption_budget() {
    // Each domain holds one instance; a Rolling rollout releases one domain's
    // UPDATE at a time, so a budget of 0 is what holds it.
    let mut obs = settled(2, "Budget");
    obs.spec.approval.max_disrupted_members = Some(0);
    obs.spec.deployment.instances = 3;
    obs.spec.deployment.payloads[0]
        .coordinates
        .insert("image".into(), "nginx:2".into());
    pass(&mut obs);
    let approved = ops_in(&obs, "APPROVED");
    let waiting = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(approved.len(), 1, "{:?}", obs.status.operations);
    assert_eq!(approved[0].type_, "CREATE");
    assert_eq!(waiting.len(), 1);
    assert!(waiting.iter().all(|op| op.type_ == "UPDATE"));
}

/// Plan `other` of the same Swarm, with `applications`, its instance `other-<n>`
/// installed on the n-th of `members`.
fn other_plan(applications: serde_json::Value, members: &[&str]) -> OtherPlan {
    let mut spec = spec(0, "Automatic", "x");
    spec.applications = serde_json::from_value(applications).expect("applications");
    spec.deployment.payloads.clear();
    let instances = members
        .iter()
        .enumerate()
        .map(|(n, member)| crate::api::deployment_plan::InstanceStatus {
            name: format!("other-{n}"),
            member: (*member).to_owned(),
            update_domain: "a".to_owned(),
            deployment: 1,
            state: "installed".to_owned(),
            error: None,
        })
        .collect();
    OtherPlan {
        name: "other".to_owned(),
        spec,
        status: crate::api::deployment_plan::DeploymentPlanStatus {
            instances,
            ..Default::default()
        },
    }
}

#[test]
fn other_plans_of_the_swarm_reserve_capacity_on_their_members() {
    let mut obs = observation(spec(4, "Automatic", "nginx:1"));
    // Another plan of the same Swarm takes 3 of the 4 cores on gpu-0 and gpu-1.
    obs.other_plans.push(other_plan(
        serde_json::json!([{"name": "big", "resources": {"cores": 3}}]),
        &["gpu-0", "gpu-1"],
    ));
    pass(&mut obs);
    assert!(
        obs.status
            .instances
            .iter()
            .all(|e| !e.member.starts_with("gpu-"))
    );
    assert_eq!(obs.status.unplaced.len(), 2);
    assert!(obs.status.unplaced[0].reason.contains("short of cores"));
}

#[test]
fn a_port_another_plan_holds_on_a_member_keeps_this_plans_instances_off_it_naming_the_holder() {
    let mut obs = observation(spec(4, "Automatic", "nginx:1"));
    obs.spec.applications[0].ports =
        serde_json::from_value(serde_json::json!([{"port": 80}])).expect("ports");
    // Another plan of the same Swarm listens on TCP/80 on gpu-0 and gpu2-1 (no cores).
    obs.other_plans.push(other_plan(
        serde_json::json!([{"name": "lb", "ports": [{"protocol": "TCP", "port": 80}]}]),
        &["gpu-0", "gpu2-1"],
    ));
    pass(&mut obs);
    let members: BTreeSet<&str> = obs
        .status
        .instances
        .iter()
        .map(|e| e.member.as_str())
        .collect();
    assert_eq!(members, BTreeSet::from(["gpu-1", "gpu2-0"]));
    assert_eq!(obs.status.unplaced.len(), 2);
    let reason = &obs.status.unplaced[0].reason;
    assert!(
        reason.contains("TCP/80 on gpu-0 held by instance other-0")
            && reason.contains("TCP/80 on gpu2-1 held by instance other-1"),
        "{reason}"
    );
    // The record of the revision keeps the ports members receive.
    let record = obs.status.deployment(1).expect("the record");
    assert_eq!(record.ports.len(), 1);
    assert_eq!(record.ports[0].application, "nginx");
}

#[test]
fn one_port_listed_by_two_applications_of_a_plan_is_bad_input_naming_both() {
    let mut obs = observation(spec(1, "Automatic", "nginx:1"));
    let port: Vec<crate::api::deployment_plan::Port> =
        serde_json::from_value(serde_json::json!([{"protocol": "UDP", "port": 53}]))
            .expect("ports");
    obs.spec.applications[0].ports = port.clone();
    obs.spec.applications[1].ports = port;
    let decision = pass(&mut obs);
    assert_eq!(
        obs.status.last_error.as_deref(),
        Some(
            "DeploymentPlan web: port UDP/53 is listed by application \"nginx\" and again by application \"exporter\"; an instance can listen on a port once"
        )
    );
    assert_eq!(decision.events[0].reason, "InvalidInput");
}

#[test]
fn operation_ids_are_never_given_twice_even_after_the_history_forgot_them() {
    let mut obs = observation(spec(1, "Manual", "nginx:1"));
    obs.spec.operation_history_limit = 1;
    obs.pools = pools(1, 0);
    obs.pools.truncate(1);
    pass(&mut obs);
    let create = ops_in(&obs, "PENDING_APPROVAL")[0].clone();
    approve(&mut obs, &create.approve_with);
    pass(&mut obs);
    let member = obs.status.instances[0].member.clone();
    report(
        &mut obs,
        &member,
        serde_json::json!({"web-0": {"state": "installed", "deployment": 1}}),
    );
    pass(&mut obs);
    // Scale to 0 and approve the DELETE alone, as `approve-op` writes it.
    obs.spec.deployment.instances = 0;
    pass(&mut obs);
    let delete = ops_in(&obs, "PENDING_APPROVAL")[0].clone();
    approve(&mut obs, &delete.approve_with);
    pass(&mut obs);
    report(&mut obs, &member, serde_json::json!({}));
    pass(&mut obs);
    assert!(
        obs.status.operations.iter().all(|op| op.id != create.id),
        "the CREATE left the history: {:?}",
        obs.status.operations
    );
    // Scale back to 1: the same instance, member and revision. The new CREATE
    // must wait for a new review, not ride on the old approval.
    obs.spec.deployment.instances = 1;
    pass(&mut obs);
    let new_create = obs
        .status
        .operations
        .iter()
        .find(|op| op.type_ == "CREATE")
        .expect("a new CREATE")
        .clone();
    assert_ne!(new_create.id, create.id, "an id was given twice");
    assert_ne!(new_create.approve_with, create.approve_with);
    assert_eq!(new_create.state, "PENDING_APPROVAL", "{new_create:?}");
    // The old approval, written again (a script, a copy), approves nothing and
    // records no approver: it is used up.
    approve(&mut obs, &create.approve_with);
    let decision = pass(&mut obs);
    let waiting = ops_in(&obs, "PENDING_APPROVAL");
    assert_eq!(waiting.len(), 1, "{:?}", obs.status.operations);
    assert!(waiting[0].approval.is_none(), "{:?}", waiting[0]);
    assert!(
        obs.status.instances.is_empty(),
        "{:?}",
        obs.status.instances
    );
    assert!(decision.events.iter().all(|event| !event.warning));
}

#[test]
fn two_pools_scoring_one_capability_differently_degrade_the_plan_naming_both() {
    let mut obs = observation(spec(1, "Automatic", "nginx:1"));
    obs.pools[1]
        .annotations
        .insert("shoal.dev/capabilities".to_owned(), "GPU=v100:5".to_owned());
    let decision = pass(&mut obs);
    let message = obs.status.last_error.clone().expect("an error");
    assert_eq!(obs.status.phase.as_deref(), Some("Degraded"));
    assert!(message.contains("DeploymentPlan web"), "{message}");
    assert!(
        message.contains("gpu-0") && message.contains("gpu2-0"),
        "{message}"
    );
    assert!(obs.status.instances.is_empty());
    assert_eq!(decision.events.len(), 1);
}

/// The member of each entry in `status.instances`, in order.
fn instance_members(obs: &PlanObservation) -> Vec<&str> {
    obs.status
        .instances
        .iter()
        .map(|e| e.member.as_str())
        .collect()
}

#[test]
fn a_relocation_whose_new_copy_fails_leaves_the_instance_running_where_it_was() {
    let mut obs = settled(1, "Manual");
    let old = lose_the_gpu_under_the_first_instance(&mut obs);
    pass(&mut obs);
    let relocate = ops_in(&obs, "PENDING_APPROVAL")[0].clone();
    approve(&mut obs, &relocate.approve_with);
    pass(&mut obs);
    let new = relocate.to_member.clone().expect("to");
    report(
        &mut obs,
        &new,
        serde_json::json!({"web-0": {"state": "failed", "deployment": 1, "code": "ImagePull", "message": "no such image"}}),
    );
    pass(&mut obs);
    let failed = obs
        .status
        .operations
        .iter()
        .find(|op| op.id == relocate.id)
        .expect("the relocation");
    assert_eq!(failed.state, "FAILED");
    assert!(failed.message.contains("ImagePull"), "{}", failed.message);
    assert_eq!(
        instance_members(&obs),
        [old.as_str()],
        "{:?}",
        obs.status.instances
    );
    assert_eq!(obs.status.instances[0].state, "installed");
}

#[test]
fn a_relocation_whose_new_copy_reported_failed_is_not_retried_until_the_deployment_changes() {
    let mut obs = settled(1, "Automatic");
    let old = lose_the_gpu_under_the_first_instance(&mut obs);
    pass(&mut obs);
    let relocate = ops_in(&obs, "APPROVED")[0].clone();
    let new = relocate.to_member.clone().expect("to");
    let failed_report = serde_json::json!({"web-0": {"state": "failed", "deployment": 1, "code": "ImagePull", "message": "no such image"}});
    report(&mut obs, &new, failed_report.clone());
    pass(&mut obs);
    // The same failed report on later passes, then the sidecar's clean-up of
    // the dropped copy (reported removed, then no longer reported): none of
    // it is a reason to try the same relocation again.
    let relocations = |obs: &PlanObservation| {
        obs.status
            .operations
            .iter()
            .filter(|op| op.type_ == "RELOCATE")
            .map(|op| (op.id.clone(), op.state.clone()))
            .collect::<Vec<_>>()
    };
    for reported in [
        failed_report,
        serde_json::json!({"web-0": {"state": "removed", "deployment": 1}}),
        serde_json::json!({}),
    ] {
        report(&mut obs, &new, reported);
        let decision = pass(&mut obs);
        assert_eq!(
            relocations(&obs),
            [(relocate.id.clone(), "FAILED".to_owned())],
            "retried: {:?}",
            obs.status.operations
        );
        assert!(decision.events.is_empty(), "{:?}", decision.events);
        assert_eq!(
            instance_members(&obs),
            [old.as_str()],
            "{:?}",
            obs.status.instances
        );
    }
    // A new deployment revision may try again.
    obs.spec = spec(1, "Automatic", "nginx:2");
    pass(&mut obs);
    let again = ops_in(&obs, "APPROVED");
    assert_eq!(again.len(), 1, "{:?}", obs.status.operations);
    assert_eq!(again[0].type_, "RELOCATE");
    assert_eq!(again[0].deployment, 2);
}

#[test]
fn a_target_member_that_leaves_fails_its_operation_and_the_instance_is_placed_again() {
    let mut obs = observation(spec(1, "Automatic", "nginx:1"));
    pass(&mut obs);
    let first = ops_in(&obs, "APPROVED")[0].clone();
    let member = first.to_member.clone().expect("to");
    leave(&mut obs, &member);
    pass(&mut obs);
    let failed = obs
        .status
        .operations
        .iter()
        .find(|op| op.id == first.id)
        .expect("the first CREATE");
    assert_eq!(failed.state, "FAILED");
    assert_eq!(failed.reason.as_deref(), Some("TargetLeft"));
    assert!(failed.message.contains("left"), "{}", failed.message);
    let again = ops_in(&obs, "APPROVED");
    assert_eq!(again.len(), 1, "{:?}", obs.status.operations);
    assert_ne!(again[0].to_member.as_deref(), Some(member.as_str()));
    assert_ne!(again[0].id, first.id, "an id is never given twice");
    assert_eq!(obs.status.instances.len(), 1);
    assert_eq!(
        obs.status.instances[0].member,
        again[0].to_member.clone().expect("to")
    );
}

#[test]
fn a_deployment_approval_approves_exactly_the_reviewed_set_of_operations() {
    let mut obs = observation(spec(2, "Manual", "nginx:1"));
    pass(&mut obs);
    let reviewed = obs
        .status
        .approve_deployment_with
        .clone()
        .expect("a pending deployment");
    assert!(reviewed.starts_with("deployment-1/sha256:"), "{reviewed}");
    // The set changes before the approval arrives: a third instance is asked for.
    obs.spec.deployment.instances = 3;
    pass(&mut obs);
    approve(&mut obs, &reviewed);
    let refused = pass(&mut obs);
    assert!(refused.events.iter().any(|e| e.reason == "ApprovalRefused"));
    assert!(ops_in(&obs, "APPROVED").is_empty());
    // The current set, approved as a whole.
    let current = obs.status.approve_deployment_with.clone().expect("pending");
    assert_ne!(current, reviewed);
    approve(&mut obs, &current);
    pass(&mut obs);
    assert_eq!(ops_in(&obs, "APPROVED").len(), 3);
    assert_eq!(obs.status.approve_deployment_with, None);
    assert_eq!(obs.status.instances.len(), 3);
    // The annotation standing changes nothing and is not refused.
    assert!(pass(&mut obs).events.iter().all(|e| !e.warning));
}

#[test]
fn a_new_revision_is_recorded_with_its_payloads_change_cause_and_time() {
    let mut obs = observation(spec(2, "Manual", "nginx:1"));
    obs.annotations.insert(
        "kubernetes.io/change-cause".to_owned(),
        "first rollout".to_owned(),
    );
    pass(&mut obs);
    let first = obs
        .status
        .deployment(1)
        .expect("revision 1 is recorded")
        .clone();
    assert_eq!(
        first.hash,
        obs.status.deployment_hash.clone().expect("a hash")
    );
    assert_eq!(first.payloads, obs.spec.deployment.payloads);
    assert_eq!(first.instances, 2);
    assert_eq!(first.change_cause.as_deref(), Some("first rollout"));
    assert_eq!(first.created, "2023-11-14T22:13:20Z");

    // A later pass at a later time with a new payload records revision 2 as it is
    // then, and leaves revision 1's record exactly as it was.
    obs.now = Timestamp::from_second(1_700_000_600).expect("a time");
    obs.spec = spec(3, "Manual", "nginx:2");
    obs.annotations.insert(
        "kubernetes.io/change-cause".to_owned(),
        "nginx 2".to_owned(),
    );
    pass(&mut obs);
    assert_eq!(obs.status.deployment(1), Some(&first));
    let second = obs.status.deployment(2).expect("revision 2 is recorded");
    assert_eq!(
        second.payloads[0]
            .coordinates
            .get("image")
            .map(String::as_str),
        Some("nginx:2")
    );
    assert_eq!(second.instances, 3);
    assert_eq!(second.change_cause.as_deref(), Some("nginx 2"));
    assert_eq!(second.created, "2023-11-14T22:23:20Z");
    let revisions: Vec<u64> = obs.status.deployments.iter().map(|r| r.revision).collect();
    assert_eq!(revisions, vec![1, 2]);

    // Scaling is not a new revision: the record of revision 2 keeps its count.
    obs.spec.deployment.instances = 4;
    pass(&mut obs);
    assert_eq!(obs.status.deployments.len(), 2);
    assert_eq!(obs.status.deployment(2).map(|r| r.instances), Some(3));
}

#[test]
fn deployment_records_in_use_are_never_pruned_and_the_limit_holds_for_the_rest() {
    // Three instances installed at revision 1, under Manual approval.
    let mut obs = settled(3, "Manual");
    obs.spec.deployment_history_limit = 2;
    // Four payload changes nobody approves: revisions 2..=5.
    for image in ["nginx:2", "nginx:3", "nginx:4", "nginx:5"] {
        let mut next = spec(3, "Manual", image);
        next.deployment_history_limit = 2;
        obs.spec = next;
        pass(&mut obs);
    }
    assert_eq!(obs.status.latest_deployment, 5);
    let revisions: Vec<u64> = obs.status.deployments.iter().map(|r| r.revision).collect();
    // 1: the running instances use it; 5: its UPDATEs wait; 4: the newest beside it.
    assert_eq!(revisions, vec![1, 4, 5]);
    assert!(
        obs.status
            .instances
            .iter()
            .all(|entry| entry.deployment == 1)
    );

    // Once every instance runs revision 5, revision 1 is no longer in use and goes.
    // The rollout goes one update domain at a time: approve each domain in turn.
    for _domain in 0..2 {
        let whole_domain = obs
            .status
            .approve_deployment_with
            .clone()
            .expect("the domain's approval");
        approve(&mut obs, &whole_domain);
        pass(&mut obs);
        report_entries(&mut obs, "installed", &[]);
        pass(&mut obs);
    }
    assert!(
        obs.status
            .instances
            .iter()
            .all(|entry| entry.deployment == 5)
    );
    let revisions: Vec<u64> = obs.status.deployments.iter().map(|r| r.revision).collect();
    assert_eq!(revisions, vec![4, 5]);
}

#[test]
fn only_pending_installing_installed_and_failed_entries_are_delivered() {
    let entry = |state: &str| crate::api::deployment_plan::InstanceStatus {
        name: "web-0".to_owned(),
        member: "gpu-0".to_owned(),
        update_domain: "a".to_owned(),
        deployment: 1,
        state: state.to_owned(),
        error: None,
    };
    for state in ["pending", "installing", "installed", "failed"] {
        assert!(entry(state).delivered(), "{state}");
    }
    for state in [
        "removing",
        "removed",
        "stopped",
        "restarting",
        "",
        "Installed",
    ] {
        assert!(!entry(state).delivered(), "{state}");
    }
}

#[test]
fn a_waiting_operation_no_longer_needed_fails_with_the_reason_withdrawn() {
    let mut obs = observation(spec(3, "Manual", "nginx:1"));
    pass(&mut obs);
    obs.spec.deployment.instances = 2;
    pass(&mut obs);
    let failed = ops_in(&obs, "FAILED");
    assert_eq!(failed.len(), 1, "{:?}", obs.status.operations);
    assert_eq!(failed[0].reason.as_deref(), Some("Withdrawn"));
    assert_eq!(failed[0].error_code, None);
}

#[test]
fn a_superseded_operation_written_before_the_reason_field_still_reads_as_superseded() {
    let mut obs = observation(spec(2, "Manual", "nginx:1"));
    pass(&mut obs);
    let old = ops_in(&obs, "PENDING_APPROVAL")[0].clone();
    obs.spec = spec(2, "Manual", "nginx:2");
    pass(&mut obs);
    for op in obs.status.operations.iter_mut() {
        op.reason = None;
    }
    approve(&mut obs, &old.approve_with);
    pass(&mut obs);
    assert!(
        obs.status
            .refused_annotations
            .contains_key(ANNOTATION_APPROVE),
        "approving it is refused as superseded"
    );
    assert!(
        obs.status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("superseded")),
        "{:?}",
        obs.status.last_error
    );
}

mod blue_green;
mod canary;
mod cordon;
mod drift;
mod gate;
mod ordered;
mod reports;
mod size;
mod swarm_waiting;
mod user_operations;
mod windows;

#[test]
fn each_approved_operation_and_its_deployment_record_name_who_approved_it_and_keep_it() {
    let mut obs = observation(spec(3, "Manual", "nginx:1"));
    pass(&mut obs);
    let pending = ops_in(&obs, "PENDING_APPROVAL");
    approve(&mut obs, &pending[0].approve_with);
    obs.annotations
        .insert(ANNOTATION_APPROVED_BY.to_owned(), "alice".to_owned());
    obs.approved_by_policy = true;
    pass(&mut obs);
    // Bob approves the second operation: the annotation (and its name) is now his.
    approve(
        &mut obs,
        &format!("{},{}", pending[0].approve_with, pending[1].approve_with),
    );
    obs.annotations
        .insert(ANNOTATION_APPROVED_BY.to_owned(), "bob".to_owned());
    obs.approved_by_policy = false;
    pass(&mut obs);
    let approver_of = |obs: &PlanObservation, id: &str| {
        obs.status
            .operations
            .iter()
            .find(|op| op.id == id)
            .and_then(|op| op.approval.clone())
            .map(|approval| approval.display())
    };
    assert_eq!(approver_of(&obs, &pending[0].id).as_deref(), Some("alice"));
    assert_eq!(
        approver_of(&obs, &pending[1].id).as_deref(),
        Some("bob (unverified)")
    );
    assert_eq!(approver_of(&obs, &pending[2].id), None);
    let record = obs.status.deployment(1).expect("deployment 1 is recorded");
    let approvers: Vec<String> = record.approvals.iter().map(|a| a.display()).collect();
    assert_eq!(approvers, ["alice", "bob (unverified)"]);
}

#[test]
fn operations_the_policy_approves_name_the_controller_and_the_policy() {
    let mut obs = observation(spec(2, "Automatic", "nginx:1"));
    pass(&mut obs);
    assert!(!obs.status.operations.is_empty());
    for op in &obs.status.operations {
        let approval = op.approval.as_ref().expect("an approver");
        assert_eq!(approval.by, "shoal-controller (Automatic)", "{}", op.id);
    }
    let record = obs.status.deployment(1).expect("deployment 1 is recorded");
    assert_eq!(record.approvals.len(), 1, "{:?}", record.approvals);
}
