//! A plan placed on members its Swarm has not put in force yet cannot finish:
//! instances reach a member only in the member's slice. The plan says so,
//! naming the members and what to approve on the Swarm.

use super::*;

fn condition<'a>(obs: &'a PlanObservation, type_: &str) -> &'a crate::api::swarm::Condition {
    obs.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("condition {type_} in {:?}", obs.status.conditions))
}

/// The fixture Swarm with only the `cpu` pool in force and revision 7 waiting.
fn swarm_waiting_on_gpu_members() -> SwarmView {
    let mut swarm = swarm_holding_every_member();
    swarm
        .members_in_force
        .retain(|member| member.starts_with("cpu-"));
    swarm.pending = Some(PendingSwarmRevision {
        revision: 7,
        approve_with: "7/abc123".to_owned(),
    });
    swarm
}

#[test]
fn approved_operations_on_members_the_swarm_has_not_put_in_force_name_the_revision_to_approve() {
    let mut obs = observation(spec(2, "Automatic", "nginx:1"));
    obs.swarm = Some(swarm_waiting_on_gpu_members());
    pass(&mut obs);
    assert_eq!(obs.status.phase.as_deref(), Some("WaitingForSwarm"));
    let waiting = condition(&obs, "WaitingForSwarm");
    assert_eq!(waiting.status, "True");
    assert_eq!(waiting.reason, "MembersNotInForce");
    for member in obs.status.instances.iter().map(|entry| &entry.member) {
        assert!(
            waiting.message.contains(member.as_str()),
            "{}",
            waiting.message
        );
    }
    assert!(
        waiting
            .message
            .contains("Swarm demo revision 7 waits for approval")
            && waiting.message.contains("kubectl shoal approve demo")
            && waiting.message.contains("shoal.dev/approve=7/abc123"),
        "{}",
        waiting.message
    );
}

#[test]
fn once_the_swarm_holds_the_members_the_plan_no_longer_waits_for_it() {
    let mut obs = observation(spec(2, "Automatic", "nginx:1"));
    obs.swarm = Some(swarm_waiting_on_gpu_members());
    pass(&mut obs);
    obs.swarm = Some(swarm_holding_every_member());
    pass(&mut obs);
    assert_eq!(obs.status.phase.as_deref(), Some("Progressing"));
    let waiting = condition(&obs, "WaitingForSwarm");
    assert_eq!(
        (waiting.status.as_str(), waiting.reason.as_str()),
        ("False", "MembersInForce")
    );
}

#[test]
fn a_swarm_with_no_revision_waiting_is_named_with_where_to_look() {
    let mut obs = observation(spec(1, "Automatic", "nginx:1"));
    let mut swarm = swarm_waiting_on_gpu_members();
    swarm.pending = None;
    obs.swarm = Some(swarm);
    pass(&mut obs);
    let waiting = condition(&obs, "WaitingForSwarm");
    assert_eq!(waiting.status, "True");
    assert!(
        waiting
            .message
            .contains("no revision of Swarm demo waits for approval")
            && waiting.message.contains("kubectl describe swarm demo"),
        "{}",
        waiting.message
    );
}

#[test]
fn operations_waiting_for_the_plans_own_approval_come_first_in_the_phase() {
    let mut obs = observation(spec(2, "Manual", "nginx:1"));
    obs.swarm = Some(swarm_waiting_on_gpu_members());
    pass(&mut obs);
    // The user approves the plan's operations first; the condition already warns.
    assert_eq!(obs.status.phase.as_deref(), Some("AwaitingApproval"));
    assert_eq!(condition(&obs, "WaitingForSwarm").status, "True");
}

#[test]
fn a_long_list_of_members_is_cut_to_ten_names_and_a_count() {
    let names: Vec<String> = (0..25).map(|i| format!("gpu-{i}")).collect();
    let listed = super::super::status::first_few(&names);
    assert!(listed.starts_with("gpu-0, gpu-1"), "{listed}");
    assert!(listed.ends_with("gpu-9 and 15 more"), "{listed}");
    assert_eq!(super::super::status::first_few(&names[..2]), "gpu-0, gpu-1");
}
