//! The Swarm's `spec.cordon` as the plan sees it: a cordoned member keeps its
//! instances and gets no new one; a draining member's instances are relocated through
//! the operations' approval, and only they.

use super::*;

fn holders(obs: &PlanObservation) -> Vec<(String, String)> {
    obs.status
        .instances
        .iter()
        .map(|entry| (entry.name.clone(), entry.member.clone()))
        .collect()
}

#[test]
fn a_cordoned_member_keeps_its_instance_and_a_new_one_lands_elsewhere() {
    let mut obs = settled(2, "Automatic");
    let before = holders(&obs);
    let cordoned = before[0].1.clone();
    if let Some(swarm) = obs.swarm.as_mut() {
        swarm.cordoned.insert(cordoned.clone());
    }
    pass(&mut obs);
    assert_eq!(holders(&obs), before, "a cordon moves nothing");
    obs.spec = spec(4, "Automatic", "nginx:1");
    pass(&mut obs);
    let on_cordoned = instance_members(&obs)
        .iter()
        .filter(|member| **member == cordoned)
        .count();
    assert_eq!(on_cordoned, 1, "{:?}", holders(&obs));
}

#[test]
fn a_draining_member_has_its_instances_relocated_under_manual_approval_and_no_other() {
    let mut obs = settled(2, "Manual");
    let before = holders(&obs);
    let drained = before[0].1.clone();
    if let Some(swarm) = obs.swarm.as_mut() {
        swarm.cordoned.insert(drained.clone());
        swarm.draining.insert(drained.clone());
    }
    pass(&mut obs);
    let waiting = ops_in(&obs, "PENDING_APPROVAL");
    let relocations: Vec<&OperationStatus> =
        waiting.iter().filter(|op| op.type_ == "RELOCATE").collect();
    assert_eq!(relocations.len(), 1, "{waiting:?}");
    assert_eq!(relocations[0].instance, before[0].0);
    assert_ne!(relocations[0].to_member.as_deref(), Some(drained.as_str()));
    assert_eq!(
        waiting.len(),
        1,
        "only the drained member's instance: {waiting:?}"
    );
    // Nothing moves before approval.
    assert_eq!(holders(&obs), before);
}
