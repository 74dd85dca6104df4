//! Ordered (Rolling) rollouts: one update domain at a time, in the order the
//! user sets; a failed domain halts; pause holds.

use super::*;

/// Four instances over domains `a` and `b` settled at deployment 1, then a
/// new payload rolled out in `order`.
fn ordered_rollout(policy: &str, order: &[&str]) -> PlanObservation {
    let mut obs = settled(4, policy);
    let mut next = spec(4, policy, "nginx:2");
    next.deployment.rollout.domain_order = order.iter().map(|d| (*d).to_owned()).collect();
    obs.spec = next;
    obs
}

/// The update domains of the open UPDATEs.
fn domains_updating(obs: &PlanObservation) -> BTreeSet<String> {
    obs.status
        .operations
        .iter()
        .filter(|op| op.type_ == "UPDATE" && op.state != "SUCCEEDED" && op.state != "FAILED")
        .filter_map(|op| {
            obs.status
                .instances
                .iter()
                .find(|e| Some(&e.member) == op.to_member.as_ref())
                .map(|e| e.update_domain.clone())
        })
        .collect()
}

fn domain_states(obs: &PlanObservation) -> Vec<(String, String)> {
    obs.status
        .rollout
        .as_ref()
        .map(|rollout| {
            rollout
                .domains
                .iter()
                .map(|d| (d.name.clone(), d.state.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn pair(name: &str, state: &str) -> (String, String) {
    (name.to_owned(), state.to_owned())
}

fn on_revision(obs: &PlanObservation, domain: &str, revision: u64) -> bool {
    obs.status
        .instances
        .iter()
        .filter(|e| e.update_domain == domain)
        .all(|e| e.deployment == revision)
}

#[test]
fn a_rolling_deployment_updates_one_domain_at_a_time_in_the_users_order() {
    let mut obs = ordered_rollout("Automatic", &["b", "a"]);
    let first = pass(&mut obs);
    assert_eq!(domains_updating(&obs), BTreeSet::from(["b".to_owned()]));
    assert_eq!(
        domain_states(&obs),
        vec![pair("b", "Updating"), pair("a", "Waiting")]
    );
    assert!(on_revision(&obs, "a", 1), "domain a waits");
    assert!(first.events.iter().any(|e| e.reason == "DomainUpdating"));
    // Not installed yet: domain a still waits.
    pass(&mut obs);
    assert!(on_revision(&obs, "a", 1));
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    assert_eq!(
        domain_states(&obs),
        vec![pair("b", "Done"), pair("a", "Updating")]
    );
    assert!(on_revision(&obs, "b", 2));
    assert!(on_revision(&obs, "a", 2), "domain a's turn came");
    report_entries(&mut obs, "installed", &[]);
    pass(&mut obs);
    let rollout = obs.status.rollout.clone().expect("a rollout status");
    assert_eq!(rollout.phase, "Complete");
    assert_eq!(obs.status.phase.as_deref(), Some("Ready"));
}

#[test]
fn without_an_order_domains_roll_out_in_byte_order() {
    let mut obs = ordered_rollout("Automatic", &[]);
    pass(&mut obs);
    assert_eq!(domains_updating(&obs), BTreeSet::from(["a".to_owned()]));
    assert!(on_revision(&obs, "b", 1));
}

#[test]
fn a_failed_instance_halts_the_rollout_in_its_domain_with_one_warning_naming_it() {
    let mut obs = ordered_rollout("Automatic", &["a", "b"]);
    pass(&mut obs);
    let failing = obs
        .status
        .instances
        .iter()
        .find(|e| e.update_domain == "a")
        .expect("an instance in domain a")
        .name
        .clone();
    report_entries(&mut obs, "installed", &[(failing.as_str(), "failed")]);
    let halted = pass(&mut obs);
    let warnings: Vec<_> = halted
        .events
        .iter()
        .filter(|e| e.warning && e.reason == "DomainFailed")
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", halted.events);
    assert!(warnings[0].note.contains("\"a\""), "{}", warnings[0].note);
    assert!(warnings[0].note.contains(&failing), "{}", warnings[0].note);
    let condition = obs
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "RolloutHalted")
        .expect("RolloutHalted");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "DomainFailed")
    );
    assert_eq!(obs.status.rollout.clone().expect("rollout").phase, "Halted");
    // Domain b never starts while a is failed; no second Warning.
    let again = pass(&mut obs);
    assert!(!again.events.iter().any(|e| e.reason == "DomainFailed"));
    assert!(on_revision(&obs, "b", 1));
    // A newer deployment supersedes: it starts again from domain a.
    obs.spec.deployment.payloads[0]
        .coordinates
        .insert("image".to_owned(), "nginx:3".to_owned());
    pass(&mut obs);
    assert_eq!(obs.status.latest_deployment, 3);
    assert_eq!(
        domain_states(&obs),
        vec![pair("a", "Updating"), pair("b", "Waiting")]
    );
    assert!(on_revision(&obs, "b", 1));
}

#[test]
fn a_paused_plan_releases_no_update_until_resumed() {
    let mut obs = ordered_rollout("Automatic", &["a", "b"]);
    obs.spec.paused = true;
    let paused = pass(&mut obs);
    assert!(
        domains_updating(&obs).is_empty(),
        "{:?}",
        obs.status.operations
    );
    assert!(on_revision(&obs, "a", 1) && on_revision(&obs, "b", 1));
    assert_eq!(obs.status.rollout.clone().expect("rollout").phase, "Paused");
    assert_eq!(
        domain_states(&obs),
        vec![pair("a", "Paused"), pair("b", "Waiting")]
    );
    assert!(paused.events.iter().any(|e| e.reason == "RolloutPaused"));
    obs.spec.paused = false;
    pass(&mut obs);
    assert!(on_revision(&obs, "a", 2));
    assert!(on_revision(&obs, "b", 1));
}

#[test]
fn a_domain_order_naming_a_domain_twice_degrades_the_plan_naming_the_field() {
    let mut obs = ordered_rollout("Automatic", &["a", "a"]);
    pass(&mut obs);
    let error = obs.status.last_error.clone().expect("an error");
    assert!(error.contains("domainOrder"), "{error}");
    assert!(error.contains("\"a\""), "{error}");
    assert!(on_revision(&obs, "a", 1) && on_revision(&obs, "b", 1));
}
